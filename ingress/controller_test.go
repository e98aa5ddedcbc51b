package ingress

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"kvd/probe"
)

var t0 = time.Unix(1_700_000_000, 0)

// at returns t0 plus d, the fake clock of these tests.
func at(d time.Duration) time.Time { return t0.Add(d) }

// events records callbacks in the order they happen, as "name:granted" or
// "name:expired:reason".
type events struct{ log []string }

func (e *events) take() string {
	s := strings.Join(e.log, " ")
	e.log = e.log[:0]
	return s
}

// recWaiter is a Waiter that records its callbacks and keeps a granted ticket.
type recWaiter struct {
	name   string
	ev     *events
	ticket Ticket
	calls  int
}

func (w *recWaiter) Granted(t Ticket) {
	w.ticket, w.calls = t, w.calls+1
	w.ev.log = append(w.ev.log, w.name+":granted")
}

func (w *recWaiter) Expired(reason string) {
	w.calls++
	w.ev.log = append(w.ev.log, w.name+":expired:"+reason)
}

// newTest returns a Controller with fixed pools of the given sizes.
func newTest(t *testing.T, read, write int, o Options) (*Controller, *events) {
	t.Helper()
	o.DisableProbe = true
	c, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	c.Resize(read, write)
	return c, &events{}
}

func mustAcquire(t *testing.T, c *Controller, p Pool, w Waiter, now time.Time, want Decision) Ticket {
	t.Helper()
	tk, d, reason := c.Acquire(p, nil, w, 0, now)
	if d != want {
		t.Fatalf("Acquire(%v) = %v %q, want %v", p, d, reason, want)
	}
	if (d == Admitted) != tk.Valid() {
		t.Fatalf("Acquire(%v) = %v with ticket valid=%v", p, d, tk.Valid())
	}
	return tk
}

// checkInvariants fails unless the figures that must add up do, for every pool.
func checkInvariants(t *testing.T, s Stats) {
	t.Helper()
	for _, ps := range []struct {
		name string
		s    PoolStats
	}{{"read", s.Read}, {"write", s.Write}, {"ingress", s.Node}} {
		p := ps.s
		if want := max(p.Total-p.Out, 0); p.Available != want {
			t.Errorf("%s: available %d with out %d of total %d", ps.name, p.Available, p.Out, p.Total)
		}
		if p.AddedToQueue != p.RemovedFromQueue+p.QueueLength {
			t.Errorf("%s: added %d != removed %d + queued %d", ps.name, p.AddedToQueue, p.RemovedFromQueue, p.QueueLength)
		}
		if p.Started != p.Finished+p.Out {
			t.Errorf("%s: started %d != finished %d + out %d", ps.name, p.Started, p.Finished, p.Out)
		}
		if p.StaleReleases != 0 {
			t.Errorf("%s: %d stale releases", ps.name, p.StaleReleases)
		}
	}
	if s.Node.Out != s.Read.Out+s.Write.Out {
		t.Errorf("node out %d != read %d + write %d", s.Node.Out, s.Read.Out, s.Write.Out)
	}
}

func TestOptions(t *testing.T) {
	var o Options
	o.EnsureDefaults()
	if o.NodeTickets != 1_000_000 || o.MaxQueueDepth != 100_000 || o.QueueTimeout != 10*time.Second ||
		o.Probe.Min != probe.DefaultMin || o.Probe.Max != probe.DefaultMax {
		t.Fatalf("defaults: %+v", o)
	}
	for _, tc := range []struct {
		name string
		edit func(*Options)
		want string // "" = valid
	}{
		{"defaults", func(*Options) {}, ""},
		{"no queue", func(o *Options) { o.MaxQueueDepth = NoQueue }, ""},
		{"node tickets", func(o *Options) { o.NodeTickets = -1 }, "ingress: invalid options: NodeTickets -1 < 1"},
		{"queue depth", func(o *Options) { o.MaxQueueDepth = -2 }, "MaxQueueDepth -2 < -1"},
		{"timeout", func(o *Options) { o.QueueTimeout = -time.Second }, "QueueTimeout -1s <= 0"},
		{"probe", func(o *Options) { o.Probe.Max = 2 }, "ingress: invalid options: Probe: probe: invalid options: Max 2 < Min 4"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var o Options
			o.EnsureDefaults()
			tc.edit(&o)
			err := o.Validate()
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !errors.Is(err, ErrInvalidOptions) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate() = %v, want %q wrapping ErrInvalidOptions", err, tc.want)
			}
			if _, err := New(o); !errors.Is(err, ErrInvalidOptions) {
				t.Fatalf("New: %v", err)
			}
		})
	}
}

