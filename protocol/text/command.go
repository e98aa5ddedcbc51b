package text

import (
	"errors"
	"fmt"
)

// Errors. Every protocol error Decode returns is an *Error that wraps one of
// these, so callers can classify it with errors.Is.
var (
	// ErrUnknownCommand: the line names no command memcached knows, or a
	// known command with a token count memcached refuses ("ERROR").
	ErrUnknownCommand = errors.New("text: unknown command")
	// ErrClient: the command is malformed ("CLIENT_ERROR <reason>").
	ErrClient = errors.New("text: client error")
	// ErrTooLarge: a value is over the caller's item size limit
	// ("SERVER_ERROR object too large for cache"; the data is swallowed).
	ErrTooLarge = errors.New("text: object too large")
	// ErrNoMemory: the server has no room for a value whose data block is
	// coming ("SERVER_ERROR out of memory storing object"; swallowed).
	ErrNoMemory = errors.New("text: out of memory")
	// ErrLineTooLong: no newline within the line limit; the connection must
	// be closed without a reply, as memcached does.
	ErrLineTooLong = errors.New("text: line too long")
	// ErrBadOptions: DecodeOptions.Validate refused the options.
	ErrBadOptions = errors.New("text: bad options")
)

// Error is a protocol error: the exact line memcached sends for it, whether
// memcached closes the connection afterwards, and how many bytes past the
// decoded line the caller must discard (the data block of a refused storage
// command; it may not have arrived yet).
type Error struct {
	Reply   []byte // the reply line with its "\r\n"; empty: send nothing (classic noreply, or a silent close)
	Close   bool   // close the connection after sending Reply
	Swallow int    // bytes after the consumed line to discard, possibly across reads
	Unlink  bool   // delete the command's key: memcached drops the old item of a too-large set
	kind    error
}

func (e *Error) Error() string {
	if len(e.Reply) == 0 {
		return e.kind.Error()
	}
	return fmt.Sprintf("%v: %q", e.kind, e.Reply[:len(e.Reply)-2])
}

// Unwrap returns the sentinel that classifies the error.
func (e *Error) Unwrap() error { return e.kind }

// Kind is the command a line names.
type Kind uint8

// Command kinds. The classic commands come first, then the meta commands.
const (
	KindNone Kind = iota
	KindGet
	KindGets
	KindGat
	KindGats
	KindSet
	KindAdd
	KindReplace
	KindAppend
	KindPrepend
	KindCas
	KindDelete
	KindIncr
	KindDecr
	KindTouch
	KindFlushAll
	KindVersion
	KindVerbosity
	KindQuit
	KindStats
	KindMetaGet        // mg
	KindMetaSet        // ms
	KindMetaDelete     // md
	KindMetaArithmetic // ma
	KindMetaNoop       // mn
	KindMetaDebug      // me
	KindDump           // stats cachedump, lru_crawler metadump: Keys are "cachedump" or "metadump" and the arguments
)

var kindNames = [...]string{"none", "get", "gets", "gat", "gats", "set", "add", "replace",
	"append", "prepend", "cas", "delete", "incr", "decr", "touch", "flush_all", "version",
	"verbosity", "quit", "stats", "mg", "ms", "md", "ma", "mn", "me", "dump"}

func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Meta reports whether k is a meta command.
func (k Kind) Meta() bool { return k >= KindMetaGet && k <= KindMetaDebug }

// Storage reports whether k carries a data block.
func (k Kind) Storage() bool { return k >= KindSet && k <= KindCas || k == KindMetaSet }

// Retrieval reports whether k is one of the multi-key classic reads.
func (k Kind) Retrieval() bool { return k >= KindGet && k <= KindGats }

// Mode letters of ms and ma (the M flag).
const (
	ModeSet       byte = 'S' // ms default
	ModeAdd       byte = 'E'
	ModeAppend    byte = 'A'
	ModePrepend   byte = 'P'
	ModeReplace   byte = 'R'
	ModeIncrement byte = 'I' // ma default; also '+'
	ModeDecrement byte = 'D' // also '-'
)

// Limits memcached applies.
const (
	MaxKeyLen    = 250 // KEY_MAX_LENGTH
	MaxLineLen   = 2048
	MaxOpaqueLen = 32
	maxMetaFlags = 24 // MAX_TOKENS
	inlineKeys   = 24
)

