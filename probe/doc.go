// Package probe owns kvd's throughput prober (SPEC section 6, seed 000 "Execution
// Control"): the state machine that, every interval, decides how many tickets the read
// and write pools of ingress admission get, by trying a little more or a little less
// concurrency and keeping the change only when throughput rose.
//
// It owns no tickets and no clock. The ingress layer owns the pools; once per interval
// (100 ms by default) its owner hands the prober a Sample (the time, the number of
// commands finished so far, each pool's peak use since the previous sample) and resizes
// the pools to the sizes Probe returns. Everything is a pure function of the samples,
// so tests drive it step by step with made-up numbers and simulated time.
//
// # The algorithm (seed 000, MongoDB's throughput_probing.cpp)
//
// The prober keeps a stable concurrency (a real number, the total of both pools) and
// the throughput measured at it, and moves between three states:
//
//   - stable: record the throughput as the baseline. If a pool below Max was exhausted
//     (its peak use reached its size since the last stable step), probe up: set the
//     pools to stable·(1+Step). Otherwise, if a pool's peak use was above Min, probe
//     down: set them to stable·(1−Step). Otherwise stay.
//   - up / down: if throughput rose above the baseline, move the stable concurrency
//     toward the probed total by an exponential moving average with weight EMAWeight
//     (so one lucky probe moves it by EMAWeight·Step, 2% by default); either way go back
//     to the (possibly new) stable concurrency and to the stable state.
//
// A total T is split into pools as read = round(T·ratio), write = round(T·(1−ratio)),
// each rounded half away from zero and clamped to [Min, Max]. When a probe's rounded
// size equals a pool's current size, the pool still moves by one ticket, so a probe
// always tries something, even at small sizes.
//
// # Decisions where MongoDB has a quirk
//
//   - Pools stay in [Min, Max], always. MongoDB applies the one-ticket nudge after
//     clamping, so a pool at Min probing down goes to Min−1 (and one at Max probing up
//     to Max+1). Here the nudge is clamped too: a pool at Min stays at Min in a probe
//     down while the other pool shrinks.
//   - A pool exhausted at Max probes down, as MongoDB does and the seed's diagram says
//     ("or at maximum"): the only way out of Max under overload is to find that less
//     concurrency gives more throughput.
//   - Probing down needs a pool's peak use above Min (MongoDB's condition; the seed's
//     pseudocode compares concurrency with Min). While use stays at or below Min, a
//     smaller pool could not change anything: the probe would compare noise with noise
//     and could only let the pools drift down, to be regrown slowly when load returns.
//
// # Known limitation (the seed's, kept)
//
// Under overload (tickets always exhausted) a prober below Max only ever probes up, so
// its stable concurrency never goes down: a prober that starts above the optimum stays
// there. MongoDB starts at 2×GOMAXPROCS, below the optimum of most storage engines, and
// climbs. TestSimulateKnownLimitation documents this case. For the same reason, and
// because a probe is kept on any rise in throughput however small, measurement noise
// larger than the throughput difference of one step near the optimum (about ±2% for a
// parabolic curve) lets an overloaded prober ratchet up past a flat optimum.
//
// # Concurrency
//
// A Prober is not safe for concurrent use: one owner calls Probe, SetReadWriteRatio and
// Stats (typically the ingress tick goroutine, which then publishes Stats to others).
// Options and Stats are plain values.
package probe
