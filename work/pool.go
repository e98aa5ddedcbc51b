package work

import (
	"log/slog"
	"runtime"
	"sync"
	"time"

	"kvd/catalog"
	"kvd/command"
	"kvd/engine"
	"kvd/ingress"
	"kvd/protocol/binary"
)

// Options configure a Pool. Every field is required unless it says
// otherwise.
type Options struct {
	Ingress *ingress.Controller // where the batches' tickets go back
	DB      *engine.DB          // for group commit
	// WALSync acknowledges a batch with mutations only after an fsync that
	// covers them (group commit).
	WALSync bool
	// Meter counts a command that ran in its bucket and charges its units
	// (command.Units) to the throttle.
	Meter func(bk *catalog.Bucket, r *command.Request)
	// Executed reports each command's execution time, for the node's
	// figures.
	Executed func(write bool, d time.Duration)
	// WriteUnitSize is the current bytes per write unit (reloadable):
	// group commit's early budget counts a batch's write units in bytes.
	WriteUnitSize func() int
	Now           func() time.Time
	Logger        *slog.Logger
	// Workers is the number of worker goroutines. Default
	// max(16, 8 × GOMAXPROCS).
	Workers int
}

// syncEarlyBytes bounds the bytes written by batches that returned their
// tickets before their fsync: a few hundred small SETs, one sync of well
// under a millisecond's writing.
//
// A write ticket stands for work in the engine, and a committed batch
// waiting for the shared fsync does none, so while the bytes written and
// not yet synced stay under this bound a batch returns its tickets at
// commit, and the group that shares the next fsync is not capped at the
// write pool's size (closed-loop synced SETs from 512 connections: 25k →
// 63k ops/s). Past it a batch keeps its tickets until it is acknowledged,
// so the write pool bounds how much data one fsync carries (returning
// every ticket at commit let one fsync carry so much data that an
// Unthrottled SET waited over 500 ms behind it:
// TestIngressUnthrottledServed). A bucket with max_concurrent keeps its
// tickets to the acknowledgement too: its limit counts the commands it has
// in flight until they are durable.
const syncEarlyBytes = 256 << 10

// Pool is the set of goroutines that execute batches off the event loops.
// They live as long as the pool, so their stacks, grown once by Pebble's
// deep call paths, are reused rather than regrown per batch.
//
// The queue needs no bound of its own: every batch belongs to a connection
// and a connection has at most one batch out, so the queue never holds more
// batches than there are connections. Submit therefore never blocks and
// never spawns: the loop only takes a short lock that is never held across
// I/O.
type Pool struct {
	opts    Options
	syncs   *engine.GroupSync
	mu      sync.Mutex
	cond    sync.Cond // signalled when queue grows or the pool stops
	queue   []*Batch  // guarded by mu
	pending int       // guarded by mu: batches submitted and not yet run
	idle    sync.Cond // signalled when pending drops to 0
	closed  bool      // guarded by mu
	exited  sync.WaitGroup
}

// Start starts a pool's workers and, with WALSync, its group commit.
func Start(opts Options) *Pool {
	if opts.Workers <= 0 {
		opts.Workers = max(16, 8*runtime.GOMAXPROCS(0))
	}
	p := &Pool{opts: opts}
	p.cond.L, p.idle.L = &p.mu, &p.mu
	if opts.WALSync {
		p.syncs = opts.DB.StartGroupSync(syncEarlyBytes)
	}
	p.exited.Add(opts.Workers)
	for range opts.Workers {
		go p.worker()
	}
	return p
}

func (p *Pool) worker() {
	defer p.exited.Done()
	for {
		p.mu.Lock()
		for len(p.queue) == 0 && !p.closed {
			p.cond.Wait()
		}
		if len(p.queue) == 0 {
			p.mu.Unlock()
			return
		}
		b := p.queue[0]
		p.queue[0] = nil
		p.queue = p.queue[1:]
		p.mu.Unlock()
		p.run(b)
		p.mu.Lock()
		if p.pending--; p.pending == 0 {
			p.idle.Broadcast()
		}
		p.mu.Unlock()
	}
}

// Submit queues b for a worker. It never blocks: it may run on a loop.
func (p *Pool) Submit(b *Batch) {
	p.mu.Lock()
	p.queue = append(p.queue, b)
	p.pending++
	p.mu.Unlock()
	p.cond.Signal()
}

