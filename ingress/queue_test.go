package ingress

import (
	"fmt"
	"testing"
	"time"
)

func TestQueueFull(t *testing.T) {
	for _, tc := range []struct {
		name     string
		maxDepth int
		queued   int
		reason   string
	}{
		{"depth 1", 1, 1, "queue full, limit=1, queued=1 in the node's write queue"},
		{"depth 3", 3, 3, "queue full, limit=3, queued=3 in the node's write queue"},
		{"no queue", NoQueue, 0, "no ticket free in the write pool and no queue (max_queue_depth=0)"},
		{"default", 0, DefaultMaxQueueDepth, "queue full, limit=100000, queued=100000 in the node's write queue"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, ev := newTest(t, 1, 1, Options{MaxQueueDepth: tc.maxDepth})
			mustAcquire(t, c, Write, nil, at(0), Admitted)
			for i := range tc.queued {
				mustAcquire(t, c, Write, &recWaiter{name: fmt.Sprint(i), ev: ev}, at(0), Queued)
			}
			_, d, reason := c.Acquire(Write, nil, &recWaiter{name: "late", ev: ev}, 0, at(0))
			if d != Rejected || reason != tc.reason {
				t.Fatalf("Acquire = %v %q, want rejected %q", d, reason, tc.reason)
			}
			// The read pool's queue is separate.
			mustAcquire(t, c, Read, nil, at(0), Admitted)
			s := c.Stats()
			if s.Write.Rejected != 1 || s.Write.QueueLength != int64(tc.queued) || s.Read.Rejected != 0 {
				t.Fatalf("stats %+v", s.Write)
			}
			checkInvariants(t, s)
		})
	}
}

func TestRejectReasons(t *testing.T) {
	c, ev := newTest(t, 1, 1, Options{MaxQueueDepth: 5})
	mustAcquire(t, c, Read, nil, at(0), Admitted)
	w := &recWaiter{name: "w", ev: ev}
	mustAcquire(t, c, Read, w, at(0), Queued)
	for _, tc := range []struct {
		pool   Pool
		w      Waiter
		reason string
	}{
		{Read, nil, "no ticket free in the read pool"},
		{Read, w, "waiter already queued in the read pool"},
		{Pool(7), w, "no such pool"},
	} {
		if _, d, reason := c.Acquire(tc.pool, nil, tc.w, 0, at(0)); d != Rejected || reason != tc.reason {
			t.Errorf("Acquire(%v, %v) = %v %q, want rejected %q", tc.pool, tc.w, d, reason, tc.reason)
		}
	}
	// Lowering the depth below the queue keeps the waiters and says how many there are.
	for i := range 3 {
		mustAcquire(t, c, Read, &recWaiter{name: fmt.Sprint(i), ev: ev}, at(0), Queued)
	}
	if err := c.SetQueueLimits(2, time.Second); err != nil {
		t.Fatal(err)
	}
	if _, _, reason := c.Acquire(Read, nil, &recWaiter{}, 0, at(0)); reason != "queue full, limit=2, queued=4 in the node's read queue" {
		t.Fatalf("reason %q", reason)
	}
	if err := c.SetQueueLimits(-5, time.Second); err == nil {
		t.Fatal("SetQueueLimits(-5) accepted")
	}
	if s := c.Stats().Read; s.QueueLength != 4 || s.Rejected != 3 {
		t.Fatalf("stats %+v", s)
	}
}

func TestTickExpiresOldWaiters(t *testing.T) {
	c, ev := newTest(t, 1, 1, Options{QueueTimeout: 10 * time.Second})
	mustAcquire(t, c, Write, nil, at(0), Admitted)
	a, b := &recWaiter{name: "a", ev: ev}, &recWaiter{name: "b", ev: ev}
	mustAcquire(t, c, Write, a, at(0), Queued)
	mustAcquire(t, c, Write, b, at(5*time.Second), Queued)
	for _, step := range []struct {
		now  time.Duration
		want string
	}{
		{10 * time.Second, ""}, // exactly the timeout is not longer than it
		{10*time.Second + 1, "a:expired:timed out after 10000 ms in the write queue"},
		{12 * time.Second, ""},
		{16 * time.Second, "b:expired:timed out after 10000 ms in the write queue"},
	} {
		c.Tick(at(step.now))
		if got := ev.take(); got != step.want {
			t.Fatalf("Tick(+%v): %q, want %q", step.now, got, step.want)
		}
	}
	s := c.Stats()
	if s.Write.Expired != 2 || s.Write.QueueLength != 0 || s.Write.RemovedFromQueue != 2 ||
		s.Write.TotalTimeQueuedUS != 21_000_000 {
		t.Fatalf("stats %+v", s.Write)
	}
	checkInvariants(t, s)
	// A new timeout applies to waiters already queued.
	w := &recWaiter{name: "c", ev: ev}
	mustAcquire(t, c, Write, w, at(20*time.Second), Queued)
	if err := c.SetQueueLimits(10, time.Second); err != nil {
		t.Fatal(err)
	}
	c.Tick(at(22 * time.Second))
	if got := ev.take(); got != "c:expired:timed out after 1000 ms in the write queue" {
		t.Fatalf("after SetQueueLimits: %q", got)
	}
}