func TestNewStartsAtProberSizes(t *testing.T) {
	c, err := New(Options{Probe: probe.Options{GOMAXPROCS: 8}})
	if err != nil {
		t.Fatal(err)
	}
	s := c.Stats()
	if s.Read.Total != 8 || s.Write.Total != 8 || s.Node.Total != DefaultNodeTickets {
		t.Fatalf("sizes %d/%d node %d, want 8/8 (2×GOMAXPROCS split 1:1) and %d",
			s.Read.Total, s.Write.Total, s.Node.Total, DefaultNodeTickets)
	}
	if Read.String() != "read" || Write.String() != "write" || Queued.String() != "queued" {
		t.Fatal("String")
	}
}

func TestAdmitUntilExhaustedThenQueue(t *testing.T) {
	c, ev := newTest(t, 2, 3, Options{})
	var held []Ticket
	for range 2 {
		held = append(held, mustAcquire(t, c, Read, nil, at(0), Admitted))
	}
	a := &recWaiter{name: "a", ev: ev}
	mustAcquire(t, c, Read, a, at(time.Millisecond), Queued)
	// The write pool is independent.
	wt := mustAcquire(t, c, Write, nil, at(0), Admitted)
	if !wt.Valid() || wt.Pool() != Write || wt.Queued() || wt.Exempt() {
		t.Fatalf("write ticket %+v", wt)
	}
	s := c.Stats()
	if s.Read.Out != 2 || s.Read.Available != 0 || s.Read.QueueLength != 1 || s.Read.AddedToQueue != 1 ||
		s.Write.Out != 1 || s.Write.Available != 2 || s.Node.Out != 3 || s.Node.QueueLength != 1 {
		t.Fatalf("stats %+v", s)
	}
	checkInvariants(t, s)
	// A released ticket goes to the waiter, stamped with the release time.
	c.Release(held[0], at(5*time.Millisecond))
	if got := ev.take(); got != "a:granted" {
		t.Fatalf("events %q", got)
	}
	if !a.ticket.Queued() || a.ticket.Pool() != Read || !a.ticket.AcquiredAt().Equal(at(5*time.Millisecond)) {
		t.Fatalf("granted ticket %+v", a.ticket)
	}
	s = c.Stats()
	if s.Read.Out != 2 || s.Read.QueueLength != 0 || s.Read.RemovedFromQueue != 1 || s.Read.Started != 3 ||
		s.Read.Finished != 1 || s.Read.TotalTimeQueuedUS != 4000 || s.Read.TotalTimeProcessingUS != 5000 {
		t.Fatalf("after release %+v", s.Read)
	}
	checkInvariants(t, s)
}

func TestFIFOGrants(t *testing.T) {
	c, ev := newTest(t, 1, 1, Options{})
	held := mustAcquire(t, c, Write, nil, at(0), Admitted)
	var ws []*recWaiter
	for i := range 5 {
		w := &recWaiter{name: fmt.Sprint(i), ev: ev}
		ws = append(ws, w)
		mustAcquire(t, c, Write, w, at(time.Duration(i)), Queued)
	}
	// Cancelling one in the middle keeps the others' order.
	if !c.Cancel(ws[2], at(time.Second)) || c.Cancel(ws[2], at(time.Second)) {
		t.Fatal("Cancel of a queued waiter must return true once")
	}
	var order []string
	for i := 0; i < 5; i++ {
		c.Release(held, at(2*time.Second))
		got := ev.take()
		if got == "" {
			break
		}
		order = append(order, got)
		name := strings.TrimSuffix(got, ":granted")
		for _, w := range ws {
			if w.name == name {
				held = w.ticket
			}
		}
	}
	if got := strings.Join(order, " "); got != "0:granted 1:granted 3:granted 4:granted" {
		t.Fatalf("grant order %q", got)
	}
	if ws[2].calls != 0 {
		t.Fatal("a canceled waiter got a callback")
	}
	s := c.Stats()
	if s.Write.Canceled != 1 || s.Write.RemovedFromQueue != 5 || s.Write.Out != 0 {
		t.Fatalf("stats %+v", s.Write)
	}
	checkInvariants(t, s)
}

