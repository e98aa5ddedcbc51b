package server

import (
	"strconv"
	"sync"
	"time"

	mc "kvd/protocol/binary"
)

// verdict is admission's answer for one data command.
type verdict uint8

const (
	admitRun      verdict = iota // run it now
	admitWait                    // leave it in the input; the connection waits to be woken
	admitAnswered                // it was answered (rejected) on the loop: consume it
	admitQueued                  // it was copied into a batch waiting for a ticket: consume it
)

// checkThrottle asks the bucket's throttle whether a throttled connection's
// command may run now.
func (s *Server) checkThrottle(c *conn, req *mc.Request, now time.Time) verdict {
	b, pending := c.bucket, pendingUnits(req, s.limits().WriteUnitSize)
	// A refusal right after a second boundary that housekeeping has not
	// ticked yet would be wrong: end the second here and ask again.
	if s.throttle.Check(b.thr, pending) || (s.tick(now) && s.throttle.Check(b.thr, pending)) {
		if !c.parkedSince.IsZero() {
			c.throttledFor = now.Sub(c.parkedSince)
			b.thr.AddWait(c.throttledFor)
			c.parkedSince = time.Time{}
		}
		return admitRun
	}
	if c.collect != nil {
		return admitWait // run what is collected first, then ask again
	}
	return s.throttled(c, req, now)
}

// throttled handles a command the throttle refused: answer 0x0c at once in
// non-blocking mode, park it, or give up on it after max_throttle_wait_ms.
func (s *Server) throttled(c *conn, req *mc.Request, now time.Time) verdict {
	b := c.bucket
	if c.parkedSince.IsZero() {
		b.thr.CountThrottled()
		if c.features&featNonBlocking != 0 {
			body := strconv.AppendInt([]byte(`{"next_tick_us":`), s.throttle.NextTick(now), 10)
			c.out = mc.AppendResponse(c.out, req.Alt(), &mc.Response{Opcode: req.Opcode,
				Status: mc.StatusWouldThrottle, Opaque: req.Opaque, Datatype: mc.DatatypeJSON, Value: append(body, '}')})
			return admitAnswered
		}
		c.parkedSince = now
	} else if waited := now.Sub(c.parkedSince); waited > s.limits().MaxThrottleWait {
		b.thr.AddWait(waited)
		b.thr.CountRejected()
		c.parkedSince = time.Time{}
		c.replyError(req, mc.StatusTemporaryFailure, "throttled for "+strconv.FormatInt(waited.Milliseconds(), 10)+
			" ms in bucket "+b.name+", longer than max_throttle_wait_ms="+
			strconv.FormatInt(s.limits().MaxThrottleWait.Milliseconds(), 10))
		return admitAnswered
	}
	b.park(c)
	return admitWait
}

// pendingUnits are the units a command is checked with before it runs: the
// write's size for SET-like commands, 1 otherwise (SPEC section 5).
func pendingUnits(req *mc.Request, writeUnit int) int64 {
	switch req.Opcode.NonQuiet() {
	case mc.OpSet, mc.OpAdd, mc.OpReplace, mc.OpAppend, mc.OpPrepend:
		return unitsOf(len(req.Key)+len(req.Value), writeUnit)
	}
	return 1
}

// unitsOf is ceil(size/unit), at least 1.
func unitsOf(size, unit int) int64 {
	return max(1, int64((size+unit-1)/unit))
}

// meter sets r's read and write units from what it did (a failed command
// costs nothing) and charges them to the bucket.
func (s *Server) meter(bk *bucket, r *request) {
	bk.thr.CountCommand()
	if r.status != mc.StatusOK {
		return
	}
	rus, wus := s.limits().ReadUnitSize, s.limits().WriteUnitSize
	k := len(r.key)
	switch r.hdr.op.NonQuiet() {
	case mc.OpGet, mc.OpGetK:
		r.ru = unitsOf(k+len(r.res), rus)
	case mc.OpSet, mc.OpAdd, mc.OpReplace:
		r.wu = unitsOf(k+len(r.value), wus)
	case mc.OpAppend, mc.OpPrepend:
		r.ru, r.wu = unitsOf(k+r.size-len(r.value), rus), unitsOf(k+r.size, wus)
	case mc.OpDelete:
		r.wu = 1
	case mc.OpIncrement, mc.OpDecrement:
		n := len(strconv.AppendUint(r.res[:0], r.num, 10))
		r.ru, r.wu = unitsOf(k+n, rus), unitsOf(k+n, wus)
	case mc.OpTouch:
		r.wu = unitsOf(k+len(r.res), wus)
	case mc.OpGAT:
		r.ru, r.wu = unitsOf(k+len(r.res), rus), unitsOf(k+len(r.res), wus)
	}
	s.throttle.Charge(bk.thr, r.ru, r.wu)
}

// parked is the set of connections waiting for their bucket's next tick.
type parked struct {
	mu    sync.Mutex
	conns []*conn // guarded by mu
}

// park registers c to be woken at the next tick (once).
func (b *bucket) park(c *conn) {
	if !c.parked.CompareAndSwap(false, true) {
		return
	}
	b.parked.mu.Lock()
	b.parked.conns = append(b.parked.conns, c)
	b.parked.mu.Unlock()
}

// wakeParked wakes every connection parked on b; each asks again.
func (b *bucket) wakeParked() {
	b.parked.mu.Lock()
	list := b.parked.conns
	b.parked.conns = nil
	b.parked.mu.Unlock()
	for _, c := range list {
		c.parked.Store(false)
		_ = c.gc.Wake(nil)
	}
}

// tick ends the throttle's second if it is over and wakes every parked
// connection to ask again. It never blocks: it may run on a loop.
func (s *Server) tick(now time.Time) bool {
	if !s.throttle.Tick(now) {
		return false
	}
	for _, b := range s.buckets.all() {
		b.wakeParked()
	}
	return true
}
