package gauge

import (
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"
)

func TestBelow(t *testing.T) {
	tests := []struct {
		name           string
		value          int64
		limit, pending int64
		want           bool
	}{
		{"empty, one unit under 10", 0, 10, 1, true},
		{"last unit fits", 9, 10, 1, true},
		{"at the limit", 10, 10, 1, false},
		{"over the limit (carry-over)", 25, 10, 1, false},
		{"pending fits exactly", 6, 10, 4, true},
		{"pending one too many", 7, 10, 4, false},
		{"pending 0 counts as 1", 10, 10, 0, false},
		{"negative pending counts as 1", 9, 10, -5, true},
		{"limit 0 admits nothing", 0, 0, 1, false},
		{"limit 0 admits nothing, pending 0", 0, 0, 0, false},
		{"unlimited", 1 << 40, Unlimited, 1 << 20, true},
		{"any negative limit is unlimited", 5, -7, 1, true},
		{"oversize command runs in an empty second", 0, 10, 50, true},
		{"oversize command takes the rest of a second", 9, 10, 50, true},
		{"oversize command waits for room", 10, 10, 50, false},
		{"oversize under limit 0 never runs", 0, 0, 50, false},
		{"huge pending does not overflow", 0, 1 << 62, 1<<63 - 1, true},
		{"huge value does not overflow", 1<<63 - 1, 1<<63 - 1, 1, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var g Gauge
			g.Add(tt.value)
			if got := g.Below(tt.limit, tt.pending); got != tt.want {
				t.Errorf("value %d: Below(%d, %d) = %v, want %v", tt.value, tt.limit, tt.pending, got, tt.want)
			}
		})
	}
}

func TestAddIgnoresNonPositive(t *testing.T) {
	var g Gauge
	for _, u := range []int64{3, 0, -2, 4} {
		g.Add(u)
	}
	if got := g.Value(); got != 7 {
		t.Fatalf("Value() = %d, want 7", got)
	}
}

func TestTick(t *testing.T) {
	tests := []struct {
		name           string
		value, limit   int64
		wantRet, wantV int64
	}{
		{"under the limit resets", 7, 10, 7, 0},
		{"at the limit resets", 10, 10, 10, 0},
		{"over the limit carries over", 25, 10, 25, 15},
		{"unlimited resets", 25, Unlimited, 25, 0},
		{"limit 0 resets (a debt could never be paid)", 25, 0, 25, 0},
		{"empty stays empty", 0, 10, 0, 0},
		{"missed ticks: n times the limit", 25, 2 * 10, 25, 5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var g Gauge
			g.Add(tt.value)
			if got := g.Tick(tt.limit); got != tt.wantRet {
				t.Errorf("Tick(%d) = %d, want %d", tt.limit, got, tt.wantRet)
			}
			if got := g.Value(); got != tt.wantV {
				t.Errorf("after Tick(%d): Value() = %d, want %d", tt.limit, got, tt.wantV)
			}
		})
	}
}

// runSeconds drives one-unit-per-check commands of the given size against a gauge limited
// to limit, as the throttle does (check with pending, charge actual), for the given number
// of seconds, offering more commands than the limit allows. It returns the units delivered
// in each second.
func runSeconds(limit, pending, actual int64, seconds int) []int64 {
	var g Gauge
	delivered := make([]int64, seconds)
	for s := range delivered {
		for range 10 * (limit + actual) {
			if g.Below(limit, pending) {
				g.Add(actual)
				delivered[s] += actual
			}
		}
		g.Tick(limit)
	}
	return delivered
}

func TestLimitDeliversExactlyL(t *testing.T) {
	for _, limit := range []int64{1, 2, 7, 1000} {
		for s, got := range runSeconds(limit, 1, 1, 10) {
			if got != limit {
				t.Errorf("limit %d, second %d: delivered %d units, want %d", limit, s, got, limit)
			}
		}
	}
}

func TestCarryOverKeepsLongRunRate(t *testing.T) {
	tests := []struct {
		name                   string
		limit, pending, actual int64
		wantRate               int64 // units per second in the long run
	}{
		// A read checked with 1 unit that turns out to cost 3 overshoots; the debt carries.
		{"reads larger than announced", 10, 1, 3, 10},
		// A write bigger than the whole limit takes the rest of a second and carries over.
		{"oversize writes", 10, 25, 25, 10},
		// Writes that fit the limit but not the rest of a second wait: up to p-1 units of
		// each second go unused (here 4+4 run, the third 4 does not fit in 10).
		{"writes that fragment", 10, 4, 4, 8},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			const seconds = 100
			var total int64
			for _, d := range runSeconds(tt.limit, tt.pending, tt.actual, seconds) {
				total += d
			}
			// Over n seconds: n*rate, give or take the debt of one second.
			lo, hi := tt.wantRate*seconds-tt.limit, tt.wantRate*seconds+tt.actual
			if total < lo || total > hi {
				t.Errorf("delivered %d units in %d s, want within [%d, %d]", total, seconds, lo, hi)
			}
		})
	}
}

