package tests

// How the fuzzer's binary connections send pipelines and read their
// replies, and how they end: gracefully, with a protocol error the server
// must answer and close on, or by disconnecting mid-frame or mid-pipeline.

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	mc "kvd/protocol/binary"
)

// fuzzReplyTimeout bounds the wait for one reply: a parked command is
// answered within fuzzConfig's max_throttle_wait_ms, a queued one within its
// queue timeout, a wrong password within the login delay's cap (5 s).
const fuzzReplyTimeout = 30 * time.Second

// fuzzConn is the state of a worker's current connection as the generator
// predicts it.
type fuzzConn struct {
	nc       net.Conn
	r        *bufio.Reader
	text     bool
	user     string // "" until a SASL login
	bucket   string // "" when none is selected
	xerror   bool
	alt      bool
	nonBlock bool
	units    bool
	ending   bool // a command whose aftermath the model does not predict was sent
	closing  bool // a bad magic follows: the server may close without a reply
	bound    bool // bytes were sent: the connection's protocol is decided
	opaque   uint32
	peeked   *mc.Response
}

// binarySession runs one binary connection: pipelines until it ends in
// one of the ways a connection can end.
func (w *fuzzWorker) binarySession() error {
	if err := w.dial(false); err != nil {
		return err
	}
	defer w.c.nc.Close()
	for steps := 1 + w.rng.IntN(30); steps > 0 && !w.f.stopped(); steps-- {
		if w.c.ending {
			return nil
		}
		switch d := w.rng.IntN(100); {
		case d < 88:
			if err := w.pipeline(w.genPipeline(), -1); err != nil {
				return err
			}
		case d < 92:
			return w.protocolError()
		case d < 95:
			return w.disconnectMidFrame()
		case d < 98:
			items := w.genPipeline()
			return w.pipeline(items, w.rng.IntN(len(items)))
		default:
			return w.quit()
		}
	}
	return nil
}

// genPipeline returns 1..24 random commands and a NOOP fence.
func (w *fuzzWorker) genPipeline() []binItem {
	touched := map[string]bool{}
	var items []binItem
	n := 1 + w.rng.IntN(24)
	if w.rng.IntN(10) == 0 {
		n = 1 + w.rng.IntN(200)
	}
	for len(items) < n && !w.c.ending {
		items = append(items, w.genItem(touched))
	}
	return append(items, w.want(&mc.Request{Opcode: mc.OpNoop}, mc.StatusOK, nil))
}

// pipeline writes items (in random pieces) and checks their replies in
// order. With abandon ≥ 0 it reads only the replies of the first abandon
// items, then closes the connection: the rest are unanswered, and the keys
// they touch become unknown to the model.
func (w *fuzzWorker) pipeline(items []binItem, abandon int) error {
	var buf []byte
	for _, it := range items {
		buf = mc.AppendRequest(buf, it.req)
	}
	w.f.frames.Add(int64(len(items)))
	w.f.pipelines.Add(1)
	if err := w.writeSplit(buf); err != nil {
		return err
	}
	for i, it := range items {
		if i == abandon {
			w.abandon(items[i:])
			return nil
		}
		if err := w.settle(&it); err != nil {
			return fmt.Errorf("item %d of %d (%v opaque %d): %w", i, len(items), it.req.Opcode, it.req.Opaque, err)
		}
	}
	return nil
}

// settle reads the reply of one item (or decides that a quiet item got
// none: the next reply belongs to a later item) and checks it.
func (w *fuzzWorker) settle(it *binItem) error {
	res, err := w.peekReply()
	if err != nil && it.quiet && w.c.closing && isConnGone(err) {
		return it.check(nil) // a bad magic: the server may close at once
	}
	if err != nil {
		return fmt.Errorf("no reply: %w", err)
	}
	if res.Opaque != it.req.Opaque {
		if !it.quiet || res.Opaque < it.req.Opaque {
			return fmt.Errorf("got %s instead", describeMaybe(res))
		}
		return it.check(nil)
	}
	w.c.peeked = nil
	w.f.replies.Add(1)
	if err := checkFrame(it, res); err != nil {
		return err
	}
	if it.multi && res.Status == mc.StatusOK {
		for len(res.Key) > 0 || len(res.Value) > 0 {
			if res, err = w.peekReply(); err != nil {
				return fmt.Errorf("STAT stream: %w", err)
			}
			w.c.peeked = nil
			if res.Opaque != it.req.Opaque || res.Status != mc.StatusOK {
				return fmt.Errorf("STAT stream interrupted by %s", describeMaybe(res))
			}
		}
	}
	return it.check(res)
}

