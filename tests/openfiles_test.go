package tests

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestOpenFileLimit: a flood of connections past what kvd's open-file
// limit allows is refused one by one, and kvd goes on serving. Before
// package fdlimit, accept failed with EMFILE and gnet stopped its whole
// engine: every connection closed, the port refused from then on, and the
// process stayed up serving nothing.
//
// With ulimit -n 256 the limit's shares are 128 for kvd itself, 32 for
// Pebble's tables, a listen backlog of 16, and 80 connections: the default
// max_connections (10,000) is held to 80, with a warning at start, and
// there is no system band (no descriptors to spare past max_connections).
func TestOpenFileLimit(t *testing.T) {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil || rl.Max < 256 {
		msg := fmt.Sprintf("cannot give kvd an open-file limit of 256: this process's hard limit is %d (%v)", rl.Max, err)
		if os.Getenv("KVD_REQUIRE_TOOLS") == "1" {
			t.Fatal(msg) // CI checks everything it can; this machine cannot run this test
		}
		t.Skip(msg)
	}
	k := newKVD(t, testConfig)
	k.OpenFiles = 256
	k.start()
	if !strings.Contains(k.log.String(), `"max_connections lowered to what the open-file limit allows" max_connections=10000 in_force=80 system_connections=1000 system_in_force=0 open_file_limit=256`) {
		t.Errorf("no warning at start that max_connections is held to 80 and the band to 0:\n%s", k.tail())
	}
	probe := dialText(t, k.Addr)
	probe.send("stats\r\n")
	maxConns := ""
	for {
		l, err := probe.line(5 * time.Second)
		if err != nil || l == "END" {
			break
		}
		if v, ok := strings.CutPrefix(l, "STAT max_connections "); ok {
			maxConns = v
		}
	}
	if maxConns != "80" {
		t.Errorf("STAT max_connections %q, want 80", maxConns)
	}

	// 400 clients at once, each holding its connection open: 79 more fit.
	b := connectionBurst(k.Addr, 400)
	served, refused, failed := b.served, b.refused, b.failed
	t.Logf("400 clients: %d served, %d refused with memcached's ERROR, %d failed to connect or read %v", len(served), refused, failed, b.why)
	if failed > 0 {
		t.Logf("kvd's log:\n%s", k.tail())
	}
	if len(served) != 79 {
		t.Errorf("%d clients served beside the probe, want 79 (max_connections in force 80)", len(served))
	}
	if refused < 200 {
		t.Errorf("%d clients refused with \"ERROR Too many open connections\", want most of the 321 over the limit", refused)
	}
	probe.call("the probe, open through the flood", "version\r\n", "VERSION 1.6.18 kvd-0.1.0")
	for _, nc := range served {
		_ = nc.Close()
	}
	waitFor(t, 10*time.Second, "a new connection served after the flood", func() bool {
		nc, err := net.DialTimeout("tcp", k.Addr, time.Second)
		if err != nil {
			return false
		}
		defer nc.Close()
		_ = nc.SetDeadline(time.Now().Add(2 * time.Second))
		_, _ = nc.Write([]byte("version\r\n"))
		l, _ := bufio.NewReader(nc).ReadString('\n')
		return strings.HasPrefix(l, "VERSION ")
	})
	if log := k.log.String(); strings.Contains(log, "too many open files") || strings.Contains(log, "exiting") {
		t.Errorf("kvd ran out of descriptors:\n%s", k.tail())
	}
}

// TestMetricsConnectionCap: the metrics port holds at most 32 connections
// (they count in kvd's own share of its descriptors); a 33rd waits in the
// backlog, unanswered, until one of them closes.
func TestMetricsConnectionCap(t *testing.T) {
	metrics := freeAddr(t)
	startKVD(t, testConfig, "--metrics-listen", metrics)
	var held []net.Conn
	for range 32 {
		nc, err := net.DialTimeout("tcp", metrics, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		held = append(held, nc)
	}
	if _, err := scrapeMetric(metrics, "kvd_connections"); err == nil {
		t.Fatal("a 33rd metrics connection answered while 32 are open")
	}
	_ = held[0].Close()
	waitFor(t, 10*time.Second, "a scrape once one of the 32 closed", func() bool {
		_, err := scrapeMetric(metrics, "kvd_connections")
		return err == nil
	})
}

// burst is what a burst of clients saw (connectionBurst).
type burst struct {
	served          []net.Conn     // answered VERSION; still open, for the caller to close
	refused, failed int            // memcached's ERROR line; anything else
	why             map[string]int // the failures, by what the client saw
}

// connectionBurst opens n connections to addr at once; each sends
// "version" and reads one line within 10 s.
func connectionBurst(addr string, n int) *burst {
	b := &burst{why: map[string]int{}}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			nc, err := net.DialTimeout("tcp", addr, 10*time.Second)
			if err != nil {
				mu.Lock()
				b.failed++
				b.why["dial: "+err.Error()]++
				mu.Unlock()
				return
			}
			_ = nc.SetDeadline(time.Now().Add(10 * time.Second))
			_, werr := nc.Write([]byte("version\r\n"))
			l, rerr := bufio.NewReader(nc).ReadString('\n')
			mu.Lock()
			defer mu.Unlock()
			switch {
			case strings.HasPrefix(l, "VERSION "):
				b.served = append(b.served, nc)
				return
			case l == "ERROR Too many open connections\r\n":
				b.refused++
			default:
				b.failed++
				b.why[fmt.Sprintf("read %q: write %v, read %v", l, werr, rerr)]++
			}
			_ = nc.Close()
		})
	}
	wg.Wait()
	return b
}
