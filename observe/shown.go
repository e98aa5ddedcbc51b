package observe

import (
	"cmp"
	"slices"

	"github.com/prometheus/client_golang/prometheus"

	"kvd/catalog"
	"kvd/latency"
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

// shownBuckets returns the buckets of all whose per-bucket figures are shown,
// given the limit and the node throttle's tick count now (see above).
func shownBuckets(all []*catalog.Bucket, limit int, ticks int64) []*catalog.Bucket {
	if len(all) <= limit {
		return all
	}
	type ranked struct {
		b     *catalog.Bucket
		score int64
	}
	since := ticks - activeWindow
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

// shown is shownBuckets over the node's buckets with its limit now.
func (v *View) shown(all []*catalog.Bucket, front Front) []*catalog.Bucket {
	return shownBuckets(all, front.BucketLimit, v.node.Parts().Throttle.Stats().Ticks)
}

// totals are figures summed over every bucket the node has had.
type totals struct {
	ru, wu, commands, throttled, rejected int64
	lat                                   [2]latency.Hist // end-to-end, by class
}

// add adds one bucket's figures; lat may be nil.
func (n *totals) add(st tenant.BucketStats, lat *latency.Bucket) {
	n.ru += st.RU
	n.wu += st.WU
	n.commands += st.Commands
	n.throttled += st.Throttled
	n.rejected += st.Rejected
	if lat != nil {
		for class := range latency.Class(2) {
			lat.MergeInto(&n.lat[class], latency.EndToEnd, class)
		}
	}
}

// merge adds o's figures.
func (n *totals) merge(o *totals) {
	n.ru, n.wu = n.ru+o.ru, n.wu+o.wu
	n.commands, n.throttled, n.rejected = n.commands+o.commands, n.throttled+o.throttled, n.rejected+o.rejected
	for class := range n.lat {
		n.lat[class].Merge(&o.lat[class])
	}
}

// nodeTotals sums the figures of all (every bucket) and of the deleted ones.
func (v *View) nodeTotals(all []*catalog.Bucket) *totals {
	n := new(totals)
	for _, b := range all {
		n.add(b.Throttle().Stats(), v.node.State(b).Latency)
	}
	v.retired.addTo(n)
	return n
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
func (v *View) collectTotals(ch chan<- prometheus.Metric, all []*catalog.Bucket, shown int) {
	n := v.nodeTotals(all)
	emitGauge(ch, descBuckets, float64(len(all)))
	emitGauge(ch, descBucketsShown, float64(shown))
	emitCounter(ch, descNodeRU, float64(n.ru))
	emitCounter(ch, descNodeWU, float64(n.wu))
	emitCounter(ch, descNodeCommands, float64(n.commands))
	emitCounter(ch, descNodeThrottle, float64(n.throttled))
	emitCounter(ch, descNodeRejected, float64(n.rejected))
	for class := range n.lat {
		if buckets, count, sum := n.lat[class].Snapshot(); count > 0 {
			ch <- prometheus.MustNewConstHistogram(descNodeLatency, count, sum, buckets, latency.ClassNames[class])
		}
	}
}