// TestOversizeNotStarved: a command larger than the limit is parked and retried first
// at every tick (as the server resumes parked commands), while one-unit commands fill
// the rest of each second. The large one must run as soon as its previous debt is
// paid, and the long-run rate must stay at the limit.
func TestOversizeNotStarved(t *testing.T) {
	const limit, big, seconds = 10, 25, 30
	var g Gauge
	var bigRuns, total int64
	for range seconds {
		if g.Below(limit, big) {
			g.Add(big)
			bigRuns++
			total += big
		}
		for g.Below(limit, 1) {
			g.Add(1)
			total++
		}
		g.Tick(limit)
	}
	// The large command alone uses the whole limit: it runs whenever a second has room
	// left (at debts 0 and 5 here), 25 units every 2.5 s: 12 times in 30 s.
	if want := int64(limit * seconds / big); bigRuns != want {
		t.Errorf("large command ran %d times in %d s, want %d", bigRuns, seconds, want)
	}
	if lo, hi := int64(limit*seconds-limit), int64(limit*seconds+big); total < lo || total > hi {
		t.Errorf("delivered %d units in %d s, want within [%d, %d]", total, seconds, lo, hi)
	}
}

func TestConcurrentAdd(t *testing.T) {
	const workers, perWorker = 8, 10000
	var g Gauge
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for range perWorker {
				g.Add(1)
				g.Below(10, 1)
			}
		})
	}
	wg.Wait()
	if got := g.Value(); got != workers*perWorker {
		t.Fatalf("Value() = %d, want %d", got, workers*perWorker)
	}
}

// TestConcurrentAddTick checks that Tick loses no unit charged concurrently: every unit
// added is reported by exactly one Tick(Unlimited) or is still in the gauge.
func TestConcurrentAddTick(t *testing.T) {
	const workers, perWorker = 4, 20000
	var g Gauge
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for range perWorker {
				g.Add(2)
			}
		})
	}
	done := make(chan struct{})
	var ticked int64
	go func() {
		defer close(done)
		for range 1000 {
			ticked += g.Tick(Unlimited)
		}
	}()
	wg.Wait()
	<-done
	if got := ticked + g.Value(); got != 2*workers*perWorker {
		t.Fatalf("ticked+remaining = %d, want %d", got, 2*workers*perWorker)
	}
}

func TestGaugeDoesNotAllocate(t *testing.T) {
	var g Gauge
	w := NewWindow(time.Unix(0, 0))
	now := time.Unix(0, 5e8)
	allocs := testing.AllocsPerRun(1000, func() {
		if g.Below(100, 1) {
			g.Add(1)
		}
		_ = w.NextTickMicros(now)
		if g.Value() > 90 {
			g.Tick(100)
		}
	})
	if allocs != 0 {
		t.Fatalf("throttle check allocates %.1f times, want 0", allocs)
	}
}

func TestWindowAdvance(t *testing.T) {
	t0 := time.Unix(1000, 0)
	w := NewWindow(t0)
	steps := []struct {
		at        time.Duration // since t0
		want      int64
		wantStart time.Duration // since t0
	}{
		{0, 0, 0},
		{999 * time.Millisecond, 0, 0},
		{time.Second, 1, time.Second},
		{time.Second + 3*time.Millisecond, 0, time.Second},
		{2*time.Second + 40*time.Millisecond, 1, 2 * time.Second}, // a late tick keeps the grid
		{5*time.Second + 1, 3, 5 * time.Second},                   // missed ticks are counted
		{4 * time.Second, 0, 5 * time.Second},                     // time before the window
	}
	for _, s := range steps {
		if got := w.Advance(t0.Add(s.at)); got != s.want {
			t.Errorf("Advance(t0+%v) = %d, want %d", s.at, got, s.want)
		}
		if got := w.Start(); !got.Equal(t0.Add(s.wantStart)) {
			t.Errorf("after Advance(t0+%v): Start() = t0+%v, want t0+%v", s.at, got.Sub(t0), s.wantStart)
		}
	}
}

