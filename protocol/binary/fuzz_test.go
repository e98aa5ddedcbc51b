package binary

import (
	"bytes"
	"encoding/binary"
	"errors"
	"reflect"
	"testing"
)

// FuzzDecodeRequest checks, for any input, that DecodeRequest never panics,
// that a decoded frame is exactly as long as its header says, that
// AppendRequest re-encodes it byte for byte and decodes again to the same
// fields, that every strict prefix of it is "need more bytes", and that
// errors leave the header echoable. Seeds: the golden transcripts and the
// hand-written test frames.
//
//	go test ./protocol/binary -run='^$' -fuzz=FuzzDecodeRequest -fuzztime=60s
func FuzzDecodeRequest(f *testing.F) {
	seeds := append(goldenRequests(f), getFrame, setFrame, noopFrame, altFrame)
	for _, r := range roundTripRequests() {
		seeds = append(seeds, AppendRequest(nil, &r))
	}
	for _, s := range seeds {
		f.Add(s, uint32(testMaxBody))
		f.Add(append(append([]byte(nil), s...), s...), uint32(testMaxBody)) // pipelined
	}
	f.Add(setFrame, uint32(13))
	f.Fuzz(func(t *testing.T, buf []byte, maxBody uint32) {
		var req Request
		n, err := DecodeRequest(buf, maxBody, &req)
		switch {
		case err != nil:
			checkDecodeError(t, buf, n, err, &req)
		case n == 0:
			checkPartial(t, buf)
		default:
			checkDecoded(t, buf[:n], maxBody, &req)
		}
		if err := CheckShape(&req); err != nil && !errors.Is(err, ErrInvalidShape) {
			t.Fatalf("CheckShape error %v does not wrap ErrInvalidShape", err)
		}
		for rest := req.FrameInfo; len(rest) > 0; {
			if _, _, rest, err = NextFrameInfo(rest); err != nil {
				break
			}
		}
	})
}

func checkDecodeError(t *testing.T, buf []byte, n int, err error, req *Request) {
	if n != 0 {
		t.Fatalf("error %v with n = %d", err, n)
	}
	if !errors.Is(err, ErrBadMagic) && !errors.Is(err, ErrFrameTooLarge) && !errors.Is(err, ErrBadLengths) {
		t.Fatalf("unexpected error %v", err)
	}
	if len(buf) == 0 || req.Magic != buf[0] {
		t.Fatalf("error %v: Magic %#x for input %x", err, req.Magic, buf)
	}
	if len(buf) >= HeaderLen && (req.Opcode != Opcode(buf[1]) || req.Opaque != binary.BigEndian.Uint32(buf[12:])) {
		t.Fatalf("error %v: header not echoable: %+v for %x", err, req, buf[:HeaderLen])
	}
	if len(buf) < HeaderLen && !errors.Is(err, ErrBadMagic) {
		t.Fatalf("error %v before a whole header", err)
	}
}

func checkPartial(t *testing.T, buf []byte) {
	if len(buf) >= HeaderLen && uint64(len(buf)) >= HeaderLen+uint64(binary.BigEndian.Uint32(buf[8:])) {
		t.Fatalf("need more bytes, but %d bytes hold a whole frame: %x", len(buf), buf)
	}
}

func checkDecoded(t *testing.T, frame []byte, maxBody uint32, req *Request) {
	body := binary.BigEndian.Uint32(frame[8:])
	if uint64(len(frame)) != HeaderLen+uint64(body) || body > maxBody {
		t.Fatalf("decoded %d bytes from a frame declaring a %d-byte body (max %d)", len(frame), body, maxBody)
	}
	if got := len(req.FrameInfo) + len(req.Extras) + len(req.Key) + len(req.Value); got != int(body) {
		t.Fatalf("parts add up to %d bytes, body is %d", got, body)
	}
	enc := AppendRequest(nil, req)
	if !bytes.Equal(enc, frame) {
		t.Fatalf("re-encoded\n %x\nfrom\n %x", enc, frame)
	}
	var again Request
	if n, err := DecodeRequest(enc, maxBody, &again); n != len(enc) || err != nil || !reflect.DeepEqual(&again, req) {
		t.Fatalf("second decode = %d, %v\n%+v\nwant\n%+v", n, err, again, *req)
	}
	for _, k := range []int{0, 1, HeaderLen - 1, HeaderLen, len(frame) - 1} {
		if k < 0 || k >= len(frame) {
			continue
		}
		if n, err := DecodeRequest(frame[:k], maxBody, &again); n != 0 || err != nil {
			t.Fatalf("prefix %d of a valid frame = %d, %v", k, n, err)
		}
	}
}

// FuzzNextFrameInfo checks that walking any framing-extras section never
// panics, only moves forward, and that each entry re-encodes to the bytes it
// was read from (the encoding has exactly one form per id and length: an
// escape always means 15 or more).
func FuzzNextFrameInfo(f *testing.F) {
	for _, s := range []string{"00", "120001 220002 320076", "ff0201 000102030405060708090a0b0c0d0e0f", "f0", "1f", "ffffff"} {
		f.Add(hx(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		for rest := b; len(rest) > 0; {
			id, data, next, err := NextFrameInfo(rest)
			if err != nil {
				if !errors.Is(err, ErrBadFrameInfo) {
					t.Fatalf("error %v", err)
				}
				return
			}
			used := rest[:len(rest)-len(next)]
			if len(next) >= len(rest) {
				t.Fatalf("no progress on %x", rest)
			}
			if enc := AppendFrameInfo(nil, id, data); !bytes.Equal(enc, used) {
				t.Fatalf("entry %x re-encodes as %x", used, enc)
			}
			rest = next
		}
	})
}
