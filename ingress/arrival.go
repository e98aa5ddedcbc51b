package ingress

import "time"

// When a command arrived. A connection has at most one batch in flight, and
// the commands a client pipelines behind it wait in the connection's input,
// undecoded, until it is done; throttled commands wait there too. That wait
// is part of the command's time at the server, and its deadline (SPEC
// section 7) counts from before it: a deadline counted from the moment the
// command was decoded would let a backlog that the gate cannot see grow
// without bound while every decoded command looked fresh
// (docs/deadline-admission.md).
//
// gnet reads a connection's socket only on its loop and calls OnTraffic
// after every read, so the loop sees every byte as soon as it is read. An
// InputClock keeps, per connection, a few marks "the first N bytes of input
// had arrived by time T"; a command's arrival is the mark of its first byte.

// inputMarks bounds the marks kept per connection. When more reads than that
// pile up unconsumed, the newest mark is extended instead: its bytes are
// taken to have arrived earlier than they did, never later.
const inputMarks = 8

// InputClock maps a connection's input bytes to when they arrived. It
// belongs to the connection's loop. The zero value is ready to use.
type InputClock struct {
	marks [inputMarks]inputMark // a FIFO ring, oldest at head
	head  int
	n     int
	total int64 // bytes of input seen so far
	left  int   // bytes left unconsumed after the previous pass
}

// inputMark says the input up to byte end (exclusive, counted from the
// connection's first byte) had arrived at at.
type inputMark struct {
	end int64
	at  time.Time
}

// Arrived notes, at the start of a pass over the input, that the input now
// holds buffered bytes: those beyond what the previous pass left arrived by
// now.
func (ic *InputClock) Arrived(buffered int, now time.Time) {
	grown := int64(buffered - ic.left)
	if grown <= 0 {
		return
	}
	ic.total += grown
	if ic.n == inputMarks {
		ic.marks[(ic.head+ic.n-1)%inputMarks].end = ic.total
		return
	}
	ic.marks[(ic.head+ic.n)%inputMarks] = inputMark{end: ic.total, at: now}
	ic.n++
}

// Grew reports whether the input holds bytes the previous pass did not
// leave: only then does arrived need the time.
func (ic *InputClock) Grew(buffered int) bool { return buffered > ic.left }

// Passed notes, at the end of a pass, how many bytes the pass left in the
// input.
func (ic *InputClock) Passed(buffered int) { ic.left = buffered }

// At returns when the first byte of the input still buffered (buffered bytes
// of it) arrived, dropping the marks of bytes consumed since; or now if no
// mark covers it (a byte the clock never saw).
func (ic *InputClock) At(buffered int, now time.Time) time.Time {
	start := ic.total - int64(buffered) // first unconsumed byte
	for ic.n > 0 {
		m := ic.marks[ic.head]
		if m.end > start {
			return m.at
		}
		ic.head = (ic.head + 1) % inputMarks
		ic.n--
	}
	return now
}
