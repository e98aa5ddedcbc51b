package binary

import (
	"bytes"
	"encoding/hex"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"
)

// hx decodes hex written with spaces between fields, as in the golden files,
// so that test frames are spelled out byte by byte, independently of the
// encoder under test.
func hx(s string) []byte {
	b, err := hex.DecodeString(strings.Join(strings.Fields(s), ""))
	if err != nil {
		panic(err)
	}
	return b
}

const testMaxBody = 20 << 20 // the server's default frame cap

// Hand-written frames used by several tests. Header layout:
// magic opcode keylen(2, or framelen+keylen for alt) extlen datatype vbucket body opaque cas.
var (
	getFrame  = hx("80 00 0003 00 00 0007 00000003 deadbeef 0102030405060708  666f6f")
	setFrame  = hx("80 01 0003 08 01 0000 0000000e 00000002 0000000000000009  deadbeef00000064 666f6f 626172")
	noopFrame = hx("80 0a 0000 00 00 0000 00000000 00000003 0000000000000000")
	// alt SET: frame infos 0x00 (id 0, no data) and 0x12 0001 (id 1, 2 bytes), 8 extras, key, value
	altFrame = hx("08 01 04 03 08 00 0000 00000014 00000004 0000000000000000  00120001 0000000100000002 6b6579 76616c7565")
)

func TestDecodeRequest(t *testing.T) {
	bigKey := bytes.Repeat([]byte{'k'}, 256)
	tests := []struct {
		name    string
		in      []byte
		maxBody uint32
		n       int
		err     error
		want    Request
	}{
		{name: "empty buffer", in: nil},
		{name: "partial header", in: getFrame[:23], want: Request{}},
		{name: "partial body", in: getFrame[:25], want: Request{
			Magic: 0x80, Opcode: OpGet, VBucket: 7, Opaque: 0xdeadbeef, CAS: 0x0102030405060708,
		}},
		{name: "GET", in: getFrame, n: 27, want: Request{
			Magic: 0x80, Opcode: OpGet, VBucket: 7, Opaque: 0xdeadbeef, CAS: 0x0102030405060708, Key: []byte("foo"),
		}},
		{name: "SET followed by part of another frame", in: append(append([]byte(nil), setFrame...), noopFrame[:5]...), n: 38, want: Request{
			Magic: 0x80, Opcode: OpSet, Datatype: DatatypeJSON, Opaque: 2, CAS: 9,
			Extras: hx("deadbeef00000064"), Key: []byte("foo"), Value: []byte("bar"),
		}},
		{name: "zero-length everything", in: noopFrame, n: 24, want: Request{Magic: 0x80, Opcode: OpNoop, Opaque: 3}},
		{name: "alt framing with frame infos", in: altFrame, n: 44, want: Request{
			Magic: 0x08, Opcode: OpSet, Opaque: 4, FrameInfo: hx("00 120001"),
			Extras: hx("0000000100000002"), Key: []byte("key"), Value: []byte("value"),
		}},
		{name: "alt framing, empty", in: hx("08 0a 00 00 00 00 0000 00000000 00000005 0000000000000000"), n: 24, want: Request{
			Magic: 0x08, Opcode: OpNoop, Opaque: 5,
		}},
		{
			name: "classic key length is both bytes 2 and 3",
			in:   append(hx("80 00 0100 00 00 0000 00000100 00000006 0000000000000000"), bigKey...),
			n:    24 + 256, want: Request{Magic: 0x80, Opcode: OpGet, Opaque: 6, Key: bigKey},
		},
		{name: "body exactly maxBody", in: setFrame, maxBody: 14, n: 38, want: Request{
			Magic: 0x80, Opcode: OpSet, Datatype: DatatypeJSON, Opaque: 2, CAS: 9,
			Extras: hx("deadbeef00000064"), Key: []byte("foo"), Value: []byte("bar"),
		}},
		{name: "bad magic, one byte", in: []byte("g"), err: ErrBadMagic, want: Request{Magic: 'g'}},
		{name: "bad magic, text protocol", in: []byte("get foo\r\n"), err: ErrBadMagic, want: Request{Magic: 'g'}},
		{name: "bad magic, response magic", in: hx("81 00 0003 00 00 0000 00000003 00000007 0000000000000001 666f6f"), err: ErrBadMagic, want: Request{
			Magic: 0x81, Opcode: OpGet, Opaque: 7, CAS: 1,
		}},
		{name: "body over maxBody, header only", in: hx("80 01 0003 08 00 0000 01400001 00000008 0000000000000000"), err: ErrFrameTooLarge, want: Request{
			Magic: 0x80, Opcode: OpSet, Opaque: 8,
		}},
		{name: "body over maxBody by one", in: setFrame, maxBody: 13, err: ErrFrameTooLarge, want: Request{
			Magic: 0x80, Opcode: OpSet, Datatype: DatatypeJSON, Opaque: 2, CAS: 9,
		}},
		{name: "extras + key > body", in: hx("80 00 0003 02 00 0000 00000004 00000009 0000000000000000"), err: ErrBadLengths, want: Request{
			Magic: 0x80, Opcode: OpGet, Opaque: 9,
		}},
		{name: "alt: framing extras + extras + key > body", in: hx("08 00 04 03 00 00 0000 00000005 0000000a 0000000000000000 1200016b6b"), err: ErrBadLengths, want: Request{
			Magic: 0x08, Opcode: OpGet, Opaque: 10,
		}},
		{name: "classic: bytes 2-3 are never framing extras", in: hx("80 00 0403 00 00 0000 00000300 0000000b 0000000000000000"), err: ErrBadLengths, want: Request{
			Magic: 0x80, Opcode: OpGet, Opaque: 11,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			maxBody := tt.maxBody
			if maxBody == 0 {
				maxBody = testMaxBody
			}
			var req Request
			req.Key = []byte("stale") // must be cleared
			n, err := DecodeRequest(tt.in, maxBody, &req)
			if n != tt.n || !errors.Is(err, tt.err) || (err == nil) != (tt.err == nil) {
				t.Fatalf("DecodeRequest = %d, %v; want %d, %v", n, err, tt.n, tt.err)
			}
			if (tt.n > 0 || tt.err != nil) && !reflect.DeepEqual(req, tt.want) {
				t.Errorf("request\n got %+v\nwant %+v", req, tt.want)
			}
		})
	}
}

