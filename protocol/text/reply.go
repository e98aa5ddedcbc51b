package text

import (
	"encoding/base64"
	"strconv"
)

// Status is the generic outcome of executing a command, independent of the
// protocol; AppendReply turns it into the text or meta reply.
type Status uint8

// Statuses.
const (
	StatusHit        Status = iota // read found the item (also: touch/gat found it)
	StatusMiss                     // read, touch or arithmetic found nothing
	StatusStored                   // storage succeeded
	StatusNotStored                // add on existing, replace/append/prepend on missing
	StatusExists                   // CAS mismatch
	StatusNotFound                 // CAS/delete/incr on a missing key
	StatusDeleted                  // delete succeeded
	StatusNumber                   // incr/decr succeeded; Outcome.Number is the new value
	StatusNonNumeric               // incr/decr on a value that is not a number
	StatusOK                       // flush_all, verbosity
)

// Outcome is what the server learnt executing a command.
type Outcome struct {
	Status Status
	Value  []byte // item value (hits)
	Flags  uint32 // client flags
	CAS    uint64
	TTL    int64  // remaining seconds; -1 for none
	Number uint64 // incr/decr result
	// Meta-only item facts; zero when the server does not track them.
	Fetched    bool  // h: the item was read before
	LastAccess int64 // l: seconds since the last access
	Win        bool  // W: this client won the right to recache
	Stale      bool  // X: the item is stale (invalidated)
	TokenSent  bool  // Z: a win token was already handed out
	KeyBinary  bool  // the item was stored by a meta command with b: k shows it in base64
	Created    bool  // ma: the miss created the item (N): quiet mode still answers
}

var (
	crlf         = []byte("\r\n")
	lineEnd      = []byte("END\r\n")
	lineStored   = []byte("STORED\r\n")
	lineNotStore = []byte("NOT_STORED\r\n")
	lineExists   = []byte("EXISTS\r\n")
	lineNotFound = []byte("NOT_FOUND\r\n")
	lineDeleted  = []byte("DELETED\r\n")
	lineTouched  = []byte("TOUCHED\r\n")
	lineOK       = []byte("OK\r\n")
	lineMN       = []byte("MN\r\n")
	lineNonNum   = []byte("CLIENT_ERROR cannot increment or decrement non-numeric value\r\n")
)

// AppendValue appends a classic "VALUE key flags bytes [cas]" block.
func AppendValue(dst, key []byte, flags uint32, value []byte, cas uint64, withCAS bool) []byte {
	dst = append(dst, "VALUE "...)
	dst = append(dst, key...)
	dst = append(dst, ' ')
	dst = strconv.AppendUint(dst, uint64(flags), 10)
	dst = append(dst, ' ')
	dst = strconv.AppendInt(dst, int64(len(value)), 10)
	if withCAS {
		dst = append(dst, ' ')
		dst = strconv.AppendUint(dst, cas, 10)
	}
	dst = append(dst, crlf...)
	dst = append(dst, value...)
	return append(dst, crlf...)
}

// AppendEnd appends "END", the end of a get/gets/gat/gats reply.
func AppendEnd(dst []byte) []byte { return append(dst, lineEnd...) }

// AppendStatsEnd appends the end of a stats reply: RESET for "stats
// reset", END for every other group.
func AppendStatsEnd(dst []byte, group string) []byte {
	if group == "reset" {
		return append(dst, "RESET\r\n"...)
	}
	return AppendEnd(dst)
}

// AppendNoop appends "MN", the reply to mn.
func AppendNoop(dst []byte) []byte { return append(dst, lineMN...) }

// AppendVersion appends "VERSION v".
func AppendVersion(dst []byte, version string) []byte {
	dst = append(dst, "VERSION "...)
	dst = append(dst, version...)
	return append(dst, crlf...)
}

// AppendStat appends one "STAT name value" line; end the list with AppendEnd.
func AppendStat(dst []byte, name, value string) []byte {
	dst = append(dst, "STAT "...)
	dst = append(dst, name...)
	dst = append(dst, ' ')
	dst = append(dst, value...)
	return append(dst, crlf...)
}

// AppendStatUint is AppendStat for a number.
func AppendStatUint(dst []byte, name string, value uint64) []byte {
	dst = append(dst, "STAT "...)
	dst = append(dst, name...)
	dst = append(dst, ' ')
	dst = strconv.AppendUint(dst, value, 10)
	return append(dst, crlf...)
}

// AppendError appends "ERROR".
func AppendError(dst []byte) []byte { return append(dst, replyError...) }

// AppendClientError appends "CLIENT_ERROR reason".
func AppendClientError(dst []byte, reason string) []byte {
	dst = append(dst, "CLIENT_ERROR "...)
	dst = append(dst, reason...)
	return append(dst, crlf...)
}

// AppendServerError appends "SERVER_ERROR reason": the reply to a command
// the server refused (admission, memory), with binary's reason text.
func AppendServerError(dst []byte, reason string) []byte {
	dst = append(dst, "SERVER_ERROR "...)
	dst = append(dst, reason...)
	return append(dst, crlf...)
}

