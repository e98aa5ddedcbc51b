package tenant

import (
	"sync"
	"sync/atomic"
	"time"

	"kvd/gauge"
)

// Throttle is a node's throttling state: seed 003's per-second gauges and
// decision order, with the node's free pool shared max-min fairly among the
// buckets that want it instead of first come, first served.
//
// Each second (Tick) the throttle
//   - gives every bucket its effective reservation: its reserved units, or
//     10% of them when it had no connection during the last second (slow
//     start);
//   - makes the free pool capacity − Σ effective reservations;
//   - divides the free pool into per-bucket shares by max-min fairness over
//     the buckets' demands. A bucket that was throttled for want of free
//     pool last second demands as much as its hard limit allows; any other
//     bucket demands what it took from the free pool last second plus a
//     quarter. A bucket's share therefore depends on what it asks for, not
//     on how many connections ask;
//   - keeps what the shares leave unallocated as spare, which any bucket
//     past its share may take first come, first served. Sharing is thus
//     work-conserving: while the free pool is not contended nobody is
//     throttled by fairness, and once it is, the spare is gone and the
//     shares bind.
//
// Check, before a command runs, with the units known up front and the
// units that commands admitted before it hold (Hold):
//  1. bucket usage below its effective reservation → run;
//  2. free pool or node capacity exhausted → throttle;
//  3. a finite hard limit reached → throttle;
//  4. the bucket's share of the free pool and the spare both used up →
//     throttle;
//  5. otherwise run.
//
// A refusal counts the pending units (BucketStats.Refused): with the
// charged units, the bucket's demand on the node, which a cluster node
// publishes.
//
// Charge, after a command succeeded, with its actual units: the bucket's
// gauge, the node's gauge, and the part above the bucket's reservation to
// the bucket's and the node's free-pool gauges. Unthrottled connections skip
// Check but are charged all the same, so they do slow other tenants down.
//
// Check and Charge are lock-free and allocation free; Tick, Add, Remove and
// SetLimits take a mutex for the bucket list. All methods are safe for
// concurrent use. Time is an argument.
type Throttle struct {
	capacity atomic.Int64
	freeCap  atomic.Int64 // capacity − Σ effective reservations, this second
	free     gauge.Gauge  // units taken from the free pool this second
	node     gauge.Gauge  // all units used this second
	spare    atomic.Int64 // free pool left unallocated by the shares, this second
	spareUse gauge.Gauge  // units taken beyond shares this second
	ticks    atomic.Int64
	lastNode atomic.Int64 // node usage of the last finished second
	window   *gauge.Window

	mu          sync.Mutex
	buckets     []*BucketThrottle // guarded by mu; b.index is b's place
	demands     []int64           // guarded by mu; scratch for FairShare
	shares      []int64           // guarded by mu; scratch for FairShare
	rotate      int               // guarded by mu; rotates FairShare's remainder
	reservedSum int64             // guarded by mu: Σ positive effective reservations
	poolDemand  int64             // guarded by mu: Σ free-pool demands, when allMet
	allMet      bool              // guarded by mu: the shares meet every demand
}

// BucketThrottle is one bucket's throttle state and counters. Safe for
// concurrent use.
type BucketThrottle struct {
	name      string
	reserved  atomic.Int64 // configured; Unlimited turns throttling off
	hardLimit atomic.Int64 // configured; Unlimited for none
	effective atomic.Int64 // this second's reservation (slow start applied)
	share     atomic.Int64 // this second's share of the free pool
	used      gauge.Gauge  // units this second, with carry-over above the hard limit
	freeUsed  gauge.Gauge  // units taken from the free pool this second
	wantMore  atomic.Bool  // throttled for want of free pool this second
	active    atomic.Bool  // had a connection during this second
	clients   atomic.Int64
	warm      bool  // guarded by Throttle.mu: had a connection during the last second
	demand    int64 // guarded by Throttle.mu: units wanted this second, reservation included; Unlimited for all it can get
	pool      int64 // guarded by Throttle.mu: what it asked of the free pool at the last refresh
	index     int   // guarded by Throttle.mu: its place in Throttle.buckets

	ru, wu, commands, throttled, rejected, waitUS atomic.Int64
	refused                                       atomic.Int64 // pending units Check refused

	// Activity, for picking the buckets worth showing on a node with many
	// (see Activity).
	activeTick atomic.Int64 // the last tick that ended a second with activity; 0 for none
	activity   atomic.Int64 // units and events per second, decayed by 1/16 a second
	events     int64        // guarded by Throttle.mu: commands+throttled+rejected at the last tick
}

