package ingress

import (
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"kvd/probe"
)

// bucketStress drives a Controller with buckets from many goroutines: workers acquire
// for random buckets with random value sizes (reads with Estimate, settled later),
// cancel at random and release; a ticker calls Tick on a fake clock; a changer sets
// bucket limits, the memory budget, FIFO mode and the pool sizes at random; a remover
// deletes buckets and adds new ones in their place.
type bucketStress struct {
	c     *Controller
	clock atomic.Int64

	// Buckets 0 and 1 keep a fixed MaxConcurrent, checked strictly; the others'
	// limits change at random.
	slots    [6]atomic.Pointer[stressBucket]
	retired  []*stressBucket // guarded by mu
	mu       sync.Mutex
	canceled []*bucketWaiter // guarded by mu; must never get a callback

	admitted, queued, granted, expired, deleted, rejected, tooLarge, canceledN atomic.Int64
	bad, callbacks                                                             atomic.Int64
	badWhy                                                                     atomic.Pointer[string]
}

// stressBucket is a Bucket and what the workers see of it.
type stressBucket struct {
	b        *Bucket
	fixedCap int          // 0: its limits change
	inFlight atomic.Int64 // commands between admission and release, as the workers see them
}

const stressMaxCap = 4 // the changer's MaxConcurrent is in [1, stressMaxCap]

func (s *bucketStress) now() time.Time { return at(time.Duration(s.clock.Load())) }

func (s *bucketStress) fail(why string) {
	s.bad.Add(1)
	s.badWhy.CompareAndSwap(nil, &why)
}

type bucketWaiter struct {
	s      *bucketStress
	done   chan *bucketWaiter
	calls  atomic.Int32
	ticket Ticket
	reason string
}

func (w *bucketWaiter) Granted(t Ticket) { w.ticket = t; w.settle() }
func (w *bucketWaiter) Expired(r string) { w.reason = r; w.settle() }

func (w *bucketWaiter) settle() {
	if w.s.callbacks.Add(1)%8 == 0 { // now and then, as runtime.Stack is slow
		var buf [8 << 10]byte
		if strings.Contains(string(buf[:runtime.Stack(buf[:], false)]), "(*Controller).Acquire(") {
			w.s.fail("callback from inside Acquire")
		}
	}
	if w.calls.Add(1) != 1 {
		w.s.fail("second callback")
		return
	}
	w.done <- w
}

// run holds t like a command on a worker, then releases it.
func (s *bucketStress) run(sb *stressBucket, t Ticket, rng *rand.Rand) {
	n := sb.inFlight.Add(1)
	if sb.fixedCap > 0 && n > int64(sb.fixedCap) {
		s.fail("max_concurrent exceeded")
	}
	if t.Pool() == Read {
		s.c.Settle(t, rng.Int64N(2048), s.now())
	}
	if rng.IntN(4) == 0 {
		runtime.Gosched()
	}
	sb.inFlight.Add(-1)
	s.c.Release(t, s.now())
}

func (s *bucketStress) worker(id, commands int) {
	rng := rand.New(rand.NewPCG(uint64(id), 7))
	done := make(chan *bucketWaiter, 1)
	for range commands {
		sb := s.slots[rng.IntN(len(s.slots))].Load()
		pool, bytes := Pool(rng.IntN(2)), Estimate
		if pool == Write {
			bytes = rng.Int64N(5000) // now and then more than the budget
		}
		w := &bucketWaiter{s: s, done: done}
		t, d, _ := s.c.Acquire(pool, sb.b, w, bytes, s.now())
		switch d {
		case Admitted:
			s.admitted.Add(1)
			s.run(sb, t, rng)
			continue
		case Rejected:
			s.rejected.Add(1)
			continue
		case TooLarge:
			s.tooLarge.Add(1)
			continue
		}
		s.queued.Add(1)
		if rng.IntN(4) == 0 {
			if rng.IntN(2) == 0 {
				runtime.Gosched()
			}
			if s.c.Cancel(w, s.now()) {
				s.canceledN.Add(1)
				s.mu.Lock()
				s.canceled = append(s.canceled, w)
				s.mu.Unlock()
				continue
			}
		}
		switch got := <-done; {
		case got != w:
			s.fail("callback for another waiter")
		case got.reason == "":
			s.granted.Add(1)
			s.run(sb, got.ticket, rng)
		case strings.HasSuffix(got.reason, " was deleted"):
			s.deleted.Add(1)
		default:
			s.expired.Add(1)
		}
	}
}

// change sets one random limit.
func (s *bucketStress) change(rng *rand.Rand) {
	now := s.now()
	switch rng.IntN(5) {
	case 0, 1:
		i := 2 + rng.IntN(len(s.slots)-2)
		l := BucketLimits{MaxConcurrent: 1 + rng.IntN(stressMaxCap), MaxQueued: rng.IntN(6),
			QueueTimeout: time.Duration(rng.IntN(4)) * time.Millisecond}
		s.c.SetBucketLimits(s.slots[i].Load().b, l, now)
	case 2:
		if err := s.c.SetMaxInflightBytes(int64(rng.IntN(3))*4000, now); err != nil {
			s.fail(err.Error())
		}
	case 3:
		s.c.SetFIFO(rng.IntN(2) == 0, now)
	case 4:
		s.c.Resize(1+rng.IntN(5), 1+rng.IntN(5))
	}
}

