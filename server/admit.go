package server

import (
	"strconv"
	"sync/atomic"
	"time"

	"kvd/catalog"
	"kvd/command"
	"kvd/ingress"
	"kvd/latency"
	"kvd/netmem"
	mc "kvd/protocol/binary"
	"kvd/server/options"
	"kvd/work"
)

// verdict is admission's answer for one data command.
type verdict uint8

const (
	admitRun      verdict = iota // run it now
	admitWait                    // leave it in the input; the connection waits to be woken
	admitAnswered                // it was answered (rejected) on the loop: consume it
	admitQueued                  // it was copied into a batch waiting for a ticket: consume it
)

// admit is the one place where a decoded data command asks whether it may
// run now: the bucket's throttle, its deadline gate, then an ingress ticket.
// It runs on the loop and never blocks. A command that runs joins the batch
// being collected, with its ticket; one the throttle holds stays in the
// input until the next tick wakes its connection; one that waits for a
// ticket becomes a batch of its own queued in ingress, run by whoever
// returns a ticket or answered 0x86 when its wait ends (work.Batch).
// Unthrottled connections take an exempt ticket: it never waits, but counts.
func (s *Server) admit(c *conn, req *mc.Request) verdict {
	pool, now, adm := command.PoolOf(req.Opcode), c.now, stateOf(c.bucket).adm
	c.cmdStart, c.pending = now, 0
	if c.unthrottled { // (a parked command whose user became Unthrottled leaves the park)
		c.leavePark()
		c.runOrCollect(req, s.ingress.StartExempt(pool, adm, now), now)
		return admitRun
	}
	if v := s.checkThrottle(c, req, now); v != admitRun {
		return v
	}
	c.cmdStart = now.Add(-c.throttledFor) // frame complete, before any parking
	arrival := c.in.At(c.gc.InboundBuffered(), now)
	if arrival.After(c.cmdStart) {
		arrival = c.cmdStart
	}
	if v := s.checkDeadline(c, req, pool, arrival, now); v != admitRun {
		return v
	}
	if c.collect != nil {
		// Never queue behind our own batch: run it first, then ask again.
		t, ok := s.ingress.TryAcquire(pool, adm, command.ChargeOf(req), now)
		if !ok {
			c.dropGrant()
			return admitWait
		}
		c.collectReq(req, t)
		return admitRun
	}
	if t, ok := s.ingress.TryAcquire(pool, adm, command.ChargeOf(req), now); ok {
		c.runOrCollect(req, t, now)
		return admitRun
	}
	b := c.srv.work.NewBatch(c, &c.enc, c.bucket)
	r := c.addReq(b, req)
	r.QueuedAt = now // before Acquire: once queued, another goroutine may grant it
	t, d, reason := s.ingress.Acquire(pool, adm, b, command.ChargeOf(req), now)
	switch d {
	case ingress.Admitted:
		r.Ticket = t
		c.collect = b
		return admitRun
	case ingress.Queued:
		c.inflight, c.queued, c.loginTurn = b, true, false // the continuation: Granted or Expired will finish it
		return admitQueued
	}
	b.Release() // gives the deadline grant back too
	c.bucket.Throttle().CountRejected()
	c.lat.Add(stateOf(c.bucket).latency(), command.ClassOf(req.Opcode), c.cmdStart, 0, 0)
	st := mc.StatusBusy
	if d == ingress.TooLarge {
		st = mc.StatusOutOfMemory
	}
	c.replyError(req, st, reason)
	return admitAnswered
}

// checkThrottle asks the bucket's throttle whether a throttled connection's command may run
// now. Admitted, its units wait in c.pending for addReq to hold (serveResident charges at once).
func (s *Server) checkThrottle(c *conn, req *mc.Request, now time.Time) verdict {
	b, pending := c.bucket, command.PendingUnits(req, s.limits().WriteUnitSize)
	// A refusal right after a second boundary that housekeeping has not
	// ticked yet would be wrong: end the second here and ask again.
	if s.throttle.Check(b.Throttle(), pending) || (s.tick(now) && s.throttle.Check(b.Throttle(), pending)) {
		c.pending = max(pending, 1)
		if !c.parkedSince.IsZero() {
			c.throttledFor = now.Sub(c.parkedSince)
			b.Throttle().AddWait(c.throttledFor)
			c.leavePark()
		}
		return admitRun
	}
	if c.collect != nil {
		return admitWait // run what is collected first, then ask again
	}
	return s.throttled(c, req, now)
}

