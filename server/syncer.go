package server

import (
	"kvd/protocol/binary"
)

// Group commit across connections (engine.GroupSync). With wal_sync on, a
// worker that has executed a batch with mutations does not wait for the
// fsync itself: it queues the batch and takes the next one, and the batch's
// replies are encoded and handed back to its connection once the fsync
// that covers it is done (batch.Synced). Batches of many connections share
// each fsync and none is acknowledged before it.
//
// Tickets: a write ticket stands for work in the engine, and a committed
// batch waiting for the shared fsync does none, so while the bytes written
// and not yet synced stay under syncEarlyBytes (the group sync's early
// budget) a batch returns its tickets at commit, and the group that shares
// the next fsync is not capped at the write pool's size (closed-loop synced
// SETs from 512 connections: 25k → 63k ops/s). Past that bound a batch
// keeps its tickets until it is acknowledged, so the write pool bounds how
// much data one fsync carries (returning every ticket at commit let one
// fsync carry so much data that an Unthrottled SET waited over 500 ms
// behind it: TestIngressUnthrottledServed). A bucket with max_concurrent
// keeps its tickets to the acknowledgement too: its limit counts the
// commands it has in flight until they are durable. The queue, like the
// workers', never holds more batches than there are connections.

// syncEarlyBytes bounds the bytes written by batches that returned their
// tickets before their fsync: a few hundred small SETs, one sync of well
// under a millisecond's writing.
const syncEarlyBytes = 256 << 10

// deferSync queues b, whose mutations are committed, for the shared sync.
// If the bytes it wrote fit the early budget and its bucket sets no
// max_concurrent, its tickets go back now.
func (s *Server) deferSync(b *batch) {
	var reserved int64
	// Before the batch is queued only this goroutine touches its tickets.
	if n := s.writtenBytes(b); b.bucket.Settings().MaxConcurrent == 0 && s.syncs.Reserve(n) {
		reserved = n
		s.returnTickets(b, s.opts.Now())
	}
	s.syncs.Add(b, reserved)
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

// Synced implements engine.Waiter: b's mutations are durable (or the sync
// failed); its replies go to its connection.
func (b *batch) Synced(err error) {
	b.c.srv.ackBatch(b, err)
	b.c.finish(b)
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
