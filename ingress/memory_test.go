package ingress

import (
	"fmt"
	"testing"
	"time"
)

const mib = 1 << 20

func memStats(c *Controller) MemoryStats { return c.Stats().Memory }

func TestMemoryTooLarge(t *testing.T) {
	c, _ := newTest(t, 4, 4, Options{MaxInflightBytes: 4 * mib})
	b := mustBucket(t, c, "b", BucketLimits{})
	_, d, reason := c.Acquire(Write, b, &recWaiter{}, 5*mib, at(0))
	if d != TooLarge || reason != "value of 5242880 bytes exceeds max_inflight_bytes=4194304, in bucket b" || d.String() != "too large" {
		t.Fatalf("Acquire = %v %q", d, reason)
	}
	// Exactly the budget fits; a read's estimate is never too large.
	tk := acq(t, c, Write, b, nil, 4*mib, at(0), Admitted)
	c.Release(tk, at(0))
	if err := c.SetMaxInflightBytes(100, at(0)); err != nil {
		t.Fatal(err)
	}
	r := acq(t, c, Read, b, nil, Estimate, at(0), Admitted)
	if m := memStats(c); m.InflightBytes != 100 || m.Rejected != 1 || m.PeakBytes != 4*mib || m.LimitBytes != 100 {
		t.Fatalf("memory %+v", m)
	}
	c.Release(r, at(0))
	if err := c.SetMaxInflightBytes(-1, at(0)); err == nil {
		t.Fatal("SetMaxInflightBytes(-1) accepted")
	}
	if s := b.Stats(); s.Rejected != 1 || s.NumQueueFull != 0 {
		t.Fatalf("b %+v", s)
	}
}

func TestMemoryWaits(t *testing.T) {
	// 16 writers of 1 MiB under a 4 MiB budget: 4 run, 12 wait, all finish, the
	// bytes in flight never pass the budget.
	c, ev := newTest(t, 16, 16, Options{MaxInflightBytes: 4 * mib})
	b := mustBucket(t, c, "b", BucketLimits{})
	var held []Ticket
	var ws []*recWaiter
	for i := range 16 {
		w := &recWaiter{name: fmt.Sprint(i), ev: ev}
		tk, d, reason := c.Acquire(Write, b, w, mib, at(0))
		switch d {
		case Admitted:
			held = append(held, tk)
		case Queued:
			ws = append(ws, w)
		default:
			t.Fatal(d, reason)
		}
	}
	if len(held) != 4 || len(ws) != 12 {
		t.Fatalf("%d admitted, %d queued", len(held), len(ws))
	}
	if m := memStats(c); m.Waiting != 12 || m.Waited != 12 || m.InflightBytes != 4*mib {
		t.Fatalf("memory %+v", m)
	}
	for len(held) > 0 {
		tk := held[0]
		held = held[1:]
		c.Release(tk, at(time.Millisecond))
		for _, w := range ws {
			if w.calls == 1 && w.ticket.Valid() {
				held = append(held, w.ticket)
				w.ticket = Ticket{}
			}
		}
		if m := memStats(c); m.InflightBytes > 4*mib {
			t.Fatalf("memory %+v", m)
		}
	}
	m := memStats(c)
	if m.InflightBytes != 0 || m.PeakBytes != 4*mib || m.Waiting != 0 || m.Waited != 12 {
		t.Fatalf("memory %+v", m)
	}
	if s := checkBucket(t, b); s.Finished != 16 {
		t.Fatalf("b %+v", s)
	}
	checkInvariants(t, c.Stats())
}

func TestMemoryHeadOfLine(t *testing.T) {
	// A large write waits for memory; smaller commands of any bucket and pool, that
	// would fit, wait behind it rather than starve it.
	c, ev := newTest(t, 8, 8, Options{MaxInflightBytes: 4 * mib})
	a, b := mustBucket(t, c, "a", BucketLimits{}), mustBucket(t, c, "b", BucketLimits{})
	h1 := acq(t, c, Write, a, nil, 2*mib, at(0), Admitted)
	h2 := acq(t, c, Write, a, nil, mib, at(0), Admitted)
	acq(t, c, Write, a, &recWaiter{name: "big", ev: ev}, 3*mib, at(1), Queued)
	acq(t, c, Write, b, &recWaiter{name: "small", ev: ev}, 1024, at(2), Queued)
	acq(t, c, Read, b, &recWaiter{name: "read", ev: ev}, Estimate, at(3), Queued)
	acq(t, c, Read, b, nil, 0, at(3), Rejected) // a command of no bytes may not overtake either
	if m := memStats(c); m.Waiting != 1 {
		t.Fatalf("memory %+v", m)
	}
	c.Release(h2, at(4)) // 2 MiB in flight: 3 MiB does not fit yet
	if got := ev.take(); got != "" {
		t.Fatalf("events %q", got)
	}
	c.Release(h1, at(5))
	if got := ev.take(); got != "big:granted small:granted read:granted" {
		t.Fatalf("events %q", got)
	}
	if m := memStats(c); m.InflightBytes != 3*mib+1024+DefaultReadEstimate || m.Waiting != 0 {
		t.Fatalf("memory %+v", m)
	}
	checkInvariants(t, c.Stats())
}

