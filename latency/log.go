package latency

import "time"

// pending is an answered command whose reply is encoded but not yet
// written: its end-to-end observation waits for the write.
type pending struct {
	lat            *Bucket
	class          Class
	startNS        int64 // its frame complete, Unix nanoseconds
	parked, queued time.Duration
}

// MaxPendingKept bounds the capacity a Log keeps between passes, so that one
// huge pipeline does not pin its memory on an idle connection.
const MaxPendingKept = 256

// Log holds a connection's commands answered during one loop pass until the
// pass's replies are written, then observes them all with one clock reading:
// "reply written" is the write itself, and the clock is read once per pass,
// not per command. It belongs to the connection's loop and is not safe for
// concurrent use. The zero value is ready; it allocates only while growing to
// the longest pass (up to MaxPendingKept entries it keeps).
type Log struct {
	pending []pending
	// Shard is the connection's copy of the bucket histograms (Shards): its
	// number as connections open, mod Shards.
	Shard int
}

// Add records an answered command of the bucket whose histograms are lat,
// its frame complete at start, parked and queued for those parts of it.
func (l *Log) Add(lat *Bucket, class Class, start time.Time, parked, queued time.Duration) {
	if !recording {
		return
	}
	l.pending = append(l.pending, pending{lat, class, start.UnixNano(), parked, queued})
}

// Len is the number of commands recorded since the last Written.
func (l *Log) Len() int { return len(l.pending) }

// Written observes every recorded command as written at now and empties the
// log.
func (l *Log) Written(now time.Time) {
	nowNS := now.UnixNano()
	for i := range l.pending {
		p := &l.pending[i]
		p.lat.Command(l.Shard, p.class, time.Duration(nowNS-p.startNS), p.parked, p.queued)
	}
	clear(l.pending) // drop the bucket pointers: a deleted bucket is not kept alive
	if cap(l.pending) > MaxPendingKept {
		l.pending = nil
		return
	}
	l.pending = l.pending[:0]
}