// NewThrottle returns a throttle with the given node capacity (units per
// second) whose first second starts at now.
func NewThrottle(capacity int64, now time.Time) *Throttle {
	t := &Throttle{window: gauge.NewWindow(now)}
	t.capacity.Store(capacity)
	t.freeCap.Store(capacity)
	return t
}

// Add registers a bucket with the given settings and returns its state. A
// new bucket has no connection yet, so it starts with 10% of its
// reservation and, until the next tick, no share of its own: it takes from
// the spare like everyone else. See AddMany for its cost.
func (t *Throttle) Add(name string, reserved, hardLimit int64) *BucketThrottle {
	return t.AddMany([]BucketLimits{{Name: name, Reserved: reserved, HardLimit: hardLimit}})[0]
}

// BucketLimits names a bucket and its throttle limits, for AddMany.
type BucketLimits struct {
	Name                string
	Reserved, HardLimit int64
}

// AddMany registers several buckets as Add does. While the free pool meets
// every bucket's demand (no bucket is held back by its share), adding a
// bucket only takes its effective reservation out of the free pool: O(1)
// per bucket, so creating buckets one at a time stays as cheap with
// 100,000 buckets as with ten. Otherwise the node's shares are computed
// again, once for the whole list.
func (t *Throttle) AddMany(list []BucketLimits) []*BucketThrottle {
	out := make([]*BucketThrottle, len(list))
	for i, l := range list {
		b := &BucketThrottle{name: l.Name}
		b.reserved.Store(l.Reserved)
		b.hardLimit.Store(l.HardLimit)
		out[i] = b
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, b := range out {
		b.index = len(t.buckets)
		t.buckets = append(t.buckets, b)
		eff := b.reserved.Load()
		if eff > 0 {
			eff /= 10 // not warm yet: slow start
			t.reservedSum += eff
		}
		b.effective.Store(eff) // no demand yet: no share, nothing asked of the pool
	}
	t.settleLocked()
	return out
}

// settleLocked brings the free pool and the spare in line with
// reservedSum after buckets came or went, and recomputes every share only
// when the new free pool no longer meets the demands they were computed
// for.
func (t *Throttle) settleLocked() {
	freeCap := max(0, t.capacity.Load()-t.reservedSum)
	if !t.allMet || t.poolDemand > freeCap {
		t.refreshLocked()
		return
	}
	t.freeCap.Store(freeCap)
	t.spare.Store(freeCap - t.poolDemand)
}

// Remove unregisters a bucket; its reservation returns to the free pool.
func (t *Throttle) Remove(b *BucketThrottle) {
	t.mu.Lock()
	defer t.mu.Unlock()
	i := b.index
	if i >= len(t.buckets) || t.buckets[i] != b {
		return // not registered
	}
	last := len(t.buckets) - 1
	t.buckets[i] = t.buckets[last]
	t.buckets[i].index = i
	t.buckets[last] = nil
	t.buckets = t.buckets[:last]
	b.index = -1
	if eff := b.effective.Load(); eff > 0 {
		t.reservedSum -= eff
	}
	t.poolDemand -= b.pool
	t.settleLocked()
}

// SetCapacity changes the node capacity; it applies at once.
func (t *Throttle) SetCapacity(capacity int64) {
	t.mu.Lock()
	t.capacity.Store(capacity)
	t.refreshLocked()
	t.mu.Unlock()
}

// Capacity returns the node capacity in units per second.
func (t *Throttle) Capacity() int64 { return t.capacity.Load() }

// SetLimits changes a bucket's reserved units and hard limit; they apply at
// once. Usage this second above a lowered hard limit is forgiven rather than
// carried over: it was within the limit in force when it happened.
func (t *Throttle) SetLimits(b *BucketThrottle, reserved, hardLimit int64) {
	t.mu.Lock()
	b.reserved.Store(reserved)
	if old := b.hardLimit.Swap(hardLimit); hardLimit >= 0 && (old < 0 || hardLimit < old) {
		b.used.Clamp(hardLimit)
	}
	t.refreshLocked()
	t.mu.Unlock()
}

// Hold holds the pending units of a command Check admitted, which will not
// be charged at once, in the gauges it will be charged to (the bucket's and
// the node's, and the free pool's and the spare's for the part above the
// bucket's reservation) until the returned Hold is released, which the caller does
// once it has charged the command's actual units, or when the command will
// not run after all. Later checks count what is held as used, so the
// commands a pipeline or many connections have admitted and not yet
// charged cannot all pass against the same gauges: the node stays within
// its capacity plus about one command per bucket (SPEC section 9). A
// bucket whose reservation is unlimited holds nothing, nor a pending of 0
// (an Unthrottled connection's command, which Check did not admit).
func (t *Throttle) Hold(b *BucketThrottle, pending int64) Hold {
	eff := b.effective.Load()
	if eff < 0 || pending <= 0 {
		return Hold{}
	}
	h := Hold{t: t, b: b, units: max(pending, 1)}
	h.free = min(h.units, max(0, b.used.Value()+b.used.Held()+h.units-eff))
	if h.free > 0 {
		h.spare = min(h.free, max(0, b.freeUsed.Value()+b.freeUsed.Held()+h.free-b.share.Load()))
	}
	b.used.Hold(h.units)
	t.node.Hold(h.units) // the node's usage is also what Unthrottled and unlimited buckets charge
	b.freeUsed.Hold(h.free)
	t.free.Hold(h.free)
	t.spareUse.Hold(h.spare)
	return h
}

// A Hold is the units an admitted command holds in its throttle's gauges
// (Throttle.Hold). The zero Hold holds nothing. Release it exactly once.
type Hold struct {
	t                  *Throttle
	b                  *BucketThrottle
	units, free, spare int64
}

// Release gives the held units back. Charge the command's actual units
// first, so that no check in between sees them neither held nor charged.
// It clears h, so a second Release does nothing.
func (h *Hold) Release() {
	if h.b == nil {
		return
	}
	h.b.used.Unhold(h.units)
	h.t.node.Unhold(h.units)
	h.b.freeUsed.Unhold(h.free)
	h.t.free.Unhold(h.free)
	h.t.spareUse.Unhold(h.spare)
	*h = Hold{}
}

// Check reports whether a throttled connection's command expected to use
// pending units may run now, counting the units that admitted commands
// hold as used. It neither holds nor charges anything.
func (t *Throttle) Check(b *BucketThrottle, pending int64) bool {
	eff := b.effective.Load()
	if eff < 0 || b.used.Below(eff, pending) {
		return true
	}
	if !t.free.Below(t.freeCap.Load(), pending) || !t.node.Below(t.capacity.Load(), pending) {
		// The pool ran out under this bucket: it wanted more of it, just
		// like a bucket stopped by its share (the last bucket to reach its
		// share finds the pool exhausted first).
		if !b.wantMore.Load() {
			b.wantMore.Store(true)
		}
		return b.refuse(pending)
	}
	if hl := b.hardLimit.Load(); hl >= 0 && !b.used.Below(hl, pending) {
		return b.refuse(pending)
	}
	if !b.freeUsed.Below(b.share.Load(), pending) && !t.spareUse.Below(t.spare.Load(), pending) {
		b.wantMore.Store(true)
		return b.refuse(pending)
	}
	return true
}

// refuse counts pending units a Check refused (the demand the bucket
// could not meet: a parked command is asked again, and counted again, at
// each tick that wakes it) and returns false.
func (b *BucketThrottle) refuse(pending int64) bool {
	b.refused.Add(pending)
	return false
}

// Charge records the actual units of a command that succeeded.
func (t *Throttle) Charge(b *BucketThrottle, ru, wu int64) {
	units := ru + wu
	if units <= 0 {
		return
	}
	if ru != 0 { // a locked add of 0 still takes the line from the other cores
		b.ru.Add(ru)
	}
	if wu != 0 {
		b.wu.Add(wu)
	}
	b.used.Add(units)
	t.node.Add(units)
	eff := b.effective.Load()
	if eff < 0 {
		return
	}
	over := min(units, b.used.Value()-eff)
	if over <= 0 {
		return
	}
	b.freeUsed.Add(over)
	t.free.Add(over)
	if beyond := min(over, b.freeUsed.Value()-b.share.Load()); beyond > 0 {
		t.spareUse.Add(beyond)
	}
}

// NextTick returns how long until the next second starts, in microseconds
// (1 to 1,000,000): the wait a non-blocking client is told.
func (t *Throttle) NextTick(now time.Time) int64 { return t.window.NextTickMicros(now) }

// Tick ends the seconds that have passed by now and prepares the next one.
// It returns false when now is still within the current second.
func (t *Throttle) Tick(now time.Time) bool {
	n := t.window.Advance(now)
	if n == 0 {
		return false
	}
	t.mu.Lock()
	tick := t.ticks.Load() + n
	for _, b := range t.buckets {
		b.noteActivityLocked(n, tick, b.tickLocked(n))
	}
	t.free.Tick(gauge.Unlimited)
	t.spareUse.Tick(gauge.Unlimited)
	t.lastNode.Store(t.node.Tick(gauge.Unlimited))
	t.ticks.Add(n)
	t.refreshLocked()
	t.mu.Unlock()
	return true
}

// tickLocked ends a second for one bucket: carry-over above the hard limit,
// slow start, and its free-pool demand for the next second. It returns
// the units used in the second that ended.
func (b *BucketThrottle) tickLocked(n int64) int64 {
	hl := b.hardLimit.Load()
	var used int64
	if hl >= 0 {
		used = b.used.Tick(n * hl)
	} else {
		used = b.used.Tick(gauge.Unlimited)
	}
	b.freeUsed.Tick(gauge.Unlimited)
	b.warm = b.active.Swap(b.clients.Load() > 0)
	switch {
	case b.reserved.Load() < 0:
		b.demand = 0
	case b.wantMore.Swap(false):
		b.demand = gauge.Unlimited
	default:
		b.demand = used + used/4 + 1 // all units; refreshLocked takes off the reservation
	}
	return used
}

// noteActivityLocked folds the second that ended at tick into the
// bucket's activity: units used, commands, throttle decisions and
// rejections, and whether a connection had it selected.
func (b *BucketThrottle) noteActivityLocked(n, tick, used int64) {
	events := b.commands.Load() + b.throttled.Load() + b.rejected.Load()
	fresh := events - b.events + used
	b.events = events
	act := b.activity.Load()
	for range min(n, 64) {
		act -= act / 16
	}
	if fresh > 0 {
		act += fresh
	}
	b.activity.Store(act)
	if fresh > 0 || b.clients.Load() > 0 {
		b.activeTick.Store(tick)
	}
}

// Activity returns the bucket's recent activity (units used plus
// commands, throttle decisions and rejections per second, averaged with
// a decay of 1/16 a second: about the last 16 s) and the tick that last
// ended a second in which it had any, or a connection (0: never). Compare
// the tick with NodeStats.Ticks.
func (b *BucketThrottle) Activity() (score, lastTick int64) {
	return b.activity.Load(), b.activeTick.Load()
}

// refreshLocked recomputes the effective reservations, the free pool and
// the shares from the current settings and demands: O(n) in the buckets.
func (t *Throttle) refreshLocked() {
	reservedSum := int64(0)
	for _, b := range t.buckets {
		eff := b.reserved.Load()
		if eff > 0 && !b.warm {
			eff /= 10
		}
		b.effective.Store(eff)
		if eff > 0 {
			reservedSum += eff
		}
	}
	t.reservedSum = reservedSum
	freeCap := max(0, t.capacity.Load()-reservedSum)
	t.freeCap.Store(freeCap)
	n := len(t.buckets)
	t.demands, t.shares = t.demands[:0], t.shares[:0]
	for i := range n {
		t.demands = append(t.demands, t.buckets[(i+t.rotate)%n].poolDemandLocked())
		t.shares = append(t.shares, 0)
	}
	gauge.FairShare(freeCap, t.demands, t.shares)
	spare, asked, met := freeCap, int64(0), true
	for i := range n {
		b := t.buckets[(i+t.rotate)%n]
		b.share.Store(t.shares[i])
		b.pool = t.demands[i]
		spare -= t.shares[i]
		asked += max(t.demands[i], 0)
		met = met && t.demands[i] >= 0 && t.shares[i] == t.demands[i]
	}
	t.spare.Store(max(0, spare))
	t.poolDemand, t.allMet = asked, met
	if n > 0 {
		t.rotate = (t.rotate + 1) % n
	}
}

// poolDemandLocked is what the bucket asks of the free pool this second:
// its demand beyond its effective reservation, within its hard limit;
// Unlimited (negative) for all it can get.
func (b *BucketThrottle) poolDemandLocked() int64 {
	d := b.demand
	switch {
	case b.reserved.Load() < 0:
		d = 0 // never draws on the free pool
	case d > 0:
		d = max(0, d-b.effective.Load())
	}
	if hl := b.hardLimit.Load(); hl >= 0 && b.reserved.Load() >= 0 {
		room := max(0, hl-b.effective.Load())
		if d < 0 || d > room {
			d = room
		}
	}
	return d
}

// Attach counts a connection that selected the bucket; from the next tick on
// the bucket has its full reservation.
func (b *BucketThrottle) Attach() {
	b.clients.Add(1)
	b.active.Store(true)
}

// Detach counts a connection that left the bucket.
func (b *BucketThrottle) Detach() { b.clients.Add(-1) }

// Clients returns the connections that have the bucket selected.
func (b *BucketThrottle) Clients() int64 { return b.clients.Load() }

// CountCommand, CountThrottled, CountRejected and AddWait feed the bucket's
// counters (STAT bucket_details).
func (b *BucketThrottle) CountCommand()           { b.commands.Add(1) }
func (b *BucketThrottle) CountThrottled()         { b.throttled.Add(1) }
func (b *BucketThrottle) CountRejected()          { b.rejected.Add(1) }
func (b *BucketThrottle) AddWait(d time.Duration) { b.waitUS.Add(d.Microseconds()) }
func (b *BucketThrottle) Limits() (reserved, hardLimit int64) {
	return b.reserved.Load(), b.hardLimit.Load()
}

// BucketStats is a snapshot of one bucket's throttle figures.
type BucketStats struct {
	Name                                                   string
	Clients, RU, WU, Commands, Throttled, Rejected, WaitUS int64
	Reserved, HardLimit, EffectiveReserved, Share, Used    int64
	// Held is the units admitted commands hold, not charged yet (Hold).
	Held int64
	// Refused is the pending units Check refused, in total: with the
	// units charged (RU+WU), the bucket's demand on this node.
	Refused int64
}

// Stats returns a snapshot of the bucket's figures.
func (b *BucketThrottle) Stats() BucketStats {
	return BucketStats{
		Name: b.name, Clients: b.clients.Load(), RU: b.ru.Load(), WU: b.wu.Load(),
		Commands: b.commands.Load(), Throttled: b.throttled.Load(), Rejected: b.rejected.Load(),
		WaitUS: b.waitUS.Load(), Reserved: b.reserved.Load(), HardLimit: b.hardLimit.Load(),
		EffectiveReserved: b.effective.Load(), Share: b.share.Load(), Used: b.used.Value(), Held: b.used.Held(),
		Refused: b.refused.Load(),
	}
}

// NodeStats is a snapshot of the node's throttle figures.
type NodeStats struct {
	Capacity, FreePool, FreeUsed, Spare, SpareUsed, NodeUsed, LastSecond, Ticks int64
	FreeHeld                                                                    int64 // of the free pool, held by admitted commands (Hold)
	TickStart                                                                   time.Time
}

// Stats returns a snapshot of the node's figures.
func (t *Throttle) Stats() NodeStats {
	return NodeStats{
		Capacity: t.capacity.Load(), FreePool: t.freeCap.Load(), FreeUsed: t.free.Value(), FreeHeld: t.free.Held(),
		Spare: t.spare.Load(), SpareUsed: t.spareUse.Value(),
		NodeUsed: t.node.Value(), LastSecond: t.lastNode.Load(), Ticks: t.ticks.Load(),
		TickStart: t.window.Start(),
	}
}
