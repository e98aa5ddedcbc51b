package server

import (
	"errors"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/panjf2000/gnet/v2"

	"kvd/catalog"
	"kvd/command"
	"kvd/ingress"
	"kvd/latency"
	"kvd/netmem"
	"kvd/protocol/binary"
	"kvd/protocol/translate"
	"kvd/slots"
	"kvd/tenant"
	"kvd/work"
)

// Connection protocols: memcached's text and meta protocols share the port
// with binary, and the first byte of a connection decides (detect).
const (
	protoUnknown uint8 = iota
	protoBinary
	protoText
)

// Batch limits: how much one worker hand-off may carry.
const (
	maxBatchCommands = 64
	maxBatchBytes    = 1 << 20
)

// netConn is what a conn needs of its gnet.Conn. It is the seam that lets
// the loop's admission, parking and reply order be tested with a fake
// connection and a fake clock (loop_test.go).
type netConn interface {
	Peek(n int) ([]byte, error)
	Discard(n int) (int, error)
	InboundBuffered() int
	OutboundBuffered() int
	Write(b []byte) (int, error)
	Wake(cb gnet.AsyncCallback) error
	Close() error
}

// conn is one client connection. Its fields belong to the event loop but
// box, where the batch in flight comes back (work.Mailbox); the worker
// running that batch only reads enc's features and the batch it was given.
type conn struct {
	srv    *Server
	gc     netConn
	remote string
	slot   slots.Slot // max_connections or the system band (only a privileged login)

	user        *tenant.User    // nil until SASL succeeds
	unthrottled bool            // user has the Unthrottled privilege
	bucket      *catalog.Bucket // selected bucket, nil for none
	noBucket    string          // why no bucket is selected, when the connection did not choose it (noBucketReason)
	wantBucket  string          // the bucket autoSelect found full: tried again at each data command
	enc         command.Encoder // replies in the connection's HELLO features

	parkedSince   time.Time          // when the head command was first throttled; zero when not
	parkWake      *time.Timer        // wakes the parked connection at max_throttle_wait_ms (wakeAfter)
	throttledFor  time.Duration      // how long the next batched command was held
	now, cmdStart time.Time          // the pass's clock (read once a pass); the admitted command's frame complete
	in            ingress.InputClock // when the input's bytes arrived
	lat           latency.Log        // commands answered this pass, observed after the write

	dl      *ingress.BucketDeadline // the gate of the admitted command's bucket; nil when it holds no grant
	grant   ingress.Grant           // the admitted command's deadline grant
	pending int64                   // the throttle-admitted command's units, held once it joins a batch (addReq)

	out               []byte             // replies of this pass, written once at the end (lent by scratch)
	peek              []byte             // value buffer of GETs answered on the loop (lent by scratch)
	scratch           *netmem.Scratch    // its event loop's buffers, which out and peek are during a pass
	inflight          *work.Batch        // batch executing off the loop, nil when none
	handedOff         bool               // inflight went to a worker this pass (runInline)
	queued, loginTurn bool               // inflight waits for an ingress ticket or (loginTurn) its turn at the login gate (stall)
	collect           *work.Batch        // batch being assembled in this pass
	quitting          bool               // QUIT seen: close after flushing
	closed            bool               // OnClose ran, maybe inside this pass's write (gnet closes on a failed one)
	proto             uint8              // protoUnknown until the first byte, then protoBinary or protoText
	txt               *translate.Session // text/meta translation (conn_text.go), nil for binary
	usersGen          uint64             // the users generation this connection last checked (reload.go: revoke)

	mem     netmem.Holder // its share of the node's network memory (netmem: what it held, its pauses)
	stopped bool          // decoding stopped this pass (netmem pause, output full)
	swallow int           // bytes of a refused frame still to discard (refuseAtHeader, a text data block)
	frame   int           // length of the frame being read that netmem admitted (refuseAtHeader); 0 when none

	partialSince atomic.Int64  // unix nanos an unfinished frame has waited since; 0 when none
	parked       atomic.Bool   // registered in its bucket's parked set (see park)
	finSent      atomic.Bool   // shutting down: the last reply went, followed by FIN
	settle       netmem.Settle // shutting down: when the socket stopped receiving (sendFIN)

	box work.Mailbox // where inflight comes back
}

