// Package clock is the time the server's hot path reads: time.Now's value
// from one clock read instead of two.
//
// On Linux time.Now reads the wall clock and the monotonic clock, two vDSO
// calls (about 40 ns here); a loop pass reads the time twice, a worker's batch
// four times or more. Now reads the monotonic clock only and adds the time
// since a base taken with time.Now, re-taken every second: the wall clock it
// gives is at most a second's clock slew (microseconds) from time.Now's, and
// a step in the wall clock shows within a second. The monotonic reading is
// exact, so durations and comparisons between its times and time.Now's are
// exact too. memcached keeps its clock the same way: the monotonic time since
// it started, added to the wall time it started at.
package clock

import (
	"sync/atomic"
	"time"
)

// rebase is how long a base serves before Now takes a new one.
const rebase = time.Second

var base atomic.Pointer[time.Time]

func init() { take() }

// take makes the current time the base.
func take() *time.Time {
	t := time.Now()
	base.Store(&t)
	return &t
}

// Now returns the current time, with its monotonic reading.
func Now() time.Time {
	b := base.Load()
	d := time.Since(*b)
	if d >= rebase {
		return *take()
	}
	return b.Add(d)
}

// WholeSecond is the start of t's wall-clock second, with t's monotonic
// reading kept (t.Truncate would drop it, and durations from the result
// would then follow steps of the wall clock). A throttle whose seconds
// start at WholeSecond(now) ticks when the wall clock's second turns, as
// do those of the other nodes of a cluster (catalog.Cluster.Tick).
func WholeSecond(t time.Time) time.Time {
	return t.Add(-time.Duration(t.UnixNano() % int64(time.Second)))
}
