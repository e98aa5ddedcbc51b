package gauge

import (
	"sync/atomic"
	"time"
)

// Unlimited is the limit that never throttles. Any negative limit means the same.
const Unlimited int64 = -1

// Period is the length of a throttling window: gauges reset once a second (seed 003).
const Period = time.Second

// A Gauge counts the units used in the current one-second window, including the usage
// carried over from earlier seconds.
//
// The zero value is an empty gauge ready to use. A Gauge must not be copied after first
// use. All methods are safe for concurrent use; they are lock-free and never allocate.
//
// The throttle checks a command before it runs with the units known up front (the
// write's size, 1 for a read) by calling Below, and charges the units the command
// actually used by calling Add once it has succeeded. Once a second the owner of the
// window calls Tick, which ends the second: usage above a finite limit carries over.
//
// With a limit of L and one-unit commands, Below admits exactly L commands in a second
// that starts empty: it admits while value+1 <= L, that is at values 0 … L-1.
type Gauge struct {
	value atomic.Int64 // units used this second, carry-over included; never negative
	held  atomic.Int64 // units held by commands admitted and not yet charged (Hold)
	// The gauges of a node (one per bucket, one free pool) are written by every event
	// loop; keep each on its own cache line so charging one does not slow the others.
	_ [48]byte
}

// Add charges units actually used by a command that has succeeded. Non-positive
// charges are ignored (a failed command costs nothing), so the value never goes down
// except through Tick.
func (g *Gauge) Add(units int64) {
	if units > 0 {
		g.value.Add(units)
	}
}

// Hold counts units of a command admitted under the gauge that has not
// been charged yet, until Unhold: Below counts them as used, so that the
// commands a pipeline or several connections have admitted and not yet
// charged cannot all pass against the same value. Held units belong to no
// second: Tick leaves them alone. Non-positive units are ignored.
func (g *Gauge) Hold(units int64) {
	if units > 0 {
		g.held.Add(units)
	}
}

// Unhold gives back units Hold counted, once the command is charged (or
// will not run). Non-positive units are ignored.
func (g *Gauge) Unhold(units int64) {
	if units > 0 {
		g.held.Add(-units)
	}
}

// Held returns the units held by commands admitted and not yet charged.
func (g *Gauge) Held() int64 {
	return g.held.Load()
}

// Value returns the units used in the current second, including usage carried over
// from earlier seconds.
func (g *Gauge) Value() int64 {
	return g.value.Load()
}

// Below reports whether a command expected to use pending units may run under limit
// this second, that is whether value+held+pending <= limit (held: see Hold).
//
// Precisely:
//   - a negative limit (Unlimited) admits everything;
//   - a pending below 1 counts as 1: every command costs at least one unit, so a limit
//     of 0 admits nothing and a limit of L admits exactly L one-unit commands a second;
//   - a command larger than a positive limit (pending > limit > 0) can never fit; it is
//     admitted whenever the second still has room (value+held < limit), so it is delayed,
//     never starved, not even by a stream of small commands. Its excess carries over
//     through Tick, which keeps the long-run rate at the limit.
//
// A command that fits a limit but not the rest of this second waits for the next one:
// with commands of p units, up to p-1 units of a second can go unused. Reads are
// checked with 1 unit and one-unit writes are the common case, for which the limit is
// delivered exactly.
//
// Below only reads the gauge. A check followed by Hold is not atomic: concurrent callers
// may both pass before either holds; see the package comment.
func (g *Gauge) Below(limit, pending int64) bool {
	if limit < 0 {
		return true
	}
	if pending < 1 {
		pending = 1
	}
	v := g.value.Load() + g.held.Load()
	if pending > limit {
		return v < limit
	}
	// limit-pending cannot overflow: 0 <= pending <= limit here.
	return v <= limit-pending
}

// Tick ends the current second and returns the value the second ended with (its usage
// plus what it carried in).
//
// With a positive limit L the new value is max(0, value-L): usage above the limit
// carries over and is paid off in the following seconds. With Unlimited (or 0, under
// which nothing could ever pay a debt off) the new value is 0.
//
// A caller that missed n ticks may call Tick(n*L) once: max(0, max(0, v-L)-L) equals
// max(0, v-2L).
func (g *Gauge) Tick(limit int64) int64 {
	for {
		v := g.value.Load()
		var next int64
		if limit > 0 && v > limit {
			next = v - limit
		}
		if g.value.CompareAndSwap(v, next) {
			return v
		}
	}
}

// A Window is the one-second tick grid shared by the gauges of a node: it knows when
// the current second started and when the next one starts.
//
// The server's tick goroutine calls Advance with the time its ticker fired and, for each
// second Advance reports, ticks the gauges. The event loops call NextTick or
// NextTickMicros to tell a non-blocking client when to retry. Time is always an
// argument; durations are measured on the monotonic clock when the times carry a
// monotonic reading (those from time.Now do).
//
// Create a Window with NewWindow. All methods are safe for concurrent use, lock-free
// and allocation free.
type Window struct {
	base  time.Time    // the start of the first second; immutable after NewWindow
	start atomic.Int64 // nanoseconds from base to the start of the current second
}

