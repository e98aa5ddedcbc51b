package server

import (
	"errors"
	"runtime"
	"strconv"
	"sync"
	"time"

	"kvd/catalog"
	"kvd/engine"
	"kvd/ingress"
	"kvd/protocol/binary"
	"kvd/protocol/translate"
)

// request is a data command copied out of gnet's buffer so that it can
// outlive the loop pass that decoded it. Requests are pooled.
type request struct {
	hdr    header
	extras []byte // views into buf
	key    []byte
	value  []byte
	buf    []byte

	// Results, set by the worker.
	status binary.Status
	reason string
	cas    uint64
	flags  uint32
	num    uint64 // INCR/DECR result
	res    []byte // value read (GET, GAT)
	exp    uint32 // the item's expiry (GET, GAT, arithmetic): absolute, 0 = never
	made   bool   // arithmetic created the item
	size   int    // resulting value length (APPEND, PREPEND)
	mut    bool   // a mutation succeeded: needs the WAL sync before its ack

	ru, wu    int64          // units charged
	throttled time.Duration  // how long throttling held it
	ticket    ingress.Ticket // its ingress ticket, released when it is done
	start     time.Time      // its frame complete (before any parking)
	queuedAt  time.Time      // when it joined the ticket queue
	queued    time.Duration  // how long it waited for a ticket
	granted   time.Time      // when it got its ticket, kept if the ticket goes back before its reply

	// Its deadline grant (with dl, its bucket's gate; nil when it holds
	// none), ended exactly once: Done, Expire or Release (deadline.go).
	dl    *ingress.BucketDeadline
	grant ingress.Grant

	txt translate.Reply // a text/meta command's reply needs (zero: binary)
	aux []byte          // the text command's opaque and raw key (txt.meta views it)
}

// header is what a reply needs to echo.
type header struct {
	op     binary.Opcode
	opaque uint32
	cas    uint64
	alt    bool
}

func headerOf(req *binary.Request) header {
	return header{op: req.Opcode, opaque: req.Opaque, cas: req.CAS, alt: req.Alt()}
}

var requestPool = sync.Pool{New: func() any { return new(request) }}

func newRequest(req *binary.Request) *request {
	r := requestPool.Get().(*request)
	r.hdr = headerOf(req)
	n := len(req.Extras) + len(req.Key) + len(req.Value)
	r.buf = append(r.buf[:0], req.Extras...)
	r.buf = append(r.buf, req.Key...)
	r.buf = append(r.buf, req.Value...)
	r.extras = r.buf[:len(req.Extras):len(req.Extras)]
	r.key = r.buf[len(req.Extras) : len(req.Extras)+len(req.Key) : len(req.Extras)+len(req.Key)]
	r.value = r.buf[len(req.Extras)+len(req.Key) : n : n]
	return r
}

