package latency

import (
	"math"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

func TestIndex(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want int
	}{
		{-5 * time.Second, 0},
		{0, 0},
		{999, 0},
		{time.Microsecond, 0},
		{time.Microsecond + 1, 1},
		{2 * time.Microsecond, 1},
		{2*time.Microsecond + 1, 2},
		{4 * time.Microsecond, 2},
		{5 * time.Microsecond, 3},
		{time.Millisecond, 10},        // 1000 µs ≤ 1024 µs
		{1025 * time.Microsecond, 11}, // just past 2^10 µs
		{time.Second, 20},             // 10^6 µs ≤ 2^20 µs
		{30 * time.Second, 25},        // max_throttle_wait_ms' default fits
		{33554432 * time.Microsecond, 25},
		{33554433 * time.Microsecond, Bounds}, // +Inf
		{time.Hour, Bounds},
		{math.MaxInt64, Bounds},
	} {
		if got := Index(tc.d); got != tc.want {
			t.Errorf("Index(%v) = %d, want %d", tc.d, got, tc.want)
		}
		// The bucket's bound holds d and the one below does not.
		if i := Index(tc.d); i < Bounds && tc.d > 0 {
			if s := tc.d.Seconds(); s > Bound(i) || (i > 0 && s <= Bound(i-1)) {
				t.Errorf("%v in bucket %d with bounds (%g, %g]", tc.d, i, Bound(i-1), Bound(i))
			}
		}
	}
}

// TestSnapshot: cumulative counts at each bound, +Inf in the count only,
// the sum in seconds; Merge adds every bucket and the sum.
func TestSnapshot(t *testing.T) {
	var h Hist
	for _, d := range []time.Duration{3 * time.Microsecond, 10 * time.Millisecond, 2 * time.Second, time.Minute} {
		h.Observe(d)
	}
	buckets, count, sum := h.Snapshot()
	if count != 4 || math.Abs(sum-62.010003) > 1e-9 || len(buckets) != Bounds {
		t.Fatalf("count %d sum %g, %d buckets; want 4, 62.010003, %d", count, sum, len(buckets), Bounds)
	}
	for bound, want := range map[float64]uint64{1e-6: 0, 4e-6: 1, 0.008192: 1, 0.016384: 2, 1.048576: 2, 2.097152: 3, Bound(Bounds - 1): 3} {
		if buckets[bound] != want {
			t.Errorf("le=%g: %d, want %d (all: %v)", bound, buckets[bound], want, buckets)
		}
	}
	var m Hist
	m.Merge(&h)
	m.Merge(&h)
	if b, count, sum := m.Snapshot(); count != 8 || math.Abs(sum-124.020006) > 1e-9 || b[0.016384] != 4 {
		t.Errorf("merged twice: count %d sum %g le=0.016384 %d; want 8, 124.020006, 4", count, sum, b[0.016384])
	}
}

// TestCommand: a command observes its end-to-end time, and its parked and
// queued parts only when they are not zero; the shards are summed.
func TestCommand(t *testing.T) {
	var l Bucket
	l.Command(0, Read, 3*time.Microsecond, 0, 0)
	l.Command(1, Read, 10*time.Millisecond, 9*time.Millisecond, 0)
	l.Command(0, Read, 2*time.Second, time.Second, 500*time.Millisecond)
	l.Command(1, Write, time.Minute, 0, 40*time.Second)
	for _, c := range []struct {
		name  string
		kind  Kind
		class Class
		count uint64
		sum   float64
	}{
		{"read", EndToEnd, Read, 3, 2.010003},
		{"read parked", Parked, Read, 2, 1.009},
		{"read queued", Queued, Read, 1, 0.5},
		{"write", EndToEnd, Write, 1, 60},
		{"write parked", Parked, Write, 0, 0},
		{"write queued", Queued, Write, 1, 40},
	} {
		_, count, sum := merged(&l, c.kind, c.class).Snapshot()
		if count != c.count || math.Abs(sum-c.sum) > 1e-9 {
			t.Errorf("%s: count %d sum %g, want %d and %g", c.name, count, sum, c.count, c.sum)
		}
	}
}

func TestCommandAllocs(t *testing.T) {
	var l Bucket
	d := 3 * time.Millisecond
	if n := testing.AllocsPerRun(1000, func() {
		l.Command(0, Write, d, d/3, d/3)
		d += 7 * time.Microsecond
	}); n != 0 {
		t.Errorf("Command: %v allocations per run, want 0", n)
	}
}

