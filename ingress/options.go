package ingress

import (
	"errors"
	"fmt"
	"time"

	"kvd/probe"
)

// Errors returned by this package. Compare with errors.Is.
var (
	// ErrInvalidOptions is wrapped by Validate, New, SetNodeTickets and SetQueueLimits;
	// the message names the field.
	ErrInvalidOptions = errors.New("ingress: invalid options")
)

// Defaults (SPEC section 6; MongoDB's ingressAdmissionControllerTicketPoolSize for the
// node cap).
const (
	DefaultNodeTickets   = 1_000_000
	DefaultMaxQueueDepth = 100_000
	DefaultQueueTimeout  = 10 * time.Second
)

// NoQueue as Options.MaxQueueDepth means commands never wait: with no ticket free they
// are rejected at once (the config file's max_queue_depth 0).
const NoQueue = -1

// Options configure a Controller. Zero fields take the defaults in EnsureDefaults.
type Options struct {
	// NodeTickets caps all normal in-flight commands of both pools together (the
	// config's ingress.tickets; default 1,000,000). SetNodeTickets changes it at run
	// time.
	NodeTickets int64
	// MaxQueueDepth is the most commands that may wait in each pool's queue (default
	// 100,000). A command that finds this many waiting is rejected at once. Zero means
	// the default; NoQueue (-1) means no queue at all.
	MaxQueueDepth int
	// QueueTimeout is the longest a command waits before Tick expires it (default 10 s).
	QueueTimeout time.Duration
	// Probe configures the prober; zero fields take probe's defaults (MongoDB's). The
	// pools start at the prober's initial sizes. Set Probe.GOMAXPROCS to
	// runtime.GOMAXPROCS(0): left at zero, the initial total is the floor, 2·Min.
	Probe probe.Options
	// DisableProbe keeps the pools at their initial sizes (or whatever Resize sets):
	// Tick still expires waiters and resets the peaks but never runs the prober. For
	// A/B measurements.
	DisableProbe bool
}

// EnsureDefaults sets every zero field to its default, including Probe's.
func (o *Options) EnsureDefaults() {
	if o.NodeTickets == 0 {
		o.NodeTickets = DefaultNodeTickets
	}
	if o.MaxQueueDepth == 0 {
		o.MaxQueueDepth = DefaultMaxQueueDepth
	}
	if o.QueueTimeout == 0 {
		o.QueueTimeout = DefaultQueueTimeout
	}
	o.Probe.EnsureDefaults()
}

// Validate reports the first invalid field, wrapping ErrInvalidOptions (and, for the
// prober's fields, probe.ErrInvalidOptions). Call it after EnsureDefaults.
func (o *Options) Validate() error {
	if err := validateNodeTickets(o.NodeTickets); err != nil {
		return err
	}
	if err := validateQueue(o.MaxQueueDepth, o.QueueTimeout); err != nil {
		return err
	}
	if err := o.Probe.Validate(); err != nil {
		return fmt.Errorf("%w: Probe: %w", ErrInvalidOptions, err)
	}
	return nil
}

func validateNodeTickets(n int64) error {
	if n < 1 {
		return fmt.Errorf("%w: NodeTickets %d < 1", ErrInvalidOptions, n)
	}
	return nil
}

func validateQueue(maxDepth int, timeout time.Duration) error {
	if maxDepth < NoQueue {
		return fmt.Errorf("%w: MaxQueueDepth %d < %d (NoQueue)", ErrInvalidOptions, maxDepth, NoQueue)
	}
	if timeout <= 0 {
		return fmt.Errorf("%w: QueueTimeout %v <= 0", ErrInvalidOptions, timeout)
	}
	return nil
}

// Pool names a ticket pool.
type Pool uint8

// The two pools. Every mutation (including INCR, APPEND, TOUCH, GAT) takes a Write
// ticket; plain reads take a Read ticket.
const (
	Read Pool = iota
	Write
	numPools
)

// String returns "read" or "write".
func (p Pool) String() string {
	switch p {
	case Read:
		return "read"
	case Write:
		return "write"
	}
	return fmt.Sprintf("Pool(%d)", uint8(p))
}

// Decision is Acquire's answer (and Handoff.Take's).
type Decision uint8

const (
	// Admitted: the returned Ticket is valid; run the command and Release it.
	Admitted Decision = iota
	// Queued: the Waiter will get Granted or Expired later, unless Cancel removes it.
	Queued
	// Rejected: the command may not run; the reason says why (SPEC: status 0x85).
	Rejected
	// TimedOut: the command waited longer than the queue timeout; only Handoff.Take
	// returns it (Acquire's waiters learn it through Waiter.Expired). SPEC: 0x86.
	TimedOut
)

// String returns "admitted", "queued", "rejected" or "timed out".
func (d Decision) String() string {
	switch d {
	case Admitted:
		return "admitted"
	case Queued:
		return "queued"
	case Rejected:
		return "rejected"
	case TimedOut:
		return "timed out"
	}
	return fmt.Sprintf("Decision(%d)", uint8(d))
}

// Waiter is a queued command's continuation. The Controller calls exactly one of its
// methods, once, for every Acquire that answered Queued and was not Cancelled (Cancel
// returned true). Methods are called without any ingress lock held, from whichever
// goroutine released the ticket, ran Tick, Resize or SetNodeTickets; they must not
// block. A Waiter must be comparable (use a pointer): the Controller indexes queued
// waiters by it, and one Waiter may be queued only once at a time.
type Waiter interface {
	// Granted hands the waiter a ticket. The waiter owns t from now on and must
	// Release it when its command ends, even if its client has gone meanwhile.
	Granted(t Ticket)
	// Expired says the waiter waited too long and will never be granted; reason is the
	// text for the client, e.g. "timed out after 10000 ms in the write queue".
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

// Exempt reports whether the ticket came from StartExempt.
func (t Ticket) Exempt() bool { return t.kind == kindExempt }

// Valid reports whether t came from a Controller (it may still have been released).
func (t Ticket) Valid() bool { return t.gen != 0 }
