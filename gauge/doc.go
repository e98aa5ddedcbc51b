// Package gauge owns the arithmetic of kvd's per-second throttling (SPEC section 5,
// seed 003 "Throttling in memcached"): how many units a bucket or the node's free pool
// used in the current one-second window, whether one more command fits under a limit,
// what carries over into the next second, when that next second starts, and how a free
// pool is divided max-min fairly among the buckets that want it.
//
// It does not decide whether a command is throttled; that four-step decision (reserved,
// free pool, hard limit, throttle) belongs to the tenant and server packages, which hold
// one Gauge per bucket and one for the node's free pool and call Below, Add and Tick in
// the order the seed describes.
//
// # Pieces
//
//   - Gauge counts units used in the current second. Below(limit, pending) answers "may a
//     command that expects to use pending units run?"; Hold counts those units as used
//     until the command is charged (Unhold); Add charges the units a command actually
//     used after it succeeded; Tick ends the second, keeping usage above the limit as a
//     debt for the next one.
//   - Window is the one-second tick grid shared by all gauges of a node. Its owner
//     (tenant.Throttle) calls Advance with the time the server passes to Throttle.Tick;
//     nothing here reads the clock. The non-blocking throttle reply asks NextTickMicros
//     for the {"next_tick_us": N} body.
//   - FairShare divides a capacity among demands by max-min fairness (Doorman's
//     FAIR_SHARE, water-filling), so a tenant gains nothing by opening more connections.
//
// # Units and limits
//
// A unit is a read unit or a write unit (SPEC section 5); gauges do not care which. A limit
// is a number of units per second, or Unlimited (any negative number is treated as
// Unlimited). Every command costs at least one unit in a check, so a limit of 0 admits
// nothing and a limit of L admits exactly L one-unit commands per second.
//
// # Invariants
//
//   - A Gauge's value is never negative: Add ignores non-positive charges and Tick never
//     subtracts below zero.
//   - Below never admits a command that would take the gauge above a finite limit, except
//     a command larger than the whole limit, which runs as soon as a second has room left
//     (so it is delayed, never starved); the excess carries over through Tick, so the
//     long-run rate still stays at the limit.
//   - Tick with a finite limit L turns value v into max(0, v-L): usage beyond the limit is
//     paid off in the following seconds, never forgotten.
//   - FairShare never hands out more than the capacity and never gives a demand more than
//     it asked for.
//
// # Time
//
// Time is always an argument: nothing here reads the clock. Tests drive a fake clock. In
// kvd the time comes from the server's clock (Options.Now), read by its housekeeping
// goroutine and by an event loop that finds a second over before housekeeping ticked it,
// and reaches the Window through tenant.Throttle.Tick.
//
// # Concurrency
//
// Gauge and Window are safe for concurrent use by any number of goroutines. They are
// lock-free (typed atomics), never block and never allocate, so the event loops may call
// them on the hot path. A command's expected units are held (Hold) from its check until
// it is charged, so that the commands admitted and still running count against the
// limit; a check followed by a hold is deliberately not atomic ("sloppy", as in
// kv_engine): concurrent loops may each pass Below before either holds, which overshoots
// a limit by at most one command per loop; the overshoot carries over. FairShare
// is a pure function; it is safe for concurrent use as long as callers do not share out.
package gauge