// Stop ends the pool once every submitted batch has run and been
// acknowledged. Nothing may Submit after Stop.
func (p *Pool) Stop() {
	p.mu.Lock()
	for p.pending > 0 {
		p.idle.Wait()
	}
	p.closed = true
	p.mu.Unlock()
	p.cond.Broadcast()
	p.exited.Wait()
	if p.syncs != nil {
		p.syncs.Close()
	}
}

// run executes b on a worker goroutine and hands it back to its owner.
func (p *Pool) run(b *Batch) {
	if b.Job != nil {
		b.Job(b)
	} else if p.exec(b) {
		return // the group sync finishes it
	}
	b.finish()
}

// exec runs the data commands in order. With WALSync, a batch with
// mutations joins the group commit, which acknowledges it after a shared
// fsync (Synced), and exec reports true: the batch is no longer the
// worker's. Otherwise it encodes the replies.
func (p *Pool) exec(b *Batch) (deferred bool) {
	start := p.opts.Now()
	now, mutated := uint32(start.Unix()), false
	for _, r := range b.Reqs {
		command.Exec(b.Bucket, r, now)
		if command.Estimated(r.Hdr.Op) {
			p.opts.Ingress.Settle(r.Ticket, int64(len(r.Res)), start)
		}
		p.opts.Meter(b.Bucket, r)
		end := p.opts.Now()
		p.opts.Executed(r.WU > 0 || r.Mut, end.Sub(start))
		start = end
		mutated = mutated || r.Mut
	}
	if mutated && p.syncs != nil {
		p.deferSync(b)
		return true
	}
	p.ack(b, nil)
	return false
}

// deferSync queues b, whose mutations are committed, for the shared sync.
// If the bytes it wrote fit the early budget (syncEarlyBytes) and its
// bucket sets no max_concurrent, its tickets go back now.
func (p *Pool) deferSync(b *Batch) {
	var reserved int64
	// Before the batch is queued only this goroutine touches its tickets.
	if n := p.writtenBytes(b); b.Bucket.Settings().MaxConcurrent == 0 && p.syncs.Reserve(n) {
		reserved = n
		p.returnTickets(b, p.opts.Now())
	}
	p.syncs.Add(b, reserved)
}

// writtenBytes approximates the bytes b's mutations wrote: their write
// units times the unit size.
func (p *Pool) writtenBytes(b *Batch) int64 {
	var wu int64
	for _, r := range b.Reqs {
		wu += r.WU
	}
	return max(1, wu) * int64(p.opts.WriteUnitSize())
}

// Synced implements engine.Waiter: b's mutations are durable (or the sync
// failed); its replies go to its owner.
func (b *Batch) Synced(err error) {
	b.pool.ack(b, err)
	b.finish()
}

// ack finishes an executed batch once its mutations are durable (err is
// the WAL sync's result): a failed sync turns every mutation's reply into
// 0x84; then the tickets still held are returned, the deadline grants
// ended and the replies encoded.
func (p *Pool) ack(b *Batch, err error) {
	if err != nil {
		p.opts.Logger.Error("wal sync failed", "err", err)
		for _, r := range b.Reqs {
			if r.Mut {
				r.Status, r.Reason = binary.StatusInternal, "wal sync failed: "+err.Error()
			}
		}
	}
	now := p.opts.Now()
	for _, r := range b.Reqs {
		r.EndDeadline(now)
	}
	p.returnTickets(b, now)
	for _, r := range b.Reqs {
		b.Out = b.Enc.Result(b.Out, r)
	}
}

// returnTickets gives back the tickets b's commands hold. A command whose
// reply is not ready yet (deferSync) tells its deadline gate too.
func (p *Pool) returnTickets(b *Batch, now time.Time) {
	for _, r := range b.Reqs {
		if r.DL != nil && r.Ticket.Valid() {
			r.Granted = r.Ticket.AcquiredAt() // EndDeadline's start once the ticket is gone
			r.Grant = r.DL.Returned(r.Grant, now.Sub(r.Granted))
		}
		if r.Ticket.Valid() {
			p.opts.Ingress.Release(r.Ticket, now)
			r.Ticket = ingress.Ticket{}
		}
	}
}

// Abandon is called by a batch's owner that closes with b out. If b was
// queued for a ticket and leaves the queue here, it is released here;
// otherwise it is running, or its callback is on its way, and the owner
// releases it when it is finished.
func (p *Pool) Abandon(b *Batch, now time.Time) {
	if p.opts.Ingress.Cancel(b, now) {
		b.Release()
	}
}
