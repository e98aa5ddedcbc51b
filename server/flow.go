package server

import (
	"cmp"
	"runtime"
	"runtime/debug"
	"slices"
	"sync/atomic"
	"time"

	"github.com/panjf2000/gnet/v2"
)

// Network memory: the bytes the connections hold in gnet's buffers, input
// not yet decoded (an unfinished frame, a pipeline waiting behind a batch)
// and replies the client has not read yet. Without a bound a client that
// never reads, or that starts a large frame and stalls, costs the node as
// much memory as it likes.
//
// Each connection accounts what it holds at the end of every pass of its
// loop (conn.account) into the node's total, and
//
//   - stops executing its commands while its unsent replies pass
//     max_conn_output (DefaultMaxConnOutput); it goes on once they drain
//     under half of it;
//   - while the node's total is over max_buffer_bytes, a connection holding
//     at least memPauseFloor stops being read and served (memory pause): the
//     client's further bytes wait in the kernel and TCP pushes back;
//   - past MaxConnBuffer it is closed, as before.
//
// gnet reads every readable socket into its inbound buffer and has no API
// to stop; pausing takes the socket's read interest out of its loop's epoll
// set (setReading), which is the loop's own poller, reached once per
// connection through gnet's internals (flow_linux.go, for the pinned gnet
// version; when they do not match, pausing is off, with one warning in the
// log, and the output stop, the refusal of large values at their header and
// the close limits remain).
//
// The housekeeping goroutine (flowTick) wakes paused connections so that
// they look at their output again (gnet tells nobody when its outbound
// buffer drains), lets memory-paused connections go on, those holding the
// least first, once the total is back under 3/4 of the budget, closes the
// connection holding the most as the last resort (over the budget for
// memCloseGrace with nothing moving, or over twice the budget), and hands
// freed memory back to the OS after a peak (debug.FreeOSMemory).

// Flow constants.
const (
	// memPauseFloor: connections holding less are never memory-paused (a
	// normal client's pipeline of small commands).
	memPauseFloor = 64 << 10
	// memCloseGrace is how long the node may stay over its budget before
	// the connection holding the most is closed; at most one per
	// memCloseEvery after that.
	memCloseGrace = 5 * time.Second
	memCloseEvery = time.Second
	// freeOSEvery bounds how often freed buffer memory is returned to the
	// OS, and freeOSMin is the peak that makes it worth it.
	freeOSEvery = 10 * time.Second
	freeOSMin   = 32 << 20
)

// pause reasons, bits of conn.paused.
const (
	pausedOutput uint8 = 1 << iota // unsent replies over max_conn_output
	pausedMemory                   // the node over max_buffer_bytes
)

// flow is the node's view of network memory: atomic counters and the set
// of paused connections.
type flow struct {
	held        atomic.Int64 // bytes held by all connections, as last accounted
	peak        atomic.Int64 // highest held since the last FreeOSMemory
	pausedTotal atomic.Int64 // pauses for memory or output, counted at each start
	memPauses   atomic.Int64 // of those, for the node's budget
	outPauses   atomic.Int64 // of those, for max_conn_output
	closed      atomic.Int64 // connections closed for memory (budget or MaxConnBuffer)

	paused connSet // connections with paused != 0

	overSince, lastClose, lastFree time.Time // housekeeping's own
}

// watch adds c to the paused set (on) or takes it out.
func (f *flow) watch(c *conn, on bool) {
	if on {
		f.paused.add(c)
	} else {
		f.paused.remove(c)
	}
}

// snapshot returns the paused connections.
func (f *flow) snapshot() []*conn { return f.paused.snapshot() }

// account publishes what the connection holds after a pass and decides its
// pauses. It returns gnet.Close past the hard per-connection limit.
func (c *conn) account() gnet.Action {
	s := c.srv
	in, out := c.gc.InboundBuffered(), c.gc.OutboundBuffered()
	held := int64(in + out)
	var total int64
	if held == c.held { // most passes: no write to the node-wide counters the loops share
		total = s.flow.held.Load()
	} else {
		total = s.flow.held.Add(held - c.held)
		c.held = held
		c.heldPub.Store(held)
		if total > s.flow.peak.Load() {
			s.flow.peak.Store(total)
		}
	}
	if limit := s.opts.MaxConnBuffer; in > limit || out > limit {
		s.flow.closed.Add(1)
		s.log.Warn("closing connection", "remote", c.remote, "reason", "buffer over limit",
			"inbound", in, "outbound", out, "limit", limit)
		return gnet.Close
	}
	was := c.paused
	c.paused = c.wantPause(out, held, total)
	if c.paused != 0 || was != 0 {
		c.setReading(c.paused == 0, out > 0, c.paused&pausedMemory != 0)
	}
	if c.paused != 0 && was == 0 {
		s.flow.watch(c, true)
		s.flow.pausedTotal.Add(1)
	} else if c.paused == 0 && was != 0 {
		s.flow.watch(c, false)
	}
	if c.paused&^was&pausedMemory != 0 {
		s.flow.memPauses.Add(1)
		s.log.Info("pausing connection", "remote", c.remote, "reason", "max_buffer_bytes",
			"bytes", held, "node_bytes", total, "limit", s.limits().MaxBufferBytes)
	}
	if c.paused&^was&pausedOutput != 0 {
		s.flow.outPauses.Add(1)
	}
	return gnet.None
}

