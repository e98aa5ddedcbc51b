package ingress

import (
	"fmt"
	"time"
)

// A Bucket is one tenant's share of the Controller: its limits (BucketLimits), its
// wait queue in each pool, its recent use of each pool for fair dequeue, its read-size
// estimate and its figures. The server makes one per bucket with AddBucket and passes
// it to Acquire and StartExempt; a nil *Bucket stands for work of no bucket, which
// shares the node's limits only.
//
// A Bucket's fields are guarded by its Controller's mutex; its methods are safe for
// concurrent use.
type Bucket struct {
	c       *Controller
	name    string
	node    bool   // the Controller's stand-in for work of no bucket
	deleted string // "bucket B was deleted"

	// Guarded by c.mu.
	limits   BucketLimits
	full     string // "queue full, limit=L, queued=L in bucket B"
	nodeFull [numPools]struct {
		limit int    // +1: 0 until built
		text  string // nodeFullReason naming this bucket at that limit
	}
	expired     string // "timed out after N ms in bucket B", for expiredFor
	expiredFor  time.Duration
	removed     bool
	index       int               // in c.buckets
	inFlight    int               // normal tickets held, both pools
	queued      int               // waiters, both pools
	q           [numPools]queue   // FIFO per pool
	active      [numPools]int     // index in the pool's active list, -1 while q is empty
	used        [numPools]float64 // tickets taken from the pool recently, aged by Tick
	readEst     int64             // bytes a read is charged up front (learnReadLocked)
	queuedRemNS int64             // sub-microsecond remainder of QueueWaitTimeUS
	st          BucketStats
}

func (b *Bucket) init(c *Controller, name string, l BucketLimits) {
	b.c, b.name, b.readEst = c, name, DefaultReadEstimate
	b.deleted = fmt.Sprintf("bucket %s was deleted", name)
	b.active = [numPools]int{-1, -1}
	b.setLimitsLocked(l)
}

func (b *Bucket) setLimitsLocked(l BucketLimits) {
	l.MaxConcurrent, l.MaxQueued, l.QueueTimeout = max(l.MaxConcurrent, 0), max(l.MaxQueued, 0), max(l.QueueTimeout, 0)
	b.limits = l
	b.full = fullReason(l.MaxQueued, l.MaxQueued, b.name)
	b.expiredFor = 0 // rebuilt on the next expiry
}

// learnReadLocked teaches b's read estimate the size of a value a read
// turned out to have: a larger one at once, a smaller one 1/8 of the way.
// Reads are admitted on the estimate, so the memory bound holds for them
// only as far as it does not fall short: after a read of a large value the
// next ones are charged that much up front, and only a burst admitted
// before any of them settled can pass the bound.
func (b *Bucket) learnReadLocked(n int64) {
	if n > b.readEst {
		b.readEst = n
		return
	}
	b.readEst += (n - b.readEst) / 8
}

// nodeFullLocked is the refusal of the node's full queue of pool for a
// command of b, built once per bucket, pool and limit (a flood of refusals
// allocates nothing).
func (b *Bucket) nodeFullLocked(pool Pool, limit, queued int) string {
	if queued != limit {
		return nodeFullReason(pool, limit, queued, b.name) // the limit was lowered below the queue: rare
	}
	nf := &b.nodeFull[pool]
	if nf.limit != limit+1 {
		nf.limit, nf.text = limit+1, nodeFullReason(pool, limit, limit, b.name)
	}
	return nf.text
}

// Name returns the name given to AddBucket.
func (b *Bucket) Name() string { return b.name }

// capped reports whether the bucket holds as many tickets as its MaxConcurrent.
func (b *Bucket) capped() bool {
	return b.limits.MaxConcurrent > 0 && b.inFlight >= b.limits.MaxConcurrent
}

// AddBucket registers a bucket named name with limits l and returns its handle.
// Names are only used in reasons and need not be unique. Negative limits count as zero
// (no limit); l.Validate reports them.
func (c *Controller) AddBucket(name string, l BucketLimits) *Bucket {
	b := new(Bucket)
	b.init(c, name, l)
	c.mu.Lock()
	b.index = len(c.buckets)
	c.buckets = append(c.buckets, b)
	c.mu.Unlock()
	return b
}

// SetBucketLimits changes b's limits at run time (a config edit or a control command).
// Raising MaxConcurrent grants b's waiters at once, on the calling goroutine; lowering
// it revokes nothing (b's commands in flight drain below it); lowering MaxQueued keeps
// the waiters already queued. A new QueueTimeout applies to them from the next Tick.
// Negative limits count as zero.
func (c *Controller) SetBucketLimits(b *Bucket, l BucketLimits, now time.Time) {
	c.update(now, func() { b.setLimitsLocked(l) })
}