func TestMemoryCancelHead(t *testing.T) {
	c, ev := newTest(t, 8, 8, Options{MaxInflightBytes: 4 * mib})
	h := acq(t, c, Write, nil, nil, 3*mib, at(0), Admitted)
	big := &recWaiter{name: "big", ev: ev}
	acq(t, c, Write, nil, big, 2*mib, at(1), Queued)
	acq(t, c, Write, nil, &recWaiter{name: "small", ev: ev}, mib, at(2), Queued)
	if !c.Cancel(big, at(3)) {
		t.Fatal("Cancel")
	}
	if got := ev.take(); got != "small:granted" {
		t.Fatalf("events %q", got)
	}
	c.Release(h, at(4))
	if m := memStats(c); m.InflightBytes != mib || m.Waiting != 0 {
		t.Fatalf("memory %+v", m)
	}
}

func TestMemoryHeadWithoutTicket(t *testing.T) {
	// The waiter the memory was held for gets its bytes when its bucket is at its cap:
	// the memory goes to the others meanwhile.
	c, ev := newTest(t, 8, 8, Options{MaxInflightBytes: 4 * mib})
	a := mustBucket(t, c, "a", BucketLimits{MaxConcurrent: 2})
	b := mustBucket(t, c, "b", BucketLimits{})
	ra := acq(t, c, Read, a, nil, 0, at(0), Admitted)
	hb := acq(t, c, Write, b, nil, 3*mib, at(0), Admitted)
	acq(t, c, Write, a, &recWaiter{name: "a", ev: ev}, 2*mib, at(1), Queued) // holds the memory
	acq(t, c, Read, b, nil, 0, at(2), Rejected)                              // no overtaking, even of no bytes
	acq(t, c, Write, b, &recWaiter{name: "b", ev: ev}, mib, at(3), Queued)
	c.SetBucketLimits(a, BucketLimits{MaxConcurrent: 1}, at(4))
	c.Release(hb, at(5))
	if got := ev.take(); got != "b:granted" {
		t.Fatalf("events %q", got)
	}
	c.Release(ra, at(6))
	if got := ev.take(); got != "a:granted" {
		t.Fatalf("events %q", got)
	}
	if m := memStats(c); m.InflightBytes != 3*mib || m.Waiting != 0 || m.Waited != 1 {
		t.Fatalf("memory %+v", m)
	}
}

func TestSettle(t *testing.T) {
	c, ev := newTest(t, 8, 8, Options{MaxInflightBytes: 4096})
	b := mustBucket(t, c, "b", BucketLimits{})
	r := acq(t, c, Read, b, nil, Estimate, at(0), Admitted)
	w := acq(t, c, Write, b, nil, 3000, at(0), Admitted)
	acq(t, c, Write, b, &recWaiter{name: "w", ev: ev}, 996, at(0), Queued) // 1024+3000+996 > 4096
	c.Settle(r, 100, at(1))                                                // frees 924 bytes: 4096 fits
	if got := ev.take(); got != "w:granted" {
		t.Fatalf("events %q", got)
	}
	if m := memStats(c); m.InflightBytes != 4096 || m.PeakBytes != 4096 {
		t.Fatalf("memory %+v", m)
	}
	c.Settle(w, 3010, at(1)) // a charge may grow past the budget (and teaches 3010 at once: larger)
	if m := memStats(c); m.InflightBytes != 4106 || m.PeakBytes != 4106 {
		t.Fatalf("memory %+v", m)
	}
	c.Release(r, at(2))
	c.Release(r, at(2)) // stale: returns nothing twice
	c.Settle(r, 5, at(2))
	c.Release(w, at(2))
	// The estimate moved 1/8 of the way down to 100 (1024 - 924/8 = 909),
	// then all the way up to 3010.
	r2 := acq(t, c, Read, b, nil, Estimate, at(3), Admitted)
	if m := memStats(c); m.InflightBytes != 996+3010 {
		t.Fatalf("memory %+v, want the new estimate 3010 charged", m)
	}
	c.Release(r2, at(4))
	c.Settle(c.StartExempt(Read, b, at(4)), 10, at(4)) // exempt: nothing
	if m := memStats(c); m.InflightBytes != 996 {
		t.Fatalf("memory %+v", m)
	}
}

