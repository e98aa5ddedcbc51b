// Package server is kvd's network front end: it owns the gnet event loops, the
// per-connection state, and the path every command takes from the wire to the
// engine and back. The buckets themselves, their settings and the config
// file's reconciliation belong to package catalog; the server holds a
// *catalog.Catalog and never persists anything itself.
//
// # Path of a command, file by file
//
//  1. conn.go, the loop: OnTraffic → conn.onTraffic collects a finished
//     batch, then serve peeks one frame at a time, decodes it (package
//     protocol/binary), checks its frame infos and shape, and hands it to
//     handle. Data commands pass precheck (bucket selected, not deleted,
//     value size) and go to admission; other commands go to control.
//  2. admit.go, admission: Server.admit asks the bucket's throttle (park on
//     the loop, answer 0x0c in non-blocking mode, or 0x86 past
//     max_throttle_wait_ms), then, for a bucket with deadline_ms, its
//     deadline gate (deadline.go; the deadline counts from when the
//     command's bytes reached the loop, ingress.InputClock), then ingress for a
//     ticket. An admitted GET of a
//     resident item that is first in line is answered on the loop
//     (serveResident); every other admitted command joins the batch being
//     collected. A command that must wait for a ticket becomes a
//     continuation: a batch of its own, queued in ingress, dispatched by
//     whoever frees a ticket (Granted) or answered 0x86 (Expired).
//  3. worker.go, the worker side: the loop's dispatch submits the batch to
//     the worker pool; a worker executes the commands in order against the
//     bucket's engine keyspace (exec), meters their units into the throttle
//     (meter), releases the tickets and encodes the replies; then it hands
//     the batch back to the connection (conn.finish) and wakes its loop.
//     With wal_sync on, a batch with mutations goes instead to the syncer
//     (syncer.go), one goroutine that makes the mutations of every batch
//     queued meanwhile durable with one WAL sync (group commit across
//     connections) and only then encodes and hands back each; a small
//     batch returns its tickets at commit, before the sync (deferSync).
//  4. reply.go, replies: appendResult encodes a command's outcome (unit
//     frames for ReportUnitUsage, XERROR JSON bodies); statusOf is the one
//     place engine and tenant errors become protocol statuses.
//  5. conn.go again: on the wake the loop appends the batch's replies to the
//     pass's output, writes everything with one write, and goes on decoding.
//
// Text and meta (conn_text.go): the first byte of a connection chooses
// binary or memcached's text protocol (detect, conn.go). serveText peeks a
// text command and has package protocol/translate decode it; the
// translate.Session then hands out the command's steps: Run a binary
// request it means (a multi-get is one GET per key), Answer a line on the
// loop, Control, Close. A Run takes the path above unchanged (precheck,
// admit, batch, worker) and carries a translate.Reply; appendResult hands it
// to appendText (reply.go), whose Reply.Append turns the binary result into
// the codec's Outcome and encodes the text reply. version, verbosity,
// stats, mn and quit are answered on the loop, flush_all and the -Y style
// login on a worker (textControl, textAuth: control.go).
//
// control.go answers the other commands (HELLO, SASL, SELECT_BUCKET, STAT,
// the throttle and bucket admin commands); those that do I/O or slow work
// run as a one-command batch on a worker, like data; SASL_AUTH goes to
// the login gate instead (tenant.LoginGate), which paces attempts per
// remote address and verifies passwords on its own small pool
// (conn.authenticate, in control.go, is the job it runs). The STAT groups
// and the Prometheus figures are package observe's, read at request or
// scrape time from counters the data path keeps anyway; observe.go is what
// observe reads of the server (observe.Node) and the STAT forwarders.
// server.go wires gnet and the housekeeping goroutine (throttle ticks, then
// in a cluster catalog.TickCluster, which publishes the node's demand and
// applies its shares; prober, idle sweep); shutdown.go the drain at
// shutdown (a connection's own part, onShutdown, is the loop's, in
// conn.go); options.go and reload.go hold the options, their reload, and how
// a reload reaches open connections (revocation: conn.revalidate, in
// control.go), and in cluster mode (Options.Cluster) the users that arrive
// from etcd; the catalog does the rest of cluster mode. frames.go holds what
// the loop knows of a frame before it runs it (HELLO features, protocols,
// data opcodes, frame infos). Every *conn method lives in the loop's files
// (conn.go, conn_text.go), admission (admit.go), replies (reply.go) or
// control (control.go).
//
// Two concerns run beside every command. The connection records each
// answered command's end-to-end time, parked and queued parts (package
// latency: a latency.Log per connection) after the pass's write, in
// per-bucket histograms kept one copy per loop. Package netmem bounds
// network memory: each pass reports the connection's unread input and
// unsent output (conn.account, in conn.go) into a node-wide total; past
// max_buffer_bytes the largest holders stop being read, a connection whose
// unsent replies pass its cap stops decoding until they drain
// (conn.outputFull), and the largest holder is closed only as the last
// resort (netmem.Budget.Tick, from housekeeping).
//
// A GET of a resident item: conn.go (serve, handle, runData, precheck) → admit.go
// (admit, checkThrottle, runOrCollect, serveResident) → reply.go
// (appendMetered) → conn.go (one write). A synced SET: conn.go → admit.go
// (admit, collectReq) → conn.go (dispatch) → worker.go (submit, run,
// execBatch, exec, meter) → syncer.go (deferSync: returnTickets; syncLoop:
// SyncWAL, ackBatch, releaseTickets) → reply.go (appendResult) → conn.go
// (finish, then collectDone and the write on the loop).
//
// # Invariants
//
//   - The loop never does disk I/O, never waits on a channel, and holds only
//     short locks that are never held across I/O (the catalog's registry,
//     the worker queue, a connection's hand-off mutex).
//   - A connection has at most one batch in flight. While it is in flight the
//     loop decodes nothing more from that connection: input waits in gnet's
//     inbound buffer. Replies therefore leave in request order by
//     construction, and a command always sees the effects of the commands sent
//     before it on the same connection. It also bounds the worker queue: it
//     never holds more batches than there are connections.
//   - Everything a batch needs is copied out of gnet's buffer before the loop
//     returns. While a batch is in flight the loop does not touch the
//     connection fields the worker reads (features, bucket); results that
//     change connection state (SASL, SELECT) are applied on the loop when the
//     batch is collected.
//   - A mutation is acknowledged only after Engine SyncWAL returned for it
//     (a no-op when wal_sync is off).
//
// The loop's view of its gnet.Conn is the small netConn interface, so that
// admission order, parking and reply order are tested inside the package with
// a fake connection and a fake clock (loop_test.go).
package server
