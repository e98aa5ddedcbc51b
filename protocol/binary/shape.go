package binary

import (
	ebin "encoding/binary"
	"fmt"
	"math/bits"
	"strconv"
	"strings"
)

// rule says what one part of a request body (key or value) may hold.
type rule uint8

const (
	forbidden  rule = iota // must be empty
	required               // must not be empty
	optional               // anything
	evenLength             // any length that is a multiple of two (HELLO's u16 features)
)

// shape is the legal layout of one opcode's body. extras is a set of legal
// extras lengths: bit n set means n bytes are legal. No opcode takes 32 bytes
// of extras or more.
type shape struct {
	extras   uint32
	key      rule
	value    rule
	maxValue int // > 0: the value's largest length (MaxSmallValue); 0: the item size bounds it
}

// MaxSmallValue bounds the value of every command that takes one but is
// not a storage command: HELLO's features, SASL credentials, the admin
// commands' JSON (which kvd caps at 1 KiB). A header that announces more
// is refused at once (ValueBounded), so that a frame that can never be
// valid holds no memory while its body arrives.
const MaxSmallValue = 4096

// The shapes, named after the commands that use them. They follow memcached
// 1.6's dispatch_bin_command, checked against the real server: every frame
// memcached answers with 0x04 Invalid arguments, CheckShape rejects (the
// golden transcript test enforces this). Where memcached accepts nonsense
// (TOUCH with a value, which it then misparses as part of the key and loses
// the stream), kvd is stricter.
var (
	getShape          = shape{extras: 1 << 0, key: required, value: forbidden}                           // GET GETQ GETK GETKQ
	storeShape        = shape{extras: 1 << 8, key: required, value: optional}                            // SET ADD REPLACE (+Q): flags, expiry
	deleteShape       = shape{extras: 1 << 0, key: required, value: forbidden}                           // DELETE DELETEQ
	arithShape        = shape{extras: 1 << 20, key: required, value: forbidden}                          // INCR DECR (+Q): delta, initial, expiry
	emptyShape        = shape{extras: 1 << 0, key: forbidden, value: forbidden}                          // QUIT NOOP VERSION SASL_LIST_MECHS LIST_BUCKETS
	flushShape        = shape{extras: 1<<0 | 1<<4, key: forbidden, value: forbidden}                     // FLUSH FLUSHQ: optional delay
	concatShape       = shape{extras: 1 << 0, key: required, value: optional}                            // APPEND PREPEND (+Q)
	statShape         = shape{extras: 1 << 0, key: optional, value: forbidden}                           // STAT [group]
	verbosityShape    = shape{extras: 1 << 4, key: forbidden, value: forbidden}                          // VERBOSITY level
	touchShape        = shape{extras: 1 << 4, key: required, value: forbidden}                           // TOUCH GAT GATQ GATK GATKQ: expiry
	helloShape        = shape{extras: 1 << 0, key: optional, value: evenLength, maxValue: MaxSmallValue} // HELLO agent, u16 features
	saslAuthShape     = shape{extras: 1 << 0, key: required, value: optional, maxValue: MaxSmallValue}   // SASL_AUTH mechanism, challenge
	keyedAdminShape   = shape{extras: 1 << 0, key: required, value: optional, maxValue: MaxSmallValue}   // bucket name, optional JSON
	unkeyedAdminShape = shape{extras: 1 << 0, key: forbidden, value: optional, maxValue: MaxSmallValue}  // SetNodeThrottleProperties JSON
	selectShape       = shape{extras: 1 << 0, key: required, value: forbidden}                           // SELECT_BUCKET name
)

