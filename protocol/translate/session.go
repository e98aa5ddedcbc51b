// Package translate maps memcached's text and meta commands onto the binary
// requests kvd executes, and those requests' binary results back onto text
// replies. It owns the translation and nothing else: the server reads the
// input, runs the requests through binary's path (precheck, admission,
// batch, worker) and writes the replies; package text is the codec on one
// side, package binary the request and status vocabulary on the other.
//
// A Session is one text connection's translation state: the command being
// decoded, the binary request it stands for at the moment, how far a
// multi-get got, and a refused command's held error. The server drives it
// one step at a time:
//
//	n, ok := s.Decode(buf) // ok false: incomplete (Need: how much a storage command needs)
//	for st := s.Next(); st != translate.Done; st = s.Next() {
//		// Run: admit s.Request() (s.Reply fills what its reply needs)
//		// Answer: append s.Answer(); Control: answer s.Command()
//		// Close: close after the replies; a step that must wait returns
//		// here without Ran, and the command is decoded again later
//		s.Ran()
//	}
//
// A Reply, stored with each admitted request, is what its text reply needs
// beyond the binary result; Reply.Append turns the result into the codec's
// Outcome and encodes it.
//
// Invariants:
//   - A multi-get is one GET (GAT) per key; only the last key's reply
//     carries END, and a key refused at admission drops the keys after it,
//     as memcached's one SERVER_ERROR for the line does.
//   - A refused storage command's error is held until its data block has
//     been swallowed; a too-large set then runs a DELETE of its key (memcached
//     unlinks the old item) whose reply is the refusal.
//   - Nothing here allocates per command once its buffers have grown: the
//     request, its extras and the held error reuse the Session's arrays.
//   - No clock is read: Append takes now as an argument.
//
// Concurrency: a Session belongs to its connection's event loop and is not
// safe for concurrent use. A Reply is a value; Append only reads it.
package translate

import (
	"bytes"

	mc "kvd/protocol/binary"
	"kvd/protocol/text"
)

// Step is what the server does next for the command at hand (Session.Next).
type Step uint8

// Steps.
const (
	// Done: the command is carried out; consume its bytes, decode the next.
	Done Step = iota
	// Run: pass Request, a binary data command, through precheck and
	// admission.
	Run
	// Answer: append Answer's bytes on the loop, once the commands collected
	// before it are answered.
	Answer
	// Control: answer Command on the loop (version, verbosity, quit, mn,
	// stats, flush_all), once the commands collected before it are answered.
	Control
	// Close: close the connection after the replies sent so far.
	Close
)

var (
	lineError = []byte("ERROR\r\n")
	lineEnd   = []byte("END\r\n")
)

// Session is one text connection's translation state (see the package
// comment). The zero value is not usable; use NewSession.
type Session struct {
	cmd    text.Command
	opts   text.DecodeOptions
	req    mc.Request              // the request Next handed out
	extras [mc.ArithExtrasLen]byte // its extras
	cur    Reply                   // what its reply needs
	answer []byte                  // the bytes of an Answer step
	need   int                     // an incomplete storage command's full length
	step   int                     // steps of the current command already carried out
	abort  bool                    // a key of the current multi-get was refused
	held   held                    // a refused command, answered by Next
	aux    []byte                  // opaque and raw key of a reply answered on the loop
	multi  multiGet                // the multi-get being carried out
	dump   *Dump                   // the key listing being carried out, across its chunks
}

// multiGet is where a multi-get is: its keys are taken from its line one at
// a time (text.Token), from the offset of the next one to run, so that a
// multi-get that waits (its keys fill a batch) and is decoded again costs
// nothing more: decoding its line at every wait made n keys cost n²/64 (a
// 920 KB line of 460,000 keys kept a loop busy for more than 25 minutes).
type multiGet struct {
	line        []byte // its line in the input Decode was given (valid for that pass)
	n           int    // the command's length in the input
	keys        int    // how many keys it has
	next, after int    // byte offsets in line: the key to run (key number step), and past the one Next gave
}

// held is a command Decode refused: its error is answered once its data
// block (swallow bytes) has been dropped.
type held struct {
	set     bool
	close   bool
	unlink  bool
	swallow int
	kind    text.Kind
	reply   []byte
	key     []byte
}

// NewSession returns a Session that accepts values up to maxValue bytes
// (0: text.DefaultMaxValue).
func NewSession(maxValue int) *Session {
	s := &Session{opts: text.DecodeOptions{MaxValue: maxValue}}
	s.opts.EnsureDefaults()
	return s
}

