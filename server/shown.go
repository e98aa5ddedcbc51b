package server

import (
	"cmp"
	"slices"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"kvd/catalog"
	"kvd/tenant"
)

// Per-bucket figures on a node with many buckets. /metrics and STAT
// bucket_details (without a name) show every bucket while there are at
// most metrics_bucket_limit of them (default 1000): a small node looks as
// it always did. Past that, they show only the buckets active in the last
// activeWindow seconds (units used, commands, throttle decisions or
// rejections, or a connection that has the bucket selected), the most
// active first (tenant.BucketThrottle.Activity: about the last 16 s), at
// most metrics_bucket_limit of them. So a node with 100,000 mostly idle
// buckets scrapes in milliseconds, not seconds, and a busy tenant is
// always on the page. Node totals (kvd_buckets, kvd_node_*_total, the
// node-wide latency histogram) count every bucket, deleted ones included,
// so that they never go backwards. Any one bucket stays one request away:
// STAT "bucket_details NAME", and "bucket_details *" lists them all.

// activeWindow is how long, in throttle ticks (seconds), a bucket stays
// "active" after its last activity: longer than any scrape interval and
// than the rate() windows of the shipped board, so a tenant that pauses
// does not drop off the page between two scrapes.
const activeWindow = 300

// shownBuckets returns the buckets of all whose per-bucket figures are
// shown, given the limit (see above).
func (s *Server) shownBuckets(all []*catalog.Bucket, limit int) []*catalog.Bucket {
	if len(all) <= limit {
		return all
	}
	type ranked struct {
		b     *catalog.Bucket
		score int64
	}
	since := s.throttle.Stats().Ticks - activeWindow
	var active []ranked
	for _, b := range all {
		thr := b.Throttle()
		score, last := thr.Activity()
		if last > 0 && last > since || thr.Clients() > 0 {
			active = append(active, ranked{b, score})
		}
	}
	slices.SortFunc(active, func(x, y ranked) int {
		return cmp.Or(cmp.Compare(y.score, x.score), cmp.Compare(x.b.Name(), y.b.Name()))
	})
	out := make([]*catalog.Bucket, 0, min(len(active), limit))
	for _, r := range active[:min(len(active), limit)] {
		out = append(out, r.b)
	}
	return out
}

// nodeTotals are figures summed over every bucket the node has had.
type nodeTotals struct {
	ru, wu, commands, throttled, rejected int64
	lat                                   [2]latencyHist // end-to-end, by class
}

// add adds one bucket's figures.
func (n *nodeTotals) add(b *catalog.Bucket) {
	st := b.Throttle().Stats()
	n.addStats(st)
	if l := stateOf(b).lat.Load(); l != nil {
		for class := range 2 {
			l.mergeInto(&n.lat[class], latencyEndToEnd, class)
		}
	}
}

func (n *nodeTotals) addStats(st tenant.BucketStats) {
	n.ru += st.RU
	n.wu += st.WU
	n.commands += st.Commands
	n.throttled += st.Throttled
	n.rejected += st.Rejected
}

// merge adds o's counts into h. h must not be observed concurrently.
func (h *latencyHist) merge(o *latencyHist) {
	for i := range h.counts {
		if v := o.counts[i].Load(); v != 0 {
			h.counts[i].Add(v)
		}
	}
	h.sumNS.Add(o.sumNS.Load())
}

// retiredTotals keep the figures of deleted buckets in the node totals.
type retiredTotals struct {
	mu sync.Mutex
	n  nodeTotals // guarded by mu
}

func (r *retiredTotals) add(b *catalog.Bucket) {
	r.mu.Lock()
	r.n.add(b)
	r.mu.Unlock()
}

// addTo adds the deleted buckets' figures to n.
func (r *retiredTotals) addTo(n *nodeTotals) {
	r.mu.Lock()
	defer r.mu.Unlock()
	n.ru, n.wu = n.ru+r.n.ru, n.wu+r.n.wu
	n.commands, n.throttled, n.rejected = n.commands+r.n.commands, n.throttled+r.n.throttled, n.rejected+r.n.rejected
	for class := range 2 {
		n.lat[class].merge(&r.n.lat[class])
	}
}

var (
	descBuckets      = desc("kvd_buckets", "Buckets on the node.")
	descBucketsShown = desc("kvd_buckets_exported", "Buckets whose per-bucket series this scrape carries: all while there are at most metrics_bucket_limit, else the most active ones.")
	descNodeRU       = desc("kvd_node_read_units_total", "Read units charged to every bucket of the node (deleted ones included).")
	descNodeWU       = desc("kvd_node_write_units_total", "Write units charged to every bucket of the node (deleted ones included).")
	descNodeCommands = desc("kvd_node_commands_total", "Data commands executed for every bucket of the node (deleted ones included).")
	descNodeThrottle = desc("kvd_node_throttled_total", "Throttle decisions against the commands of every bucket of the node.")
	descNodeRejected = desc("kvd_node_rejected_total", "Commands of every bucket rejected by throttling or admission.")
	descNodeLatency  = desc("kvd_node_command_latency_seconds", "End-to-end latency of the node's data commands, every bucket's kvd_bucket_command_latency_seconds summed (deleted buckets included), by class.", "class")
)

func describeTotals(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descBuckets, descBucketsShown, descNodeRU, descNodeWU,
		descNodeCommands, descNodeThrottle, descNodeRejected, descNodeLatency} {
		ch <- d
	}
}

// collectTotals sends the node totals over all (every bucket) and the
// number of buckets shown.
func (s *Server) collectTotals(ch chan<- prometheus.Metric, all []*catalog.Bucket, shown int) {
	var n nodeTotals
	for _, b := range all {
		n.add(b)
	}
	s.retired.addTo(&n)
	emitGauge(ch, descBuckets, float64(len(all)))
	emitGauge(ch, descBucketsShown, float64(shown))
	emitCounter(ch, descNodeRU, float64(n.ru))
	emitCounter(ch, descNodeWU, float64(n.wu))
	emitCounter(ch, descNodeCommands, float64(n.commands))
	emitCounter(ch, descNodeThrottle, float64(n.throttled))
	emitCounter(ch, descNodeRejected, float64(n.rejected))
	for class := range 2 {
		if buckets, count, sum := n.lat[class].snapshot(); count > 0 {
			ch <- prometheus.MustNewConstHistogram(descNodeLatency, count, sum, buckets, classNames[class])
		}
	}
}
