package engine

import (
	"encoding/binary"
	"hash/maphash"
	"math"
	"sync"
)

// Kind bytes: the first byte of every Pebble key (see the package doc).
const (
	kindInternal byte = 'i'
	kindBucket   byte = 'b'
	kindMeta     byte = 'm'
	kindItem     byte = 'k'
	kindExpiry   byte = 'x'
	kindFlush    byte = 'f'
)

const (
	// bucketPrefixLen is kind byte + bucket ID.
	bucketPrefixLen = 1 + 4
	// expiryPrefixLen is kind byte + bucket ID + expiry.
	expiryPrefixLen = bucketPrefixLen + 4
	// headerLen is the item record header: flags, expiry, cas.
	headerLen = 4 + 4 + 8
	// maxBucketNameLen bounds bucket names.
	maxBucketNameLen = 100
	// maxDigits is the length of the longest decimal uint64 (2^64-1).
	maxDigits = 20
)

// keyNextBucketID is the internal record holding the next bucket ID.
var keyNextBucketID = []byte{kindInternal, 'n', 'e', 'x', 't', '_', 'b', 'u', 'c', 'k', 'e', 't', '_', 'i', 'd'}

// header is the fixed part of an item record.
type header struct {
	flags  uint32
	expiry uint32
	cas    uint64
	state  uint8 // stateStale, stateTokenSent
}

// The meta protocol's item states, memcached's ITEM_STALE and
// ITEM_TOKEN_SENT (see Bucket.Lease). They ride in the top two bits of the
// record's CAS word: CAS values count up from the wall clock in
// nanoseconds (DB.nextCAS), below 2^62 until the year 2116, so the record
// keeps its layout and a store written before these states existed reads
// as having none.
const (
	stateStale     uint8 = 1 << 0 // invalidated (md I, ms I): served with X until replaced
	stateTokenSent uint8 = 1 << 1 // a win token (W) was handed out: others see Z
	stateShift           = 62
	casMask              = 1<<stateShift - 1
)

// item is the Item of this header with value v.
func (h header) item(v []byte) Item {
	return Item{Flags: h.flags, Expiry: h.expiry, CAS: h.cas, Value: v,
		Stale: h.state&stateStale != 0, TokenSent: h.state&stateTokenSent != 0}
}

// live reports whether an item with this header is visible at now.
func (h header) live(now uint32) bool {
	return h.expiry == 0 || h.expiry > now
}

func (h header) put(dst []byte) {
	binary.BigEndian.PutUint32(dst[0:4], h.flags)
	binary.BigEndian.PutUint32(dst[4:8], h.expiry)
	binary.BigEndian.PutUint64(dst[8:16], h.cas&casMask|uint64(h.state)<<stateShift)
}

// decodeRecord splits an item record into header and value.
func decodeRecord(rec []byte) (header, []byte, bool) {
	if len(rec) < headerLen {
		return header{}, nil, false
	}
	word := binary.BigEndian.Uint64(rec[8:16])
	h := header{
		flags:  binary.BigEndian.Uint32(rec[0:4]),
		expiry: binary.BigEndian.Uint32(rec[4:8]),
		cas:    word & casMask,
		state:  uint8(word >> stateShift),
	}
	return h, rec[headerLen:], true
}

// appendBucketPrefix appends kind ‖ id.
func appendBucketPrefix(dst []byte, kind byte, id uint32) []byte {
	dst = append(dst, kind)
	return binary.BigEndian.AppendUint32(dst, id)
}

// appendItemKey appends the item key of key in bucket id.
func appendItemKey(dst []byte, id uint32, key []byte) []byte {
	return append(appendBucketPrefix(dst, kindItem, id), key...)
}

// putExpiryKey writes the expiry index key into dst, which must be exactly
// expiryPrefixLen+len(key) long.
func putExpiryKey(dst []byte, id, expiry uint32, key []byte) {
	dst[0] = kindExpiry
	binary.BigEndian.PutUint32(dst[1:5], id)
	binary.BigEndian.PutUint32(dst[5:9], expiry)
	copy(dst[expiryPrefixLen:], key)
}

