package ingress

import (
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"kvd/probe"
)

// stress drives a Controller from many goroutines at once: workers that acquire,
// queue, cancel at random and release; a ticker that advances a fake clock and calls
// Tick; optionally a resizer that grows and shrinks the pools at random.
type stress struct {
	c     *Controller
	clock atomic.Int64 // fake time, ns since t0

	// What the workers saw; compared with the Controller's figures at the end.
	admitted, queued, granted, expired, rejected atomic.Int64
	canceled, cancelLost                         atomic.Int64 // Cancel true / false
	inflight, maxInflight                        atomic.Int64
	badCallbacks                                 atomic.Int64 // a second callback, or one for the wrong waiter

	mu         sync.Mutex      // guards canceledWs
	canceledWs []*stressWaiter // must never get a callback
}

func (s *stress) now() time.Time { return at(time.Duration(s.clock.Load())) }

// stressWaiter reports its one callback on its worker's channel.
type stressWaiter struct {
	s      *stress
	done   chan *stressWaiter // the worker's, buffered 1
	calls  atomic.Int32
	ticket Ticket // written by Granted before it sends on done
	timed  bool   // written by Expired before it sends on done
}

func (w *stressWaiter) Granted(t Ticket) {
	w.ticket = t
	w.settle()
}

func (w *stressWaiter) Expired(string) {
	w.timed = true
	w.settle()
}

func (w *stressWaiter) settle() {
	if w.calls.Add(1) != 1 {
		w.s.badCallbacks.Add(1)
		return
	}
	select {
	case w.done <- w:
	default:
		w.s.badCallbacks.Add(1)
	}
}

// run holds t for a moment, like a command running on a worker, then releases it.
func (s *stress) run(t Ticket, rng *rand.Rand) {
	n := s.inflight.Add(1)
	for m := s.maxInflight.Load(); n > m && !s.maxInflight.CompareAndSwap(m, n); m = s.maxInflight.Load() {
	}
	if rng.IntN(4) == 0 {
		runtime.Gosched()
	}
	s.inflight.Add(-1)
	s.c.Release(t, s.now())
}

// worker issues commands one at a time, like a connection with one command in flight.
func (s *stress) worker(id, commands int) {
	rng := rand.New(rand.NewPCG(uint64(id), 42))
	done := make(chan *stressWaiter, 1)
	for range commands {
		w := &stressWaiter{s: s, done: done}
		t, d, _ := s.c.Acquire(Pool(rng.IntN(2)), nil, w, 0, s.now())
		switch d {
		case Rejected:
			s.rejected.Add(1)
			continue
		case Admitted:
			s.admitted.Add(1)
			s.run(t, rng)
			continue
		}
		s.queued.Add(1)
		if rng.IntN(4) == 0 {
			if rng.IntN(2) == 0 {
				runtime.Gosched() // let a grant race the cancel
			}
			if s.c.Cancel(w, s.now()) {
				s.canceled.Add(1)
				s.mu.Lock()
				s.canceledWs = append(s.canceledWs, w)
				s.mu.Unlock()
				continue
			}
			s.cancelLost.Add(1) // the callback has come or is coming: wait for it
		}
		got := <-done
		switch {
		case got != w:
			s.badCallbacks.Add(1)
		case got.timed:
			s.expired.Add(1)
		default:
			s.granted.Add(1)
			s.run(got.ticket, rng)
		}
	}
}

// background runs fn in a loop until stop is closed.
func background(wg *sync.WaitGroup, stop <-chan struct{}, fn func()) {
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
				fn()
			}
		}
	})
}

