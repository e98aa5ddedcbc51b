package ingress

import (
	"fmt"
	"sync"
	"time"

	"kvd/probe"
)

// A Controller admits commands into the read and write ticket pools under a node-wide
// cap, queues those that find no ticket free, and sizes the pools with a prober.
//
// Acquire takes a ticket or queues the command's Waiter; Release returns a ticket or
// hands it straight to the first waiter that can use it; Cancel removes a waiter whose
// client has gone; Tick, once per probe interval, expires waiters older than the queue
// timeout and resizes the pools to the prober's answer. The package comment states the
// invariants and the callback rules.
//
// A Controller is safe for concurrent use. Its mutex is held only briefly and never
// across a Waiter callback.
type Controller struct {
	opts  Options   // as validated by New; the queue limits and node cap live under mu
	nodes sync.Pool // *waiterNode, recycled once their callback has been made

	mu        sync.Mutex // guards every field below
	pools     [numPools]pool
	nodeTotal int64                  // the node cap (NodeTickets)
	nodeOut   int64                  // normal tickets out, both pools
	limits    queueLimits            // depth, timeout and their precomputed reasons
	waiting   map[Waiter]*waiterNode // every queued waiter, for Cancel
	seq       uint64                 // enqueue order across both pools
	prober    *probe.Prober
	lastNow   time.Time // latest time any method was given; stamps Resize's grants
}

// pool is one ticket pool. Its fields are guarded by Controller.mu.
type pool struct {
	size  int      // current size (total); out may exceed it while a shrink converges
	out   int      // normal tickets in use
	peak  int      // highest out since the last Tick
	slots []uint32 // generation per ticket slot: odd while the slot is in use
	free  []int32  // indices of free slots
	queue queue    // waiters, FIFO
	st    PoolStats
	// Sub-microsecond remainders of the time totals, so that short commands add up.
	procRemNS, queuedRemNS int64
}

// queueLimits are the queue settings and the reasons built from them once.
type queueLimits struct {
	maxDepth   int           // NoQueue or ≥ 0
	timeout    time.Duration // > 0
	fullReason string        // "queue full, limit=L, queued=L"
	expired    [numPools]string
	noTicket   [numPools]string // a nil Waiter found no ticket free
	dupWaiter  [numPools]string // the Waiter is already queued
}

func newQueueLimits(maxDepth int, timeout time.Duration) queueLimits {
	l := queueLimits{maxDepth: maxDepth, timeout: timeout}
	limit := max(maxDepth, 0)
	l.fullReason = fullReason(limit, limit)
	for p := range numPools {
		l.expired[p] = fmt.Sprintf("timed out after %d ms in the %s queue", timeout.Milliseconds(), p)
		l.noTicket[p] = fmt.Sprintf("no ticket free in the %s pool", p)
		l.dupWaiter[p] = fmt.Sprintf("waiter already queued in the %s pool", p)
	}
	return l
}

func fullReason(limit, queued int) string {
	return fmt.Sprintf("queue full, limit=%d, queued=%d", limit, queued)
}

// New returns a Controller whose pools start at the prober's initial sizes. Zero fields
// of o take their defaults.
func New(o Options) (*Controller, error) {
	o.EnsureDefaults()
	if err := o.Validate(); err != nil {
		return nil, err
	}
	pr, err := probe.New(o.Probe)
	if err != nil {
		return nil, fmt.Errorf("%w: Probe: %w", ErrInvalidOptions, err)
	}
	c := &Controller{
		opts:      o,
		nodeTotal: o.NodeTickets,
		limits:    newQueueLimits(o.MaxQueueDepth, o.QueueTimeout),
		waiting:   make(map[Waiter]*waiterNode),
		prober:    pr,
	}
	c.nodes.New = func() any { return new(waiterNode) }
	r, w := pr.Sizes()
	c.pools[Read].setSizeLocked(r)
	c.pools[Write].setSizeLocked(w)
	return c, nil
}

