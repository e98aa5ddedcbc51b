package ingress

import (
	"time"

	"kvd/probe"
)

// Tick is the Controller's periodic step; the server calls it every probe interval
// (100 ms). In order, it
//
//  1. expires every waiter that has waited longer than the queue timeout (Expired is
//     called with "timed out after N ms in the <pool> queue", N the timeout);
//  2. feeds the prober a probe.Sample: normal commands finished so far in both pools
//     and each pool's peak use since the previous Tick; peaks then restart from the
//     current use, since tickets still held stay in use;
//  3. resizes the pools to the prober's answer, granting waiters at once if they grow
//     (unless Options.DisableProbe, in which case steps 2 and 3 only restart the peaks).
//
// Callbacks are made on the calling goroutine after the lock is released.
func (c *Controller) Tick(now time.Time) {
	var expired, granted chain
	c.mu.Lock()
	c.noteNowLocked(now)
	c.expireLocked(now, &expired)
	s := probe.Sample{
		Now:       now,
		Finished:  c.pools[Read].st.Finished + c.pools[Write].st.Finished,
		ReadPeak:  c.pools[Read].peak,
		WritePeak: c.pools[Write].peak,
	}
	for i := range c.pools {
		c.pools[i].peak = c.pools[i].out
	}
	if !c.opts.DisableProbe {
		r, w := c.prober.Probe(s)
		c.resizeLocked(r, w, now, &granted)
	}
	c.mu.Unlock()
	c.deliver(&expired)
	c.deliver(&granted)
}

// expireLocked moves every waiter that has waited longer than the timeout from the
// queues onto expired. Queues are in arrival order, so each scan stops at the first
// waiter still in time (one that arrived with a slightly earlier time from another
// goroutine waits for the next Tick).
func (c *Controller) expireLocked(now time.Time, expired *chain) {
	for i := range c.pools {
		p := &c.pools[i]
		for n := p.queue.head; n != nil && now.Sub(n.at) > c.limits.timeout; n = p.queue.head {
			c.dequeueLocked(n, now)
			p.st.Expired++
			n.reason = c.limits.expired[i]
			expired.pushBack(n)
		}
	}
}

// Resize sets the pools' sizes (negative sizes count as zero). Growing hands the new
// tickets to waiters at once, on the calling goroutine; shrinking never revokes a
// ticket in use: a pool above its size hands no returned ticket on until it is back
// under it. Granted tickets are stamped with the latest time any method was given.
// With the prober enabled, the next Tick replaces these sizes with the prober's.
func (c *Controller) Resize(read, write int) {
	var granted chain
	c.mu.Lock()
	c.resizeLocked(read, write, c.lastNow, &granted)
	c.mu.Unlock()
	c.deliver(&granted)
}

func (c *Controller) resizeLocked(read, write int, now time.Time, granted *chain) {
	c.pools[Read].setSizeLocked(read)
	c.pools[Write].setSizeLocked(write)
	c.pumpLocked(now, granted)
}

// SetNodeTickets changes the node cap (the config's ingress.tickets) at run time. Like
// Resize, raising it grants waiters at once and lowering it revokes nothing. n must be
// at least 1.
func (c *Controller) SetNodeTickets(n int64, now time.Time) error {
	if err := validateNodeTickets(n); err != nil {
		return err
	}
	var granted chain
	c.mu.Lock()
	c.noteNowLocked(now)
	c.nodeTotal = n
	c.pumpLocked(now, &granted)
	c.mu.Unlock()
	c.deliver(&granted)
	return nil
}

// SetQueueLimits changes the queue depth limit and timeout at run time (a config
// edit). Waiters already queued stay queued even if the new depth is smaller; the new
// timeout applies to them from the next Tick. The arguments follow Options'
// MaxQueueDepth (NoQueue for none; zero is not a default here but means a queue of
// depth 0, like NoQueue) and QueueTimeout (> 0).
func (c *Controller) SetQueueLimits(maxDepth int, timeout time.Duration) error {
	if err := validateQueue(maxDepth, timeout); err != nil {
		return err
	}
	l := newQueueLimits(maxDepth, timeout)
	c.mu.Lock()
	c.limits = l
	c.mu.Unlock()
	return nil
}

// SetReadWriteRatio sets the read pool's share of the prober's total concurrency
// (probe.Options.ReadWriteRatio). It takes effect at the prober's next step; a ratio
// outside [0, 1] is clamped and NaN is ignored.
func (c *Controller) SetReadWriteRatio(r float64) {
	c.mu.Lock()
	c.prober.SetReadWriteRatio(r)
	c.mu.Unlock()
}

// waiterNode is one queued command: an element of its pool's queue while it waits,
// then of a chain until its callback is made. Nodes are pooled.
type waiterNode struct {
	w          Waiter
	prev, next *waiterNode
	at         time.Time // when it was queued
	seq        uint64    // queue order across both pools
	pool       Pool
	ticket     Ticket // set when granted
	reason     string // set when expired
}

// queue is an intrusive doubly linked FIFO of waiters, guarded by Controller.mu.
type queue struct {
	head, tail *waiterNode
	n          int
}

func (q *queue) pushBack(n *waiterNode) {
	n.prev, n.next = q.tail, nil
	if q.tail != nil {
		q.tail.next = n
	} else {
		q.head = n
	}
	q.tail = n
	q.n++
}

func (q *queue) remove(n *waiterNode) {
	if n.prev != nil {
		n.prev.next = n.next
	} else {
		q.head = n.next
	}
	if n.next != nil {
		n.next.prev = n.prev
	} else {
		q.tail = n.prev
	}
	n.prev, n.next = nil, nil
	q.n--
}

// chain is a singly linked list of nodes taken off the queues, whose callbacks are
// still to be made. It lives on its caller's stack.
type chain struct {
	head, tail *waiterNode
}

func (ch *chain) pushBack(n *waiterNode) {
	n.next = nil
	if ch.tail != nil {
		ch.tail.next = n
	} else {
		ch.head = n
	}
	ch.tail = n
}
