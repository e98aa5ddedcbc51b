package bench

import (
	"math"
	"math/bits"
	"time"
)

// Histogram layout: values (nanoseconds) below 2^histSubBits have a bucket
// each; above, every power of two [2^k, 2^(k+1)) is split into histHalf equal
// buckets, so a bucket is never wider than 1/64 of its lower bound. Values
// above histMax are clamped into the last bucket (and still count for Max).
const (
	histSubBits  = 7
	histSubCount = 1 << histSubBits // 128
	histHalf     = histSubCount / 2 // 64 buckets per power of two
	histMaxBits  = 40               // 2^40 ns, about 18 minutes
	histMax      = 1<<histMaxBits - 1
	histBuckets  = (histMaxBits-histSubBits)*histHalf + histSubCount
)

// Histogram is a latency histogram with log-linear buckets in the manner of
// HdrHistogram: exact below 128 ns, then 64 buckets per power of two, which
// bounds the relative error of a quantile to 1/128 (the answer is the
// middle of its bucket). It covers 0 to about 18 minutes; Min, Max and Mean
// are exact.
//
// The zero value is an empty histogram ready to use. It is a fixed 18 KiB
// array: pass pointers. It is not safe for concurrent use.
type Histogram struct {
	counts   [histBuckets]uint64
	total    uint64
	sum      float64 // nanoseconds, for Mean
	min, max uint64  // exact extremes in ns; meaningful when total > 0
	lo, hi   int     // non-zero counts lie in [lo, hi]; lo > hi when empty
}

// histIndex returns the bucket of v (nanoseconds, at most histMax).
func histIndex(v uint64) int {
	if v < histSubCount {
		return int(v)
	}
	e := bits.Len64(v) - histSubBits // >= 1
	return e*histHalf + int(v>>uint(e))
}

// histBounds returns the lowest value of bucket i and the bucket's width.
func histBounds(i int) (low, width uint64) {
	if i < histSubCount {
		return uint64(i), 1
	}
	e := uint(i/histHalf - 1)
	m := uint64(i%histHalf + histHalf)
	return m << e, 1 << e
}

// Record adds one observation. Negative durations count as 0.
func (h *Histogram) Record(d time.Duration) {
	v := uint64(max(d, 0))
	if h.total == 0 || v < h.min {
		h.min = v
	}
	if h.total == 0 || v > h.max {
		h.max = v
	}
	i := histIndex(min(v, histMax))
	h.counts[i]++
	if h.total == 0 {
		h.lo, h.hi = i, i
	} else {
		h.lo, h.hi = min(h.lo, i), max(h.hi, i)
	}
	h.total++
	h.sum += float64(v)
}

// Merge adds every observation of o to h.
func (h *Histogram) Merge(o *Histogram) {
	if o.total == 0 {
		return
	}
	for i := o.lo; i <= o.hi; i++ {
		h.counts[i] += o.counts[i]
	}
	if h.total == 0 {
		h.lo, h.hi, h.min, h.max = o.lo, o.hi, o.min, o.max
	} else {
		h.lo, h.hi = min(h.lo, o.lo), max(h.hi, o.hi)
		h.min, h.max = min(h.min, o.min), max(h.max, o.max)
	}
	h.total += o.total
	h.sum += o.sum
}

// Reset empties h, touching only the buckets in use.
func (h *Histogram) Reset() {
	if h.total > 0 {
		clear(h.counts[h.lo : h.hi+1])
	}
	h.total, h.sum, h.min, h.max, h.lo, h.hi = 0, 0, 0, 0, 0, 0
}

// Count is the number of observations.
func (h *Histogram) Count() uint64 { return h.total }

// Min is the smallest observation, 0 when empty.
func (h *Histogram) Min() time.Duration { return time.Duration(h.min) }

// Max is the largest observation, 0 when empty.
func (h *Histogram) Max() time.Duration { return time.Duration(h.max) }

// Mean is the average observation, 0 when empty.
func (h *Histogram) Mean() time.Duration {
	if h.total == 0 {
		return 0
	}
	return time.Duration(h.sum / float64(h.total))
}

// Quantile returns the value below or at which a fraction q (0..1) of the
// observations lie: the middle of the bucket holding the observation of rank
// ceil(q·count), clamped to [Min, Max]; Quantile(1) is exactly Max. It
// returns 0 when h is empty.
func (h *Histogram) Quantile(q float64) time.Duration {
	if h.total == 0 {
		return 0
	}
	q = min(max(q, 0), 1)
	rank := max(uint64(math.Ceil(q*float64(h.total))), 1)
	if rank >= h.total {
		return time.Duration(h.max)
	}
	var seen uint64
	for i := h.lo; i <= h.hi; i++ {
		seen += h.counts[i]
		if seen >= rank {
			low, width := histBounds(i)
			v := min(max(low+width/2, h.min), h.max)
			return time.Duration(v)
		}
	}
	return time.Duration(h.max)
}