func TestWindowNextTick(t *testing.T) {
	t0 := time.Unix(1000, 0)
	w := NewWindow(t0)
	w.Advance(t0.Add(time.Second)) // the current second is [t0+1s, t0+2s)
	tests := []struct {
		at         time.Duration // since t0
		want       time.Duration
		wantMicros int64
	}{
		{time.Second, time.Second, 1_000_000},
		{time.Second + 1, time.Second - 1, 1_000_000}, // rounded up, never early
		{1500 * time.Millisecond, 500 * time.Millisecond, 500_000},
		{2*time.Second - time.Microsecond, time.Microsecond, 1},
		{2*time.Second - 1, time.Microsecond, 1},
		{2 * time.Second, time.Microsecond, 1},     // tick due: imminent
		{3 * time.Second, time.Microsecond, 1},     // tick late: imminent
		{500 * time.Millisecond, time.Second, 1e6}, // before the window
		{1999*time.Millisecond + 1, time.Millisecond - 1, 1000},
	}
	for _, tt := range tests {
		now := t0.Add(tt.at)
		if got := w.NextTick(now); got != tt.want {
			t.Errorf("NextTick(t0+%v) = %v, want %v", tt.at, got, tt.want)
		}
		got := w.NextTickMicros(now)
		if got != tt.wantMicros {
			t.Errorf("NextTickMicros(t0+%v) = %d, want %d", tt.at, got, tt.wantMicros)
		}
		if got < 1 || got > 1_000_000 {
			t.Errorf("NextTickMicros(t0+%v) = %d, out of (0, 1e6]", tt.at, got)
		}
	}
}

func TestWindowConcurrentAdvance(t *testing.T) {
	t0 := time.Unix(0, 0)
	w := NewWindow(t0)
	var wg sync.WaitGroup
	var total [8]int64
	for i := range total {
		wg.Go(func() {
			for s := 1; s <= 100; s++ {
				total[i] += w.Advance(t0.Add(time.Duration(s) * time.Second))
			}
		})
	}
	wg.Wait()
	var sum int64
	for _, n := range total {
		sum += n
	}
	if sum != 100 {
		t.Fatalf("seconds reported by concurrent Advance = %d, want 100 (each once)", sum)
	}
}

func TestFairShare(t *testing.T) {
	const U = Unlimited
	tests := []struct {
		name     string
		capacity int64
		demands  []int64
		want     []int64
	}{
		{"no demands", 100, nil, []int64{}},
		{"everyone satisfied, leftover unused", 100, []int64{10, 20, 30}, []int64{10, 20, 30}},
		{"exactly enough", 60, []int64{10, 20, 30}, []int64{10, 20, 30}},
		{"equal split", 90, []int64{100, 100, 100}, []int64{30, 30, 30}},
		{"small demand leaves room for the rest", 100, []int64{10, 100, 100}, []int64{10, 45, 45}},
		// 5 and 20 are met, 75 left for two: 38 and 37.
		{"water-filling over two levels", 100, []int64{5, 20, 100, 100}, []int64{5, 20, 38, 37}},
		{"water-filling over three levels", 100, []int64{50, 10, 30, 40}, []int64{30, 10, 30, 30}},
		{"remainder to the first unmet demands", 10, []int64{100, 100, 100}, []int64{4, 3, 3}},
		{"remainder skips met demands", 11, []int64{1, 100, 100, 100}, []int64{1, 4, 3, 3}},
		{"zero demand gets zero", 100, []int64{0, 100}, []int64{0, 100}},
		{"unlimited demands share equally", 100, []int64{U, U}, []int64{50, 50}},
		{"unlimited demand takes what bounded ones leave", 100, []int64{30, U}, []int64{30, 70}},
		{"zero capacity", 0, []int64{5, U}, []int64{0, 0}},
		{"less capacity than demanders", 2, []int64{5, 5, 5}, []int64{1, 1, 0}},
		{"unlimited capacity meets every demand", U, []int64{5, 0, U}, []int64{5, 0, U}},
		// Connection counts do not appear: a bucket with ten connections and one with
		// one, both wanting more than half, get half each.
		{"two hungry tenants", 1000, []int64{900, 600}, []int64{500, 500}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := make([]int64, len(tt.demands))
			FairShare(tt.capacity, tt.demands, out)
			if !slices.Equal(out, tt.want) {
				t.Errorf("FairShare(%d, %v) = %v, want %v", tt.capacity, tt.demands, out, tt.want)
			}
		})
	}
}

func TestFairShareLeavesTailOfOutAlone(t *testing.T) {
	out := []int64{7, 7, 7, 7}
	FairShare(10, []int64{100, 100}, out)
	if want := []int64{5, 5, 7, 7}; !slices.Equal(out, want) {
		t.Fatalf("got %v, want %v", out, want)
	}
}

