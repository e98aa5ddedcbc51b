package text

import (
	"bytes"
	"errors"
	"testing"
)

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
