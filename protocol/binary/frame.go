package binary

import (
	ebin "encoding/binary"
	"fmt"
	"math"
	"time"
)

// Request is a decoded request frame, or one to encode with AppendRequest.
//
// After DecodeRequest, FrameInfo, Extras, Key and Value are views into the
// buffer passed to DecodeRequest and are valid only as long as that buffer is.
// Empty parts are nil.
type Request struct {
	Magic     uint8 // MagicRequest or MagicAltRequest
	Opcode    Opcode
	Datatype  uint8
	VBucket   uint16
	Opaque    uint32
	CAS       uint64
	FrameInfo []byte // raw framing extras (alt requests only), nil otherwise
	Extras    []byte
	Key       []byte
	Value     []byte
}

// Alt reports whether r uses the alternative framing (magic 0x08), which
// allows frame infos and whose response must use magic 0x18.
func (r *Request) Alt() bool { return r.Magic == MagicAltRequest }

// EncodedLen is the length of AppendRequest's output for r.
func (r *Request) EncodedLen() int {
	return HeaderLen + bodyLen(r.Alt(), r.FrameInfo, r.Extras, r.Key, r.Value)
}

// Response is a response to encode with AppendResponse, or one decoded by
// DecodeResponse (whose FrameInfo, Extras, Key and Value then alias the
// decoded buffer, like a Request's).
type Response struct {
	Magic     uint8 // set by DecodeResponse; ignored by AppendResponse (which takes alt)
	Opcode    Opcode
	Status    Status
	Datatype  uint8
	Opaque    uint32
	CAS       uint64
	FrameInfo []byte // framing extras, sent only with alternative framing
	Extras    []byte
	Key       []byte
	Value     []byte
}

// Alt reports whether r was decoded from an alternative-framing response
// (magic 0x18).
func (r *Response) Alt() bool { return r.Magic == MagicAltResponse }

// EncodedLen is the length of AppendResponse's output for r.
func (r *Response) EncodedLen(alt bool) int {
	return HeaderLen + bodyLen(alt, r.FrameInfo, r.Extras, r.Key, r.Value)
}

// header is the wire header in host form; requests and responses share it.
// word is the vbucket of a request or the status of a response.
type header struct {
	magic, opcode, datatype uint8
	frameLen, extLen        uint8 // frameLen is 0 unless alternative framing
	keyLen                  uint16
	word                    uint16
	body                    uint32
	opaque                  uint32
	cas                     uint64
}

// BodyLen returns the total body length a frame header declares (bytes
// 8..11, big-endian), without checking anything else. hdr must hold at
// least bytes 0..11 of the header. Readers use it to know how much more to
// read once they have the header; DecodeRequest and DecodeResponse check
// the length against their cap.
func BodyLen(hdr []byte) int {
	return int(ebin.BigEndian.Uint32(hdr[8:12]))
}

// FrameLen returns the length of the whole frame whose header starts hdr:
// HeaderLen + BodyLen(hdr).
func FrameLen(hdr []byte) int { return HeaderLen + BodyLen(hdr) }

// PeekRequest reads what a request's header alone says, for answering a
// frame before its body has arrived: req gets the header's fields (no
// parts), and valueLen is the value length the header declares (negative
// when its parts exceed the body). hdr must hold at least HeaderLen bytes.
func PeekRequest(hdr []byte) (req Request, valueLen int) {
	h := readHeader(hdr, hdr[0] == MagicAltRequest)
	req = Request{Magic: h.magic, Opcode: Opcode(h.opcode), Datatype: h.datatype,
		VBucket: h.word, Opaque: h.opaque, CAS: h.cas}
	return req, int(h.body) - int(h.frameLen) - int(h.extLen) - int(h.keyLen)
}

// readHeader parses the first HeaderLen bytes of b; alt selects the
// alternative layout of bytes 2 and 3.
func readHeader(b []byte, alt bool) header {
	h := header{
		magic:    b[0],
		opcode:   b[1],
		extLen:   b[4],
		datatype: b[5],
		word:     ebin.BigEndian.Uint16(b[6:8]),
		body:     ebin.BigEndian.Uint32(b[8:12]),
		opaque:   ebin.BigEndian.Uint32(b[12:16]),
		cas:      ebin.BigEndian.Uint64(b[16:24]),
	}
	if alt {
		h.frameLen, h.keyLen = b[2], uint16(b[3])
	} else {
		h.keyLen = ebin.BigEndian.Uint16(b[2:4])
	}
	return h
}

