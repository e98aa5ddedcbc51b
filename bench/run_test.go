package bench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"testing"
	"time"
)

// checkNoLeak fails if goroutines started during the test are still running
// shortly after it.
func checkNoLeak(t *testing.T) {
	t.Helper()
	before := runtime.NumGoroutine()
	t.Cleanup(func() {
		deadline := time.Now().Add(2 * time.Second)
		for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if n := runtime.NumGoroutine(); n > before {
			buf := make([]byte, 1<<16)
			t.Errorf("%d goroutines leaked:\n%s", n-before, buf[:runtime.Stack(buf, true)])
		}
	})
}

func TestRunFakeServerUnitsThrottleAndAuth(t *testing.T) {
	f := &fakeServer{
		users:         map[string]string{"app": "secret"},
		buckets:       map[string]bool{"app": true, "default": true},
		throttleEvery: 10,
	}
	addr := startFakeServer(t, f)
	checkNoLeak(t) // after the server, so that its goroutines, stopped in Cleanup, do not count
	opts := Options{
		Addr: addr, Duration: time.Second, Warmup: 200 * time.Millisecond,
		NonBlocking: true, Preload: true,
		Buckets: []BucketSpec{
			{Name: "app", Conns: 2, User: "app", Password: "secret", Pipeline: 4, Keys: 500},
			{Name: "default", Conns: 1, GetWeight: 1, SetWeight: 1, Keys: 100},
		},
	}
	res, err := Run(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Log(f)
	if res.Preloaded != 600 {
		t.Errorf("preloaded %d keys, want 500 + 100", res.Preloaded)
	}
	for _, s := range res.Buckets {
		if s.Ops == 0 || s.Errors != 0 || s.Misses != 0 || s.Rejected != 0 {
			t.Errorf("%s: %+v, want ops, no errors and no misses after preload", s.Bucket, s.Counts)
		}
		if s.UnitSource() != "server" || s.ComputedUnitOps != 0 {
			t.Errorf("%s: unit source %q, want server", s.Bucket, s.UnitSource())
		}
		// Every op costs one unit and the fake server reports two.
		if s.RU+s.WU != 2*s.Ops {
			t.Errorf("%s: RU %d + WU %d, want 2 × %d ops (the server's figures)", s.Bucket, s.RU, s.WU, s.Ops)
		}
		if s.Throttled == 0 {
			t.Errorf("%s: no throttled replies counted in non-blocking mode", s.Bucket)
		}
		if s.Latency.Count() != uint64(s.Ops) {
			t.Errorf("%s: %d latencies for %d ops", s.Bucket, s.Latency.Count(), s.Ops)
		}
		if s.Features == "" {
			t.Errorf("%s: no features recorded", s.Bucket)
		}
	}
	if got := len(res.Series); got != 3 {
		t.Errorf("%d series points, want one second × (2 buckets + total)", got)
	}
	if res.Total.Ops != res.Buckets[0].Ops+res.Buckets[1].Ops || res.Total.Conns != 3 {
		t.Errorf("total %+v does not add up", res.Total.Counts)
	}
}

func TestRunRateLimit(t *testing.T) {
	addr := startFakeServer(t, &fakeServer{})
	opts := Options{Addr: addr, Duration: 2 * time.Second,
		Buckets: []BucketSpec{{Name: "r", Conns: 2, Rate: 200}}, Anonymous: true}
	res, err := Run(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	// The pacer never sends ahead of schedule: 2 s at 200/s is at most 400
	// ops plus one per connection. Falling short would mean a slow machine,
	// so only a gross shortfall fails.
	if ops := res.Total.Ops; ops > 402 || ops < 200 {
		t.Errorf("%d ops in 2 s at a 200 ops/s target", ops)
	}
	for _, p := range res.Series {
		if p.Ops > 210 { // a late sampler tick may shift a few ops between seconds
			t.Errorf("second %d of %s: %d ops, over the 200 ops/s target", p.Second, p.Bucket, p.Ops)
		}
	}
}

func TestRunHandshakeErrors(t *testing.T) {
	f := &fakeServer{users: map[string]string{"app": "secret"}, buckets: map[string]bool{"app": true}}
	addr := startFakeServer(t, f)
	for _, spec := range []BucketSpec{
		{Name: "app", User: "app", Password: "wrong"},
		{Name: "nope", User: "app", Password: "secret"},
	} {
		_, err := Run(context.Background(), Options{Addr: addr, Duration: time.Second, Buckets: []BucketSpec{spec}})
		if !errors.Is(err, ErrHandshake) {
			t.Errorf("%+v: Run error %v, want ErrHandshake", spec, err)
		}
	}
	if _, err := Run(context.Background(), Options{Addr: "127.0.0.1:1", Duration: time.Second}); err == nil {
		t.Error("Run against a closed port succeeded")
	}
}

func TestRunInterruptedReturnsFigures(t *testing.T) {
	addr := startFakeServer(t, &fakeServer{})
	checkNoLeak(t)
	ctx, cancel := context.WithTimeout(context.Background(), 700*time.Millisecond)
	defer cancel()
	start := time.Now()
	res, err := Run(ctx, Options{Addr: addr, Duration: time.Minute, Warmup: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("Run took %v after cancellation", took)
	}
	if !res.Interrupted || res.Total.Ops == 0 || res.Elapsed <= 0 || res.Elapsed > 2*time.Second {
		t.Errorf("interrupted run: interrupted %v, ops %d, elapsed %v", res.Interrupted, res.Total.Ops, res.Elapsed)
	}
}

func TestRunConnectionLost(t *testing.T) {
	addr := startFakeServer(t, &fakeServer{closeAfter: 100})
	res, err := Run(context.Background(), Options{Addr: addr, Duration: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	s := res.Buckets[0]
	if s.Errors != int64(s.Conns) || len(s.ErrorSamples) == 0 || res.Elapsed >= 5*time.Second {
		t.Errorf("errors %d for %d lost connections, samples %q, elapsed %v (want an early end)",
			s.Errors, s.Conns, s.ErrorSamples, res.Elapsed)
	}
}

// TestRunMemcached drives Debian's memcached with two anonymous tenants.
func TestRunMemcached(t *testing.T) {
	bin, err := exec.LookPath("memcached")
	if err != nil {
		if os.Getenv("KVD_REQUIRE_TOOLS") == "1" {
			t.Fatal("memcached is not on PATH and KVD_REQUIRE_TOOLS=1")
		}
		t.Skip("SKIPPED: memcached is not on PATH (apt-get install memcached); set KVD_REQUIRE_TOOLS=1 to fail instead")
	}
	addr := startMemcached(t, bin)
	checkNoLeak(t)
	res, err := Run(context.Background(), Options{
		Addr: addr, Duration: 2 * time.Second, Warmup: 200 * time.Millisecond, Anonymous: true,
		Buckets: []BucketSpec{{Name: "a", Conns: 2}, {Name: "b", Conns: 2, Pipeline: 8, GetWeight: 1, SetWeight: 1}},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range append(res.Buckets, res.Total) {
		if s.Ops == 0 || s.Errors+s.Rejected+s.Busy+s.Throttled != 0 {
			t.Errorf("%s: %+v %q, want ops and no errors", s.Bucket, s.Counts, s.ErrorSamples)
		}
		t.Logf("%s: %.0f ops/s, p50 %v, p99 %v", s.Bucket, s.OpsPerSec(), s.Latency.Quantile(0.5), s.Latency.Quantile(0.99))
	}
	if res.Total.UnitSource() != "computed" {
		t.Errorf("memcached reports no units; source %q, want computed", res.Total.UnitSource())
	}
}

// startMemcached runs memcached on a free loopback port until the test ends.
func startMemcached(t *testing.T, bin string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	args := []string{"-p", strconv.Itoa(port), "-U", "0", "-l", "127.0.0.1"}
	if os.Geteuid() == 0 {
		args = append(args, "-u", "nobody") // memcached refuses to run as root
	}
	cmd := exec.Command(bin, args...)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return addr
		}
		if time.Now().After(deadline) {
			t.Fatalf("memcached did not listen on %s", addr)
		}
	}
}
