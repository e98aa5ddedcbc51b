package ingress

import (
	"slices"
	"time"
)

// WindowSize is how many execution times a Window keeps (seed 004's performance
// window; SPEC section 7: the last 256 per bucket and command class).
const WindowSize = 256

// A Window holds the last WindowSize execution times it was given, in two fixed
// arrays: ring in insertion order, so that the oldest sample is known, and sorted in
// ascending order, so that a percentile is one index. Add evicts the oldest sample
// once the window is full: it finds the evicted value and the new one in sorted by
// binary search and shifts the elements between the two positions by one with a
// single copy, so an insert costs O(log 256) comparisons plus at most 255 moved
// values and never allocates. Percentile is O(1).
//
// The zero Window is empty and ready to use. A Window is a fixed 4 KiB value: pass
// pointers. It is not safe for concurrent use; BucketDeadline guards its windows with
// a mutex.
type Window struct {
	ring   [WindowSize]time.Duration // insertion order; ring[next] is the oldest once full
	sorted [WindowSize]time.Duration // sorted[:n] ascending
	n      int                       // samples held, ≤ WindowSize
	next   int                       // ring index the next sample goes to
}

// Len returns how many samples the window holds (at most WindowSize).
func (w *Window) Len() int { return w.n }

// Add records one execution time, evicting the oldest once the window is full.
// Negative durations count as 0.
func (w *Window) Add(d time.Duration) {
	d = max(d, 0)
	if w.n < WindowSize {
		i, _ := slices.BinarySearch(w.sorted[:w.n], d)
		copy(w.sorted[i+1:w.n+1], w.sorted[i:w.n])
		w.sorted[i] = d
		w.ring[w.next] = d
		w.n++
		w.next = (w.next + 1) % WindowSize
		return
	}
	old := w.ring[w.next]
	w.ring[w.next] = d
	w.next = (w.next + 1) % WindowSize
	w.replace(old, d)
}

// replace removes one sample equal to old from the full sorted array and inserts d,
// moving only the elements between the two positions.
func (w *Window) replace(old, d time.Duration) {
	s := w.sorted[:]
	i, _ := slices.BinarySearch(s, old) // s[i] == old: old is in the window
	switch {
	case d > old:
		// d goes after the elements < d; old's slot opens at i, so shift (i, j) left.
		j, _ := slices.BinarySearch(s, d)
		copy(s[i:j-1], s[i+1:j])
		s[j-1] = d
	case d < old:
		// d goes before the elements ≥ d; shift [j, i) right into old's slot.
		j, _ := slices.BinarySearch(s, d)
		copy(s[j+1:i+1], s[j:i])
		s[j] = d
	default:
		// Same value: the sorted array does not change.
	}
}

// Percentile returns the p-th percentile (nearest rank: the smallest sample with at
// least p% of the samples at or below it) and true, or 0 and false while the window is
// empty. p is clamped to [1, 100].
func (w *Window) Percentile(p int) (time.Duration, bool) {
	if w.n == 0 {
		return 0, false
	}
	return w.sorted[rank(p, w.n)], true
}

// rank is the index in a sorted slice of n samples of the p-th percentile by nearest
// rank: ceil(p·n/100) − 1, within [0, n−1].
func rank(p, n int) int {
	p = min(max(p, 1), 100)
	return (p*n+99)/100 - 1
}

// AppendSorted appends the samples in ascending order to dst.
func (w *Window) AppendSorted(dst []time.Duration) []time.Duration {
	return append(dst, w.sorted[:w.n]...)
}
