package server

import (
	"context"
	"errors"
	"time"

	"github.com/panjf2000/gnet/v2"
	"syscall"

	mc "kvd/protocol/binary"
)

// Shutdown bounds.
const (
	// shutdownGrace is how long Shutdown lets connections finish their
	// commands in flight, take their last replies and close before the
	// engine closes whatever is left.
	shutdownGrace = 3 * time.Second
	// shutdownPoll is how often Shutdown wakes the connections still open
	// (for those whose replies were waiting for the socket) and checks
	// whether they are all gone.
	shutdownPoll = 20 * time.Millisecond
)

// shutdownReason is the reason of the 0x86 a command gets when it arrives,
// or waits parked or queued, while the server shuts down.
const shutdownReason = "shutting down"

// Shutdown stops accepting connections and drains the open ones (see
// drain): commands running on workers finish, parked and queued ones and
// everything still in the input get 0x86 "shutting down", the replies are
// flushed and each connection is half-closed, so a client sees every reply
// of what was sent before end of file. Then the engine stops, the workers
// finish and the engine is closed, which flushes Pebble.
func (s *Server) Shutdown(ctx context.Context) error {
	if !s.stopping.CompareAndSwap(false, true) {
		return errors.New("server: already shut down")
	}
	s.drain(ctx)
	close(s.stopHouse)
	<-s.houseDone
	err := s.eng.Stop(ctx)
	if rerr := <-s.runErr; err == nil && rerr != nil && !errors.Is(rerr, context.Canceled) {
		err = rerr
	}
	waited := make(chan struct{})
	go func() { s.stopWorkers(); close(waited) }()
	select {
	case <-waited:
	case <-ctx.Done():
		return ctx.Err()
	}
	if cerr := s.cat.Close(); err == nil {
		err = cerr // leaves the cluster
	}
	if cerr := s.db.Close(); err == nil {
		err = cerr
	}
	return err
}

// drain wakes every connection so that its loop answers what it holds (see
// onShutdown), and waits until each has closed or sent its FIN,
// shutdownGrace has passed or ctx is done.
func (s *Server) drain(ctx context.Context) {
	grace := time.NewTimer(shutdownGrace)
	defer grace.Stop()
	poll := time.NewTicker(shutdownPoll)
	defer poll.Stop()
	for {
		left := s.conns.wakeUnfinished()
		if left == 0 {
			return
		}
		select {
		case <-grace.C:
			s.log.Warn("shutdown grace period over; closing the remaining connections",
				"connections", left, "grace", shutdownGrace)
			return
		case <-ctx.Done():
			return
		case <-poll.C:
		}
	}
}

// wakeUnfinished wakes the loop of every open connection that has not sent
// its FIN yet, and returns how many it woke.
func (cs *connSet) wakeUnfinished() int {
	left := 0
	for _, c := range cs.snapshot() {
		if !c.finSent.Load() {
			left++
			_ = c.gc.Wake(nil)
		}
	}
	return left
}

// onShutdown is the loop's pass over a connection once the server is
// shutting down. A batch running on a worker finishes (its replies are
// collected here when it is done); a command queued for an ingress ticket
// leaves the queue with 0x86; every whole frame left in the input, parked
// commands included, gets 0x86 "shutting down" without running. Once
// nothing is in flight, every reply has reached the socket and a pass
// found nothing more to answer, the connection is half-closed (FIN after the last reply); what the client
// sends after that is read and dropped until it closes too.
func (c *conn) onShutdown() gnet.Action {
	c.collectDone()
	c.srv.flow.Unpause(&c.mem, c.gc.OutboundBuffered() > 0) // read and answer what is left, whatever it holds
	if c.finSent.Load() {
		_, _ = c.gc.Discard(c.gc.InboundBuffered())
		return gnet.None
	}
	c.cancelQueued()
	if c.inflight == nil && !c.quitting {
		c.refuseInput()
	}
	busy := len(c.out) > 0
	if busy {
		_, _ = c.gc.Write(c.out)
		c.out = c.out[:0]
	}
	if busy || c.inflight != nil || c.gc.OutboundBuffered() > 0 {
		// Woken again when the batch is done, or by drain's poll. The FIN
		// waits for a pass with nothing to answer, so that what the
		// client sent before the shutdown and the socket still holds is
		// answered too.
		return gnet.None
	}
	if c.quitting {
		return gnet.Close
	}
	return c.sendFIN()
}

// cancelQueued answers the connection's command queued for an ingress
// ticket, if it is still queued, with 0x86.
func (c *conn) cancelQueued() {
	b := c.inflight
	if b == nil || !c.srv.ingress.Cancel(b, c.srv.opts.Now()) {
		return // nothing in flight, or it is running and finish will hand it back
	}
	c.inflight = nil
	r := b.reqs[0]
	r.status, r.reason = mc.StatusTemporaryFailure, shutdownReason
	b.bucket.Throttle().CountRejected()
	c.out = c.appendResult(c.out, r)
	b.release()
}

// refuseInput answers every whole frame in the input with 0x86 "shutting
// down", in order; it stops at a partial or undecodable frame.
func (c *conn) refuseInput() {
	c.parkedSince = time.Time{}
	for {
		buf := c.peekFrame()
		var req mc.Request
		n, err := mc.DecodeRequest(buf, uint32(c.srv.opts.MaxFrameSize), &req)
		if len(buf) == 0 || err != nil || n == 0 {
			return
		}
		c.replyError(&req, mc.StatusTemporaryFailure, shutdownReason)
		_, _ = c.gc.Discard(n)
	}
}

// sendFIN half-closes the connection after its last reply. A connection
// without a socket of its own (tests) is closed instead.
func (c *conn) sendFIN() gnet.Action {
	sock, ok := c.gc.(interface{ Fd() int })
	if !ok {
		return gnet.Close
	}
	if err := syscall.Shutdown(sock.Fd(), syscall.SHUT_WR); err != nil {
		return gnet.Close
	}
	c.finSent.Store(true)
	_, _ = c.gc.Discard(c.gc.InboundBuffered())
	return gnet.None
}
