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
	// SetMaxInflightBytes, AddBucket and SetBucketLimits; the message names the field.
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

// Validate reports a negative field, wrapping ErrInvalidOptions.
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
