package observe

import (
	"math"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"kvd/latency"
)

// TestCollectPedantic: every series the collector sends matches a
// descriptor it describes (a pedantic registry checks help, labels and
// types), the buckets' series carry their name, and the handler serves the
// text format.
func TestCollectPedantic(t *testing.T) {
	v, n := newView(t, "app", "other")
	b := n.bucket(t, "app")
	b.Throttle().CountCommand()
	n.State(b).Latency.Command(0, latency.Write, time.Millisecond, 0, 0)
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(collector{v})
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for _, mf := range mfs {
		got[mf.GetName()] = len(mf.Metric)
	}
	for name, want := range map[string]int{
		"kvd_bucket_commands_total": 2, "kvd_bucket_command_latency_seconds": 1, "kvd_node_command_latency_seconds": 1,
		"kvd_buckets": 1, "kvd_buckets_exported": 1, "kvd_buffer_bytes": 2, "kvd_connection_pauses_total": 3,
		"kvd_ingress_tickets": 9, "kvd_bucket_in_flight": 2, "kvd_bucket_deadline_window_seconds": 4,
		"kvd_item_cache_bytes": 2, "kvd_pebble_l0_sublevels": 1, "kvd_connections": 1,
	} {
		if got[name] != want {
			t.Errorf("%s: %d series, want %d", name, got[name], want)
		}
	}
	if _, ok := got["kvd_cluster_nodes"]; ok {
		t.Error("kvd_cluster_nodes on a single node")
	}
	v.Executed(true, time.Millisecond)
	rec := httptest.NewRecorder()
	v.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	for _, want := range []string{`kvd_command_duration_seconds_count{class="write"} 1`, `kvd_connections 3`,
		`kvd_bucket_commands_total{bucket="app"} 1`, "go_goroutines "} {
		if !strings.Contains(rec.Body.String(), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

// latencyCollector exposes one latency.Bucket through a registry, as the
// view's collector does.
type latencyCollector struct {
	l      *latency.Bucket
	bucket string
}

func (c latencyCollector) Describe(ch chan<- *prometheus.Desc) { describeLatency(ch) }
func (c latencyCollector) Collect(ch chan<- prometheus.Metric) { collectLatency(ch, c.l, c.bucket) }

// gatherLatency returns the histograms the collector exposes, keyed by
// "name class".
func gatherLatency(t *testing.T, l *latency.Bucket) map[string]*dto.Histogram {
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
	var l latency.Bucket
	if got := gatherLatency(t, &l); len(got) != 0 {
		t.Fatalf("no observations yet, but exported %v", got)
	}
	// Observed through both shards: a scrape sums them.
	l.Command(0, latency.Read, 3*time.Microsecond, 0, 0)
	l.Command(1, latency.Read, 10*time.Millisecond, 9*time.Millisecond, 0)
	l.Command(0, latency.Read, 2*time.Second, time.Second, 500*time.Millisecond)
	l.Command(1, latency.Write, time.Minute, 0, 40*time.Second)
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
		if len(h.Bucket) != latency.Bounds {
			t.Errorf("%s: %d buckets, want %d", name, len(h.Bucket), latency.Bounds)
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
	if last := w[len(w)-1]; last.GetUpperBound() != latency.Bound(latency.Bounds-1) || last.GetCumulativeCount() != 0 {
		t.Errorf("write latency's last finite bucket: %v, want le=%g count 0", last, latency.Bound(latency.Bounds-1))
	}
}

// BenchmarkLatencyCollect is one scrape of one bucket's six histograms.
func BenchmarkLatencyCollect(b *testing.B) {
	var l latency.Bucket
	for i := range 1024 {
		d := time.Duration(1000 << (i % 20))
		l.Command(0, latency.Read, d, d, d)
		l.Command(1, latency.Write, d, d, d)
	}
	ch := make(chan prometheus.Metric, 8)
	b.ReportAllocs()
	for b.Loop() {
		collectLatency(ch, &l, "app")
		for range 6 {
			<-ch
		}
	}
}
