// Package server is kvd's network front end: the gnet event loops, the per-connection state,
// admission, and the control commands. A data command and its reply's encoding are package
// command's; batches off the loops and group commit package work's; the buckets and their
// settings package catalog's; STAT and /metrics package observe's. The server persists nothing.
//
// # Path of a command, file by file
//
//  1. conn.go, the loop: OnTraffic → conn.onTraffic collects a finished batch, then serve decodes
//     one frame at a time (protocol/binary), checks its frame infos and shape, and hands it to
//     handle. A data command passes precheck (bucket selected, not deleted, value size) and goes
//     to admission; any other command to control.
//  2. admit.go, admission: Server.admit asks the bucket's throttle (park on the loop, 0x0c in
//     non-blocking mode, 0x86 past max_throttle_wait_ms), its deadline gate (checkDeadline, from
//     when the bytes arrived: ingress.InputClock), then ingress for a ticket. A first-in-line GET
//     of a resident item is answered on the loop (serveResident); every other admitted command
//     joins the batch being collected; one that must wait for a ticket becomes a batch of its own
//     queued in ingress (a work.Batch is an ingress.Waiter).
//  3. package work: the loop's dispatch submits the batch to the pool; a worker runs the commands
//     in order (command.Exec), meters them (Server.meter), returns the tickets, encodes the
//     replies (command.Encoder) and hands the batch back (conn.Finish wakes the loop). With
//     wal_sync on, a batch with mutations is acknowledged only after an fsync shared with other
//     connections' batches (engine.GroupSync). A short batch acknowledged at commit runs at once:
//     the loop yields to its worker and answers it in the same pass (runInline).
//  4. conn.go again: the loop appends the batch's replies to the pass's output, then one write.
//
// A resident GET: conn.go (onTraffic, serve, handle, runData, precheck) → admit.go (admit,
// checkThrottle, checkDeadline, runOrCollect, serveResident) → conn.go (one write). A synced SET:
// conn.go → admit.go (admit, collectReq) → conn.go (dispatch, startJob) → work (Pool.Submit, run,
// exec, deferSync; Batch.Synced after the fsync) → conn.go (Finish, collectDone, the write).
//
// Text and meta (conn_text.go): the first byte of a connection chooses binary or text (detect).
// A translate.Session decodes a text command into steps carried out here: Run a binary request
// through the path above (command.Encoder turns its reply into text), Answer, Control, Close.
//
// control.go answers HELLO, SASL (tenant.LoginGate), SELECT_BUCKET, STAT, FLUSH and the admin
// commands (catalog.Prepare, applied on a worker), and applies a reload to each connection
// (revalidate). reply.go encodes the loop's own replies. server.go wires gnet (a connection's
// slot: package slots) and the housekeeping; reload.go applies a reload; shutdown.go drains.
//
// Beside every command, the connection records its end-to-end, parked and queued time (latency.Log)
// and reports what it holds in input and replies to the network memory budget (package netmem).
//
// # Invariants
//
//   - The loop never does disk I/O, never waits on a channel, and takes only short locks never
//     held across I/O. Its one yield is runtime.Gosched.
//   - A connection has at most one batch out. While it is, the loop decodes nothing more from
//     that connection, so replies leave in request order and no queue holds more batches than
//     there are connections.
//   - Everything a batch needs is copied out of gnet's buffer before the loop returns; while a
//     batch is out the loop leaves alone what the worker reads, and a batch's effects on the
//     connection (SASL, SELECT) are applied on the loop when it is collected.
//   - With wal_sync on, a mutation is acknowledged only after the fsync that covers it.
//
// The loop sees its gnet.Conn as netConn: loop_test.go tests it with a fake connection and clock.
package server
