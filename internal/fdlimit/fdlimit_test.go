package fdlimit

import (
	"net"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestOf(t *testing.T) {
	for _, c := range []struct {
		limit, somaxconn int
		want             Plan
		ok               bool
	}{
		// This machine's and CI's limit: Pebble's and memcached's defaults,
		// and room for 18,848 connections (max_connections is 10,000).
		{20000, 4096, Plan{Limit: 20000, Store: 1000, Backlog: 1024, Conns: 17848}, true},
		{1 << 20, 4096, Plan{Limit: 1 << 20, Store: 1000, Backlog: 1024, Conns: 1<<20 - 128 - 2024}, true},
		{1 << 40, 4096, Plan{Limit: ceiling, Store: 1000, Backlog: 1024, Conns: ceiling - 128 - 2024}, true},
		{1024, 4096, Plan{Limit: 1024, Store: 224, Backlog: 112, Conns: 560}, true},
		{1024, 64, Plan{Limit: 1024, Store: 224, Backlog: 64, Conns: 608}, true},
		{256, 4096, Plan{Limit: 256, Store: 32, Backlog: 16, Conns: 80}, true},
		{168, 4096, Plan{Limit: 168, Store: 16, Backlog: 8, Conns: 16}, true},
		{167, 4096, Plan{Limit: 167, Store: 16, Backlog: 8, Conns: 15}, false},
		{64, 4096, Plan{Limit: 64, Store: 16, Backlog: 8, Conns: -88}, false},
	} {
		p := Of(c.limit, c.somaxconn)
		if p != c.want {
			t.Errorf("Of(%d, %d) = %+v, want %+v", c.limit, c.somaxconn, p, c.want)
		}
		if p.Store+p.Backlog+p.Conns+own != p.Limit {
			t.Errorf("Of(%d, %d) = %+v: the shares do not add up to the limit", c.limit, c.somaxconn, p)
		}
		if err := p.Err(); (err == nil) != c.ok {
			t.Errorf("Of(%d, %d).Err() = %v, want ok %v", c.limit, c.somaxconn, err, c.ok)
		} else if err != nil && !strings.Contains(err.Error(), "needs at least 168") {
			t.Errorf("Of(%d, %d).Err() = %q, want it to name 168, the lowest limit that serves", c.limit, c.somaxconn, err)
		}
	}
}

func TestCurrent(t *testing.T) {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		t.Skip(err)
	}
	if p := Current(); p.Limit != int(min(rl.Cur, ceiling)) {
		t.Errorf("Current().Limit = %d, want the soft limit %d", p.Limit, rl.Cur)
	}
}

// TestSetBacklog: a listener's backlog set to 2 holds at most 3 connections
// nobody accepted (Linux admits backlog+1); more handshakes do not finish.
func TestSetBacklog(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	dup := func() (int, error) {
		f, err := ln.(*net.TCPListener).File()
		if err != nil {
			return 0, err
		}
		defer f.Close()
		return syscall.Dup(int(f.Fd()))
	}
	if err := SetBacklog(dup, 2); err != nil {
		t.Fatal(err)
	}
	done := 0
	for range 8 {
		c, err := net.DialTimeout("tcp", ln.Addr().String(), 300*time.Millisecond)
		if err != nil {
			continue
		}
		defer c.Close()
		done++
	}
	if done > 3 {
		t.Errorf("%d connections finished their handshake with a backlog of 2; want at most 3", done)
	}
	if done == 0 {
		t.Error("no connection finished its handshake")
	}
}
