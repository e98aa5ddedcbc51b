package translate

import (
	mc "kvd/protocol/binary"
	"kvd/protocol/text"
)

// lineTooLarge answers a too-large set once its key has been unlinked.
var lineTooLarge = []byte("SERVER_ERROR object too large for cache\r\n")

// reasonNoMemory is memcached's refusal of a value the cache cannot hold,
// for binary's StatusTooBig from the engine.
const reasonNoMemory = "out of memory storing object"

// Reply is what the text reply to one translated request needs beyond its
// binary result. The zero Reply belongs to a binary request (Text is false).
type Reply struct {
	kind    text.Kind
	noreply bool
	last    bool // last key of a multi-get: END follows its reply
	hasCAS  bool // the command compared a CAS (classic cas, meta C)
	tooBig  bool // the unlink of a too-large set: answer the refusal instead
	silent  bool // tooBig under noreply
	meta    text.Meta
}

// Text reports whether r belongs to a text command.
func (r *Reply) Text() bool { return r.kind != text.KindNone }

// ShowsLastAccess reports whether r's reply shows the seconds since the
// item's last access (mg l, me): the caller then reads the clock.
func (r *Reply) ShowsLastAccess() bool {
	return r.kind == text.KindMetaDebug || r.meta.Wants('l')
}

// MetaGet reports whether r belongs to a meta get (mg): it may win the
// item's token (Lease), and its read may not count (Bumps).
func (r *Reply) MetaGet() bool { return r.kind == text.KindMetaGet }

// Bumps reports whether r's read counts as one in the item's fetch state
// (meta h and l): every read does but a meta get's with u and a meta
// debug's (me), as in memcached.
func (r *Reply) Bumps() bool { return !r.Inspects() && (r.kind != text.KindMetaGet || !r.meta.NoBump) }

// Inspects reports whether r only looks at the item (me): memcached counts
// it in none of its get figures (cmd_get, get_hits, get_misses) and it
// does not count as a read (Bumps).
func (r *Reply) Inspects() bool { return r.kind == text.KindMetaDebug }

// MetaDelete reports whether r belongs to a meta delete (md), whose CAS
// mismatch memcached counts as a delete miss (binary DELETE's as nothing).
func (r *Reply) MetaDelete() bool { return r.kind == text.KindMetaDelete }

// MetaTTL is a meta command's T flag where binary's request cannot carry
// it (ma's INCR and DECR, md's DELETE): the expiry, as binary's extras
// state one, the item takes when the command succeeds. false: the command
// has none.
func (r *Reply) MetaTTL() (uint32, bool) {
	if !r.kind.Meta() || !r.meta.HasTTL {
		return 0, false
	}
	return Expiry(r.meta.TTL), true
}

// Lease is what a meta get asks beyond binary's GET: N creates a missing
// item with the expiry Expiry, R hands out the right to recache an item
// whose expiry is before Recache (both as binary's extras state an expiry:
// seconds from now up to 30 days, else absolute; 0 = none). See
// engine.LeaseArgs.
type Lease struct {
	Vivify  bool
	Expiry  uint32
	Recache uint32
	// BeforeTouch: R came before the mg's T, so it judges the item's TTL
	// before the touch, as memcached applies the flags in request order.
	BeforeTouch bool
}

// Lease is an mg's N and R flags; ok is false for any other command. Every
// mg has one: a stale item hands out its token to a plain mg too.
func (r *Reply) Lease() (l Lease, ok bool) {
	if r.kind != text.KindMetaGet {
		return Lease{}, false
	}
	m := &r.meta
	l.Vivify = m.HasViv
	if m.HasViv {
		l.Expiry = Expiry(m.Vivify)
	}
	if m.HasRecache && m.Recache > 0 {
		l.Recache = Expiry(m.Recache)
		l.BeforeTouch = m.HasTTL && m.RecacheFirst
	}
	return l, true
}

