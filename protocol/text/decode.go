package text

import (
	"bytes"
)

// Replies of protocol errors, exactly as memcached 1.6 words them.
var (
	replyError         = []byte("ERROR\r\n")
	replyBadFormat     = []byte("CLIENT_ERROR bad command line format\r\n")
	replyBadChunk      = []byte("CLIENT_ERROR bad data chunk\r\n")
	replyTooLarge      = []byte("SERVER_ERROR object too large for cache\r\n")
	replyNoMemory      = []byte("SERVER_ERROR out of memory storing object\r\n")
	replyBadDelta      = []byte("CLIENT_ERROR invalid numeric delta argument\r\n")
	replyBadExptime    = []byte("CLIENT_ERROR invalid exptime argument\r\n")
	replyDeleteUsage   = []byte("CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]\r\n")
	replyInvalidFlag   = []byte("CLIENT_ERROR invalid flag\r\n")
	replyDuplicateFlag = []byte("CLIENT_ERROR duplicate flag\r\n")
	replyBadToken      = []byte("CLIENT_ERROR bad token in command line format\r\n")
	replyOpaqueTooLong = []byte("CLIENT_ERROR opaque token too long\r\n")
	replyBadKey        = []byte("CLIENT_ERROR error decoding key\r\n")
	replyModeLen       = []byte("CLIENT_ERROR incorrect length for M token\r\n")
	replyMsMode        = []byte("CLIENT_ERROR invalid mode for ms M token\r\n")
	replyMaMode        = []byte("CLIENT_ERROR invalid mode for ma M token\r\n")
	replyBadInitial    = []byte("CLIENT_ERROR invalid numeric initial value\r\n")
	replyBadDeltaValue = []byte("CLIENT_ERROR invalid numeric delta value\r\n")
)

// maxTokens is memcached's MAX_TOKENS: a line is split into at most
// maxTokens-1 tokens; whatever follows is left in rest.
const maxTokens = 24

// tokens is a line split on spaces the way memcached's tokenize_command
// splits it: runs of spaces separate, leading spaces are skipped.
type tokens struct {
	t    [maxTokens - 1][]byte
	n    int
	rest []byte // the unsplit remainder when the line had more tokens
}

func (tk *tokens) split(line []byte) {
	tk.n, tk.rest = 0, nil
	for len(line) > 0 {
		for len(line) > 0 && line[0] == ' ' {
			line = line[1:]
		}
		if len(line) == 0 {
			return
		}
		if tk.n == len(tk.t) {
			tk.rest = line
			return
		}
		end := bytes.IndexByte(line, ' ')
		if end < 0 {
			end = len(line)
		}
		tk.t[tk.n] = line[:end:end]
		tk.n++
		line = line[end:]
	}
}

// lineAt is the line Decode tokenizes at the front of buf, whose newline
// is at nl: without the newline, a '\r' before it and whatever follows a
// NUL byte (memcached reads the line as a C string).
func lineAt(buf []byte, nl int) []byte {
	line := buf[:nl]
	if len(line) > 1 && line[len(line)-1] == '\r' {
		line = line[:len(line)-1]
	}
	if z := bytes.IndexByte(line, 0); z >= 0 {
		line = line[:z]
	}
	return line
}

// Token is the token of line at or after byte off, as Decode splits lines
// (runs of spaces separate), and the offset just past it; nil at the end.
func Token(line []byte, off int) (tok []byte, end int) {
	for off < len(line) && line[off] == ' ' {
		off++
	}
	end = off + bytes.IndexByte(line[off:], ' ')
	if end < off {
		end = len(line)
	}
	if end == off {
		return nil, end
	}
	return line[off:end:end], end
}

// FirstKey is the offset in line of the first key of the multi-get of kind
// k (a get, gets, gat or gats line): past the command, and gat's exptime.
func FirstKey(line []byte, k Kind) int {
	_, off := Token(line, 0)
	if k == KindGat || k == KindGats {
		_, off = Token(line, off)
	}
	return off
}