func TestFairSharePanicsOnShortOut(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("FairShare with a short out did not panic")
		}
	}()
	FairShare(10, []int64{1, 2, 3}, make([]int64, 2))
}

// TestFairShareInvariants checks the max-min properties on random inputs.
func TestFairShareInvariants(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for iter := range 2000 {
		n := r.IntN(12)
		demands := make([]int64, n)
		for i := range demands {
			switch r.IntN(6) {
			case 0:
				demands[i] = Unlimited
			case 1:
				demands[i] = 0
			default:
				demands[i] = r.Int64N(500)
			}
		}
		capacity := r.Int64N(2000)
		out := make([]int64, n)
		FairShare(capacity, demands, out)
		checkFairShare(t, iter, capacity, demands, out)
	}
}

func checkFairShare(t *testing.T, iter int, capacity int64, demands, out []int64) {
	t.Helper()
	var sum, top int64
	allMet := true
	for i, d := range demands {
		if out[i] < 0 || (d >= 0 && out[i] > d) {
			t.Fatalf("#%d: share %d for demand %d out of [0, demand]", iter, out[i], d)
		}
		sum += out[i]
		top = max(top, out[i])
		if d < 0 || out[i] < d {
			allMet = false
		}
	}
	if sum > capacity {
		t.Fatalf("#%d: shares %v of %v sum to %d > capacity %d", iter, out, demands, sum, capacity)
	}
	if !allMet && sum != capacity {
		t.Fatalf("#%d: unmet demands but %d of %d left unallocated: %v of %v", iter, capacity-sum, capacity, out, demands)
	}
	for i, d := range demands {
		if (d < 0 || out[i] < d) && out[i] < top-1 {
			t.Fatalf("#%d: unmet demand %d got %d while another share is %d: %v of %v", iter, d, out[i], top, out, demands)
		}
	}
}

func TestFairShareDoesNotAllocate(t *testing.T) {
	demands := []int64{5, 20, Unlimited, 100, 0, 300}
	out := make([]int64, len(demands))
	if allocs := testing.AllocsPerRun(100, func() { FairShare(250, demands, out) }); allocs != 0 {
		t.Fatalf("FairShare allocates %.1f times, want 0", allocs)
	}
}

func BenchmarkFairShare(b *testing.B) {
	r := rand.New(rand.NewPCG(3, 4))
	demands := make([]int64, 100) // a node with 100 buckets wanting free pool
	for i := range demands {
		demands[i] = r.Int64N(1000)
	}
	out := make([]int64, len(demands))
	b.ReportAllocs()
	for b.Loop() {
		FairShare(25000, demands, out)
	}
}

func BenchmarkBelow(b *testing.B) {
	var g Gauge
	g.Add(500)
	b.ReportAllocs()
	for b.Loop() {
		if !g.Below(1000, 1) {
			b.Fatal("Below(1000, 1) = false at 500")
		}
	}
}

// BenchmarkAddBelow is the throttle's hot path: check a bucket gauge, charge it.
func BenchmarkAddBelow(b *testing.B) {
	var g Gauge
	b.ReportAllocs()
	for b.Loop() {
		if g.Below(1<<62, 1) {
			g.Add(1)
		}
	}
}

// BenchmarkAddBelowParallel is the same check and charge from every P on one shared
// gauge: the worst case, one hot bucket served by all event loops.
func BenchmarkAddBelowParallel(b *testing.B) {
	var g Gauge
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if g.Below(1<<62, 1) {
				g.Add(1)
			}
		}
	})
}

func BenchmarkNextTickMicros(b *testing.B) {
	t0 := time.Unix(1000, 0)
	w := NewWindow(t0)
	now := t0.Add(300 * time.Millisecond)
	b.ReportAllocs()
	for b.Loop() {
		if w.NextTickMicros(now) != 700_000 {
			b.Fatal("wrong next tick")
		}
	}
}

func TestClamp(t *testing.T) {
	for _, tc := range []struct{ value, limit, want int64 }{
		{0, 10, 0}, {5, 10, 5}, {10, 10, 10}, {15, 10, 10}, {15, 0, 0}, {15, Unlimited, 15},
	} {
		var g Gauge
		g.Add(tc.value)
		if old := g.Clamp(tc.limit); old != tc.value {
			t.Errorf("Clamp(%d) on %d returned %d, want the old value", tc.limit, tc.value, old)
		}
		if got := g.Value(); got != tc.want {
			t.Errorf("Clamp(%d) on %d left %d, want %d", tc.limit, tc.value, got, tc.want)
		}
	}
}
