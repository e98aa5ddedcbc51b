package ingress

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"kvd/probe"
)

func TestFiguresNamesAndOrder(t *testing.T) {
	c, ev := newTest(t, 1, 2, Options{NodeTickets: 7})
	tk := mustAcquire(t, c, Read, nil, at(0), Admitted)
	mustAcquire(t, c, Read, &recWaiter{name: "a", ev: ev}, at(0), Queued)
	c.Release(tk, at(time.Millisecond))
	c.StartExempt(Write, nil, at(0))
	var names []string
	got := map[string]int64{}
	c.Stats().Figures(func(name string, v int64) {
		names = append(names, name)
		got[name] = v
	})
	pool := []string{"out", "available", "total", "queue_length", "added_to_queue",
		"removed_from_queue", "started", "finished", "total_time_processing_us",
		"total_time_queued_us", "canceled", "rejected", "expired", "exempt_started",
		"exempt_finished", "stale_releases"}
	var want []string
	for _, prefix := range []string{"read_", "write_", "ingress_"} {
		for _, f := range pool {
			want = append(want, prefix+f)
		}
	}
	want = append(want, "probe_times_probed_stable", "probe_times_probed_up", "probe_times_probed_down",
		"probe_times_increased", "probe_times_decreased", "probe_total_amount_increased",
		"probe_total_amount_decreased", "probe_read_total", "probe_write_total",
		"memory_inflight_bytes", "memory_limit_bytes", "memory_peak_bytes", "memory_waiting",
		"memory_waited", "memory_rejected")
	if strings.Join(names, ",") != strings.Join(want, ",") {
		t.Fatalf("names\n got %v\nwant %v", names, want)
	}
	for name, v := range map[string]int64{
		"read_out": 1, "read_total": 1, "read_available": 0, "read_started": 2, "read_finished": 1,
		"read_added_to_queue": 1, "read_removed_from_queue": 1, "read_total_time_processing_us": 1000,
		"write_total": 2, "write_available": 2, "write_exempt_started": 1, "write_exempt_finished": 0,
		"ingress_total": 7, "ingress_out": 1, "ingress_available": 6, "ingress_started": 2,
		"ingress_exempt_started": 1, "probe_read_total": 4, "probe_write_total": 4,
	} {
		if got[name] != v {
			t.Errorf("%s = %d, want %d", name, got[name], v)
		}
	}
}

func TestFiguresDoNotAllocate(t *testing.T) {
	c, _ := newTest(t, 2, 2, Options{})
	s := c.Stats()
	var sum int64
	fn := func(_ string, v int64) { sum += v }
	if n := testing.AllocsPerRun(100, func() { s.Figures(fn) }); n != 0 {
		t.Fatalf("Figures: %v allocations", n)
	}
	if n := testing.AllocsPerRun(100, func() { _ = c.Stats() }); n != 0 {
		t.Fatalf("Stats: %v allocations", n)
	}
}

func TestAcquireReleaseDoNotAllocate(t *testing.T) {
	c, _ := newTest(t, 4, 4, Options{})
	now := at(0)
	n := testing.AllocsPerRun(1000, func() {
		tk, d, _ := c.Acquire(Write, nil, nil, 0, now)
		if d != Admitted {
			t.Fatal(d)
		}
		c.Release(tk, now)
	})
	if n != 0 {
		t.Fatalf("Acquire+Release (admitted): %v allocations", n)
	}
	e := testing.AllocsPerRun(1000, func() { c.Release(c.StartExempt(Read, nil, now), now) })
	if e != 0 {
		t.Fatalf("StartExempt+Release: %v allocations", e)
	}
	// Rejections use precomputed reasons.
	held := mustAcquire(t, c, Read, nil, now, Admitted)
	c.Resize(1, 4)
	r := testing.AllocsPerRun(1000, func() { c.Acquire(Read, nil, nil, 0, now) })
	if r != 0 {
		t.Fatalf("Acquire (rejected): %v allocations", r)
	}
	c.Release(held, now)
}

// handWaiter is a Waiter that hands its ticket straight back to the Controller, for
// the queued-path allocation test and benchmark.
type handWaiter struct {
	c   *Controller
	now time.Time
	got int
}

func (w *handWaiter) Granted(t Ticket) { w.got++; w.c.Release(t, w.now) }
func (w *handWaiter) Expired(_ string) {}

