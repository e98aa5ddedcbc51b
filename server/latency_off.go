//go:build kvd_nolatency

package server

// recordLatency is false: this build measures kvd without its latency
// recorder (see latency_on.go). Its latency histograms stay empty.
const recordLatency = false
