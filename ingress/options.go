package ingress

import (
	"errors"
	"fmt"
	"time"

	"kvd/probe"
)

// Errors returned by this package. Compare with errors.Is.
var (
	// ErrInvalidOptions is wrapped by Validate, New, SetNodeTickets, SetQueueLimits,
	// SetMaxInflightBytes and BucketLimits.Validate; the message names the field.
	ErrInvalidOptions = errors.New("ingress: invalid options")
)

// Defaults (SPEC section 6; MongoDB's ingressAdmissionControllerTicketPoolSize for the
// node cap).
const (
	DefaultNodeTickets   = 1_000_000
	DefaultMaxQueueDepth = 100_000
	DefaultQueueTimeout  = 10 * time.Second
	// DefaultReadEstimate is what a read is charged against MaxInflightBytes before its
	// bucket has settled any read (see Acquire and Settle).
	DefaultReadEstimate = 1024
)

// Estimate as Acquire's bytes asks for the bucket's read estimate: the moving average
// of the sizes its reads settled with (weight 1/8), DefaultReadEstimate before the
// first. Settle replaces the estimate with the real size.
const Estimate int64 = -1

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
	// MaxInflightBytes bounds the value bytes held by normal commands in flight, node
	// wide (Impala's memory admission; the config's max_inflight_bytes). 0, the
	// default, means no limit. SetMaxInflightBytes changes it at run time.
	MaxInflightBytes int64
	// FIFO turns fair dequeue off: a freed ticket goes to the earliest waiter of any
	// bucket (one FIFO per pool across buckets) instead of the waiter of the bucket
	// that used the least of the pool recently. For A/B measurements; SetFIFO changes
	// it at run time.
	FIFO bool
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
	if err := validateInflightBytes(o.MaxInflightBytes); err != nil {
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

func validateInflightBytes(n int64) error {
	if n < 0 {
		return fmt.Errorf("%w: MaxInflightBytes %d < 0", ErrInvalidOptions, n)
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

// BucketLimits are one bucket's admission limits (Impala's per-pool settings; the
// bucket's max_concurrent, max_queued and queue_timeout_ms). Zero means no limit of
// the bucket's own (the node's limits still apply) and, for QueueTimeout, the node's
// timeout.
type BucketLimits struct {
	// MaxConcurrent bounds the bucket's normal commands holding a ticket, both pools
	// together; the excess waits in the bucket's queues.
	MaxConcurrent int
	// MaxQueued bounds the bucket's waiting commands, both pools together; past it a
	// command is Rejected with "queue full, limit=N, queued=N in bucket B".
	MaxQueued int
	// QueueTimeout is the longest one of the bucket's commands waits ("timed out after
	// N ms in bucket B"); it overrides Options.QueueTimeout.
	QueueTimeout time.Duration
}

// Validate reports a negative field, wrapping ErrInvalidOptions. (AddBucket and
// SetBucketLimits take negative fields as zero.)
func (l BucketLimits) Validate() error {
	switch {
	case l.MaxConcurrent < 0:
		return fmt.Errorf("%w: MaxConcurrent %d < 0", ErrInvalidOptions, l.MaxConcurrent)
	case l.MaxQueued < 0:
		return fmt.Errorf("%w: MaxQueued %d < 0", ErrInvalidOptions, l.MaxQueued)
	case l.QueueTimeout < 0:
		return fmt.Errorf("%w: QueueTimeout %v < 0", ErrInvalidOptions, l.QueueTimeout)
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
	// admitted (SPEC: status 0x82, "value of N bytes exceeds max_inflight_bytes=M, in bucket B").
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

// A DeadlineWaiter is a Waiter whose command must complete by Due (a bucket with
// deadline_ms). While it is queued, Tick and Expire answer it with
// Expired(DeadlinePassed) once Due has passed, instead of leaving it to be granted a
// ticket it can no longer use. Due is read once, when the waiter is queued.
type DeadlineWaiter interface {
	Waiter
	Due() time.Time
}

// DeadlinePassed is the reason Expired is given for a DeadlineWaiter whose Due passed
// while it was queued; the server words the reply itself.
const DeadlinePassed = "deadline passed in the queue"

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

// Limits of DeadlineSettings.
const (
	MinDeadlinePercentile     = 50
	MaxDeadlinePercentile     = 99
	DefaultDeadlinePercentile = 99
	// DefaultExpectedExecution is used when a bucket sets a deadline but no
	// expected_execution_us, until its window has a sample.
	DefaultExpectedExecution = time.Millisecond
)

// DeadlineSettings are a bucket's deadline_ms, deadline_percentile and
// expected_execution_us. A zero Deadline turns the gate off for the bucket.
type DeadlineSettings struct {
	Deadline          time.Duration // relative deadline; 0 = none
	Percentile        int           // 50–99 (default 99)
	ExpectedExecution time.Duration // pXX before the window has a sample (default 1 ms)
	// MaxConcurrent is the bucket's own ticket cap (max_concurrent; 0 =
	// none): its commands never hold more tickets than that, so the gate
	// counts the pool as at most that large for them (Capacity).
	MaxConcurrent int
}

// EnsureDefaults fills the zero Percentile and ExpectedExecution of a bucket that has
// a deadline.
func (s *DeadlineSettings) EnsureDefaults() {
	if s.Deadline == 0 {
		return
	}
	if s.Percentile == 0 {
		s.Percentile = DefaultDeadlinePercentile
	}
	if s.ExpectedExecution == 0 {
		s.ExpectedExecution = DefaultExpectedExecution
	}
}

// Validate reports the first invalid field, wrapping ErrInvalidOptions.
func (s *DeadlineSettings) Validate() error {
	switch {
	case s.Deadline < 0:
		return fmt.Errorf("%w: deadline_ms %v < 0", ErrInvalidOptions, s.Deadline)
	case s.Deadline == 0:
		return nil
	case s.Deadline < time.Microsecond:
		return fmt.Errorf("%w: deadline_ms %v below 1 µs", ErrInvalidOptions, s.Deadline)
	case s.Percentile < MinDeadlinePercentile || s.Percentile > MaxDeadlinePercentile:
		return fmt.Errorf("%w: deadline_percentile %d outside [%d, %d]",
			ErrInvalidOptions, s.Percentile, MinDeadlinePercentile, MaxDeadlinePercentile)
	case s.ExpectedExecution < 0:
		return fmt.Errorf("%w: expected_execution_us %v < 0", ErrInvalidOptions, s.ExpectedExecution)
	}
	return nil
}