func newConn(s *Server, gc netConn, remote string) *conn {
	c := &conn{srv: s, gc: gc, remote: remote, usersGen: s.usersGen.Load()}
	c.enc.Now = s.opts.Now
	c.lat.Shard = int(s.connSeq.Add(1) % latency.Shards)
	c.mem.Init(gc, remote)
	c.scratch = s.scratches.Of(gc)
	return c
}

// borrow lends the loop's buffers to c for a pass.
func (c *conn) borrow() { c.out, c.peek = c.scratch.Out[:0], c.scratch.Peek[:0] }

// giveBack hands what c's pass left unwritten to gnet and returns the
// buffers to the loop (netmem.Scratch.Keep).
func (c *conn) giveBack() {
	if len(c.out) > 0 {
		c.flushOut()
	}
	c.scratch.Keep(c.out, c.peek)
	c.out, c.peek = nil, nil
}

// onTraffic collects a finished batch, serves as much input as it can, and
// flushes the replies with one write. A paused connection (netmem) looks
// at its figures first: it may go on.
func (c *conn) onTraffic() gnet.Action {
	c.borrow()
	defer c.giveBack()
	if c.srv.stopping.Load() {
		return c.onShutdown()
	}
	c.collectDone()
	if c.mem.Paused() && c.account() == gnet.Close {
		return gnet.Close
	}
	c.stopped, c.handedOff, c.now = false, false, c.srv.opts.Now()
	if in := c.gc.InboundBuffered(); c.in.Grew(in) { // a wake after a batch brings no input
		c.in.Arrived(in, c.now)
	}
	action := c.serve()
	if action == gnet.None && c.runInline() {
		action = c.serve()
	}
	c.in.Passed(c.gc.InboundBuffered())
	if len(c.out) > 0 {
		c.flushOut()
	}
	if c.lat.Len() > 0 { // after the write; quiet commands answered with no bytes too
		c.lat.Written(c.srv.opts.Now())
	}
	if c.quitting && c.inflight == nil {
		return gnet.Close
	}
	if c.account() == gnet.Close {
		return gnet.Close
	}
	if c.stopped && !c.mem.Paused() && c.inflight == nil {
		_ = c.gc.Wake(nil) // decoding stopped for output that the write took: go on
	}
	return action
}

// serve decodes and handles frames until the input is exhausted or incomplete, or a batch goes off the loop.
func (c *conn) serve() gnet.Action {
	if c.proto != protoBinary {
		if c.proto == protoUnknown && !c.detect() {
			return gnet.None
		}
		if c.proto == protoText {
			return c.serveText()
		}
	}
	defer c.dispatch()
	for c.inflight == nil && !c.quitting {
		if !c.mayDecode() {
			return gnet.None
		}
		if c.swallow > 0 && !c.swallowBody() {
			return gnet.None
		}
		buf := c.peekFrame()
		if len(buf) == 0 {
			c.complete()
			return gnet.None
		}
		var req binary.Request
		n, err := binary.DecodeRequest(buf, uint32(c.srv.opts.MaxFrameSize), &req)
		if err != nil {
			if c.collect != nil {
				return gnet.None // answer what came before first
			}
			if errors.Is(err, binary.ErrFrameTooLarge) && command.IsStore(req.Opcode) &&
				binary.CheckHeaderShape(buf) == nil && c.refuseAtHeader(buf) {
				continue // a well-formed value over the frame cap is a value too large, as memcached has it
			}
			return c.protocolError(&req, len(buf), err)
		}
		if n == 0 {
			if c.collect == nil && c.refuseAtHeader(buf) {
				continue
			}
			if c.collect == nil && c.partialSince.Load() == 0 {
				c.partialSince.Store(c.srv.opts.Now().UnixNano())
			}
			return gnet.None
		}
		c.complete()
		if !c.handle(&req) {
			return gnet.None // not consumed: it runs after the collected batch
		}
		_, _ = c.gc.Discard(n)
	}
	return gnet.None
}