// ntokens is memcached's count: the tokens plus the terminal one.
func (tk *tokens) ntokens() int { return tk.n + 1 }

// last reports whether the last token is "noreply" (set_noreply_maybe).
func (tk *tokens) noreply() bool {
	return tk.n > 0 && string(tk.t[tk.n-1]) == "noreply"
}

// Decode decodes one command from the front of buf into cmd. It returns the
// number of bytes consumed; 0 with a nil error means buf holds no complete
// command yet. A non-nil error is an *Error (owned by cmd, valid until the
// next Decode): send its Reply, skip n bytes and then Swallow more, and close
// the connection if it says so. Decode never allocates once cmd.Keys has
// grown to the largest multi-get seen.
func Decode(buf []byte, opts DecodeOptions, cmd *Command) (int, error) {
	cmd.reset()
	nl := bytes.IndexByte(buf, '\n')
	if nl < 0 {
		return 0, cmd.checkUnterminated(buf, opts)
	}
	line, n := lineAt(buf, nl), nl+1
	cmd.Line = line
	var tk tokens
	tk.split(line)
	if e := cmd.parse(&tk); e != nil {
		return n, e
	}
	if !cmd.Kind.Storage() {
		return n, nil
	}
	return cmd.data(buf, n, opts)
}

// checkUnterminated applies memcached's rule for a line without a newline:
// past MaxLineLen bytes the connection is closed, unless the line is a
// get/gets (large multi-gets), which may grow to MaxGetLine.
func (c *Command) checkUnterminated(buf []byte, opts DecodeOptions) error {
	if len(buf) <= MaxLineLen {
		return nil
	}
	if opts.MaxGetLine == 0 {
		opts.MaxGetLine = DefaultMaxGetLine
	}
	head := buf[:min(len(buf), 200)]
	p := bytes.TrimLeft(head, " ")
	getLike := len(head)-len(p) <= 100 && (bytes.HasPrefix(p, []byte("get ")) || bytes.HasPrefix(p, []byte("gets ")))
	if getLike && len(buf) <= opts.MaxGetLine {
		return nil
	}
	return c.fail(ErrLineTooLong, nil, true)
}

// data takes the data block of a storage command whose line ends at n.
func (c *Command) data(buf []byte, n int, opts DecodeOptions) (int, error) {
	vlen := c.declared
	if opts.MaxValue == 0 {
		opts.MaxValue = DefaultMaxValue
	}
	if vlen > opts.MaxValue {
		e := c.fail(ErrTooLarge, replyTooLarge, false)
		c.err.Swallow = vlen + 2
		c.err.Unlink = c.Kind == KindSet || c.Kind == KindMetaSet
		c.quietClassic()
		return n, e
	}
	if len(buf)-n < vlen+2 {
		return 0, nil
	}
	block := buf[n : n+vlen+2]
	if block[vlen] != '\r' || block[vlen+1] != '\n' {
		e := c.fail(ErrClient, replyBadChunk, false)
		c.quietClassic()
		return n + vlen + 2, e
	}
	c.Value = block[:vlen:vlen]
	return n + vlen + 2, nil
}

// quietClassic drops the reply of an error under classic noreply, as
// memcached's out_string does.
// NoMemory is the refusal of storage command c, decoded up to its data
// block, when the server has no room for its value: memcached's line
// (none for a classic noreply), the data block and its "\r\n" swallowed.
func NoMemory(c *Command) *Error {
	e := c.fail(ErrNoMemory, replyNoMemory, false)
	e.Swallow = c.DataLen() + 2
	c.quietClassic()
	return e
}

func (c *Command) quietClassic() {
	if c.NoReply && !c.Kind.Meta() {
		c.err.Reply = nil
	}
}

