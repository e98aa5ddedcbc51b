// Command kvctl is kvd's operator CLI: it sets node and bucket throttle
// properties, creates, deletes and lists buckets, prints STAT groups and
// hashes passwords for the config file. It talks the memcached binary
// protocol through package kvd/client; this package is only the command
// table, flag parsing and rendering. Run "kvctl help" for the usage.
package main

import "os"

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}