func TestQueuedPathReusesNodes(t *testing.T) {
	c, _ := newTest(t, 1, 1, Options{})
	now := at(0)
	w := &handWaiter{c: c, now: now}
	cycle := func() {
		tk, _, _ := c.Acquire(Write, nil, nil, 0, now)
		if _, d, _ := c.Acquire(Write, nil, w, 0, now); d != Queued {
			t.Fatal(d)
		}
		c.Release(tk, now) // grants w, which releases at once
	}
	cycle() // warm the node pool and the map
	n := testing.AllocsPerRun(1000, cycle)
	t.Logf("queued Acquire+grant+Release: %v allocations per command", n)
	if n > 0.1 { // a pooled node may be lost to a GC now and then
		t.Fatalf("queued path: %v allocations per command", n)
	}
	if w.got != 1001+1 {
		t.Fatalf("granted %d times", w.got)
	}
	checkInvariants(t, c.Stats())
}

func BenchmarkAcquireRelease(b *testing.B) {
	c, err := New(Options{DisableProbe: true})
	if err != nil {
		b.Fatal(err)
	}
	now := at(0)
	b.ReportAllocs()
	for b.Loop() {
		tk, _, _ := c.Acquire(Read, nil, nil, 0, now)
		c.Release(tk, now)
	}
}

func BenchmarkAcquireReleaseParallel(b *testing.B) {
	// Pools large enough that every command is admitted: this measures the lock.
	c, err := New(Options{DisableProbe: true})
	if err != nil {
		b.Fatal(err)
	}
	c.Resize(4*runtime.GOMAXPROCS(0), 4*runtime.GOMAXPROCS(0))
	now := at(0)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			tk, d, _ := c.Acquire(Write, nil, nil, 0, now)
			if d != Admitted {
				b.Error(d)
				return
			}
			c.Release(tk, now)
		}
	})
}

func BenchmarkQueuedGrant(b *testing.B) {
	c, err := New(Options{DisableProbe: true})
	if err != nil {
		b.Fatal(err)
	}
	c.Resize(1, 1)
	now := at(0)
	w := &handWaiter{c: c, now: now}
	b.ReportAllocs()
	for b.Loop() {
		tk, _, _ := c.Acquire(Write, nil, nil, 0, now)
		c.Acquire(Write, nil, w, 0, now)
		c.Release(tk, now)
	}
}

func BenchmarkStatsFigures(b *testing.B) {
	c, err := New(Options{Probe: probe.Options{GOMAXPROCS: 4}})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		c.Stats().Figures(func(_ string, v int64) { figureSink += v })
	}
}

var figureSink int64

// BenchmarkAcquireReleaseBucket is the uncontended path with every feature on but not
// binding: a bucket with limits, a memory budget, a write's bytes.
func BenchmarkAcquireReleaseBucket(b *testing.B) {
	c, err := New(Options{DisableProbe: true, MaxInflightBytes: 1 << 30})
	if err != nil {
		b.Fatal(err)
	}
	bk := c.AddBucket("b", BucketLimits{MaxConcurrent: 100, MaxQueued: 100, QueueTimeout: time.Second})
	now := at(0)
	b.ReportAllocs()
	for b.Loop() {
		tk, d, _ := c.Acquire(Write, bk, nil, 512, now)
		if d != Admitted {
			b.Fatal(d)
		}
		c.Release(tk, now)
	}
}

// BenchmarkChooseNext measures the choice of the next waiter, with buckets buckets
// waiting in the write pool: the scan a grant pays under the lock.
func BenchmarkChooseNext(b *testing.B) {
	for _, buckets := range []int{1, 8, 64, 512} {
		b.Run(fmt.Sprint(buckets), func(b *testing.B) {
			c, err := New(Options{DisableProbe: true})
			if err != nil {
				b.Fatal(err)
			}
			c.Resize(1, 1)
			now := at(0)
			c.Acquire(Write, nil, nil, 0, now)
			for range buckets {
				bk := c.AddBucket("b", BucketLimits{})
				c.Acquire(Write, bk, &handWaiter{c: c, now: now}, 0, now)
			}
			c.mu.Lock()
			defer c.mu.Unlock()
			c.pools[Write].size = 2 // room, so that the write pool is scanned
			b.ReportAllocs()
			for b.Loop() {
				if c.nextLocked() == nil {
					b.Fatal("no waiter")
				}
			}
		})
	}
}
