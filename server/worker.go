package server

import (
	"runtime"
	"sync"
	"time"

	"kvd/catalog"
	"kvd/command"
	"kvd/ingress"
	"kvd/protocol/binary"
)

func (b *batch) release() {
	for i, r := range b.reqs {
		r.Release()
		b.reqs[i] = nil
	}
	b.reqs = b.reqs[:0]
	b.c, b.bucket, b.job, b.after, b.bytes, b.reads = nil, nil, nil, nil, 0, 0
	if cap(b.out) > 1<<20 {
		b.out = nil
	}
	b.out = b.out[:0]
	batchPool.Put(b)
}

// batch is the unit of work a loop hands to a worker: consecutive data
// commands of one connection against one bucket, or one control job.
type batch struct {
	c      *conn
	bucket *catalog.Bucket
	reqs   []*command.Request
	bytes  int    // value bytes of reqs
	reads  int    // reads among reqs, whose replies carry values
	out    []byte // encoded replies, in request order

	// job, when set, runs instead of the data commands (control commands
	// that do I/O or slow work: SASL, FLUSH, CREATE/DELETE_BUCKET).
	job func(b *batch)
	// after, when set, runs on the loop when the batch is collected.
	after func(c *conn)
}

var batchPool = sync.Pool{New: func() any { return new(batch) }}

func newBatch(c *conn, bk *catalog.Bucket) *batch {
	b := batchPool.Get().(*batch)
	b.c, b.bucket = c, bk
	return b
}

func (b *batch) add(req *binary.Request) *command.Request {
	r := command.NewRequest(req)
	b.reqs = append(b.reqs, r)
	b.bytes += len(req.Value)
	if command.Estimated(req.Opcode) {
		b.reads++
	}
	return r
}

// workers is the pool of goroutines that execute batches off the event
// loops. They live as long as the server, so their stacks, grown once by
// Pebble's deep call paths, are reused rather than regrown per batch.
//
// The queue needs no bound of its own: every batch belongs to a connection
// and a connection has at most one batch in flight (queued, waiting for a
// ticket, or running), so the queue never holds more batches than there are
// connections. submit therefore never blocks and never spawns: the loop
// only takes a short lock that is never held across I/O.
type workers struct {
	mu      sync.Mutex
	cond    sync.Cond // signalled when queue grows or the pool stops
	queue   []*batch  // guarded by mu
	pending int       // guarded by mu: batches submitted and not yet run
	idle    sync.Cond // signalled when pending drops to 0
	closed  bool      // guarded by mu
	exited  sync.WaitGroup
}

func (s *Server) startWorkers() {
	w := &s.work
	w.cond.L, w.idle.L = &w.mu, &w.mu
	n := max(16, 8*runtime.GOMAXPROCS(0))
	s.syncs = s.db.StartGroupSync(syncEarlyBytes)
	w.exited.Add(n)
	for range n {
		go s.worker()
	}
}

func (s *Server) worker() {
	w := &s.work
	defer w.exited.Done()
	for {
		w.mu.Lock()
		for len(w.queue) == 0 && !w.closed {
			w.cond.Wait()
		}
		if len(w.queue) == 0 {
			w.mu.Unlock()
			return
		}
		b := w.queue[0]
		w.queue[0] = nil
		w.queue = w.queue[1:]
		w.mu.Unlock()
		s.run(b)
		w.mu.Lock()
		if w.pending--; w.pending == 0 {
			w.idle.Broadcast()
		}
		w.mu.Unlock()
	}
}

// submit queues b for a worker. It never blocks: it may run on a loop.
func (s *Server) submit(b *batch) {
	w := &s.work
	w.mu.Lock()
	w.queue = append(w.queue, b)
	w.pending++
	w.mu.Unlock()
	w.cond.Signal()
}

// stopWorkers ends the pool once every submitted batch has run.
func (s *Server) stopWorkers() {
	w := &s.work
	w.mu.Lock()
	for w.pending > 0 {
		w.idle.Wait()
	}
	w.closed = true
	w.mu.Unlock()
	w.cond.Broadcast()
	w.exited.Wait()
	s.syncs.Close()
}

// run executes b on a worker goroutine and hands it back to its loop.
func (s *Server) run(b *batch) {
	if b.job != nil {
		b.job(b)
	} else if s.execBatch(b) {
		return // the syncer finishes it
	}
	b.c.finish(b)
}

// execBatch runs the data commands in order. With wal_sync on, a batch
// with mutations goes to the syncer (syncer.go), which acknowledges it
// after a WAL sync shared with other batches, and execBatch reports true:
// the batch is no longer the worker's. Otherwise it encodes the replies.
func (s *Server) execBatch(b *batch) (deferred bool) {
	now := uint32(s.opts.Now().Unix())
	mutated := false
	start := s.opts.Now()
	for _, r := range b.reqs {
		command.Exec(b.bucket, r, now)
		if command.Estimated(r.Hdr.Op) {
			s.ingress.Settle(r.Ticket, int64(len(r.Res)), start)
		}
		s.meter(b.bucket, r)
		end := s.opts.Now()
		s.view.Executed(r.WU > 0 || r.Mut, end.Sub(start))
		start = end
		mutated = mutated || r.Mut
	}
	if mutated && !s.opts.DisableWALSync {
		s.deferSync(b) // the syncer acknowledges it after a shared fsync
		return true
	}
	s.ackBatch(b, nil)
	return false
}

// releaseTickets ends a batch whose replies are ready: its commands'
// deadline grants end and the tickets they still hold go back.
func (s *Server) releaseTickets(b *batch) {
	now := s.opts.Now()
	for _, r := range b.reqs {
		r.EndDeadline(now)
	}
	s.returnTickets(b, now)
}

// returnTickets gives back the tickets b's commands hold. A command whose
// reply is not ready yet (deferSync) tells its deadline gate too.
func (s *Server) returnTickets(b *batch, now time.Time) {
	for _, r := range b.reqs {
		if r.DL != nil && r.Ticket.Valid() {
			r.Granted = r.Ticket.AcquiredAt() // endDeadline's start once the ticket is gone
			r.Grant = r.DL.Returned(r.Grant, now.Sub(r.Granted))
		}
		if r.Ticket.Valid() {
			s.ingress.Release(r.Ticket, now)
			r.Ticket = ingress.Ticket{}
		}
	}
}

// meter charges a command that succeeded its units (command.Units) and
// counts it in its bucket.
func (s *Server) meter(bk *catalog.Bucket, r *command.Request) {
	bk.Throttle().CountCommand()
	if r.Txt.Text() {
		stateOf(bk).textCommands.Add(1)
	}
	if r.Status == binary.StatusOK {
		command.Units(r, s.limits().ReadUnitSize, s.limits().WriteUnitSize)
		s.throttle.Charge(bk.Throttle(), r.RU, r.WU)
	}
}
