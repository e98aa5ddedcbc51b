package server

import (
	"sync"
	"time"

	"kvd/ingress"
	"kvd/protocol/binary"
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
	size   int    // resulting value length (APPEND, PREPEND)
	mut    bool   // a mutation succeeded: needs the WAL sync before its ack

	ru, wu    int64          // units charged
	throttled time.Duration  // how long throttling held it
	ticket    ingress.Ticket // its ingress ticket, released when it is done
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

func (r *request) release() {
	r.status, r.reason, r.cas, r.flags, r.num, r.mut = 0, "", 0, 0, 0, false
	r.size, r.ru, r.wu, r.throttled = 0, 0, 0, 0
	r.res = r.res[:0]
	if cap(r.buf) > 64<<10 {
		r.buf = nil
	}
	if cap(r.res) > 64<<10 {
		r.res = nil
	}
	requestPool.Put(r)
}

// batch is the unit of work a loop hands to a worker: consecutive data
// commands of one connection against one bucket, or one control job.
type batch struct {
	c      *conn
	bucket *bucket
	reqs   []*request
	bytes  int
	out    []byte // encoded replies, in request order

	// job, when set, runs instead of the data commands (control commands
	// that do I/O or slow work: SASL, FLUSH, CREATE/DELETE_BUCKET).
	job func(b *batch)
	// after, when set, runs on the loop when the batch is collected.
	after func(c *conn)
}

var batchPool = sync.Pool{New: func() any { return new(batch) }}

func newBatch(c *conn, bk *bucket) *batch {
	b := batchPool.Get().(*batch)
	b.c, b.bucket = c, bk
	return b
}

func (b *batch) add(req *binary.Request) *request {
	r := newRequest(req)
	b.reqs = append(b.reqs, r)
	b.bytes += len(req.Value)
	return r
}

func (b *batch) release() {
	for i, r := range b.reqs {
		r.release()
		b.reqs[i] = nil
	}
	b.reqs = b.reqs[:0]
	b.c, b.bucket, b.job, b.after, b.bytes = nil, nil, nil, nil, 0
	if cap(b.out) > 1<<20 {
		b.out = nil
	}
	b.out = b.out[:0]
	batchPool.Put(b)
}

// run executes b on a worker goroutine and hands it back to its loop.
func (s *Server) run(b *batch) {
	defer s.jobs.Done()
	if b.job != nil {
		b.job(b)
	} else {
		s.execBatch(b)
	}
	b.c.finish(b)
}

// execBatch runs the data commands in order, makes their mutations durable
// with one WAL sync, and only then encodes the replies.
func (s *Server) execBatch(b *batch) {
	now := uint32(s.opts.Now().Unix())
	mutated := false
	start := s.opts.Now()
	for _, r := range b.reqs {
		s.exec(b.bucket, r, now)
		s.meter(b.bucket, r)
		end := s.opts.Now()
		s.metrics.observe(r.wu > 0 || r.mut, end.Sub(start))
		start = end
		mutated = mutated || r.mut
	}
	if mutated {
		if err := s.db.SyncWAL(); err != nil {
			s.log.Error("wal sync failed", "err", err)
			for _, r := range b.reqs {
				if r.mut {
					r.status, r.reason = binary.StatusInternal, "wal sync failed: "+err.Error()
				}
			}
		}
	}
	s.releaseTickets(b)
	for _, r := range b.reqs {
		b.out = b.c.appendResult(b.out, r)
	}
}