func TestCancelAfterGrantReturnsFalse(t *testing.T) {
	c, ev := newTest(t, 1, 1, Options{})
	held := mustAcquire(t, c, Read, nil, at(0), Admitted)
	w := &recWaiter{name: "w", ev: ev}
	mustAcquire(t, c, Read, w, at(0), Queued)
	c.Release(held, at(time.Millisecond))
	if c.Cancel(w, at(2*time.Millisecond)) {
		t.Fatal("Cancel of a granted waiter returned true")
	}
	if c.Cancel(&recWaiter{}, at(0)) {
		t.Fatal("Cancel of a waiter never queued returned true")
	}
	// The waiter owns the ticket and releases it.
	c.Release(w.ticket, at(3*time.Millisecond))
	s := c.Stats()
	if s.Read.Canceled != 0 || s.Read.Out != 0 || ev.take() != "w:granted" {
		t.Fatalf("stats %+v", s.Read)
	}
	checkInvariants(t, s)
}

func TestStaleReleases(t *testing.T) {
	c, _ := newTest(t, 2, 2, Options{})
	a := mustAcquire(t, c, Read, nil, at(0), Admitted)
	c.Release(a, at(0))
	b := mustAcquire(t, c, Read, nil, at(0), Admitted) // reuses a's slot
	c.Release(a, at(0))                                // stale: must not free b
	c.Release(Ticket{}, at(0))
	if s := c.Stats().Read; s.Out != 1 || s.Finished != 1 || s.StaleReleases != 2 {
		t.Fatalf("after stale releases %+v", s)
	}
	c.Release(b, at(0))
	e := c.StartExempt(Write, nil, at(0))
	c.Release(e, at(0))
	c.Release(e, at(0))
	s := c.Stats()
	if s.Read.Out != 0 || s.Read.Finished != 2 || s.Write.ExemptFinished != 1 || s.Write.StaleReleases != 1 {
		t.Fatalf("stats %+v", s)
	}
}

func TestExemptNeverWaits(t *testing.T) {
	c, _ := newTest(t, 1, 1, Options{NodeTickets: 1, MaxQueueDepth: NoQueue})
	n := mustAcquire(t, c, Read, nil, at(0), Admitted)
	var ex []Ticket
	for range 3 {
		e := c.StartExempt(Write, nil, at(0))
		if !e.Valid() || !e.Exempt() || e.Pool() != Write {
			t.Fatalf("exempt ticket %+v", e)
		}
		ex = append(ex, e)
	}
	for _, e := range ex {
		c.Release(e, at(time.Millisecond))
	}
	c.Release(n, at(time.Millisecond))
	s := c.Stats()
	if s.Write.ExemptStarted != 3 || s.Write.ExemptFinished != 3 || s.Write.Started != 0 ||
		s.Write.Finished != 0 || s.Node.ExemptStarted != 3 || s.Node.Finished != 1 {
		t.Fatalf("stats %+v", s)
	}
	checkInvariants(t, s)
}

// TryAcquire admits as Acquire does, and a refusal changes and counts nothing.
func TestTryAcquireCountsNothing(t *testing.T) {
	c, ev := newTest(t, 1, 1, Options{})
	b := c.AddBucket("b", BucketLimits{MaxConcurrent: 1, MaxQueued: 1})
	tk, ok := c.TryAcquire(Write, b, 10, at(0))
	if !ok {
		t.Fatal("TryAcquire refused with a free ticket")
	}
	if _, d, _ := c.Acquire(Write, b, &recWaiter{name: "w", ev: ev}, 10, at(0)); d != Queued {
		t.Fatalf("Acquire past max_concurrent: %v, want Queued", d)
	}
	if _, ok := c.TryAcquire(Write, b, 10, at(0)); ok {
		t.Fatal("TryAcquire admitted past max_concurrent")
	}
	before := c.Stats()
	if _, ok := c.TryAcquire(Write, b, 10, at(0)); ok { // max_queued full too
		t.Fatal("TryAcquire admitted with the bucket's queue full")
	}
	if after := c.Stats(); after != before || b.Stats().NumQueueFull != 0 {
		t.Fatalf("a refused TryAcquire changed the stats: %+v -> %+v (bucket %+v)", before, after, b.Stats())
	}
	c.Release(tk, at(1))
	if got := ev.take(); got != "w:granted" {
		t.Fatalf("after the release: %q", got)
	}
}