// TestDecodeRequestEverySplit feeds a stream of frames to a reader loop in
// chunks of every size, so that every frame is seen cut at every point.
func TestDecodeRequestEverySplit(t *testing.T) {
	frames := [][]byte{getFrame, setFrame, altFrame, noopFrame, getFrame}
	var stream []byte
	for _, f := range frames {
		stream = append(stream, f...)
	}
	for _, f := range frames {
		for k := range len(f) {
			var req Request
			if n, err := DecodeRequest(f[:k], testMaxBody, &req); n != 0 || err != nil {
				t.Fatalf("prefix %d of %x: DecodeRequest = %d, %v; want 0, nil", k, f, n, err)
			}
		}
	}
	for chunk := 1; chunk <= len(stream); chunk++ {
		var buf []byte
		var got [][]byte
		for off := 0; off < len(stream); off += chunk {
			buf = append(buf, stream[off:min(off+chunk, len(stream))]...)
			for {
				var req Request
				n, err := DecodeRequest(buf, testMaxBody, &req)
				if err != nil {
					t.Fatalf("chunk %d: %v", chunk, err)
				}
				if n == 0 {
					break
				}
				got = append(got, AppendRequest(nil, &req))
				buf = buf[n:]
			}
		}
		if len(buf) != 0 || len(got) != len(frames) {
			t.Fatalf("chunk %d: decoded %d frames, %d bytes left over", chunk, len(got), len(buf))
		}
		for i := range frames {
			if !bytes.Equal(got[i], frames[i]) {
				t.Fatalf("chunk %d frame %d: re-encoded %x, want %x", chunk, i, got[i], frames[i])
			}
		}
	}
}

