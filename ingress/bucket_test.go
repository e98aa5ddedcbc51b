package ingress

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func mustBucket(t *testing.T, c *Controller, name string, l BucketLimits) *Bucket {
	t.Helper()
	if err := l.Validate(); err != nil {
		t.Fatal(err)
	}
	return c.AddBucket(name, l)
}

// acq is Acquire for a bucket's command of bytes, failing unless the decision is want.
func acq(t *testing.T, c *Controller, p Pool, b *Bucket, w Waiter, bytes int64, now time.Time, want Decision) Ticket {
	t.Helper()
	tk, d, reason := c.Acquire(p, b, w, bytes, now)
	if d != want {
		t.Fatalf("Acquire(%v, %s, %d bytes) = %v %q, want %v", p, b.Name(), bytes, d, reason, want)
	}
	if (d == Admitted) != tk.Valid() || (d == Admitted && tk.Bucket() != b) {
		t.Fatalf("Acquire = %v with ticket %+v", d, tk)
	}
	return tk
}

// checkBucket fails unless b's figures add up.
func checkBucket(t *testing.T, b *Bucket) BucketStats {
	t.Helper()
	s := b.Stats()
	if s.NumQueued != s.Dequeued+s.QueueLength {
		t.Errorf("%s: queued %d != dequeued %d + queue length %d", b.Name(), s.NumQueued, s.Dequeued, s.QueueLength)
	}
	if s.Started != s.Finished+s.InFlight {
		t.Errorf("%s: started %d != finished %d + in flight %d", b.Name(), s.Started, s.Finished, s.InFlight)
	}
	return s
}

func TestBucketLimitsValidate(t *testing.T) {
	for _, tc := range []struct {
		l    BucketLimits
		want string
	}{
		{BucketLimits{MaxConcurrent: -1}, "MaxConcurrent -1 < 0"},
		{BucketLimits{MaxQueued: -2}, "MaxQueued -2 < 0"},
		{BucketLimits{QueueTimeout: -time.Millisecond}, "QueueTimeout -1ms < 0"},
	} {
		if err := tc.l.Validate(); !errors.Is(err, ErrInvalidOptions) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate(%+v) = %v, want %q", tc.l, err, tc.want)
		}
	}
	// AddBucket and SetBucketLimits take negative limits as none.
	c, _ := newTest(t, 4, 4, Options{})
	b := c.AddBucket("b", BucketLimits{MaxConcurrent: -1, MaxQueued: -1, QueueTimeout: -1})
	if s := b.Stats(); s.MaxConcurrent != 0 || s.MaxQueued != 0 || s.QueueTimeoutMS != DefaultQueueTimeout.Milliseconds() {
		t.Fatalf("stats %+v", s)
	}
	c.SetBucketLimits(b, BucketLimits{MaxConcurrent: -5}, at(0))
	acq(t, c, Read, b, nil, 0, at(0), Admitted)
	acq(t, c, Read, b, nil, 0, at(0), Admitted)
}

func TestBucketMaxConcurrent(t *testing.T) {
	c, ev := newTest(t, 8, 8, Options{})
	a := mustBucket(t, c, "a", BucketLimits{MaxConcurrent: 2})
	o := mustBucket(t, c, "other", BucketLimits{})
	// The cap spans both pools.
	r := acq(t, c, Read, a, nil, 0, at(0), Admitted)
	w := acq(t, c, Write, a, nil, 0, at(0), Admitted)
	q1, q2 := &recWaiter{name: "q1", ev: ev}, &recWaiter{name: "q2", ev: ev}
	acq(t, c, Write, a, q1, 0, at(1), Queued)
	acq(t, c, Read, a, q2, 0, at(2), Queued)
	// Another bucket is not held up by a's waiters: the pools have room.
	x := acq(t, c, Write, o, nil, 0, at(3), Admitted)
	if s := checkBucket(t, a); s.InFlight != 2 || s.QueueLength != 2 || s.NumQueued != 2 {
		t.Fatalf("a: %+v", s)
	}
	// A freed slot of a's goes to a's earliest waiter, whatever the pool.
	c.Release(r, at(4))
	if got := ev.take(); got != "q1:granted" {
		t.Fatalf("events %q", got)
	}
	c.Release(x, at(5)) // not a's: a stays at its cap
	if got := ev.take(); got != "" {
		t.Fatalf("events %q", got)
	}
	// Raising the cap grants at once; lowering it revokes nothing.
	c.SetBucketLimits(a, BucketLimits{MaxConcurrent: 3}, at(6))
	if got := ev.take(); got != "q2:granted" {
		t.Fatalf("events %q", got)
	}
	c.SetBucketLimits(a, BucketLimits{MaxConcurrent: 1}, at(7))
	acq(t, c, Read, a, nil, 0, at(8), Rejected) // no waiter, no room
	for _, tk := range []Ticket{w, q1.ticket, q2.ticket} {
		c.Release(tk, at(9))
	}
	s := checkBucket(t, a)
	if s.InFlight != 0 || s.PeakInFlight != 3 || s.Started != 4 || s.MaxConcurrent != 1 || s.QueueWaitTimeUS != 0 {
		t.Fatalf("a: %+v", s)
	}
	checkInvariants(t, c.Stats())
}