func TestStress(t *testing.T) {
	const workers, nodeTickets = 8, 6
	commands := 100_000
	if testing.Short() {
		commands = 10_000
	}
	for _, tc := range []struct {
		name    string
		prober  bool // the prober sizes the pools; otherwise a resizer at random
		timeout time.Duration
		expires bool // waiters expire (hundreds a run): pools resized to 0 leave them waiting
	}{
		{"random resizes", false, 5 * time.Millisecond, true},
		{"prober", true, 5 * time.Millisecond, false}, // the prober keeps a ticket: 0-1 expire
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := New(Options{
				NodeTickets: nodeTickets, MaxQueueDepth: 5, QueueTimeout: tc.timeout,
				DisableProbe: !tc.prober, Probe: probe.Options{Min: 1, Max: 5, Initial: 4},
			})
			if err != nil {
				t.Fatal(err)
			}
			s := &stress{c: c}
			stop := make(chan struct{})
			var bg sync.WaitGroup
			background(&bg, stop, func() {
				s.clock.Add(int64(time.Millisecond))
				c.Tick(s.now())
				time.Sleep(50 * time.Microsecond)
			})
			if !tc.prober {
				rng := rand.New(rand.NewPCG(1, 2))
				background(&bg, stop, func() {
					c.Resize(rng.IntN(6), rng.IntN(6)) // zero too: only a later grow frees them
					time.Sleep(20 * time.Microsecond)
				})
			}
			var wg sync.WaitGroup
			for id := range workers {
				wg.Go(func() { s.worker(id, commands) })
			}
			wg.Wait()
			close(stop)
			bg.Wait()
			s.check(t, workers*commands, nodeTickets)
			// The races this test is for happened: grants, cancels that
			// won and that lost, and (with random resizes, at full size)
			// expiries.
			if s.granted.Load() == 0 || s.canceled.Load() == 0 || s.cancelLost.Load() == 0 ||
				tc.expires && !testing.Short() && s.expired.Load() == 0 {
				t.Errorf("not every path ran: granted %d, canceled %d, cancel lost %d, expired %d",
					s.granted.Load(), s.canceled.Load(), s.cancelLost.Load(), s.expired.Load())
			}
		})
	}
}

// check compares the Controller's figures with what the workers saw.
func (s *stress) check(t *testing.T, commands, nodeTickets int) {
	t.Helper()
	st := s.c.Stats()
	n := st.Node
	t.Logf("admitted %d, queued %d (granted %d, expired %d, canceled %d, cancel lost the race %d), rejected %d, max in flight %d",
		s.admitted.Load(), s.queued.Load(), s.granted.Load(), s.expired.Load(), s.canceled.Load(),
		s.cancelLost.Load(), s.rejected.Load(), s.maxInflight.Load())
	checkInvariants(t, st)
	if n.Out != 0 || n.QueueLength != 0 {
		t.Errorf("at the end: out %d, queued %d", n.Out, n.QueueLength)
	}
	if got := s.admitted.Load() + s.queued.Load() + s.rejected.Load(); got != int64(commands) {
		t.Errorf("%d commands accounted for, want %d", got, commands)
	}
	if s.granted.Load()+s.expired.Load()+s.canceled.Load() != s.queued.Load() {
		t.Errorf("queued %d != granted %d + expired %d + canceled %d",
			s.queued.Load(), s.granted.Load(), s.expired.Load(), s.canceled.Load())
	}
	for _, c := range []struct {
		name      string
		got, want int64
	}{
		{"started", n.Started, s.admitted.Load() + s.granted.Load()},
		{"added_to_queue", n.AddedToQueue, s.queued.Load()},
		{"expired", n.Expired, s.expired.Load()},
		{"canceled", n.Canceled, s.canceled.Load()},
		{"rejected", n.Rejected, s.rejected.Load()},
		{"bad callbacks", s.badCallbacks.Load(), 0},
	} {
		if c.got != c.want {
			t.Errorf("%s = %d, want %d", c.name, c.got, c.want)
		}
	}
	if m := s.maxInflight.Load(); m > int64(nodeTickets) {
		t.Errorf("%d commands in flight at once, node cap %d", m, nodeTickets)
	}
	for _, w := range s.canceledWs {
		if w.calls.Load() != 0 {
			t.Fatal("a canceled waiter got a callback")
		}
	}
}
