package text

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

// Replies whose item state the model does not keep (hit-before, last
// access, stale items, win tokens) are checked here: each want was seen
// from Debian memcached 1.6.18 for the request line, with the item state
// given as the Outcome.
var metaReplyCases = []struct {
	line string
	o    Outcome
	want string
}{
	// ms k 2 T0 F5 c → mg k v f t c s k O123 q
	{"mg azE= b k v\r\n", Outcome{Status: StatusHit, Value: []byte("z"), KeyBinary: true}, "VA 1 kazE= b\r\nz\r\n"},
	{"mg azE= b k v\r\n", Outcome{Status: StatusHit, Value: []byte("z")}, "VA 1 kk1\r\nz\r\n"},
	{"mg k1 k v\r\n", Outcome{Status: StatusHit, Value: []byte("z"), KeyBinary: true}, "VA 1 kazE= b\r\nz\r\n"},
	{"mg k v f t c s k O123 q\r\n", Outcome{Status: StatusHit, Value: []byte("hi"), Flags: 5, CAS: 2, TTL: -1},
		"VA 2 f5 t-1 c2 s2 kk O123\r\nhi\r\n"},
	{"mg k h l t v\r\n", Outcome{Status: StatusHit, Value: []byte("hi"), TTL: -1, Fetched: true, LastAccess: 1},
		"VA 2 h1 l1 t-1\r\nhi\r\n"},
	{"mg azE= b v k\r\n", Outcome{Status: StatusMiss}, "EN kazE= b\r\n"},
	{"mg zz v q\r\n", Outcome{Status: StatusMiss}, ""},
	{"mg zz v k O9\r\n", Outcome{Status: StatusMiss}, "EN kzz O9\r\n"},
	// vivify on miss: the first client wins, the next sees Z.
	{"mg miss N30 v c t\r\n", Outcome{Status: StatusHit, CAS: 3, TTL: 30, Win: true}, "VA 0 c3 t30 W\r\n\r\n"},
	{"mg miss v c t\r\n", Outcome{Status: StatusHit, CAS: 3, TTL: 30, TokenSent: true}, "VA 0 c3 t30 Z\r\n\r\n"},
	// after md k2 I T30: stale, first win, then token sent.
	{"mg k2 v c\r\n", Outcome{Status: StatusHit, Value: []byte("hi"), CAS: 8, Stale: true, Win: true}, "VA 2 c8 X W\r\nhi\r\n"},
	{"mg k2 v c\r\n", Outcome{Status: StatusHit, Value: []byte("hi"), CAS: 8, Stale: true, TokenSent: true}, "VA 2 c8 Z X\r\nhi\r\n"},
	{"mg k\r\n", Outcome{Status: StatusHit, Value: []byte("hi")}, "HD\r\n"},
	{"mg k q\r\n", Outcome{Status: StatusHit, Value: []byte("hi")}, "HD\r\n"},
	{"ms k 2 T0 F5 c\r\nhi\r\n", Outcome{Status: StatusStored, CAS: 2}, "HD c2\r\n"},
	{"ms k 2 q\r\nhi\r\n", Outcome{Status: StatusStored, CAS: 2}, ""},
	{"ms k 2 q C1\r\nhi\r\n", Outcome{Status: StatusExists}, "EX\r\n"},
	{"ms zz 1 MA q\r\nz\r\n", Outcome{Status: StatusNotStored}, "NS\r\n"},
	{"md k q\r\n", Outcome{Status: StatusDeleted}, ""},
	{"md k q\r\n", Outcome{Status: StatusNotFound}, "NF\r\n"},
	{"md k O5 k\r\n", Outcome{Status: StatusNotFound}, "NF O5 kk\r\n"},
	{"ma n\r\n", Outcome{Status: StatusNotFound}, "NF\r\n"},
	{"ma n N0 J13 v\r\n", Outcome{Status: StatusNumber, Number: 13}, "VA 2\r\n13\r\n"},
	{"ma n MD D20 v t c\r\n", Outcome{Status: StatusNumber, Number: 0, TTL: -1, CAS: 5}, "VA 1 t-1 c5\r\n0\r\n"},
	{"ma n q\r\n", Outcome{Status: StatusNumber, Number: 1}, ""},
	{"ma n q v O9\r\n", Outcome{Status: StatusNumber, Number: 1}, ""},
	{"ma n\r\n", Outcome{Status: StatusNonNumeric}, "CLIENT_ERROR cannot increment or decrement non-numeric value\r\n"},
	{"mn\r\n", Outcome{}, "MN\r\n"},
	// set a 0 100 2 / hi; ms azE= 1 b / z; set c 0 0 1 / x; get c
	{"me a\r\n", Outcome{Status: StatusHit, Value: []byte("hi"), TTL: 100, CAS: 1}, "ME a exp=-100 la=0 cas=1 fetch=no cls=1 size=62\r\n"},
	{"me azE= b\r\n", Outcome{Status: StatusHit, Value: []byte("z"), TTL: -1, CAS: 2}, "ME azE= exp=-1 la=0 cas=2 fetch=no cls=1 size=62\r\n"},
	{"me c\r\n", Outcome{Status: StatusHit, Value: []byte("x"), TTL: -1, CAS: 3, Fetched: true}, "ME c exp=-1 la=0 cas=3 fetch=yes cls=1 size=61\r\n"},
	{"me zz\r\n", Outcome{Status: StatusMiss}, "EN\r\n"},
}