// replace removes a random bucket and puts a new one in its place.
func (s *bucketStress) replace(rng *rand.Rand) {
	i := rng.IntN(len(s.slots))
	old := s.slots[i].Load()
	l := BucketLimits{MaxConcurrent: old.fixedCap}
	if l.MaxConcurrent == 0 {
		l.MaxConcurrent = 1 + rng.IntN(stressMaxCap)
	}
	nb := s.c.AddBucket("new", l)
	s.slots[i].Store(&stressBucket{b: nb, fixedCap: old.fixedCap})
	s.c.RemoveBucket(old.b, s.now())
	s.mu.Lock()
	s.retired = append(s.retired, old)
	s.mu.Unlock()
}

func TestBucketStress(t *testing.T) {
	const workers = 8
	commands := 60_000
	if testing.Short() {
		commands = 6_000
	}
	c, err := New(Options{NodeTickets: 6, MaxQueueDepth: 12, QueueTimeout: 3 * time.Millisecond,
		MaxInflightBytes: 4000, DisableProbe: true, Probe: probe.Options{Min: 1, Max: 5, Initial: 4}})
	if err != nil {
		t.Fatal(err)
	}
	s := &bucketStress{c: c}
	for i := range s.slots {
		l := BucketLimits{MaxConcurrent: 2 + i%2}
		if i >= 2 {
			l = BucketLimits{MaxConcurrent: 1 + i%stressMaxCap, MaxQueued: 3}
		}
		b := c.AddBucket("b", l)
		fixed := 0
		if i < 2 {
			fixed = l.MaxConcurrent
		}
		s.slots[i].Store(&stressBucket{b: b, fixedCap: fixed})
	}
	stop := make(chan struct{})
	var bg sync.WaitGroup
	background(&bg, stop, func() {
		s.clock.Add(int64(time.Millisecond))
		c.Tick(s.now())
		time.Sleep(50 * time.Microsecond)
	})
	rng1, rng2 := rand.New(rand.NewPCG(3, 4)), rand.New(rand.NewPCG(5, 6))
	background(&bg, stop, func() { s.change(rng1); time.Sleep(20 * time.Microsecond) })
	background(&bg, stop, func() { s.replace(rng2); time.Sleep(200 * time.Microsecond) })
	var wg sync.WaitGroup
	for id := range workers {
		wg.Go(func() { s.worker(id, commands) })
	}
	wg.Wait()
	close(stop)
	bg.Wait()
	s.check(t, workers*commands)
}

func (s *bucketStress) check(t *testing.T, commands int) {
	t.Helper()
	st := s.c.Stats()
	t.Logf("admitted %d, queued %d (granted %d, expired %d, bucket deleted %d, canceled %d), rejected %d, too large %d; memory %+v",
		s.admitted.Load(), s.queued.Load(), s.granted.Load(), s.expired.Load(), s.deleted.Load(),
		s.canceledN.Load(), s.rejected.Load(), s.tooLarge.Load(), st.Memory)
	if n := s.bad.Load(); n != 0 {
		t.Errorf("%d bad events, first: %s", n, *s.badWhy.Load())
	}
	checkInvariants(t, st)
	if st.Node.Out != 0 || st.Node.QueueLength != 0 || st.Memory.InflightBytes != 0 || st.Memory.Waiting != 0 {
		t.Errorf("leak at the end: out %d, queued %d, memory %+v", st.Node.Out, st.Node.QueueLength, st.Memory)
	}
	if got := s.admitted.Load() + s.queued.Load() + s.rejected.Load() + s.tooLarge.Load(); got != int64(commands) {
		t.Errorf("%d commands accounted for, want %d", got, commands)
	}
	if q := s.queued.Load(); s.granted.Load()+s.expired.Load()+s.deleted.Load()+s.canceledN.Load() != q {
		t.Errorf("queued %d != granted + expired + deleted + canceled", q)
	}
	if st.Node.Started != s.admitted.Load()+s.granted.Load() || st.Node.Canceled != s.canceledN.Load() ||
		st.Node.Expired != s.expired.Load()+s.deleted.Load() || st.Memory.Rejected != s.tooLarge.Load() {
		t.Errorf("node figures %+v disagree with the workers'", st.Node)
	}
	all := append([]*stressBucket(nil), s.retired...)
	for i := range s.slots {
		all = append(all, s.slots[i].Load())
	}
	for _, sb := range all {
		bs := checkBucket(t, sb.b)
		if bs.InFlight != 0 || bs.QueueLength != 0 {
			t.Errorf("bucket leak: %+v", bs)
		}
		limit := sb.fixedCap
		if limit == 0 {
			limit = stressMaxCap
		}
		if bs.PeakInFlight > int64(limit) {
			t.Errorf("peak in flight %d > %d", bs.PeakInFlight, limit)
		}
	}
	for _, w := range s.canceled {
		if w.calls.Load() != 0 {
			t.Fatal("a canceled waiter got a callback")
		}
	}
	if s.deleted.Load() == 0 || s.expired.Load() == 0 || s.canceledN.Load() == 0 || s.tooLarge.Load() == 0 || st.Memory.Waited == 0 {
		t.Errorf("the run did not exercise every path")
	}
}
