// Package ingress owns kvd's ticketed admission (SPEC section 6, seed 000 "Data-Node
// Ingress Admission Control"): the read and write ticket pools, the node-wide ticket
// cap, the bounded FIFO queue of commands waiting for a ticket, queue timeouts, and the
// wiring of the throughput prober (package probe) that sizes the pools.
//
// # The contract in one paragraph
//
// Every data command that passed throttling takes exactly one Ticket for its whole
// execution, from the Read pool (GET, GETK, …) or the Write pool (every mutation). A
// normal ticket needs room in its pool AND under the node cap (Options.NodeTickets).
// Acquire never blocks: it answers Admitted (run now, Release the ticket when done),
// Queued (the Waiter will later get exactly one callback, Granted or Expired, unless it
// is Cancelled first) or Rejected (with the reason to send, e.g. "queue full,
// limit=100000, queued=100000"). A released ticket goes straight to the first waiter
// that can use it; a waiter that waited longer than Options.QueueTimeout is Expired by
// the next Tick ("timed out after 10000 ms in the write queue"). Exempt work (commands
// that are not data commands, Unthrottled connections) takes a ticket from StartExempt:
// it never waits and is only counted (ExemptStarted/ExemptFinished, not Finished: the
// prober's throughput counts normal commands only). The server answers Rejected with
// status 0x85 and Expired (Handoff's TimedOut) with 0x86, each with the reason.
//
// # Invariants
//
//   - FIFO per pool: a command never overtakes a queued command of its own pool. When
//     the node cap frees a ticket that both pools are waiting for, the waiter that was
//     queued first (across both pools) gets it.
//   - Out ≤ size for every pool except while a shrink converges: Resize never revokes a
//     ticket in use; a pool above its new size simply does not hand returned tickets on
//     until it is back under it. Likewise for the node cap.
//   - One ticket, one Release: each pool keeps a generation per ticket slot, so a second
//     Release of the same Ticket (or of a zero Ticket) changes nothing and is counted in
//     StaleReleases. Exempt tickets are only counted: releasing more exempt tickets than
//     were started is counted as stale too.
//   - Figures add up at every Stats call: out + available = total (while no shrink is
//     converging; available is never negative), added_to_queue = removed_from_queue +
//     queue_length, started = finished + out. removed_from_queue counts granted,
//     expired and canceled waiters.
//
// # Callbacks and the Granted/Cancel race
//
// Waiter methods are called with no ingress lock held, from whichever goroutine
// handed the ticket on or expired the waiter: a worker in Release, the ticker in Tick,
// the caller of Resize or SetNodeTickets, and any goroutine that releases a ticket
// through a Handoff (Abandon on an event loop, a late Granted). They must not block,
// and may call back into the Controller (Release, Acquire). The rule that makes
// cancellation safe is: Cancel(w) returns true if and only if w was still queued; then
// w gets no callback, ever. If it returns false, a callback for w has been made, is
// running right now on another goroutine, or is about to be made: exactly one of
// Granted or Expired, and a Granted ticket belongs to w, which must Release it even
// though its client is gone. Handoff packages this rule for a connection: its Abandon
// releases the ticket itself or arranges for the late Granted to release it, so a
// server that uses Handoff cannot leak or double-release a ticket.
//
// # Time and the prober
//
// Time is an argument: nothing here reads the clock. The server calls Tick every probe
// interval (100 ms); Tick expires old waiters, feeds the prober a probe.Sample (normal
// commands finished so far, each pool's peak use since the previous Tick) and resizes
// the pools to the prober's answer, unless Options.DisableProbe fixes them. Resize,
// which takes no time, stamps the tickets it grants with the latest time any method was
// given.
//
// # Concurrency and cost
//
// A Controller is safe for concurrent use. One mutex guards it; it is held for a few
// dozen instructions and never across a callback. Acquire (admitted) followed by Release
// does not allocate; a queued command uses a pooled list node and one map entry.
// Handoff is safe for use by its owner (one connection's event loop) concurrently with
// the callbacks the Controller makes on it.
//
// # Deadline admission
//
// DeadlineGate and BucketDeadline (deadline.go) add SLEdge's gate (seed 004, SPEC
// section 7) in front of the ticket pools: a command of a bucket with deadline_ms
// needs pXX ÷ deadline of a ticket, pXX taken from a Window of the bucket's last 256
// execution times of its class; it is admitted only while the demand its
// pool has accepted across all buckets plus its own stays within the pool's ticket
// count, and gives it back when it completes or expires. Demand is kept in millionths
// of a ticket in one atomic per pool, so releases bring it back to exactly zero and it
// never goes negative; Admit is allocation-free. Like the rest of the package, these
// types take time as an argument and are safe for concurrent use.
package ingress