// Options are the limits Decode applies.
func (s *Session) Options() text.DecodeOptions { return s.opts }

// Decode decodes the command at the front of buf. ok is false when buf
// holds no complete command yet (Need tells a storage command's full
// length). Otherwise the command takes n bytes, which may be 0 for a
// refusal: a command Decode refuses is held (Held), and Next answers it
// once its n bytes and Swallow more have been dropped. Decode must not be
// called while a refusal is held.
func (s *Session) Decode(buf []byte) (n int, ok bool) {
	if s.step > 0 && s.cmd.Kind.Retrieval() {
		return s.resume(buf)
	}
	n, err := text.Decode(buf, s.opts, &s.cmd)
	s.need = 0
	if e, isErr := err.(*text.Error); isErr { // Decode's errors are always *text.Error
		s.hold(e)
		return n, true
	}
	if n == 0 && s.cmd.Kind.Storage() {
		s.need = bytes.IndexByte(buf, '\n') + 1 + s.cmd.DataLen() + 2
	}
	if n > 0 && s.cmd.Kind.Retrieval() {
		line := s.cmd.Line
		s.multi = multiGet{line: line, n: n, keys: s.cmd.NKeys, next: text.FirstKey(line, s.cmd.Kind)}
	}
	return n, n > 0
}

// resume takes up a multi-get that waited after some of its keys ran (the
// batch they filled went to a worker), at the front of buf again: its line
// is neither decoded nor searched again, only taken from buf.
func (s *Session) resume(buf []byte) (n int, ok bool) {
	m := &s.multi
	if len(buf) < m.n || buf[m.n-1] != '\n' { // not the command that waited (Decode is not called so)
		s.step = 0
		return s.Decode(buf)
	}
	m.line, s.need = buf[:len(m.line)], 0                        // the line's length is known: not searched again
	s.cmd.Key, s.cmd.Keys, s.cmd.Line = nil, s.cmd.Keys[:0], nil // they viewed an input gone since: Next takes keys from line
	return m.n, true
}

// Drop forgets the command last decoded, which the caller answered itself
// and dropped from its input (a shutdown's refusal): the next Decode
// decodes afresh, even after a multi-get that waited.
func (s *Session) Drop() { s.step, s.abort, s.multi = 0, false, multiGet{} }

// Need is, after Decode found its buffer incomplete, the length of the
// storage command whose line it holds (line, data block and "\r\n"); 0
// otherwise. A caller that peeks its input piecewise peeks that much once
// it is buffered and decodes again.
func (s *Session) Need() int { return s.need }

// HoldNoMemory refuses the storage command whose line Decode last found
// with its data block incomplete (Need > 0), as memcached refuses a value
// it has no memory for: "SERVER_ERROR out of memory storing object" (none
// for a classic noreply), the old item kept. The refusal is held like
// Decode's: it returns the line's length, to drop with Swallow more bytes
// before Next answers.
func (s *Session) HoldNoMemory() int {
	e := text.NoMemory(&s.cmd)
	s.hold(e)
	return s.need - e.Swallow
}

// hold keeps the refusal e of the command last decoded for Next.
func (s *Session) hold(e *text.Error) {
	h := &s.held
	h.set, h.close, h.unlink, h.kind = true, e.Close, e.Unlink, s.cmd.Kind
	h.swallow = e.Swallow
	h.reply = append(h.reply[:0], e.Reply...)
	h.key = append(h.key[:0], s.cmd.Key...)
}

// Held reports whether a refused command waits to be answered.
func (s *Session) Held() bool { return s.held.set }

// Swallow is how many bytes of the held command remain to be dropped after
// the n Decode returned.
func (s *Session) Swallow() int { return s.held.swallow }

// Command is the command last decoded.
func (s *Session) Command() *text.Command { return &s.cmd }

// Request is the binary request of the last Run step. It views the
// command's bytes: valid until the next Decode.
func (s *Session) Request() *mc.Request { return &s.req }

// Answer is the reply of the last Answer step.
func (s *Session) Answer() []byte { return s.answer }

// Ran records that the server carried out the step Next returned. A step
// that must wait is not recorded: Next returns it again.
func (s *Session) Ran() {
	s.step++
	s.multi.next = s.multi.after
}