// Acquire tries to take a ticket from pool for one command.
//
//   - Admitted: t is valid; the caller runs the command and Releases t.
//   - Queued: w is queued; it will get exactly one Granted or Expired call later, on
//     another goroutine, unless Cancel(w) returns true first.
//   - Rejected: reason says why: the queue is full ("queue full, limit=100000,
//     queued=100000"), w is nil and no ticket is free, w is already queued, or pool is
//     not a pool.
//
// A command is admitted only when its pool has room, the node cap has room and nobody
// is queued ahead of it in its pool.
func (c *Controller) Acquire(pool Pool, w Waiter, now time.Time) (t Ticket, d Decision, reason string) {
	if pool >= numPools {
		return Ticket{}, Rejected, "no such pool"
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.noteNowLocked(now)
	p := &c.pools[pool]
	if p.queue.n == 0 && p.out < p.size && c.nodeOut < c.nodeTotal {
		return c.takeLocked(pool, kindAdmitted, now), Admitted, ""
	}
	if reason := c.refusalLocked(pool, w); reason != "" {
		p.st.Rejected++
		return Ticket{}, Rejected, reason
	}
	n := c.nodes.Get().(*waiterNode)
	c.seq++
	*n = waiterNode{w: w, at: now, seq: c.seq, pool: pool}
	p.queue.pushBack(n)
	c.waiting[w] = n
	p.st.AddedToQueue++
	return Ticket{}, Queued, ""
}

// refusalLocked returns why w may not wait in pool's queue, or "".
func (c *Controller) refusalLocked(pool Pool, w Waiter) string {
	q := c.pools[pool].queue.n
	switch {
	case c.limits.maxDepth == NoQueue || q >= c.limits.maxDepth:
		limit := max(c.limits.maxDepth, 0)
		if q == limit {
			return c.limits.fullReason
		}
		return fullReason(limit, q) // the limit was lowered below the queue: rare
	case w == nil:
		return c.limits.noTicket[pool]
	}
	if _, dup := c.waiting[w]; dup {
		return c.limits.dupWaiter[pool]
	}
	return ""
}

// Release ends the command that held t: the ticket goes back to its pool, or straight
// to the first waiter that can use it (whose Granted is called on this goroutine before
// Release returns). A ticket of a pool above its size after a shrink is not handed on.
// Releasing a ticket twice, or a zero Ticket, changes nothing but the pool's
// StaleReleases.
func (c *Controller) Release(t Ticket, now time.Time) {
	if t.pool >= numPools {
		return
	}
	c.mu.Lock()
	c.noteNowLocked(now)
	p := &c.pools[t.pool]
	if t.kind == kindExempt {
		if p.st.ExemptFinished < p.st.ExemptStarted {
			p.st.ExemptFinished++
		} else {
			p.st.StaleReleases++
		}
		c.mu.Unlock()
		return
	}
	if !p.putLocked(t) {
		p.st.StaleReleases++
		c.mu.Unlock()
		return
	}
	c.nodeOut--
	p.st.Finished++
	addDuration(&p.st.TotalTimeProcessingUS, &p.procRemNS, now.Sub(t.at))
	var granted chain
	c.pumpLocked(now, &granted)
	c.mu.Unlock()
	c.deliver(&granted)
}

// Cancel removes w from its queue because its client has gone, and counts it as
// canceled. It returns true if w was queued: then w gets no callback, ever. It returns
// false if w was not queued: it was never queued, or it has already been (or is being,
// or is about to be) Granted or Expired on another goroutine. After false, a Granted
// ticket belongs to w, which must Release it. Handoff implements this rule.
func (c *Controller) Cancel(w Waiter, now time.Time) bool {
	c.mu.Lock()
	c.noteNowLocked(now)
	n, ok := c.waiting[w]
	if !ok {
		c.mu.Unlock()
		return false
	}
	p := &c.pools[n.pool]
	c.dequeueLocked(n, now)
	p.st.Canceled++
	c.mu.Unlock()
	c.recycle(n)
	return true
}

// StartExempt returns a ticket for a command exempt from admission (not a data command,
// or an Unthrottled connection). It never waits and takes no room; it is counted in the
// pool's ExemptStarted and, when Released, ExemptFinished, but not in Finished, which
// counts normal commands only (the prober's throughput, SPEC section 6).
func (c *Controller) StartExempt(pool Pool, now time.Time) Ticket {
	if pool >= numPools {
		return Ticket{}
	}
	c.mu.Lock()
	c.noteNowLocked(now)
	c.pools[pool].st.ExemptStarted++
	c.mu.Unlock()
	return Ticket{at: now, slot: -1, gen: 1, pool: pool, kind: kindExempt}
}

// noteNowLocked remembers the latest time seen, for Resize.
func (c *Controller) noteNowLocked(now time.Time) {
	if now.After(c.lastNow) {
		c.lastNow = now
	}
}

// takeLocked takes a normal ticket from pool; the caller checked the room.
func (c *Controller) takeLocked(pool Pool, kind ticketKind, now time.Time) Ticket {
	p := &c.pools[pool]
	slot, gen := p.getLocked()
	c.nodeOut++
	p.st.Started++
	return Ticket{at: now, slot: slot, gen: gen, pool: pool, kind: kind}
}

// pumpLocked hands free tickets to waiters while the node cap has room: each time to
// the earliest-queued waiter of a pool with room. Granted waiters leave the queue and
// are appended to granted, whose callbacks the caller makes after unlocking.
func (c *Controller) pumpLocked(now time.Time, granted *chain) {
	for c.nodeOut < c.nodeTotal {
		var next *waiterNode
		for i := range c.pools {
			p := &c.pools[i]
			if h := p.queue.head; h != nil && p.out < p.size && (next == nil || h.seq < next.seq) {
				next = h
			}
		}
		if next == nil {
			return
		}
		c.dequeueLocked(next, now)
		next.ticket = c.takeLocked(next.pool, kindQueued, now)
		granted.pushBack(next)
	}
}

// dequeueLocked removes n from its queue and from the index, counting its time queued.
func (c *Controller) dequeueLocked(n *waiterNode, now time.Time) {
	p := &c.pools[n.pool]
	p.queue.remove(n)
	delete(c.waiting, n.w)
	p.st.RemovedFromQueue++
	addDuration(&p.st.TotalTimeQueuedUS, &p.queuedRemNS, now.Sub(n.at))
}

// deliver makes the callbacks of a chain of granted or expired waiters, in order, with
// no lock held, recycling each node first.
func (c *Controller) deliver(ch *chain) {
	for n := ch.head; n != nil; {
		next, w, t, reason := n.next, n.w, n.ticket, n.reason
		c.recycle(n)
		if reason != "" {
			w.Expired(reason)
		} else {
			w.Granted(t)
		}
		n = next
	}
}

func (c *Controller) recycle(n *waiterNode) {
	*n = waiterNode{}
	c.nodes.Put(n)
}

// getLocked takes a free slot and marks it in use; the pool's out and peak grow.
func (p *pool) getLocked() (slot int32, gen uint32) {
	if k := len(p.free); k > 0 {
		slot = p.free[k-1]
		p.free = p.free[:k-1]
	} else {
		slot = int32(len(p.slots))
		p.slots = append(p.slots, 0)
	}
	p.slots[slot]++ // even (free) → odd (in use)
	p.out++
	p.peak = max(p.peak, p.out)
	return slot, p.slots[slot]
}

// putLocked frees t's slot if t is the ticket in use there, and reports whether it was.
func (p *pool) putLocked(t Ticket) bool {
	if t.gen&1 == 0 || t.slot < 0 || int(t.slot) >= len(p.slots) || p.slots[t.slot] != t.gen {
		return false
	}
	p.slots[t.slot]++ // odd → even: free, and every copy of t is now stale
	p.free = append(p.free, t.slot)
	p.out--
	return true
}

// setSizeLocked sets the pool's size and reserves slot room for it, so that taking a
// ticket never allocates.
func (p *pool) setSizeLocked(size int) {
	p.size = max(size, 0)
	if n := max(p.size, p.out); cap(p.slots) < n {
		p.slots = append(make([]uint32, 0, n), p.slots...)
	}
	if cap(p.free) < cap(p.slots) {
		p.free = append(make([]int32, 0, cap(p.slots)), p.free...)
	}
}

// addDuration adds d (clamped at zero) to a microsecond total, carrying the
// sub-microsecond remainder in rem.
func addDuration(us, rem *int64, d time.Duration) {
	if d <= 0 {
		return
	}
	ns := int64(d) + *rem
	*us += ns / 1000
	*rem = ns % 1000
}