// detect decides the connection's protocol from its first byte: 0x80 or
// 0x08 binary, anything else text (unless DisableText, which a reload may
// change: a connection follows the setting in force at its first byte).
func (c *conn) detect() bool {
	if c.gc.InboundBuffered() == 0 {
		return false
	}
	b, _ := c.gc.Peek(1)
	if len(b) == 0 {
		return false
	}
	if b[0] == byte(binary.MagicRequest) || b[0] == byte(binary.MagicAltRequest) || c.srv.limits().DisableText {
		c.proto = protoBinary
		return true
	}
	c.proto = protoText
	c.txt = translate.NewSession(c.srv.opts.MaxItemSize)
	return true
}

// mayDecode is checked before each command of either protocol: a reload
// that revoked the user's access applies before the next command
// (revalidate); a paused connection, or one whose unsent replies reach
// max_conn_output (resident GETs answered on the loop fill them within one
// pass), decodes nothing more until they drain (netmem).
func (c *conn) mayDecode() bool {
	if gen := c.srv.usersGen.Load(); gen != c.usersGen { // a reload since the last look
		c.usersGen = gen
		c.revalidate()
	}
	if c.quitting {
		return false
	}
	if len(c.out) >= outFlush {
		c.flushOut()
	}
	if c.mem.Paused() || c.outputFull() {
		c.stopped = true
		return false
	}
	return true
}

// outFlush: a pass's replies go to gnet once they reach this, before the next command, so that
// a pass answering large values does not grow and regrow one buffer for all of them (gnet keeps
// what the socket does not take).
const outFlush = 256 << 10

// flushOut hands the replies collected so far to gnet, which keeps what
// the socket does not take. (giveBack decides whether the buffer stays.)
func (c *conn) flushOut() {
	if !c.closed { // gnet closed its fd, whose number a new connection may have by now
		_, _ = c.gc.Write(c.out)
	}
	c.mem.Wrote()
	c.out = c.out[:0]
}

// outputFull reports whether decoding stops for the replies of this pass
// and those gnet still holds: at max_conn_output, or at netmem.PauseFloor
// while the node is over max_buffer_bytes with them (the end of the pass
// then pauses the connection for memory). Without the second, each
// connection a pass resumed could add max_conn_output before the budget
// saw any of it.
func (c *conn) outputFull() bool {
	pending := len(c.out) + c.gc.OutboundBuffered()
	return pending >= c.srv.opts.MaxConnOutput || pending >= netmem.PauseFloor &&
		c.srv.flow.Over(&c.mem, int64(pending+c.gc.InboundBuffered()), c.srv.limits().MaxBufferBytes)
}

// account reports what the connection holds after a pass to the node's
// network memory budget, which decides its pauses (package netmem). It
// returns gnet.Close past the hard per-connection limit.
func (c *conn) account() gnet.Action {
	s := c.srv
	lim := netmem.Limits{Budget: s.limits().MaxBufferBytes, ConnOutput: s.opts.MaxConnOutput,
		ConnWaiting: netmem.WaitingInput, ConnBuffer: s.opts.MaxConnBuffer}
	if s.flow.Account(&c.mem, c.gc.InboundBuffered(), c.gc.OutboundBuffered(), c.frame, c.stall(), lim) {
		return gnet.Close
	}
	return gnet.None
}

// stall is what the input waits for besides its own next bytes (netmem).
func (c *conn) stall() netmem.Stall {
	switch {
	case c.queued && c.loginTurn:
		return netmem.Waiting // read on: a client that leaves is seen, its attempt takes no turn
	case c.queued || !c.parkedSince.IsZero() || c.inflight != nil || c.stopped || c.quitting:
		return netmem.Busy // for a ticket, the throttle, a batch, an output stop or QUIT
	}
	return netmem.NotStalled
}

