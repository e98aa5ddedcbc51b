package ingress

import (
	"testing"
	"time"
)

// fairSim is one write ticket shared by bucket A, with a backlog, and bucket B, whose
// commands arrive one at a time, one every third completion. It runs on one goroutine
// with a fake clock and records, for each of B's commands, how many of A's commands
// were granted while it waited.
type fairSim struct {
	c          *Controller
	a, b       *Bucket
	holder     Ticket
	now        time.Time
	bWaiting   bool
	aGrants    int   // A's grants since B's last command queued
	bWaits     []int // aGrants at each grant of B
	aRemaining int
}

type fairWaiter struct {
	s   *fairSim
	isB bool
}

func (w *fairWaiter) Granted(t Ticket) {
	w.s.holder = t
	if w.isB {
		w.s.bWaits = append(w.s.bWaits, w.s.aGrants)
		w.s.bWaiting, w.s.aGrants = false, 0
		return
	}
	w.s.aRemaining--
	w.s.aGrants++
}

func (w *fairWaiter) Expired(reason string) { panic(reason) }

func TestFairDequeue(t *testing.T) {
	for _, tc := range []struct {
		name string
		fifo bool
		tick bool // Tick at every completion (ages the use 100× faster than the server)
		// B's worst wait, in commands of A granted before it
		maxWait, minWait int
	}{
		{"fair", false, false, 0, 0},
		{"fair with ageing", false, true, 0, 0},
		{"fifo", true, false, 1 << 30, 999},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, _ := newTest(t, 1, 1, Options{FIFO: tc.fifo})
			s := &fairSim{c: c, now: at(0), a: mustBucket(t, c, "A", BucketLimits{}), b: mustBucket(t, c, "B", BucketLimits{})}
			s.holder = acq(t, c, Write, s.a, nil, 0, s.now, Admitted)
			const backlog = 1000
			for range backlog {
				acq(t, c, Write, s.a, &fairWaiter{s: s}, 0, s.now, Queued)
			}
			s.aRemaining = backlog
			for step := 0; s.aRemaining > 0 || s.bWaiting; step++ {
				s.now = s.now.Add(time.Millisecond)
				if step%3 == 0 && !s.bWaiting {
					acq(t, c, Write, s.b, &fairWaiter{s: s, isB: true}, 0, s.now, Queued)
					s.bWaiting, s.aGrants = true, 0
				}
				if tc.tick {
					c.Tick(s.now)
				}
				c.Release(s.holder, s.now)
			}
			c.Release(s.holder, s.now)
			worst := 0
			for _, w := range s.bWaits {
				worst = max(worst, w)
			}
			t.Logf("%d commands of B, worst wait %d commands of A, first %d", len(s.bWaits), worst, s.bWaits[0])
			if worst > tc.maxWait || s.bWaits[0] < tc.minWait {
				t.Fatalf("B waited up to %d (first %d) of A's commands, want ≤ %d and first ≥ %d",
					worst, s.bWaits[0], tc.maxWait, tc.minWait)
			}
			checkInvariants(t, c.Stats())
			if a, b := checkBucket(t, s.a), checkBucket(t, s.b); a.Finished != backlog+1 || b.Finished != int64(len(s.bWaits)) {
				t.Fatalf("A %+v\nB %+v", a, b)
			}
		})
	}
}

func TestFairUseAges(t *testing.T) {
	// A used the pool heavily a second ago, B a little just now: A goes first.
	c, ev := newTest(t, 1, 1, Options{})
	a, b := mustBucket(t, c, "A", BucketLimits{}), mustBucket(t, c, "B", BucketLimits{})
	for range 100 {
		c.Release(acq(t, c, Write, a, nil, 0, at(0), Admitted), at(0))
	}
	for i := range 10 {
		c.Tick(at(time.Duration(i+1) * 100 * time.Millisecond))
	}
	held := acq(t, c, Write, b, nil, 0, at(time.Second), Admitted)
	acq(t, c, Write, b, &recWaiter{name: "b", ev: ev}, 0, at(time.Second), Queued)
	acq(t, c, Write, a, &recWaiter{name: "a", ev: ev}, 0, at(time.Second), Queued)
	// Without the ageing, A's 100 would weigh more than B's 1.
	c.mu.Lock()
	ua, ub := a.used[Write], b.used[Write]
	c.mu.Unlock()
	if ua >= 0.1 || ub < 1 {
		t.Fatalf("use A %v, B %v", ua, ub)
	}
	c.Release(held, at(time.Second))
	if got := ev.take(); got != "a:granted" {
		t.Fatalf("after ageing: %q", got)
	}
}

func TestFairSkipsCappedBuckets(t *testing.T) {
	// The least-used bucket is at its MaxConcurrent: the freed ticket goes to the next.
	c, ev := newTest(t, 2, 2, Options{})
	a := mustBucket(t, c, "A", BucketLimits{})
	b := mustBucket(t, c, "B", BucketLimits{MaxConcurrent: 1})
	ha := acq(t, c, Write, a, nil, 0, at(0), Admitted)
	acq(t, c, Write, a, nil, 0, at(0), Admitted)
	acq(t, c, Write, a, &recWaiter{name: "a", ev: ev}, 0, at(1), Queued)
	// B has used nothing but has a ticket of the read pool: at its cap.
	hb := acq(t, c, Read, b, nil, 0, at(2), Admitted)
	acq(t, c, Write, b, &recWaiter{name: "b", ev: ev}, 0, at(2), Queued)
	c.Release(ha, at(3))
	if got := ev.take(); got != "a:granted" {
		t.Fatalf("events %q", got)
	}
	c.Release(hb, at(4)) // B's slot frees, but the write pool is full
	if got := ev.take(); got != "" {
		t.Fatalf("events %q", got)
	}
	checkInvariants(t, c.Stats())
}

func TestSetFIFOAtRunTime(t *testing.T) {
	c, ev := newTest(t, 1, 1, Options{})
	a, b := mustBucket(t, c, "A", BucketLimits{}), mustBucket(t, c, "B", BucketLimits{})
	held := acq(t, c, Write, a, nil, 0, at(0), Admitted)
	acq(t, c, Write, a, &recWaiter{name: "a", ev: ev}, 0, at(1), Queued)
	acq(t, c, Write, b, &recWaiter{name: "b", ev: ev}, 0, at(2), Queued)
	c.SetFIFO(true, at(3))
	c.Release(held, at(4))
	if got := ev.take(); got != "a:granted" {
		t.Fatalf("FIFO: %q", got)
	}
}
