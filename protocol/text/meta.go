package text

import "encoding/base64"

// maxMetaTokens is memcached's MFLAG_MAX_OPT_LENGTH: a meta line with more
// tokens is refused.
const maxMetaTokens = 20

var (
	replyFlagsTooLong    = []byte("CLIENT_ERROR options flags too long\r\n")     // md, ma, ms (memcached's wording)
	replyGetFlagsTooLong = []byte("CLIENT_ERROR options flags are too long\r\n") // mg's
	replyInvalidOrDup    = []byte("CLIENT_ERROR invalid or duplicate flag\r\n")
)

// parseMeta parses mg, ms, md, ma, mn and me.
func (c *Command) parseMeta(tk *tokens) *Error {
	switch tk.t[0][1] {
	case 'g':
		c.Kind = KindMetaGet
	case 's':
		c.Kind = KindMetaSet
	case 'd':
		c.Kind = KindMetaDelete
	case 'a':
		c.Kind = KindMetaArithmetic
	case 'n':
		c.Kind = KindMetaNoop
		return nil
	case 'e':
		c.Kind = KindMetaDebug
	default:
		return c.unknown()
	}
	if tk.n < 2 {
		if c.Kind == KindMetaDebug {
			return c.fail(ErrClient, replyBadFormat, false)
		}
		return c.unknown()
	}
	c.Key = tk.t[1]
	c.Meta.RawKey = c.Key
	if len(c.Key) > MaxKeyLen {
		return c.fail(ErrClient, replyBadFormat, false)
	}
	if c.Kind == KindMetaDebug {
		return c.parseDebug(tk)
	}
	first := 2
	if c.Kind == KindMetaSet {
		if e := c.parseMetaLength(tk); e != nil {
			return e
		}
		first = 3
	}
	if tk.ntokens() > maxMetaTokens {
		if c.Kind == KindMetaGet {
			return c.metaFail(replyGetFlagsTooLong)
		}
		return c.metaFail(replyFlagsTooLong)
	}
	if e := c.parseFlags(tk.t[first:tk.n]); e != nil {
		return e
	}
	return c.checkMode()
}

// parseMetaLength reads ms's datalen token.
func (c *Command) parseMetaLength(tk *tokens) *Error {
	if tk.n < 3 {
		return c.fail(ErrClient, replyBadFormat, false)
	}
	vlen, ok := parseInt32(tk.t[2])
	if !ok || vlen < 0 || vlen > 1<<31-1-2 {
		return c.fail(ErrClient, replyBadFormat, false)
	}
	c.declared = int(vlen)
	return nil
}

// metaFail refuses a meta command; an ms whose length is known swallows
// its data block, as memcached does.
func (c *Command) metaFail(reply []byte) *Error {
	e := c.fail(ErrClient, reply, false)
	if c.Kind == KindMetaSet {
		e.Swallow = c.declared + 2
	}
	return e
}

// parseDebug reads me's flag: b, a base64 key, which memcached's me
// refuses with its line error, not the other meta commands' key error.
func (c *Command) parseDebug(tk *tokens) *Error {
	if tk.n > 2 && string(tk.t[2]) == "b" && c.decodeKey() != nil {
		return c.fail(ErrClient, replyBadFormat, false)
	}
	return nil
}

func (c *Command) decodeKey() *Error {
	m := &c.Meta
	n, err := base64.StdEncoding.Decode(c.keyBuf[:], m.RawKey)
	if err != nil || n == 0 {
		return c.metaFail(replyBadKey)
	}
	m.Base64, c.Key = true, c.keyBuf[:n:n]
	return nil
}

func flagBit(ch byte) uint64 {
	switch {
	case ch >= 'a' && ch <= 'z':
		return 1 << (ch - 'a')
	case ch >= 'A' && ch <= 'Z':
		return 1 << (26 + ch - 'A')
	}
	return 0
}

