package netmem

import "time"

// Settle tells when a connection's socket has stopped receiving, so that
// kvd half-closes it at shutdown only after reading and answering what the
// client sent before: at the signal much of that can still be in the
// socket (its receive queue, and the client's send queue, which drains as
// kvd reads), and a close with input unread resets the connection, which
// can lose replies the client has not read yet.
type Settle struct{ first, quiet time.Time }

// Reset forgets the quiet seen so far: the connection just had input.
func (s *Settle) Reset() { s.quiet = time.Time{} }

// Done reports whether socket fd has had no unread input at every call
// for at least quiet (the first call that finds none starts the count),
// or max has passed since the first call, whatever the client still sends.
// A socket that cannot be asked counts as having none.
func (s *Settle) Done(fd int, now time.Time, quiet, max time.Duration) bool {
	if s.first.IsZero() {
		s.first = now
	}
	if now.Sub(s.first) >= max {
		return true
	}
	if unread(fd) > 0 {
		s.quiet = time.Time{}
		return false
	}
	if s.quiet.IsZero() {
		s.quiet = now
	}
	return now.Sub(s.quiet) >= quiet
}
