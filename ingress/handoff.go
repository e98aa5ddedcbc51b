package ingress

import (
	"sync/atomic"
	"time"
)

// A Handoff is a ready-made Waiter for one connection that parks at most one command at
// a time. It resolves the Granted/Cancel race so that a ticket is never leaked or
// released twice, whatever the order in which the client goes away and the ticket
// arrives.
//
// The owner (the connection's event loop) calls Acquire, Take and Abandon; the
// Controller calls Granted and Expired from other goroutines. The owner's calls must
// not run concurrently with each other.
//
//	t, d, reason := h.Acquire(pool, now)  // Admitted: run with t; Rejected: answer 0x85
//	// Queued: return from the loop; wake (given to NewHandoff) is called once when
//	// the outcome is ready. On that wake-up, on the loop:
//	t, d, reason = h.Take()               // Admitted: run with t; TimedOut: answer 0x86
//	// The client disconnected while the command was parked (or at any time):
//	h.Abandon(now)                        // never leaks the ticket
//
// After Abandon, the Handoff may be reused once Acquire stops answering "handoff
// busy" (a late callback makes it idle again).
type Handoff struct {
	c    *Controller
	wake func() // called once per outcome from the callback's goroutine; must not block

	state atomic.Uint32 // one of the handoff states below
	// ticket and reason are written by Granted and Expired before they publish
	// hoGranted or hoExpired, and read by the owner only after it has seen that state.
	ticket Ticket
	reason string
}

// Handoff states.
const (
	hoIdle      uint32 = iota // nothing parked
	hoWaiting                 // queued in the Controller; a callback may come at any time
	hoGranted                 // Granted arrived; the ticket waits for Take
	hoExpired                 // Expired arrived; the reason waits for Take
	hoAbandoned               // the owner gave up while a callback was on its way
)

// busyReason is Acquire's reason when the Handoff still has a command parked.
const busyReason = "handoff busy"

// NewHandoff returns an idle Handoff for c. wake is called (without any ingress lock
// held, on the goroutine that granted or expired the command) when a parked command's
// outcome is ready for Take; it must not block, e.g. gnet's Conn.Wake.
func NewHandoff(c *Controller, wake func()) *Handoff {
	return &Handoff{c: c, wake: wake}
}

// Acquire is Controller.Acquire with the Handoff as the Waiter. Admitted and Rejected
// are final. Queued means the outcome comes later: wait for wake, then call Take. While
// a command is parked or an abandoned one's callback is still on its way, Acquire
// answers Rejected with reason "handoff busy".
func (h *Handoff) Acquire(pool Pool, now time.Time) (t Ticket, d Decision, reason string) {
	if !h.state.CompareAndSwap(hoIdle, hoWaiting) {
		return Ticket{}, Rejected, busyReason
	}
	// The state must read "waiting" before the Controller can see h: a Release on
	// another goroutine may grant h before Acquire returns.
	t, d, reason = h.c.Acquire(pool, h, now)
	if d != Queued {
		h.state.Store(hoIdle)
	}
	return t, d, reason
}

// Take returns the outcome of the parked command: Admitted with its ticket (the owner
// now runs the command and Releases t), TimedOut with the reason, or Queued if it is
// still waiting (a spurious wake-up). With nothing parked it answers Rejected.
func (h *Handoff) Take() (t Ticket, d Decision, reason string) {
	switch h.state.Load() {
	case hoGranted:
		t, h.ticket = h.ticket, Ticket{}
		h.state.Store(hoIdle)
		return t, Admitted, ""
	case hoExpired:
		reason, h.reason = h.reason, ""
		h.state.Store(hoIdle)
		return Ticket{}, TimedOut, reason
	case hoWaiting:
		return Ticket{}, Queued, ""
	}
	return Ticket{}, Rejected, "no command parked"
}

// Abandon gives up the parked command because its client has gone. If the command was
// still queued it is canceled. If its ticket had already arrived, Abandon releases it.
// If the ticket is on its way (Cancel lost the race), the late Granted releases it on
// its own goroutine. An expired outcome is dropped. With nothing parked it does
// nothing.
func (h *Handoff) Abandon(now time.Time) {
	for {
		switch h.state.Load() {
		case hoWaiting:
			if h.c.Cancel(h, now) {
				h.state.Store(hoIdle)
				return
			}
			if h.state.CompareAndSwap(hoWaiting, hoAbandoned) {
				return // the callback is on its way and will clean up
			}
			// The callback landed between Cancel and the swap: handle its outcome.
		case hoGranted:
			t := h.ticket
			h.ticket = Ticket{}
			h.state.Store(hoIdle)
			h.c.Release(t, now)
			return
		case hoExpired:
			h.reason = ""
			h.state.Store(hoIdle)
			return
		default: // idle, or already abandoned
			return
		}
	}
}

// Granted implements Waiter. If the owner is still waiting, it keeps the ticket for
// Take and calls wake; if the owner has abandoned the command, it releases the ticket
// at once (with no processing time).
func (h *Handoff) Granted(t Ticket) {
	h.ticket = t
	if h.state.CompareAndSwap(hoWaiting, hoGranted) {
		h.wake()
		return
	}
	// Abandoned: nobody will Take the ticket, so it goes back now.
	h.ticket = Ticket{}
	h.c.Release(t, t.AcquiredAt())
	h.state.CompareAndSwap(hoAbandoned, hoIdle)
}

// Expired implements Waiter. If the owner is still waiting, it keeps the reason for
// Take and calls wake; if the owner has abandoned the command, it just makes the
// Handoff idle again.
func (h *Handoff) Expired(reason string) {
	h.reason = reason
	if h.state.CompareAndSwap(hoWaiting, hoExpired) {
		h.wake()
		return
	}
	h.reason = ""
	h.state.CompareAndSwap(hoAbandoned, hoIdle)
}
