package ingress

import (
	"container/heap"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// refPercentile is the nearest-rank percentile of samples by sorting a copy.
func refPercentile(samples []time.Duration, p int) time.Duration {
	s := slices.Clone(samples)
	slices.Sort(s)
	k := int(float64(p)/100*float64(len(s))+0.999999999) - 1
	return s[max(k, 0)]
}

// lastSamples returns the last n elements of s.
func lastSamples(s []time.Duration, n int) []time.Duration {
	return s[max(len(s)-n, 0):]
}

func TestWindowEmpty(t *testing.T) {
	var w Window
	if d, ok := w.Percentile(90); ok || d != 0 {
		t.Fatalf("empty window: Percentile = %v, %v; want 0, false", d, ok)
	}
	if d, ok := w.Mean(); ok || d != 0 {
		t.Fatalf("empty window: Mean = %v, %v; want 0, false", d, ok)
	}
}

func TestWindowPercentiles(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		out := make([]time.Duration, len(v))
		for i, x := range v {
			out[i] = time.Duration(x) * time.Millisecond
		}
		return out
	}
	tests := []struct {
		name    string
		samples []time.Duration
		p       int
		want    time.Duration
	}{
		{"one sample", ms(7), 50, 7 * time.Millisecond},
		{"p50 of 4", ms(4, 1, 3, 2), 50, 2 * time.Millisecond},
		{"p99 of 4", ms(4, 1, 3, 2), 99, 4 * time.Millisecond},
		{"p90 of 10", ms(10, 9, 8, 7, 6, 5, 4, 3, 2, 1), 90, 9 * time.Millisecond},
		{"p91 of 10", ms(10, 9, 8, 7, 6, 5, 4, 3, 2, 1), 91, 10 * time.Millisecond},
		{"duplicates", ms(5, 5, 5, 1), 50, 5 * time.Millisecond},
		{"negative is 0", []time.Duration{-3, 2}, 50, 0},
		{"p clamped low", ms(3, 1, 2), 0, time.Millisecond},
		{"p clamped high", ms(3, 1, 2), 150, 3 * time.Millisecond},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var w Window
			for _, s := range tc.samples {
				w.Add(s)
			}
			got, ok := w.Percentile(tc.p)
			if !ok || got != tc.want {
				t.Fatalf("Percentile(%d) = %v, %v; want %v", tc.p, got, ok, tc.want)
			}
		})
	}
}

// TestWindowMatchesReference inserts random samples (many duplicates, so that
// eviction meets equal values) and compares the window with a sorted copy of the
// last 256 inserts and every percentile with the sort-based reference.
func TestWindowMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, spread := range []int{3, 100, 1 << 30} {
		var w Window
		var all []time.Duration
		for i := range 2000 {
			d := time.Duration(rng.IntN(spread))
			w.Add(d)
			all = append(all, d)
			checkWindow(t, &w, all)
			if i%97 == 0 {
				for p := 1; p <= 100; p++ {
					got, _ := w.Percentile(p)
					if want := refPercentile(lastSamples(all, WindowSize), p); got != want {
						t.Fatalf("spread %d insert %d: p%d = %v, want %v", spread, i, p, got, want)
					}
				}
			}
		}
	}
}

// checkWindow fails unless w holds exactly a sorted copy of the last WindowSize of
// all.
func checkWindow(t *testing.T, w *Window, all []time.Duration) {
	t.Helper()
	want := slices.Clone(lastSamples(all, WindowSize))
	for i := range want {
		want[i] = max(want[i], 0)
	}
	slices.Sort(want)
	if got := w.AppendSorted(nil); !slices.Equal(got, want) {
		t.Fatalf("after %d inserts: window %v, want %v", len(all), got, want)
	}
	if w.Len() != len(want) {
		t.Fatalf("Len = %d, want %d", w.Len(), len(want))
	}
	var sum time.Duration
	for _, d := range want {
		sum += d
	}
	if m, ok := w.Mean(); !ok || m != sum/time.Duration(len(want)) {
		t.Fatalf("after %d inserts: Mean = %v, want %v", len(all), m, sum/time.Duration(len(want)))
	}
}

func TestWindowAddDoesNotAllocate(t *testing.T) {
	var w Window
	i := 0
	allocs := testing.AllocsPerRun(1000, func() {
		w.Add(time.Duration(i * 7919 % 1000))
		i++
	})
	if allocs != 0 {
		t.Fatalf("Add allocates %v times per call", allocs)
	}
}

func BenchmarkWindowAdd(b *testing.B) {
	var w Window
	rng := rand.New(rand.NewPCG(3, 4))
	vals := make([]time.Duration, 4096)
	for i := range vals {
		vals[i] = time.Duration(rng.IntN(10_000_000))
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		w.Add(vals[i%len(vals)])
	}
}