// Expire answers overdue waiters between Ticks, and does nothing else (no aging,
// no probe: the pools keep their sizes).
func TestExpireBetweenTicks(t *testing.T) {
	c, ev := newTest(t, 1, 1, Options{QueueTimeout: 10 * time.Millisecond})
	mustAcquire(t, c, Write, nil, at(0), Admitted)
	mustAcquire(t, c, Write, &recWaiter{name: "a", ev: ev}, at(0), Queued)
	c.Expire(at(10 * time.Millisecond))
	if got := ev.take(); got != "" {
		t.Fatalf("Expire at the timeout: %q", got)
	}
	c.Expire(at(11 * time.Millisecond))
	if got := ev.take(); got != "a:expired:timed out after 10 ms in the write queue" {
		t.Fatalf("Expire past the timeout: %q", got)
	}
	s := c.Stats()
	if s.Write.Expired != 1 || s.Write.QueueLength != 0 || s.Write.Total != 1 {
		t.Fatalf("stats %+v", s.Write)
	}
	checkInvariants(t, s)
}

// dueWaiter is a recWaiter with a deadline (a DeadlineWaiter).
type dueWaiter struct {
	recWaiter
	due time.Time
}

func (w *dueWaiter) Due() time.Time { return w.due }

// Expire (and Tick) answer a queued DeadlineWaiter once its Due has passed, with
// DeadlinePassed and without counting a queue timeout; a waiter behind it whose Due
// has not passed stays, and so does a plain Waiter.
func TestExpireDeadlinePassed(t *testing.T) {
	c, ev := newTest(t, 1, 1, Options{QueueTimeout: time.Second})
	held := mustAcquire(t, c, Write, nil, at(0), Admitted)
	mustAcquire(t, c, Write, &dueWaiter{recWaiter{name: "a", ev: ev}, at(20 * time.Millisecond)}, at(0), Queued)
	mustAcquire(t, c, Write, &dueWaiter{recWaiter{name: "b", ev: ev}, at(40 * time.Millisecond)}, at(0), Queued)
	mustAcquire(t, c, Write, &recWaiter{name: "c", ev: ev}, at(0), Queued)
	c.Expire(at(20 * time.Millisecond))
	if got := ev.take(); got != "" {
		t.Fatalf("Expire at a's due: %q", got)
	}
	c.Expire(at(21 * time.Millisecond))
	if got := ev.take(); got != "a:expired:"+DeadlinePassed {
		t.Fatalf("Expire past a's due: %q", got)
	}
	c.Tick(at(41 * time.Millisecond))
	if got := ev.take(); got != "b:expired:"+DeadlinePassed {
		t.Fatalf("Tick past b's due: %q", got)
	}
	s := c.Stats()
	if s.Write.Expired != 0 || s.Write.QueueLength != 1 || s.Write.RemovedFromQueue != 2 {
		t.Fatalf("stats %+v", s.Write)
	}
	checkInvariants(t, s)
	c.Release(held, at(50*time.Millisecond))
	if got := ev.take(); got != "c:granted" {
		t.Fatalf("after the release: %q", got)
	}
}