func TestBucketQueueLimits(t *testing.T) {
	c, ev := newTest(t, 1, 1, Options{QueueTimeout: 10 * time.Second})
	b1 := mustBucket(t, c, "b1", BucketLimits{MaxQueued: 2, QueueTimeout: 5 * time.Millisecond})
	b2 := mustBucket(t, c, "b2", BucketLimits{})
	acq(t, c, Write, b2, nil, 0, at(0), Admitted)
	acq(t, c, Write, b1, &recWaiter{name: "a", ev: ev}, 0, at(0), Queued)
	acq(t, c, Read, b1, nil, 0, at(0), Admitted) // the read pool is free
	acq(t, c, Read, b1, &recWaiter{name: "r", ev: ev}, 0, at(0), Queued)
	// max_queued counts both pools.
	if _, d, reason := c.Acquire(Write, b1, &recWaiter{name: "x", ev: ev}, 0, at(1)); d != Rejected ||
		reason != "queue full, limit=2, queued=2 in bucket b1" {
		t.Fatalf("Acquire = %v %q", d, reason)
	}
	acq(t, c, Write, b2, &recWaiter{name: "c", ev: ev}, 0, at(1), Queued) // b2 has no limit
	// Lowered below the queue, the reason says how many wait.
	c.SetBucketLimits(b1, BucketLimits{MaxQueued: 1, QueueTimeout: 5 * time.Millisecond}, at(1))
	if _, _, reason := c.Acquire(Write, b1, &recWaiter{}, 0, at(1)); reason != "queue full, limit=1, queued=2 in bucket b1" {
		t.Fatalf("reason %q", reason)
	}
	// b1's timeout overrides the node's; b2's waiter keeps the node's.
	c.Tick(at(5 * time.Millisecond))
	if got := ev.take(); got != "" {
		t.Fatalf("at 5 ms: %q", got)
	}
	c.Tick(at(6 * time.Millisecond))
	// The read queue is scanned first.
	if got := ev.take(); got != "r:expired:timed out after 5 ms in bucket b1 a:expired:timed out after 5 ms in bucket b1" {
		t.Fatalf("at 6 ms: %q", got)
	}
	c.Tick(at(11 * time.Second))
	if got := ev.take(); got != "c:expired:timed out after 10000 ms in bucket b2" {
		t.Fatalf("at 11 s: %q", got)
	}
	s1, s2 := checkBucket(t, b1), checkBucket(t, b2)
	if s1.NumTimedOut != 2 || s1.NumQueueFull != 2 || s1.Rejected != 2 || s1.QueueLength != 0 ||
		s1.QueueWaitTimeUS != 12_000 || s1.QueueTimeoutMS != 5 || s2.NumTimedOut != 1 || s2.QueueTimeoutMS != 10_000 {
		t.Fatalf("b1 %+v\nb2 %+v", s1, s2)
	}
	checkInvariants(t, c.Stats())
}

func TestNodeDepthKeepsItsReason(t *testing.T) {
	c, ev := newTest(t, 1, 1, Options{MaxQueueDepth: 2})
	a := mustBucket(t, c, "a", BucketLimits{MaxQueued: 10})
	b := mustBucket(t, c, "b", BucketLimits{})
	acq(t, c, Write, a, nil, 0, at(0), Admitted)
	acq(t, c, Write, a, &recWaiter{name: "1", ev: ev}, 0, at(0), Queued)
	acq(t, c, Write, b, &recWaiter{name: "2", ev: ev}, 0, at(0), Queued)
	// The node's depth counts every bucket's waiters of the pool.
	if _, d, reason := c.Acquire(Write, b, &recWaiter{}, 0, at(0)); d != Rejected || reason != "queue full, limit=2, queued=2 in the node's write queue, for bucket b" {
		t.Fatalf("Acquire = %v %q", d, reason)
	}
	if s := b.Stats(); s.NumQueueFull != 1 {
		t.Fatalf("b: %+v", s)
	}
	if s := c.Stats(); s.Write.QueueLength != 2 || s.Write.Rejected != 1 {
		t.Fatalf("write: %+v", s.Write)
	}
}