// checkDeadline is deadline admission (SPEC section 7): it asks c's
// bucket's gate (ingress.BucketDeadline) whether req, of class pool, can
// meet the bucket's deadline, counted from arrival, when the command's bytes
// reached the loop (ingress.InputClock), so that the time it waited in the
// connection's input or for the throttle is spent already. Admitted, the
// Grant waits in c.grant for the request the command is copied into
// (addReq, serveResident), which ends it exactly once (command.Request), or
// for dropGrant. Refused, the command is answered 0x86 "deadline <D> ms
// cannot be met: …" with retry_after_us, unless a batch is being collected: its reply must
// not overtake theirs, so it stays in the input and asks again once they ran.
func (s *Server) checkDeadline(c *conn, req *mc.Request, pool ingress.Pool, arrival, now time.Time) verdict {
	dl := stateOf(c.bucket).dl
	capacity := dl.Capacity(s.ingress.PoolSize(pool))
	if c.collect != nil && !dl.Fits(pool, capacity, arrival, now) {
		return admitWait
	}
	g, ok, retry := dl.Admit(pool, capacity, arrival, now)
	switch {
	case ok:
		if g.Deadline() > 0 {
			c.dl, c.grant = dl, g
		}
		return admitRun
	case c.collect != nil:
		return admitWait // lost a race since Fits: counted, but answered later
	}
	c.bucket.Throttle().CountRejected()
	c.throttledFor = 0 // the command is answered: its throttle wait is not the next one's
	if c.txt != nil {  // one SERVER_ERROR line, as for every refusal of a text command
		c.out = c.txt.Refuse(c.out, command.DeadlineReason(g, c.bucket.Name(), capacity, retry))
	} else {
		c.out = c.enc.DeadlineRefusal(c.out, req, g, c.bucket.Name(), capacity, retry)
	}
	return admitAnswered
}

// throttled handles a command the throttle refused: answer 0x0c at once in
// non-blocking mode, park it, or give up on it after max_throttle_wait_ms.
func (s *Server) throttled(c *conn, req *mc.Request, now time.Time) verdict {
	b := c.bucket
	if c.parkedSince.IsZero() {
		b.Throttle().CountThrottled()
		if c.enc.Features&command.FeatNonBlocking != 0 {
			body := strconv.AppendInt([]byte(`{"next_tick_us":`), s.throttle.NextTick(now), 10)
			c.out = mc.AppendResponse(c.out, req.Alt(), &mc.Response{Opcode: req.Opcode,
				Status: mc.StatusWouldThrottle, Opaque: req.Opaque, Datatype: c.enc.JSONType(), Value: append(body, '}')})
			c.lat.Add(stateOf(b).latency(), command.ClassOf(req.Opcode), now, 0, 0)
			return admitAnswered
		}
		c.parkedSince = now
		c.wakeAfter(s.limits().MaxThrottleWait)
	} else if waited := now.Sub(c.parkedSince); waited > s.limits().MaxThrottleWait {
		b.Throttle().AddWait(waited)
		b.Throttle().CountRejected()
		c.lat.Add(stateOf(b).latency(), command.ClassOf(req.Opcode), c.parkedSince, waited, 0)
		c.leavePark()
		c.replyError(req, mc.StatusTemporaryFailure, "throttled for "+strconv.FormatInt(waited.Milliseconds(), 10)+
			" ms in bucket "+b.Name()+", longer than max_throttle_wait_ms="+
			strconv.FormatInt(s.limits().MaxThrottleWait.Milliseconds(), 10))
		return admitAnswered
	}
	c.park()
	return admitWait
}

