package ingress

import (
	"testing"
	"time"

	"kvd/probe"
)

// simClient is a client of the simulated workload: it queues, and when granted it
// joins the commands in flight.
type simClient struct{ w *simWorkload }

func (c *simClient) Granted(t Ticket) { c.w.held = append(c.w.held, t) }
func (c *simClient) Expired(_ string) { c.w.expired++ }

// simWorkload keeps the write pool exhausted: every ticket is held, and one more
// command always waits. Each interval, rate(c) commands per second finish, c being the
// number in flight: throughput rises with concurrency. Everything runs on one
// goroutine with a fake clock.
type simWorkload struct {
	c       *Controller
	now     time.Time
	held    []Ticket // write tickets in flight, oldest first
	expired int
	rate    func(inFlight int) float64 // commands finished per second
	due     float64                    // commands due to finish, carried between steps
}

// fill acquires until one command waits.
func (w *simWorkload) fill() {
	for {
		t, d, reason := w.c.Acquire(Write, nil, &simClient{w: w}, 0, w.now)
		switch d {
		case Admitted:
			w.held = append(w.held, t)
		case Rejected:
			panic(reason)
		default:
			return
		}
	}
}

// interval runs 100 ms of work in 10 ms steps, then Tick, and returns the commands
// finished. After a shrink, commands in flight drain to the new size as they finish.
func (w *simWorkload) interval() int {
	const step = 10 * time.Millisecond
	finished := 0
	for range probe.DefaultInterval / step {
		w.now = w.now.Add(step)
		w.due += w.rate(len(w.held)) * step.Seconds()
		for ; w.due >= 1; w.due-- {
			t := w.held[0]
			w.held = w.held[1:]
			w.c.Release(t, w.now) // grants the waiting command, which joins held
			w.fill()
			finished++
		}
	}
	w.c.Tick(w.now)
	w.fill()
	return finished
}

func TestProberGrowsExhaustedWritePool(t *testing.T) {
	c, err := New(Options{Probe: probe.Options{GOMAXPROCS: 2}}) // starts at 4+4
	if err != nil {
		t.Fatal(err)
	}
	w := &simWorkload{c: c, now: t0, rate: func(n int) float64 { return 100 * float64(min(n, 40)) }}
	w.fill()
	c.Tick(w.now) // the prober's first sample only starts the measurement
	first := w.interval()
	var last int
	for range 300 { // 30 s
		last = w.interval()
	}
	s := c.Stats()
	t.Logf("write pool %d → %d, finished per interval %d → %d; probe %+v",
		4, s.Write.Total, first, last, s.Probe)
	if s.Write.Total < 30 || s.Probe.TimesIncreased == 0 || s.Probe.TimesProbedUp == 0 {
		t.Fatalf("the prober did not grow the exhausted write pool: %+v", s.Probe)
	}
	if last <= 5*first {
		t.Fatalf("throughput %d → %d per interval: did not rise with the pool", first, last)
	}
	if int64(s.Probe.WriteTotal) != s.Write.Total || int64(s.Probe.ReadTotal) != s.Read.Total {
		t.Fatalf("pools %d/%d differ from the prober's %d/%d", s.Read.Total, s.Write.Total,
			s.Probe.ReadTotal, s.Probe.WriteTotal)
	}
	if s.Write.Out != int64(len(w.held)) || w.expired != 0 {
		t.Fatalf("out %d, held %d, expired %d", s.Write.Out, len(w.held), w.expired)
	}
	checkInvariants(t, s)
}

func TestDisableProbeKeepsSizes(t *testing.T) {
	c, err := New(Options{DisableProbe: true, Probe: probe.Options{GOMAXPROCS: 2}})
	if err != nil {
		t.Fatal(err)
	}
	w := &simWorkload{c: c, now: t0, rate: func(n int) float64 { return 100 * float64(n) }}
	w.fill()
	for range 100 {
		w.interval()
	}
	s := c.Stats()
	if s.Read.Total != 4 || s.Write.Total != 4 || s.Probe.TimesProbedStable != 0 {
		t.Fatalf("sizes %d/%d, probe %+v", s.Read.Total, s.Write.Total, s.Probe)
	}
}

func TestTickPeaks(t *testing.T) {
	c, _ := newTest(t, 4, 4, Options{})
	var held []Ticket
	for range 3 {
		held = append(held, mustAcquire(t, c, Read, nil, at(0), Admitted))
	}
	c.Release(held[0], at(0))
	c.Release(held[1], at(0))
	mustAcquire(t, c, Write, nil, at(0), Admitted)
	c.mu.Lock()
	rp, wp := c.pools[Read].peak, c.pools[Write].peak
	c.mu.Unlock()
	if rp != 3 || wp != 1 {
		t.Fatalf("peaks %d/%d, want 3/1", rp, wp)
	}
	// A Tick restarts the peaks from the tickets still held.
	c.Tick(at(time.Second))
	c.mu.Lock()
	rp, wp = c.pools[Read].peak, c.pools[Write].peak
	c.mu.Unlock()
	if rp != 1 || wp != 1 {
		t.Fatalf("peaks after Tick %d/%d, want 1/1", rp, wp)
	}
}

func TestTickFeedsProber(t *testing.T) {
	// Idle pools above Min are not busy: the prober stays. A read pool kept exhausted
	// makes it probe up, and SetReadWriteRatio shifts the split at the next probe.
	c, err := New(Options{Probe: probe.Options{GOMAXPROCS: 8}}) // 8+8
	if err != nil {
		t.Fatal(err)
	}
	now := t0
	c.Tick(now)
	for range 3 {
		now = now.Add(100 * time.Millisecond)
		c.Tick(now)
	}
	if s := c.Stats(); s.Read.Total != 8 || s.Write.Total != 8 || s.Probe.TimesProbedStable != 3 {
		t.Fatalf("idle: %d/%d %+v", s.Read.Total, s.Write.Total, s.Probe)
	}
	var held []Ticket
	for range 8 {
		held = append(held, mustAcquire(t, c, Read, nil, now, Admitted))
	}
	c.SetReadWriteRatio(0.75)
	now = now.Add(100 * time.Millisecond)
	c.Tick(now)
	s := c.Stats()
	if s.Probe.State != "up" || s.Read.Total <= 8 || s.Read.Total+s.Write.Total <= 16 || s.Read.Total <= s.Write.Total {
		t.Fatalf("after an exhausted interval: %d/%d %+v", s.Read.Total, s.Write.Total, s.Probe)
	}
	for _, tk := range held {
		c.Release(tk, now)
	}
	checkInvariants(t, c.Stats())
}