func (c *Command) fail(kind error, reply []byte, close bool) *Error {
	c.err = Error{Reply: reply, Close: close, kind: kind}
	return &c.err
}

// failClassic is fail for classic commands: noreply silences the reply.
func (c *Command) failClassic(kind error, reply []byte) *Error {
	e := c.fail(kind, reply, false)
	c.quietClassic()
	return e
}

func (c *Command) unknown() *Error { return c.fail(ErrUnknownCommand, replyError, false) }

// parse dispatches on the command token, as process_command_ascii does.
func (c *Command) parse(tk *tokens) *Error {
	if tk.n == 0 {
		return c.unknown()
	}
	nt := tk.ntokens()
	name := tk.t[0]
	if len(name) == 2 && name[0] == 'm' {
		return c.parseMeta(tk)
	}
	switch string(name) {
	case "get", "gets", "gat", "gats":
		if nt < 3 {
			return c.unknown()
		}
		return c.parseRetrieval(tk)
	case "set", "add", "replace", "append", "prepend":
		if nt != 6 && nt != 7 {
			return c.unknown()
		}
		return c.parseUpdate(tk)
	case "cas":
		if nt != 7 && nt != 8 {
			return c.unknown()
		}
		return c.parseUpdate(tk)
	case "incr", "decr":
		if nt != 4 && nt != 5 {
			return c.unknown()
		}
		return c.parseArithmetic(tk)
	case "delete":
		if nt < 3 || nt > 5 {
			return c.unknown()
		}
		return c.parseDelete(tk)
	case "touch":
		if nt != 4 && nt != 5 {
			return c.unknown()
		}
		return c.parseTouch(tk)
	}
	return c.parseOther(tk)
}

func (c *Command) parseOther(tk *tokens) *Error {
	nt := tk.ntokens()
	switch string(tk.t[0]) {
	case "flush_all":
		if nt < 2 || nt > 4 {
			return c.unknown()
		}
		return c.parseFlush(tk)
	case "version":
		c.Kind = KindVersion
	case "quit":
		c.Kind = KindQuit
	case "verbosity":
		if nt < 3 || nt > 4 {
			return c.unknown()
		}
		return c.parseVerbosity(tk)
	case "stats":
		c.Kind = KindStats
		if nt > 2 && string(tk.t[1]) == "cachedump" {
			c.Kind = KindDump
		}
		c.Keys = append(c.Keys, tk.t[1:tk.n]...)
	case "lru_crawler": // only metadump, of one argument, as memcached's
		if nt != 4 || string(tk.t[1]) != "metadump" {
			return c.unknown()
		}
		c.Kind = KindDump
		c.Keys = append(c.Keys, tk.t[1:tk.n]...)
	default:
		return c.unknown()
	}
	return nil
}

// kindOf names the classic commands whose parsers share code.
func kindOf(name []byte) Kind {
	switch string(name) {
	case "get":
		return KindGet
	case "gets":
		return KindGets
	case "gat":
		return KindGat
	case "gats":
		return KindGats
	case "set":
		return KindSet
	case "add":
		return KindAdd
	case "replace":
		return KindReplace
	case "append":
		return KindAppend
	case "prepend":
		return KindPrepend
	case "cas":
		return KindCas
	case "incr":
		return KindIncr
	case "decr":
		return KindDecr
	}
	return KindNone
}

// parseRetrieval parses get/gets/gat/gats; the keys beyond memcached's
// token window are split from the rest of the line.
func (c *Command) parseRetrieval(tk *tokens) *Error {
	c.Kind = kindOf(tk.t[0])
	first := 1
	if c.Kind == KindGat || c.Kind == KindGats {
		exp, ok := parseInt32(tk.t[1])
		if !ok {
			return c.fail(ErrClient, replyBadExptime, false)
		}
		c.Exptime, first = exp, 2
	}
	if !c.addKeys(tk.t[first:tk.n]) {
		return c.fail(ErrClient, replyBadFormat, false)
	}
	for rest := tk.rest; len(rest) > 0; {
		var more tokens
		more.split(rest)
		if !c.addKeys(more.t[:more.n]) {
			return c.fail(ErrClient, replyBadFormat, false)
		}
		rest = more.rest
	}
	if len(c.Keys) > 0 {
		c.Key = c.Keys[0]
	}
	return nil
}

