package ingress

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"kvd/probe"
)

// A Controller admits commands into the read and write ticket pools under a node-wide
// ticket cap, per-bucket limits and a node-wide memory budget, queues those that must
// wait in per-bucket queues, hands freed tickets on fairly, and sizes the pools with a
// prober.
//
// Acquire takes a ticket or queues the command's Waiter; Release returns a ticket and
// its bytes, handing them straight to the next waiter that can use them; Settle corrects
// a read's charged bytes; Cancel removes a waiter whose client has gone; Tick, once per
// probe interval, expires waiters older than their queue timeout, ages the buckets'
// recent use and resizes the pools. The package comment states the invariants and the
// callback rules.
//
// A Controller is safe for concurrent use. Its mutex is held only briefly and never
// across a Waiter callback.
type Controller struct {
	opts  Options   // as validated by New; the settable limits live under mu
	nodes sync.Pool // *waiterNode, recycled once their callback has been made

	mu        sync.Mutex // guards every field below and every Bucket's fields
	pools     [numPools]pool
	nodeTotal int64                  // the node cap (NodeTickets)
	nodeOut   int64                  // normal tickets out, both pools
	limits    queueLimits            // node depth, timeout and their precomputed reasons
	mem       memory                 // the node's value-bytes budget
	fifo      bool                   // fair dequeue off (Options.FIFO, SetFIFO)
	node      Bucket                 // stands for work of no bucket (a nil *Bucket)
	buckets   []*Bucket              // the named buckets, for Tick's ageing
	waiting   map[Waiter]*waiterNode // every queued waiter, for Cancel
	seq       uint64                 // enqueue order across pools and buckets
	prober    *probe.Prober
	lastNow   time.Time // latest time any method was given; stamps Resize's grants

	sizes [numPools]atomic.Int64 // each pool's size, mirrored for PoolSize
}

// pool is one ticket pool. Its fields are guarded by Controller.mu.
type pool struct {
	size   int       // current size (total); out may exceed it while a shrink converges
	out    int       // normal tickets in use
	peak   int       // highest out since the last Tick
	slots  []uint32  // generation per ticket slot: odd while the slot is in use
	charge []int64   // bytes charged per slot while in use
	free   []int32   // indices of free slots
	queued int       // waiters of every bucket in this pool
	active []*Bucket // buckets with at least one waiter in this pool, in no order
	st     PoolStats
	// Sub-microsecond remainders of the time totals, so that short commands add up.
	procRemNS, queuedRemNS int64
}

// queueLimits are the node's queue settings and the reasons built from them once.
type queueLimits struct {
	maxDepth  int           // NoQueue or ≥ 0, per pool across buckets
	timeout   time.Duration // > 0; a bucket may override it
	expired   [numPools]string
	noTicket  [numPools]string // a nil Waiter found no ticket free
	dupWaiter [numPools]string // the Waiter is already queued
}

func newQueueLimits(maxDepth int, timeout time.Duration) queueLimits {
	l := queueLimits{maxDepth: maxDepth, timeout: timeout}
	for p := range numPools {
		l.expired[p] = fmt.Sprintf("timed out after %d ms in the %s queue", timeout.Milliseconds(), p)
		l.noTicket[p] = fmt.Sprintf("no ticket free in the %s pool", p)
		l.dupWaiter[p] = fmt.Sprintf("waiter already queued in the %s pool", p)
	}
	return l
}

// fullReason is the refusal of a bucket's full queue (BucketLimits.MaxQueued).
func fullReason(limit, queued int, bucket string) string {
	return fmt.Sprintf("queue full, limit=%d, queued=%d in bucket %s", limit, queued, bucket)
}