func TestRemoveBucket(t *testing.T) {
	c, ev := newTest(t, 1, 1, Options{})
	a := mustBucket(t, c, "a", BucketLimits{})
	b := mustBucket(t, c, "b", BucketLimits{})
	held := acq(t, c, Write, a, nil, 0, at(0), Admitted)
	acq(t, c, Write, a, &recWaiter{name: "a1", ev: ev}, 0, at(1), Queued)
	wb := &recWaiter{name: "b1", ev: ev}
	acq(t, c, Write, b, wb, 0, at(2), Queued)
	acq(t, c, Read, a, &recWaiter{name: "a2", ev: ev}, 0, at(3), Admitted) // read pool free: no waiter used
	c.RemoveBucket(a, at(4))
	if got := ev.take(); got != "a1:expired:bucket a was deleted" {
		t.Fatalf("events %q", got)
	}
	// a's waiter is answered; a's ticket still releases and goes to b.
	acq(t, c, Write, a, &recWaiter{name: "a3", ev: ev}, 0, at(5), Rejected)
	c.RemoveBucket(a, at(5)) // twice: nothing
	c.RemoveBucket(nil, at(5))
	c.Release(held, at(6))
	if got := ev.take(); got != "b1:granted" {
		t.Fatalf("events %q", got)
	}
	c.Release(wb.ticket, at(7))
	s := checkBucket(t, a)
	if s.QueueLength != 0 || s.Dequeued != 1 || s.InFlight != 1 || s.Rejected != 1 {
		t.Fatalf("a: %+v", s)
	}
	if _, _, reason := c.Acquire(Read, a, nil, 0, at(8)); reason != "bucket a was deleted" {
		t.Fatalf("reason %q", reason)
	}
	c.mu.Lock()
	n := len(c.buckets)
	c.mu.Unlock()
	if n != 1 {
		t.Fatalf("%d buckets registered", n)
	}
}

func TestRemoveBucketExpiresWaiters(t *testing.T) {
	c, ev := newTest(t, 1, 1, Options{})
	a := mustBucket(t, c, "a", BucketLimits{})
	acq(t, c, Write, nil, nil, 0, at(0), Admitted)
	acq(t, c, Write, a, &recWaiter{name: "x", ev: ev}, 0, at(0), Queued)
	acq(t, c, Write, a, &recWaiter{name: "y", ev: ev}, 0, at(0), Queued)
	c.RemoveBucket(a, at(time.Millisecond))
	if got := ev.take(); got != "x:expired:bucket a was deleted y:expired:bucket a was deleted" {
		t.Fatalf("events %q", got)
	}
	s := c.Stats()
	if s.Write.Expired != 2 || s.Write.QueueLength != 0 {
		t.Fatalf("write %+v", s.Write)
	}
	checkInvariants(t, s)
	checkBucket(t, a)
}

func TestExemptPerBucket(t *testing.T) {
	c, _ := newTest(t, 1, 1, Options{})
	b := mustBucket(t, c, "b", BucketLimits{MaxConcurrent: 1})
	acq(t, c, Read, b, nil, 0, at(0), Admitted)
	e := c.StartExempt(Read, b, at(0))
	if e.Bucket() != b || !e.Exempt() {
		t.Fatalf("exempt %+v", e)
	}
	c.Release(e, at(0))
	c.Release(c.StartExempt(Write, nil, at(0)), at(0))
	s := checkBucket(t, b)
	if s.ExemptStarted != 1 || s.ExemptFinished != 1 || s.InFlight != 1 {
		t.Fatalf("b %+v", s)
	}
}

func TestBucketFigures(t *testing.T) {
	c, _ := newTest(t, 1, 1, Options{})
	b := mustBucket(t, c, "b", BucketLimits{MaxConcurrent: 3, MaxQueued: 4, QueueTimeout: 250 * time.Millisecond})
	acq(t, c, Read, b, nil, 0, at(0), Admitted)
	var names []string
	got := map[string]int64{}
	b.Stats().Figures(func(name string, v int64) { names = append(names, name); got[name] = v })
	want := "in_flight queue_length num_queued num_queue_full num_timed_out queue_wait_time peak_in_flight " +
		"max_concurrent max_queued queue_timeout_ms num_dequeued num_ingress_rejected num_canceled tickets_started tickets_finished " +
		"exempt_started exempt_finished"
	if strings.Join(names, " ") != want {
		t.Fatalf("names %v", names)
	}
	for k, v := range map[string]int64{"in_flight": 1, "peak_in_flight": 1, "tickets_started": 1, "max_concurrent": 3,
		"max_queued": 4, "queue_timeout_ms": 250} {
		if got[k] != v {
			t.Errorf("%s = %d, want %d", k, got[k], v)
		}
	}
	s := b.Stats()
	fn := func(string, int64) {}
	if n := testing.AllocsPerRun(100, func() { s.Figures(fn) }); n != 0 {
		t.Fatalf("Figures: %v allocations", n)
	}
	if n := testing.AllocsPerRun(100, func() { _ = b.Stats() }); n != 0 {
		t.Fatalf("Stats: %v allocations", n)
	}
}

func TestBucketAcquireReleaseDoNotAllocate(t *testing.T) {
	c, _ := newTest(t, 4, 4, Options{MaxInflightBytes: 1 << 20})
	b := mustBucket(t, c, "b", BucketLimits{MaxConcurrent: 2, MaxQueued: 3})
	now := at(0)
	n := testing.AllocsPerRun(1000, func() {
		tk, d, _ := c.Acquire(Write, b, nil, 100, now)
		if d != Admitted {
			t.Fatal(d)
		}
		r, _, _ := c.Acquire(Read, b, nil, Estimate, now)
		c.Settle(r, 10, now)
		c.Release(r, now)
		c.Release(tk, now)
	})
	if n != 0 {
		t.Fatalf("Acquire+Settle+Release with a bucket and bytes: %v allocations", n)
	}
	checkInvariants(t, c.Stats())
	checkBucket(t, b)
}
