package text

import (
	"bytes"
	"testing"
)

var allocInputs = []string{
	"get a b c d e f g h i j k l m n o p q r s t u v w x y z\r\n",
	"set key 5 0 5\r\nhello\r\n",
	"cas key 5 0 5 99 noreply\r\nhello\r\n",
	"incr key 10\r\n",
	"mg azE= b v f t c s k O123 q\r\n",
	"ms key 5 T0 F5 c MA\r\nhello\r\n",
	"ma key N0 J13 D2 MD v t c\r\n",
	"md key q I T30\r\n",
	"set a x 0 1\r\nb\r\n",
	"foo\r\n",
}

// TestZeroAlloc proves decode and encode allocate nothing once the Command
// and the output buffer have grown.
func TestZeroAlloc(t *testing.T) {
	var cmd Command
	out := make([]byte, 0, 4096)
	o := Outcome{Status: StatusHit, Value: []byte("hello"), Flags: 5, CAS: 7, TTL: -1}
	for _, in := range allocInputs {
		buf := []byte(in)
		Decode(buf, DecodeOptions{}, &cmd) // grow cmd.Keys
		allocs := testing.AllocsPerRun(200, func() {
			n, err := Decode(buf, DecodeOptions{}, &cmd)
			if n == 0 && err == nil {
				t.Fatal("incomplete")
			}
			out = AppendReply(out[:0], &cmd, cmd.Key, &o)
			out = AppendValue(out, cmd.Key, 1, o.Value, 9, true)
			out = AppendStatUint(out, "curr_items", 12)
			out = AppendServerError(out, "queue full")
		})
		if allocs != 0 {
			t.Errorf("%q: %v allocations per decode+encode", in, allocs)
		}
	}
}

func BenchmarkDecodeGet(b *testing.B) { benchDecode(b, "get some:key:12345\r\n") }
func BenchmarkDecodeSet(b *testing.B) {
	benchDecode(b, "set some:key:12345 0 0 100\r\n"+string(bytes.Repeat([]byte("x"), 100))+"\r\n")
}
func BenchmarkDecodeMetaGet(b *testing.B) { benchDecode(b, "mg some:key:12345 v f t c k O99 q\r\n") }

func benchDecode(b *testing.B, in string) {
	var cmd Command
	buf := []byte(in)
	out := make([]byte, 0, 1024)
	o := Outcome{Status: StatusHit, Value: bytes.Repeat([]byte("x"), 100), TTL: -1}
	b.ReportAllocs()
	b.SetBytes(int64(len(buf)))
	for b.Loop() {
		if n, err := Decode(buf, DecodeOptions{}, &cmd); n != len(buf) || err != nil {
			b.Fatal(n, err)
		}
		out = AppendReply(out[:0], &cmd, cmd.Key, &o)
	}
}