// peekFrame returns the next frame when it is all buffered, or its header
// (or the bytes there are, under 24) when it is not, for DecodeRequest to
// judge. Peeking only one frame keeps gnet from copying the whole inbound
// buffer on every read while a large frame arrives.
func (c *conn) peekFrame() []byte {
	avail := c.gc.InboundBuffered()
	if avail < binary.HeaderLen {
		buf, _ := c.gc.Peek(avail)
		return buf
	}
	hdr, _ := c.gc.Peek(binary.HeaderLen)
	need := binary.FrameLen(hdr)
	if need > avail || need > binary.HeaderLen+c.srv.opts.MaxFrameSize {
		return hdr
	}
	buf, _ := c.gc.Peek(need)
	return buf
}

// refuseAtHeader judges a frame that has not all arrived, once, at its
// header: a storage command whose value cannot fit max_item_size gets 0x03,
// a command that takes no value but announces one, or more than its bound
// (binary.MaxSmallValue), or a frame past netmem.SmallFrame whose key or
// extras are wrong, 0x04, an unknown opcode 0x81, and a frame the
// network memory budget has no room for (netmem.Budget.Admit) 0x82; each
// has its body swallowed as it comes (as memcached): no buffer held. A
// frame it lets through is held whole by the budget until it has arrived.
func (c *conn) refuseAtHeader(hdr []byte) bool {
	if len(hdr) < binary.HeaderLen || c.frame > 0 {
		return false
	}
	req, valueLen := binary.PeekRequest(hdr)
	frame, budget := binary.FrameLen(hdr), c.srv.limits().MaxBufferBytes
	tooBig := valueLen > c.srv.opts.MaxItemSize
	var invalid error
	if tooBig || frame > netmem.SmallFrame || valueLen > 0 && binary.ValueBounded(req.Opcode) {
		invalid = binary.CheckHeaderShape(hdr) // before the size, as memcached checks them; a large frame's key too
	}
	switch {
	case !req.Opcode.Known(): // its body is never needed
		c.replyError(&req, binary.StatusUnknownCommand, "Unknown command")
	case invalid != nil:
		c.replyError(&req, binary.StatusInvalidArguments, invalid.Error())
	case tooBig && command.IsStore(req.Opcode):
		c.replyError(&req, binary.StatusTooBig, "value too large")
	case !c.srv.flow.Admit(&c.mem, frame, budget, c.frameShare()):
		c.replyError(&req, binary.StatusOutOfMemory, c.mem.Refusal())
	default:
		c.frame = frame
		return false
	}
	c.swallow = frame
	c.swallowBody()
	return true
}

// swallowBody discards what is left of a refused frame; it reports whether all of it is gone.
func (c *conn) swallowBody() bool {
	n := min(c.swallow, c.gc.InboundBuffered())
	_, _ = c.gc.Discard(n)
	if c.swallow -= n; c.swallow > 0 {
		if c.partialSince.Load() == 0 {
			c.partialSince.Store(c.srv.opts.Now().UnixNano())
		}
		return false
	}
	c.complete()
	return true
}

// complete notes that no frame is partly read.
func (c *conn) complete() {
	c.partialSince.Store(0)
	c.frame = 0
	c.srv.flow.FrameDone(&c.mem)
}

// frameShare is where its admitted frames count: its bucket's, nil without (netmem.Budget.Admit).
func (c *conn) frameShare() *netmem.Share {
	if c.bucket == nil {
		return nil
	}
	return &stateOf(c.bucket).frames
}

// handle takes one decoded frame. It returns false when the frame must wait
// for the batch being collected (it is then left in the input).
func (c *conn) handle(req *binary.Request) bool {
	status, reason := binary.CheckFrameInfos(req)
	if status == binary.StatusOK {
		if err := binary.CheckShape(req); err != nil {
			status, reason = binary.StatusInvalidArguments, err.Error()
		}
	}
	if status != binary.StatusOK {
		if c.collect != nil {
			return false
		}
		c.replyError(req, status, reason)
		return true
	}
	if c.user == nil && c.slot.Band() && !command.IsLogin(req.Opcode) { // past max_connections: memcached's answer
		c.out, c.quitting = append(c.out, tooManyConns...), true
		return true
	}
	if command.IsData(req.Opcode) {
		return c.runData(req)
	}
	if c.collect != nil {
		return false
	}
	c.handleControl(req)
	return true
}