// Meta is the parsed flag set of a meta command. Flags that take a token
// have a Has… boolean when absence and zero differ.
type Meta struct {
	Base64     bool   // b: the key was base64; Command.Key holds the decoded bytes
	RawKey     []byte // the key token as sent (base64 form when Base64)
	Opaque     []byte // O: the token after 'O', echoed as "O<token>"
	Quiet      bool   // q
	NoBump     bool   // u
	Value      bool   // v: return the value (mg, ma)
	Mode       byte   // M: one of the Mode… letters, normalized ('+' → 'I', '-' → 'D'); 0 if absent
	Flags      uint32 // F (ms)
	HasFlags   bool
	TTL        int64 // T
	HasTTL     bool
	Vivify     int64 // N: TTL of the item created on a miss (mg, ma)
	HasViv     bool
	Recache    int64 // R (mg)
	HasRecache bool
	// RecacheFirst: R came before any T (memcached applies mg's flags in
	// request order, so R then judges the TTL T has not changed yet).
	RecacheFirst bool
	CAS          uint64 // C: compare CAS
	HasCAS       bool
	Initial      uint64 // J (ma), default 0
	Delta        uint64 // D (ma), default 1
	Invalidate   bool   // I

	ret  [maxMetaFlags]byte // return flags in request order (c f h k l O s t b)
	nret uint8
	seen uint64 // bit per flag letter, for duplicate detection
}

// Returns reports the return flags in the order the request gave them;
// the reply emits them in that order.
func (m *Meta) Returns() []byte { return m.ret[:m.nret] }

// Wants reports whether the request asked for return flag c.
func (m *Meta) Wants(c byte) bool {
	for _, r := range m.ret[:m.nret] {
		if r == c {
			return true
		}
	}
	return false
}

// Command is one decoded command. Byte slices are views into the buffer
// passed to Decode (or into the Command itself for base64 keys) and are valid
// until that buffer is reused. A Command is meant to be reused: Decode resets
// it and keeps the Keys backing array, so decoding allocates nothing once the
// array has grown to the most stats arguments seen.
type Command struct {
	Kind Kind
	Key  []byte // the key (the first key of a multi-get)
	// Keys are a multi-get's (get/gets/gat/gats) first keys, up to 24 (all
	// of them are in Line: FirstKey, Token), and the stats group arguments.
	Keys    [][]byte
	NKeys   int    // get/gets/gat/gats: the number of keys
	Flags   uint32 // client flags (storage commands)
	Exptime int64  // storage/touch/gat exptime, flush_all delay
	CAS     uint64 // cas unique
	Delta   uint64 // incr/decr
	Value   []byte // data block, without its "\r\n"
	Line    []byte // the command line as tokenized (without "\r\n"; cut at a NUL)
	Level   uint64 // verbosity level
	NoReply bool   // classic noreply
	HasArg  bool   // flush_all: a delay was given
	Meta    Meta

	declared int // data length the line declared
	keys     [inlineKeys][]byte
	keyBuf   [MaxKeyLen]byte // decoded base64 key
	err      Error
}

// reset clears the fields Decode sets, keeping the Keys backing array and
// leaving the scratch arrays (inline keys, base64 key) as they are.
func (c *Command) reset() {
	keys := c.Keys[:0]
	if cap(keys) == 0 {
		keys = c.keys[:0]
	}
	c.Kind, c.Key, c.Keys, c.NKeys, c.Value, c.Line = KindNone, nil, keys, 0, nil, nil
	c.Flags, c.Exptime, c.CAS, c.Delta, c.Level = 0, 0, 0, 0, 0
	c.NoReply, c.HasArg, c.declared = false, false, 0
	c.Meta = Meta{}
	c.err = Error{}
}

// DataLen is the data block length the line of a storage command declared.
// After Decode returned 0 for a complete storage line, the command needs
// the line, DataLen bytes and "\r\n" in the buffer: a caller that peeks
// its input piecewise learns from it how much to wait for.
func (c *Command) DataLen() int { return c.declared }

// DecodeOptions are the limits Decode applies.
type DecodeOptions struct {
	// MaxValue is the largest data block accepted; larger is answered
	// "SERVER_ERROR object too large for cache" and swallowed. Default 1 MiB.
	MaxValue int
	// MaxGetLine bounds a get/gets line, which memcached lets grow past
	// MaxLineLen (its large multi-gets). Default 1 MiB.
	MaxGetLine int
}

// Defaults for DecodeOptions.
const (
	DefaultMaxValue   = 1 << 20
	DefaultMaxGetLine = 1 << 20
)

// EnsureDefaults fills zero fields with their defaults.
func (o *DecodeOptions) EnsureDefaults() {
	if o.MaxValue == 0 {
		o.MaxValue = DefaultMaxValue
	}
	if o.MaxGetLine == 0 {
		o.MaxGetLine = DefaultMaxGetLine
	}
}

// Validate reports options Decode cannot work with.
func (o *DecodeOptions) Validate() error {
	if o.MaxValue < 0 || o.MaxValue > 1<<31-3 {
		return fmt.Errorf("%w: MaxValue %d out of range [0, 2^31-3]", ErrBadOptions, o.MaxValue)
	}
	if o.MaxGetLine < MaxLineLen {
		return fmt.Errorf("%w: MaxGetLine %d below %d", ErrBadOptions, o.MaxGetLine, MaxLineLen)
	}
	return nil
}
