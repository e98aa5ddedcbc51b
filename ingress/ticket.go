package ingress

import (
	"fmt"
	"time"
)

// Decision is Acquire's answer.
type Decision uint8

const (
	// Admitted: the returned Ticket is valid; run the command and Release it.
	Admitted Decision = iota
	// Queued: the Waiter will get Granted or Expired later, unless Cancel removes it.
	Queued
	// Rejected: the command may not run; the reason says why (SPEC: status 0x85).
	Rejected
	// TooLarge: the command's value alone exceeds MaxInflightBytes and could never be
	// admitted (SPEC: status 0x82, "value of N bytes exceeds max_inflight_bytes=M").
	TooLarge
)

// String returns "admitted", "queued", "rejected" or "too large".
func (d Decision) String() string {
	switch d {
	case Admitted:
		return "admitted"
	case Queued:
		return "queued"
	case Rejected:
		return "rejected"
	case TooLarge:
		return "too large"
	}
	return fmt.Sprintf("Decision(%d)", uint8(d))
}

// Waiter is a queued command's continuation. The Controller calls exactly one of its
// methods, once, for every Acquire that answered Queued and was not Cancelled (Cancel
// returned true). Methods are called without any ingress lock held, never from inside
// Acquire, but from whichever goroutine released or settled a ticket, or ran Tick,
// Resize, SetNodeTickets, SetMaxInflightBytes, SetFIFO, SetBucketLimits, RemoveBucket
// or Cancel (a Cancel can unblock the waiters held back for memory); they must not
// block. A Waiter must be comparable (use a pointer): the Controller indexes queued
// waiters by it, and one Waiter may be queued only once at a time.
type Waiter interface {
	// Granted hands the waiter a ticket. The waiter owns t from now on and must
	// Release it when its command ends, even if its client has gone meanwhile.
	Granted(t Ticket)
	// Expired says the waiter will never be granted; reason is the text for the
	// client: it waited too long ("timed out after 10000 ms in the write queue",
	// "timed out after 5 ms in bucket b1"), or its bucket was removed ("bucket b1 was
	// deleted").
	Expired(reason string)
}

// ticketKind says how a ticket was obtained.
type ticketKind uint8

const (
	kindAdmitted ticketKind = iota // Acquire found a ticket free
	kindQueued                     // granted to a waiter
	kindExempt                     // StartExempt: counted, never limited
)

// A Ticket is the right to run one command. It is a small value: copy it, store it,
// hand it to Release of the Controller that issued it, exactly once. The zero Ticket is
// not valid. Release recognises a ticket released before by its slot's generation (a
// 32-bit counter: a copy kept across 2³¹ reuses of one slot could alias) and counts it
// as stale instead of freeing someone else's ticket.
type Ticket struct {
	at   time.Time  // when it was acquired or granted: processing time starts here
	b    *Bucket    // the bucket it counts for (the Controller's own for node work)
	slot int32      // index in the pool's slot table; unused for exempt tickets
	gen  uint32     // the slot's generation when taken (odd); 0 in a zero Ticket
	pool Pool       // the pool it belongs to
	kind ticketKind // how it was obtained
}

// Pool returns the pool the ticket belongs to.
func (t Ticket) Pool() Pool { return t.pool }

// AcquiredAt returns when the ticket was acquired or granted.
func (t Ticket) AcquiredAt() time.Time { return t.at }

// Queued reports whether the ticket came through the queue (Waiter.Granted).
func (t Ticket) Queued() bool { return t.kind == kindQueued }

// Bucket returns the bucket the ticket was acquired for, nil for node-level work.
func (t Ticket) Bucket() *Bucket {
	if t.b == nil || t.b.node {
		return nil
	}
	return t.b
}

// Exempt reports whether the ticket came from StartExempt.
func (t Ticket) Exempt() bool { return t.kind == kindExempt }

// Valid reports whether t came from a Controller (it may still have been released).
func (t Ticket) Valid() bool { return t.gen != 0 }
