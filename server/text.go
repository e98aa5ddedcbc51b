package server

import (
	"bytes"

	"github.com/panjf2000/gnet/v2"

	"kvd/ingress"
	mc "kvd/protocol/binary"
	"kvd/protocol/text"
)

// memcached's text and meta protocols share the port with binary: the first
// byte of a connection decides (0x80 or 0x08: binary, anything else: text).
// A text command is decoded by package protocol/text and translated into
// the binary request the data path already runs (one GET per key of a
// multi-get, the meta commands by their flags), so authorization,
// throttling, admission, batching, execution and reply order are binary's.
// Only the reply encoder differs: a request carries a textReq, and
// appendText (textreply.go) answers it with the codec.

// Connection protocols.
const (
	protoUnknown uint8 = iota
	protoBinary
	protoText
)

// textPeek is how much of the input is peeked first to find a command
// line; a longer line (a large multi-get) is peeked whole, and a storage
// command's data block once it has all arrived.
const textPeek = 4096

// textConn is a text connection's decoding state, owned by its loop.
type textConn struct {
	cmd     text.Command
	opts    text.DecodeOptions
	req     mc.Request // the translated command
	extras  [20]byte
	cur     textReq // what the translated command's reply needs
	done    int     // keys of the current multi-get already admitted
	abort   bool    // a key of the current multi-get was refused: drop the rest
	swallow int     // bytes still to discard (a refused data block)
	held    heldError
	aux     []byte // opaque of a meta command answered on the loop
}

// heldError is a refused storage command's error, answered once its data
// block has been swallowed, as memcached does.
type heldError struct {
	set    bool
	reply  []byte
	close  bool
	unlink bool
	kind   text.Kind
	key    []byte
}

// textReq is what a request's text reply needs beyond its results.
type textReq struct {
	kind    text.Kind
	noreply bool
	last    bool // last key of a multi-get: END follows its reply
	hasCAS  bool // the command compared a CAS (classic cas, meta C)
	tooBig  bool // an unlink of a too-large set: answer the refusal instead
	silent  bool // tooBig under noreply
	meta    text.Meta
}

// detect decides the connection's protocol from its first byte.
func (c *conn) detect() bool {
	if c.gc.InboundBuffered() == 0 {
		return false
	}
	b, _ := c.gc.Peek(1)
	if len(b) == 0 {
		return false
	}
	if b[0] == byte(mc.MagicRequest) || b[0] == byte(mc.MagicAltRequest) || c.srv.opts.DisableText {
		c.proto = protoBinary
		return true
	}
	c.proto = protoText
	c.txt = &textConn{opts: text.DecodeOptions{MaxValue: c.srv.opts.MaxItemSize}}
	c.txt.opts.EnsureDefaults()
	return true
}

// serveText is serve for a text connection: decode commands until the
// input is exhausted or incomplete, or a batch goes off the loop.
func (c *conn) serveText() gnet.Action {
	defer c.dispatch()
	t := c.txt
	for c.inflight == nil && !c.quitting {
		if !c.mayDecode() {
			return gnet.None
		}
		if t.swallow > 0 && !c.swallowText() {
			return gnet.None
		}
		if t.held.set {
			if c.collect != nil || !c.textHeld() {
				return gnet.None
			}
			continue
		}
		buf := c.peekText()
		if len(buf) == 0 {
			c.partialSince.Store(0)
			return gnet.None
		}
		n, err := c.decodeText(buf)
		if e, ok := err.(*text.Error); ok { // Decode's errors are always *text.Error
			if e.Swallow > 0 {
				_, _ = c.gc.Discard(n)
				t.hold(e)
				continue
			}
			if c.collect != nil || !c.textError(e.Reply, e.Close, e.Unlink, t.cmd.Kind, t.cmd.Key) {
				return gnet.None // answer what came before first
			}
			_, _ = c.gc.Discard(n)
			continue
		}
		if n == 0 {
			if c.collect == nil && c.partialSince.Load() == 0 {
				c.partialSince.Store(c.srv.opts.Now().UnixNano())
			}
			return gnet.None
		}
		c.partialSince.Store(0)
		if !c.handleText(&t.cmd) {
			return gnet.None // not consumed: it runs after the collected batch
		}
		_, _ = c.gc.Discard(n)
	}
	return gnet.None
}

