package text

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"kvd/protocol/text/texttest"
)

// These tests ask the real memcached: each input runs against a fresh
// Debian memcached 1.6.18 and against the decoder driving a small model
// (model_test.go); replies and the close/keep-open verdict must match byte
// for byte. Without memcached they skip loudly; KVD_REQUIRE_TOOLS=1 makes
// that a failure.

// withSentinel appends the sentinel command to in when the model says in ends on a
// command boundary with the connection open, so that ask knows when
// memcached is done.
func withSentinel(in string) ([]byte, bool) {
	_, closed, pending := newModel(1 << 20).runRest([]byte(in))
	if closed || pending {
		return []byte(in), false
	}
	return []byte(in + texttest.SentinelCommand), true
}

type hostileCase struct {
	name string
	in   string
}

var hostileCases = []hostileCase{
	{"unknown command", "foo\r\n"},
	{"uppercase", "GET a\r\n"},
	{"empty line", "\r\n"},
	{"bare newline", "\n"},
	{"get without key", "get\r\n"},
	{"key of 251 bytes", "get " + strings.Repeat("a", 251) + "\r\n"},
	{"key of 250 bytes", "set " + strings.Repeat("a", 250) + " 0 0 1\r\nx\r\nget " + strings.Repeat("a", 250) + "\r\n"},
	{"set key too long", "set " + strings.Repeat("a", 251) + " 0 0 1\r\nx\r\n"},
	{"data longer than declared", "set a 0 0 3\r\nabcd\r\nget a\r\n"},
	{"data shorter than declared", "set a 0 0 5\r\nabc\r\nget a\r\n"},
	{"negative length", "set a 0 0 -1\r\nx\r\n"},
	{"huge length", "set a 0 0 99999999999\r\nx\r\n"},
	{"non-numeric flags", "set a x 0 1\r\nb\r\n"},
	{"non-numeric exptime", "set a 0 x 1\r\nb\r\n"},
	{"non-numeric length", "set a 0 0 x\r\nb\r\n"},
	{"negative flags", "set a -1 0 1\r\nb\r\n"},
	{"flags wrapping past 2^64", "set a -18446744073709551611 0 1\r\nb\r\nget a\r\n"},
	{"minus zero", "set a -0 0 1\r\nb\r\nget a\r\n"},
	{"numbers with white space", "set a 5\t 0 1\r\nb\r\nset b \t5 0 1\r\nc\r\nset c 5\tjunk 0 1\r\nd\r\nget a b c\r\n"},
	{"length then carriage return", "set a 0 0 1\t\r\nb\r\nset b 0 0 1\r\r\nc\r\nget a b\r\n"},
	{"white space alone is no number", "set a \t 0 1\r\nb\r\n"},
	{"sign without digits", "set a + 0 1\r\nb\r\nset a - 0 1\r\nb\r\n"},
	{"junk glued to a number", "set a 5x 0 1\r\nb\r\n"},
	{"arithmetic with white space and wrap", "set n 0 0 1\r\n1\r\nincr n 1\t\r\nincr n -18446744073709551615\r\ndecr n -1\r\n"},
	{"touch, gat, verbosity and flush_all with a tab", "set a 0 0 1\r\nb\r\ntouch a 10\t\r\ngat 10\t a\r\nverbosity 1\t\r\nflush_all 0\t\r\nget a\r\n"},
	{"flags past 32 bits", "set a 4294967297 0 1\r\nb\r\nget a\r\n"},
	{"set too few tokens", "set a 0 0\r\n"},
	{"set too many tokens", "set a 0 0 1 noreply extra\r\nx\r\n"},
	{"set noreply", "set a 0 0 1 noreply\r\nx\r\nget a\r\n"},
	{"set noreply bad chunk", "set a 0 0 1 noreply\r\nxy\r\nget a\r\n"},
	{"set noreply bad format", "set a x 0 1 noreply\r\nx\r\n"},
	{"too large swallowed", "set a 0 0 2000000\r\n" + strings.Repeat("x", 2000000) + "\r\nget a\r\n"},
	{"too large noreply", "set a 0 0 2000000 noreply\r\n" + strings.Repeat("x", 2000000) + "\r\nget a\r\n"},
	{"line over 2048 without newline", strings.Repeat("x", 2100)},
	{"long line with newline", strings.Repeat("x", 2100) + "\r\n"},
	{"short line without newline", strings.Repeat("x", 1000)},
	{"incr non-numeric delta", "incr a x\r\n"},
	{"incr negative delta", "incr a -1\r\n"},
	{"incr delta past 64 bits", "incr a 18446744073709551616\r\n"},
	{"incr missing", "incr zz 1\r\n"},
	{"incr non-numeric value", "set a 0 0 1\r\nx\r\nincr a 1\r\n"},
	{"incr decr", "set a 0 0 1\r\n5\r\nincr a 10\r\ndecr a 100\r\nincr a 18446744073709551615\r\n"},
	{"incr wraps", "set a 0 0 20\r\n18446744073709551615\r\nincr a 2\r\n"},
	{"cas", "set a 5 0 1\r\n5\r\ngets a b\r\ncas a 0 0 1 999\r\nx\r\ncas a 0 0 1 1\r\ny\r\ncas zz 0 0 1 1\r\nx\r\ngets a\r\n"},
	{"cas bad unique", "cas a 0 0 1 x\r\ny\r\n"},
	{"touch and gat", "set a 5 0 1\r\n5\r\ntouch a 10\r\ntouch zz 10\r\ngat 100 a zz\r\ngats 100 a\r\n"},
	{"gat without exptime", "gat a\r\ngat x a\r\n"},
	{"touch bad exptime", "touch a x\r\n"},
	{"delete forms", "set a 0 0 1\r\nx\r\ndelete a 0\r\ndelete a 5\r\ndelete a noreply\r\ndelete a\r\ndelete a 0 noreply\r\ndelete a 1 noreply\r\n"},
	{"add replace append prepend", "add a 0 0 1\r\nx\r\nadd a 0 0 1\r\ny\r\nreplace zz 0 0 1\r\nx\r\nappend a 0 0 1\r\nz\r\nprepend a 0 0 1\r\nw\r\nappend zz 0 0 1\r\nx\r\nget a\r\n"},
	{"multi get", "set a 1 0 1\r\nx\r\nset b 2 0 2\r\nyy\r\nget a zz b a\r\ngets  a   b \r\n"},
	{"many keys", "get" + strings.Repeat(" k", 100) + "\r\n"},
	{"flush_all forms", "flush_all\r\nflush_all noreply\r\nflush_all 10\r\nflush_all -1\r\nflush_all x\r\nflush_all 0 0\r\nflush_all 0 noreply\r\n"},
	{"version and verbosity", "version\r\nversion x\r\nverbosity\r\nverbosity 1\r\nverbosity 1 noreply\r\nverbosity x\r\n"},
	{"quit", "quit\r\nget a\r\n"},
	{"leading spaces", "   get a\r\n"},
	{"LF only", "set a 0 0 1\nx\r\nget a\n"},
	{"NUL in line", "get a\x00b\r\n"},
	{"control characters in key", "set a\x01b 0 0 1\r\nx\r\nget a\x01b\r\n"},
	{"mn", "mn\r\nmn x\r\n"},
	{"meta without key", "mg\r\nms\r\nmd\r\nma\r\nme\r\nmz a\r\n"},
	{"mg flags", "set k 5 0 2\r\nhi\r\nmg k v f t c s k O123\r\nmg k\r\nmg k q\r\nmg k v q\r\nmg zz v q\r\nmg zz v k O9\r\nmn\r\n"},
	{"mg errors", "mg k zz\r\nmg k O12345678901234567890123456789012345\r\nmg k v v\r\nmg k N\r\nmg k Tx\r\nmg k b\r\n"},
	{"mg too many flags", "mg k a b c d e f g h i j k l m n o p q r s t u v\r\nmg k v f t c s O1 O2 O3 O4 O5 O6 O7 O8 O9 O10 O11 O12 O13 O14\r\n"},
	{"md and ma too many flags", "md k q q q q q q q q q q q q q q q q q q q\r\nma k q q q q q q q q q q q q q q q q q q q\r\nmn\r\n"},
	{"base64 keys", "ms azE= 2 b\r\nhi\r\nmg azE= b v k\r\nmg azE= b k c\r\nmg a1== b v k\r\nget a1\r\nmd azE= b q k\r\nmd azE= b k\r\n"},
	{"ms forms", "ms k 2 T0 F5 c\r\nhi\r\nms k 2 C1\r\nab\r\nms k 2 C2 c k\r\nab\r\nms k 2 q\r\nxy\r\nms k 1 ME\r\nz\r\nms k 1 MA\r\nz\r\nms k 1 MP\r\na\r\nms zz 1 MR\r\nz\r\nms zz 1 MA q\r\nz\r\nmg k v\r\nmn\r\n"},
	{"ms errors", "ms k\r\nms k x\r\nms k 2 MX\r\nhi\r\nms k 2 Mxy\r\nhi\r\nms k 2 Fx\r\nhi\r\nms k -1\r\nms k 2 zz\r\nhi\r\nms k 2\r\nhiya\r\nmn\r\n"},
	{"ms too large", "ms k 2000000 T0\r\n" + strings.Repeat("x", 2000000) + "\r\nmg k v\r\n"},
	{"ms lowercase mode", "ms k 1 Ms\r\nz\r\nms k 1 Ma\r\nz\r\nmg k v\r\n"},
	{"md forms", "ms k 1\r\nz\r\nmd k q\r\nmd k q\r\nmd k O5 k\r\nms k 1\r\nz\r\nmd k C999\r\nmn\r\n"},
	{"ma forms", "ma n\r\nma n N0 J13 v\r\nma n v\r\nma n MD D20 v c\r\nma n q\r\nma n M+ D2 v\r\nma n M- v O7 k\r\nma zz q\r\nmn\r\n"},
	{"ma errors", "ma n MX\r\nma n Jx\r\nma n Dx\r\nma n D-1\r\nms n 1\r\nx\r\nma n\r\n"},
	{"me", "me a\r\nme " + strings.Repeat("a", 251) + "\r\n"},
	{"me bad base64 keys", "me A b\r\nme QQ= b\r\nme ==== b\r\nme AAAAA b\r\nme YWJj b\r\n"},
	{"md errors", "md k zz\r\nmd k Cx\r\nmd k Tx\r\nmd k b\r\nmd k q q\r\nmd k O12345678901234567890123456789012345\r\n"},
	{"ma modes", "ma n N0 Mi v\r\nma n Md v\r\nma n zz\r\nma n q q\r\nma n Nx\r\nma n O12345678901234567890123456789012345\r\n"},
	{"verbosity noreply", "verbosity noreply\r\nverbosity x noreply\r\n"},
	{"verbosity too many", "verbosity 1 2 3\r\nverbosity 1 noreply 3\r\nverbosity 1 2 3 4\r\nverbosity 1 2\r\n"},
	{"zero CAS", "set k 0 0 1\r\n5\r\nma k C0 v\r\nms k 1 MA C0\r\nA\r\nms k 1 MP C0\r\nP\r\nmg k v\r\nms k 1 C0\r\nz\r\nmd k C0\r\ncas k 0 0 1 0\r\nz\r\nmg k v\r\n"},
	{"too large unlinks", "set a 0 0 1\r\nx\r\nset a 0 0 2000000\r\n" + strings.Repeat("x", 2000000) + "\r\nget a\r\n"},
	{"too large add keeps", "set a 0 0 1\r\nx\r\nadd a 0 0 2000000\r\n" + strings.Repeat("x", 2000000) + "\r\nreplace a 0 0 2000000 noreply\r\n" + strings.Repeat("x", 2000000) + "\r\nget a\r\n"},
	{"ms too large unlinks", "ms k 1\r\nz\r\nms k 2000000 MA\r\n" + strings.Repeat("x", 2000000) + "\r\nmg k v\r\n"},
	{"noreply everywhere", "set a 0 0 1 noreply\r\n1\r\nadd a 0 0 1 noreply\r\n2\r\nreplace a 0 0 1 noreply\r\n3\r\nappend a 0 0 1 noreply\r\n4\r\nprepend a 0 0 1 noreply\r\n5\r\ncas a 0 0 1 99 noreply\r\n6\r\nincr a 1 noreply\r\ndecr a 1 noreply\r\ntouch a 0 noreply\r\ndelete zz noreply\r\nincr a x noreply\r\ntouch a x noreply\r\nget a\r\n"},
	{"split data", "set a 0 0 10\r\n01234"},
	{"gat no keys", "gat 10\r\ngats 10 \r\n"},
	// memcached answers only the error: it drops the replies it had stacked for
	// the keys before (and, pipelined, for earlier commands not yet flushed).
	{"long key mid get", "get a " + strings.Repeat("a", 251) + " a\r\n"},
	{"long keys other commands", "incr " + strings.Repeat("a", 251) + " 1\r\ntouch " + strings.Repeat("a", 251) + " 1\r\ndelete " + strings.Repeat("a", 251) + "\r\nmg " + strings.Repeat("a", 251) + " v\r\nms " + strings.Repeat("a", 251) + " 1\r\nx\r\n"},
	{"ma on an empty value with another CAS", "ms k 0\r\n\r\nma k C1 O3 v\r\nincr k 1\r\nmn\r\n"},
	{"meta numbers with white space", "ms k 1\t\r\na\r\nms k 1 F5\t\r\nb\r\nmg k T10\t t v f\r\nms n 1\r\n5\r\nma n D5\t v\r\nma m N0\t J5\t v\r\nmn\r\n"},
	{"meta numbers wrapping past 2^64", "ms k 1 F-18446744073709551611\r\na\r\nmg k f v\r\nms n 1\r\n5\r\nma n D-18446744073709551615 v\r\nma n D-1 v\r\nmn\r\n"},
	{"ms bad base64 swallows", "ms a 2 b\r\nhi\r\nmn\r\n"},
	{"meta flags outside their command", "ms k 1\r\nz\r\nmg k F5 v\r\nmg k E5 v\r\nmd k x\r\nmg k C1 D3 J4 M5 v\r\nmn\r\n"},
	{"ms flags echo", "ms k 1 O77 k b\r\nz\r\nms azE= 1 O77 k b c\r\nz\r\nms azE= 1 ME O1 k b\r\nz\r\n"},
	{"ma echo", "ma n O1 k\r\nma n N0 O2 k t c\r\nma n O3 k q\r\nmn\r\n"},
	{"gets no keys", "gets\r\ngets \r\n"},
	{"stats unknown group", "stats nothing\r\n"},
}

