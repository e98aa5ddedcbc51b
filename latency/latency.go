// Package latency keeps latency as a tenant feels it: per bucket and command
// class (read, write), three histograms of durations,
//
//   - end to end (EndToEnd): from the moment a command's frame is complete to
//     the moment its reply is written, with throttle parking, the wait for a
//     ticket, execution and the WAL sync included, and GETs answered on the
//     loop from the resident cache included;
//   - parked (Parked): the part of it the bucket's throttle held the command;
//   - queued (Queued): the part of it the command waited for an ingress
//     ticket.
//
// So when a tenant's p99 grows, the board shows whether its own hard limit
// (parked), the node's tickets (queued) or the work itself grew.
//
// A bucket's histograms are a Bucket; a connection records each answered
// command in its Log when the reply is encoded, and the log observes them all
// right after the pass's single write, with one clock reading per pass.
//
// The histograms are hand-rolled rather than client_golang Histograms: an
// observation is an index computed with one bit scan and two atomic adds,
// with no float arithmetic, no bucket search and no hot/cold swap, and
// nothing is resolved through a label map on the data path. Package observe
// turns them into const histograms at scrape time, as the rest of kvd's
// metrics are read at scrape time; latency_test.go measures both. Native
// (sparse) histograms are not used: Prometheus 2.42 ingests them only behind
// --enable-feature=native-histograms and only over the protobuf scrape
// format, so an operator's default Prometheus and `promtool check metrics`
// would see nothing; classic buckets work everywhere.
//
// Bucket layout: upper bounds 2^i µs for i = 0…Bounds-1, that is 1 µs, 2 µs,
// 4 µs … 33.6 s, then +Inf. Factor-2 buckets keep the series count per bucket
// and class at 29 (26 bounds, +Inf, _sum, _count) while histogram_quantile's
// linear interpolation stays within a factor of two (in practice much
// closer); 33.6 s covers the longest park (max_throttle_wait_ms, default
// 30 s) and queue wait (default 10 s).
//
// Invariants: recording never allocates once a Log has grown to its longest
// pass, and never reads the clock (time is an argument). Hist and Bucket are
// safe for concurrent use; a Log belongs to one event loop. The package uses
// the standard library only. Building with -tags kvd_nolatency compiles the
// recording out (Log.Add does nothing), for A/B measurements.
package latency

import (
	"math/bits"
	"sync/atomic"
	"time"
)

// Bounds is the number of finite bucket bounds: 2^0 … 2^25 µs.
const Bounds = 26

// Kind names one of a bucket's three latency histograms.
type Kind uint8

const (
	EndToEnd Kind = iota // frame complete → reply written
	Parked               // held by the bucket's throttle
	Queued               // waiting for an ingress ticket
	NumKinds
)

// Class is a data command's class: its ticket pool's.
type Class uint8

const (
	Read  Class = 0
	Write Class = 1
)

// ClassNames are the classes' label values.
var ClassNames = [2]string{Read: "read", Write: "write"}

// Hist is a histogram of durations with fixed power-of-two microsecond
// buckets. The zero value is ready; it is safe for concurrent use. Observe
// never allocates. A snapshot taken during observations may count an
// observation in a bucket and not yet in the sum; the count it reports is
// always the sum of the buckets it reports.
type Hist struct {
	counts [Bounds + 1]atomic.Uint64 // non-cumulative; the last is +Inf
	sumNS  atomic.Int64
}

// Index is the bucket of d: the smallest i with d ≤ 2^i µs, or Bounds (+Inf)
// past the last bound. A negative d (a clock step) counts as zero.
func Index(d time.Duration) int {
	if d <= time.Microsecond {
		return 0
	}
	us := (uint64(d) + 999) / 1000 // ceil: 1001 ns is past the 1 µs bound
	return min(bits.Len64(us-1), Bounds)
}

// Bound is bucket i's upper bound in seconds: 2^i µs.
func Bound(i int) float64 { return float64(uint64(1)<<i) / 1e6 }

// Observe records one duration.
func (h *Hist) Observe(d time.Duration) {
	h.counts[Index(d)].Add(1)
	h.sumNS.Add(int64(max(d, 0)))
}

// Snapshot returns the cumulative bucket counts keyed by upper bound in
// seconds, the count and the sum in seconds. It allocates (at scrape time
// only): a const histogram keeps the map it is given until it is written.
func (h *Hist) Snapshot() (buckets map[float64]uint64, count uint64, sum float64) {
	buckets = make(map[float64]uint64, Bounds)
	for i := range Bounds {
		count += h.counts[i].Load()
		buckets[Bound(i)] = count
	}
	count += h.counts[Bounds].Load()
	return buckets, count, float64(h.sumNS.Load()) / 1e9
}

// Merge adds o's counts into h. h must not be observed concurrently.
func (h *Hist) Merge(o *Hist) {
	for i := range h.counts {
		if v := o.counts[i].Load(); v != 0 {
			h.counts[i].Add(v)
		}
	}
	h.sumNS.Add(o.sumNS.Load())
}

// Shards is how many copies of its histograms a bucket keeps. Connections
// are numbered as they open and observe into copy number mod Shards; gnet
// hands connections to its loops round-robin in the same order, so with two
// loops each loop has its own copy and their atomic adds never contend for a
// cache line (they cost ~2% of throughput when both loops shared one:
// docs/performance.md). A scrape sums them.
const Shards = 2

// Bucket is one bucket's latency histograms, by shard, kind and command
// class. The zero value is ready and safe for concurrent use; it costs
// 1.3 KiB, so a node with many idle buckets makes it at a bucket's first
// command.
type Bucket struct {
	shards [Shards]shard
}

// shard is one copy of a bucket's histograms, padded so that two copies
// never share a cache line.
type shard struct {
	h [NumKinds][2]Hist
	_ [64]byte
}

// Command records a finished command in shard: its end-to-end time, and the
// parts of it it spent parked and queued when those are not zero (a command
// that was never parked is not an observation of parking).
func (l *Bucket) Command(shard int, class Class, total, parked, queued time.Duration) {
	h := &l.shards[shard%Shards].h
	h[EndToEnd][class].Observe(total)
	if parked > 0 {
		h[Parked][class].Observe(parked)
	}
	if queued > 0 {
		h[Queued][class].Observe(queued)
	}
}

// MergeInto adds the kind's histogram of the class, over every shard, to dst
// (which nothing observes concurrently).
func (l *Bucket) MergeInto(dst *Hist, kind Kind, class Class) {
	for i := range l.shards {
		dst.Merge(&l.shards[i].h[kind][class])
	}
}