// CheckShape reports whether the extras, key and value lengths of req are
// legal for req.Opcode, by memcached's rules. It returns nil, or an error
// wrapping ErrInvalidShape whose text says what is wrong, e.g.
// "binary: invalid arguments: GET must not have extras"; the server answers
// it with StatusInvalidArguments. Keys longer than MaxKeyLen are invalid for
// every opcode, as in memcached. Unknown opcodes are not this function's
// business: it returns nil and the server answers StatusUnknownCommand.
//
// CheckShape does not look at the datatype, CAS, vbucket or frame infos, and
// does not allocate unless it returns an error.
func CheckShape(req *Request) error {
	return checkLens(req.Opcode, len(req.Extras), len(req.Key), len(req.Value))
}

// CheckHeaderShape is CheckShape on the lengths a request's header
// declares, for answering a frame before its body has arrived (as
// memcached checks them before it reads a value). hdr must hold at least
// HeaderLen bytes whose lengths are consistent (PeekRequest's valueLen ≥ 0).
func CheckHeaderShape(hdr []byte) error {
	h := readHeader(hdr, hdr[0] == MagicAltRequest)
	return checkLens(Opcode(h.opcode), int(h.extLen), int(h.keyLen),
		int(h.body)-int(h.frameLen)-int(h.extLen)-int(h.keyLen))
}

// checkLens is CheckShape on the parts' lengths.
func checkLens(op Opcode, extras, key, value int) error {
	info := &opTable[op]
	if !info.known {
		return nil
	}
	s := info.shape
	if extras >= 32 || s.extras&(1<<extras) == 0 {
		return extrasError(op, s.extras, extras)
	}
	if err := s.key.check(op, "key", key); err != nil {
		return err
	}
	if key > MaxKeyLen {
		return fmt.Errorf("%w: %v key is %d bytes, limit %d", ErrInvalidShape, op, key, MaxKeyLen)
	}
	if s.maxValue > 0 && value > s.maxValue {
		return fmt.Errorf("%w: %v value is %d bytes, limit %d", ErrInvalidShape, op, value, s.maxValue)
	}
	return s.value.check(op, "value", value)
}

// ValueBounded reports whether op is a known command that takes no value
// (GET, DELETE, NOOP, …) or at most MaxSmallValue bytes of one (HELLO,
// SASL_AUTH, the admin commands): a header announcing more is refused at
// once.
func ValueBounded(op Opcode) bool {
	s := &opTable[op].shape
	return opTable[op].known && (s.value == forbidden || s.maxValue > 0)
}

// check applies r to a part of n bytes called what.
func (r rule) check(op Opcode, what string, n int) error {
	switch {
	case r == forbidden && n != 0:
		return fmt.Errorf("%w: %v must not have a %s", ErrInvalidShape, op, what)
	case r == required && n == 0:
		return fmt.Errorf("%w: %v needs a %s", ErrInvalidShape, op, what)
	case r == evenLength && n%2 != 0:
		return fmt.Errorf("%w: %v %s length must be even, got %d bytes", ErrInvalidShape, op, what, n)
	}
	return nil
}

// extrasError describes an extras length of n bytes that is not in the set
// legal.
func extrasError(op Opcode, legal uint32, n int) error {
	if legal == 1<<0 {
		return fmt.Errorf("%w: %v must not have extras", ErrInvalidShape, op)
	}
	var want []string
	for m := legal; m != 0; m &= m - 1 {
		want = append(want, strconv.Itoa(bits.TrailingZeros32(m)))
	}
	return fmt.Errorf("%w: %v needs %s bytes of extras, got %d", ErrInvalidShape, op, strings.Join(want, " or "), n)
}

// Extras lengths of the commands that have fixed extras.
const (
	SetExtrasLen   = 8  // SET, ADD, REPLACE (+Q): flags u32, expiry u32
	ArithExtrasLen = 20 // INCR, DECR (+Q): delta u64, initial u64, expiry u32
	TouchExtrasLen = 4  // TOUCH, GAT, GATQ, GATK, GATKQ: expiry u32
)

