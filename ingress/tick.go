package ingress

import (
	"time"

	"kvd/probe"
)

// Tick is the Controller's periodic step; the server calls it every probe interval
// (100 ms). In order, it
//
//  1. expires every waiter that has waited longer than its queue timeout, its bucket's
//     or else the node's (Expired is called with "timed out after N ms in bucket B", or
//     "timed out after N ms in the <pool> queue" for work of no bucket), and every
//     DeadlineWaiter whose Due has passed (Expired(DeadlinePassed));
//  2. halves every bucket's recent use of each pool (fair dequeue's measure), so that
//     what a bucket used a second ago weighs about 1/1000 of what it uses now;
//  3. feeds the prober a probe.Sample: normal commands finished so far in both pools
//     and each pool's peak use since the previous Tick; peaks then restart from the
//     current use, since tickets still held stay in use;
//  4. resizes the pools to the prober's answer (unless Options.DisableProbe, in which
//     case steps 3 and 4 only restart the peaks) and grants what waiters can run.
//
// Callbacks are made on the calling goroutine after the lock is released.
func (c *Controller) Tick(now time.Time) {
	var expired, granted chain
	c.mu.Lock()
	c.noteNowLocked(now)
	c.expireLocked(now, &expired)
	c.ageLocked()
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
		c.setPoolSizeLocked(Read, r)
		c.setPoolSizeLocked(Write, w)
	}
	c.pumpLocked(now, &granted)
	c.mu.Unlock()
	c.deliver(&expired)
	c.deliver(&granted)
}

// Expire answers the waiters that have waited longer than their queue timeout or past
// their deadline, as Tick's step 1 does, and nothing else: the server calls it
// between Ticks (every 10 ms) so that a short per-bucket queue_timeout_ms, and a
// deadline, are kept to about that granularity rather than the probe interval's. Expired is called on the calling
// goroutine after the lock is released.
func (c *Controller) Expire(now time.Time) {
	var expired chain
	c.mu.Lock()
	c.noteNowLocked(now)
	c.expireLocked(now, &expired)
	c.mu.Unlock()
	c.deliver(&expired)
}

// expireLocked moves every waiter that has waited longer than its timeout, or whose
// deadline (DeadlineWaiter.Due) has passed, from the queues onto expired. A bucket's
// queues are in arrival order and share one timeout and one deadline_ms, so each scan
// stops at the first waiter still in time on both counts (one that arrived with a
// slightly earlier time from another goroutine waits for the next call; the server
// also checks the deadline when it grants a ticket).
func (c *Controller) expireLocked(now time.Time, expired *chain) {
	for i := range c.pools {
		p := &c.pools[i]
		// Backwards: a bucket whose queue empties is swapped with the last, seen already.
		for j := len(p.active) - 1; j >= 0; j-- {
			b := p.active[j]
			timeout := c.timeoutLocked(b)
			for n := b.q[i].head; n != nil; n = b.q[i].head {
				switch {
				case now.Sub(n.at) > timeout:
					p.st.Expired++
					b.st.NumTimedOut++
					n.reason = c.expiredReasonLocked(b, Pool(i))
				case !n.due.IsZero() && now.After(n.due):
					n.reason = DeadlinePassed // counted by the server (num_deadline_expired)
				default:
					n = nil
				}
				if n == nil {
					break
				}
				c.dequeueLocked(n, now)
				expired.pushBack(n)
			}
		}
	}
}

// fairDecay is what a bucket's recent use of a pool is multiplied by at each Tick.
const fairDecay = 0.5

// ageLocked decays every bucket's recent use. Scaling all by one factor keeps their
// order, so only new use reorders them.
func (c *Controller) ageLocked() {
	for i := range c.node.used {
		c.node.used[i] *= fairDecay
	}
	for _, b := range c.buckets {
		for i := range b.used {
			b.used[i] *= fairDecay
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
	c.setPoolSizeLocked(Read, read)
	c.setPoolSizeLocked(Write, write)
	c.pumpLocked(now, granted)
}

// SetNodeTickets changes the node cap (the config's ingress.tickets) at run time. Like
// Resize, raising it grants waiters at once and lowering it revokes nothing. n must be
// at least 1.
func (c *Controller) SetNodeTickets(n int64, now time.Time) error {
	if err := validateNodeTickets(n); err != nil {
		return err
	}
	c.update(now, func() { c.nodeTotal = n })
	return nil
}

// SetMaxInflightBytes changes the memory budget at run time (0: none). Raising it
// grants waiters at once, on the calling goroutine; lowering it revokes nothing: the
// bytes in flight drain below it as commands end.
func (c *Controller) SetMaxInflightBytes(n int64, now time.Time) error {
	if err := validateInflightBytes(n); err != nil {
		return err
	}
	c.update(now, func() { c.mem.limit = n })
	return nil
}

// SetQueueLimits changes the queue depth limit and timeout at run time (a config
// edit). Waiters already queued stay queued even if the new depth is smaller; the new
// timeout applies to them from the next Tick. Both are node-wide: MaxQueueDepth bounds
// each pool's waiters of all buckets together, and QueueTimeout applies to the buckets
// whose BucketLimits.QueueTimeout is zero. The arguments follow Options'
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

// SetFIFO turns fair dequeue off (true: one FIFO per pool across buckets) or back on
// (false), at run time. Waiters already queued are served in the new order.
func (c *Controller) SetFIFO(fifo bool, now time.Time) {
	c.update(now, func() { c.fifo = fifo })
}

// update runs set under the lock, then grants what waiters can now run, on the
// calling goroutine: the run-time setters that may make room.
func (c *Controller) update(now time.Time, set func()) {
	var granted chain
	c.mu.Lock()
	c.noteNowLocked(now)
	set()
	c.pumpLocked(now, &granted)
	c.mu.Unlock()
	c.deliver(&granted)
}

// SetReadWriteRatio sets the read pool's share of the prober's total concurrency
// (probe.Options.ReadWriteRatio). It takes effect at the prober's next step; a ratio
// outside [0, 1] is clamped and NaN is ignored.
func (c *Controller) SetReadWriteRatio(r float64) {
	c.mu.Lock()
	c.prober.SetReadWriteRatio(r)
	c.mu.Unlock()
}

// Reconfigure applies the run-time settings of o (a config reload): node
// tickets, queue limits, the memory budget, FIFO and the read/write ratio.
// The prober's bounds and interval take effect only at start. On error
// the settings after the failing one are left as they were.
func (c *Controller) Reconfigure(o *Options, now time.Time) error {
	if err := c.SetNodeTickets(o.NodeTickets, now); err != nil {
		return err
	}
	if err := c.SetQueueLimits(o.MaxQueueDepth, o.QueueTimeout); err != nil {
		return err
	}
	if err := c.SetMaxInflightBytes(o.MaxInflightBytes, now); err != nil {
		return err
	}
	c.SetFIFO(o.FIFO, now)
	c.SetReadWriteRatio(o.Probe.ReadWriteRatio)
	return nil
}
