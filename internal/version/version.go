// Package version is what kvd says it is.
package version

// Kvd is kvd's own version, as STAT reports it.
const Kvd = "kvd-0.1.0"

// Reply is what VERSION answers: the memcached release whose protocol kvd
// speaks (Debian's 1.6.18, which the differential tests compare it with),
// then kvd's own version. Clients parse a leading "major.minor.micro" with a
// major above 0 (libmemcached's memcached_version, and through it memcstat
// and memcping, fail on anything else), and libmemcached reads at most 32
// bytes of it.
const Reply = "1.6.18 " + Kvd