// NewWindow returns a window whose first second starts at start. To keep the grid and a
// time.Ticker in step, take start before creating the ticker: the ticker then never
// fires before the boundary Advance expects.
func NewWindow(start time.Time) *Window {
	return &Window{base: start}
}

// Start returns the time at which the current second started.
func (w *Window) Start() time.Time {
	return w.base.Add(time.Duration(w.start.Load()))
}

// Advance moves the window to the second that contains now and returns how many
// seconds ended: 0 if now is still in the current second, 1 on a punctual tick, more if
// ticks were missed. The grid stays fixed: a late tick does not shift later seconds.
// The caller ticks every gauge once per ended second (or once with n times the limit).
func (w *Window) Advance(now time.Time) int64 {
	elapsed := int64(now.Sub(w.base))
	for {
		start := w.start.Load()
		n := (elapsed - start) / int64(Period)
		if n <= 0 {
			return 0
		}
		if w.start.CompareAndSwap(start, start+n*int64(Period)) {
			return n
		}
	}
}

// NextTick returns how long until the next second starts, in (0, Period]. When the tick
// is already due (the tick goroutine is late), it returns one microsecond: credit is
// imminent. A now before the current second's start yields Period.
func (w *Window) NextTick(now time.Time) time.Duration {
	next := time.Duration(w.start.Load()) + Period
	d := next - now.Sub(w.base)
	switch {
	case d < time.Microsecond:
		return time.Microsecond
	case d > Period:
		return Period
	}
	return d
}

// NextTickMicros returns NextTick in whole microseconds, rounded up so that a client
// that waits that long does not come back before the tick: 1 <= N <= 1,000,000, the
// range the {"next_tick_us": N} reply promises.
func (w *Window) NextTickMicros(now time.Time) int64 {
	d := w.NextTick(now)
	return int64((d + time.Microsecond - 1) / time.Microsecond)
}

// FairShare divides capacity among demands by max-min fairness (Doorman's FAIR_SHARE)
// and writes each demand's share to out[i]. It is how the node's free pool is shared
// among the buckets that want it (SPEC section 5): a bucket's share does not depend on
// how many connections it has, only on how much it asks for.
//
// Water-filling: every demand gets min(demand, level), where level is the highest value
// the capacity can pay for; what small demands leave unused is spread over the larger
// ones. Shares are whole units. When the capacity does not divide evenly among the
// demands left at the level, the remainder goes one unit each to the first of them in
// index order; a caller that wants that unit to rotate rotates the order of demands.
//
// Demands:
//   - a demand of 0 gets 0;
//   - a negative demand (Unlimited) wants as much as it can get.
//
// Results:
//   - out[i] <= demands[i] for every non-negative demand;
//   - the shares sum to at most capacity; they sum to less only when every demand is
//     met in full;
//   - an unmet demand's share is at least every other share minus one unit.
//
// A negative capacity (Unlimited) meets every demand: out[i] = demands[i], and an
// unlimited demand gets Unlimited.
//
// out must be at least as long as demands (FairShare panics otherwise); out[i] for i >=
// len(demands) is left alone. FairShare does not allocate. It runs in O(n²) for n demands
// in the worst case, which for the tens to hundreds of buckets of a node is a few
// microseconds once a second.
func FairShare(capacity int64, demands []int64, out []int64) {
	out = out[:len(demands)]
	if capacity < 0 {
		for i, d := range demands {
			out[i] = max(d, Unlimited)
		}
		return
	}
	pending := int64(0)
	for i, d := range demands {
		if d == 0 {
			out[i] = 0
			continue
		}
		out[i] = unmet
		pending++
	}
	left := capacity
	for pending > 0 {
		met := meetBelow(left/pending, demands, out)
		if met.count == 0 {
			break
		}
		pending -= met.count
		left -= met.units
	}
	if pending == 0 {
		return
	}
	level, extra := left/pending, left%pending
	for i := range out {
		if out[i] != unmet {
			continue
		}
		out[i] = level
		if extra > 0 {
			out[i]++
			extra--
		}
	}
}

// unmet marks out[i] while demand i is not yet met; final shares are never negative.
const unmet = -1

// met is what one water-filling pass granted.
type met struct{ count, units int64 }

// meetBelow grants in full every unmet, bounded demand that does not exceed level.
func meetBelow(level int64, demands, out []int64) met {
	var m met
	for i, d := range demands {
		if out[i] != unmet || d < 0 || d > level {
			continue
		}
		out[i] = d
		m.count++
		m.units += d
	}
	return m
}

// Clamp lowers the gauge to limit if it is above it, and returns the value it
// had. It is for a limit that changes mid-second: usage that was within the
// old limit must not become debt under the new one. A negative limit leaves
// the gauge alone.
func (g *Gauge) Clamp(limit int64) int64 {
	for {
		v := g.value.Load()
		if limit < 0 || v <= limit || g.value.CompareAndSwap(v, limit) {
			return v
		}
	}
}