// checkFrame checks what every reply must be: the request's opcode, the
// matching magic, and a reason on errors.
func checkFrame(it *binItem, res *mc.Response) error {
	wantMagic := uint8(mc.MagicResponse)
	// ReportUnitUsage puts unit frame infos in 0x18 replies to any request.
	if it.req.Magic == mc.MagicAltRequest || (it.units && len(res.FrameInfo) > 0) {
		wantMagic = mc.MagicAltResponse
	}
	if res.Opcode != it.req.Opcode || res.Magic != wantMagic {
		return fmt.Errorf("reply %v magic %#x, want %v magic %#x", res.Opcode, res.Magic, it.req.Opcode, wantMagic)
	}
	return checkErrorBody(res, it.xerror)
}

// abandon closes the connection with items unanswered.
func (w *fuzzWorker) abandon(items []binItem) {
	w.f.disconnects.Add(1)
	w.forgetItems(items)
	_ = w.c.nc.Close()
}

func (w *fuzzWorker) forgetItems(items []binItem) {
	for _, it := range items {
		if it.op != nil {
			w.retire(it.op.bucket, it.op.key)
		}
		name := string(it.req.Key)
		own := strings.HasPrefix(name, fmt.Sprintf("fz-%d-", w.id))
		if own && (it.req.Opcode == mc.OpCreateBucket || it.req.Opcode == mc.OpDeleteBucket) {
			w.fzMaybe = append(w.fzMaybe, name)
			w.dropOwn(name)
		}
	}
}

// peekReply returns the next reply without consuming it.
func (w *fuzzWorker) peekReply() (*mc.Response, error) {
	if w.c.peeked != nil {
		return w.c.peeked, nil
	}
	res, err := readResponse(w.c.nc, w.c.r, fuzzReplyTimeout)
	if err != nil {
		return nil, err
	}
	w.c.peeked = res
	return res, nil
}

// readResponse reads one response frame.
func readResponse(nc net.Conn, r *bufio.Reader, timeout time.Duration) (*mc.Response, error) {
	_ = nc.SetReadDeadline(time.Now().Add(timeout))
	hdr := make([]byte, mc.HeaderLen)
	if _, err := io.ReadFull(r, hdr); err != nil {
		return nil, err
	}
	frame := make([]byte, mc.FrameLen(hdr))
	copy(frame, hdr)
	if _, err := io.ReadFull(r, frame[mc.HeaderLen:]); err != nil {
		return nil, err
	}
	res := new(mc.Response)
	if _, err := mc.DecodeResponse(frame, 1<<30, res); err != nil {
		return nil, fmt.Errorf("undecodable reply % x: %w", frame[:min(len(frame), 64)], err)
	}
	return res, nil
}

// writeSplit writes buf, a third of the time in up to five pieces cut at
// random points with short pauses, so that frames arrive split anywhere.
func (w *fuzzWorker) writeSplit(buf []byte) error {
	w.noteSent(buf)
	pieces := 1
	if w.rng.IntN(3) == 0 {
		pieces = 2 + w.rng.IntN(4)
	}
	for p := pieces; p > 0 && len(buf) > 0; p-- {
		n := len(buf)
		if p > 1 {
			n = w.rng.IntN(len(buf) + 1)
		}
		_ = w.c.nc.SetWriteDeadline(time.Now().Add(fuzzReplyTimeout))
		if _, err := w.c.nc.Write(buf[:n]); err != nil {
			return fmt.Errorf("write: %w", err)
		}
		buf = buf[n:]
		w.c.bound = w.c.bound || n > 0
		if p > 1 {
			time.Sleep(time.Duration(w.rng.IntN(2000)) * time.Microsecond)
		}
	}
	return nil
}

