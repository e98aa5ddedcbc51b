package ingress

import (
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