// park registers c in its bucket's parked set, once, to be woken at the next tick.
func (c *conn) park() {
	if c.parked.CompareAndSwap(false, true) {
		c.bucket.Park(c)
	}
}

// wakeAfter wakes the connection parked now once its command has waited d
// (max_throttle_wait_ms), which may come before the throttle's next tick.
func (c *conn) wakeAfter(d time.Duration) {
	d += time.Millisecond // past the limit, not at it
	if c.parkWake == nil {
		c.parkWake = time.AfterFunc(d, c.Wake)
		return
	}
	c.parkWake.Reset(d)
}

// leavePark ends the head command's parking (admitted, answered, or left).
func (c *conn) leavePark() {
	c.parkedSince = time.Time{}
	if c.parkWake != nil {
		c.parkWake.Stop()
	}
}

// Wake implements catalog.Waker: the bucket's tick (or its deletion), or
// wakeAfter's timer, wakes the parked connection to ask admission again.
func (c *conn) Wake() {
	c.parked.Store(false)
	_ = c.gc.Wake(nil)
}

// tick ends the throttle's second if it is over and wakes every parked
// connection to ask again. It never blocks: it may run on a loop.
func (s *Server) tick(now time.Time) bool {
	if !s.throttle.Tick(now) {
		return false
	}
	s.cat.WakeParked()
	return true
}

// runOrCollect answers a first-in-line GET of a resident item on the loop,
// and otherwise adds the command to the batch being collected.
func (c *conn) runOrCollect(req *mc.Request, t ingress.Ticket, now time.Time) {
	if c.collect == nil && command.PoolOf(req.Opcode) == ingress.Read && c.serveResident(req, t, now) {
		return
	}
	c.collectReq(req, t)
}

// serveResident answers a first-in-line GET/GETK (or quiet variant) on the
// loop when the item is resident in the engine's cache: no worker hop, no
// disk (Peek holds a shard lock never held across I/O). Otherwise it does
// nothing and returns false. The command is admitted and metered exactly as
// on a worker: it holds its ticket t for its short execution, is charged
// its read units and counts in the bucket's figures.
func (c *conn) serveResident(req *mc.Request, t ingress.Ticket, now time.Time) bool {
	s, b := c.srv, c.bucket
	it, ok := command.Peek(b, c.txt.Current(), req.Key, uint32(now.Unix()), c.peek[:0])
	if !ok {
		return false // not resident, or an mg that wins the item's token writes it
	}
	c.peek = it.Value
	r := command.Request{Hdr: command.HeaderOf(req), Throttled: c.throttledFor, Ticket: t}
	c.throttledFor = 0
	r.DL, r.Grant, c.dl, c.grant = c.dl, c.grant, nil, ingress.Grant{}
	r.RU = command.UnitsOf(len(req.Key)+len(it.Value), s.limits().ReadUnitSize)
	b.Throttle().CountCommand()
	s.throttle.Charge(b.Throttle(), r.RU, 0)
	if c.txt != nil {
		stateOf(b).textCommands.Add(1)
		r.SetItem(req.Key, it)
		c.txt.Reply(&r.Txt, nil)
		c.out = c.enc.Result(c.out, &r)
	} else {
		var key []byte
		if req.Opcode.NonQuiet() == mc.OpGetK {
			key = req.Key
		}
		var ex [4]byte
		c.out = c.enc.Metered(c.out, &r, it.CAS, mc.AppendUint32(ex[:0], it.Flags), key, it.Value)
	}
	r.EndDeadline(now)
	s.ingress.SettleRelease(t, int64(len(it.Value)), now) // teaches the bucket's read estimate
	c.lat.Add(stateOf(b).latency(), latency.Read, now.Add(-r.Throttled), r.Throttled, 0)
	return true
}

// collectReq adds an admitted command, with its ticket, to the batch being collected.
func (c *conn) collectReq(req *mc.Request, t ingress.Ticket) {
	if c.collect == nil {
		c.collect = c.srv.work.NewBatch(c, &c.enc, c.bucket)
	}
	c.addReq(c.collect, req).Ticket = t
}