// frameSize checks h against maxBody and against itself, then reports how
// long the whole frame is, or 0 if buf does not hold all of it yet.
func (h *header) frameSize(buf []byte, maxBody uint32) (int, error) {
	if h.body > maxBody {
		return 0, fmt.Errorf("%w: %v declares %d bytes, limit %d", ErrFrameTooLarge, Opcode(h.opcode), h.body, maxBody)
	}
	if parts := uint32(h.frameLen) + uint32(h.extLen) + uint32(h.keyLen); parts > h.body {
		return 0, fmt.Errorf("%w: %v framing extras %d + extras %d + key %d > body %d",
			ErrBadLengths, Opcode(h.opcode), h.frameLen, h.extLen, h.keyLen, h.body)
	}
	if uint64(len(buf)-HeaderLen) < uint64(h.body) {
		return 0, nil
	}
	return HeaderLen + int(h.body), nil
}

// split cuts the body of frame (a whole frame) into its parts, as capped views.
func (h *header) split(frame []byte) (fi, ex, key, val []byte) {
	off := HeaderLen
	fi, off = view(frame, off, int(h.frameLen))
	ex, off = view(frame, off, int(h.extLen))
	key, off = view(frame, off, int(h.keyLen))
	val, _ = view(frame, off, len(frame)-off)
	return fi, ex, key, val
}

// view returns b[off:off+n] with its capacity capped, or nil when n is 0, and
// the offset after it.
func view(b []byte, off, n int) ([]byte, int) {
	if n == 0 {
		return nil, off
	}
	return b[off : off+n : off+n], off + n
}

// DecodeRequest decodes one request frame from the front of buf.
//
//   - n > 0, err == nil: a whole frame was decoded into *req; n bytes consumed.
//   - n == 0, err == nil: buf holds only part of a frame; call again with more
//     bytes. *req is unspecified.
//   - err != nil: protocol error (bad magic, body over maxBody, inconsistent
//     lengths, all checked from the header alone); the caller answers
//     StatusInvalidArguments if it can and closes. Whenever len(buf) >=
//     HeaderLen, every header field of *req (Magic, Opcode, Datatype, VBucket,
//     Opaque, CAS) is filled so the caller can echo them; the views are nil.
//
// A bad magic is reported as soon as the first byte is present, so that a
// client speaking another protocol (e.g. "get foo\r\n") is rejected at once
// instead of idling until 24 bytes arrive; then only req.Magic is set.
//
// maxBody is the largest total body accepted (pass math.MaxUint32 for no
// limit). DecodeRequest does not allocate unless it returns an error.
func DecodeRequest(buf []byte, maxBody uint32, req *Request) (n int, err error) {
	h, n, err := decode(buf, maxBody, MagicRequest, MagicAltRequest)
	*req = Request{
		Magic: h.magic, Opcode: Opcode(h.opcode), Datatype: h.datatype,
		VBucket: h.word, Opaque: h.opaque, CAS: h.cas,
	}
	if n > 0 {
		req.FrameInfo, req.Extras, req.Key, req.Value = h.split(buf[:n])
	}
	return n, err
}

// DecodeResponse decodes one response frame (magic 0x81 or 0x18) from the
// front of buf, with the same contract as DecodeRequest: on a protocol error
// with len(buf) >= HeaderLen the header fields of *res are filled. It is meant
// for clients, tests and tools.
func DecodeResponse(buf []byte, maxBody uint32, res *Response) (n int, err error) {
	h, n, err := decode(buf, maxBody, MagicResponse, MagicAltResponse)
	*res = Response{
		Magic: h.magic, Opcode: Opcode(h.opcode), Datatype: h.datatype,
		Status: Status(h.word), Opaque: h.opaque, CAS: h.cas,
	}
	if n > 0 {
		res.FrameInfo, res.Extras, res.Key, res.Value = h.split(buf[:n])
	}
	return n, err
}

// decode is the common half of DecodeRequest and DecodeResponse. It returns
// the header (zero while buf is shorter than a header, except for a bad
// magic) and the frame length (0 for a partial frame or an error).
func decode(buf []byte, maxBody uint32, magic, altMagic uint8) (header, int, error) {
	if len(buf) == 0 {
		return header{}, 0, nil
	}
	alt := buf[0] == altMagic
	if !alt && buf[0] != magic {
		h := header{magic: buf[0]}
		if len(buf) >= HeaderLen {
			h = readHeader(buf, false)
		}
		return h, 0, fmt.Errorf("%w: 0x%02x, want 0x%02x or 0x%02x", ErrBadMagic, buf[0], magic, altMagic)
	}
	if len(buf) < HeaderLen {
		return header{}, 0, nil
	}
	h := readHeader(buf, alt)
	n, err := h.frameSize(buf, maxBody)
	return h, n, err
}