// FuzzDeadlineLedger drives two buckets on one gate with a random program of admits,
// completions, expiries and setting changes, and checks after every step that each
// pool's ledger equals the demand of the grants still held (so it is never negative,
// and never above the largest capacity admitted under but for grants made to a
// bucket with nothing in flight), that each bucket's count of commands in flight
// equals its grants held, that both return to exactly zero once every grant is given
// back, and that every window equals a sorted copy of the last 256 successful
// execution times of its bucket and class.
func FuzzDeadlineLedger(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10})
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2})
	f.Add(slices.Repeat([]byte{16, 33, 50, 67, 84, 101, 118, 135, 152}, 80))
	f.Fuzz(func(t *testing.T, prog []byte) {
		m := newLedgerModel(t)
		for i := 0; i+1 < len(prog); i += 2 {
			m.step(prog[i], prog[i+1])
			m.check()
		}
		m.drain()
	})
}

// ledgerModel is the fuzz test's reference: the grants held and every window's
// inserts.
type ledgerModel struct {
	t        *testing.T
	gate     DeadlineGate
	buckets  [2]*BucketDeadline
	held     []heldGrant
	inserts  [2][numPools][]time.Duration
	maxLimit [numPools]int64
	now      time.Time
}

type heldGrant struct {
	bucket int
	g      Grant
}

func newLedgerModel(t *testing.T) *ledgerModel {
	m := &ledgerModel{t: t, now: dt0}
	for i := range m.buckets {
		b, err := NewBucketDeadline(&m.gate, DeadlineSettings{Deadline: time.Duration(i+1) * time.Millisecond, Percentile: 90, ExpectedExecution: 300 * time.Microsecond})
		if err != nil {
			t.Fatal(err)
		}
		m.buckets[i] = b
	}
	return m
}

// step runs one instruction: op selects the action, arg its parameters.
func (m *ledgerModel) step(op, arg byte) {
	bi := int(op>>7) & 1
	b := m.buckets[bi]
	m.now = m.now.Add(time.Duration(arg) * 10 * time.Microsecond)
	switch op % 5 {
	case 0, 1: // admit, some commands having waited before Admit
		class, capacity := Pool(arg&1), int(arg>>1)%5
		arrival := m.now.Add(-time.Duration(arg>>4) * 100 * time.Microsecond)
		g, ok, retry := b.Admit(class, capacity, arrival, m.now)
		m.maxLimit[class] = max(m.maxLimit[class], int64(capacity)*Micro)
		if ok {
			m.held = append(m.held, heldGrant{bi, g})
		} else if retry <= 0 {
			m.t.Fatalf("refused without a retry estimate")
		}
	case 2, 3: // complete the arg-th held grant, successful unless arg is odd
		if len(m.held) == 0 {
			return
		}
		k := int(arg) % len(m.held)
		h := m.held[k]
		m.held = slices.Delete(m.held, k, k+1)
		exec := time.Duration(int(op)*37+int(arg)*101) * time.Microsecond
		m.buckets[h.bucket].Done(h.g, exec, arg%2 == 0, m.now)
		if arg%2 == 0 {
			m.inserts[h.bucket][h.g.Pool()] = append(m.inserts[h.bucket][h.g.Pool()], exec)
		}
	case 4: // expire or release the oldest held grant, or change a setting
		if arg%3 != 2 && len(m.held) > 0 {
			h := m.held[0]
			m.held = m.held[1:]
			if arg%3 == 0 {
				m.buckets[h.bucket].Expire(h.g)
			} else {
				m.buckets[h.bucket].Release(h.g)
			}
			return
		}
		s := DeadlineSettings{Deadline: time.Duration(arg%4) * time.Millisecond, Percentile: 50 + int(arg)%50, ExpectedExecution: time.Duration(arg) * time.Microsecond}
		if err := b.SetSettings(s); err != nil {
			m.t.Fatal(err)
		}
	}
}

// check compares the ledgers, the buckets' commands in flight and the windows with
// the model. A ledger stays within the largest capacity admitted under (plus a Micro
// of rounding per grant) but for the grants made to a bucket with nothing in flight.
func (m *ledgerModel) check() {
	var want, alone [numPools]int64
	var inflight [2][numPools]int64
	for _, h := range m.held {
		p := h.g.Pool()
		want[p] += h.g.Demand() // every held grant holds its demand
		if h.g.Deadline() > 0 { // a grant made without a deadline holds nothing
			inflight[h.bucket][p]++
		}
		alone[p] += 1
		if h.g.Alone() {
			alone[p] += h.g.Demand()
		}
	}
	for p := range numPools {
		got := m.gate.Accepted(p)
		if got != want[p] || got < 0 || got > m.maxLimit[p]+alone[p] {
			m.t.Fatalf("%s ledger %d, held grants %d, largest limit %d + alone %d", p, got, want[p], m.maxLimit[p], alone[p])
		}
		for bi, b := range m.buckets {
			if n := b.classes[p].inflight.Load(); n != inflight[bi][p] {
				m.t.Fatalf("bucket %d %s: %d in flight, model %d", bi, p, n, inflight[bi][p])
			}
			ref := slices.Clone(lastSamples(m.inserts[bi][p], WindowSize))
			slices.Sort(ref)
			if got := b.AppendSorted(nil, p); !slices.Equal(got, ref) {
				m.t.Fatalf("bucket %d %s window %v, want %v", bi, p, got, ref)
			}
		}
	}
	if s := m.gate.StaleReleases(); s != 0 {
		m.t.Fatalf("%d stale releases", s)
	}
}

