// Package ingress owns kvd's ticketed admission (SPEC sections 6 and 7; seed 000
// "Data-Node Ingress Admission Control" and seed 001, Impala's admission controller):
// the read and write ticket pools, the node-wide ticket cap, the per-bucket limits and
// wait queues, fair dequeue across buckets, the node-wide memory budget, queue
// timeouts, and the wiring of the throughput prober (package probe) that sizes the
// pools.
//
// # The contract in one paragraph
//
// Every data command that passed throttling takes exactly one Ticket for its whole
// execution, from the Read pool (GET, GETK, …) or the Write pool (every mutation), for
// its Bucket (a handle from AddBucket; nil for work of no bucket) and charged the bytes
// of its value. A normal ticket needs room in its pool, under the node cap
// (Options.NodeTickets), under its bucket's MaxConcurrent, and its bytes within
// Options.MaxInflightBytes. Acquire never blocks: it answers Admitted (run now,
// Release the ticket when done), Queued (the Waiter will later get exactly one
// callback, Granted or Expired, unless it is Cancelled first), Rejected (with the
// reason to send: "queue full, limit=100000, queued=100000" for the node's depth,
// "queue full, limit=4, queued=4 in bucket b1" for the bucket's MaxQueued, "bucket b1
// was deleted") or TooLarge (the value alone exceeds the memory budget: "value of N
// bytes exceeds max_inflight_bytes=M, in bucket B"). A waiter that waited longer than its bucket's
// QueueTimeout (else the node's) is Expired by the next Tick or Expire ("timed out after 5 ms in
// bucket b1"; "… in the write queue" for work of no bucket); RemoveBucket Expires its
// bucket's waiters with "bucket b1 was deleted". Exempt work (commands that are not data
// commands, Unthrottled connections) takes a ticket from StartExempt: it never waits,
// is charged nothing and is only counted (ExemptStarted/ExemptFinished, per pool and
// per bucket, not Finished: the prober's throughput counts normal commands only). The
// server answers Rejected with status 0x85, TooLarge with 0x82 and Expired with 0x86,
// each with the reason.
//
// # Fair dequeue, and why least-recently-used
//
// Each bucket has one FIFO queue per pool. When a ticket frees, the next waiter comes
// from the bucket, among those with waiters in that pool and room under their
// MaxConcurrent, that has taken the fewest tickets of the pool recently: each ticket
// taken adds 1 to the bucket's use of the pool, and Tick halves every use (so use a
// second old weighs 1/1000). This is CockroachDB's admission WorkQueue ordering of
// tenants, with a decay in place of its periodic reset. It is chosen over deficit
// round-robin weighted by reserved because a bucket's latency is what it must protect:
// a bucket that sends one command now and then has used almost nothing, so its waiter
// is served by the next freed ticket, never behind another bucket's backlog, with no
// weights to configure and no quantum to tune; while a single bucket queues it is
// plain FIFO. Buckets' throughput shares are the throttle's business (package tenant,
// reserved and hard limits), not the queue's. Options.FIFO (SetFIFO at run time) turns
// fairness off: the earliest waiter of any bucket goes first (one FIFO per pool across
// buckets, skipping buckets at their MaxConcurrent), for the contrast measurement.
//
// # Memory admission
//
// Options.MaxInflightBytes (SetMaxInflightBytes at run time; 0 = off) bounds the value
// bytes charged to normal tickets in use. A write is charged its value's length from
// Acquire to Release. A read, whose size is unknown before it runs, passes Estimate and
// is charged its bucket's estimate (the moving average, weight 1/8, of the sizes its
// reads settled with; DefaultReadEstimate, 1 KiB, before the first), and Settle replaces
// the charge with the real size once the value is read. A command whose bytes would
// pass the budget waits in its queue; the first such waiter in serving order holds the
// memory back: nobody is granted until its bytes fit (Impala's "the head of the queue
// waits"), so a large value is never starved by a stream of small ones.
//
// # Invariants
//
//   - FIFO per bucket and pool: a command never overtakes a queued command of its own
//     bucket in its own pool. A command is admitted at once only if no waiter could
//     have used the room it takes (the Controller hands room on as soon as it frees, so
//     waiters that remain queued while room exists are at their MaxConcurrent, or
//     behind the memory).
//   - Out ≤ size for every pool except while a shrink converges: Resize never revokes a
//     ticket in use; a pool above its new size does not hand returned tickets on until
//     it is back under it. Likewise for the node cap, a bucket's lowered MaxConcurrent
//     and a lowered memory budget. Otherwise a bucket's InFlight ≤ MaxConcurrent.
//   - One ticket, one Release: each pool keeps a generation per ticket slot, so a second
//     Release of the same Ticket (or of a zero Ticket) changes nothing and is counted in
//     StaleReleases. Exempt tickets are only counted: releasing more exempt tickets than
//     were started is counted as stale too. The bytes charged live in the slot, so a
//     Release returns exactly what Acquire and Settle charged.
//   - Figures add up at every Stats call: out + available = total (while no shrink is
//     converging; available is never negative), added_to_queue = removed_from_queue +
//     queue_length, started = finished + out, and the node's queue_length is the sum of
//     the buckets'. removed_from_queue counts granted, expired (timed out or bucket
//     removed) and canceled waiters. Per bucket: num_queued = num_dequeued +
//     queue_length and started = finished + in_flight. memory_inflight_bytes is the sum
//     of the bytes charged to tickets in use.
//
// # Callbacks and the Granted/Cancel race
//
// Waiter methods are called with no ingress lock held, never from inside Acquire, but
// from whichever goroutine freed room or expired the waiter: a worker in Release or
// Settle, the ticker in Tick, an event loop in Cancel (which may unblock the memory),
// the caller of Resize, SetNodeTickets, SetMaxInflightBytes, SetFIFO, SetBucketLimits
// or RemoveBucket. They must not block, and may call back into the Controller (Release,
// Acquire). The rule that makes cancellation safe is: Cancel(w) returns true if and only
// if w was still queued; then w gets no callback, ever. If it returns false, a callback
// for w has been made, is running right now on another goroutine, or is about to be
// made: exactly one of Granted or Expired, and a Granted ticket belongs to w, which must
// Release it even though its client is gone.
//
// # Time and the prober
//
// Time is an argument: nothing here reads the clock. The server calls Tick every probe
// interval (100 ms), and Expire in between (every 10 ms, so that a short per-bucket
// queue timeout is kept to about that); Tick expires old waiters, ages the buckets' use, feeds the prober a
// probe.Sample (normal commands finished so far, each pool's peak use since the
// previous Tick) and resizes the pools to the prober's answer, unless
// Options.DisableProbe fixes them. Resize, which takes no time, stamps the tickets it
// grants with the latest time any method was given.
//
// # Concurrency and cost
//
// A Controller and its Buckets are safe for concurrent use. One mutex guards them all;
// it is held for a few dozen instructions on the admitted path and never across a
// callback. Acquire (admitted) followed by Release does not allocate; a queued command
// uses a pooled list node and one map entry. Choosing the next waiter scans the
// buckets that have waiters in the pool, so a grant costs O(buckets waiting), not
// O(waiters).
//
// # Deadline admission
//
// DeadlineGate and BucketDeadline (deadline.go) add SLEdge's gate (seed 004, SPEC
// section 7) in front of the ticket pools: a command of a bucket with deadline_ms
// needs pXX ÷ deadline of a ticket (the seed's demand), pXX taken from a Window of
// the bucket's last 256 execution times of its class. The demand a pool has accepted
// across all buckets, A, is work that its tickets drain in A × deadline ÷ tickets; a
// command is admitted only while the time it has already waited (since its bytes
// reached the server) plus that predicted queue wait plus its own pXX fits its
// deadline, or while its bucket has no other command of its class in flight (so no
// bucket locks itself out). It gives its demand back when it completes or expires;
// a queued command whose deadline passes is expired by Tick or Expire (a
// DeadlineWaiter). Demand is kept in millionths of a ticket in one atomic per pool,
// so releases bring it back to exactly zero and it never goes negative; Admit is
// allocation-free. Like the rest of the package, these types take time as an
// argument and are safe for concurrent use.
package ingress
