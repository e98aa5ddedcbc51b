package server

import (
	"math/bits"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Latency as a tenant feels it, per bucket and command class (read, write),
// in three histograms:
//
//   - end to end: from the moment a command's frame is complete to the moment
//     its reply is written, with throttle parking, the wait for a ticket,
//     execution and the WAL sync included, and GETs answered on the loop from
//     the resident cache included;
//   - parked: the part of it the bucket's throttle held the command;
//   - queued: the part of it the command waited for an ingress ticket.
//
// So when a tenant's p99 grows, the board shows whether its own hard limit
// (parked), the node's tickets (queued) or the work itself grew.
//
// A bucket's histograms are a bucketLatency; a connection records each
// answered command in its latencyLog when the reply is encoded, and the log
// observes them all right after the pass's single write, with one clock
// reading per pass.
//
// The histograms are hand-rolled rather than client_golang Histograms: an
// observation is an index computed with one bit scan and two atomic adds,
// with no float arithmetic, no bucket search and no hot/cold swap, and
// nothing is resolved through a label map on the data path. They are turned
// into const histograms at scrape time (prometheus.MustNewConstHistogram), as
// the rest of kvd's metrics are read at scrape time. latency_test.go measures
// both. Native (sparse) histograms are not used: Prometheus 2.42 ingests them
// only behind --enable-feature=native-histograms and only over the protobuf
// scrape format, so an operator's default Prometheus and `promtool check
// metrics` would see nothing; classic buckets work everywhere.
//
// Bucket layout: upper bounds 2^i µs for i = 0…latencyBounds-1, that is
// 1 µs, 2 µs, 4 µs … 33.6 s, then +Inf. Factor-2 buckets keep the series
// count per bucket and class at 29 (26 bounds, +Inf, _sum, _count) while
// histogram_quantile's linear interpolation stays within a factor of two
// (in practice much closer); 33.6 s covers the longest park
// (max_throttle_wait_ms, default 30 s) and queue wait (default 10 s).

// latencyBounds is the number of finite bucket bounds: 2^0 … 2^25 µs.
const latencyBounds = 26

// latencyKind names one of a bucket's three latency histograms.
type latencyKind uint8

const (
	latencyEndToEnd latencyKind = iota // frame complete → reply written
	latencyParked                      // held by the bucket's throttle
	latencyQueued                      // waiting for an ingress ticket
	numLatencyKinds
)

// latencyHist is a histogram of durations with fixed power-of-two
// microsecond buckets. The zero value is ready; it is safe for concurrent
// use. observe never allocates. A scrape reads the counters one by one, so a
// snapshot taken during observations may count an observation in a bucket
// and not yet in the sum; the count it reports is always the sum of the
// buckets it reports.
type latencyHist struct {
	counts [latencyBounds + 1]atomic.Uint64 // non-cumulative; the last is +Inf
	sumNS  atomic.Int64
}

// latencyIndex is the bucket of d: the smallest i with d ≤ 2^i µs, or
// latencyBounds (+Inf) past the last bound. A negative d (a clock step)
// counts as zero.
func latencyIndex(d time.Duration) int {
	if d <= time.Microsecond {
		return 0
	}
	us := (uint64(d) + 999) / 1000 // ceil: 1001 ns is past the 1 µs bound
	return min(bits.Len64(us-1), latencyBounds)
}

// observe records one duration.
func (h *latencyHist) observe(d time.Duration) {
	h.counts[latencyIndex(d)].Add(1)
	h.sumNS.Add(int64(max(d, 0)))
}

// snapshot returns the cumulative bucket counts keyed by upper bound in
// seconds, the count and the sum in seconds. It allocates (at scrape time
// only): a const histogram keeps the map it is given until it is written.
func (h *latencyHist) snapshot() (buckets map[float64]uint64, count uint64, sum float64) {
	buckets = make(map[float64]uint64, latencyBounds)
	for i := range latencyBounds {
		count += h.counts[i].Load()
		buckets[latencyBound(i)] = count
	}
	count += h.counts[latencyBounds].Load()
	return buckets, count, float64(h.sumNS.Load()) / 1e9
}

// latencyBound is bucket i's upper bound in seconds: 2^i µs.
func latencyBound(i int) float64 { return float64(uint64(1)<<i) / 1e6 }

// latencyShards is how many copies of its histograms a bucket keeps.
// Connections are numbered as they open and observe into copy number mod
// latencyShards; gnet hands connections to its loops round-robin in the
// same order, so with two loops each loop has its own copy and their
// atomic adds never contend for a cache line (they cost ~2% of throughput
// when both loops shared one: docs/performance.md). A scrape sums them.
const latencyShards = 2

// bucketLatency is one bucket's latency histograms, by shard, kind and
// command class (classRead, classWrite). The zero value is ready and safe
// for concurrent use.
type bucketLatency struct {
	shards [latencyShards]latencyShard
}

// latencyShard is one copy of a bucket's histograms, padded so that two
// copies never share a cache line.
type latencyShard struct {
	h [numLatencyKinds][2]latencyHist
	_ [64]byte
}

// command records a finished command in shard: its end-to-end time, and
// the parts of it it spent parked and queued when those are not zero (a
// command that was never parked is not an observation of parking).
func (l *bucketLatency) command(shard, class int, total, parked, queued time.Duration) {
	h := &l.shards[shard%latencyShards].h
	h[latencyEndToEnd][class].observe(total)
	if parked > 0 {
		h[latencyParked][class].observe(parked)
	}
	if queued > 0 {
		h[latencyQueued][class].observe(queued)
	}
}

// mergeInto adds the kind's histogram of the class, over every shard, to
// dst (which nothing observes concurrently).
func (l *bucketLatency) mergeInto(dst *latencyHist, kind latencyKind, class int) {
	for i := range l.shards {
		dst.merge(&l.shards[i].h[kind][class])
	}
}

// pendingLatency is an answered command whose reply is encoded but not yet
// written: its end-to-end observation waits for the write.
type pendingLatency struct {
	lat            *bucketLatency
	class          int
	startNS        int64 // its frame complete, Unix nanoseconds
	parked, queued time.Duration
}

// maxPendingKept bounds the capacity latencyLog keeps between passes, so that
// one huge pipeline does not pin its memory on an idle connection.
const maxPendingKept = 256

// latencyLog holds a connection's commands answered during one loop pass
// until the pass's replies are written, then observes them all with one
// clock reading: "reply written" is the write itself, and the clock is read
// once per pass, not per command. It belongs to the connection's loop and is
// not safe for concurrent use. The zero value is ready; it allocates only
// while growing to the longest pass (up to maxPendingKept entries it keeps).
type latencyLog struct {
	pending []pendingLatency
	shard   int // the connection's copy of the bucket histograms (latencyShards)
}

// add records an answered command of the bucket whose histograms are lat.
func (l *latencyLog) add(lat *bucketLatency, class int, start time.Time, parked, queued time.Duration) {
	if !recordLatency {
		return
	}
	l.pending = append(l.pending, pendingLatency{lat, class, start.UnixNano(), parked, queued})
}

// written observes every recorded command as written at now and empties the
// log.
func (l *latencyLog) written(now time.Time) {
	nowNS := now.UnixNano()
	for i := range l.pending {
		p := &l.pending[i]
		p.lat.command(l.shard, p.class, time.Duration(nowNS-p.startNS), p.parked, p.queued)
	}
	clear(l.pending) // drop the bucket pointers: a deleted bucket is not kept alive
	if cap(l.pending) > maxPendingKept {
		l.pending = nil
		return
	}
	l.pending = l.pending[:0]
}

var (
	descLatency   = desc("kvd_bucket_command_latency_seconds", "End-to-end latency of the bucket's data commands, from the frame complete to the reply written (throttle parking, ticket queueing, execution and WAL sync included), by class (read or write).", "bucket", "class")
	descParked    = desc("kvd_bucket_throttle_park_seconds", "Time the bucket's commands were parked by its throttle, per parked command, by class.", "bucket", "class")
	descQueueWait = desc("kvd_bucket_queue_wait_seconds", "Time the bucket's commands waited for an ingress ticket, per queued command, by class.", "bucket", "class")

	latencyDescs = [numLatencyKinds]*prometheus.Desc{descLatency, descParked, descQueueWait}
	classNames   = [2]string{classRead: "read", classWrite: "write"}
)

// describeLatency sends the latency descriptors (for collector.Describe).
func describeLatency(ch chan<- *prometheus.Desc) {
	for _, d := range latencyDescs {
		ch <- d
	}
}

// collect sends the bucket's latency histograms as const histograms,
// skipping those that never had an observation (a read-only bucket has no
// write series, a bucket never throttled has no parking series).
func (l *bucketLatency) collect(ch chan<- prometheus.Metric, bucket string) {
	for kind := range numLatencyKinds {
		for class := range 2 {
			var h latencyHist
			l.mergeInto(&h, kind, class)
			buckets, count, sum := h.snapshot()
			if count == 0 {
				continue
			}
			ch <- prometheus.MustNewConstHistogram(latencyDescs[kind], count, sum, buckets,
				bucket, classNames[class])
		}
	}
}