func TestMetaReplies(t *testing.T) {
	for _, tc := range metaReplyCases {
		var cmd Command
		n, err := Decode([]byte(tc.line), DecodeOptions{}, &cmd)
		if err != nil || n != len(tc.line) {
			t.Fatalf("%q: Decode = %d, %v", tc.line, n, err)
		}
		if got := AppendReply(nil, &cmd, cmd.Key, &tc.o); string(got) != tc.want {
			t.Errorf("%q with %+v:\n got %q\nwant %q", tc.line, tc.o, got, tc.want)
		}
	}
}

func TestClassicEncoders(t *testing.T) {
	var b []byte
	b = AppendValue(b, []byte("a"), 5, []byte("5"), 14, true)
	b = AppendValue(b, []byte("a"), 5, []byte("5"), 14, false)
	b = AppendEnd(b)
	b = AppendStat(b, "version", "1.6.18")
	b = AppendStatUint(b, "curr_items", 1)
	b = AppendVersion(b, "1.6.18")
	b = AppendError(b)
	b = AppendClientError(b, "unauthenticated")
	b = AppendServerError(b, "queue full")
	b = AppendNoop(b)
	want := "VALUE a 5 1 14\r\n5\r\nVALUE a 5 1\r\n5\r\nEND\r\nSTAT version 1.6.18\r\nSTAT curr_items 1\r\n" +
		"VERSION 1.6.18\r\nERROR\r\nCLIENT_ERROR unauthenticated\r\nSERVER_ERROR queue full\r\nMN\r\n"
	if string(b) != want {
		t.Errorf("got %q\nwant %q", b, want)
	}
}

// TestIncremental feeds every prefix of each input: Decode must say
// "incomplete" or give exactly what it gives for the whole input.
func TestIncremental(t *testing.T) {
	for _, tc := range hostileCases {
		in := []byte(tc.in)
		if len(in) > 4096 {
			continue
		}
		var whole, part Command
		for len(in) > 0 {
			n, err := Decode(in, DecodeOptions{}, &whole)
			if n == 0 && err == nil {
				break
			}
			for i := 0; i < n && i < len(in); i++ {
				pn, perr := Decode(in[:i], DecodeOptions{}, &part)
				if pn == 0 && (perr == nil || errors.Is(perr, ErrLineTooLong) && n > MaxLineLen) {
					continue // memcached too closes a line past 2048 bytes if it arrives without its newline
				}
				if pn != n || !sameError(perr, err) {
					t.Fatalf("%s: prefix %d of %q: %d, %v; whole: %d, %v", tc.name, i, in[:n], pn, perr, n, err)
				}
			}
			if e, ok := err.(*Error); ok && (e.Close || e.Swallow > len(in)-n) {
				break
			}
			in = in[n:]
			if e, ok := err.(*Error); ok {
				in = in[e.Swallow:]
			}
		}
	}
}

