package loopback

import (
	"net"
	"strconv"
	"testing"
)

func TestFreeAddrBelowEphemeralAndDistinct(t *testing.T) {
	seen := map[string]bool{}
	for range 50 {
		addr, err := FreeAddr()
		if err != nil {
			t.Fatal(err)
		}
		_, p, _ := net.SplitHostPort(addr)
		port, _ := strconv.Atoi(p)
		if port < lo || port >= ephemeralStart() {
			t.Fatalf("port %d outside [%d, %d)", port, lo, ephemeralStart())
		}
		if seen[addr] {
			t.Fatalf("%s returned twice", addr)
		}
		seen[addr] = true
		l, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatalf("returned %s but cannot listen on it: %v", addr, err)
		}
		_ = l.Close()
	}
}
