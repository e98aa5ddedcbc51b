package server

import (
	"context"
	"errors"
	"time"
)

// Shutdown's bounds: the grace connections get to finish their commands
// in flight, take their last replies and close before the engine closes
// whatever is left; how often the connections still open are woken (for
// replies that waited for the socket) and counted; and the reason of the
// 0x86 a command gets when it arrives, or waits parked or queued, meanwhile.
const (
	shutdownGrace  = 3 * time.Second
	shutdownPoll   = 20 * time.Millisecond
	shutdownReason = "shutting down"
	shutdownRead   = time.Second // at most this long a connection's socket is read for input sent before the signal (sendFIN)
)

// Shutdown drains the open connections, those accepted meanwhile too (see
// drain): commands running on workers finish, parked and queued ones and
// everything still in the input get 0x86 "shutting down", the replies are
// flushed and each connection is half-closed, so a client sees every reply
// of what was sent before end of file. Then the engine stops, the workers
// finish and the engine is closed, which flushes Pebble.
func (s *Server) Shutdown(ctx context.Context) error {
	if !s.stopping.CompareAndSwap(false, true) {
		return errors.New("server: already shut down")
	}
	s.logins.Drain() // logins waiting out a failure's delay are answered too
	s.drain(ctx)
	close(s.stopHouse)
	<-s.houseDone
	err := s.eng.Stop(ctx)
	if rerr := <-s.runErr; rerr != nil && !errors.Is(rerr, context.Canceled) {
		err = rerr // the engine stopped on its own before (Done): why
	}
	waited := make(chan struct{})
	go func() { s.work.Stop(); close(waited) }()
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
// onShutdown), and waits until each has closed or sent its FIN and none was
// accepted for shutdownPoll, shutdownGrace has passed or ctx is done.
func (s *Server) drain(ctx context.Context) {
	grace := time.NewTimer(shutdownGrace)
	defer grace.Stop()
	poll := time.NewTicker(shutdownPoll)
	defer poll.Stop()
	for start := time.Now(); ; {
		left := s.wakeUnfinished()
		if left == 0 && time.Since(time.Unix(0, max(start.UnixNano(), s.lastOpen.Load()))) >= shutdownPoll {
			return // and none accepted for shutdownPoll: a client that connected before the signal may be next
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
func (s *Server) wakeUnfinished() int {
	left := 0
	s.eachConn(func(c *conn) bool {
		if !c.finSent.Load() {
			left++
			_ = c.gc.Wake(nil)
		}
		return true
	})
	return left
}
