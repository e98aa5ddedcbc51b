package ingress

import "time"

// The wait queues. Each Bucket keeps one FIFO of waiters per pool; each pool keeps the
// list of buckets that have waiters in it (active). When a ticket, a slot under a
// bucket's MaxConcurrent or memory frees, pumpLocked picks the next waiter:
//
//  1. the waiter the memory is held back for (memory.head), if its bytes now fit and
//     it has room; while its bytes do not fit, nobody is granted (no overtaking for
//     memory: a large value is never starved by a stream of small ones);
//  2. otherwise, in each pool with room, the head of the bucket that is not at its
//     MaxConcurrent and has used the least of the pool recently (ties and FIFO mode:
//     the earliest head); across the two pools, the earlier of the two candidates;
//  3. if that waiter's bytes do not fit the memory budget, it becomes memory.head.

// enqueueLocked queues w at the tail of b's queue of pool. The caller checked the
// limits.
func (c *Controller) enqueueLocked(pool Pool, b *Bucket, w Waiter, bytes int64, now time.Time) {
	p := &c.pools[pool]
	n := c.nodes.Get().(*waiterNode)
	c.seq++
	*n = waiterNode{w: w, at: now, seq: c.seq, pool: pool, b: b, bytes: bytes}
	if dw, ok := w.(DeadlineWaiter); ok {
		n.due = dw.Due()
	}
	if b.q[pool].pushBack(n); b.q[pool].n == 1 {
		b.active[pool] = len(p.active)
		p.active = append(p.active, b)
	}
	b.queued++
	p.queued++
	c.waiting[w] = n
	p.st.AddedToQueue++
	b.st.NumQueued++
	if !c.mem.fits(bytes) {
		c.mem.markWaiting(n)
		// It is the only waiter that could run now (pumpLocked ran after the last
		// change and granted nobody), so the memory is held back for it.
		if c.mem.head == nil && b.q[pool].n == 1 && c.roomLocked(pool, b) {
			c.mem.head = n
		}
	}
}

// dequeueLocked removes n from its queue and from the index, counting its time queued.
func (c *Controller) dequeueLocked(n *waiterNode, now time.Time) {
	p, b := &c.pools[n.pool], n.b
	if b.q[n.pool].remove(n); b.q[n.pool].n == 0 {
		i, last := b.active[n.pool], len(p.active)-1
		p.active[i] = p.active[last]
		p.active[i].active[n.pool] = i
		p.active[last] = nil
		p.active = p.active[:last]
		b.active[n.pool] = -1
	}
	b.queued--
	p.queued--
	delete(c.waiting, n.w)
	p.st.RemovedFromQueue++
	b.st.Dequeued++
	d := now.Sub(n.at)
	addDuration(&p.st.TotalTimeQueuedUS, &p.queuedRemNS, d)
	addDuration(&b.st.QueueWaitTimeUS, &b.queuedRemNS, d)
	c.mem.unmarkWaiting(n)
}

// pumpLocked hands free tickets to waiters while any can run, in the order the file
// comment describes. Granted waiters leave the queue and are appended to granted,
// whose callbacks the caller makes after unlocking.
func (c *Controller) pumpLocked(now time.Time, granted *chain) {
	for c.nodeOut < c.nodeTotal {
		n := c.nextLocked()
		if n == nil {
			return
		}
		if !c.mem.fits(n.bytes) {
			c.mem.markWaiting(n)
			c.mem.head = n
			return
		}
		c.dequeueLocked(n, now)
		n.ticket = c.takeLocked(n.pool, n.b, n.bytes, kindQueued, now)
		granted.pushBack(n)
	}
}

// nextLocked returns the waiter to serve next, or nil if none can run.
func (c *Controller) nextLocked() *waiterNode {
	if h := c.mem.head; h != nil {
		if !c.mem.fits(h.bytes) || c.roomLocked(h.pool, h.b) {
			return h
		}
		c.mem.head = nil // its memory is there but not its ticket: the usual order resumes
	}
	var next *waiterNode
	for i := range c.pools {
		p := &c.pools[i]
		if p.out >= p.size {
			continue
		}
		if n := c.chooseLocked(Pool(i)); n != nil && (next == nil || n.seq < next.seq) {
			next = n
		}
	}
	return next
}

// chooseLocked returns the head of the bucket that goes next in pool, or nil: among the
// buckets with waiters in pool and room under their MaxConcurrent, the one that used
// the least of pool recently (the earliest head on a tie), or in FIFO mode the earliest head.
func (c *Controller) chooseLocked(pool Pool) *waiterNode {
	var best *waiterNode
	var bestUsed float64
	for _, b := range c.pools[pool].active {
		if b.capped() {
			continue
		}
		h := b.q[pool].head
		switch u := b.used[pool]; {
		case best == nil, !c.fifo && u < bestUsed, (c.fifo || u == bestUsed) && h.seq < best.seq:
			best, bestUsed = h, u
		}
	}
	return best
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

// waiterNode is one queued command: an element of its bucket's queue while it waits,
// then of a chain until its callback is made. Nodes are pooled.
type waiterNode struct {
	w          Waiter
	prev, next *waiterNode
	at         time.Time // when it was queued
	due        time.Time // a DeadlineWaiter's Due; zero for none
	seq        uint64    // queue order across pools and buckets
	b          *Bucket
	bytes      int64 // to charge when granted
	pool       Pool
	memWait    bool   // counted in memory.waiting
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