// nodeFullReason is the refusal of the node's full queue of pool
// (ingress.max_queue_depth, across buckets), for a command of bucket ("" for
// work of no bucket).
func nodeFullReason(pool Pool, limit, queued int, bucket string) string {
	var s string
	if limit == 0 {
		s = fmt.Sprintf("no ticket free in the %s pool and no queue (max_queue_depth=0)", pool)
	} else {
		s = fmt.Sprintf("queue full, limit=%d, queued=%d in the node's %s queue", limit, queued, pool)
	}
	if bucket != "" {
		s += ", for bucket " + bucket
	}
	return s
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
		mem:       memory{limit: o.MaxInflightBytes},
		fifo:      o.FIFO,
		waiting:   make(map[Waiter]*waiterNode),
		prober:    pr,
	}
	c.node.init(c, "", BucketLimits{})
	c.node.node = true
	c.nodes.New = func() any { return new(waiterNode) }
	r, w := pr.Sizes()
	c.setPoolSizeLocked(Read, r)
	c.setPoolSizeLocked(Write, w)
	return c, nil
}

// PoolSize returns pool's current size (its ticket count) without taking the
// Controller's lock: one atomic load, for the deadline gate's capacity on the hot
// path. It is 0 for a value that is not a pool.
func (c *Controller) PoolSize(pool Pool) int {
	if pool >= numPools {
		return 0
	}
	return int(c.sizes[pool].Load())
}

// setPoolSizeLocked sets pool's size and its PoolSize mirror.
func (c *Controller) setPoolSizeLocked(pool Pool, size int) {
	c.pools[pool].setSizeLocked(size)
	c.sizes[pool].Store(int64(c.pools[pool].size))
}