// AppendResponse appends r's wire form to dst and returns the extended slice.
// alt selects magic 0x18 with r.FrameInfo as framing extras (use it exactly
// when answering an alt request); with alt false the magic is 0x81 and
// r.FrameInfo is not sent. r.Magic is ignored. It does not allocate when dst
// has r.EncodedLen(alt) bytes of spare capacity.
//
// It panics if a length does not fit the header: extras or (with alt) frame
// infos or key over 255 bytes, a key over 65535 bytes, a body over 4 GiB.
func AppendResponse(dst []byte, alt bool, r *Response) []byte {
	magic := uint8(MagicResponse)
	fi := r.FrameInfo
	if alt {
		magic = MagicAltResponse
	} else {
		fi = nil
	}
	h := makeHeader("AppendResponse", alt, fi, r.Extras, r.Key, r.Value)
	h.magic, h.opcode, h.datatype = magic, uint8(r.Opcode), r.Datatype
	h.word, h.opaque, h.cas = uint16(r.Status), r.Opaque, r.CAS
	return h.appendFrame(dst, alt, fi, r.Extras, r.Key, r.Value)
}

// AppendRequest appends r's wire form to dst: alternative framing (magic 0x08,
// r.FrameInfo as framing extras) when r.Magic is MagicAltRequest, otherwise
// magic 0x80 without frame infos. It is meant for clients, tests and fuzzing,
// and panics on the same impossible lengths as AppendResponse.
func AppendRequest(dst []byte, r *Request) []byte {
	alt := r.Alt()
	magic := uint8(MagicRequest)
	fi := r.FrameInfo
	if alt {
		magic = MagicAltRequest
	} else {
		fi = nil
	}
	h := makeHeader("AppendRequest", alt, fi, r.Extras, r.Key, r.Value)
	h.magic, h.opcode, h.datatype = magic, uint8(r.Opcode), r.Datatype
	h.word, h.opaque, h.cas = r.VBucket, r.Opaque, r.CAS
	return h.appendFrame(dst, alt, fi, r.Extras, r.Key, r.Value)
}

// makeHeader fills the length fields of a header, panicking (in the name of
// fn) on lengths the wire cannot carry.
func makeHeader(fn string, alt bool, fi, ex, key, val []byte) header {
	maxKey := math.MaxUint16
	if alt {
		maxKey = math.MaxUint8
	}
	switch {
	case len(fi) > math.MaxUint8:
		panic(fmt.Sprintf("binary: %s: %d bytes of frame infos, limit 255", fn, len(fi)))
	case len(ex) > math.MaxUint8:
		panic(fmt.Sprintf("binary: %s: %d bytes of extras, limit 255", fn, len(ex)))
	case len(key) > maxKey:
		panic(fmt.Sprintf("binary: %s: key of %d bytes, limit %d", fn, len(key), maxKey))
	case uint64(len(fi))+uint64(len(ex))+uint64(len(key))+uint64(len(val)) > math.MaxUint32:
		panic(fmt.Sprintf("binary: %s: value of %d bytes makes the body exceed 4 GiB", fn, len(val)))
	}
	return header{
		frameLen: uint8(len(fi)),
		extLen:   uint8(len(ex)),
		keyLen:   uint16(len(key)),
		body:     uint32(len(fi) + len(ex) + len(key) + len(val)),
	}
}

// appendFrame appends the header and then the body parts.
func (h *header) appendFrame(dst []byte, alt bool, fi, ex, key, val []byte) []byte {
	dst = append(dst, h.magic, h.opcode)
	if alt {
		dst = append(dst, h.frameLen, uint8(h.keyLen))
	} else {
		dst = ebin.BigEndian.AppendUint16(dst, h.keyLen)
	}
	dst = append(dst, h.extLen, h.datatype)
	dst = ebin.BigEndian.AppendUint16(dst, h.word)
	dst = ebin.BigEndian.AppendUint32(dst, h.body)
	dst = ebin.BigEndian.AppendUint32(dst, h.opaque)
	dst = ebin.BigEndian.AppendUint64(dst, h.cas)
	dst = append(dst, fi...)
	dst = append(dst, ex...)
	dst = append(dst, key...)
	return append(dst, val...)
}

// bodyLen is the total body length of the given parts; fi counts only with
// alternative framing.
func bodyLen(alt bool, fi, ex, key, val []byte) int {
	n := len(ex) + len(key) + len(val)
	if alt {
		n += len(fi)
	}
	return n
}

