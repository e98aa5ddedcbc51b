package server

import (
	"time"

	"kvd/ingress"
	mc "kvd/protocol/binary"
)

// admit is the one place where a decoded data command asks whether it may
// run now: first the bucket's throttle, then an ingress ticket. It is called
// on the loop and never blocks. A command that runs is added to the batch
// being collected, with its ticket. A command the throttle holds stays in
// the input and its connection is woken at the next tick. A command that
// waits for a ticket becomes a continuation: it is copied into a batch of
// its own, queued in ingress, and dispatched to a worker by whoever returns
// a ticket (or answered 0x86 when its wait times out), without the loop.
//
// Unthrottled connections skip both: they take an exempt ticket, which never
// waits but is counted.
func (s *Server) admit(c *conn, req *mc.Request) verdict {
	pool, now := poolOf(req.Opcode), s.opts.Now()
	if c.unthrottled {
		c.runOrCollect(req, s.ingress.StartExempt(pool, now), now)
		return admitRun
	}
	if v := s.checkThrottle(c, req, now); v != admitRun {
		return v
	}
	if c.collect != nil {
		// Never queue behind our own batch: run it first, then ask again.
		t, d, _ := s.ingress.Acquire(pool, nil, now)
		if d != ingress.Admitted {
			return admitWait
		}
		c.collectReq(req, t)
		return admitRun
	}
	if t, d, _ := s.ingress.Acquire(pool, nil, now); d == ingress.Admitted {
		c.runOrCollect(req, t, now)
		return admitRun
	}
	b := newBatch(c, c.bucket)
	r := c.addReq(b, req)
	t, d, reason := s.ingress.Acquire(pool, b, now)
	switch d {
	case ingress.Admitted:
		r.ticket = t
		c.collect = b
		return admitRun
	case ingress.Queued:
		c.inflight = b // the continuation: Granted or Expired will finish it
		return admitQueued
	}
	b.release()
	c.bucket.thr.CountRejected()
	c.replyError(req, mc.StatusBusy, reason)
	return admitAnswered
}

// runOrCollect answers a first-in-line GET of a resident item on the loop,
// and otherwise adds the command to the batch being collected.
func (c *conn) runOrCollect(req *mc.Request, t ingress.Ticket, now time.Time) {
	if c.collect == nil && poolOf(req.Opcode) == ingress.Read && c.serveResident(req, t, now) {
		return
	}
	c.collectReq(req, t)
}

// collectReq adds an admitted command, with its ticket, to the batch being
// collected.
func (c *conn) collectReq(req *mc.Request, t ingress.Ticket) {
	if c.collect == nil {
		c.collect = newBatch(c, c.bucket)
	}
	c.addReq(c.collect, req).ticket = t
}

// addReq copies req into b with what admission learnt about it.
func (c *conn) addReq(b *batch, req *mc.Request) *request {
	r := b.add(req)
	r.throttled, c.throttledFor = c.throttledFor, 0
	return r
}

// Granted implements ingress.Waiter: the queued command got its ticket and
// goes to a worker. It runs on the goroutine that returned the ticket.
func (b *batch) Granted(t ingress.Ticket) {
	b.reqs[0].ticket = t
	b.c.srv.submit(b)
}

// Expired implements ingress.Waiter: the queued command waited past the
// queue timeout and is answered 0x86 with the reason.
func (b *batch) Expired(reason string) {
	r := b.reqs[0]
	r.status, r.reason = mc.StatusTemporaryFailure, reason
	b.bucket.thr.CountRejected()
	b.out = b.c.appendResult(b.out, r)
	b.c.finish(b)
}

// abandon is called on the loop when the connection closes with b in
// flight. If b was queued for a ticket and leaves the queue here, it is
// released here; otherwise it is running, or its callback is on its way,
// and finish releases it.
func (s *Server) abandon(b *batch, now time.Time) {
	if s.ingress.Cancel(b, now) {
		b.release()
	}
}

// poolOf is the ticket pool of a data command: reads from the read pool,
// every mutation (TOUCH and GAT included) from the write pool.
func poolOf(op mc.Opcode) ingress.Pool {
	switch op.NonQuiet() {
	case mc.OpGet, mc.OpGetK:
		return ingress.Read
	}
	return ingress.Write
}

// releaseTickets returns the tickets of a batch's commands.
func (s *Server) releaseTickets(b *batch) {
	now := s.opts.Now()
	for _, r := range b.reqs {
		if r.ticket.Valid() {
			s.ingress.Release(r.ticket, now)
			r.ticket = ingress.Ticket{}
		}
	}
}