// swallowText discards what is left of a refused data block; it reports
// whether all of it is gone.
func (c *conn) swallowText() bool {
	t := c.txt
	n := min(t.swallow, c.gc.InboundBuffered())
	_, _ = c.gc.Discard(n)
	t.swallow -= n
	if t.swallow > 0 {
		if c.partialSince.Load() == 0 {
			c.partialSince.Store(c.srv.opts.Now().UnixNano())
		}
		return false
	}
	return true
}

// peekText returns the next command when it is all buffered, or what there
// is of its line for Decode to judge. Like peekFrame it peeks no more than
// one command, so that gnet does not copy its whole inbound buffer on every
// read while a large value arrives.
func (c *conn) peekText() []byte {
	avail := c.gc.InboundBuffered()
	if avail == 0 {
		return nil
	}
	buf, _ := c.gc.Peek(min(avail, textPeek))
	nl := bytes.IndexByte(buf, '\n')
	if nl < 0 {
		if avail > len(buf) {
			buf, _ = c.gc.Peek(min(avail, c.txt.opts.MaxGetLine+1))
		}
		return buf
	}
	return buf
}

// decodeText decodes the command at the front of buf, the first peek. A
// storage command whose data block goes past it is decoded again from a
// peek of exactly the line and the block, once they have all arrived.
func (c *conn) decodeText(buf []byte) (int, error) {
	t := c.txt
	n, err := text.Decode(buf, t.opts, &t.cmd)
	if n != 0 || err != nil || !t.cmd.Kind.Storage() {
		return n, err
	}
	need := bytes.IndexByte(buf, '\n') + 1 + t.cmd.DataLen() + 2
	if need <= len(buf) || need > c.gc.InboundBuffered() {
		return 0, nil
	}
	buf, _ = c.gc.Peek(need)
	return text.Decode(buf, t.opts, &t.cmd)
}

// hold keeps a refused storage command's error until its data block has
// been swallowed.
func (t *textConn) hold(e *text.Error) {
	h := &t.held
	h.set, h.close, h.unlink, h.kind = true, e.Close, e.Unlink, t.cmd.Kind
	h.reply = append(h.reply[:0], e.Reply...)
	h.key = append(h.key[:0], t.cmd.Key...)
	t.swallow = e.Swallow
}

// textHeld answers the held error; false: it must wait.
func (c *conn) textHeld() bool {
	h := &c.txt.held
	if !c.textError(h.reply, h.close, h.unlink, h.kind, h.key) {
		return false
	}
	h.set = false
	return true
}

// textError answers a protocol error. A too-large set also unlinks its key,
// as memcached does: that runs as a DELETE whose reply is the refusal. It
// reports false when that DELETE must wait (nothing consumed).
func (c *conn) textError(reply []byte, close, unlink bool, kind text.Kind, key []byte) bool {
	if unlink {
		t := c.txt
		t.cur = textReq{kind: kind, tooBig: true, silent: len(reply) == 0}
		if !c.runText(c.textRequest(mc.OpDelete, key)) {
			return false
		}
	} else {
		c.out = append(c.out, reply...)
	}
	if close {
		c.quitting = true
	}
	return true
}

// handleText runs one decoded command. It returns false when the command
// must wait (it is then left in the input and decoded again).
func (c *conn) handleText(cmd *text.Command) bool {
	if c.user == nil && c.bucket == nil && c.srv.limits().AnonymousBucket == "" {
		if c.collect != nil {
			return false
		}
		c.textAuth(cmd)
		return true
	}
	switch cmd.Kind {
	case text.KindGet, text.KindGets, text.KindGat, text.KindGats:
		return c.textRetrieval(cmd)
	case text.KindVersion, text.KindVerbosity, text.KindQuit, text.KindStats, text.KindFlushAll, text.KindMetaNoop:
		if c.collect != nil {
			return false
		}
		c.textControl(cmd)
		return true
	}
	op, ok := c.textOp(cmd)
	if !ok {
		if c.collect != nil {
			return false
		}
		c.out = text.AppendError(c.out)
		return true
	}
	return c.runText(c.textRequest(op, cmd.Key))
}