func (b *batch) release() {
	for i, r := range b.reqs {
		r.release()
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
	reqs   []*request
	bytes  int    // value bytes of reqs
	reads  int    // reads among reqs, whose replies carry values
	out    []byte // encoded replies, in request order
	early  int64  // bytes counted in the syncer's early-return budget

	// job, when set, runs instead of the data commands (control commands
	// that do I/O or slow work: SASL, FLUSH, CREATE/DELETE_BUCKET).
	job func(b *batch)
	// after, when set, runs on the loop when the batch is collected.
	after func(c *conn)
}

func (r *request) release() {
	releaseDeadline(r) // a command that never ran gives its demand back
	r.status, r.reason, r.cas, r.flags, r.num, r.mut = 0, "", 0, 0, 0, false
	r.size, r.ru, r.wu, r.throttled, r.queued = 0, 0, 0, 0, 0
	r.granted = time.Time{}
	r.exp, r.made = 0, false
	if r.txt.Text() {
		r.txt = translate.Reply{}
	}
	r.res = r.res[:0]
	if cap(r.buf) > 64<<10 {
		r.buf = nil
	}
	if cap(r.res) > 64<<10 {
		r.res = nil
	}
	requestPool.Put(r)
}

var batchPool = sync.Pool{New: func() any { return new(batch) }}

func newBatch(c *conn, bk *catalog.Bucket) *batch {
	b := batchPool.Get().(*batch)
	b.c, b.bucket = c, bk
	return b
}

func (b *batch) add(req *binary.Request) *request {
	r := newRequest(req)
	b.reqs = append(b.reqs, r)
	b.bytes += len(req.Value)
	if estimated(req.Opcode) {
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
	s.startSyncer()
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
	s.stopSyncer()
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
		s.exec(b.bucket, r, now)
		if estimated(r.hdr.op) {
			s.ingress.Settle(r.ticket, int64(len(r.res)), start)
		}
		s.meter(b.bucket, r)
		end := s.opts.Now()
		s.view.Executed(r.wu > 0 || r.mut, end.Sub(start))
		start = end
		mutated = mutated || r.mut
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
		endDeadline(r, now)
	}
	s.returnTickets(b, now)
}

// returnTickets gives back the tickets b's commands hold. A command whose
// reply is not ready yet (deferSync) tells its deadline gate too.
func (s *Server) returnTickets(b *batch, now time.Time) {
	for _, r := range b.reqs {
		if r.dl != nil && r.ticket.Valid() {
			r.granted = r.ticket.AcquiredAt() // endDeadline's start once the ticket is gone
			r.grant = r.dl.Returned(r.grant, now.Sub(r.granted))
		}
		if r.ticket.Valid() {
			s.ingress.Release(r.ticket, now)
			r.ticket = ingress.Ticket{}
		}
	}
}

// relativeExpiryLimit is memcached's rule: expiry values up to 30 days are
// relative to now, larger ones are absolute Unix times.
const relativeExpiryLimit = 30 * 24 * 3600

// noCreate is INCR/DECR's expiry meaning "fail instead of creating".
const noCreate = 0xffffffff

// expiryAt converts a protocol expiry into an absolute Unix time (0 = never).
// An absolute time in the past stays in the past: the item is born expired.
func expiryAt(exp, now uint32) uint32 {
	switch {
	case exp == 0:
		return 0
	case exp <= relativeExpiryLimit:
		return now + exp
	default:
		return exp
	}
}

// exec runs one data command against bk on a worker goroutine, recording
// its result in r.
func (s *Server) exec(bk *catalog.Bucket, r *request, now uint32) {
	op := r.hdr.op.NonQuiet()
	var err error
	switch op {
	case binary.OpGet, binary.OpGetK:
		err = s.execGet(bk, r, now)
	case binary.OpSet, binary.OpAdd, binary.OpReplace:
		bk.Counters.CmdSet.Add(1)
		flags, exp, _ := binary.SetExtras(r.extras)
		r.cas, err = bk.Store().Store(storeMode(op), r.key, r.value, flags, expiryAt(exp, now), r.hdr.cas, now)
	case binary.OpAppend, binary.OpPrepend:
		bk.Counters.CmdSet.Add(1)
		r.cas, r.size, err = bk.Store().StoreN(storeMode(op), r.key, r.value, 0, 0, r.hdr.cas, now)
	case binary.OpDelete:
		err = bk.Store().Delete(r.key, r.hdr.cas, now)
	case binary.OpIncrement, binary.OpDecrement:
		delta, initial, exp, _ := binary.ArithExtras(r.extras)
		var res engine.ArithResult
		res, err = bk.Store().ArithItem(r.key, op == binary.OpIncrement, delta, initial,
			expiryAt(exp, now), exp != noCreate, r.hdr.cas, now)
		r.num, r.cas, r.exp, r.made = res.Value, res.CAS, res.Expiry, res.Created
	case binary.OpTouch, binary.OpGAT, binary.OpGATK:
		err = s.execTouch(bk, r, now)
	}
	if err != nil {
		r.status, r.reason = statusOf(err)
		return
	}
	r.mut = op != binary.OpGet && op != binary.OpGetK
}

func (s *Server) execGet(bk *catalog.Bucket, r *request, now uint32) error {
	bk.Counters.CmdGet.Add(1)
	it, err := bk.Store().Get(r.key, now, r.res[:0])
	if err != nil {
		if errors.Is(err, engine.ErrNotFound) {
			bk.Counters.GetMisses.Add(1)
		}
		return err
	}
	bk.Counters.GetHits.Add(1)
	r.res, r.flags, r.cas, r.exp = it.Value, it.Flags, it.CAS, it.Expiry
	return nil
}

func (s *Server) execTouch(bk *catalog.Bucket, r *request, now uint32) error {
	bk.Counters.CmdTouch.Add(1)
	exp, _ := binary.TouchExtras(r.extras)
	it, err := bk.Store().Touch(r.key, expiryAt(exp, now), now, r.res[:0])
	if err != nil {
		if errors.Is(err, engine.ErrNotFound) {
			bk.Counters.TouchMisses.Add(1)
		}
		return err
	}
	bk.Counters.TouchHits.Add(1)
	r.res, r.flags, r.cas, r.exp = it.Value, it.Flags, it.CAS, it.Expiry
	return nil
}

func storeMode(op binary.Opcode) engine.StoreMode {
	switch op {
	case binary.OpAdd:
		return engine.ModeAdd
	case binary.OpReplace:
		return engine.ModeReplace
	case binary.OpAppend:
		return engine.ModeAppend
	case binary.OpPrepend:
		return engine.ModePrepend
	}
	return engine.ModeSet
}

// meter sets r's read and write units from what it did (a failed command
// costs nothing) and charges them to the bucket.
func (s *Server) meter(bk *catalog.Bucket, r *request) {
	bk.Throttle().CountCommand()
	if r.txt.Text() {
		stateOf(bk).textCommands.Add(1)
	}
	if r.status != binary.StatusOK {
		return
	}
	rus, wus := s.limits().ReadUnitSize, s.limits().WriteUnitSize
	k := len(r.key)
	switch r.hdr.op.NonQuiet() {
	case binary.OpGet, binary.OpGetK:
		r.ru = unitsOf(k+len(r.res), rus)
	case binary.OpSet, binary.OpAdd, binary.OpReplace:
		r.wu = unitsOf(k+len(r.value), wus)
	case binary.OpAppend, binary.OpPrepend:
		r.ru, r.wu = unitsOf(k+r.size-len(r.value), rus), unitsOf(k+r.size, wus)
	case binary.OpDelete:
		r.wu = 1
	case binary.OpIncrement, binary.OpDecrement:
		n := len(strconv.AppendUint(r.res[:0], r.num, 10))
		r.ru, r.wu = unitsOf(k+n, rus), unitsOf(k+n, wus)
	case binary.OpTouch:
		r.wu = unitsOf(k+len(r.res), wus)
	case binary.OpGAT, binary.OpGATK:
		r.ru, r.wu = unitsOf(k+len(r.res), rus), unitsOf(k+len(r.res), wus)
	}
	s.throttle.Charge(bk.Throttle(), r.ru, r.wu)
}

// unitsOf is ceil(size/unit), at least 1.
func unitsOf(size, unit int) int64 {
	return max(1, int64((size+unit-1)/unit))
}
