package binary

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Golden transcripts live in testdata/*.txt; ParseTranscript documents the
// grammar. The frame cap is the server's default, 20 MiB. Responses pair with
// the requests of their connection by opaque; a request answered with
// StatusInvalidArguments must fail CheckShape, and any other request with a
// known opcode must pass it, so the captured memcached transcript pins
// CheckShape to memcached's verdicts.

func loadGolden(t testing.TB, path string) []TranscriptConn {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	conns, err := ParseTranscript(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return conns
}

func goldenFiles(t testing.TB) []string {
	files, err := filepath.Glob(filepath.Join("testdata", "*.txt"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no golden transcripts: %v", err)
	}
	return files
}

func TestGolden(t *testing.T) {
	for _, path := range goldenFiles(t) {
		t.Run(filepath.Base(path), func(t *testing.T) {
			conns := loadGolden(t, path)
			frames := 0
			for _, c := range conns {
				checkGoldenConn(t, c)
				frames += len(c.Frames)
			}
			if frames < 10 {
				t.Fatalf("only %d frames in %s", frames, path)
			}
		})
	}
}

func checkGoldenConn(t *testing.T, c TranscriptConn) {
	requests := map[uint32]*Request{} // by opaque
	invalid := map[uint32]bool{}      // opaques answered with 0x04
	for _, f := range c.Frames {
		switch f.Kind {
		case '>':
			req := new(Request)
			n, err := DecodeRequest(f.Raw, testMaxBody, req)
			if err != nil || n != len(f.Raw) {
				t.Errorf("%v: DecodeRequest = %d, %v; want %d, nil", f, n, err, len(f.Raw))
				continue
			}
			if enc := AppendRequest(nil, req); !bytes.Equal(enc, f.Raw) {
				t.Errorf("%v: re-encoded\n %x\nwant\n %x", f, enc, f.Raw)
			}
			requests[req.Opaque] = req
		case '!':
			var req Request
			if n, err := DecodeRequest(f.Raw, testMaxBody, &req); n != 0 || !errors.Is(err, f.Err) {
				t.Errorf("%v: DecodeRequest = %d, %v; want 0, %v", f, n, err, f.Err)
			}
			if len(f.Raw) >= HeaderLen {
				requests[req.Opaque] = nil // answered, but has no body to shape-check
			}
		case '<':
			var res Response
			n, err := DecodeResponse(f.Raw, testMaxBody, &res)
			if err != nil || n != len(f.Raw) {
				t.Errorf("%v: DecodeResponse = %d, %v; want %d, nil", f, n, err, len(f.Raw))
				continue
			}
			if enc := AppendResponse(nil, res.Alt(), &res); !bytes.Equal(enc, f.Raw) {
				t.Errorf("%v: re-encoded\n %x\nwant\n %x", f, enc, f.Raw)
			}
			checkGoldenReply(t, f, requests, &res)
			invalid[res.Opaque] = invalid[res.Opaque] || res.Status == StatusInvalidArguments
		}
	}
	for opaque, req := range requests {
		if req == nil || !req.Opcode.Known() || invalid[opaque] {
			continue
		}
		if err := CheckShape(req); err != nil {
			t.Errorf("%s: request %v (opaque %#x) was accepted by the server but CheckShape says %v", c.Title, req.Opcode, opaque, err)
		}
	}
}

// checkGoldenReply checks a reply against the request it answers.
func checkGoldenReply(t *testing.T, f TranscriptFrame, requests map[uint32]*Request, res *Response) {
	req, ok := requests[res.Opaque]
	if !ok {
		t.Errorf("%v: reply with opaque %#x answers no request", f, res.Opaque)
		return
	}
	if req == nil {
		return
	}
	if res.Opcode != req.Opcode {
		t.Errorf("%v: reply opcode %v for a %v request", f, res.Opcode, req.Opcode)
	}
	// An alt request gets an alt reply; a classic request gets a classic one
	// unless the reply carries frame infos (units after HELLO
	// ReportUnitUsage), which only the alt framing can hold.
	if res.Alt() != req.Alt() && !(res.Alt() && len(res.FrameInfo) > 0) {
		t.Errorf("%v: reply magic %#x for request magic %#x", f, res.Magic, req.Magic)
	}
	if res.Status == StatusInvalidArguments && CheckShape(req) == nil {
		t.Errorf("%v: the server answered %v with 0x04 but CheckShape accepts it", f, req.Opcode)
	}
}

// goldenRequests returns every request frame ('>' and '!') of the
// transcripts, for fuzz seeds and benchmarks.
func goldenRequests(t testing.TB) [][]byte {
	var out [][]byte
	for _, path := range goldenFiles(t) {
		for _, c := range loadGolden(t, path) {
			for _, f := range c.Frames {
				if f.Kind != '<' {
					out = append(out, f.Raw)
				}
			}
		}
	}
	return out
}

// TestMemcachedReplay replays testdata/memcached-1.6.18.txt against a fresh
// Debian memcached 1.6.18 and checks that it still answers byte for byte as
// recorded, so the transcript stays honest. It skips in -short mode, and
// when that memcached is not installed, loudly; with KVD_REQUIRE_TOOLS=1 (CI)
// a missing or different memcached fails the test, the rule of the black-box
// tests' requireTool in tests/.
func TestMemcachedReplay(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a memcached process")
	}
	addr := startMemcached(t, "memcached 1.6.18")
	for _, c := range loadGolden(t, "testdata/memcached-1.6.18.txt") {
		t.Run(c.Title, func(t *testing.T) { replayConn(t, addr, c) })
	}
}

// startMemcached starts memcached on a free loopback port and returns its
// address; the process is killed when the test ends.
func startMemcached(t *testing.T, version string) string {
	path, err := exec.LookPath("memcached")
	if err != nil {
		missingTool(t, `MISSING TOOL "memcached": install it with `+"`apt-get install -y memcached`")
	}
	out, err := exec.Command(path, "-V").Output()
	if err != nil || strings.TrimSpace(string(out)) != version {
		missingTool(t, fmt.Sprintf("MISSING TOOL %q: the transcript was captured from %s; found %q (%v)",
			"memcached", version, bytes.TrimSpace(out), err))
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	args := []string{"-p", strconv.Itoa(port), "-U", "0", "-l", "127.0.0.1"}
	if os.Geteuid() == 0 {
		args = append(args, "-u", "nobody") // memcached refuses to run as root
	}
	cmd := exec.Command(path, args...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		conn, err := net.Dial("tcp", addr)
		if err == nil {
			conn.Close()
			return addr
		}
		if time.Now().After(deadline) {
			t.Fatalf("memcached did not start listening on %s: %v", addr, err)
		}
	}
}

// missingTool skips the test with msg, or fails it when KVD_REQUIRE_TOOLS=1
// (CI), like requireTool in tests/.
func missingTool(t *testing.T, msg string) {
	t.Helper()
	if os.Getenv("KVD_REQUIRE_TOOLS") == "1" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// replayConn sends every request of c in one write on a new connection and
// compares the replies with the recorded ones.
func replayConn(t *testing.T, addr string, c TranscriptConn) {
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var out []byte
	var want []TranscriptFrame
	for _, f := range c.Frames {
		if f.Kind == '<' {
			want = append(want, f)
		} else {
			out = append(out, f.Raw...)
		}
	}
	if _, err := conn.Write(out); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	var buf []byte
	for _, w := range want {
		got, rest, err := readFrame(conn, buf)
		if err != nil {
			t.Fatalf("%v: reading the reply: %v", w, err)
		}
		buf = rest
		var res Response
		if _, err := DecodeResponse(got, testMaxBody, &res); err == nil && res.Opcode == OpVersion {
			got = got[:HeaderLen] // the version string may differ in a patched build
			w.Raw = w.Raw[:HeaderLen]
			got[11], w.Raw[11] = 0, 0 // …and so may its length
		}
		if !bytes.Equal(got, w.Raw) {
			t.Errorf("%v: memcached replied\n %x\nrecorded\n %x", w, got, w.Raw)
		}
	}
	if c.Closed {
		_, _, err := readFrame(conn, buf)
		if !errors.Is(err, io.EOF) && !errors.Is(err, syscall.ECONNRESET) {
			t.Errorf("memcached should have closed the connection; read returned %v", err)
		}
	}
}

// readFrame reads one response frame, reusing leftover bytes in buf.
func readFrame(conn net.Conn, buf []byte) (frame, rest []byte, err error) {
	chunk := make([]byte, 4096)
	for {
		var res Response
		n, err := DecodeResponse(buf, testMaxBody, &res)
		if err != nil {
			return nil, nil, err
		}
		if n > 0 {
			return buf[:n], buf[n:], nil
		}
		m, err := conn.Read(chunk)
		buf = append(buf, chunk[:m]...)
		if err != nil && m == 0 {
			if len(buf) > 0 && errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return nil, nil, err
		}
	}
}