func TestNodeCapBinding(t *testing.T) {
	c, ev := newTest(t, 4, 4, Options{NodeTickets: 3})
	r1 := mustAcquire(t, c, Read, nil, at(0), Admitted)
	mustAcquire(t, c, Read, nil, at(0), Admitted)
	w1 := mustAcquire(t, c, Write, nil, at(0), Admitted)
	// Both pools have room; the node cap binds.
	wr, ww := &recWaiter{name: "read", ev: ev}, &recWaiter{name: "write", ev: ev}
	mustAcquire(t, c, Read, wr, at(1), Queued)
	mustAcquire(t, c, Write, ww, at(2), Queued)
	s := c.Stats()
	if s.Node.Out != 3 || s.Node.Available != 0 || s.Read.Available != 2 || s.Node.QueueLength != 2 {
		t.Fatalf("stats %+v", s)
	}
	checkInvariants(t, s)
	// A write ticket comes back: the node ticket goes to the earliest waiter, the read.
	c.Release(w1, at(3))
	if got := ev.take(); got != "read:granted" {
		t.Fatalf("events %q", got)
	}
	// FIFO: a new write may not overtake the queued write even after a read returns.
	c.Release(r1, at(4))
	if got := ev.take(); got != "write:granted" {
		t.Fatalf("events %q", got)
	}
	// Raising the cap grants at once; lowering it revokes nothing.
	x := &recWaiter{name: "x", ev: ev}
	mustAcquire(t, c, Write, x, at(5), Queued)
	if err := c.SetNodeTickets(4, at(6)); err != nil {
		t.Fatal(err)
	}
	if got := ev.take(); got != "x:granted" {
		t.Fatalf("events %q", got)
	}
	if err := c.SetNodeTickets(1, at(7)); err != nil {
		t.Fatal(err)
	}
	if err := c.SetNodeTickets(0, at(7)); err == nil {
		t.Fatal("SetNodeTickets(0) accepted")
	}
	s = c.Stats()
	if s.Node.Out != 4 || s.Node.Total != 1 || s.Node.Available != 0 {
		t.Fatalf("after lowering the cap %+v", s.Node)
	}
	checkInvariants(t, s)
}

func TestResizeGrowGrantsAtOnce(t *testing.T) {
	c, ev := newTest(t, 1, 1, Options{})
	mustAcquire(t, c, Read, nil, at(0), Admitted)
	mustAcquire(t, c, Write, nil, at(0), Admitted)
	for i := range 4 {
		mustAcquire(t, c, Read, &recWaiter{name: fmt.Sprint("r", i), ev: ev}, at(time.Duration(i)), Queued)
	}
	mustAcquire(t, c, Write, &recWaiter{name: "w0", ev: ev}, at(0), Queued)
	c.Tick(at(time.Second)) // only so that Resize stamps grants with this time
	c.Resize(4, 1)
	if got := ev.take(); got != "r0:granted r1:granted r2:granted" {
		t.Fatalf("grants %q", got)
	}
	s := c.Stats()
	if s.Read.Out != 4 || s.Read.QueueLength != 1 || s.Write.QueueLength != 1 ||
		s.Read.TotalTimeQueuedUS != 2_999_999 {
		t.Fatalf("stats %+v", s)
	}
	checkInvariants(t, s)
}

func TestShrinkNeverRevokes(t *testing.T) {
	c, ev := newTest(t, 4, 1, Options{})
	var held []Ticket
	for range 4 {
		held = append(held, mustAcquire(t, c, Read, nil, at(0), Admitted))
	}
	c.Resize(1, 1)
	s := c.Stats().Read
	if s.Out != 4 || s.Total != 1 || s.Available != 0 {
		t.Fatalf("after shrink %+v", s)
	}
	a, b := &recWaiter{name: "a", ev: ev}, &recWaiter{name: "b", ev: ev}
	mustAcquire(t, c, Read, a, at(0), Queued)
	mustAcquire(t, c, Read, b, at(0), Queued)
	// Out converges to the new size; nothing is handed on while the pool is over it.
	for i, want := range []int64{3, 2, 1} {
		c.Release(held[i], at(time.Millisecond))
		if got := ev.take(); got != "" {
			t.Fatalf("release %d handed on: %q", i, got)
		}
		if s := c.Stats().Read; s.Out != want {
			t.Fatalf("release %d: out %d, want %d", i, s.Out, want)
		}
	}
	c.Release(held[3], at(time.Millisecond))
	if got := ev.take(); got != "a:granted" {
		t.Fatalf("events %q", got)
	}
	c.Release(a.ticket, at(time.Millisecond))
	if got := ev.take(); got != "b:granted" {
		t.Fatalf("events %q", got)
	}
	c.Release(b.ticket, at(time.Millisecond))
	s2 := c.Stats()
	if s2.Read.Out != 0 || s2.Read.Available != 1 || s2.Read.Total != 1 {
		t.Fatalf("final %+v", s2.Read)
	}
	checkInvariants(t, s2)
	c.Resize(-3, 0)
	if s := c.Stats(); s.Read.Total != 0 || s.Write.Total != 0 {
		t.Fatalf("negative sizes: %d/%d", s.Read.Total, s.Write.Total)
	}
}