// parseFlags is _meta_flag_preparse plus the per-command token checks:
// a duplicate or unknown flag fails at once; a bad token fails after all
// flags are read, with the last reason.
func (c *Command) parseFlags(flags [][]byte) *Error {
	m := &c.Meta
	m.Delta = 1
	var reply []byte
	opaqueTooLong := false
	for _, f := range flags {
		bit := flagBit(f[0])
		if bit == 0 || m.seen&bit != 0 {
			if bit != 0 {
				return c.preparseFail(replyDuplicateFlag)
			}
			return c.preparseFail(replyInvalidFlag)
		}
		m.seen |= bit
		r, known := c.metaFlag(f)
		switch {
		case !known:
			return c.preparseFail(replyInvalidFlag)
		case r == nil:
		case &r[0] == &replyOpaqueTooLong[0]:
			opaqueTooLong = true // checked after the preparse, as memcached does
		default:
			reply = r
		}
	}
	if reply != nil {
		return c.preparseFail(reply)
	}
	if opaqueTooLong {
		return c.metaFail(replyOpaqueTooLong)
	}
	return nil
}

// preparseFail refuses a bad flag list: md and ma give one reason for all.
func (c *Command) preparseFail(reply []byte) *Error {
	if c.Kind == KindMetaDelete || c.Kind == KindMetaArithmetic {
		reply = replyInvalidOrDup
	}
	return c.metaFail(reply)
}

// metaFlag applies one flag token; it returns the error reply of a bad
// token and whether the flag is known at all.
func (c *Command) metaFlag(f []byte) (reply []byte, known bool) {
	m := &c.Meta
	switch f[0] {
	case 'b':
		if e := c.decodeKey(); e != nil {
			return e.Reply, true
		}
	case 'c', 'f', 'h', 'k', 'l', 's', 't':
		m.ret[m.nret], m.nret = f[0], m.nret+1
	case 'O':
		if len(f) > MaxOpaqueLen {
			return replyOpaqueTooLong, true
		}
		m.Opaque = f[1:]
		m.ret[m.nret], m.nret = 'O', m.nret+1
	case 'P', 'L':
	case 'q':
		m.Quiet = true
	case 'u':
		m.NoBump = true
	case 'v':
		m.Value = true
	case 'I':
		m.Invalidate = true
	default:
		return c.metaToken(f)
	}
	return nil, true
}

// metaToken applies a flag that carries a number (or ms/ma's mode).
func (c *Command) metaToken(f []byte) (reply []byte, known bool) {
	m, tok := &c.Meta, f[1:]
	ok := true
	switch f[0] {
	case 'N':
		m.Vivify, ok = parseInt32(tok)
		m.HasViv = ok
	case 'T':
		m.TTL, ok = parseInt32(tok)
		m.HasTTL = ok
	case 'R':
		m.Recache, ok = parseInt32(tok)
		m.HasRecache, m.RecacheFirst = ok, !m.HasTTL
	case 'F':
		if m.Flags, ok = parseFlags(tok); !ok {
			return replyBadFormat, true // memcached sets no reason for F
		}
		m.HasFlags = true
	case 'C':
		m.CAS, ok = parseUint64(tok)
		m.HasCAS = ok
	case 'M':
		if len(f) != 2 {
			return replyModeLen, true
		}
		m.Mode = f[1]
	case 'J':
		if m.Initial, ok = parseUint64(tok); !ok {
			return replyBadInitial, true
		}
	case 'D':
		if m.Delta, ok = parseUint64(tok); !ok {
			return replyBadDeltaValue, true
		}
	default:
		return nil, false
	}
	if !ok {
		return replyBadToken, true
	}
	return nil, true
}

// checkMode validates and normalizes the M flag of ms and ma.
func (c *Command) checkMode() *Error {
	m := &c.Meta
	switch c.Kind {
	case KindMetaSet:
		switch m.Mode {
		case 0:
			m.Mode = ModeSet
		case 'E', 'A', 'P', 'R', 'S':
		default:
			return c.metaFail(replyMsMode)
		}
	case KindMetaArithmetic:
		switch m.Mode {
		case 0, 'I', '+':
			m.Mode = ModeIncrement
		case 'D', '-':
			m.Mode = ModeDecrement
		default:
			return c.metaFail(replyMaMode)
		}
	}
	return nil
}