// drain completes every held grant; the ledgers must then be exactly zero.
func (m *ledgerModel) drain() {
	for _, h := range m.held {
		m.buckets[h.bucket].Done(h.g, time.Millisecond, false, m.now)
	}
	m.held = nil
	for p := range numPools {
		if a := m.gate.Accepted(p); a != 0 {
			m.t.Fatalf("%s ledger %d after every grant was given back", p, a)
		}
		for bi, b := range m.buckets {
			if n := b.classes[p].inflight.Load(); n != 0 {
				m.t.Fatalf("bucket %d %s: %d in flight after every grant was given back", bi, p, n)
			}
		}
	}
}

// TestDeadlineQueueModel runs the gate in front of a simulated pool: 8 tickets, one
// FIFO queue, execution times uniform in [1, 3] ms (mean 2 ms, so the pool completes
// 4000 commands/s), Poisson arrivals at a multiple of that, deadline 50 ms at p90;
// Done is called when each command completes, so the window learns. The figures the
// issue asks of the real server must hold in the model: below capacity (0.5×) the
// gate refuses < 0.1%; at 1.5× and 2× ≥ 95% of admitted commands complete within the
// deadline and goodput stays at least that of 0.5× (no collapse).
func TestDeadlineQueueModel(t *testing.T) {
	const capacity, n = 8, 20000
	d := 50 * time.Millisecond
	var good05 float64
	for _, load := range []float64{0.5, 1, 1.5, 2} {
		var g DeadlineGate
		b := newDeadlineBucket(t, &g, DeadlineSettings{Deadline: d, Percentile: 90, ExpectedExecution: 2 * time.Millisecond})
		rng := rand.New(rand.NewPCG(7, uint64(load*100)))
		var free [capacity]time.Time // when each ticket is free again
		for i := range free {
			free[i] = dt0
		}
		var running completions
		now, rejected, within := dt0, 0, 0
		for range n {
			now = now.Add(time.Duration(rng.ExpFloat64() / (load * 4000) * float64(time.Second)))
			for running.Len() > 0 && !running[0].at.After(now) {
				c := heap.Pop(&running).(completion)
				b.Done(c.g, c.exec, true, c.at)
			}
			gr, ok, _ := b.Admit(Write, capacity, now, now)
			if !ok {
				rejected++
				continue
			}
			k := 0 // FIFO: the command takes the ticket that frees first
			for i := range free {
				if free[i].Before(free[k]) {
					k = i
				}
			}
			exec := time.Millisecond + time.Duration(rng.Int64N(int64(2*time.Millisecond)))
			end := maxTime(free[k], now).Add(exec)
			free[k] = end
			heap.Push(&running, completion{end, exec, gr})
			if end.Sub(now) <= d {
				within++
			}
		}
		admitted := n - rejected
		frac, rej := float64(within)/float64(admitted), float64(rejected)/n
		good := float64(within) / now.Sub(dt0).Seconds()
		t.Logf("load %.1f×: rejected %.2f%%, within %.2f%% of admitted, goodput %.0f/s", load, 100*rej, 100*frac, good)
		switch {
		case load == 0.5 && rej >= 0.001:
			t.Errorf("load 0.5×: rejected %.3f%%, want < 0.1%%", 100*rej)
		case load == 0.5:
			good05 = good
		case load >= 1.5 && (frac < 0.95 || good < good05):
			t.Errorf("load %.1f×: within %.2f%%, goodput %.0f/s; want ≥ 95%% and ≥ %.0f/s", load, 100*frac, good, good05)
		}
		for running.Len() > 0 {
			c := heap.Pop(&running).(completion)
			b.Done(c.g, c.exec, true, c.at)
		}
		if g.Accepted(Write) != 0 {
			t.Fatalf("load %.1f×: ledger %d after the run", load, g.Accepted(Write))
		}
	}
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// completion is a command of TestDeadlineQueueModel running in the simulated pool.
type completion struct {
	at   time.Time
	exec time.Duration
	g    Grant
}

// completions is a min-heap of completions by time.
type completions []completion

func (h completions) Len() int           { return len(h) }
func (h completions) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h completions) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *completions) Push(x any)        { *h = append(*h, x.(completion)) }
func (h *completions) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