// wantPause is the connection's pause state for the figures of this pass.
// Output pauses past the cap and lasts until half of it; a memory pause
// lasts until housekeeping lets the connection go on (memResume).
func (c *conn) wantPause(out int, held, total int64) uint8 {
	s, p := c.srv, uint8(0)
	cap := s.opts.MaxConnOutput
	if out > cap || (c.paused&pausedOutput != 0 && out > cap/2) {
		p |= pausedOutput
	}
	if c.memResume.Swap(false) {
		return p
	}
	budget := s.limits().MaxBufferBytes
	if c.paused&pausedMemory != 0 || (total > budget && held >= memPauseFloor) {
		p |= pausedMemory
	}
	return p
}

// outputFull reports whether the replies of this pass and those gnet still
// holds reach max_conn_output: decoding stops there.
func (c *conn) outputFull() bool {
	return len(c.out)+c.gc.OutboundBuffered() >= c.srv.opts.MaxConnOutput
}

// forget takes a closing connection out of the node's figures.
func (c *conn) forget() {
	c.srv.flow.held.Add(-c.held)
	c.held = 0
	c.heldPub.Store(0)
	if c.paused != 0 {
		c.paused = 0
		c.srv.flow.watch(c, false)
	}
}

// readSwitch turns a connection's read interest on or off; gnet.Conn gets
// it through gnet's internals (pollerOf), the tests' fake conn directly.
type readSwitch interface {
	setReading(on, writing, hangup bool) error
}

// setReading puts the socket's interest in its loop's epoll set to read (on)
// or to nothing but write when replies wait (off). With hangup, a client's
// FIN (EPOLLRDHUP) reaches gnet, which then closes the connection: a
// memory-paused client that leaves frees what it holds at once, instead of
// at the idle timeout. (An output pause leaves it out: a client that
// half-closes and then reads its replies slowly is served to the end.)
// gnet itself turns reading back on when its outbound buffer drains;
// account turns it off again on the next pass if the connection is still
// paused.
func (c *conn) setReading(on, writing, hangup bool) {
	if rs, ok := c.gc.(readSwitch); ok {
		_ = rs.setReading(on, writing, hangup)
		return
	}
	if gc, ok := c.gc.(gnet.Conn); ok {
		c.epollReading(gc, on, writing, hangup)
	}
}

// flowTick is housekeeping's part: wake paused connections to look at
// their output, let memory-paused ones go on when there is room, close the
// worst holder as the last resort, and return memory to the OS after a
// peak.
func (s *Server) flowTick(now time.Time) {
	f := &s.flow
	budget := s.limits().MaxBufferBytes
	total := f.held.Load()
	paused := f.snapshot()
	room := budget*3/4 - total
	slices.SortFunc(paused, func(a, b *conn) int { return cmp.Compare(a.heldPub.Load(), b.heldPub.Load()) })
	for _, c := range paused {
		if room > 0 {
			room -= c.heldPub.Load() + memPauseFloor
			c.memResume.Store(true)
		}
		_ = c.gc.Wake(nil)
	}
	s.lastResort(now, total, budget)
	s.freeOS(now, total)
}

// lastResort closes the connection holding the most when the node has been
// over its budget for memCloseGrace, or is over twice its budget.
func (s *Server) lastResort(now time.Time, total, budget int64) {
	f := &s.flow
	if total <= budget {
		f.overSince = time.Time{}
		return
	}
	if f.overSince.IsZero() {
		f.overSince = now
	}
	if total <= 2*budget && (now.Sub(f.overSince) < memCloseGrace || now.Sub(f.lastClose) < memCloseEvery) {
		return
	}
	var worst *conn
	for _, c := range s.conns.snapshot() {
		if worst == nil || c.heldPub.Load() > worst.heldPub.Load() {
			worst = c
		}
	}
	if worst == nil || worst.heldPub.Load() == 0 {
		return
	}
	f.lastClose = now
	f.closed.Add(1)
	s.log.Warn("closing connection", "remote", worst.remote, "reason", "max_buffer_bytes: holds the most",
		"bytes", worst.heldPub.Load(), "node_bytes", total, "limit", budget,
		"over_for", now.Sub(f.overSince).Round(time.Millisecond).String())
	_ = worst.gc.Close()
}

// freeOS returns freed buffer memory to the OS once the connections hold a
// quarter of their peak or less, at most every freeOSEvery: gnet's buffers
// and the Go heap otherwise keep RSS near the peak long after the clients
// left.
func (s *Server) freeOS(now time.Time, total int64) {
	f := &s.flow
	peak := f.peak.Load()
	if peak < freeOSMin || total > peak/4 || now.Sub(f.lastFree) < freeOSEvery {
		return
	}
	f.lastFree = now
	f.peak.Store(total)
	runtime.GC() // gnet's buffer pools (sync.Pool) keep what they held for one more collection
	debug.FreeOSMemory()
}