// Next returns the next step of the held refusal, else of the command last
// decoded; Done when there is none left.
func (s *Session) Next() Step {
	if s.held.set {
		return s.nextHeld()
	}
	cmd := &s.cmd
	if cmd.Kind.Retrieval() {
		return s.nextKey()
	}
	if cmd.Kind == text.KindDump {
		return s.nextDump()
	}
	if s.step > 0 {
		s.step = 0
		return Done
	}
	if isControl(cmd.Kind) {
		return Control
	}
	op, ok := opOf(cmd)
	if !ok {
		s.answer = lineError
		return Answer
	}
	s.cur = Reply{kind: cmd.Kind, noreply: cmd.NoReply, meta: cmd.Meta}
	s.build(op, cmd.Key)
	return Run
}

// nextKey steps through a multi-get one key at a time, each a GET (or GAT);
// the last key's reply carries the END. After a wait the multi-get goes on
// from the key it stopped at (multiGet).
func (s *Session) nextKey() Step {
	m := &s.multi
	if m.keys == 0 { // "gat 0": memcached answers END
		if s.step > 0 {
			s.step = 0
			return Done
		}
		s.answer = lineEnd
		return Answer
	}
	if s.step >= m.keys || s.abort {
		s.step, s.abort, m.line = 0, false, nil
		return Done
	}
	op := mc.OpGet
	if k := s.cmd.Kind; k == text.KindGat || k == text.KindGats {
		op = mc.OpGAT
	}
	var key []byte
	key, m.after = text.Token(m.line, m.next)
	s.cur = Reply{kind: s.cmd.Kind, last: s.step == m.keys-1}
	s.build(op, key)
	return Run
}

// nextHeld answers a refused command: its error line, or for a too-large
// set a DELETE of its key whose reply is the refusal (memcached unlinks the
// old item); then Close if the error closes the connection.
func (s *Session) nextHeld() Step {
	h := &s.held
	switch {
	case s.step == 0 && h.unlink:
		s.cur = Reply{kind: h.kind, tooBig: true, silent: len(h.reply) == 0}
		s.req = mc.Request{Magic: mc.MagicRequest, Opcode: mc.OpDelete, Key: h.key}
		return Run
	case s.step == 0:
		s.answer = h.reply
		return Answer
	case s.step == 1 && h.close:
		return Close
	}
	h.set, s.step = false, 0
	return Done
}

// Reply fills dst with what the reply to the request of the last Run step
// needs, copying a meta command's opaque and raw key (views into the input)
// into *aux, which the reply then views. With aux nil the Session's own
// buffer is used, valid until the next Reply: for a reply encoded at once.
func (s *Session) Reply(dst *Reply, aux *[]byte) {
	if aux == nil {
		aux = &s.aux
	}
	*dst = s.cur
	m := &dst.meta
	if dst.kind != text.KindMetaDebug {
		m.RawKey = nil // only me prints the key as sent
	}
	if len(m.Opaque) == 0 && len(m.RawKey) == 0 {
		return
	}
	*aux = append(append((*aux)[:0], m.Opaque...), m.RawKey...)
	no := len(m.Opaque)
	m.Opaque, m.RawKey = (*aux)[:no:no], (*aux)[no:]
}

// nextDump is a key listing's next step: Control (the server runs its
// next chunk, Dump) until its last chunk has run. The server takes the
// command up again after each chunk (it does not discard its line while
// Next returns Control), so the listing outlives a Decode of its line.
func (s *Session) nextDump() Step {
	switch {
	case s.dump == nil:
		s.dump = DumpOf(&s.cmd)
	case s.dump.Finished():
		s.dump, s.step = nil, 0
		return Done
	}
	return Control
}

// Dump is the key listing of the command Next last returned Control for.
func (s *Session) Dump() *Dump { return s.dump }

// Current is the reply needs of the request being admitted, which Reply
// copies out; nil for a nil Session (a binary connection has none).
func (s *Session) Current() *Reply {
	if s == nil {
		return nil
	}
	return &s.cur
}

// Refuse appends the text refusal of the request being admitted:
// SERVER_ERROR with the reason binary gives, nothing for a classic
// noreply (memcached sends a noreply command no reply, its errors
// included: a client that asked for none would take the line for the
// reply of its next command). The rest of a multi-get is dropped.
func (s *Session) Refuse(dst []byte, reason string) []byte {
	if s.cur.kind.Retrieval() {
		s.abort = true
	}
	if s.cur.noreply {
		return dst
	}
	return text.AppendServerError(dst, reason)
}

// isControl reports whether k is answered by the server on the loop rather
// than translated.
func isControl(k text.Kind) bool {
	switch k {
	case text.KindVersion, text.KindVerbosity, text.KindQuit, text.KindStats,
		text.KindFlushAll, text.KindMetaNoop, text.KindDump:
		return true
	}
	return false
}