func TestDecodeRequestBackToBack(t *testing.T) {
	buf := append(append([]byte(nil), setFrame...), getFrame...)
	var first, second Request
	n1, err := DecodeRequest(buf, testMaxBody, &first)
	if err != nil || n1 != len(setFrame) {
		t.Fatalf("first = %d, %v", n1, err)
	}
	n2, err := DecodeRequest(buf[n1:], testMaxBody, &second)
	if err != nil || n2 != len(getFrame) {
		t.Fatalf("second = %d, %v", n2, err)
	}
	if first.Opcode != OpSet || string(first.Value) != "bar" || second.Opcode != OpGet || string(second.Key) != "foo" {
		t.Fatalf("got %+v and %+v", first, second)
	}
	// Views are capped: appending to one part must not overwrite what follows.
	_ = append(first.Value, "XXXX"...)
	_ = append(first.Key, 'X')
	if !bytes.Equal(buf[n1:], getFrame) || string(first.Value) != "bar" {
		t.Fatalf("appending to a view overwrote the buffer: %x", buf)
	}
}

func TestDecodeResponse(t *testing.T) {
	in := hx("18 00 03 00 04 00 0001 0000000a 00000201 0000000000000007 120001 00000000 626172")
	var res Response
	n, err := DecodeResponse(in, testMaxBody, &res)
	want := Response{
		Magic: 0x18, Opcode: OpGet, Status: StatusKeyNotFound, Opaque: 0x201, CAS: 7,
		FrameInfo: hx("120001"), Extras: hx("00000000"), Value: []byte("bar"),
	}
	if n != len(in) || err != nil || !reflect.DeepEqual(res, want) || !res.Alt() {
		t.Fatalf("DecodeResponse = %d, %v, %+v", n, err, res)
	}
	if n, err := DecodeResponse(getFrame, testMaxBody, &res); n != 0 || !errors.Is(err, ErrBadMagic) || res.Opaque != 0xdeadbeef {
		t.Fatalf("request fed to DecodeResponse = %d, %v, %+v", n, err, res)
	}
	if n, err := DecodeResponse(in[:30], testMaxBody, &res); n != 0 || err != nil {
		t.Fatalf("partial response = %d, %v", n, err)
	}
	if n, err := DecodeResponse(in, 9, &res); n != 0 || !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("response over maxBody = %d, %v", n, err)
	}
}

func roundTripRequests() []Request {
	return []Request{
		{Magic: MagicRequest, Opcode: OpGet, Key: []byte("foo"), Opaque: 1},
		{Magic: MagicRequest, Opcode: OpSet, Datatype: DatatypeJSON, VBucket: 0xffff, Opaque: math.MaxUint32, CAS: math.MaxUint64,
			Extras: AppendSetExtras(nil, 1, 2), Key: []byte("k"), Value: []byte(`{"a":1}`)},
		{Magic: MagicRequest, Opcode: OpNoop},
		{Magic: MagicRequest, Opcode: 0x5f, Key: bytes.Repeat([]byte{'x'}, 1000), Value: make([]byte, 70000)},
		{Magic: MagicAltRequest, Opcode: OpGet, Key: []byte("foo"), FrameInfo: AppendFrameInfo(nil, 0, nil)},
		{Magic: MagicAltRequest, Opcode: OpIncrement, Extras: AppendArithExtras(nil, 1, 2, 3), Key: bytes.Repeat([]byte{'k'}, 255),
			FrameInfo: AppendFrameInfo(AppendFrameInfo(nil, 1, []byte{3}), 200, make([]byte, 100))},
		{Magic: MagicAltRequest, Opcode: OpHello},
	}
}

func TestRequestRoundTrip(t *testing.T) {
	for i, want := range roundTripRequests() {
		buf := AppendRequest([]byte("prefix"), &want)
		if len(buf)-len("prefix") != want.EncodedLen() {
			t.Errorf("%d: encoded %d bytes, EncodedLen %d", i, len(buf)-6, want.EncodedLen())
		}
		var got Request
		n, err := DecodeRequest(buf[6:], math.MaxUint32, &got)
		if err != nil || n != len(buf)-6 || !reflect.DeepEqual(got, want) {
			t.Errorf("%d: round trip = %d, %v\n got %+v\nwant %+v", i, n, err, got, want)
		}
	}
	// Classic framing has no frame infos: they are not sent.
	in := Request{Magic: MagicRequest, Opcode: OpGet, Key: []byte("k"), FrameInfo: []byte{0}}
	var got Request
	if _, err := DecodeRequest(AppendRequest(nil, &in), testMaxBody, &got); err != nil || got.FrameInfo != nil || string(got.Key) != "k" {
		t.Errorf("classic request with FrameInfo: %v %+v", err, got)
	}
}