// decodeExpiryKey returns the expiry and user key of an index key.
func decodeExpiryKey(k []byte) (expiry uint32, key []byte, ok bool) {
	if len(k) < expiryPrefixLen || k[0] != kindExpiry {
		return 0, nil, false
	}
	return binary.BigEndian.Uint32(k[5:9]), k[expiryPrefixLen:], true
}

// bucketRange returns [start, end) covering every key of kind in bucket id.
func bucketRange(kind byte, id uint32) (start, end []byte) {
	start = appendBucketPrefix(nil, kind, id)
	if id == math.MaxUint32 {
		return start, []byte{kind + 1}
	}
	return start, appendBucketPrefix(nil, kind, id+1)
}

// expiredRange returns [start, end) covering the index entries of bucket id
// whose expiry is in [1, now].
func expiredRange(id, now uint32) (start, end []byte) {
	start = binary.BigEndian.AppendUint32(appendBucketPrefix(nil, kindExpiry, id), 1)
	if now == math.MaxUint32 {
		_, end = bucketRange(kindExpiry, id)
		return start, end
	}
	end = binary.BigEndian.AppendUint32(appendBucketPrefix(nil, kindExpiry, id), now+1)
	return start, end
}

func bucketKey(name string) []byte {
	return append([]byte{kindBucket}, name...)
}

func metaKey(key string) []byte {
	return append([]byte{kindMeta}, key...)
}

// validBucketName reports whether name is 1–100 bytes of [A-Za-z0-9_.%-].
func validBucketName(name string) bool {
	if len(name) == 0 || len(name) > maxBucketNameLen {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
			c == '_' || c == '.' || c == '%' || c == '-'
		if !ok {
			return false
		}
	}
	return true
}

// parseUint parses a counter value the way memcached 1.6's
// safe_strtoull does: optional leading C white space, an optional sign, at
// least one decimal digit (any number of them, leading zeros included) with
// a magnitude that fits in uint64, then the end of the value, a white space
// or a NUL byte (anything may follow those). A '-' negates as strtoull does
// and is refused when the result is negative as an int64 ("-0" is 0, "-1"
// is refused).
func parseUint(v []byte) (uint64, bool) {
	i := 0
	for i < len(v) && isCSpace(v[i]) {
		i++
	}
	neg := i < len(v) && v[i] == '-'
	if i < len(v) && (v[i] == '+' || v[i] == '-') {
		i++
	}
	start, overflow := i, false
	var n uint64
	for ; i < len(v) && v[i] >= '0' && v[i] <= '9'; i++ {
		d := uint64(v[i] - '0')
		if n > (math.MaxUint64-d)/10 {
			overflow = true
		}
		n = n*10 + d
	}
	if i == start || overflow || i < len(v) && !isCSpace(v[i]) && v[i] != 0 {
		return 0, false
	}
	if neg {
		n = -n
		if int64(n) < 0 {
			return 0, false
		}
	}
	return n, true
}

// isCSpace is C's isspace in the "C" locale.
func isCSpace(c byte) bool {
	return c == ' ' || c >= '\t' && c <= '\r'
}

// keyBuf is a pooled scratch buffer for encoding Pebble keys.
type keyBuf struct{ b []byte }

var keyBufPool = sync.Pool{New: func() any { return &keyBuf{b: make([]byte, 0, 320)} }}

func getKeyBuf() *keyBuf { return keyBufPool.Get().(*keyBuf) }

func putKeyBuf(kb *keyBuf) {
	if cap(kb.b) > 64<<10 {
		return // do not keep buffers grown by huge keys
	}
	kb.b = kb.b[:0]
	keyBufPool.Put(kb)
}

// numStripes is the number of per-key mutexes; a power of two.
const numStripes = 1024

// stripe is a mutex padded to its own cache line pair.
type stripe struct {
	sync.Mutex
	_ [128 - 8]byte
}

// stripes serialises read-modify-write operations per (bucket, key).
type stripes struct {
	seed maphash.Seed
	mu   [numStripes]stripe
}

// lock locks and returns the stripe of key in bucket id.
func (s *stripes) lock(id uint32, key []byte) *stripe {
	h := maphash.Bytes(s.seed, key) ^ uint64(id)*0x9e3779b97f4a7c15
	m := &s.mu[h&(numStripes-1)]
	m.Lock()
	return m
}
