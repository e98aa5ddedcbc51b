package text

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"kvd/protocol/text/texttest"
)

// Golden transcripts live in testdata/*.txt, one connection per block:
//
//	--- TITLE     starts a connection
//	> "…"         what the client sent, as a Go quoted string (several lines concatenate)
//	< "…"         what memcached answered, likewise
//	= closed      memcached closed the connection afterwards (else "= open")
//	# …           a comment
//
// testdata/memcached-1.6.18.txt was captured from Debian's memcached 1.6.18
// by `go test -run TestCaptureGolden -capture ./protocol/text/` (the inputs
// are hostileCases under 16 KiB). TestGolden replays every transcript through
// Decode and AppendReply driving the model, without memcached.

var capture = flag.Bool("capture", false, "rewrite testdata/memcached-1.6.18.txt from a running memcached")

const goldenFile = "memcached-1.6.18.txt"

func TestCaptureGolden(t *testing.T) {
	if !*capture {
		t.Skip("run with -capture to rewrite the golden transcript from memcached")
	}
	var b bytes.Buffer
	b.WriteString("# Debian memcached 1.6.18 (memcached -p PORT -U 0 -l 127.0.0.1), one fresh server per connection.\n")
	for _, tc := range hostileCases {
		if len(tc.in) > 16<<10 {
			continue
		}
		addr := texttest.StartMemcached(t)
		in, sentinel := withSentinel(tc.in)
		out, closed := texttest.Ask(t, addr, in, sentinel)
		fmt.Fprintf(&b, "\n--- %s\n", tc.name)
		writeQuoted(&b, '>', in)
		writeQuoted(&b, '<', out)
		if closed {
			b.WriteString("= closed\n")
		} else {
			b.WriteString("= open\n")
		}
	}
	if err := os.WriteFile(filepath.Join("testdata", goldenFile), b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// writeQuoted writes data as quoted strings, one per protocol line.
func writeQuoted(b *bytes.Buffer, kind byte, data []byte) {
	if len(data) == 0 {
		fmt.Fprintf(b, "%c \"\"\n", kind)
	}
	for len(data) > 0 {
		i := bytes.IndexByte(data, '\n') + 1
		if i == 0 || i > 200 {
			i = min(len(data), 200)
		}
		fmt.Fprintf(b, "%c %s\n", kind, strconv.Quote(string(data[:i])))
		data = data[i:]
	}
}

func loadTranscripts(t *testing.T, path string) []texttest.Transcript {
	ts, err := texttest.LoadTranscripts(path)
	if err != nil {
		t.Fatal(err)
	}
	return ts
}

func TestGolden(t *testing.T) {
	path := filepath.Join("testdata", goldenFile)
	ts := loadTranscripts(t, path)
	if len(ts) < 50 {
		t.Fatalf("only %d transcripts in %s", len(ts), path)
	}
	for _, tr := range ts {
		if tr.Verdicts != 1 {
			t.Errorf("%s:%d %s: want one = line, have %d", path, tr.Line, tr.Title, tr.Verdicts)
		}
		out, closed := newModel(1 << 20).run(tr.In)
		if !bytes.Equal(out, tr.Out) || closed != tr.Closed {
			t.Errorf("%s:%d %s:\nmemcached (closed %v): %q\ndecoder+model (closed %v): %q",
				path, tr.Line, tr.Title, tr.Closed, tr.Out, closed, out)
		}
	}
}