func TestLog(t *testing.T) {
	if !recording {
		t.Skip("built with kvd_nolatency: the log records nothing")
	}
	var a, b Bucket
	var log Log
	t0 := time.Unix(1000, 0)
	log.Add(&a, Read, t0, 0, 0)
	log.Add(&a, Write, t0.Add(time.Millisecond), 500*time.Microsecond, 0)
	log.Add(&b, Read, t0, 0, 3*time.Millisecond)
	if log.Len() != 3 {
		t.Fatalf("Len %d after three Adds", log.Len())
	}
	log.Written(t0.Add(4 * time.Millisecond))
	if log.Len() != 0 {
		t.Fatalf("%d pending after Written", log.Len())
	}
	for _, c := range []struct {
		name  string
		h     *Hist
		count uint64
		sumNS int64
	}{
		{"a read", merged(&a, EndToEnd, Read), 1, 4e6},
		{"a write", merged(&a, EndToEnd, Write), 1, 3e6},
		{"a write parked", merged(&a, Parked, Write), 1, 5e5},
		{"a read parked", merged(&a, Parked, Read), 0, 0},
		{"b read", merged(&b, EndToEnd, Read), 1, 4e6},
		{"b read queued", merged(&b, Queued, Read), 1, 3e6},
	} {
		_, count, _ := c.h.Snapshot()
		if count != c.count || c.h.sumNS.Load() != c.sumNS {
			t.Errorf("%s: count %d sum %d ns, want %d and %d", c.name, count, c.h.sumNS.Load(), c.count, c.sumNS)
		}
	}
	// A huge pass does not pin its memory.
	for range MaxPendingKept + 1 {
		log.Add(&a, Read, t0, 0, 0)
	}
	log.Written(t0)
	if cap(log.pending) > MaxPendingKept {
		t.Errorf("kept capacity %d after a huge pass, want ≤ %d", cap(log.pending), MaxPendingKept)
	}
}

// TestLogAllocs: a loop pass of 64 answered commands, once the log has
// grown, allocates nothing.
func TestLogAllocs(t *testing.T) {
	var lat Bucket
	var log Log
	now := time.Unix(1000, 0)
	pass := func() {
		for i := range 64 {
			log.Add(&lat, Class(i&1), now, 0, 0)
		}
		now = now.Add(time.Millisecond)
		log.Written(now)
	}
	pass()
	if n := testing.AllocsPerRun(100, pass); n != 0 {
		t.Errorf("a pass of 64 commands: %v allocations, want 0", n)
	}
}

// BenchmarkLatencyLog is the per-command cost of the connection path's
// recording: Add when the reply is encoded, observe after the write.
func BenchmarkLatencyLog(b *testing.B) {
	var lat Bucket
	var log Log
	now := time.Unix(1000, 0)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		log.Add(&lat, Class(i&1), now, 0, 0)
		if i&15 == 15 {
			log.Written(now.Add(time.Duration(i&1023) * time.Microsecond))
		}
	}
}

// benchDurations is a spread of observations from 1 µs to ~1 s.
func benchDurations() []time.Duration {
	ds := make([]time.Duration, 1024)
	for i := range ds {
		ds[i] = time.Duration(1000 << (i % 20))
	}
	return ds
}

// BenchmarkLatencyObserve is the cost on the data path: one observation in
// a hand-rolled histogram.
func BenchmarkLatencyObserve(b *testing.B) {
	var h Hist
	ds := benchDurations()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		h.Observe(ds[i&1023])
	}
}

// BenchmarkLatencyCommand is one finished command that was parked and
// queued: three observations.
func BenchmarkLatencyCommand(b *testing.B) {
	var l Bucket
	ds := benchDurations()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		d := ds[i&1023]
		l.Command(0, Class(i&1), d, d/4, d/4)
	}
}

// BenchmarkLatencyObserveParallel observes from every P into one histogram
// (the worst case: one hot bucket, all connections on it).
func BenchmarkLatencyObserveParallel(b *testing.B) {
	var h Hist
	ds := benchDurations()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			h.Observe(ds[i&1023])
			i++
		}
	})
}

// BenchmarkLatencyClientGolang is the alternative for comparison: a
// client_golang Histogram with the same bounds, handle resolved once. (Only
// this test file imports client_golang; the package uses the standard
// library.)
func BenchmarkLatencyClientGolang(b *testing.B) {
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "x",
		Buckets: prometheus.ExponentialBuckets(1e-6, 2, Bounds)})
	ds := benchDurations()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		h.Observe(ds[i&1023].Seconds())
	}
}

// BenchmarkLatencyClientGolangParallel is the contended client_golang case.
func BenchmarkLatencyClientGolangParallel(b *testing.B) {
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "x",
		Buckets: prometheus.ExponentialBuckets(1e-6, 2, Bounds)})
	ds := benchDurations()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			h.Observe(ds[i&1023].Seconds())
			i++
		}
	})
}

// merged is l's kind histogram of the class summed over its shards.
func merged(l *Bucket, kind Kind, class Class) *Hist {
	h := new(Hist)
	l.MergeInto(h, kind, class)
	return h
}