func TestHostileAgainstMemcached(t *testing.T) {
	for _, tc := range hostileCases {
		t.Run(tc.name, func(t *testing.T) {
			addr := texttest.StartMemcached(t)
			in, sentinel := withSentinel(tc.in)
			want, wantClosed := texttest.Ask(t, addr, in, sentinel)
			got, gotClosed := newModel(1 << 20).run(in)
			if !bytes.Equal(got, want) || gotClosed != wantClosed {
				t.Errorf("input %q\nmemcached (closed %v):\n%q\ndecoder+model (closed %v):\n%q",
					short(tc.in), wantClosed, want, gotClosed, got)
			}
		})
	}
}

func short(s string) string {
	if len(s) > 300 {
		return s[:300] + "…"
	}
	return s
}

// FuzzDecode: Decode never panics, never consumes more than it was given,
// returns only *Error errors with a well-formed reply, gives the same
// answer for a buffer with more bytes after the command, and its views lie
// inside the input; a decoded classic set re-encodes to a line that
// decodes to the same command.
func FuzzDecode(f *testing.F) {
	for _, tc := range hostileCases {
		if len(tc.in) < 4096 {
			f.Add([]byte(tc.in))
		}
	}
	for _, in := range allocInputs {
		f.Add([]byte(in))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		var cmd, again Command
		opts := DecodeOptions{MaxValue: 1 << 12, MaxGetLine: 1 << 13}
		n, err := Decode(in, opts, &cmd)
		if n < 0 || n > len(in) {
			t.Fatalf("n = %d for %d bytes", n, len(in))
		}
		if err != nil {
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("error %T %v is not *Error", err, err)
			}
			if len(e.Reply) > 0 && !bytes.HasSuffix(e.Reply, crlf) {
				t.Fatalf("reply %q lacks CRLF", e.Reply)
			}
			if e.Swallow < 0 {
				t.Fatalf("swallow %d", e.Swallow)
			}
			return
		}
		if n == 0 {
			return
		}
		longer := append(append([]byte(nil), in...), "get x\r\n"...)
		if n2, err2 := Decode(longer, opts, &again); n2 != n || err2 != nil || again.Kind != cmd.Kind {
			t.Fatalf("with a trailing command: %d %v %v; alone %d %v", n2, err2, again.Kind, n, cmd.Kind)
		}
		checkRoundTrip(t, &cmd, opts)
		o := Outcome{Status: StatusHit, Value: cmd.Value, TTL: -1}
		AppendReply(nil, &cmd, cmd.Key, &o)
	})
}

// checkRoundTrip re-encodes classic storage commands and decodes them again.
func checkRoundTrip(t *testing.T, cmd *Command, opts DecodeOptions) {
	if cmd.Kind < KindSet || cmd.Kind > KindPrepend {
		return
	}
	line := AppendStorage(nil, cmd)
	var back Command
	n, err := Decode(line, opts, &back)
	if err != nil || n != len(line) {
		t.Fatalf("re-encoded %q: %d, %v", line, n, err)
	}
	if back.Kind != cmd.Kind || !bytes.Equal(back.Key, cmd.Key) || back.Flags != cmd.Flags ||
		back.Exptime != cmd.Exptime || !bytes.Equal(back.Value, cmd.Value) || back.NoReply != cmd.NoReply {
		t.Fatalf("round trip of %q changed the command", line)
	}
}