// textRetrieval admits a multi-get one key at a time, each a GET (or GAT);
// the last key's reply carries the END. Keys already admitted are skipped
// when the line is decoded again after a wait.
func (c *conn) textRetrieval(cmd *text.Command) bool {
	t := c.txt
	op := mc.OpGet
	if cmd.Kind == text.KindGat || cmd.Kind == text.KindGats {
		op = mc.OpGAT
	}
	if len(cmd.Keys) == 0 { // "gat 0": memcached answers END
		if c.collect != nil {
			return false
		}
		c.out = text.AppendEnd(c.out)
		return true
	}
	for t.done < len(cmd.Keys) && !t.abort {
		i := t.done
		t.cur = textReq{kind: cmd.Kind, last: i == len(cmd.Keys)-1}
		if !c.runText(c.textRequest(op, cmd.Keys[i])) {
			return false
		}
		t.done++
	}
	t.done, t.abort = 0, false
	return true
}

// runText passes a translated data command through precheck and admission,
// as handle does for binary ones.
func (c *conn) runText(req *mc.Request) bool {
	if st, reason := c.precheck(req); st != mc.StatusOK {
		if c.collect != nil {
			return false
		}
		c.replyError(req, st, reason)
		return true
	}
	return c.batchData(req)
}

// textRequest fills the connection's translated request for op on key from
// the decoded command (extras, value, CAS).
func (c *conn) textRequest(op mc.Opcode, key []byte) *mc.Request {
	t := c.txt
	cmd := &t.cmd
	t.req = mc.Request{Magic: mc.MagicRequest, Opcode: op, Key: key}
	if t.cur.tooBig {
		return &t.req
	}
	switch op {
	case mc.OpSet, mc.OpAdd, mc.OpReplace:
		ex := mc.AppendUint32(t.extras[:0], flagsOf(cmd))
		t.req.Extras = mc.AppendUint32(ex, textExpiry(exptimeOf(cmd)))
	case mc.OpIncrement, mc.OpDecrement:
		t.req.Extras = c.arithExtras(cmd)
	case mc.OpTouch, mc.OpGAT:
		t.req.Extras = mc.AppendUint32(t.extras[:0], textExpiry(exptimeOf(cmd)))
	}
	if cmd.Kind.Storage() {
		t.req.Value = cmd.Value
	}
	t.req.CAS = c.textCAS(cmd, op)
	return &t.req
}

func (c *conn) arithExtras(cmd *text.Command) []byte {
	delta, initial, exp := cmd.Delta, uint64(0), uint32(noCreate)
	if cmd.Kind == text.KindMetaArithmetic {
		delta, initial = cmd.Meta.Delta, cmd.Meta.Initial
		if cmd.Meta.HasViv {
			exp = textExpiry(cmd.Meta.Vivify)
		}
	}
	ex := mc.AppendUint64(c.txt.extras[:0], delta)
	ex = mc.AppendUint64(ex, initial)
	return mc.AppendUint32(ex, exp)
}

// neverCAS is a CAS no item ever has: memcached compares an explicit CAS of
// 0 like any other, where the engine reads 0 as "no compare".
const neverCAS = 1<<64 - 1

// textCAS is the CAS the engine compares for cmd: classic cas and meta C,
// except under ms's add mode, which ignores C as memcached does.
func (c *conn) textCAS(cmd *text.Command, op mc.Opcode) uint64 {
	cas, has := cmd.CAS, cmd.Kind == text.KindCas
	if cmd.Kind.Meta() {
		cas, has = cmd.Meta.CAS, cmd.Meta.HasCAS && op != mc.OpAdd && op != mc.OpGet && op != mc.OpGAT
	}
	c.txt.cur.hasCAS = has
	switch {
	case !has:
		return 0
	case cas == 0:
		return neverCAS
	}
	return cas
}

