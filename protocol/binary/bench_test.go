package binary

import (
	"testing"
)

// Benchmarks of the hot path: decode a request, check its shape, encode the
// reply. Run with: go test ./protocol/binary -run='^$' -bench=. -benchmem

func benchDecode(b *testing.B, frame []byte) {
	var req Request
	b.ReportAllocs()
	b.SetBytes(int64(len(frame)))
	for b.Loop() {
		if n, err := DecodeRequest(frame, testMaxBody, &req); n != len(frame) || err != nil {
			b.Fatal(n, err)
		}
	}
}

func BenchmarkDecodeRequest(b *testing.B) {
	set1k := AppendRequest(nil, &Request{Opcode: OpSet, Extras: AppendSetExtras(nil, 0, 0), Key: []byte("key:000001"), Value: make([]byte, 1024)})
	b.Run("GET", func(b *testing.B) { benchDecode(b, getFrame) })
	b.Run("SET-1KiB", func(b *testing.B) { benchDecode(b, set1k) })
	b.Run("alt-SET", func(b *testing.B) { benchDecode(b, altFrame) })
}

// BenchmarkDecodePipeline decodes a 100-frame pipeline per iteration, the way
// the server drains a read buffer, and reports the cost per frame.
func BenchmarkDecodePipeline(b *testing.B) {
	var buf []byte
	for range 50 {
		buf = append(buf, getFrame...)
		buf = append(buf, setFrame...)
	}
	var req Request
	b.ReportAllocs()
	b.SetBytes(int64(len(buf)))
	for b.Loop() {
		for rest := buf; len(rest) > 0; {
			n, err := DecodeRequest(rest, testMaxBody, &req)
			if n == 0 || err != nil {
				b.Fatal(n, err)
			}
			if err := CheckShape(&req); err != nil {
				b.Fatal(err)
			}
			rest = rest[n:]
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/100, "ns/frame")
}

func benchEncode(b *testing.B, alt bool, res *Response) {
	dst := make([]byte, 0, res.EncodedLen(alt)+64)
	b.ReportAllocs()
	b.SetBytes(int64(res.EncodedLen(alt)))
	for b.Loop() {
		dst = AppendResponse(dst[:0], alt, res)
	}
}

func BenchmarkAppendResponse(b *testing.B) {
	hit := &Response{Opcode: OpGet, Opaque: 7, CAS: 9, Extras: AppendUint32(nil, 0), Value: make([]byte, 1024)}
	b.Run("GET-hit-1KiB", func(b *testing.B) { benchEncode(b, false, hit) })
	b.Run("SET-ok", func(b *testing.B) { benchEncode(b, false, &Response{Opcode: OpSet, Opaque: 7, CAS: 9}) })
	b.Run("alt-GET-hit-with-units", func(b *testing.B) {
		fi := make([]byte, 0, 16)
		res := *hit
		dst := make([]byte, 0, 2048)
		b.ReportAllocs()
		for b.Loop() {
			fi = AppendFrameInfoUint16(fi[:0], FrameReadUnits, 1)
			fi = AppendFrameInfoUint16(fi, FrameThrottleDuration, EncodeDuration(1500000))
			res.FrameInfo = fi
			dst = AppendResponse(dst[:0], true, &res)
		}
	})
}

func BenchmarkAppendRequest(b *testing.B) {
	req := &Request{Opcode: OpSet, Extras: AppendSetExtras(nil, 0, 0), Key: []byte("key:000001"), Value: make([]byte, 1024)}
	dst := make([]byte, 0, req.EncodedLen())
	b.ReportAllocs()
	b.SetBytes(int64(req.EncodedLen()))
	for b.Loop() {
		dst = AppendRequest(dst[:0], req)
	}
}

func BenchmarkCheckShape(b *testing.B) {
	var req Request
	if _, err := DecodeRequest(setFrame, testMaxBody, &req); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := CheckShape(&req); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkNextFrameInfo(b *testing.B) {
	fi := hx("00 120001 220002 ff0201 000102030405060708090a0b0c0d0e0f")
	b.ReportAllocs()
	for b.Loop() {
		for rest := fi; len(rest) > 0; {
			var err error
			if _, _, rest, err = NextFrameInfo(rest); err != nil {
				b.Fatal(err)
			}
		}
	}
}
