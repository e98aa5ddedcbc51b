package server

import (
	"bytes"

	mc "kvd/protocol/binary"
	"kvd/protocol/text"
	"kvd/tenant"
)

// Text replies: a text request's results become a text.Outcome, which the
// codec encodes as memcached does; admission and server errors become one
// "SERVER_ERROR <reason>" line with binary's reason.

var (
	lineTooLarge        = []byte("SERVER_ERROR object too large for cache\r\n")
	lineUnauthenticated = []byte("CLIENT_ERROR unauthenticated\r\n")
	lineStored          = []byte("STORED\r\n")
)

// appendText encodes the reply to a text request.
func (c *conn) appendText(dst []byte, r *request) []byte {
	t := &r.txt
	if t.tooBig {
		if t.silent {
			return dst
		}
		return append(dst, lineTooLarge...)
	}
	o, ok := c.outcomeOf(r)
	if !ok {
		return text.AppendServerError(dst, r.reason)
	}
	cmd := text.Command{Kind: t.kind, Key: r.key, NoReply: t.noreply, Meta: t.meta}
	dst = text.AppendReply(dst, &cmd, r.key, &o)
	if t.last {
		dst = text.AppendEnd(dst)
	}
	return dst
}

// outcomeOf turns r's binary result into the text outcome of its command;
// ok is false for a refusal (admission, memory, server trouble), answered
// SERVER_ERROR.
func (c *conn) outcomeOf(r *request) (o text.Outcome, ok bool) {
	t := &r.txt
	o = text.Outcome{Flags: r.flags, CAS: r.cas, Value: r.res, Number: r.num, Created: r.made,
		TTL: c.ttlOf(r.exp), KeyBinary: t.meta.Base64}
	op := r.hdr.op.NonQuiet()
	switch r.status {
	case mc.StatusOK:
		o.Status = okStatus(op)
	case mc.StatusKeyNotFound:
		o.Status = text.StatusNotFound
		switch {
		case op == mc.OpGet || op == mc.OpGAT || op == mc.OpTouch:
			o.Status = text.StatusMiss
		case isStore(op) && !t.hasCAS:
			o.Status = text.StatusNotStored // replace of a missing key
		}
	case mc.StatusKeyExists:
		o.Status = text.StatusExists
		if op == mc.OpAdd {
			o.Status = text.StatusNotStored
		}
	case mc.StatusNotStored:
		o.Status = text.StatusNotStored
	case mc.StatusNonNumeric:
		o.Status = text.StatusNonNumeric
	case mc.StatusTooBig:
		r.reason = "out of memory storing object"
		return o, false
	default:
		return o, false
	}
	return o, true
}

func okStatus(op mc.Opcode) text.Status {
	switch op {
	case mc.OpGet, mc.OpGAT, mc.OpTouch:
		return text.StatusHit
	case mc.OpDelete:
		return text.StatusDeleted
	case mc.OpIncrement, mc.OpDecrement:
		return text.StatusNumber
	}
	return text.StatusStored
}

func isStore(op mc.Opcode) bool {
	switch op {
	case mc.OpSet, mc.OpAdd, mc.OpReplace, mc.OpAppend, mc.OpPrepend:
		return true
	}
	return false
}

// ttlOf is an item's remaining time to live in seconds, -1 for none.
func (c *conn) ttlOf(exp uint32) int64 {
	if exp == 0 {
		return -1
	}
	return max(0, int64(exp)-c.srv.opts.Now().Unix())
}

// textAuth is memcached's -Y authentication: before it, a connection's
// first command must be "set <key> <flags> <exptime> <len>" whose data is
// "<user> <password>". The password is checked on a worker (hashing is slow
// by design), as SASL does; success answers STORED and selects the bucket
// named like the user if the user may use it, else the user's first bucket
// in name order. Anything else is "CLIENT_ERROR unauthenticated"; a bad
// password also closes the connection.
func (c *conn) textAuth(cmd *text.Command) {
	if cmd.Kind != text.KindSet {
		c.out = append(c.out, lineUnauthenticated...)
		return
	}
	name, password, _ := bytes.Cut(cmd.Value, []byte(" "))
	user, pw := string(name), bytes.Clone(password)
	b := newBatch(c, c.bucket)
	b.job = func(b *batch) {
		u, err := c.srv.users.Authenticate(user, pw)
		if err != nil {
			c.srv.log.Warn("login refused", "user", user, "remote", c.remote, "protocol", "text")
			b.out = append(b.out, lineUnauthenticated...)
			b.after = func(c *conn) { c.quitting = true }
			return
		}
		b.out = append(b.out, lineStored...)
		b.after = func(c *conn) { c.textLogin(u) }
	}
	c.startJob(b)
}

// textLogin is login, falling back to the user's first bucket.
func (c *conn) textLogin(u *tenant.User) {
	c.login(u)
	if c.bucket != nil {
		return
	}
	if names := c.srv.cat.Names(u.CanSelect); len(names) > 0 {
		if b, ok := c.srv.cat.Get(names[0]); ok {
			c.selectBucket(b)
		}
	}
}

// textStats answers stats: the general group as memcached formats it, and
// kvd's groups ("stats bucket_details [name]", "stats throttle", "stats
// ingress"), from the gatherers binary's STAT uses.
func (c *conn) textStats(args [][]byte) {
	emit := func(name string, value []byte) {
		c.out = text.AppendStat(c.out, name, string(value))
	}
	group := ""
	if len(args) > 0 {
		group = string(args[0])
	}
	switch group {
	case "":
		c.srv.generalStats(c.bucket, emit)
	case "bucket_details":
		arg := ""
		if len(args) > 1 {
			arg = string(args[1])
		}
		name, doc, st, reason := c.srv.bucketDetails(arg, c.canSee)
		if st != mc.StatusOK {
			c.out = text.AppendClientError(c.out, reason)
			return
		}
		emit(name, doc)
	case "throttle":
		c.srv.throttleStats(emit)
	case "ingress":
		c.srv.ingressStats(emit)
	default:
		c.out = text.AppendError(c.out)
		return
	}
	c.out = text.AppendEnd(c.out)
}

// textFlush is flush_all [delay]: on a worker, as binary FLUSH does
// (flushBucket), the delay with memcached's meaning.
func (c *conn) textFlush(delay uint32, noreply bool) {
	if c.bucket == nil {
		c.out = text.AppendServerError(c.out, "no bucket selected")
		return
	}
	b := newBatch(c, c.bucket)
	b.job = func(b *batch) {
		err := c.srv.flushBucket(b, delay)
		switch {
		case err != nil:
			_, reason := statusOf(err)
			b.out = text.AppendServerError(b.out, reason)
		case !noreply:
			b.out = append(b.out, "OK\r\n"...)
		}
	}
	c.startJob(b)
}
