package server

import (
	"sync"

	"kvd/protocol/binary"
)

// syncer is group commit across connections. With wal_sync on, a worker
// that has executed a batch with mutations does not wait for the fsync
// itself: it queues the batch here and takes the next one. One goroutine
// takes every queued batch, makes all their mutations durable with one
// Engine SyncWAL (which covers every mutation committed before the call),
// and only then returns their tickets, encodes their replies and hands
// them back to their connections. While it waits on the disk the next
// group gathers, so the batches of many connections share each fsync and
// none is acknowledged before it; the worker that executed a batch is free
// meanwhile. A batch keeps its ingress tickets until it is acknowledged, so
// the write pool still bounds the commands committed and not yet durable
// (returning them at commit made groups larger, but let one fsync carry so
// much data that an Unthrottled SET waited over 500 ms behind it:
// TestIngressUnthrottledServed). The queue, like the workers', never holds
// more batches than there are connections.
type syncer struct {
	mu     sync.Mutex
	cond   sync.Cond // signalled when the queue grows or the syncer stops
	queue  []*batch  // guarded by mu
	spare  []*batch  // the previous group's slice, reused
	closed bool      // guarded by mu
	done   chan struct{}
}

func (s *Server) startSyncer() {
	q := &s.syncs
	q.cond.L = &q.mu
	q.done = make(chan struct{})
	go s.syncLoop()
}

// deferSync queues b, whose mutations are committed, for the shared sync.
func (s *Server) deferSync(b *batch) {
	q := &s.syncs
	q.mu.Lock()
	q.queue = append(q.queue, b)
	q.mu.Unlock()
	q.cond.Signal()
}

func (s *Server) syncLoop() {
	q := &s.syncs
	defer close(q.done)
	for {
		q.mu.Lock()
		for len(q.queue) == 0 && !q.closed {
			q.cond.Wait()
		}
		group := q.queue
		if len(group) == 0 {
			q.mu.Unlock()
			return
		}
		q.queue = q.spare[:0]
		q.mu.Unlock()
		err := s.db.SyncWAL()
		for i, b := range group {
			s.ackBatch(b, err)
			b.c.finish(b)
			group[i] = nil
		}
		q.spare = group
	}
}

// stopSyncer ends the syncer once every queued batch is acknowledged. The
// workers have stopped: nothing queues any more.
func (s *Server) stopSyncer() {
	q := &s.syncs
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	q.cond.Broadcast()
	<-q.done
}

// ackBatch finishes an executed batch once its mutations are durable (err
// is the WAL sync's result): a failed sync turns every mutation's reply
// into 0x84; then the tickets are returned and the replies encoded.
func (s *Server) ackBatch(b *batch, err error) {
	if err != nil {
		s.log.Error("wal sync failed", "err", err)
		for _, r := range b.reqs {
			if r.mut {
				r.status, r.reason = binary.StatusInternal, "wal sync failed: "+err.Error()
			}
		}
	}
	s.releaseTickets(b)
	for _, r := range b.reqs {
		b.out = b.c.appendResult(b.out, r)
	}
}