// textOp is the binary opcode a non-retrieval text data command runs as.
func (c *conn) textOp(cmd *text.Command) (mc.Opcode, bool) {
	t := c.txt
	t.cur = textReq{kind: cmd.Kind, noreply: cmd.NoReply, meta: cmd.Meta}
	switch cmd.Kind {
	case text.KindSet, text.KindCas:
		return mc.OpSet, true
	case text.KindAdd:
		return mc.OpAdd, true
	case text.KindReplace:
		return mc.OpReplace, true
	case text.KindAppend:
		return mc.OpAppend, true
	case text.KindPrepend:
		return mc.OpPrepend, true
	case text.KindDelete, text.KindMetaDelete:
		return mc.OpDelete, true
	case text.KindIncr:
		return mc.OpIncrement, true
	case text.KindDecr:
		return mc.OpDecrement, true
	case text.KindTouch:
		return mc.OpTouch, true
	case text.KindMetaGet:
		if cmd.Meta.HasTTL {
			return mc.OpGAT, true
		}
		return mc.OpGet, true
	case text.KindMetaDebug:
		return mc.OpGet, true
	case text.KindMetaSet:
		return metaSetOp(cmd.Meta.Mode), true
	case text.KindMetaArithmetic:
		if cmd.Meta.Mode == text.ModeDecrement {
			return mc.OpDecrement, true
		}
		return mc.OpIncrement, true
	}
	return 0, false
}

func metaSetOp(mode byte) mc.Opcode {
	switch mode {
	case text.ModeAdd:
		return mc.OpAdd
	case text.ModeReplace:
		return mc.OpReplace
	case text.ModeAppend:
		return mc.OpAppend
	case text.ModePrepend:
		return mc.OpPrepend
	}
	return mc.OpSet
}

func flagsOf(cmd *text.Command) uint32 {
	if cmd.Kind == text.KindMetaSet {
		return cmd.Meta.Flags
	}
	return cmd.Flags
}

func exptimeOf(cmd *text.Command) int64 {
	if cmd.Kind.Meta() {
		return cmd.Meta.TTL
	}
	return cmd.Exptime
}

// textExpiry is a text exptime as the binary protocol states it: a
// negative one means "already expired", which memcached implements as an
// absolute time in the past.
func textExpiry(exptime int64) uint32 {
	if exptime < 0 {
		return relativeExpiryLimit + 1
	}
	return uint32(exptime)
}

// setReply records in r what its text reply needs, copying the meta
// command's opaque and raw key out of gnet's buffer into aux.
func (t *textConn) setReply(r *request, aux *[]byte) {
	r.txt = t.cur
	m := &r.txt.meta
	if r.txt.kind != text.KindMetaDebug {
		m.RawKey = nil // only me prints the key as sent
	}
	if len(m.Opaque) == 0 && len(m.RawKey) == 0 {
		return
	}
	*aux = append(append((*aux)[:0], m.Opaque...), m.RawKey...)
	no := len(m.Opaque)
	m.Opaque, m.RawKey = (*aux)[:no:no], (*aux)[no:]
}

// refuse answers the command being admitted with SERVER_ERROR and the
// reason binary gives; the rest of a multi-get is dropped.
func (t *textConn) refuse(dst []byte, reason string) []byte {
	if t.cur.kind.Retrieval() {
		t.abort = true
	}
	return text.AppendServerError(dst, reason)
}

// textControl answers the commands that run on the loop, and flush_all,
// which runs on a worker as FLUSH does.
func (c *conn) textControl(cmd *text.Command) {
	now := c.srv.opts.Now()
	c.srv.ingress.Release(c.srv.ingress.StartExempt(ingress.Read, nil, now), now)
	switch cmd.Kind {
	case text.KindVersion:
		c.out = text.AppendVersion(c.out, Version)
	case text.KindVerbosity:
		c.out = text.AppendReply(c.out, cmd, nil, &text.Outcome{Status: text.StatusOK})
	case text.KindQuit:
		c.quitting = true
	case text.KindMetaNoop:
		c.out = text.AppendNoop(c.out)
	case text.KindStats:
		c.textStats(cmd.Keys)
	case text.KindFlushAll:
		c.textFlush(flushDelay(cmd), cmd.NoReply)
	}
}

// flushDelay is flush_all's delay argument as binary FLUSH's extras carry it;
// a negative one (memcached takes it as "now") is 0.
func flushDelay(cmd *text.Command) uint32 {
	if !cmd.HasArg || cmd.Exptime <= 0 {
		return 0
	}
	return uint32(cmd.Exptime)
}
