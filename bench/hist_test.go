package bench

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// TestHistIndexBounds checks the bucket layout: every value lands in a
// bucket whose bounds contain it, indexes are monotonic, and buckets are at
// most 1/64 of their lower bound wide.
func TestHistIndexBounds(t *testing.T) {
	check := func(v uint64) {
		i := histIndex(v)
		low, width := histBounds(i)
		if v < low || v >= low+width {
			t.Fatalf("value %d in bucket %d = [%d, %d)", v, i, low, low+width)
		}
		if low >= histSubCount && width*histHalf > low {
			t.Fatalf("bucket %d = [%d, +%d) is wider than 1/64 of its bound", i, low, width)
		}
	}
	for v := range uint64(100000) {
		check(v)
	}
	prev := -1
	for e := 0; e < histMaxBits; e++ {
		for _, v := range []uint64{1<<e - 1, 1 << e, 1<<e + 1, 3 << e >> 1} {
			check(min(v, histMax))
		}
		if i := histIndex(1 << e); i <= prev && e > 0 {
			t.Fatalf("index of 2^%d = %d, not above %d", e, i, prev)
		} else {
			prev = i
		}
	}
	if i := histIndex(histMax); i != histBuckets-1 {
		t.Errorf("histIndex(histMax) = %d, want the last bucket %d", i, histBuckets-1)
	}
}

// TestHistogramQuantileAccuracy compares quantiles with the exact order
// statistics of a heavy-tailed sample: the error must stay within the
// layout's bound of 1/128 (plus a nanosecond of rounding).
func TestHistogramQuantileAccuracy(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var h Histogram
	vals := make([]time.Duration, 200000)
	for i := range vals {
		// log-normal around 100µs, with a tail into tens of ms
		vals[i] = time.Duration(math.Exp(rng.NormFloat64()*1.5) * float64(100*time.Microsecond))
		h.Record(vals[i])
	}
	slices.Sort(vals)
	for _, q := range []float64{0, 0.001, 0.1, 0.5, 0.9, 0.99, 0.999, 0.9999, 1} {
		rank := max(int(math.Ceil(q*float64(len(vals)))), 1)
		exact := vals[rank-1]
		got := h.Quantile(q)
		if diff := math.Abs(float64(got - exact)); diff > float64(exact)/128+1 {
			t.Errorf("Quantile(%g) = %v, exact %v: error %.3f%% over 1/128", q, got, exact, 100*diff/float64(exact))
		}
	}
	if h.Count() != uint64(len(vals)) || h.Min() != vals[0] || h.Max() != vals[len(vals)-1] {
		t.Errorf("count/min/max = %d/%v/%v, want %d/%v/%v", h.Count(), h.Min(), h.Max(), len(vals), vals[0], vals[len(vals)-1])
	}
}

func TestHistogramSmallExact(t *testing.T) {
	var h Histogram
	for _, d := range []time.Duration{5, 1, 3, 2, 4} {
		h.Record(d)
	}
	for q, want := range map[float64]time.Duration{0.2: 1, 0.4: 2, 0.5: 3, 0.8: 4, 1: 5} {
		if got := h.Quantile(q); got != want {
			t.Errorf("Quantile(%g) = %v, want %v", q, got, want)
		}
	}
	if h.Mean() != 3 {
		t.Errorf("Mean = %v, want 3ns", h.Mean())
	}
}

func TestHistogramMergeReset(t *testing.T) {
	var a, b, all Histogram
	for i := range 1000 {
		d := time.Duration(i*i) * time.Microsecond
		all.Record(d)
		if i%3 == 0 {
			a.Record(d)
		} else {
			b.Record(d)
		}
	}
	var m Histogram
	m.Merge(&a)
	m.Merge(&b)
	m.Merge(&Histogram{}) // merging an empty histogram changes nothing
	if m != all {
		t.Errorf("merge of parts differs from the whole: count %d vs %d, p99 %v vs %v",
			m.Count(), all.Count(), m.Quantile(0.99), all.Quantile(0.99))
	}
	m.Reset()
	if m != (Histogram{}) {
		t.Error("Reset left state behind")
	}
	if m.Quantile(0.5) != 0 || m.Mean() != 0 {
		t.Error("empty histogram should report zeros")
	}
	m.Record(-time.Second) // clamps to 0
	m.Record(time.Hour)    // beyond the range: last bucket, exact max
	if m.Min() != 0 || m.Max() != time.Hour || m.Quantile(1) != time.Hour {
		t.Errorf("extremes: min %v max %v p100 %v", m.Min(), m.Max(), m.Quantile(1))
	}
}

func BenchmarkHistogramRecord(b *testing.B) {
	var h Histogram
	b.ReportAllocs()
	for i := range b.N {
		h.Record(time.Duration(i&0xfffff) * time.Nanosecond * 97)
	}
}
