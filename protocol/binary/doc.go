// Package binary is kvd's codec for the memcached binary protocol: it turns
// bytes into request frames and response frames into bytes, and nothing else.
// It does no I/O, starts no goroutines and keeps no state, so every function
// and method is safe for concurrent use; values of Request and Response belong
// to whoever holds them.
//
// # Frames
//
// Every frame is a 24-byte big-endian header (HeaderLen) followed by a body of
// "total body" bytes. The body is, in order: framing extras (alternative
// framing only), command extras, key, value.
//
//	byte  0      1       2        3        4       5         6-7             8-11  12-15   16-23
//	      magic  opcode  key length (u16)  extlen  datatype  vbucket/status  body  opaque  CAS
//
// Magic 0x80 is a request and 0x81 a response. Magic 0x08 (MagicAltRequest)
// and 0x18 (MagicAltResponse) are Couchbase's "alternative" framing: byte 2
// becomes the length of the framing extras and byte 3 alone is the key length.
// Framing extras are a list of frame infos (see NextFrameInfo and
// AppendFrameInfo); kvd uses them to report read units, write units and
// throttle time to clients that asked for it with HELLO.
//
// # Decoding
//
// DecodeRequest and DecodeResponse decode one frame from the front of a
// buffer. They never copy: the FrameInfo, Extras, Key and Value fields of the
// result are views that alias the buffer passed in, capped so that appending
// to them cannot overwrite the next frame. They stay valid only as long as
// that buffer does; a caller that keeps a key or value past the next read must
// copy it. Decoding checks framing only (magic, lengths, the body cap), from
// the header alone, so an oversized frame is refused before its body arrives;
// CheckShape then checks that the extras, key and value fit the opcode, by
// memcached's rules. A server drains its input like this:
//
//	for {
//		n, err := binary.DecodeRequest(in, maxBody, &req)
//		if err != nil {
//			// protocol error: answer 0x04 echoing req if len(in) >= HeaderLen, then close
//		}
//		if n == 0 {
//			break // a partial frame: wait for more bytes
//		}
//		// CheckShape(&req), then serve req; copy what must outlive in
//		in = in[n:]
//	}
//
// # Encoding
//
// AppendResponse and AppendRequest append a frame to a caller-owned slice and
// return it, in the style of strconv.AppendInt: with enough capacity they do
// not allocate. Lengths that cannot be expressed on the wire (a key over 255
// bytes in alternative framing, extras over 255 bytes, a body over 4 GiB)
// are programming errors and make them panic.
//
// # Errors
//
// Malformed input is reported with the sentinel errors below, wrapped with
// context; compare with errors.Is. The package never panics on input bytes.
package binary

import "errors"

// Sentinel errors. Decoders and CheckShape wrap them with details
// ("binary: bad magic: 0x47, want 0x80 or 0x08"); test with errors.Is.
var (
	// ErrBadMagic: the first byte is not a magic this decoder accepts
	// (0x80/0x08 for requests, 0x81/0x18 for responses).
	ErrBadMagic = errors.New("binary: bad magic")

	// ErrFrameTooLarge: the header declares a body longer than the caller's
	// limit. It is reported from the header alone, before the body arrives.
	ErrFrameTooLarge = errors.New("binary: frame body too large")

	// ErrBadLengths: framing extras + extras + key is longer than the body.
	ErrBadLengths = errors.New("binary: inconsistent lengths")

	// ErrBadFrameInfo: a frame info entry is truncated or claims more bytes
	// than remain.
	ErrBadFrameInfo = errors.New("binary: malformed frame info")

	// ErrInvalidShape: the extras, key or value do not fit the opcode
	// (CheckShape). The server answers StatusInvalidArguments.
	ErrInvalidShape = errors.New("binary: invalid arguments")
)
