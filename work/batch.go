package work

import (
	"sync"
	"time"

	"kvd/catalog"
	"kvd/command"
	"kvd/ingress"
	"kvd/protocol/binary"
)

// Batch is the unit of work a loop hands to a worker: consecutive data
// commands of one connection against one bucket, or one control job.
type Batch struct {
	Owner  Owner            // the connection, told when the batch is done
	Enc    *command.Encoder // the owner's replies; the owner leaves it alone while the batch is out
	Bucket *catalog.Bucket
	Reqs   []*command.Request
	Bytes  int    // value bytes of Reqs
	Reads  int    // reads among Reqs, whose replies carry values
	Out    []byte // encoded replies, in request order

	// Job, when set, runs instead of the data commands (control commands
	// that do I/O or slow work: SASL, FLUSH, CREATE/DELETE_BUCKET).
	Job func(b *Batch)
	// After, when set, is run by the owner's loop when it collects the
	// batch.
	After func()

	pool *Pool
}

// Owner is told, on the goroutine that finished it, that a batch is done:
// its replies are in Out.
type Owner interface {
	Finish(b *Batch)
}

var batchPool = sync.Pool{New: func() any { return new(Batch) }}

// NewBatch returns an empty pooled batch of owner against bk (nil for a
// job without a bucket).
func (p *Pool) NewBatch(owner Owner, enc *command.Encoder, bk *catalog.Bucket) *Batch {
	b := batchPool.Get().(*Batch)
	b.Owner, b.Enc, b.Bucket, b.pool = owner, enc, bk, p
	return b
}

// Add copies req into the batch.
func (b *Batch) Add(req *binary.Request) *command.Request {
	r := command.NewRequest(req)
	b.Reqs = append(b.Reqs, r)
	b.Bytes += len(req.Value)
	if command.Estimated(req.Opcode) {
		b.Reads++
	}
	return r
}

// Release returns the batch and its requests to their pools; grants its
// requests still hold go back.
func (b *Batch) Release() {
	for i, r := range b.Reqs {
		r.Release()
		b.Reqs[i] = nil
	}
	b.Reqs = b.Reqs[:0]
	b.Owner, b.Enc, b.Bucket, b.Job, b.After, b.Bytes, b.Reads, b.pool = nil, nil, nil, nil, nil, 0, 0, nil
	if cap(b.Out) > 1<<20 {
		b.Out = nil
	}
	b.Out = b.Out[:0]
	batchPool.Put(b)
}

// finish hands b back to its owner.
func (b *Batch) finish() { b.Owner.Finish(b) }

// A batch queued for an ingress ticket holds one command, and is its
// ingress.Waiter (and DeadlineWaiter).

// Granted implements ingress.Waiter: the queued command got its ticket and
// goes to a worker. It runs on the goroutine that returned the ticket.
//
// A command whose deadline passed while it waited does not run: the ticket
// goes back at once and the command is answered 0x86 "deadline passed after
// N ms in the queue" (num_deadline_expired).
func (b *Batch) Granted(t ingress.Ticket) {
	r, p := b.Reqs[0], b.pool
	now := p.opts.Now()
	r.Queued = now.Sub(r.QueuedAt)
	if waited, stale := r.Stale(now); stale {
		p.opts.Ingress.Release(t, now)
		b.deadlinePassed(r, waited)
		return
	}
	r.Ticket = t
	p.Submit(b)
}

// Expired implements ingress.Waiter: the queued command waited past the
// queue timeout, or past its deadline (the housekeeping tick's
// ingress.Expire finds it: see Due), and is answered 0x86 with the reason.
// It runs on the goroutine that expired it, which never waits on the loop.
func (b *Batch) Expired(reason string) {
	r, now := b.Reqs[0], b.pool.opts.Now()
	r.Queued = now.Sub(r.QueuedAt)
	if waited, stale := r.Stale(now); stale || reason == ingress.DeadlinePassed {
		b.deadlinePassed(r, waited)
		return
	}
	r.ReleaseDeadline()
	r.Status, r.Reason = binary.StatusTemporaryFailure, reason
	b.Bucket.Throttle().CountRejected()
	b.Out = b.Enc.Result(b.Out, r)
	b.finish()
}

// Due implements ingress.DeadlineWaiter: the queued command's deadline, or
// the zero Time for none. ingress.Expire, which the server's housekeeping
// calls every 10 ms, then answers it through Expired as soon as the
// deadline has passed, rather than when it would have been granted a
// ticket.
func (b *Batch) Due() time.Time {
	if len(b.Reqs) == 0 || b.Reqs[0].DL == nil {
		return time.Time{}
	}
	return b.Reqs[0].Grant.Due()
}

// deadlinePassed answers r, the one command of a queued batch, whose
// deadline passed before it got a ticket: 0x86 "deadline passed after N ms
// in the queue", its grant ended by Expire, and the batch handed back to its
// owner.
func (b *Batch) deadlinePassed(r *command.Request, waited time.Duration) {
	r.ExpireDeadline()
	r.Status, r.Reason = binary.StatusTemporaryFailure, command.DeadlinePassedReason(waited, b.Bucket.Name())
	b.Out = b.Enc.Result(b.Out, r)
	b.finish()
}