// RemoveBucket retires b (its bucket was deleted): every waiter of b gets Expired with
// "bucket B was deleted", on the calling goroutine, and later Acquires with b are
// Rejected with the same reason. Tickets b's commands hold stay valid and are Released
// as usual. Removing b twice, or nil, does nothing.
func (c *Controller) RemoveBucket(b *Bucket, now time.Time) {
	if b == nil || b.node {
		return
	}
	var expired, granted chain
	c.mu.Lock()
	c.noteNowLocked(now)
	if b.removed {
		c.mu.Unlock()
		return
	}
	b.removed = true
	last := len(c.buckets) - 1
	c.buckets[b.index] = c.buckets[last]
	c.buckets[b.index].index = b.index
	c.buckets[last] = nil
	c.buckets = c.buckets[:last]
	for i := range b.q {
		for n := b.q[i].head; n != nil; n = b.q[i].head {
			c.dequeueLocked(n, now)
			c.pools[i].st.Expired++
			n.reason = b.deleted
			expired.pushBack(n)
		}
	}
	c.pumpLocked(now, &granted) // the memory may have been held back for one of them
	c.mu.Unlock()
	c.deliver(&expired)
	c.deliver(&granted)
}

// timeoutLocked returns how long b's commands may wait.
func (c *Controller) timeoutLocked(b *Bucket) time.Duration {
	if b.limits.QueueTimeout > 0 {
		return b.limits.QueueTimeout
	}
	return c.limits.timeout
}

// expiredReasonLocked returns the reason given to b's waiters that timed out in pool:
// the node's "timed out after N ms in the write queue" for work of no bucket, else
// "timed out after N ms in bucket B", built again only when the timeout changed.
func (c *Controller) expiredReasonLocked(b *Bucket, pool Pool) string {
	if b.node {
		return c.limits.expired[pool]
	}
	if d := c.timeoutLocked(b); d != b.expiredFor {
		b.expiredFor = d
		b.expired = fmt.Sprintf("timed out after %d ms in bucket %s", d.Milliseconds(), b.name)
	}
	return b.expired
}

// BucketStats are one bucket's admission figures (STAT bucket_details). Counters only
// grow; InFlight, QueueLength and the limits are current values.
type BucketStats struct {
	// InFlight counts the bucket's normal commands holding a ticket, both pools;
	// PeakInFlight is its highest value since the bucket was added.
	InFlight, PeakInFlight int64
	// QueueLength counts its commands waiting now, both pools. NumQueued counts those
	// ever queued, Dequeued those that left the queue (granted, timed out, canceled,
	// or answered because the bucket was removed): NumQueued = Dequeued + QueueLength.
	QueueLength, NumQueued, Dequeued int64
	// NumQueueFull counts commands refused because its queue or the node's was full;
	// Rejected counts every refusal (queue full, TooLarge, removed, no Waiter).
	NumQueueFull, Rejected int64
	// NumTimedOut and Canceled count waiters expired by Tick and removed by Cancel.
	NumTimedOut, Canceled int64
	// QueueWaitTimeUS sums the time its waiters spent queued, in microseconds.
	QueueWaitTimeUS int64
	// Started and Finished count its normal tickets taken and released: Started =
	// Finished + InFlight. ExemptStarted and ExemptFinished count its exempt tickets.
	Started, Finished, ExemptStarted, ExemptFinished int64
	// MaxConcurrent and MaxQueued are its limits (0: none); QueueTimeoutMS is the
	// timeout its waiters get, its own or else the node's.
	MaxConcurrent, MaxQueued, QueueTimeoutMS int64
}

// Stats returns a consistent snapshot of b's figures.
func (b *Bucket) Stats() BucketStats {
	b.c.mu.Lock()
	defer b.c.mu.Unlock()
	s := b.st
	s.InFlight, s.QueueLength = int64(b.inFlight), int64(b.queued)
	s.MaxConcurrent, s.MaxQueued = int64(b.limits.MaxConcurrent), int64(b.limits.MaxQueued)
	s.QueueTimeoutMS = b.c.timeoutLocked(b).Milliseconds()
	return s
}

// bucketFigures are the per-bucket figure names, in BucketStats.Figures order.
var bucketFigures = [...]string{
	"in_flight", "queue_length", "num_queued", "num_queue_full", "num_timed_out",
	"queue_wait_time", "peak_in_flight", "max_concurrent", "max_queued", "queue_timeout_ms",
	"num_dequeued", "num_ingress_rejected", "num_canceled", "tickets_started", "tickets_finished",
	"exempt_started", "exempt_finished",
}

// Figures calls fn once per figure, named for STAT bucket_details and Prometheus, in
// this order: "in_flight", "queue_length", "num_queued", "num_queue_full",
// "num_timed_out", "queue_wait_time" (µs), "peak_in_flight", "max_concurrent",
// "max_queued", "queue_timeout_ms", "num_dequeued", "num_ingress_rejected", "num_canceled",
// "tickets_started", "tickets_finished", "exempt_started", "exempt_finished". It does not
// allocate. (num_ingress_rejected and tickets_… keep clear of bucket_details' throttle
// figures.)
func (s BucketStats) Figures(fn func(name string, value int64)) {
	v := [len(bucketFigures)]int64{
		s.InFlight, s.QueueLength, s.NumQueued, s.NumQueueFull, s.NumTimedOut,
		s.QueueWaitTimeUS, s.PeakInFlight, s.MaxConcurrent, s.MaxQueued, s.QueueTimeoutMS,
		s.Dequeued, s.Rejected, s.Canceled, s.Started, s.Finished,
		s.ExemptStarted, s.ExemptFinished,
	}
	for i, name := range bucketFigures {
		fn(name, v[i])
	}
}