// runData passes a data command through precheck and admission: a binary
// one, or one a text command was translated into (conn_text.go). It
// returns false when the command must wait (batchData).
func (c *conn) runData(req *binary.Request) bool {
	if status, reason := c.precheck(req); status != binary.StatusOK {
		if c.collect != nil {
			return false
		}
		c.replyError(req, status, reason)
		return true
	}
	return c.batchData(req)
}

// precheck answers what can be decided on the loop before a data command
// runs: bucket selection, access, sizes.
func (c *conn) precheck(req *binary.Request) (binary.Status, string) {
	if c.bucket == nil && c.wantBucket != "" { // found full: a place may have freed since
		if b, ok := c.srv.cat.Get(c.wantBucket); ok && c.canSelect(b.Name()) {
			c.autoSelect(b)
		}
	}
	if c.bucket == nil {
		if c.user == nil && c.srv.limits().AnonymousBucket == "" {
			return binary.StatusAccessDenied, "authenticate first: no anonymous access"
		}
		return binary.StatusNoBucket, c.noBucketReason()
	}
	if c.bucket.Deleted() {
		c.deselect()
		c.noBucket = "the selected bucket was deleted" // for the commands behind this one too
		return binary.StatusNoBucket, c.noBucket
	}
	if len(req.Value) > c.srv.opts.MaxItemSize {
		return binary.StatusTooBig, "value too large"
	}
	return binary.StatusOK, ""
}

// batchData passes a data command through admission, which adds it to the
// batch being collected (or queues it, or answers it). It returns false
// when the command stays in the input for later: the batch is full, or the
// connection's unsent replies reach max_conn_output. A batch holds at most
// max_conn_output / max_item_size reads (at least one), so that its replies,
// whose sizes are unknown until it runs, stay within about that cap too.
func (c *conn) batchData(req *binary.Request) bool {
	if c.outputFull() {
		c.stopped = true
		return false
	}
	b := c.collect
	if b != nil && (len(b.Reqs) >= maxBatchCommands || b.Bytes+len(req.Value) > maxBatchBytes ||
		(command.Estimated(req.Opcode) && b.Reads >= c.srv.maxBatchReads())) {
		return false
	}
	return c.srv.admit(c, req) != admitWait
}

// maxBatchReads is how many reads one batch may carry (see batchData).
func (s *Server) maxBatchReads() int {
	return max(1, s.opts.MaxConnOutput/s.opts.MaxItemSize)
}

// dispatch sends the collected batch to a worker.
func (c *conn) dispatch() {
	if b := c.collect; b != nil {
		c.collect = nil
		c.startJob(b)
	}
}

// startJob hands b to a worker; b is the connection's one batch in flight.
func (c *conn) startJob(b *work.Batch) {
	c.inflight, c.handedOff = b, true
	c.srv.work.Submit(b)
}

// Finish implements work.Owner: b is done. It hands b to the loop and wakes
// it, unless the loop is yielding for b (runInline). After close, the batch
// is released here instead.
func (c *conn) Finish(b *work.Batch) {
	if c.box.Put(b) {
		_ = c.gc.Wake(nil)
	}
}

// runInline yields the loop to the worker a batch went to this pass
// (work.Mailbox.Yield) and collects the batch if it finished meanwhile. It
// reports whether it did. onTraffic calls it once a pass.
func (c *conn) runInline() bool {
	if b := c.inflight; b == nil || !c.handedOff || !c.srv.work.Yieldable(b) {
		return false
	}
	c.collectBatch(c.box.Yield())
	return c.inflight == nil
}

// collectDone appends the finished batch's replies and applies its effects.
func (c *conn) collectDone() {
	if c.inflight == nil {
		return // only a batch handed out can come back: no lock on a plain pass
	}
	c.collectBatch(c.box.Take())
}

