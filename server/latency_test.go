package server

import (
	"math"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

func TestLatencyIndex(t *testing.T) {
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
		{33554433 * time.Microsecond, latencyBounds}, // +Inf
		{time.Hour, latencyBounds},
		{math.MaxInt64, latencyBounds},
	} {
		if got := latencyIndex(tc.d); got != tc.want {
			t.Errorf("latencyIndex(%v) = %d, want %d", tc.d, got, tc.want)
		}
		// The bucket's bound holds d and the one below does not.
		if i := latencyIndex(tc.d); i < latencyBounds && tc.d > 0 {
			if s := tc.d.Seconds(); s > latencyBound(i) || (i > 0 && s <= latencyBound(i-1)) {
				t.Errorf("%v in bucket %d with bounds (%g, %g]", tc.d, i, latencyBound(i-1), latencyBound(i))
			}
		}
	}
}

// latencyCollector exposes one bucketLatency through a registry, as the
// server's collector does.
type latencyCollector struct {
	l      *bucketLatency
	bucket string
}

func (c latencyCollector) Describe(ch chan<- *prometheus.Desc) { describeLatency(ch) }
func (c latencyCollector) Collect(ch chan<- prometheus.Metric) { c.l.collect(ch, c.bucket) }

// gatherLatency returns the histograms the collector exposes, keyed by
// "name class".
func gatherLatency(t *testing.T, l *bucketLatency) map[string]*dto.Histogram {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(latencyCollector{l, "app"})
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*dto.Histogram{}
	for _, mf := range mfs {
		for _, m := range mf.Metric {
			labels := map[string]string{}
			for _, lp := range m.Label {
				labels[lp.GetName()] = lp.GetValue()
			}
			if labels["bucket"] != "app" {
				t.Errorf("%s: bucket label %q", mf.GetName(), labels["bucket"])
			}
			out[mf.GetName()+" "+labels["class"]] = m.Histogram
		}
	}
	return out
}

func TestLatencyCollect(t *testing.T) {
	var l bucketLatency
	if got := gatherLatency(t, &l); len(got) != 0 {
		t.Fatalf("no observations yet, but exported %v", got)
	}
	// Observed through both shards: a scrape sums them.
	l.command(0, classRead, 3*time.Microsecond, 0, 0)
	l.command(1, classRead, 10*time.Millisecond, 9*time.Millisecond, 0)
	l.command(0, classRead, 2*time.Second, time.Second, 500*time.Millisecond)
	l.command(1, classWrite, time.Minute, 0, 40*time.Second)
	got := gatherLatency(t, &l)
	for name, want := range map[string]struct {
		count uint64
		sum   float64
	}{
		"kvd_bucket_command_latency_seconds read":  {3, 2.010003},
		"kvd_bucket_throttle_park_seconds read":    {2, 1.009},
		"kvd_bucket_queue_wait_seconds read":       {1, 0.5},
		"kvd_bucket_command_latency_seconds write": {1, 60},
		"kvd_bucket_queue_wait_seconds write":      {1, 40},
	} {
		h := got[name]
		if h == nil {
			t.Errorf("%s: not exported", name)
			continue
		}
		if h.GetSampleCount() != want.count || math.Abs(h.GetSampleSum()-want.sum) > 1e-9 {
			t.Errorf("%s: count %d sum %g, want %d and %g", name, h.GetSampleCount(), h.GetSampleSum(), want.count, want.sum)
		}
		if len(h.Bucket) != latencyBounds {
			t.Errorf("%s: %d buckets, want %d", name, len(h.Bucket), latencyBounds)
		}
	}
	if len(got) != 5 {
		t.Errorf("exported %d histograms, want 5 (never-parked writes are left out)", len(got))
	}
	// Cumulative counts at a few bounds of the read end-to-end histogram.
	cum := map[float64]uint64{}
	for _, b := range got["kvd_bucket_command_latency_seconds read"].Bucket {
		cum[b.GetUpperBound()] = b.GetCumulativeCount()
	}
	for bound, want := range map[float64]uint64{1e-6: 0, 4e-6: 1, 0.008192: 1, 0.016384: 2, 1.048576: 2, 2.097152: 3} {
		if cum[bound] != want {
			t.Errorf("read latency bucket le=%g: %d, want %d (all: %v)", bound, cum[bound], want, cum)
		}
	}
	// A minute is past the last bound: counted, in +Inf only.
	w := got["kvd_bucket_command_latency_seconds write"].Bucket
	if last := w[len(w)-1]; last.GetUpperBound() != latencyBound(latencyBounds-1) || last.GetCumulativeCount() != 0 {
		t.Errorf("write latency's last finite bucket: %v, want le=%g count 0", last, latencyBound(latencyBounds-1))
	}
}

func TestLatencyObserveAllocs(t *testing.T) {
	var l bucketLatency
	d := 3 * time.Millisecond
	if n := testing.AllocsPerRun(1000, func() {
		l.command(0, classWrite, d, d/3, d/3)
		d += 7 * time.Microsecond
	}); n != 0 {
		t.Errorf("command: %v allocations per run, want 0", n)
	}
}