// protocolError sends a few valid commands and then a frame the server
// cannot go on after: a bad magic, a body over the frame cap, or lengths
// that do not add up. The valid commands are answered first; then the
// server answers 0x04 echoing the bad frame (a bad magic: at most that),
// and closes.
func (w *fuzzWorker) protocolError() error {
	w.f.invalid.Add(1)
	items := w.genPipeline()
	cut := w.rng.IntN(len(items))
	w.forgetItems(items[cut:]) // generated, never sent
	items = items[:cut]
	if len(items) == 0 && !w.c.bound {
		// The first byte decides the protocol: a connection that starts
		// with a bad magic is a text connection. Bind it to binary first.
		items = []binItem{w.want(&mc.Request{Opcode: mc.OpNoop}, mc.StatusOK, nil)}
	}
	w.c.opaque++
	opaque, op := w.c.opaque, mc.Opcode(w.rng.IntN(0x30))
	var bad []byte
	echo := true
	switch w.rng.IntN(5) {
	case 0:
		echo = false
		magic := pick(w.rng.IntN(5), 0x00, 0x42, mc.MagicResponse, mc.MagicAltResponse, 0xff)
		bad = append(rawHeader(byte(magic), op, 0, 0, 0, opaque), w.garbage(w.rng.IntN(64))...)
	case 1:
		if op.NonQuiet() == mc.OpSet || op.NonQuiet() == mc.OpAdd || op.NonQuiet() == mc.OpReplace {
			op = mc.OpGet // a storage command's value over the cap is a value too large (TestValueOverTheFrameCap)
		}
		bad = rawHeader(mc.MagicRequest, op, 3, 8, defaultFrameCap+1+uint32(w.rng.IntN(1<<30)), opaque)
	case 2:
		body := uint32(w.rng.IntN(10))
		bad = append(rawHeader(mc.MagicRequest, op, uint16(body)+1+uint16(w.rng.IntN(1000)), 0, body, opaque), w.garbage(int(body))...)
	case 3:
		body := uint32(4 + w.rng.IntN(10))
		bad = append(rawHeader(mc.MagicRequest, op, uint16(body-3), 4, body, opaque), w.garbage(int(body))...)
	default:
		bad = append(altHeader(op, 3, 2, 0, 4, opaque), w.garbage(4)...)
	}
	var buf []byte
	for _, it := range items {
		buf = mc.AppendRequest(buf, it.req)
	}
	w.f.frames.Add(int64(len(items) + 1))
	if err := w.writeSplit(append(buf, bad...)); err != nil {
		w.abandon(items) // the server may close before everything is written
		return nil
	}
	w.c.closing = !echo
	for i := range items {
		if err := w.settle(&items[i]); err != nil {
			return fmt.Errorf("before a bad frame: item %d (%v): %w", i, items[i].req.Opcode, err)
		}
	}
	return w.wantProtocolClose(op, opaque, echo)
}

// wantProtocolClose reads what follows a bad frame: one 0x04 reply echoing
// it (optional after a bad magic, which cannot be echoed), then the close.
func (w *fuzzWorker) wantProtocolClose(op mc.Opcode, opaque uint32, echo bool) error {
	res, err := w.peekReply()
	w.c.peeked = nil
	switch {
	case err != nil && !echo && isConnGone(err):
		w.f.serverCloses.Add(1)
		return nil
	case err != nil:
		return fmt.Errorf("after a bad frame: no 0x04 reply: %v", err)
	case res.Status != mc.StatusInvalidArguments || (echo && (res.Opaque != opaque || res.Opcode != op)):
		return fmt.Errorf("after a bad frame: got %s, want 0x04 echoing %v opaque %d", describeMaybe(res), op, opaque)
	case len(res.Value) == 0:
		return fmt.Errorf("0x04 after a bad frame has no reason")
	}
	_, err = readResponse(w.c.nc, w.c.r, 10*time.Second)
	if !isConnGone(err) {
		return fmt.Errorf("after a bad frame and its 0x04 the connection was not closed: %v", err)
	}
	w.f.serverCloses.Add(1)
	return nil
}

// disconnectMidFrame sends a few commands and a prefix of one more (a
// large SET's header now and then), then closes without reading.
func (w *fuzzWorker) disconnectMidFrame() error {
	items := w.genPipeline()
	var buf []byte
	for _, it := range items {
		buf = mc.AppendRequest(buf, it.req)
	}
	cut := w.rng.IntN(len(buf))
	if w.rng.IntN(4) == 0 {
		body := uint32(1<<20 + w.rng.IntN(4<<20))
		buf = append(mc.AppendRequest(nil, items[0].req), rawHeader(mc.MagicRequest, mc.OpSet, 3, 8, body, 1)...)
		buf = append(buf, w.garbage(1+w.rng.IntN(64<<10))...)
		cut = len(buf)
	}
	_ = w.writeSplit(buf[:cut])
	w.f.frames.Add(int64(len(items)))
	w.abandon(items)
	return nil
}

// quit ends with QUIT (answered, then closed) or QUITQ (closed silently).
func (w *fuzzWorker) quit() error {
	req := w.next(&mc.Request{Opcode: pick(w.rng.IntN(2), mc.OpQuit, mc.OpQuitQ)})
	w.f.frames.Add(1)
	if err := w.writeSplit(mc.AppendRequest(nil, req)); err != nil {
		return err
	}
	res, err := readResponse(w.c.nc, w.c.r, fuzzReplyTimeout)
	if req.Opcode == mc.OpQuit {
		if err != nil || res.Status != mc.StatusOK || res.Opaque != req.Opaque {
			return fmt.Errorf("QUIT: got %s, err %v", describeMaybe(res), err)
		}
		res, err = readResponse(w.c.nc, w.c.r, 10*time.Second)
	}
	if !isConnGone(err) {
		return fmt.Errorf("%v: connection not closed (%s, %v)", req.Opcode, describeMaybe(res), err)
	}
	w.f.serverCloses.Add(1)
	return nil
}

// isFuzzTimeout reports a read deadline passing.
func isFuzzTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
