// Package texttest holds the test helpers of kvd's text protocol that more
// than one package's tests use: a Debian memcached starter, a client that
// sends a pipeline and collects the replies, the golden transcripts
// captured from memcached, and a seeded generator of random text and meta
// pipelines. protocol/text's tests compare its codec with memcached through
// them; tests/ compares the running kvd with memcached through them. Stdlib
// only (package text's own tests import it).
package texttest

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The sentinel is a command whose reply no test input produces: a pipeline
// that ends with it is answered completely once its reply arrives.
const (
	SentinelCommand = "mg kvd-end k\r\n"
	SentinelReply   = "EN kkvd-end\r\n"
)

// StartMemcached starts Debian's memcached on a free loopback port and
// returns its address; it is stopped when the test ends. Without memcached
// the test skips loudly; KVD_REQUIRE_TOOLS=1 makes that a failure.
func StartMemcached(t testing.TB, extra ...string) string {
	t.Helper()
	bin, err := exec.LookPath("memcached")
	if err != nil {
		if os.Getenv("KVD_REQUIRE_TOOLS") == "1" {
			t.Fatalf("memcached not on PATH and KVD_REQUIRE_TOOLS=1")
		}
		t.Skip("SKIPPED: Debian memcached not on PATH; these checks did not run")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	args := append([]string{"-p", strconv.Itoa(port), "-U", "0", "-l", "127.0.0.1"}, extra...)
	if os.Geteuid() == 0 {
		args = append(args, "-u", "root")
	}
	cmd := exec.Command(bin, args...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	for i := 0; i < 200; i++ {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return addr
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("memcached did not listen on %s", addr)
	return ""
}

// Ask sends in on a new connection and collects what comes back: until the
// reply ends in SentinelReply when sentinel is set (in ends with
// SentinelCommand), else until the server closes or stays silent for 300 ms
// after taking all of in.
func Ask(t testing.TB, addr string, in []byte, sentinel bool) (out []byte, closed bool) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	written := make(chan struct{})
	go func() { c.Write(in); close(written) }()
	buf := make([]byte, 64<<10)
	for deadline := time.Now().Add(10 * time.Second); ; {
		c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
		n, err := c.Read(buf)
		out = append(out, buf[:n]...)
		if sentinel && bytes.HasSuffix(out, []byte(SentinelReply)) {
			return out, false
		}
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			if time.Now().After(deadline) {
				t.Fatalf("no complete answer from %s in 10 s to %d bytes; got %q", addr, len(in), tail(out))
			}
			select {
			case <-written:
				if !sentinel {
					return out, false
				}
			default:
			}
			continue
		}
		if err != nil {
			return out, true
		}
	}
}

func tail(b []byte) []byte { return b[max(0, len(b)-300):] }

// Transcript is one connection of a golden file: what the client sent,
// what memcached answered, and whether it closed the connection.
type Transcript struct {
	Title    string
	In, Out  []byte
	Closed   bool
	Line     int // of its "---" line in the file
	Verdicts int // "=" lines seen (a well-formed transcript has one)
}

// LoadTranscripts reads a golden file (format: protocol/text/golden_test.go).
func LoadTranscripts(path string) ([]Transcript, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var ts []Transcript
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for line := 1; sc.Scan(); line++ {
		text := sc.Text()
		kind, rest, _ := strings.Cut(text, " ")
		if text == "" || kind == "#" {
			continue
		}
		if kind == "---" {
			ts = append(ts, Transcript{Title: rest, Line: line})
			continue
		}
		if len(ts) == 0 {
			return nil, fmt.Errorf("%s:%d: %q before the first ---", path, line, text)
		}
		tr := &ts[len(ts)-1]
		switch kind {
		case ">", "<":
			s, err := strconv.Unquote(rest)
			if err != nil {
				return nil, fmt.Errorf("%s:%d: %v", path, line, err)
			}
			if kind == ">" {
				tr.In = append(tr.In, s...)
			} else {
				tr.Out = append(tr.Out, s...)
			}
		case "=":
			tr.Closed, tr.Verdicts = rest == "closed", tr.Verdicts+1
		default:
			return nil, fmt.Errorf("%s:%d: cannot parse %q", path, line, text)
		}
	}
	return ts, sc.Err()
}