func TestLatencyLog(t *testing.T) {
	var a, b bucketLatency
	var log latencyLog
	t0 := time.Unix(1000, 0)
	log.add(&a, classRead, t0, 0, 0)
	log.add(&a, classWrite, t0.Add(time.Millisecond), 500*time.Microsecond, 0)
	log.add(&b, classRead, t0, 0, 3*time.Millisecond)
	log.written(t0.Add(4 * time.Millisecond))
	if len(log.pending) != 0 {
		t.Fatalf("%d pending after written", len(log.pending))
	}
	for _, c := range []struct {
		name  string
		h     *latencyHist
		count uint64
		sumNS int64
	}{
		{"a read", merged(&a, latencyEndToEnd, classRead), 1, 4e6},
		{"a write", merged(&a, latencyEndToEnd, classWrite), 1, 3e6},
		{"a write parked", merged(&a, latencyParked, classWrite), 1, 5e5},
		{"a read parked", merged(&a, latencyParked, classRead), 0, 0},
		{"b read", merged(&b, latencyEndToEnd, classRead), 1, 4e6},
		{"b read queued", merged(&b, latencyQueued, classRead), 1, 3e6},
	} {
		_, count, _ := c.h.snapshot()
		if count != c.count || c.h.sumNS.Load() != c.sumNS {
			t.Errorf("%s: count %d sum %d ns, want %d and %d", c.name, count, c.h.sumNS.Load(), c.count, c.sumNS)
		}
	}
	// A huge pass does not pin its memory.
	for range maxPendingKept + 1 {
		log.add(&a, classRead, t0, 0, 0)
	}
	log.written(t0)
	if cap(log.pending) > maxPendingKept {
		t.Errorf("kept capacity %d after a huge pass, want ≤ %d", cap(log.pending), maxPendingKept)
	}
}

// TestLatencyLogAllocs: a loop pass of 64 answered commands, once the log
// has grown, allocates nothing.
func TestLatencyLogAllocs(t *testing.T) {
	var lat bucketLatency
	var log latencyLog
	now := time.Unix(1000, 0)
	pass := func() {
		for i := range 64 {
			log.add(&lat, i&1, now, 0, 0)
		}
		now = now.Add(time.Millisecond)
		log.written(now)
	}
	pass()
	if n := testing.AllocsPerRun(100, pass); n != 0 {
		t.Errorf("a pass of 64 commands: %v allocations, want 0", n)
	}
}

// BenchmarkLatencyLog is the per-command cost of the connection path's
// recording: add when the reply is encoded, observe after the write.
func BenchmarkLatencyLog(b *testing.B) {
	var lat bucketLatency
	var log latencyLog
	now := time.Unix(1000, 0)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		log.add(&lat, i&1, now, 0, 0)
		if i&15 == 15 {
			log.written(now.Add(time.Duration(i&1023) * time.Microsecond))
		}
	}
}

// durations is a spread of observations from 1 µs to ~1 s.
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
	var h latencyHist
	ds := benchDurations()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		h.observe(ds[i&1023])
	}
}

// BenchmarkLatencyCommand is one finished command that was parked and
// queued: three observations.
func BenchmarkLatencyCommand(b *testing.B) {
	var l bucketLatency
	ds := benchDurations()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		d := ds[i&1023]
		l.command(0, i&1, d, d/4, d/4)
	}
}

// BenchmarkLatencyObserveParallel observes from every P into one histogram
// (the worst case: one hot bucket, all connections on it).
func BenchmarkLatencyObserveParallel(b *testing.B) {
	var h latencyHist
	ds := benchDurations()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			h.observe(ds[i&1023])
			i++
		}
	})
}

// BenchmarkLatencyClientGolang is the alternative for comparison: a
// client_golang Histogram with the same bounds, handle resolved once.
func BenchmarkLatencyClientGolang(b *testing.B) {
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "x",
		Buckets: prometheus.ExponentialBuckets(1e-6, 2, latencyBounds)})
	ds := benchDurations()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		h.Observe(ds[i&1023].Seconds())
	}
}

// BenchmarkLatencyClientGolangParallel is the contended client_golang case.
func BenchmarkLatencyClientGolangParallel(b *testing.B) {
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "x",
		Buckets: prometheus.ExponentialBuckets(1e-6, 2, latencyBounds)})
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

// BenchmarkLatencyCollect is one scrape of one bucket's six histograms.
func BenchmarkLatencyCollect(b *testing.B) {
	var l bucketLatency
	for _, d := range benchDurations() {
		l.command(0, classRead, d, d, d)
		l.command(1, classWrite, d, d, d)
	}
	ch := make(chan prometheus.Metric, 8)
	b.ReportAllocs()
	for b.Loop() {
		l.collect(ch, "app")
		for range 6 {
			<-ch
		}
	}
}

// merged is l's kind histogram of the class summed over its shards.
func merged(l *bucketLatency, kind latencyKind, class int) *latencyHist {
	h := new(latencyHist)
	l.mergeInto(h, kind, class)
	return h
}