// AppendReply appends the reply to cmd given the outcome of executing it,
// by memcached's rules: classic noreply and meta quiet mode suppress what
// memcached suppresses. For get/gets/gat/gats it appends one key's block
// (nothing on a miss); key is that key, and the caller appends AppendEnd
// after the last key. For other commands key is ignored.
func AppendReply(dst []byte, cmd *Command, key []byte, o *Outcome) []byte {
	if cmd.Kind.Meta() {
		return appendMeta(dst, cmd, o)
	}
	switch cmd.Kind {
	case KindGet, KindGat:
		if o.Status == StatusHit {
			dst = AppendValue(dst, key, o.Flags, o.Value, 0, false)
		}
		return dst
	case KindGets, KindGats:
		if o.Status == StatusHit {
			dst = AppendValue(dst, key, o.Flags, o.Value, o.CAS, true)
		}
		return dst
	case KindTouch:
		if o.Status == StatusHit {
			return appendUnlessNoReply(dst, cmd, lineTouched)
		}
	case KindIncr, KindDecr:
		if o.Status == StatusNumber {
			if cmd.NoReply {
				return dst
			}
			dst = strconv.AppendUint(dst, o.Number, 10)
			return append(dst, crlf...)
		}
	}
	return appendUnlessNoReply(dst, cmd, classicLine(o.Status))
}

func appendUnlessNoReply(dst []byte, cmd *Command, line []byte) []byte {
	if cmd.NoReply {
		return dst
	}
	return append(dst, line...)
}

func classicLine(s Status) []byte {
	switch s {
	case StatusStored:
		return lineStored
	case StatusNotStored:
		return lineNotStore
	case StatusExists:
		return lineExists
	case StatusDeleted:
		return lineDeleted
	case StatusNonNumeric:
		return lineNonNum
	case StatusOK:
		return lineOK
	case StatusHit:
		return lineTouched
	}
	return lineNotFound
}

// appendMetaKey appends the k flag: the key as sent (base64 when b).
func appendMetaKey(dst []byte, binary bool, key []byte) []byte {
	dst = append(dst, " k"...)
	if binary {
		n := base64.StdEncoding.EncodedLen(len(key))
		dst = append(dst, make([]byte, n)...) // the compiler grows dst in place
		base64.StdEncoding.Encode(dst[len(dst)-n:], key)
		return append(dst, " b"...)
	}
	return append(dst, key...)
}

// AppendStorage appends a classic storage request (set, add, replace,
// append, prepend, cas) for cmd: a client-side encoder, used by tests and
// tools.
func AppendStorage(dst []byte, cmd *Command) []byte {
	dst = append(dst, cmd.Kind.String()...)
	dst = append(append(dst, ' '), cmd.Key...)
	dst = strconv.AppendUint(append(dst, ' '), uint64(cmd.Flags), 10)
	dst = strconv.AppendInt(append(dst, ' '), cmd.Exptime, 10)
	dst = strconv.AppendInt(append(dst, ' '), int64(len(cmd.Value)), 10)
	if cmd.Kind == KindCas {
		dst = strconv.AppendUint(append(dst, ' '), cmd.CAS, 10)
	}
	if cmd.NoReply {
		dst = append(dst, " noreply"...)
	}
	dst = append(dst, crlf...)
	dst = append(dst, cmd.Value...)
	return append(dst, crlf...)
}

// appendMeta appends the reply to a meta command.
func appendMeta(dst []byte, cmd *Command, o *Outcome) []byte {
	m := &cmd.Meta
	switch cmd.Kind {
	case KindMetaNoop:
		return append(dst, lineMN...)
	case KindMetaDebug:
		return appendMetaDebug(dst, cmd, o)
	case KindMetaGet:
		if o.Status != StatusHit {
			if m.Quiet {
				return dst
			}
			return appendEcho(append(dst, "EN"...), cmd)
		}
		return appendMetaHit(dst, cmd, o, m.Value, o.Value)
	case KindMetaArithmetic:
		if o.Status == StatusNumber {
			var num [20]byte
			v := strconv.AppendUint(num[:0], o.Number, 10)
			return appendMetaHit(dst, cmd, o, m.Value, v)
		}
	}
	if o.Status == StatusNonNumeric {
		return append(dst, lineNonNum...)
	}
	code := metaCode(o.Status)
	if m.Quiet && code == "HD" {
		return dst
	}
	dst = append(dst, code...)
	if cmd.Kind == KindMetaSet {
		return appendFlags(dst, cmd, o) // ms returns its flags whatever the code ("NS c0")
	}
	return appendEcho(dst, cmd)
}

// metaCode is the two-letter status of ms, md and ma outcomes.
func metaCode(s Status) string {
	switch s {
	case StatusStored, StatusDeleted, StatusHit, StatusOK, StatusNumber:
		return "HD"
	case StatusNotStored:
		return "NS"
	case StatusExists:
		return "EX"
	}
	return "NF"
}