func TestResponseRoundTrip(t *testing.T) {
	responses := []Response{
		{Opcode: OpGet, Status: StatusOK, Opaque: 9, CAS: 1, Extras: AppendUint32(nil, 0xdeadbeef), Value: []byte("bar")},
		{Opcode: OpGetK, Status: StatusKeyNotFound, Key: []byte("foo"), Value: []byte("Not found")},
		{Opcode: OpSet, Status: StatusWouldThrottle, Datatype: DatatypeJSON, Value: []byte(`{"next_tick_us":1}`),
			FrameInfo: AppendFrameInfoUint16(AppendFrameInfoUint16(nil, FrameReadUnits, 1), FrameThrottleDuration, 118)},
		{Opcode: OpNoop},
		{Opcode: 0xff, Status: 0xffff, Opaque: math.MaxUint32, CAS: math.MaxUint64},
	}
	for i, r := range responses {
		for _, alt := range []bool{false, true} {
			buf := AppendResponse(nil, alt, &r)
			if len(buf) != r.EncodedLen(alt) {
				t.Errorf("%d alt=%v: encoded %d bytes, EncodedLen %d", i, alt, len(buf), r.EncodedLen(alt))
			}
			want := r
			want.Magic = MagicResponse
			if alt {
				want.Magic = MagicAltResponse
			} else {
				want.FrameInfo = nil // not sent with classic framing
			}
			var got Response
			n, err := DecodeResponse(buf, testMaxBody, &got)
			if err != nil || n != len(buf) || !reflect.DeepEqual(got, want) {
				t.Errorf("%d alt=%v: round trip = %d, %v\n got %+v\nwant %+v", i, alt, n, err, got, want)
			}
		}
	}
}

func TestAppendPanicsOnImpossibleLengths(t *testing.T) {
	tests := []struct {
		name string
		fn   func()
	}{
		{"alt key over 255", func() { AppendResponse(nil, true, &Response{Key: make([]byte, 256)}) }},
		{"classic key over 65535", func() { AppendResponse(nil, false, &Response{Key: make([]byte, 65536)}) }},
		{"extras over 255", func() { AppendRequest(nil, &Request{Extras: make([]byte, 256)}) }},
		{"frame infos over 255", func() { AppendRequest(nil, &Request{Magic: MagicAltRequest, FrameInfo: make([]byte, 256)}) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			defer func() {
				if r := recover(); r == nil || !strings.HasPrefix(r.(string), "binary: ") {
					t.Fatalf("recovered %v, want a binary: panic", r)
				}
			}()
			tt.fn()
		})
	}
	// The limits themselves are fine.
	AppendResponse(nil, true, &Response{Key: make([]byte, 255), FrameInfo: make([]byte, 255), Extras: make([]byte, 255)})
	AppendResponse(nil, false, &Response{Key: make([]byte, 65535)})
}

