package ingress

import (
	"cmp"
	"math"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Deadline admission (SPEC section 7, seed 004 "Admissions Control", after SLEdge).
//
// A command of a bucket with a deadline needs mean ÷ deadline of a ticket, where mean
// is the mean of the bucket's recent execution times for the command's class (or
// expected_execution_us until there is a sample). The demand a pool has accepted and
// not yet released, A, is work in flight: A × deadline ticket-seconds, which a pool
// of C tickets works off in A × deadline ÷ C. So a command that has already waited w
// since it arrived, and would find A ahead of it, is predicted to complete after
// w + A × deadline ÷ C + pXX, pXX being the deadline_percentile of the same execution
// times; it is admitted only while that is at most its deadline, and gives its demand
// back when it completes. All figures are integers in millionths of a ticket
// (Micro), so that releasing exactly what was taken brings the ledger back to exactly
// zero.
//
// The seed charges pXX ÷ deadline and admits while A + own ≤ C. kvd keeps its ledger
// but charges the mean, and puts the percentile where the tail belongs, on the
// command's own execution: the commands ahead of it are many, and their sum is near
// their mean; its own execution is one draw, which the percentile bounds. Charging
// the percentile overstates the queue by pXX ÷ mean, which for synced writes under
// group commit was about 8 at p90 (docs/deadline-admission.md) and refused a large
// share of the commands at half the capacity.
//
// The mean charged is of the time commands hold their tickets, which is what the
// pool's capacity is spent on. A synced write gives its ticket back at commit, before
// the fsync it shares with other commands (Returned), and its demand leaves the
// ledger then; its pXX, from ticket to reply, still includes the fsync.

// Micro is the unit of demand: one millionth of a ticket.
const Micro = 1_000_000

// A DeadlineGate is the node-wide ledger of accepted demand, one figure per pool.
//
// Why per pool and not per bucket: the capacity being divided is the pool's ticket
// count, which every bucket shares. The seed keeps one "total accepted work" for the
// whole runtime against one capacity; were the ledger per bucket, each of N buckets
// could accept up to the whole pool and together oversubscribe it N times, and no
// bucket's deadline would hold. So every bucket with a deadline charges the same
// ledger of its pool. Buckets without a deadline charge nothing: their commands still
// take tickets, and a pool shared with them may be busier than the ledger says (the
// gate's promise holds for the deadline traffic only; SPEC's per-bucket
// max_concurrent is the tool to bound the others).
//
// A DeadlineGate is safe for concurrent use: the ledger is one atomic per pool,
// changed by compare-and-swap. The zero value is ready to use.
type DeadlineGate struct {
	accepted [numPools]atomic.Int64 // Micro; never negative
	stale    atomic.Int64           // releases that would have taken a ledger below zero
}

// demandOf is the demand in Micro, at least 1, of a command whose class executes in
// mean on average under deadline d (> 0): mean ÷ D.
func demandOf(mean time.Duration, d int64) int64 {
	return max((int64(mean)*Micro+d-1)/d, 1)
}

// TargetPercent is the share of its deadline within which the gate predicts a
// command must complete to be admitted. The rest is left for what the server cannot
// see or predict: the time a command's bytes wait in the kernel before the loop
// reads them and its reply waits on the way back (on a saturated machine, tens of
// milliseconds), and the error of the queue prediction itself. Aimed at the whole
// deadline, the gate admits until predicted completions crowd against it (a median
// of 0.6–0.95 of the deadline at 1.5× load), and whatever it cannot see pushes 10–40%
// of them past it at the client; aimed at 70%, 99% finished within the deadline at
// the client in the same runs (docs/deadline-admission.md, run F).
const TargetPercent = 70

// limitAhead is the largest demand a pool of capacity tickets may have accepted
// ahead of a command that has waited waited already, needs pxx to execute and must
// complete within d (> 0): the A for which waited + A × d ÷ capacity + pxx equals
// TargetPercent of d, rounded down. It is negative when no A will do (the command
// cannot complete in time even at the head of an empty queue, or the pool has no
// ticket).
func limitAhead(waited, pxx time.Duration, d int64, capacity int) int64 {
	slack := d*TargetPercent/100 - int64(waited) - int64(pxx)
	if slack < 0 || capacity <= 0 {
		return -1
	}
	return int64(float64(slack) / float64(d) * float64(capacity) * Micro)
}

// Accepted returns the demand a pool has accepted and not yet released, in Micro.
func (g *DeadlineGate) Accepted(p Pool) int64 {
	if p >= numPools {
		return 0
	}
	return g.accepted[p].Load()
}

// StaleReleases counts releases that would have taken a ledger below zero (a Grant
// given to Done or Expire twice); the ledger was clamped at zero instead.
func (g *DeadlineGate) StaleReleases() int64 { return g.stale.Load() }

// take adds d to pool p's ledger if the ledger it finds is at most limit. It
// returns the ledger it saw (before adding) and whether it added.
func (g *DeadlineGate) take(p Pool, d, limit int64) (seen int64, ok bool) {
	a := &g.accepted[p]
	for {
		seen = a.Load()
		if seen > limit {
			return seen, false
		}
		if a.CompareAndSwap(seen, seen+d) {
			return seen, true
		}
	}
}

// add adds d to pool p's ledger unconditionally (a command admitted alone).
func (g *DeadlineGate) add(p Pool, d int64) { g.accepted[p].Add(d) }

// release subtracts d from pool p's ledger, never below zero.
func (g *DeadlineGate) release(p Pool, d int64) {
	a := &g.accepted[p]
	for {
		v := a.Load()
		nv := v - d
		if nv < 0 {
			nv = 0
		}
		if a.CompareAndSwap(v, nv) {
			if v-d < 0 {
				g.stale.Add(1)
			}
			return
		}
	}
}

// A Grant is one admitted command's share of its pool: give it to Done (or Expire)
// exactly once (or to Release if it never runs). It is a small value. The zero Grant, and the Grant of a bucket without
// a deadline, hold no demand; Done still records their execution time.
type Grant struct {
	at       time.Time     // the command's arrival: the deadline counts from here
	deadline time.Duration // the bucket's deadline then; 0 = none
	demand   int64         // Micro taken from the pool's ledger (mean ÷ deadline)
	pxx      time.Duration // the pXX of the command's own execution in the prediction
	waited   time.Duration // refused grants: arrival to Admit, for the reason
	accepted int64         // refused grants: the ledger Admit saw, for the reason
	pool     Pool
	pct      uint8 // the percentile pxx is
	held     bool  // counted in flight (and its demand taken): Done, Expire or Release ends it
	ledger   bool  // its demand is still on the ledger (until Returned, or its end)
	alone    bool  // admitted as its bucket's only command of its class in flight
}

// Pool returns the command class the grant was made for.
func (g Grant) Pool() Pool { return g.pool }

// Demand returns the demand the grant holds, in Micro.
func (g Grant) Demand() int64 { return g.demand }

// PXX returns the execution-time percentile the prediction used for the command's own
// execution.
func (g Grant) PXX() time.Duration { return g.pxx }

// Alone reports whether the grant was made because its bucket had no other command
// of its class in flight, whatever the prediction (see Admit).
func (g Grant) Alone() bool { return g.alone }

// Deadline returns the bucket's relative deadline at admission (0 = none).
func (g Grant) Deadline() time.Duration { return g.deadline }

// Due returns the absolute deadline: admission time plus the relative deadline. It is
// the zero Time when the grant has no deadline.
func (g Grant) Due() time.Time {
	if g.deadline == 0 {
		return time.Time{}
	}
	return g.at.Add(g.deadline)
}

// Passed reports whether the grant has a deadline and it has passed at now (a queued
// command in that state should be answered 0x86 and given to Expire, not run).
func (g Grant) Passed(now time.Time) bool {
	return g.deadline > 0 && now.Sub(g.at) > g.deadline
}

// AppendReason appends the plain-text reason for a refused Grant (Admit's ok false)
// of a command of bucket to dst: "deadline 50 ms cannot be met: write p90 2000 us +
// queue ~34000 us (5.440000 of 8 tickets accepted) + 0 us waited before admission >
// 35000 us (70% of the deadline) in bucket B". The queue figure is the wait Admit
// predicted from the ledger it saw. capacity is the one given to Admit.
func (g Grant) AppendReason(dst []byte, bucket string, capacity int) []byte {
	dst = append(dst, "deadline "...)
	dst = strconv.AppendInt(dst, g.deadline.Milliseconds(), 10)
	dst = append(dst, " ms cannot be met: "...)
	dst = append(dst, g.pool.String()...)
	dst = append(dst, " p"...)
	dst = strconv.AppendInt(dst, int64(g.pct), 10)
	dst = append(dst, ' ')
	dst = strconv.AppendInt(dst, g.pxx.Microseconds(), 10)
	dst = append(dst, " us + queue ~"...)
	dst = strconv.AppendInt(dst, queueWait(g.accepted, capacity, g.deadline).Microseconds(), 10)
	dst = append(dst, " us ("...)
	dst = appendMicro(dst, g.accepted)
	dst = append(dst, " of "...)
	dst = strconv.AppendInt(dst, int64(capacity), 10)
	dst = append(dst, " tickets accepted) + "...)
	dst = strconv.AppendInt(dst, g.waited.Microseconds(), 10)
	dst = append(dst, " us waited before admission > "...)
	dst = strconv.AppendInt(dst, (g.deadline * TargetPercent / 100).Microseconds(), 10)
	dst = append(dst, " us ("...)
	dst = strconv.AppendInt(dst, TargetPercent, 10)
	dst = append(dst, "% of the deadline) in bucket "...)
	return append(dst, bucket...)
}

// queueWait is the wait the gate predicts behind accepted Micro in a pool of capacity
// tickets under deadline d: accepted × d ÷ capacity (one deadline with no ticket).
func queueWait(accepted int64, capacity int, d time.Duration) time.Duration {
	if capacity <= 0 {
		return d
	}
	return time.Duration(float64(accepted) / float64(int64(capacity)*Micro) * float64(d))
}

// appendMicro appends v/Micro with six decimals.
func appendMicro(dst []byte, v int64) []byte {
	if v < 0 {
		dst, v = append(dst, '-'), -v
	}
	dst = strconv.AppendInt(dst, v/Micro, 10)
	n := len(dst)
	dst = strconv.AppendInt(dst, v%Micro+Micro, 10) // "1dddddd": keeps the zeros
	dst[n] = '.'
	return dst
}

// A BucketDeadline is one bucket's deadline gate: its settings, one Window of
// execution times per command class, the demand a command of each class needs now,
// and the bucket's counters. It charges the node-wide DeadlineGate it was made with.
//
// How the server uses it (SPEC section 7): on the event loop, before asking the
// Controller for a ticket, Admit(class, pool size, arrival, now), arrival being when
// the command's bytes reached the server. Refused: answer 0x86 at once with the
// Grant's AppendReason and retryAfter; nothing to give back. Admitted: keep the Grant
// with the command, through the ticket queue if it waits. A command granted a ticket
// (or still queued at the server's housekeeping tick) whose Grant has Passed is
// answered 0x86 and given to Expire instead of being run. When the reply of a command
// that ran is ready (on the worker), Done(grant, time from ticket to reply, success,
// now).
//
// The demand is thus held from admission to completion, queue wait included, and
// that is what the prediction rests on: the accepted commands' mean execution times
// sum to A × deadline, which a pool of capacity tickets works off in A × deadline ÷
// capacity; then the command runs for about its pXX. The margin is pXX ÷ mean on the
// command's own execution and none on the queue, whose length is a sum; and the gate
// charges nothing for buckets without a deadline sharing the pool. The time a command waited before Admit (in its connection's input, behind the
// connection's own commands, or parked by the throttle) counts against its deadline
// too: without it, a backlog the gate cannot see would grow unchecked.
//
// A command of a class of which its bucket has nothing in flight is always admitted
// (while its own deadline has not yet passed), whatever the prediction: otherwise a
// bucket whose pXX alone exceeds its deadline, or whose neighbours keep the pool's
// ledger full, would never run a command again, and its window would never learn that
// execution got faster.
//
// Admit is a few atomic loads, one compare-and-swap and one add, and does not
// allocate. Done takes the class's mutex to insert into the window (O(256)) and
// recompute the demand. A BucketDeadline is safe for concurrent use.
type BucketDeadline struct {
	gate *DeadlineGate

	deadline   atomic.Int64 // ns; 0 = no deadline, Admit always admits
	percentile atomic.Int32
	maxConc    atomic.Int32 // DeadlineSettings.MaxConcurrent
	classes    [numPools]classWindow

	rejected atomic.Int64 // Admit refused
	expired  atomic.Int64 // Expire: the deadline passed while queued
	missed   atomic.Int64 // Done after the deadline
}

// classWindow is the state of one command class of a bucket.
type classWindow struct {
	demand   atomic.Int64 // Micro a command needs now: ceil(mean·Micro/deadline) ≥ 1
	pxx      atomic.Int64 // ns: the window's pXX, or expected until it has a sample
	inflight atomic.Int64 // grants holding demand, not yet given back; never negative

	mu       sync.Mutex    // guards the fields below
	win      *Window       // nil until the class's first sample: 4 KiB a bucket never used does not pay
	hold     *holdTimes    // ticket times, nil until the first
	expected time.Duration // expected_execution_us
}

// holdTimes are the last WindowSize times commands held their tickets (granted →
// returned), with their sum: the mean a command's demand is charged on. For most
// commands that is their execution time; a synced write returns its ticket before
// the fsync it shares with others, and the queue for tickets drains at this pace,
// not at the pace of replies.
type holdTimes struct {
	ring [WindowSize]time.Duration
	n    int
	next int
	sum  time.Duration
}

// addHold records one ticket time. c.mu must be held.
func (c *classWindow) addHold(d time.Duration) {
	h := c.hold
	if h == nil {
		h = new(holdTimes)
		c.hold = h
	}
	d = min(max(d, 0), maxExec)
	if h.n == WindowSize {
		h.sum -= h.ring[h.next]
	} else {
		h.n++
	}
	h.ring[h.next] = d
	h.sum += d
	h.next = (h.next + 1) % WindowSize
}

// holdMean is the mean ticket time, false without samples. c.mu must be held.
func (c *classWindow) holdMean() (time.Duration, bool) {
	if c.hold == nil || c.hold.n == 0 {
		return 0, false
	}
	return c.hold.sum / time.Duration(c.hold.n), true
}

// NewBucketDeadline returns a bucket's gate charging g, with settings s (validated).
func NewBucketDeadline(g *DeadlineGate, s DeadlineSettings) (*BucketDeadline, error) {
	b := &BucketDeadline{gate: g}
	if err := b.SetSettings(s); err != nil {
		return nil, err
	}
	return b, nil
}

// SetSettings changes the bucket's settings for the commands admitted from now on;
// grants already made keep (and give back) their own demand. The windows are kept:
// execution times do not depend on the deadline.
func (b *BucketDeadline) SetSettings(s DeadlineSettings) error {
	s.EnsureDefaults()
	if err := s.Validate(); err != nil {
		return err
	}
	b.deadline.Store(int64(s.Deadline))
	b.percentile.Store(int32(s.Percentile))
	b.maxConc.Store(int32(min(s.MaxConcurrent, math.MaxInt32)))
	for p := range b.classes {
		c := &b.classes[p]
		c.mu.Lock()
		c.expected = s.ExpectedExecution
		b.refreshLocked(c)
		c.mu.Unlock()
	}
	return nil
}

// Settings returns the bucket's current settings.
func (b *BucketDeadline) Settings() DeadlineSettings {
	c := &b.classes[Read]
	c.mu.Lock()
	defer c.mu.Unlock()
	return DeadlineSettings{
		Deadline:          time.Duration(b.deadline.Load()),
		Percentile:        int(b.percentile.Load()),
		ExpectedExecution: c.expected,
		MaxConcurrent:     int(b.maxConc.Load()),
	}
}

// Capacity is the capacity Admit and Fits are to be given for the bucket's
// commands of a pool of pool tickets: the pool, or the bucket's own ticket
// cap (max_concurrent) if that is smaller.
func (b *BucketDeadline) Capacity(pool int) int {
	if m := int(b.maxConc.Load()); m > 0 && m < pool {
		return m
	}
	return pool
}

// maxExec caps the execution times demand and predictions use, so that a time ×
// Micro fits an int64.
const maxExec = time.Hour

// refreshLocked recomputes c's pXX and demand from its window (or expected) and the
// bucket's current deadline and percentile. c.mu must be held.
func (b *BucketDeadline) refreshLocked(c *classWindow) {
	pxx, ok := c.win.Percentile(int(b.percentile.Load()))
	mean, held := c.holdMean()
	if !held {
		mean, _ = c.win.Mean()
	}
	if !ok {
		pxx = c.expected
		if !held {
			mean = c.expected
		}
	}
	c.pxx.Store(int64(min(pxx, maxExec)))
	d := b.deadline.Load()
	if d <= 0 {
		c.demand.Store(0)
		return
	}
	c.demand.Store(demandOf(min(mean, maxExec), d))
}

// Admit decides whether a command of class (the pool it will take a ticket from) can
// meet the bucket's deadline in a pool of capacity tickets, given the demand the pool
// has accepted across all buckets. ok true: run or queue the command and give the
// Grant to Done or Expire exactly once. ok false: refuse the command (0x86); the Grant
// only explains why (AppendReason) and retryAfter estimates when to try again. A
// bucket without a deadline admits everything, with a Grant that holds no demand.
//
// arrival stamps the Grant: the deadline counts from it, so pass when the command
// reached the server (its bytes read, before any wait in the connection's input or
// for the throttle), not a later moment; now − arrival is the time already spent.
// The command is admitted when
//
//   - its bucket has no other command of class in flight and its deadline has not
//     passed yet (a command alone is always admitted: no bucket locks itself out), or
//   - (now − arrival) + A × deadline ÷ capacity + pXX ≤ deadline, A being the demand
//     the pool had accepted before it (see limitAhead).
//
// retryAfter is the time for the excess demand to drain (the pool releasing capacity
// ÷ deadline tickets per unit of time) before a fresh command would be admitted: at
// least 1 µs, rounded up to a microsecond; pXX when not even a fresh command at the
// head of an empty queue could meet the deadline (then the bucket's command in flight
// must end first); one deadline with capacity 0.
func (b *BucketDeadline) Admit(class Pool, capacity int, arrival, now time.Time) (g Grant, ok bool, retryAfter time.Duration) {
	if class >= numPools {
		class = Write
	}
	g = Grant{at: arrival, pool: class}
	d := b.deadline.Load()
	if d == 0 {
		return g, true, 0
	}
	c := &b.classes[class]
	g.deadline = time.Duration(d)
	g.demand = c.demand.Load()
	g.pxx = time.Duration(c.pxx.Load())
	g.pct = uint8(b.percentile.Load())
	waited := max(now.Sub(arrival), 0)
	if int64(waited) < d && c.inflight.Load() == 0 && c.inflight.CompareAndSwap(0, 1) {
		b.gate.add(class, g.demand)
		g.held, g.ledger, g.alone = true, true, true
		return g, true, 0
	}
	seen, ok := b.gate.take(class, g.demand, limitAhead(waited, g.pxx, d, capacity))
	if ok {
		c.inflight.Add(1)
		g.held, g.ledger = true, true
		return g, true, 0
	}
	b.rejected.Add(1)
	g.accepted, g.waited = seen, waited
	return g, false, retryEstimate(seen, g.pxx, d, capacity)
}

// Fits reports whether Admit would admit a command of class that arrived at arrival
// in a pool of capacity tickets now, without taking or counting anything (another
// Admit may change the answer at once). The server uses it to leave a command in its
// input, rather than answer it ahead of the replies of a batch being collected.
func (b *BucketDeadline) Fits(class Pool, capacity int, arrival, now time.Time) bool {
	if class >= numPools {
		class = Write
	}
	d := b.deadline.Load()
	if d == 0 {
		return true
	}
	c := &b.classes[class]
	waited := max(now.Sub(arrival), 0)
	if int64(waited) < d && c.inflight.Load() == 0 {
		return true
	}
	return b.gate.accepted[class].Load() <= limitAhead(waited, time.Duration(c.pxx.Load()), d, capacity)
}

// retryEstimate is Admit's retryAfter for a command refused with seen Micro accepted
// in a pool of capacity tickets, pXX pxx and deadline d (> 0): the time for the
// excess over a fresh command's limitAhead to drain at capacity ÷ d tickets per unit
// of time.
func retryEstimate(seen int64, pxx time.Duration, d int64, capacity int) time.Duration {
	if capacity <= 0 {
		return time.Duration(d)
	}
	limit := limitAhead(0, pxx, d, capacity)
	if limit < 0 {
		return max(pxx, time.Microsecond)
	}
	r := queueWait(max(seen-limit, 0), capacity, time.Duration(d))
	r = (r + time.Microsecond - 1).Truncate(time.Microsecond)
	return max(r, time.Microsecond)
}

// Done ends an admitted command: it gives the Grant's demand back to the pool, counts
// a miss if now is past the Grant's deadline (arrival + deadline_ms: the reply is
// late whatever the reason), and, for a successful command, adds exec (ticket granted
// → reply ready) to the class's window and recomputes the class's demand.
func (b *BucketDeadline) Done(g Grant, exec time.Duration, success bool, now time.Time) {
	b.Release(g)
	if g.Passed(now) {
		b.missed.Add(1)
	}
	if !success || g.pool >= numPools {
		return
	}
	c := &b.classes[g.pool]
	c.mu.Lock()
	if c.win == nil {
		c.win = new(Window)
	}
	c.win.Add(exec)
	if g.ledger {
		c.addHold(exec) // not Returned: it held its ticket until its reply
	}
	b.refreshLocked(c)
	c.mu.Unlock()
}

// Returned is told that an admitted command gave its ticket back before its reply
// was ready, after holding it for held (a synced write, whose ticket returns at
// commit while it waits for the fsync that many commands share). Its demand leaves
// the ledger now, since the pool can serve the next command, and held is a sample of
// the ticket time demand is charged on; the command stays in flight until Done.
// Returned returns the Grant to give to Done (or Expire, or Release) later.
func (b *BucketDeadline) Returned(g Grant, held time.Duration) Grant {
	if !g.ledger || g.pool >= numPools {
		return g
	}
	b.gate.release(g.pool, g.demand)
	g.ledger = false
	c := &b.classes[g.pool]
	c.mu.Lock()
	c.addHold(held)
	c.mu.Unlock()
	return g
}

// Expire ends an admitted command that will not run because its deadline passed while
// it waited: it gives the demand back and counts it in Expired.
func (b *BucketDeadline) Expire(g Grant) {
	b.Release(g)
	b.expired.Add(1)
}

// Release gives an admitted Grant's demand back without counting anything: for a
// command refused after Admit (queue full), cancelled while queued (client gone,
// bucket deleted), or otherwise ended without running.
func (b *BucketDeadline) Release(g Grant) {
	if !g.held || g.pool >= numPools {
		return
	}
	if g.ledger {
		b.gate.release(g.pool, g.demand)
	}
	c := &b.classes[g.pool]
	for {
		n := c.inflight.Load()
		if n <= 0 || c.inflight.CompareAndSwap(n, n-1) {
			return // n ≤ 0: a Grant given back twice, counted by the gate
		}
	}
}

// DeadlineStats are a bucket's deadline figures (STAT bucket_details).
type DeadlineStats struct {
	Deadline   time.Duration // deadline_ms; 0 = none
	Percentile int           // deadline_percentile in force (DefaultDeadlinePercentile when unset)
	// ExpectedExecution is expected_execution_us in force
	// (DefaultExpectedExecution when unset).
	ExpectedExecution time.Duration
	Rejected          int64 // num_deadline_rejected: refused by Admit
	Expired           int64 // num_deadline_expired: deadline passed while queued
	Missed            int64 // num_deadline_missed: completed after the deadline
	// ReadPXX and WritePXX are the pXX each class's demand uses now
	// (window_read_pXX_us, window_write_pXX_us); ReadSamples and WriteSamples say how
	// many samples the windows hold (0: the figure is expected_execution_us).
	ReadPXX, WritePXX         time.Duration
	ReadSamples, WriteSamples int
}

// Stats returns the bucket's figures.
func (b *BucketDeadline) Stats() DeadlineStats {
	s := DeadlineStats{
		Deadline:   time.Duration(b.deadline.Load()),
		Percentile: cmp.Or(int(b.percentile.Load()), DefaultDeadlinePercentile),
		Rejected:   b.rejected.Load(),
		Expired:    b.expired.Load(),
		Missed:     b.missed.Load(),
		ReadPXX:    time.Duration(b.classes[Read].pxx.Load()),
		WritePXX:   time.Duration(b.classes[Write].pxx.Load()),
	}
	s.ReadSamples = b.samples(Read)
	s.WriteSamples = b.samples(Write)
	s.ExpectedExecution = cmp.Or(b.Settings().ExpectedExecution, DefaultExpectedExecution)
	return s
}

func (b *BucketDeadline) samples(p Pool) int {
	c := &b.classes[p]
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.win.Len()
}

// AppendSorted appends class p's window in ascending order to dst (for tests and
// diagnostics).
func (b *BucketDeadline) AppendSorted(dst []time.Duration, p Pool) []time.Duration {
	c := &b.classes[p]
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.win.AppendSorted(dst)
}

// WindowSize is how many execution times a Window keeps (seed 004's performance
// window; SPEC section 7: the last 256 per bucket and command class).
const WindowSize = 256

// A Window holds the last WindowSize execution times it was given, in two fixed
// arrays: ring in insertion order, so that the oldest sample is known, and sorted in
// ascending order, so that a percentile is one index. Add evicts the oldest sample
// once the window is full: it finds the evicted value and the new one in sorted by
// binary search and shifts the elements between the two positions by one with a
// single copy, so an insert costs O(log 256) comparisons plus at most 255 moved
// values and never allocates. Percentile is O(1), and so is Mean: the window keeps
// the sum of its samples.
//
// The zero Window is empty and ready to use; a nil *Window is an empty window to
// Len, Percentile and AppendSorted. A Window is a fixed 4 KiB value: pass pointers,
// and allocate it when its first sample comes (BucketDeadline does: a node with
// 100,000 buckets would otherwise hold 800 MiB of empty windows). It is not safe for
// concurrent use; BucketDeadline guards its windows with a mutex.
type Window struct {
	ring   [WindowSize]time.Duration // insertion order; ring[next] is the oldest once full
	sorted [WindowSize]time.Duration // sorted[:n] ascending
	n      int                       // samples held, ≤ WindowSize
	next   int                       // ring index the next sample goes to
	sum    time.Duration             // of the samples held
}

// Len returns how many samples the window holds (at most WindowSize).
func (w *Window) Len() int {
	if w == nil {
		return 0
	}
	return w.n
}

// Add records one execution time, evicting the oldest once the window is full.
// Negative durations count as 0, and durations over an hour as an hour.
func (w *Window) Add(d time.Duration) {
	d = min(max(d, 0), maxExec)
	w.sum += d
	if w.n < WindowSize {
		i, _ := slices.BinarySearch(w.sorted[:w.n], d)
		copy(w.sorted[i+1:w.n+1], w.sorted[i:w.n])
		w.sorted[i] = d
		w.ring[w.next] = d
		w.n++
		w.next = (w.next + 1) % WindowSize
		return
	}
	old := w.ring[w.next]
	w.sum -= old
	w.ring[w.next] = d
	w.next = (w.next + 1) % WindowSize
	w.replace(old, d)
}

// replace removes one sample equal to old from the full sorted array and inserts d,
// moving only the elements between the two positions.
func (w *Window) replace(old, d time.Duration) {
	s := w.sorted[:]
	i, _ := slices.BinarySearch(s, old) // s[i] == old: old is in the window
	switch {
	case d > old:
		// d goes after the elements < d; old's slot opens at i, so shift (i, j) left.
		j, _ := slices.BinarySearch(s, d)
		copy(s[i:j-1], s[i+1:j])
		s[j-1] = d
	case d < old:
		// d goes before the elements ≥ d; shift [j, i) right into old's slot.
		j, _ := slices.BinarySearch(s, d)
		copy(s[j+1:i+1], s[j:i])
		s[j] = d
	default:
		// Same value: the sorted array does not change.
	}
}

// Percentile returns the p-th percentile (nearest rank: the smallest sample with at
// least p% of the samples at or below it) and true, or 0 and false while the window is
// empty. p is clamped to [1, 100].
func (w *Window) Percentile(p int) (time.Duration, bool) {
	if w == nil || w.n == 0 {
		return 0, false
	}
	return w.sorted[rank(p, w.n)], true
}

// rank is the index in a sorted slice of n samples of the p-th percentile by nearest
// rank: ceil(p·n/100) − 1, within [0, n−1].
func rank(p, n int) int {
	p = min(max(p, 1), 100)
	return (p*n+99)/100 - 1
}

// Mean returns the mean of the samples (rounded down) and true, or 0 and false while
// the window is empty.
func (w *Window) Mean() (time.Duration, bool) {
	if w == nil || w.n == 0 {
		return 0, false
	}
	return w.sum / time.Duration(w.n), true
}

// AppendSorted appends the samples in ascending order to dst.
func (w *Window) AppendSorted(dst []time.Duration) []time.Duration {
	if w == nil {
		return dst
	}
	return append(dst, w.sorted[:w.n]...)
}
