// Package lograte keeps a log line that one client can make the server
// write again and again (a connection refused, a connection closed for a
// bad frame) from flooding the log: at most one such line a second, each
// saying how many were left out since the one before.
package lograte

import (
	"sync/atomic"
	"time"
)

// Limiter allows one line a second. The zero value is ready; it is safe
// for concurrent use and never blocks (the event loops call it).
type Limiter struct {
	next    atomic.Int64 // UnixNano before which no line is allowed
	dropped atomic.Int64 // lines not allowed since the last one
}

// Allow reports whether a line may be written at now and, if so, how many
// were not since the last one allowed.
func (l *Limiter) Allow(now time.Time) (ok bool, dropped int64) {
	next, t := l.next.Load(), now.UnixNano()
	if t < next || !l.next.CompareAndSwap(next, t+int64(time.Second)) {
		l.dropped.Add(1)
		return false, 0
	}
	return true, l.dropped.Swap(0)
}