// Response frame info ids kvd sends (Couchbase's numbering). Each carries a
// big-endian u16; senders saturate larger values at 65535.
const (
	// FrameReadUnits is the read units (RU) the command was charged.
	FrameReadUnits = 1
	// FrameWriteUnits is the write units (WU) the command was charged.
	FrameWriteUnits = 2
	// FrameThrottleDuration is how long the command was held by throttling,
	// in Couchbase's variable-precision encoding: see EncodeDuration.
	FrameThrottleDuration = 3
)

// Frame info escapes: a nibble of 15 means "15 + the next byte".
const (
	frameEscape = 15
	frameMax    = frameEscape + math.MaxUint8 // largest id or length: 270
)

// NextFrameInfo parses the first frame info of b, a non-empty framing-extras
// section, and returns its id, its data (a capped view into b, nil when
// empty) and the entries after it. Loop while len(rest) > 0.
//
// Each entry starts with one byte id<<4 | len. An id nibble of 15 means
// "id = 15 + next byte", a len nibble of 15 means "len = 15 + next byte"
// (the id escape byte comes first). A truncated entry or one whose data runs
// past the end of b is ErrBadFrameInfo. It never allocates.
func NextFrameInfo(b []byte) (id uint16, data, rest []byte, err error) {
	if len(b) == 0 {
		return 0, nil, nil, ErrBadFrameInfo
	}
	id, n := uint16(b[0]>>4), int(b[0]&0xf)
	i := 1
	if id == frameEscape {
		if i == len(b) {
			return 0, nil, nil, ErrBadFrameInfo
		}
		id += uint16(b[i])
		i++
	}
	if n == frameEscape {
		if i == len(b) {
			return 0, nil, nil, ErrBadFrameInfo
		}
		n += int(b[i])
		i++
	}
	if len(b)-i < n {
		return 0, nil, nil, ErrBadFrameInfo
	}
	data, _ = view(b, i, n)
	return id, data, b[i+n:], nil
}

// AppendFrameInfo appends one frame info entry (id, data) to dst, using the
// escape bytes when id or len(data) is 15 or more. It panics if either is
// over 270, the most the encoding can carry.
func AppendFrameInfo(dst []byte, id uint16, data []byte) []byte {
	if id > frameMax || len(data) > frameMax {
		panic(fmt.Sprintf("binary: AppendFrameInfo: id %d with %d bytes of data, limit %d each", id, len(data), frameMax))
	}
	idNib, lenNib := min(id, frameEscape), min(len(data), frameEscape)
	dst = append(dst, byte(idNib)<<4|byte(lenNib))
	if idNib == frameEscape {
		dst = append(dst, byte(id-frameEscape))
	}
	if lenNib == frameEscape {
		dst = append(dst, byte(len(data)-frameEscape))
	}
	return append(dst, data...)
}

// AppendFrameInfoUint16 appends a frame info whose data is the big-endian
// u16 v, the form of FrameReadUnits, FrameWriteUnits and
// FrameThrottleDuration. It never allocates beyond growing dst.
func AppendFrameInfoUint16(dst []byte, id uint16, v uint16) []byte {
	var b [2]byte
	ebin.BigEndian.PutUint16(b[:], v)
	return AppendFrameInfo(dst, id, b[:])
}

// maxEncodedDuration is the longest duration EncodeDuration can express,
// 65535^1.74/2 µs (about 120 s).
var maxEncodedDuration = DecodeDuration(math.MaxUint16)

// EncodeDuration encodes d in Couchbase's variable-precision u16 form, used by
// FrameThrottleDuration (and Couchbase's server-duration frame, id 0):
//
//	encoded = round((µs × 2) ^ (1 / 1.74))    decoded µs = encoded ^ 1.74 / 2
//
// One step of the encoding is 1.74/encoded of the value: the round trip is
// within 1.2% from 1 ms up and within 0.1% from 100 ms up. Durations from
// about 120 s up saturate at 65535; negative ones encode as 0.
func EncodeDuration(d time.Duration) uint16 {
	if d <= 0 {
		return 0
	}
	if d >= maxEncodedDuration {
		return math.MaxUint16
	}
	us := float64(d) / float64(time.Microsecond)
	return uint16(math.Round(math.Pow(us*2, 1/1.74)))
}

// DecodeDuration inverts EncodeDuration, rounding to the microsecond.
func DecodeDuration(v uint16) time.Duration {
	us := math.Pow(float64(v), 1.74) / 2
	return time.Duration(math.Round(us)) * time.Microsecond
}
