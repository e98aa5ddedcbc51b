// Package server is kvd's network front end: it owns the gnet event loops, the
// per-connection state, and the path every command takes from the wire to the
// engine and back.
//
// # Path of a command
//
// An event loop decodes a frame (package protocol/binary), authorizes it
// against the connection's user and selected bucket, asks admission whether it
// may run (the one hook for throttling and ingress is Server.admit), and then
// either answers it on the loop (NOOP, HELLO, STAT, SELECT_BUCKET, …) or hands
// it to a worker goroutine as part of a batch. A batch is the run of
// consecutive data commands the loop could decode from one connection; the
// worker executes them in order against the engine, makes the mutations
// durable with one WAL sync, encodes the replies and wakes the loop, which
// writes them with one write per pass.
//
// # Invariants
//
//   - The loop never does disk I/O, never waits on a channel, and holds only
//     short locks that are never held across I/O (the bucket registry, the
//     connection hand-off mutex).
//   - A connection has at most one batch in flight. While it is in flight the
//     loop decodes nothing more from that connection: input waits in gnet's
//     inbound buffer. Replies therefore leave in request order by
//     construction, and a command always sees the effects of the commands sent
//     before it on the same connection.
//   - Everything a batch needs is copied out of gnet's buffer before the loop
//     returns. While a batch is in flight the loop does not touch the
//     connection fields the worker reads (features, bucket); results that
//     change connection state (SASL, SELECT) are applied on the loop when the
//     batch is collected.
//   - A mutation is acknowledged only after Engine SyncWAL returned for it
//     (a no-op when wal_sync is off).
//
// Errors from engine and tenant are Go errors; statusOf is the one place they
// become protocol statuses.
package server
