package text

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
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

type transcript struct {
	title    string
	in, out  []byte
	closed   bool
	line     int
	verdicts int
}

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
		addr := startMemcached(t)
		in, sentinel := withSentinel(tc.in)
		out, closed := ask(t, addr, in, sentinel)
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

func loadTranscripts(t *testing.T, path string) []transcript {
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var ts []transcript
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		text := sc.Text()
		kind, rest, _ := strings.Cut(text, " ")
		if text == "" || kind == "#" {
			continue
		}
		if kind == "---" {
			ts = append(ts, transcript{title: rest, line: line})
			continue
		}
		if len(ts) == 0 {
			t.Fatalf("%s:%d: %q before the first ---", path, line, text)
		}
		tr := &ts[len(ts)-1]
		switch kind {
		case ">", "<":
			s, err := strconv.Unquote(rest)
			if err != nil {
				t.Fatalf("%s:%d: %v", path, line, err)
			}
			if kind == ">" {
				tr.in = append(tr.in, s...)
			} else {
				tr.out = append(tr.out, s...)
			}
		case "=":
			tr.closed, tr.verdicts = rest == "closed", tr.verdicts+1
		default:
			t.Fatalf("%s:%d: cannot parse %q", path, line, text)
		}
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
		if tr.verdicts != 1 {
			t.Errorf("%s:%d %s: want one = line, have %d", path, tr.line, tr.title, tr.verdicts)
		}
		out, closed := newModel(1 << 20).run(tr.in)
		if !bytes.Equal(out, tr.out) || closed != tr.closed {
			t.Errorf("%s:%d %s:\nmemcached (closed %v): %q\ndecoder+model (closed %v): %q",
				path, tr.line, tr.title, tr.closed, tr.out, closed, out)
		}
	}
}
