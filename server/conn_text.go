package server

import (
	"bytes"

	"github.com/panjf2000/gnet/v2"

	"kvd/netmem"
	"kvd/protocol/binary"
	"kvd/protocol/text"
	"kvd/protocol/translate"
)

// The loop's side of memcached's text and meta protocols: this file reads
// the input and carries out a translate.Session's steps; the binary requests
// they run take binary's path (runData), so authorization, throttling,
// admission, batching, execution and reply order are binary's.

// textPeek is how much of the input is peeked first to find a command
// line; a longer line (a large multi-get) is peeked whole, and a storage
// command's data block once it has all arrived.
const textPeek = 4096

// serveText is serve for a text connection: decode commands until the
// input is exhausted or incomplete, or a batch goes off the loop.
func (c *conn) serveText() gnet.Action {
	defer c.dispatch()
	t := c.txt
	for c.inflight == nil && !c.quitting {
		if !c.mayDecode() || c.swallow > 0 && !c.swallowBody() {
			return gnet.None
		}
		n := 0 // a held refusal's bytes were swallowed
		if !t.Held() {
			if n = c.decodeText(); n < 0 {
				return gnet.None
			}
			if c.swallow > 0 {
				continue // a refused command's bytes go before its answer
			}
		}
		if !c.handleText() {
			return gnet.None // not consumed: it runs after the collected batch
		}
		if n > 0 { // gnet's Discard(0) would drop all the input
			_, _ = c.gc.Discard(n)
		}
	}
	return gnet.None
}

// decodeText decodes the command at the front of the input and returns its
// length, or -1 when it is incomplete. A storage command whose data block
// goes past the first peek is decoded again from a peek of exactly the line
// and the block, once they have all arrived. A command the codec refuses is
// held (0): its bytes and its data block are swallowed before the refusal
// is answered, as memcached does.
func (c *conn) decodeText() int {
	t := c.txt
	buf := c.peekText()
	n, ok := t.Decode(buf)
	if need := t.Need(); need > len(buf) && need <= c.gc.InboundBuffered() {
		buf, _ = c.gc.Peek(need)
		n, ok = t.Decode(buf)
	}
	if !ok && c.collect == nil && !c.admitText(len(buf)) {
		n, ok = t.HoldNoMemory(), true
	}
	switch {
	case ok && t.Held():
		if !c.loggedOut() { // before the login the answer closes at once (handleText)
			c.swallow = n + t.Swallow() // swallowBody drops it all, then Next answers
		}
		return 0
	case ok:
		c.complete()
		return n
	case len(buf) == 0:
		c.complete()
	case c.collect == nil && c.partialSince.Load() == 0:
		c.partialSince.Store(c.srv.opts.Now().UnixNano())
	}
	return -1
}

// admitText is refuseAtHeader's budget check for an incomplete text
// command of partial bytes so far; before the login nothing past 4 KiB is
// held. A storage command whose data block is coming is judged at its full
// length: false refuses it. A multi-get line past netmem.SmallFrame is
// judged at the longest it may grow to. With no room (or no login) it is
// answered and the connection closed, as memcached closes one whose buffer
// it cannot grow (true: nothing more to hold).
func (c *conn) admitText(partial int) bool {
	frame, budget := c.txt.Need(), c.srv.limits().MaxBufferBytes
	if c.loggedOut() && max(frame, partial) > binary.MaxSmallValue { // a login is a set of "<user> <password>"
		c.refuseLogin(true)
		return true
	}
	if frame == 0 && partial > netmem.SmallFrame {
		frame = c.txt.Options().MaxGetLine
	}
	if c.frame > 0 || frame == 0 || c.srv.flow.Admit(&c.mem, frame, budget, c.frameShare()) {
		c.frame = max(c.frame, frame)
		return true
	}
	if c.txt.Need() == 0 {
		c.out, c.quitting = append(c.out, "SERVER_ERROR out of memory reading request\r\n"...), true
		return true
	}
	return false
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
	if avail > len(buf) && bytes.IndexByte(buf, '\n') < 0 {
		buf, _ = c.gc.Peek(min(avail, c.txt.Options().MaxGetLine+1))
	}
	return buf
}

// refuseLogin answers a text command before the login that is not one:
// memcached -Y's CLIENT_ERROR, closing with quit, or in the system band
// memcached's answer past max_connections, which closes.
func (c *conn) refuseLogin(quit bool) {
	if c.slot.Band() {
		c.out, c.quitting = append(c.out, tooManyConns...), true
		return
	}
	c.out, c.quitting = text.AppendClientError(c.out, "unauthenticated"), c.quitting || quit
}

// loggedOut reports whether the text connection must log in first
// (memcached's -Y): no user, and no anonymous bucket or in the system band.
func (c *conn) loggedOut() bool {
	return c.user == nil && (c.slot.Band() || c.bucket == nil && c.srv.limits().AnonymousBucket == "")
}

// refuseText is refuseInput for text: every whole command in the input is
// answered SERVER_ERROR "shutting down" (nothing under noreply), in order.
func (c *conn) refuseText() {
	for t := c.txt; !t.Held(); {
		buf := c.peekText()
		n, ok := t.Decode(buf)
		if need := t.Need(); need > len(buf) && need <= c.gc.InboundBuffered() {
			buf, _ = c.gc.Peek(need)
			n, ok = t.Decode(buf)
		}
		if len(buf) == 0 || !ok || n == 0 {
			return
		}
		if !t.Command().NoReply {
			c.out = text.AppendServerError(c.out, shutdownReason)
		}
		_, _ = c.gc.Discard(n)
		t.Drop()
	}
}

// handleText carries out the steps of the decoded command, or of the held
// refusal. It returns false when one must wait (the command is then left
// in the input and decoded again; steps already carried out are skipped).
// Before login the first command is memcached's -Y authentication.
func (c *conn) handleText() bool {
	t := c.txt
	if c.loggedOut() {
		switch {
		case c.collect != nil:
			return false
		case t.Held(): // a malformed command before the login closes (memcached -Y keeps it): nothing is buffered
			c.refuseLogin(true)
		default:
			c.textAuth(t.Command())
		}
		return true
	}
	for st := t.Next(); st != translate.Done; st = t.Next() {
		if c.inflight != nil || (st == translate.Answer || st == translate.Control) && c.collect != nil {
			return false // a step queued for a ticket, or one collected before an answer: answer it first
		}
		switch st {
		case translate.Run:
			if !c.runData(t.Request()) {
				return false
			}
		case translate.Answer:
			c.out = append(c.out, t.Answer()...)
		case translate.Control:
			c.textControl(t.Command())
		case translate.Close:
			c.quitting = true
		}
		t.Ran()
	}
	return true
}