func TestSetMaxInflightBytes(t *testing.T) {
	c, ev := newTest(t, 8, 8, Options{MaxInflightBytes: mib})
	h := acq(t, c, Write, nil, nil, mib, at(0), Admitted)
	acq(t, c, Write, nil, &recWaiter{name: "w", ev: ev}, mib, at(0), Queued)
	if err := c.SetMaxInflightBytes(0, at(1)); err != nil { // off
		t.Fatal(err)
	}
	if got := ev.take(); got != "w:granted" {
		t.Fatalf("events %q", got)
	}
	// Lowered below what is in flight: nothing revoked, new commands wait.
	if err := c.SetMaxInflightBytes(10, at(2)); err != nil {
		t.Fatal(err)
	}
	acq(t, c, Write, nil, &recWaiter{name: "x", ev: ev}, 5, at(3), Queued)
	c.Release(h, at(4))
	if got := ev.take(); got != "" {
		t.Fatalf("events %q", got)
	}
	if m := memStats(c); m.InflightBytes != mib || m.Waiting != 1 {
		t.Fatalf("memory %+v", m)
	}
}

func TestMemoryLimitLoweredBelowWaiter(t *testing.T) {
	// A waiter larger than the new budget runs alone once the node is idle, instead
	// of holding everyone back until it times out.
	c, ev := newTest(t, 8, 8, Options{MaxInflightBytes: 4 * mib})
	h := acq(t, c, Write, nil, nil, 3*mib, at(0), Admitted)
	acq(t, c, Write, nil, &recWaiter{name: "big", ev: ev}, 2*mib, at(1), Queued)
	acq(t, c, Write, nil, &recWaiter{name: "small", ev: ev}, 1024, at(2), Queued)
	if err := c.SetMaxInflightBytes(mib, at(3)); err != nil {
		t.Fatal(err)
	}
	acq(t, c, Write, nil, &recWaiter{}, 2*mib, at(3), TooLarge) // new ones are refused
	c.Release(h, at(4))
	if got := ev.take(); got != "big:granted" {
		t.Fatalf("events %q", got)
	}
}

// TestSettleRelease: one call teaches the estimate as Settle does and gives the ticket
// and all its bytes back as Release does; a second call, or one with an exempt
// ticket, changes nothing.
func TestSettleRelease(t *testing.T) {
	c, ev := newTest(t, 8, 8, Options{MaxInflightBytes: 4096})
	b := mustBucket(t, c, "b", BucketLimits{})
	r := acq(t, c, Read, b, nil, Estimate, at(0), Admitted)                 // charged the 1024 estimate
	acq(t, c, Write, b, &recWaiter{name: "w", ev: ev}, 3100, at(0), Queued) // 1024+3100 > 4096
	c.SettleRelease(r, 100, at(1))
	if got := ev.take(); got != "w:granted" {
		t.Fatalf("events %q", got)
	}
	if m := memStats(c); m.InflightBytes != 3100 {
		t.Fatalf("memory %+v, want only the granted write's 3100 bytes", m)
	}
	c.SettleRelease(r, 5000, at(2)) // stale: neither the estimate nor the memory moves
	c.SettleRelease(c.StartExempt(Read, b, at(2)), 5000, at(2))
	r2 := acq(t, c, Read, b, nil, Estimate, at(3), Admitted)
	if m := memStats(c); m.InflightBytes != 3100+909 { // 1024 - 924/8
		t.Fatalf("memory %+v, want the new estimate 909 charged", m)
	}
	c.Release(r2, at(4))
}

// TestReadEstimateRisesAtOnce: after one read of a large value, the next
// reads of the bucket are charged that size up front, so that they wait for
// memory instead of passing the bound (an average would have let a burst of
// them in on the small reads' estimate); smaller values bring it down
// slowly.
func TestReadEstimateRisesAtOnce(t *testing.T) {
	c, ev := newTest(t, 16, 16, Options{MaxInflightBytes: 4 * mib})
	b := mustBucket(t, c, "b", BucketLimits{})
	for range 50 { // many small reads: the estimate falls to about 10 bytes
		r := acq(t, c, Read, b, nil, Estimate, at(0), Admitted)
		c.SettleRelease(r, 10, at(0))
	}
	first := acq(t, c, Read, b, nil, Estimate, at(1), Admitted)
	c.Settle(first, mib, at(1)) // a 1 MiB value
	for range 3 {
		acq(t, c, Read, b, nil, Estimate, at(1), Admitted) // charged 1 MiB each: 4 MiB in all
	}
	acq(t, c, Read, b, &recWaiter{name: "fifth", ev: ev}, Estimate, at(1), Queued)
	if m := memStats(c); m.InflightBytes != 4*mib || m.Waiting != 1 {
		t.Fatalf("memory %+v, want 4 MiB in flight and the fifth read waiting", m)
	}
	c.SettleRelease(first, mib, at(2))
	if got := ev.take(); got != "fifth:granted" {
		t.Fatalf("events %q", got)
	}
}