// TestNoAllocs proves the hot path allocates nothing.
func TestNoAllocs(t *testing.T) {
	res := Response{
		Opcode: OpGet, Opaque: 1, CAS: 2, Extras: []byte{0, 0, 0, 1}, Value: make([]byte, 1024),
		FrameInfo: []byte{0x12, 0, 1},
	}
	dst := make([]byte, 0, 4096)
	fiBuf := make([]byte, 0, 64)
	fi := hx("00 120001 ff0201 000102030405060708090a0b0c0d0e0f")
	var req, valid Request
	if _, err := DecodeRequest(altFrame, testMaxBody, &valid); err != nil {
		t.Fatal(err)
	}
	var resOut Response
	var sink []byte
	cases := map[string]func(){
		"DecodeRequest":   func() { _, _ = DecodeRequest(altFrame, testMaxBody, &req) },
		"DecodeRequest/2": func() { _, _ = DecodeRequest(setFrame, testMaxBody, &req) },
		"DecodeResponse":  func() { _, _ = DecodeResponse(AppendResponse(dst[:0], true, &res), testMaxBody, &resOut) },
		"AppendResponse":  func() { sink = AppendResponse(dst[:0], false, &res) },
		"AppendResponse/alt": func() {
			b := AppendFrameInfoUint16(fiBuf[:0], FrameReadUnits, 1)
			res.FrameInfo = AppendFrameInfoUint16(b, FrameWriteUnits, 2)
			sink = AppendResponse(dst[:0], true, &res)
		},
		"AppendRequest": func() { sink = AppendRequest(dst[:0], &req) },
		"NextFrameInfo": func() {
			for rest := fi; len(rest) > 0; {
				_, _, rest, _ = NextFrameInfo(rest)
			}
		},
		"CheckShape": func() {
			if err := CheckShape(&valid); err != nil {
				panic(err)
			}
		},
		"Opcode.String":  func() { _ = Opcode(0x5f).String() + OpSetQ.String() },
		"EncodeDuration": func() { _ = EncodeDuration(1234567) },
	}
	for name, fn := range cases {
		if allocs := testing.AllocsPerRun(100, fn); allocs != 0 {
			t.Errorf("%s: %v allocations per run, want 0", name, allocs)
		}
	}
	_ = sink
}

