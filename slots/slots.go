// Package slots decides which connections the node holds: max_connections
// ordinary ones, first come first served as in memcached, and beyond them a
// system band of system_connections (Couchbase's) kept for privileged
// users, so that a client holding every ordinary slot cannot lock the
// operators and the internal connections out.
//
// A connection the band takes is on probation: it may only log in, and
// only as a privileged user (the server enforces that). Until it starts a
// login it waits in the band's line:
//
//   - it is closed once it has waited a login grace (Expire);
//   - when the band is full, a new connection takes the place of the one
//     that has waited longest (Couchbase's recycle mode, here only for
//     connections that never tried to log in), so that a flood of idle
//     connections cannot keep an operator out: the operator's connection
//     is the newest, and leaves the line as soon as it sends its login.
//
// A connection closed by recycling or expiry gives its place up at once,
// but its descriptor only when its event loop has closed it (Close), which
// under load can take a while. So that the descriptors stay within what the
// open-file limit planned, at most sys such connections may be closing at
// once; past that a new connection is refused rather than recycled. The
// band's connections hold at most 2×sys descriptors.
//
// A connection that has started a login (Settle) or logged in keeps its
// slot until it closes. Slots is safe for concurrent use; its lock is held
// only while the counts and the line change, never while a connection is
// closed or a line logged. Refusals, recycling and expiry are logged at
// most once a second each (lograte).
package slots

import (
	"container/list"
	"io"
	"log/slog"
	"sync"
	"time"

	"kvd/internal/lograte"
)

// LoginGrace is how long a band connection may wait before it starts its
// login.
const LoginGrace = 5 * time.Second

// Slots is a node's connection slots. Log must be set before use.
type Slots struct {
	Log *slog.Logger

	mu    sync.Mutex
	stats Stats
	line  list.List // band connections (*entry) that have not started a login, oldest first

	refusedLog, recycledLog lograte.Limiter
}

// Stats are the slots held and what became of the connections past
// max_connections.
type Stats struct {
	Ordinary, Band int   // slots held
	Closing        int   // band connections recycled or expired whose Close has not come yet
	Refused        int64 // connections refused: max_connections and the band full, none in line (or sys closing)
	Recycled       int64 // band connections closed for a newer one (Open)
	Expired        int64 // band connections closed after the login grace (Expire)
}

// Slot is what a connection holds: none (refused), an ordinary slot, or
// one in the band. Its zero value holds nothing.
type Slot struct {
	kind uint8
	e    *entry // the band's: its place in the line, and whether recycling released it
}

const (
	none uint8 = iota
	ordinary
	band
)

// entry is a band connection; its fields are guarded by Slots.mu.
type entry struct {
	since    time.Time
	conn     io.Closer
	remote   string
	inLine   *list.Element // its place in Slots.line; nil once out of it
	released bool          // recycled or expired: its place was freed then, its descriptor at Close (Stats.Closing)
}

// Held reports whether the slot was granted.
func (s Slot) Held() bool { return s.kind != none }

// Band reports whether the slot is in the system band.
func (s Slot) Band() bool { return s.kind == band }

// Open grants conn, from remote, a slot: an ordinary one while fewer than
// max are held, else one in a band of size sys. With the band full, the
// band connection that has waited longest without starting a login is
// closed to make room (recycled); with none waiting the slot is not held
// and conn is to be refused.
func (s *Slots) Open(now time.Time, max, sys int, conn io.Closer, remote string) Slot {
	var slot Slot
	var recycled *entry
	s.mu.Lock()
	switch st := &s.stats; {
	case st.Ordinary < max:
		st.Ordinary++
		slot.kind = ordinary
	case st.Band < sys || sys > 0 && s.line.Len() > 0 && st.Closing < sys:
		if st.Band >= sys {
			recycled = s.line.Front().Value.(*entry)
			s.release(recycled)
			st.Recycled++
		}
		st.Band++
		slot = Slot{kind: band, e: &entry{since: now, conn: conn, remote: remote}}
		slot.e.inLine = s.line.PushBack(slot.e)
	default:
		st.Refused++
	}
	s.mu.Unlock()
	switch {
	case recycled != nil:
		_ = recycled.conn.Close()
		s.warn(&s.recycledLog, now, "system band full: closed the connection that waited longest without a login",
			max, sys, "remote", recycled.remote, "for", remote)
	case !slot.Held():
		s.warn(&s.refusedLog, now, "connection refused", max, sys, "remote", remote)
	}
	return slot
}

// warn logs msg at most once a second (l), with the limits in force.
func (s *Slots) warn(l *lograte.Limiter, now time.Time, msg string, max, sys int, args ...any) {
	if ok, more := l.Allow(now); ok {
		s.Log.Warn(msg, append(args, "reason", "max_connections", "limit", max,
			"system_connections", sys, "more_not_logged", more)...)
	}
}

// Settle takes a band connection out of the line: it has started a login,
// which either makes it a privileged connection or closes it.
func (s *Slots) Settle(slot Slot) {
	if slot.kind != band {
		return
	}
	s.mu.Lock()
	s.leaveLine(slot.e)
	s.mu.Unlock()
}

// Close frees the slot of a connection that closed.
func (s *Slots) Close(slot Slot) {
	s.mu.Lock()
	switch slot.kind {
	case ordinary:
		s.stats.Ordinary--
	case band:
		if slot.e.released {
			s.stats.Closing--
		} else {
			s.leaveLine(slot.e)
			s.stats.Band--
		}
	}
	s.mu.Unlock()
}

// Expire closes the band connections that have waited in the line for
// the login grace at now, and returns how many.
func (s *Slots) Expire(now time.Time) int {
	var expired []io.Closer
	s.mu.Lock()
	for s.line.Len() > 0 {
		e := s.line.Front().Value.(*entry)
		if now.Sub(e.since) < LoginGrace {
			break
		}
		s.release(e)
		expired = append(expired, e.conn)
	}
	s.stats.Expired += int64(len(expired))
	s.mu.Unlock()
	for _, c := range expired {
		_ = c.Close()
	}
	if len(expired) > 0 {
		s.Log.Info("closed system-band connections", "count", len(expired), "reason", "no login within the grace", "grace", LoginGrace)
	}
	return len(expired)
}

// Stats returns the slots held and the counts.
func (s *Slots) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stats
}

// release gives e's place up now: its connection is being closed, and
// holds its descriptor until Close.
func (s *Slots) release(e *entry) {
	s.leaveLine(e)
	e.released = true
	s.stats.Band--
	s.stats.Closing++
}

// leaveLine takes e out of the line if it is in it.
func (s *Slots) leaveLine(e *entry) {
	if e.inLine != nil {
		s.line.Remove(e.inLine)
		e.inLine = nil
	}
}