// appendMetaHit appends "VA <len> flags\r\n<data>\r\n" or "HD flags\r\n".
func appendMetaHit(dst []byte, cmd *Command, o *Outcome, withValue bool, value []byte) []byte {
	if cmd.Meta.Quiet && cmd.Kind == KindMetaArithmetic && !o.Created {
		return dst // ma's quiet mode hides every update, VA too, but not a creation
	}
	if !withValue {
		return appendFlags(append(dst, "HD"...), cmd, o)
	}
	dst = append(dst, "VA "...)
	dst = strconv.AppendInt(dst, int64(len(value)), 10)
	dst = appendFlags(dst, cmd, o)
	dst = append(dst, value...)
	return append(dst, crlf...)
}

// appendFlags appends the return flags in request order, then Z, X and W
// as memcached orders them, and the line end.
func appendFlags(dst []byte, cmd *Command, o *Outcome) []byte {
	m := &cmd.Meta
	for _, f := range m.Returns() {
		if !returns(cmd.Kind, f) {
			continue
		}
		switch f {
		case 'c':
			dst = strconv.AppendUint(append(dst, " c"...), o.CAS, 10)
		case 'f':
			dst = strconv.AppendUint(append(dst, " f"...), uint64(o.Flags), 10)
		case 'h':
			dst = append(dst, " h0"...)
			if o.Fetched {
				dst[len(dst)-1] = '1'
			}
		case 'k':
			dst = appendMetaKey(dst, m.keyBinary(cmd.Kind, o), cmd.Key)
		case 'l':
			dst = strconv.AppendInt(append(dst, " l"...), o.LastAccess, 10)
		case 'O':
			dst = append(append(dst, " O"...), m.Opaque...)
		case 's':
			dst = strconv.AppendInt(append(dst, " s"...), int64(len(o.Value)), 10)
		case 't':
			dst = strconv.AppendInt(append(dst, " t"...), o.TTL, 10)
		}
	}
	if o.TokenSent {
		dst = append(dst, " Z"...)
	}
	if o.Stale {
		dst = append(dst, " X"...)
	}
	if o.Win {
		dst = append(dst, " W"...)
	}
	return append(dst, crlf...)
}

// returns reports whether a command of kind k emits return flag f:
// mg all of them, ms O k c, ma O k c t, md O k.
func returns(k Kind, f byte) bool {
	switch {
	case f == 'O' || f == 'k' || k == KindMetaGet:
		return true
	case f == 'c':
		return k == KindMetaSet || k == KindMetaArithmetic
	case f == 't':
		return k == KindMetaArithmetic
	}
	return false
}

// appendEcho appends the flags memcached echoes on a miss or failure: the
// opaque and the key, in request order.
func appendEcho(dst []byte, cmd *Command) []byte {
	m := &cmd.Meta
	for _, f := range m.Returns() {
		switch f {
		case 'k':
			dst = appendMetaKey(dst, m.Base64, cmd.Key)
		case 'O':
			dst = append(append(dst, " O"...), m.Opaque...)
		}
	}
	return append(dst, crlf...)
}

// keyBinary reports whether the k flag shows the key in base64. memcached
// prints the key of the item it holds: on an mg hit and after an ms append
// or prepend that is an older item (Outcome.KeyBinary: stored with b);
// elsewhere the request decides.
func (m *Meta) keyBinary(k Kind, o *Outcome) bool {
	if k == KindMetaGet || k == KindMetaSet && (m.Mode == ModeAppend || m.Mode == ModePrepend) {
		return o.KeyBinary
	}
	return m.Base64
}

// itemOverhead makes me's size memcached's item size: a 56-byte header
// (with CAS), the key and its NUL, the value and its "\r\n".
const itemOverhead = 56 + 1 + 2

// ItemSize is memcached's size of an item with a key and a value of these
// lengths (me's size=, metadump's).
func ItemSize(key, value int) int { return itemOverhead + key + value }

// appendMetaDebug answers me as memcached 1.6.18 does: "EN" on a miss, else
// "ME <key> exp=… la=… cas=… fetch=yes|no cls=1 size=…", where exp is
// minus the remaining TTL (memcached prints current_time - exptime) or -1.
func appendMetaDebug(dst []byte, cmd *Command, o *Outcome) []byte {
	if o.Status != StatusHit {
		return append(dst, "EN\r\n"...)
	}
	dst = append(append(dst, "ME "...), cmd.Meta.RawKey...)
	exp := int64(-1)
	if o.TTL >= 0 {
		exp = -o.TTL
	}
	dst = strconv.AppendInt(append(dst, " exp="...), exp, 10)
	dst = strconv.AppendInt(append(dst, " la="...), o.LastAccess, 10)
	dst = strconv.AppendUint(append(dst, " cas="...), o.CAS, 10)
	if o.Fetched {
		dst = append(dst, " fetch=yes"...)
	} else {
		dst = append(dst, " fetch=no"...)
	}
	dst = append(dst, " cls=1 size="...)
	dst = strconv.AppendInt(dst, int64(ItemSize(len(cmd.Key), len(o.Value))), 10)
	return append(dst, crlf...)
}