// addReq copies req into b with what admission learnt about it.
func (c *conn) addReq(b *work.Batch, req *mc.Request) *command.Request {
	r := b.Add(req)
	r.Throttled, c.throttledFor = c.throttledFor, 0
	r.Start = c.cmdStart
	r.DL, r.Grant, c.dl, c.grant = c.dl, c.grant, nil, ingress.Grant{}
	r.Hold, c.pending = c.srv.throttle.Hold(c.bucket.Throttle(), c.pending), 0 // until meter charges it
	if c.txt != nil {
		c.txt.Reply(&r.Txt, &r.Aux)
	}
	return r
}

// meter counts a command that ran in its bucket, charges one that succeeded its units
// (command.Units) and releases what its admission held; workers call it (work.Options).
func (s *Server) meter(bk *catalog.Bucket, r *command.Request) {
	bk.Throttle().CountCommand()
	if r.Txt.Text() {
		stateOf(bk).textCommands.Add(1)
	}
	if r.Status == mc.StatusOK {
		command.Units(r, s.limits().ReadUnitSize, s.limits().WriteUnitSize)
		s.throttle.Charge(bk.Throttle(), r.RU, r.WU)
	}
	r.Hold.Release()
}

// bucketState is the server's own per-bucket state, which the catalog
// carries on each bucket (catalog.Bucket.Ext) without interpreting it.
type bucketState struct {
	adm          *ingress.Bucket                // the bucket's admission limits, queues and figures
	dl           *ingress.BucketDeadline        // the bucket's deadline gate, windows and figures
	lat          atomic.Pointer[latency.Bucket] // end-to-end, parked and queued latency; nil until the first command
	textCommands atomic.Int64                   // data commands that came over the text/meta protocol
	frames       netmem.Share                   // what its connections hold in admitted frames not all arrived
}

func stateOf(b *catalog.Bucket) *bucketState { return b.Ext().(*bucketState) }

// latency returns the bucket's histograms, made at its first command: they
// cost 1.3 KiB a bucket, which a node with 100,000 mostly idle buckets
// should not pay for the idle ones.
func (st *bucketState) latency() *latency.Bucket {
	if l := st.lat.Load(); l != nil {
		return l
	}
	st.lat.CompareAndSwap(nil, new(latency.Bucket))
	return st.lat.Load()
}

// bucketHooks keeps the server's per-bucket state in step with the catalog
// (catalog.Observer).
type bucketHooks struct{ s *Server }

func (h bucketHooks) BucketAdded(b *catalog.Bucket) {
	dl, err := ingress.NewBucketDeadline(&h.s.deadline, options.DeadlineSettings(b.Settings()))
	if err != nil { // tenant validated them: should the two disagree, run without a deadline
		h.s.log.Error("deadline settings ignored", "bucket", b.Name(), "err", err)
		dl, _ = ingress.NewBucketDeadline(&h.s.deadline, ingress.DeadlineSettings{})
	}
	b.SetExt(&bucketState{adm: h.s.ingress.AddBucket(b.Name(), options.AdmissionLimits(b.Settings())), dl: dl})
}

func (h bucketHooks) SettingsChanged(b *catalog.Bucket) {
	h.s.ingress.SetBucketLimits(stateOf(b).adm, options.AdmissionLimits(b.Settings()), h.s.opts.Now())
	if err := stateOf(b).dl.SetSettings(options.DeadlineSettings(b.Settings())); err != nil {
		h.s.log.Error("deadline settings ignored", "bucket", b.Name(), "err", err)
	}
}

// BucketRemoved answers the bucket's queued commands: 0x86 "bucket B was deleted".
func (h bucketHooks) BucketRemoved(b *catalog.Bucket) {
	h.s.ingress.RemoveBucket(stateOf(b).adm, h.s.opts.Now())
	h.s.view.Retire(b)
}

// dropGrant gives back the grant checkDeadline left in c for a command that
// stays in the input after all (it will ask the gate again).
func (c *conn) dropGrant() {
	if c.dl != nil {
		c.dl.Release(c.grant)
		c.dl, c.grant = nil, ingress.Grant{}
	}
}