// collectBatch appends b's replies and applies its effects; b == nil is a batch
// not finished yet.
func (c *conn) collectBatch(b *work.Batch) {
	if b == nil {
		return
	}
	c.inflight, c.queued, c.loginTurn = nil, false, false
	if len(c.out) == 0 {
		c.out, b.Out = b.Out, c.out // the batch's replies as they are, not copied
	} else {
		c.out = append(c.out, b.Out...)
	}
	if b.Job == nil && b.Bucket != nil {
		lat := stateOf(b.Bucket).latency()
		for _, r := range b.Reqs {
			c.lat.Add(lat, command.ClassOf(r.Hdr.Op), r.Start, r.Throttled, r.Queued)
		}
	}
	if b.After != nil {
		b.After()
	}
	b.Release()
}

// close runs on the loop from OnClose.
func (c *conn) close() {
	c.closed = true
	c.srv.flow.Forget(&c.mem)
	if b := c.inflight; b != nil {
		c.srv.work.Abandon(b, c.srv.opts.Now())
	}
	c.deselect()
	c.box.Close()
}

// protocolError answers an undecodable frame with 0x04 when its header can
// be echoed, then closes the connection.
func (c *conn) protocolError(req *binary.Request, have int, err error) gnet.Action {
	reason := err.Error()
	if c.srv.limits().DisableText && errors.Is(err, binary.ErrBadMagic) { // a text client, likely
		reason += " (text_protocol is false: this node speaks the binary protocol only)"
	}
	if ok, more := c.srv.closedLog.Allow(c.now); ok {
		c.srv.log.Info("closing connection", "remote", c.remote, "reason", reason, "more_not_logged", more)
	}
	if have >= binary.HeaderLen {
		c.replyError(req, binary.StatusInvalidArguments, reason)
	}
	c.quitting = true
	return gnet.None
}

func (c *conn) selectBucket(b *catalog.Bucket) {
	c.deselect()
	c.bucket = b
	b.Throttle().Attach()
}

func (c *conn) deselect() {
	c.noBucket, c.wantBucket = "", ""
	if c.bucket != nil {
		c.bucket.Throttle().Detach()
		c.bucket = nil
		c.leavePark()
	}
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
		c.flushOut()
		c.settle.Reset()
	}
	if busy || c.inflight != nil || c.gc.OutboundBuffered() > 0 {
		// Woken again when the batch is done, or by drain's poll. The FIN waits for a pass
		// with nothing to answer, so that what the client sent before the shutdown and the
		// socket still holds is answered too.
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
	if b := c.inflight; b != nil && c.srv.ingress.Cancel(b, c.srv.opts.Now()) {
		b.Expired(shutdownReason) // answered, and handed back to be collected
	}
}

// refuseInput answers every whole frame in the input with 0x86 "shutting
// down", in order; it stops at a partial or undecodable frame.
func (c *conn) refuseInput() {
	c.leavePark()
	if (c.proto != protoUnknown || c.detect()) && c.txt != nil { // detect: one accepted while stopping
		c.refuseText()
		return
	}
	for {
		buf := c.peekFrame()
		var req binary.Request
		n, err := binary.DecodeRequest(buf, uint32(c.srv.opts.MaxFrameSize), &req)
		if len(buf) == 0 || err != nil || n == 0 {
			return
		}
		c.replyError(&req, binary.StatusTemporaryFailure, shutdownReason)
		_, _ = c.gc.Discard(n)
	}
}

// sendFIN half-closes the connection after its last reply, once its socket
// has received nothing for shutdownPoll (netmem.Settle: input sent before
// the signal may still be arriving; drain's poll wakes it meanwhile). A
// connection without a socket of its own (tests) is closed instead.
func (c *conn) sendFIN() gnet.Action {
	sock, ok := c.gc.(interface{ Fd() int })
	if !ok {
		return gnet.Close
	}
	if !c.settle.Done(sock.Fd(), time.Now(), shutdownPoll, shutdownRead) {
		return gnet.None
	}
	if err := syscall.Shutdown(sock.Fd(), syscall.SHUT_WR); err != nil {
		return gnet.Close
	}
	c.finSent.Store(true)
	_, _ = c.gc.Discard(c.gc.InboundBuffered())
	return gnet.None
}