// Acquire tries to take a ticket from pool for one command of bucket b (nil for work
// of no bucket) whose value holds bytes (Estimate for a read, whose size is not known
// yet: see Settle).
//
//   - Admitted: t is valid; the caller runs the command and Releases t.
//   - Queued: w is queued; it will get exactly one Granted or Expired call later, on
//     another goroutine, unless Cancel(w) returns true first.
//   - Rejected: reason says why: a queue is full ("queue full, limit=100000,
//     queued=100000", or "queue full, limit=4, queued=4 in bucket b1"), b was removed
//     ("bucket b1 was deleted"), w is nil and the command cannot run now, w is already
//     queued, or pool is not a pool.
//   - TooLarge: bytes alone exceed MaxInflightBytes ("value of N bytes exceeds
//     max_inflight_bytes=M").
//
// A command is admitted only when its pool, the node cap and its bucket's
// MaxConcurrent have room, its bytes fit in the memory budget, no command of its
// bucket waits in its pool, and no waiter is held back for memory. Otherwise it waits
// in its bucket's queue of the pool.
func (c *Controller) Acquire(pool Pool, b *Bucket, w Waiter, bytes int64, now time.Time) (t Ticket, d Decision, reason string) {
	if pool >= numPools {
		return Ticket{}, Rejected, "no such pool"
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	b, bytes = c.chargeLocked(b, bytes, now)
	if c.admissibleLocked(pool, b, bytes) {
		return c.takeLocked(pool, b, bytes, kindAdmitted, now), Admitted, ""
	}
	if d, reason := c.refusalLocked(pool, b, w, bytes); d != Queued {
		c.pools[pool].st.Rejected++
		b.st.Rejected++
		return Ticket{}, d, reason
	}
	c.enqueueLocked(pool, b, w, bytes, now)
	return Ticket{}, Queued, ""
}

// TryAcquire admits the command at once when Acquire would, and otherwise returns
// false having changed nothing: no refusal is counted and nothing is queued. It is
// the server's first, allocation-free attempt, made before it builds the Waiter that
// Acquire may queue; the refusal, if any, is then counted once, by that Acquire.
func (c *Controller) TryAcquire(pool Pool, b *Bucket, bytes int64, now time.Time) (Ticket, bool) {
	if pool >= numPools {
		return Ticket{}, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	b, bytes = c.chargeLocked(b, bytes, now)
	if !c.admissibleLocked(pool, b, bytes) {
		return Ticket{}, false
	}
	return c.takeLocked(pool, b, bytes, kindAdmitted, now), true
}

// chargeLocked notes now and returns the bucket a command is counted in (b, or the
// node's for work of no bucket) and what it is charged against the memory budget
// (bytes, or for a read, bytes < 0, the bucket's estimate).
func (c *Controller) chargeLocked(b *Bucket, bytes int64, now time.Time) (*Bucket, int64) {
	c.noteNowLocked(now)
	if b == nil {
		b = &c.node
	}
	if bytes < 0 {
		bytes = c.mem.clamp(b.readEst)
	}
	return b, bytes
}

// admissibleLocked reports whether a command of b charged bytes may take a ticket of
// pool now, ahead of nobody.
func (c *Controller) admissibleLocked(pool Pool, b *Bucket, bytes int64) bool {
	return !b.removed && !c.mem.tooLarge(bytes) && c.mem.head == nil && b.q[pool].n == 0 &&
		c.roomLocked(pool, b) && c.mem.fits(bytes)
}

// refusalLocked returns why a command of b may not wait in pool's queue, or Queued.
func (c *Controller) refusalLocked(pool Pool, b *Bucket, w Waiter, bytes int64) (Decision, string) {
	q := c.pools[pool].queued
	switch {
	case b.removed:
		return Rejected, b.deleted
	case c.mem.tooLarge(bytes):
		c.mem.rejected++
		return TooLarge, fmt.Sprintf("value of %d bytes exceeds max_inflight_bytes=%d, in bucket %s", bytes, c.mem.limit, b.name)
	case c.limits.maxDepth == NoQueue || q >= c.limits.maxDepth:
		b.st.NumQueueFull++
		return Rejected, b.nodeFullLocked(pool, max(c.limits.maxDepth, 0), q)
	case b.limits.MaxQueued > 0 && b.queued >= b.limits.MaxQueued:
		b.st.NumQueueFull++
		if b.queued == b.limits.MaxQueued {
			return Rejected, b.full
		}
		return Rejected, fullReason(b.limits.MaxQueued, b.queued, b.name)
	case w == nil:
		return Rejected, c.limits.noTicket[pool]
	}
	if _, dup := c.waiting[w]; dup {
		return Rejected, c.limits.dupWaiter[pool]
	}
	return Queued, ""
}

// roomLocked reports whether pool, the node cap and b's MaxConcurrent have room for
// one more ticket. Memory is checked apart.
func (c *Controller) roomLocked(pool Pool, b *Bucket) bool {
	p := &c.pools[pool]
	return p.out < p.size && c.nodeOut < c.nodeTotal && !b.capped()
}

// Release ends the command that held t: the ticket and its bytes go back, or straight
// to the next waiters that can use them (whose Granted is called on this goroutine
// before Release returns). A ticket of a pool above its size after a shrink is not
// handed on. Releasing a ticket twice, or a zero Ticket, changes nothing but the pool's
// StaleReleases.
func (c *Controller) Release(t Ticket, now time.Time) { c.release(t, -1, now) }

// SettleRelease is Settle then Release under one lock: a command answered at once
// (a resident GET on the loop) teaches its bucket the size of its value and gives its
// ticket back.
func (c *Controller) SettleRelease(t Ticket, bytes int64, now time.Time) { c.release(t, bytes, now) }

// release is Release, settling t with bytes first unless bytes < 0.
func (c *Controller) release(t Ticket, settle int64, now time.Time) {
	if t.pool >= numPools {
		return
	}
	c.mu.Lock()
	c.noteNowLocked(now)
	p := &c.pools[t.pool]
	if t.kind == kindExempt {
		c.releaseExemptLocked(p, t)
		c.mu.Unlock()
		return
	}
	if settle >= 0 && p.inUseLocked(t) {
		t.b.learnReadLocked(settle)
	}
	bytes, ok := p.putLocked(t)
	if !ok {
		p.st.StaleReleases++
		c.mu.Unlock()
		return
	}
	c.nodeOut--
	c.mem.inflight -= bytes
	t.b.inFlight--
	t.b.st.Finished++
	p.st.Finished++
	addDuration(&p.st.TotalTimeProcessingUS, &p.procRemNS, now.Sub(t.at))
	var granted chain
	c.pumpLocked(now, &granted)
	c.mu.Unlock()
	c.deliver(&granted)
}

func (c *Controller) releaseExemptLocked(p *pool, t Ticket) {
	if p.st.ExemptFinished >= p.st.ExemptStarted {
		p.st.StaleReleases++
		return
	}
	p.st.ExemptFinished++
	if t.b != nil && t.b.st.ExemptFinished < t.b.st.ExemptStarted {
		t.b.st.ExemptFinished++
	}
}

// Settle replaces the bytes charged for t, a command acquired with Estimate (a read, or
// a GAT), with the real size of its value, and teaches t's bucket that size (a moving
// average, weight 1/8, used as the next estimate). Memory freed this way goes to waiters at once, on this
// goroutine. Settling an exempt, stale or zero Ticket changes nothing.
func (c *Controller) Settle(t Ticket, bytes int64, now time.Time) {
	if t.pool >= numPools || t.kind == kindExempt || bytes < 0 {
		return
	}
	c.mu.Lock()
	c.noteNowLocked(now)
	p := &c.pools[t.pool]
	if !p.inUseLocked(t) {
		c.mu.Unlock()
		return
	}
	old := p.charge[t.slot]
	p.charge[t.slot] = bytes
	c.mem.add(bytes - old)
	t.b.learnReadLocked(bytes)
	var granted chain
	if bytes < old {
		c.pumpLocked(now, &granted)
	}
	c.mu.Unlock()
	c.deliver(&granted)
}

// Cancel removes w from its queue because its client has gone, and counts it as
// canceled. It returns true if w was queued: then w gets no callback, ever. It returns
// false if w was not queued: it was never queued, or it has already been (or is being,
// or is about to be) Granted or Expired on another goroutine. After false, a Granted
// ticket belongs to w, which must Release it. If w was the waiter the memory was held
// back for, other waiters may be granted on this goroutine before Cancel returns.
func (c *Controller) Cancel(w Waiter, now time.Time) bool {
	c.mu.Lock()
	c.noteNowLocked(now)
	n, ok := c.waiting[w]
	if !ok {
		c.mu.Unlock()
		return false
	}
	held := c.mem.head == n
	c.dequeueLocked(n, now)
	c.pools[n.pool].st.Canceled++
	n.b.st.Canceled++
	var granted chain
	if held {
		c.pumpLocked(now, &granted)
	}
	c.mu.Unlock()
	c.recycle(n)
	c.deliver(&granted)
	return true
}

// StartExempt returns a ticket for a command exempt from admission (not a data command,
// or an Unthrottled connection) of bucket b (nil for none). It never waits, takes no
// room and is charged no bytes; it is counted in the pool's and the bucket's
// ExemptStarted and, when Released, ExemptFinished, but not in Finished, which counts
// normal commands only (the prober's throughput, SPEC section 6).
func (c *Controller) StartExempt(pool Pool, b *Bucket, now time.Time) Ticket {
	if pool >= numPools {
		return Ticket{}
	}
	c.mu.Lock()
	c.noteNowLocked(now)
	if b == nil {
		b = &c.node
	}
	c.pools[pool].st.ExemptStarted++
	b.st.ExemptStarted++
	c.mu.Unlock()
	return Ticket{at: now, b: b, slot: -1, gen: 1, pool: pool, kind: kindExempt}
}

// noteNowLocked remembers the latest time seen, for Resize.
func (c *Controller) noteNowLocked(now time.Time) {
	if now.After(c.lastNow) {
		c.lastNow = now
	}
}

// takeLocked takes a normal ticket from pool for a command of b holding bytes; the
// caller checked the room.
func (c *Controller) takeLocked(pool Pool, b *Bucket, bytes int64, kind ticketKind, now time.Time) Ticket {
	p := &c.pools[pool]
	slot, gen := p.getLocked()
	p.charge[slot] = bytes
	c.mem.add(bytes)
	c.nodeOut++
	p.st.Started++
	b.inFlight++
	b.st.Started++
	b.st.PeakInFlight = max(b.st.PeakInFlight, int64(b.inFlight))
	b.used[pool]++
	return Ticket{at: now, b: b, slot: slot, gen: gen, pool: pool, kind: kind}
}

// memory is the node's budget of value bytes held by normal commands in flight
// (Options.MaxInflightBytes; Impala's memory admission). It is guarded by
// Controller.mu.
type memory struct {
	limit    int64       // 0: no limit
	inflight int64       // bytes charged to tickets in use
	peak     int64       // highest inflight since start
	head     *waiterNode // the waiter the memory is held back for, or nil
	waiting  int64       // queued waiters that found their bytes short
	waited   int64       // waiters that ever found their bytes short
	rejected int64       // commands refused as TooLarge
}

// fits reports whether n more bytes stay within the limit. A command of no bytes
// always fits, and so does a waiter larger than a limit lowered after it queued, once
// nothing else is in flight (else it would hold everyone back until it timed out).
func (m *memory) fits(n int64) bool {
	return n == 0 || m.limit == 0 || m.inflight+n <= m.limit || m.inflight == 0
}

// tooLarge reports whether n bytes alone exceed the limit: Acquire's TooLarge.
func (m *memory) tooLarge(n int64) bool {
	return m.limit > 0 && n > m.limit
}

// clamp bounds a read's estimate by the limit, so that an estimate alone is never
// TooLarge.
func (m *memory) clamp(n int64) int64 {
	if m.limit > 0 {
		return min(n, m.limit)
	}
	return n
}

func (m *memory) add(n int64) {
	m.inflight += n
	m.peak = max(m.peak, m.inflight)
}

func (m *memory) markWaiting(n *waiterNode) {
	if !n.memWait {
		n.memWait = true
		m.waiting++
		m.waited++
	}
}

// unmarkWaiting forgets n as it leaves its queue.
func (m *memory) unmarkWaiting(n *waiterNode) {
	if n.memWait {
		m.waiting--
	}
	if m.head == n {
		m.head = nil
	}
}

// getLocked takes a free slot and marks it in use; the pool's out and peak grow.
func (p *pool) getLocked() (slot int32, gen uint32) {
	if k := len(p.free); k > 0 {
		slot = p.free[k-1]
		p.free = p.free[:k-1]
	} else {
		slot = int32(len(p.slots))
		p.slots = append(p.slots, 0)
		p.charge = append(p.charge, 0)
	}
	p.slots[slot]++ // even (free) → odd (in use)
	p.out++
	p.peak = max(p.peak, p.out)
	return slot, p.slots[slot]
}

// inUseLocked reports whether t is the ticket in use in its slot.
func (p *pool) inUseLocked(t Ticket) bool {
	return t.gen&1 == 1 && t.slot >= 0 && int(t.slot) < len(p.slots) && p.slots[t.slot] == t.gen
}

// putLocked frees t's slot if t is the ticket in use there, and returns the bytes it
// was charged.
func (p *pool) putLocked(t Ticket) (bytes int64, ok bool) {
	if !p.inUseLocked(t) {
		return 0, false
	}
	p.slots[t.slot]++ // odd → even: free, and every copy of t is now stale
	bytes, p.charge[t.slot] = p.charge[t.slot], 0
	p.free = append(p.free, t.slot)
	p.out--
	return bytes, true
}

// setSizeLocked sets the pool's size and reserves slot room for it, so that taking a
// ticket never allocates.
func (p *pool) setSizeLocked(size int) {
	p.size = max(size, 0)
	if n := max(p.size, p.out); cap(p.slots) < n {
		p.slots = append(make([]uint32, 0, n), p.slots...)
		p.charge = append(make([]int64, 0, n), p.charge...)
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
