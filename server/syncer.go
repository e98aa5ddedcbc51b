package server

import (
	"sync"
	"sync/atomic"

	"kvd/protocol/binary"
)

// syncer is group commit across connections. With wal_sync on, a worker
// that has executed a batch with mutations does not wait for the fsync
// itself: it queues the batch here and takes the next one. One goroutine
// takes every queued batch, makes all their mutations durable with one
// Engine SyncWAL (which covers every mutation committed before the call),
// and only then encodes their replies and hands them back to their
// connections. While it waits on the disk the next group gathers, so the
// batches of many connections share each fsync and none is acknowledged
// before it; the worker that executed a batch is free meanwhile.
//
// Tickets: a write ticket stands for work in the engine, and a committed
// batch waiting for the shared fsync does none, so while the bytes written
// and not yet synced stay under syncEarlyBytes a batch returns its tickets
// at commit, and the group that shares the next fsync is not capped at the
// write pool's size (closed-loop synced SETs from 512 connections: 25k →
// 63k ops/s). Past that bound a batch keeps its tickets until it is
// acknowledged, so the write pool bounds how much data one fsync carries
// (returning every ticket at commit let one fsync carry so much data that
// an Unthrottled SET waited over 500 ms behind it:
// TestIngressUnthrottledServed). A bucket with max_concurrent keeps its
// tickets to the acknowledgement too: its limit counts the commands it has
// in flight until they are durable. The queue, like the workers', never
// holds more batches than there are connections.
type syncer struct {
	mu     sync.Mutex
	cond   sync.Cond    // signalled when the queue grows or the syncer stops
	queue  []*batch     // guarded by mu
	spare  []*batch     // the previous group's slice, reused
	early  atomic.Int64 // bytes of batches that returned their tickets and await the sync
	closed bool         // guarded by mu
	done   chan struct{}
}

// syncEarlyBytes bounds the bytes written by batches that returned their
// tickets before their fsync: a few hundred small SETs, one sync of well
// under a millisecond's writing.
const syncEarlyBytes = 256 << 10

func (s *Server) startSyncer() {
	q := &s.syncs
	q.cond.L = &q.mu
	q.done = make(chan struct{})
	go s.syncLoop()
}

// deferSync queues b, whose mutations are committed, for the shared sync.
// If the bytes it wrote fit under syncEarlyBytes with those already
// waiting, and its bucket sets no max_concurrent, its tickets go back now.
func (s *Server) deferSync(b *batch) {
	q := &s.syncs
	// Before the batch is queued only this goroutine touches its tickets.
	if n := s.writtenBytes(b); b.bucket.Settings().MaxConcurrent == 0 {
		if q.early.Add(n) <= syncEarlyBytes {
			b.early = n
			s.returnTickets(b, s.opts.Now())
		} else {
			q.early.Add(-n)
		}
	}
	q.mu.Lock()
	q.queue = append(q.queue, b)
	q.mu.Unlock()
	q.cond.Signal()
}

// writtenBytes approximates the bytes b's mutations wrote: their write
// units times the unit size.
func (s *Server) writtenBytes(b *batch) int64 {
	var wu int64
	for _, r := range b.reqs {
		wu += r.WU
	}
	return max(1, wu) * int64(s.limits().WriteUnitSize)
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
		for _, b := range group {
			q.early.Add(-b.early)
			b.early = 0
		}
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
// into 0x84; then the tickets still held are returned, the deadline
// grants ended and the replies encoded.
func (s *Server) ackBatch(b *batch, err error) {
	if err != nil {
		s.log.Error("wal sync failed", "err", err)
		for _, r := range b.reqs {
			if r.Mut {
				r.Status, r.Reason = binary.StatusInternal, "wal sync failed: "+err.Error()
			}
		}
	}
	s.releaseTickets(b)
	for _, r := range b.reqs {
		b.out = b.c.enc.Result(b.out, r)
	}
}