// addKeys counts the keys of a multi-get in NKeys and keeps the first
// inlineKeys of them in Keys (the rest are taken from Line with Token): a
// line of half a million keys costs no more than its bytes. It reports
// false for a key over MaxKeyLen.
func (c *Command) addKeys(keys [][]byte) bool {
	for _, k := range keys {
		if len(k) > MaxKeyLen {
			return false
		}
		if len(c.Keys) < inlineKeys {
			c.Keys = append(c.Keys, k)
		}
	}
	c.NKeys += len(keys)
	return true
}

// parseUpdate parses set/add/replace/append/prepend/cas; data then reads
// the declared number of bytes.
func (c *Command) parseUpdate(tk *tokens) *Error {
	c.Kind = kindOf(tk.t[0])
	c.NoReply = tk.noreply()
	c.Key = tk.t[1]
	if len(c.Key) > MaxKeyLen {
		return c.failClassic(ErrClient, replyBadFormat)
	}
	flags, okF := parseFlags(tk.t[2])
	exp, okE := parseInt32(tk.t[3])
	vlen, okL := parseInt32(tk.t[4])
	if !okF || !okE || !okL || vlen < 0 || vlen > 1<<31-1-2 {
		return c.failClassic(ErrClient, replyBadFormat)
	}
	if c.Kind == KindCas {
		cas, ok := parseUint64(tk.t[5])
		if !ok {
			return c.failClassic(ErrClient, replyBadFormat)
		}
		c.CAS = cas
	}
	c.Flags, c.Exptime = flags, exp
	c.declared = int(vlen)
	return nil
}

// Line parsers of the classic commands other than retrieval and storage,
// and the number parsers that mirror memcached's safe_strto* helpers.

func (c *Command) parseArithmetic(tk *tokens) *Error {
	c.Kind = kindOf(tk.t[0])
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

// parseDigits reads a number the way memcached's safe_strto* helpers read
// one with strtoull or strtol: leading white space is skipped, an optional
// sign and decimal digits follow, and the number ends at the token's end or
// at white space, after which anything is ignored (memcached splits a line
// on spaces only, so "5\tjunk" is one token, read as 5). ok is false
// without digits, with other trailing bytes, or past 64 bits (ERANGE).
func parseDigits(b []byte) (v uint64, neg, ok bool) {
	for len(b) > 0 && isSpace(b[0]) {
		b = b[1:]
	}
	if len(b) > 0 && (b[0] == '+' || b[0] == '-') {
		neg, b = b[0] == '-', b[1:]
	}
	digits := 0
	for ; digits < len(b) && b[digits] >= '0' && b[digits] <= '9'; digits++ {
		d := uint64(b[digits] - '0')
		if v > (1<<64-1-d)/10 {
			return 0, false, false
		}
		v = v*10 + d
	}
	if digits == 0 || digits < len(b) && !isSpace(b[digits]) {
		return 0, false, false
	}
	return v, neg, true
}

// isSpace is C's isspace in the "C" locale.
func isSpace(ch byte) bool { return ch == ' ' || ch >= '\t' && ch <= '\r' }

// parseUint64 is safe_strtoull: strtoull negates a number after a minus
// sign (modulo 2^64), and memcached refuses the result only when it reads
// as negative in 64 signed bits, so "-0" is 0 and "-18446744073709551615"
// is 1.
func parseUint64(b []byte) (uint64, bool) {
	v, neg, ok := parseDigits(b)
	if neg {
		v = -v
	}
	if !ok || neg && int64(v) < 0 {
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