func TestNextFrameInfo(t *testing.T) {
	type entry struct {
		id   uint16
		data []byte
	}
	sixteen := hx("000102030405060708090a0b0c0d0e0f")
	tests := []struct {
		name string
		in   []byte
		want []entry
		err  bool
	}{
		{name: "id 0, no data", in: hx("00"), want: []entry{{0, nil}}},
		{name: "RU and WU", in: hx("120001 220002"), want: []entry{{1, hx("0001")}, {2, hx("0002")}}},
		{name: "id 14, 14 bytes, no escapes", in: append(hx("ee"), sixteen[:14]...), want: []entry{{14, sixteen[:14]}}},
		{name: "id escape: 15 + 2", in: hx("f002"), want: []entry{{17, nil}}},
		{name: "id escape: 15 + 0", in: hx("f100 aa"), want: []entry{{15, hx("aa")}}},
		{name: "len escape: 15 + 1", in: append(hx("3f01"), sixteen...), want: []entry{{3, sixteen}}},
		{name: "both escapes, id byte first", in: append(hx("ff0201"), sixteen...), want: []entry{{17, sixteen}}},
		{name: "largest id and length", in: append(hx("ffffff"), make([]byte, 270)...), want: []entry{{270, make([]byte, 270)}}},
		{name: "empty section", in: nil, err: true},
		{name: "data truncated", in: hx("1200"), err: true},
		{name: "id escape byte missing", in: hx("f0"), err: true},
		{name: "len escape byte missing", in: hx("1f"), err: true},
		{name: "len escape byte missing after id escape", in: hx("ff02"), err: true},
		{name: "escaped length overlong", in: hx("1f00 00000000000000000000000000"), err: true},
		{name: "second entry truncated", in: hx("120001 2200"), want: []entry{{1, hx("0001")}}, err: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []entry
			var err error
			for rest := tt.in; err == nil && (len(rest) > 0 || got == nil); {
				var id uint16
				var data []byte
				if id, data, rest, err = NextFrameInfo(rest); err == nil {
					got = append(got, entry{id, data})
				}
			}
			if (err != nil) != tt.err || (err != nil && !errors.Is(err, ErrBadFrameInfo)) {
				t.Fatalf("err = %v, want error %v", err, tt.err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("entries = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestAppendFrameInfoRoundTrip(t *testing.T) {
	data := make([]byte, frameMax)
	for i := range data {
		data[i] = byte(i)
	}
	for id := uint16(0); id <= frameMax; id++ {
		for _, n := range []int{0, 1, 2, 14, 15, 16, 255, frameMax} {
			enc := AppendFrameInfo([]byte{0xaa}, id, data[:n])
			gotID, gotData, rest, err := NextFrameInfo(enc[1:])
			if err != nil || gotID != id || !bytes.Equal(gotData, data[:n]) || len(rest) != 0 {
				t.Fatalf("id %d len %d: encoded %x, decoded %d %x rest %x err %v", id, n, enc, gotID, gotData, rest, err)
			}
			wantLen := 1 + n
			if id >= 15 {
				wantLen++
			}
			if n >= 15 {
				wantLen++
			}
			if len(enc)-1 != wantLen {
				t.Fatalf("id %d len %d: %d bytes, want %d", id, n, len(enc)-1, wantLen)
			}
		}
	}
	if got := AppendFrameInfoUint16(nil, FrameThrottleDuration, 0x0102); !bytes.Equal(got, hx("32 0102")) {
		t.Errorf("AppendFrameInfoUint16 = %x", got)
	}
	for _, bad := range []struct {
		id uint16
		n  int
	}{{frameMax + 1, 0}, {0, frameMax + 1}} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("AppendFrameInfo(id %d, %d bytes) did not panic", bad.id, bad.n)
				}
			}()
			AppendFrameInfo(nil, bad.id, make([]byte, bad.n))
		}()
	}
}

func TestDuration(t *testing.T) {
	tests := []struct {
		d    time.Duration
		want uint16
	}{
		{-time.Second, 0},
		{0, 0},
		{time.Microsecond, 1},
		{2 * time.Millisecond, 118}, // (4000)^(1/1.74) = 117.5
		{time.Second, 4181},
		{maxEncodedDuration, math.MaxUint16},
		{time.Hour, math.MaxUint16},
	}
	for _, tt := range tests {
		if got := EncodeDuration(tt.d); got != tt.want {
			t.Errorf("EncodeDuration(%v) = %d, want %d", tt.d, got, tt.want)
		}
	}
	if maxEncodedDuration < 120*time.Second || maxEncodedDuration > 121*time.Second {
		t.Errorf("maxEncodedDuration = %v, want about 120 s", maxEncodedDuration)
	}
	// From 1 ms up the round trip is within 1.2% (half a step of the encoding).
	for d := time.Millisecond; d < maxEncodedDuration; d = d * 11 / 10 {
		back := DecodeDuration(EncodeDuration(d))
		if diff := math.Abs(float64(back-d)) / float64(d); diff > 0.012 {
			t.Errorf("%v round-trips to %v (%.2f%%)", d, back, diff*100)
		}
	}
	for v := 1; v <= math.MaxUint16; v++ {
		if back := EncodeDuration(DecodeDuration(uint16(v))); back != uint16(v) && v > 20 {
			t.Fatalf("EncodeDuration(DecodeDuration(%d)) = %d", v, back)
		}
	}
}

func TestBodyLenFrameLen(t *testing.T) {
	for _, r := range []*Request{
		{Magic: MagicRequest, Opcode: OpGet, Key: []byte("k")},
		{Magic: MagicRequest, Opcode: OpSet, Key: []byte("key"), Extras: make([]byte, 8), Value: make([]byte, 70000)},
		{Magic: MagicAltRequest, Opcode: OpGet, FrameInfo: AppendFrameInfoUint16(nil, 1, 7), Key: []byte("k")},
	} {
		frame := AppendRequest(nil, r)
		if got := FrameLen(frame); got != len(frame) {
			t.Errorf("%v: FrameLen %d, frame is %d bytes", r.Opcode, got, len(frame))
		}
		if got, want := BodyLen(frame[:12]), len(frame)-HeaderLen; got != want {
			t.Errorf("%v: BodyLen %d, want %d", r.Opcode, got, want)
		}
	}
	hdr := make([]byte, HeaderLen)
	copy(hdr[8:], []byte{0xff, 0xff, 0xff, 0xff})
	if got := BodyLen(hdr); got != 1<<32-1 {
		t.Errorf("BodyLen of 0xffffffff = %d", got)
	}
}

func TestFeatureCodes(t *testing.T) {
	// SPEC section 3's HELLO features.
	for f, want := range map[Feature]uint16{
		FeatureXError: 0x07, FeatureSelectBucket: 0x08, FeatureJSON: 0x0b,
		FeatureAltRequest: 0x10, FeatureReportUnits: 0x1a, FeatureNonBlocking: 0x1b,
	} {
		if uint16(f) != want {
			t.Errorf("feature %#x, want %#x", uint16(f), want)
		}
	}
}