// SetExtras decodes the extras of SET, ADD and REPLACE: flags, expiry.
// ok is false unless ex is exactly 8 bytes.
func SetExtras(ex []byte) (flags, expiry uint32, ok bool) {
	if len(ex) != SetExtrasLen {
		return 0, 0, false
	}
	return ebin.BigEndian.Uint32(ex), ebin.BigEndian.Uint32(ex[4:]), true
}

// ArithExtras decodes the extras of INCR and DECR: delta, initial value and
// expiry (0xffffffff: fail with StatusKeyNotFound instead of creating).
// ok is false unless ex is exactly 20 bytes.
func ArithExtras(ex []byte) (delta, initial uint64, expiry uint32, ok bool) {
	if len(ex) != ArithExtrasLen {
		return 0, 0, 0, false
	}
	return ebin.BigEndian.Uint64(ex), ebin.BigEndian.Uint64(ex[8:]), ebin.BigEndian.Uint32(ex[16:]), true
}

// TouchExtras decodes the extras of TOUCH, GAT, GATQ, GATK and GATKQ: the
// new expiry.
// ok is false unless ex is exactly 4 bytes.
func TouchExtras(ex []byte) (expiry uint32, ok bool) {
	if len(ex) != TouchExtrasLen {
		return 0, false
	}
	return ebin.BigEndian.Uint32(ex), true
}

// FlushExtras decodes the optional extras of FLUSH: a delay in seconds, 0
// when ex is empty. ok is false unless ex is 0 or 4 bytes.
func FlushExtras(ex []byte) (delay uint32, ok bool) {
	switch len(ex) {
	case 0:
		return 0, true
	case 4:
		return ebin.BigEndian.Uint32(ex), true
	}
	return 0, false
}

// VerbosityExtras decodes the extras of VERBOSITY: the level. ok is false
// unless ex is exactly 4 bytes.
func VerbosityExtras(ex []byte) (level uint32, ok bool) {
	if len(ex) != 4 {
		return 0, false
	}
	return ebin.BigEndian.Uint32(ex), true
}

// AppendSetExtras appends SET/ADD/REPLACE extras (flags, expiry) to dst; GET
// responses carry the flags alone (AppendUint32).
func AppendSetExtras(dst []byte, flags, expiry uint32) []byte {
	return ebin.BigEndian.AppendUint32(ebin.BigEndian.AppendUint32(dst, flags), expiry)
}

// AppendArithExtras appends INCR/DECR extras (delta, initial, expiry) to dst.
func AppendArithExtras(dst []byte, delta, initial uint64, expiry uint32) []byte {
	dst = ebin.BigEndian.AppendUint64(dst, delta)
	dst = ebin.BigEndian.AppendUint64(dst, initial)
	return ebin.BigEndian.AppendUint32(dst, expiry)
}

// AppendUint16 appends v big-endian (HELLO features).
func AppendUint16(dst []byte, v uint16) []byte { return ebin.BigEndian.AppendUint16(dst, v) }

// AppendUint32 appends v big-endian (GET response flags, TOUCH expiry).
func AppendUint32(dst []byte, v uint32) []byte { return ebin.BigEndian.AppendUint32(dst, v) }

// AppendUint64 appends v big-endian (INCR/DECR response value).
func AppendUint64(dst []byte, v uint64) []byte { return ebin.BigEndian.AppendUint64(dst, v) }

// CheckFrameInfos validates an alt request's frame infos for a server that
// executes every connection's commands in order: 0 (barrier) is accepted,
// the other known ids (1–5) are not supported, anything else is unknown.
// It returns StatusOK or the status and reason to answer.
func CheckFrameInfos(req *Request) (Status, string) {
	fi := req.FrameInfo
	for len(fi) > 0 {
		id, _, rest, err := NextFrameInfo(fi)
		if err != nil {
			return StatusInvalidArguments, err.Error()
		}
		switch {
		case id == 0:
		case id <= 5:
			return StatusNotSupported, "frame info not supported"
		default:
			return StatusUnknownFrameInfo, "unknown frame info"
		}
		fi = rest
	}
	return StatusOK, ""
}
