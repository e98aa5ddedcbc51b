// Package loopback hands tests loopback addresses for servers they start as
// separate processes.
//
// A port the kernel picks for "127.0.0.1:0" comes from the ephemeral range,
// the same range it draws outgoing connections' source ports from. Between
// closing such a listener and the child process binding the port, any client
// connection in the test run may take it, and the child then fails with
// "address already in use" (or, worse, the test talks to the wrong process).
// FreeAddr therefore picks ports below the ephemeral range, where the kernel
// never hands out source ports, and never the same one twice in a process.
package loopback

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
)

// Ports below lo are often taken by well-known services; hi is the default
// start of Linux's ip_local_port_range.
const (
	lo = 20000
	hi = 32768
)

var (
	mu   sync.Mutex
	next int
)

// FreeAddr returns "127.0.0.1:PORT" for a port that was free a moment ago,
// lies below the kernel's ephemeral range and was not returned before in
// this process.
func FreeAddr() (string, error) {
	mu.Lock()
	defer mu.Unlock()
	top := ephemeralStart()
	if next == 0 {
		next = lo + rand.IntN(top-lo)
	}
	for range top - lo {
		port := next
		next++
		if next >= top {
			next = lo
		}
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		l, err := net.Listen("tcp", addr)
		if err != nil {
			continue
		}
		_ = l.Close()
		return addr, nil
	}
	return "", fmt.Errorf("loopback: no free port in [%d, %d)", lo, top)
}

// ephemeralStart reads the low end of the kernel's ephemeral port range.
func ephemeralStart() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return hi
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return hi
	}
	n, err := strconv.Atoi(f[0])
	if err != nil || n <= lo+1000 {
		return hi
	}
	return n
}
