package ingress

import (
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// newHandoff returns a Handoff on c and a counter of its wake-ups.
func newHandoff(c *Controller) (*Handoff, *atomic.Int32) {
	var wakes atomic.Int32
	return NewHandoff(c, func() { wakes.Add(1) }), &wakes
}

func expectTake(t *testing.T, h *Handoff, want Decision, wantReason string) Ticket {
	t.Helper()
	tk, d, reason := h.Take()
	if d != want || reason != wantReason {
		t.Fatalf("Take() = %v %q, want %v %q", d, reason, want, wantReason)
	}
	return tk
}

func TestHandoffOutcomes(t *testing.T) {
	c, _ := newTest(t, 1, 1, Options{QueueTimeout: time.Second, MaxQueueDepth: 1})
	h, wakes := newHandoff(c)

	// Admitted at once: final, nothing parked.
	tk, d, _ := h.Acquire(Read, at(0))
	if d != Admitted {
		t.Fatalf("Acquire = %v", d)
	}
	expectTake(t, h, Rejected, "no command parked")

	// Queued, then granted by a Release elsewhere.
	if _, d, _ := h.Acquire(Read, at(0)); d != Queued {
		t.Fatalf("Acquire = %v", d)
	}
	expectTake(t, h, Queued, "")
	if _, d, reason := h.Acquire(Read, at(0)); d != Rejected || reason != "handoff busy" {
		t.Fatalf("second Acquire = %v %q", d, reason)
	}
	c.Release(tk, at(time.Millisecond))
	if wakes.Load() != 1 {
		t.Fatalf("%d wake-ups", wakes.Load())
	}
	tk = expectTake(t, h, Admitted, "")
	if !tk.Queued() {
		t.Fatalf("ticket %+v", tk)
	}

	// Queued, then expired by Tick.
	h.Acquire(Read, at(time.Second))
	c.Tick(at(3 * time.Second))
	if wakes.Load() != 2 {
		t.Fatalf("%d wake-ups", wakes.Load())
	}
	expectTake(t, h, TimedOut, "timed out after 1000 ms in the read queue")

	// Rejected: the queue (depth 1) is full.
	other, _ := newHandoff(c)
	other.Acquire(Read, at(3*time.Second))
	if _, d, reason := h.Acquire(Read, at(3*time.Second)); d != Rejected || reason != "queue full, limit=1, queued=1" {
		t.Fatalf("Acquire = %v %q", d, reason)
	}
	expectTake(t, h, Rejected, "no command parked")
	other.Abandon(at(3 * time.Second))
	c.Release(tk, at(4*time.Second))
	s := c.Stats()
	if s.Read.Canceled != 1 || s.Read.Expired != 1 || s.Read.Rejected != 1 || s.Read.Out != 0 {
		t.Fatalf("stats %+v", s.Read)
	}
	checkInvariants(t, s)
}

// handoffAbandonCases bring a Handoff into each state Abandon can meet, with the
// Controller's only write ticket held by holder, which each case releases.
var handoffAbandonCases = []struct {
	name string
	run  func(t *testing.T, c *Controller, h *Handoff, holder Ticket)
}{
	{"still queued: canceled", func(t *testing.T, c *Controller, h *Handoff, holder Ticket) {
		h.Acquire(Write, at(0))
		h.Abandon(at(1))
		c.Release(holder, at(2))
	}},
	{"granted, not taken: released by Abandon", func(t *testing.T, c *Controller, h *Handoff, holder Ticket) {
		h.Acquire(Write, at(0))
		c.Release(holder, at(1))
		h.Abandon(at(2))
	}},
	{"expired, not taken: dropped", func(t *testing.T, c *Controller, h *Handoff, holder Ticket) {
		h.Acquire(Write, at(0))
		c.Tick(at(time.Hour))
		h.Abandon(at(time.Hour))
		c.Release(holder, at(time.Hour))
	}},
	{"grant on its way: released by the late Granted", func(t *testing.T, c *Controller, h *Handoff, holder Ticket) {
		// Cancel lost the race: the Controller has already dequeued h and its
		// Granted has not run yet. Simulated by parking h without queuing it.
		h.state.Store(hoWaiting)
		h.Abandon(at(1))
		if _, d, reason := h.Acquire(Write, at(1)); d != Rejected || reason != busyReason {
			t.Fatalf("Acquire while abandoned = %v %q", d, reason)
		}
		c.Release(holder, at(2))
		late := mustAcquire(t, c, Write, nil, at(2), Admitted)
		h.Granted(late)
	}},
	{"expiry on its way: dropped by the late Expired", func(t *testing.T, c *Controller, h *Handoff, holder Ticket) {
		h.state.Store(hoWaiting)
		h.Abandon(at(1))
		h.Expired("timed out")
		c.Release(holder, at(2))
	}},
}

func TestHandoffAbandon(t *testing.T) {
	for _, tc := range handoffAbandonCases {
		t.Run(tc.name, func(t *testing.T) {
			c, _ := newTest(t, 1, 1, Options{QueueTimeout: time.Second})
			h, wakes := newHandoff(c)
			holder := mustAcquire(t, c, Write, nil, at(0), Admitted)
			tc.run(t, c, h, holder)
			if st := h.state.Load(); st != hoIdle {
				t.Fatalf("handoff state %d, want idle", st)
			}
			s := c.Stats()
			if s.Write.Out != 0 || s.Write.QueueLength != 0 {
				t.Fatalf("stats %+v", s.Write)
			}
			checkInvariants(t, s)
			// Idle again: reusable.
			tk, d, _ := h.Acquire(Write, at(time.Hour))
			if d != Admitted {
				t.Fatalf("reuse: %v", d)
			}
			c.Release(tk, at(time.Hour))
			if wakes.Load() > 1 {
				t.Fatalf("%d wake-ups", wakes.Load())
			}
		})
	}
}

// TestHandoffConcurrent runs connections that park commands and drop out at random
// while others release tickets: no ticket may leak or be released twice.
func TestHandoffConcurrent(t *testing.T) {
	c, err := New(Options{DisableProbe: true, NodeTickets: 3, QueueTimeout: 200 * time.Microsecond})
	if err != nil {
		t.Fatal(err)
	}
	c.Resize(2, 2)
	s := &stress{c: c}
	stop := make(chan struct{})
	var bg sync.WaitGroup
	background(&bg, stop, func() {
		s.clock.Add(int64(100 * time.Microsecond))
		c.Tick(s.now())
		time.Sleep(20 * time.Microsecond)
	})
	var abandoned, timedOut atomic.Int64
	var wg sync.WaitGroup
	for id := range 8 {
		wg.Go(func() {
			a, e := handoffConn(s, uint64(id), 5000)
			abandoned.Add(a)
			timedOut.Add(e)
		})
	}
	wg.Wait()
	close(stop)
	bg.Wait()
	st := c.Stats()
	if st.Node.Out != 0 || st.Node.QueueLength != 0 || st.Node.StaleReleases != 0 {
		t.Fatalf("stats %+v", st.Node)
	}
	// Expired waiters were taken as timed out, or abandoned after Cancel lost the race.
	lost := abandoned.Load() - st.Node.Canceled
	if extra := st.Node.Expired - timedOut.Load(); extra < 0 || extra > lost {
		t.Fatalf("%d expired, %d timed out, %d abandoned too late", st.Node.Expired, timedOut.Load(), lost)
	}
	checkInvariants(t, st)
	t.Logf("abandoned %d (canceled %d, lost the race %d), timed out %d, started %d", abandoned.Load(),
		st.Node.Canceled, lost, timedOut.Load(), st.Node.Started)
}

// handoffConn issues commands through a Handoff like a connection's event loop; one in
// three parked commands is abandoned, and the next command comes on a new connection.
func handoffConn(s *stress, seed uint64, commands int) (abandoned, timedOut int64) {
	rng := rand.New(rand.NewPCG(seed, 7))
	connect := func() (*Handoff, chan struct{}) {
		woken := make(chan struct{}, 1)
		return NewHandoff(s.c, func() { woken <- struct{}{} }), woken
	}
	h, woken := connect()
	for range commands {
		tk, d, _ := h.Acquire(Pool(rng.IntN(2)), s.now())
		if d == Queued && rng.IntN(3) == 0 {
			h.Abandon(s.now()) // the client went away
			abandoned++
			h, woken = connect()
			continue
		}
		if d == Queued {
			<-woken
			tk, d, _ = h.Take()
		}
		switch d {
		case Admitted:
			if rng.IntN(50) == 0 {
				time.Sleep(50 * time.Microsecond) // a slow command: waiters may time out
			}
			s.run(tk, rng)
		case TimedOut:
			timedOut++
		}
	}
	return abandoned, timedOut
}
