package text

// Line parsers of the classic commands other than retrieval and storage,
// and the number parsers that mirror memcached's safe_strto* helpers.

func (c *Command) parseArithmetic(tk *tokens) *Error {
	c.Kind = kindByName[string(tk.t[0])]
	c.NoReply = tk.noreply()
	c.Key = tk.t[1]
	if len(c.Key) > MaxKeyLen {
		return c.failClassic(ErrClient, replyBadFormat)
	}
	d, ok := parseUint64(tk.t[2])
	if !ok {
		return c.failClassic(ErrClient, replyBadDelta)
	}
	c.Delta = d
	return nil
}

func (c *Command) parseDelete(tk *tokens) *Error {
	c.Kind = KindDelete
	nt := tk.ntokens()
	if nt > 3 {
		zero := string(tk.t[2]) == "0"
		c.NoReply = tk.noreply()
		if !(nt == 4 && (zero || c.NoReply) || nt == 5 && zero && c.NoReply) {
			return c.failClassic(ErrClient, replyDeleteUsage)
		}
	}
	c.Key = tk.t[1]
	if len(c.Key) > MaxKeyLen {
		return c.failClassic(ErrClient, replyBadFormat)
	}
	return nil
}

func (c *Command) parseTouch(tk *tokens) *Error {
	c.Kind = KindTouch
	c.NoReply = tk.noreply()
	c.Key = tk.t[1]
	if len(c.Key) > MaxKeyLen {
		return c.failClassic(ErrClient, replyBadFormat)
	}
	exp, ok := parseInt32(tk.t[2])
	if !ok {
		return c.failClassic(ErrClient, replyBadExptime)
	}
	c.Exptime = exp
	return nil
}

func (c *Command) parseVerbosity(tk *tokens) *Error {
	c.Kind, c.NoReply = KindVerbosity, tk.noreply()
	level, ok := parseFlags(tk.t[1])
	if !ok {
		return c.failClassic(ErrClient, replyBadFormat)
	}
	c.Level = uint64(level)
	return nil
}

func (c *Command) parseFlush(tk *tokens) *Error {
	c.Kind = KindFlushAll
	c.NoReply = tk.noreply()
	plain := 2
	if c.NoReply {
		plain = 3
	}
	if tk.ntokens() == plain {
		return nil
	}
	exp, ok := parseInt32(tk.t[1])
	if !ok {
		return c.failClassic(ErrClient, replyBadExptime)
	}
	c.Exptime, c.HasArg = exp, true
	return nil
}

// parseDigits reads an optional sign and decimal digits, as strtol does;
// ok is false without digits, with trailing junk, or past 64 bits.
func parseDigits(b []byte) (v uint64, neg, ok bool) {
	if len(b) > 0 && (b[0] == '+' || b[0] == '-') {
		neg, b = b[0] == '-', b[1:]
	}
	if len(b) == 0 {
		return 0, false, false
	}
	for _, ch := range b {
		if ch < '0' || ch > '9' {
			return 0, false, false
		}
		d := uint64(ch - '0')
		if v > (1<<64-1-d)/10 {
			return 0, false, false
		}
		v = v*10 + d
	}
	return v, neg, true
}

// parseUint64 is safe_strtoull: no negative numbers.
func parseUint64(b []byte) (uint64, bool) {
	v, neg, ok := parseDigits(b)
	if !ok || neg && v != 0 {
		return 0, false
	}
	return v, true
}

// parseFlags is safe_strtoul into a 32-bit field: memcached keeps the low
// 32 bits of a larger number.
func parseFlags(b []byte) (uint32, bool) {
	v, ok := parseUint64(b)
	return uint32(v), ok
}

// parseInt32 is safe_strtol: a signed 64-bit parse stored into an int32.
func parseInt32(b []byte) (int64, bool) {
	v, neg, ok := parseDigits(b)
	if !ok || (!neg && v > 1<<63-1) || (neg && v > 1<<63) {
		return 0, false
	}
	if neg {
		return int64(int32(-int64(v))), true
	}
	return int64(int32(int64(v))), true
}