// TestUnterminatedGetLine: a get or gets line may arrive in pieces past
// MaxLineLen (memcached keeps reading a large multi-get) up to MaxGetLine;
// any other line, or one with over 100 leading spaces, is closed there.
func TestUnterminatedGetLine(t *testing.T) {
	keys := strings.Repeat("k1 nokey ", 4000)
	for _, tc := range []struct {
		name, in string
		close    bool
	}{
		{"get", "get " + keys, false},
		{"gets after spaces", strings.Repeat(" ", 100) + "gets " + keys, false},
		{"get after 101 spaces", strings.Repeat(" ", 101) + "get " + keys, true},
		{"get past MaxGetLine", "get " + keys + keys + keys, true},
		{"set", "set " + keys, true},
	} {
		var cmd Command
		n, err := Decode([]byte(tc.in), DecodeOptions{MaxGetLine: 64 << 10}, &cmd)
		e, _ := err.(*Error)
		if n != 0 || (e != nil) != tc.close || e != nil && (!e.Close || len(e.Reply) != 0 || !errors.Is(e, ErrLineTooLong)) {
			t.Errorf("%s (%d bytes): %d, %v; want incomplete or, for close %v, a silent close", tc.name, len(tc.in), n, err, tc.close)
		}
	}
}

func sameError(a, b error) bool {
	ea, _ := a.(*Error)
	eb, _ := b.(*Error)
	if ea == nil || eb == nil {
		return ea == nil && eb == nil
	}
	return bytes.Equal(ea.Reply, eb.Reply) && ea.Close == eb.Close && ea.Swallow == eb.Swallow
}

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

// TestLargeMultiGetKeepsFewKeys: a get of 500,000 keys is counted, its
// first keys kept, and every key found in Line; Keys does not grow with the
// line (each key cost 24 bytes there, kept with the Command: 60 connections
// sending such lines held 2.3 GB against a 64 MiB network budget). A key
// over 250 bytes anywhere in the line still fails it.
func TestLargeMultiGetKeepsFewKeys(t *testing.T) {
	const n = 500_000
	line := "get" + strings.Repeat(" k", n-1) + " last\r\n"
	var cmd Command
	if m, err := Decode([]byte(line), DecodeOptions{}, &cmd); m != len(line) || err != nil {
		t.Fatalf("Decode: %d, %v", m, err)
	}
	if cmd.NKeys != n || len(cmd.Keys) != inlineKeys || cap(cmd.Keys) > inlineKeys || string(cmd.Key) != "k" {
		t.Fatalf("NKeys %d, %d keys kept (capacity %d), Key %q; want %d, %d kept, \"k\"",
			cmd.NKeys, len(cmd.Keys), cap(cmd.Keys), cmd.Key, n, inlineKeys)
	}
	off, last := FirstKey(cmd.Line, cmd.Kind), []byte(nil)
	for range n {
		last, off = Token(cmd.Line, off)
	}
	if string(last) != "last" {
		t.Fatalf("key %d from Line: %q, want \"last\"", n, last)
	}
	long := "get" + strings.Repeat(" k", 1000) + " " + strings.Repeat("x", MaxKeyLen+1) + "\r\n"
	if _, err := Decode([]byte(long), DecodeOptions{}, &cmd); err == nil || !strings.Contains(string(err.(*Error).Reply), "bad command line format") {
		t.Fatalf("a key of %d bytes after 1,000 keys: %v, want CLIENT_ERROR bad command line format", MaxKeyLen+1, err)
	}
}
