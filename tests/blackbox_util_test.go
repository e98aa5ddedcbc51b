package tests

// Helpers shared by the black-box tests in memccapable_test.go,
// tenants_test.go, pipeline_test.go, durability_test.go and hostile_test.go.

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	mc "kvd/protocol/binary"
)

// configWith returns the JSON object base with the given top-level fields
// set (added or replaced).
func configWith(t testing.TB, base string, fields map[string]any) string {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(base), &m); err != nil {
		t.Fatalf("configWith: base config: %v", err)
	}
	for k, v := range fields {
		m[k] = v
	}
	out, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

// hostPort splits a listen address into host and port.
func hostPort(t testing.TB, addr string) (string, string) {
	t.Helper()
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("address %q: %v", addr, err)
	}
	return host, port
}

// rawHeader builds a request header with arbitrary (possibly inconsistent)
// length fields: the classic 0x80 layout.
func rawHeader(magic byte, op mc.Opcode, keyLen uint16, extLen uint8, body, opaque uint32) []byte {
	h := make([]byte, mc.HeaderLen)
	h[0], h[1] = magic, byte(op)
	binary.BigEndian.PutUint16(h[2:4], keyLen)
	h[4] = extLen
	binary.BigEndian.PutUint32(h[8:12], body)
	binary.BigEndian.PutUint32(h[12:16], opaque)
	return h
}

// isConnGone reports whether err means the peer closed the connection.
func isConnGone(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, net.ErrClosed)
}

// drainUntilClosed reads everything the server sends until it closes the
// connection or timeout passes. closed is true only for a close by the peer.
func (c *rawConn) drainUntilClosed(timeout time.Duration) (data []byte, closed bool) {
	_ = c.nc.SetReadDeadline(time.Now().Add(timeout))
	buf := make([]byte, 64<<10)
	for {
		n, err := c.r.Read(buf)
		data = append(data, buf[:n]...)
		if err != nil {
			return data, isConnGone(err)
		}
	}
}

// parseResponses decodes the response frames in data; a trailing partial or
// undecodable frame is reported as an error.
func parseResponses(data []byte) ([]*mc.Response, error) {
	var out []*mc.Response
	for len(data) > 0 {
		res := new(mc.Response)
		n, err := mc.DecodeResponse(data, 1<<30, res)
		if err != nil {
			return out, err
		}
		if n == 0 {
			return out, fmt.Errorf("%d trailing bytes are not a whole response", len(data))
		}
		out = append(out, res)
		data = data[n:]
	}
	return out, nil
}

// reqWith is a classic-framing request with the given parts.
func reqWith(op mc.Opcode, opaque uint32, extras []byte, key, value string) *mc.Request {
	r := &mc.Request{Magic: mc.MagicRequest, Opcode: op, Opaque: opaque, Extras: extras}
	if key != "" {
		r.Key = []byte(key)
	}
	if value != "" {
		r.Value = []byte(value)
	}
	return r
}

// expectStatus sends r and fails unless the reply has the given status and
// echoes r's opcode and opaque.
func (c *rawConn) expectStatus(what string, r *mc.Request, want mc.Status) *mc.Response {
	c.t.Helper()
	res := c.call(r)
	if res.Status != want || res.Opcode != r.Opcode || res.Opaque != r.Opaque {
		c.t.Fatalf("%s: got %v status 0x%02x (%v) opaque %d %q, want %v status 0x%02x (%v) opaque %d",
			what, res.Opcode, uint16(res.Status), res.Status, res.Opaque, res.Value,
			r.Opcode, uint16(want), want, r.Opaque)
	}
	return res
}

// tryRecvAfter sends r and waits for its reply without failing the test.
func (c *rawConn) tryRecvAfter(r *mc.Request, timeout time.Duration) (*mc.Response, error) {
	_ = c.nc.SetWriteDeadline(time.Now().Add(timeout))
	if _, err := c.nc.Write(mc.AppendRequest(nil, r)); err != nil {
		return nil, err
	}
	return c.tryRecv(timeout)
}

// startMemcached starts Debian's memcached on a free loopback port (TCP
// only) and kills it when the test ends. It returns the address.
func startMemcached(t testing.TB) string {
	t.Helper()
	bin := requireTool(t, "memcached")
	addr := freeAddr(t)
	_, port := hostPort(t, addr)
	args := []string{"-p", port, "-U", "0", "-l", "127.0.0.1", "-m", "256", "-I", "2m", "-c", "20000"}
	if os.Getuid() == 0 {
		args = append(args, "-u", "root") // memcached refuses to run as root otherwise
	}
	cmd := exec.Command(bin, args...)
	var log strings.Builder
	cmd.Stdout, cmd.Stderr = &log, &log
	done := startHelper(t, cmd)
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond); err == nil {
			_ = c.Close()
			return addr
		}
		select {
		case <-done:
			t.Fatalf("memcached exited during start: %s", log.String())
		case <-time.After(50 * time.Millisecond):
		}
	}
	t.Fatalf("memcached did not accept on %s", addr)
	return ""
}

// startHelper starts an external server for the test and kills it when the
// test ends (or the test binary dies). The channel is closed once the
// process has exited.
func startHelper(t testing.TB, cmd *exec.Cmd) <-chan struct{} {
	t.Helper()
	dieWithTest(cmd)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
	})
	return done
}