// Invalidate reports meta's I flag where memcached honours it: md marks the
// item stale instead of deleting it; ms with a CAS, in set or replace mode
// (memcached's CAS store), stores a value whose CAS is older than the
// item's as a stale one.
func (r *Reply) Invalidate() bool {
	switch r.kind {
	case text.KindMetaDelete:
		return r.meta.Invalidate
	case text.KindMetaSet:
		return r.meta.Invalidate && r.hasCAS && (r.meta.Mode == text.ModeSet || r.meta.Mode == text.ModeReplace)
	}
	return false
}

// Result is a translated request's binary result, as the server executed
// it. Its slices are read, never kept.
type Result struct {
	Op      mc.Opcode // the request's opcode
	Status  mc.Status
	Reason  string // a refusal's reason (admission, memory, server trouble)
	Key     []byte
	Value   []byte // value read
	Flags   uint32
	CAS     uint64
	Number  uint64 // INCR/DECR result
	Created bool   // arithmetic created the item
	Expiry  uint32 // the item's expiry: absolute Unix seconds, 0 = never
	// A meta get's item states (engine.Lease): invalidated (X), its token
	// handed out before (Z), won by this request (W).
	Stale, TokenSent, Won bool
	// The item was read before (h), and when it was last accessed (l):
	// absolute Unix seconds, 0 = unknown.
	Fetched  bool
	Accessed uint32
}

// Append appends the text reply to r's request given its result. now (Unix
// seconds) is when the reply is made, what a remaining TTL and the seconds
// since the last access count from; it is read only when res.Expiry is
// set, or res.Accessed and r.ShowsLastAccess. A refusal is one "SERVER_ERROR
// <reason>" line with binary's reason, none for a classic noreply.
func (r *Reply) Append(dst []byte, res *Result, now int64) []byte {
	if r.tooBig {
		if r.silent {
			return dst
		}
		return append(dst, lineTooLarge...)
	}
	o, ok := r.outcome(res, now)
	if !ok {
		if r.noreply { // as Session.Refuse: no reply means no error line either
			return dst
		}
		if res.Status == mc.StatusTooBig {
			return text.AppendServerError(dst, reasonNoMemory)
		}
		return text.AppendServerError(dst, res.Reason)
	}
	cmd := text.Command{Kind: r.kind, Key: res.Key, NoReply: r.noreply, Meta: r.meta}
	dst = text.AppendReply(dst, &cmd, res.Key, &o)
	if r.last {
		dst = text.AppendEnd(dst)
	}
	return dst
}

// outcome turns res into the text outcome of r's command; ok is false for
// a refusal, answered SERVER_ERROR.
func (r *Reply) outcome(res *Result, now int64) (o text.Outcome, ok bool) {
	o = text.Outcome{Flags: res.Flags, CAS: res.CAS, Value: res.Value, Number: res.Number,
		Created: res.Created, TTL: TTL(res.Expiry, now), KeyBinary: r.meta.Base64,
		Stale: res.Stale, TokenSent: res.TokenSent, Win: res.Won, Fetched: res.Fetched}
	if res.Accessed != 0 {
		o.LastAccess = max(0, now-int64(res.Accessed))
	}
	op := res.Op.NonQuiet()
	switch res.Status {
	case mc.StatusOK:
		o.Status = okStatus(op)
	case mc.StatusKeyNotFound:
		o.Status = text.StatusNotFound
		switch {
		case op == mc.OpGet || op == mc.OpGAT || op == mc.OpTouch:
			o.Status = text.StatusMiss
		case isStore(op) && !r.hasCAS:
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
	default:
		return o, false
	}
	return o, true
}

// okStatus is the text status of op's success.
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

// TTL is an item's remaining time to live in seconds at now (Unix seconds)
// given its absolute expiry, -1 for none.
func TTL(expiry uint32, now int64) int64 {
	if expiry == 0 {
		return -1
	}
	return max(0, int64(expiry)-now)
}
