// Package tests holds kvd's black-box tests: they build the real kvd binary,
// start it on a free loopback port with a temporary data directory, and talk
// to it over TCP with real clients and raw frames.
package tests

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"kvd/internal/loopback"
	mc "kvd/protocol/binary"
)

// kvdBin is the binary built once by TestMain.
var kvdBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "kvd-tests-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	kvdBin = filepath.Join(dir, "kvd")
	build := exec.Command("go", "build", "-o", kvdBin, "kvd/cmd/kvd")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building kvd:", err)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// requireTool returns the path of an external tool. Without it the test
// skips, loudly; with KVD_REQUIRE_TOOLS=1 (CI) it fails.
func requireTool(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err == nil {
		return p
	}
	msg := fmt.Sprintf("MISSING TOOL %q: install it with `apt-get install -y %s`", name, toolPackages[name])
	if os.Getenv("KVD_REQUIRE_TOOLS") == "1" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// freeAddr returns a loopback address with a port that was free a moment
// ago, below the kernel's ephemeral range (see package loopback).
func freeAddr(t testing.TB) string {
	t.Helper()
	addr, err := loopback.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

// kvd is a running kvd process.
type kvd struct {
	t       testing.TB
	Addr    string
	DataDir string
	Config  string
	cmd     *exec.Cmd
	log     *lockedBuffer
	done    chan error
	// StartWait bounds how long start waits for kvd to serve; 0 is 15 s.
	StartWait time.Duration
	// OpenFiles, when set, is kvd's open-file limit (ulimit -n, soft and hard).
	OpenFiles int
	// Env is added to kvd's environment ("NAME=value").
	Env []string
}

// testConfig is the config most tests use: an anonymous "default" bucket,
// an "app" and an "other" bucket, an admin and two tenant users.
const testConfig = `{
  "anonymous_bucket": "default",
  "buckets": [{"name": "default"}, {"name": "app"}, {"name": "other"}],
  "users": [
    {"name": "admin", "password": "admin-pw", "buckets": ["*"],
     "privileges": ["BucketThrottleManagement", "Unthrottled", "Stats"]},
    {"name": "alice", "password": "alice-pw", "buckets": ["app"]},
    {"name": "bob", "password": "bob-pw", "buckets": ["other"]}
  ]
}`

// startKVD starts kvd with the given config JSON in a fresh data dir.
func startKVD(t testing.TB, configJSON string, args ...string) *kvd {
	t.Helper()
	k := newKVD(t, configJSON)
	k.start(args...)
	return k
}

// newKVD prepares a data dir and config for kvd without starting it.
func newKVD(t testing.TB, configJSON string) *kvd {
	t.Helper()
	dir := t.TempDir()
	k := &kvd{t: t, DataDir: filepath.Join(dir, "data"), Config: filepath.Join(dir, "serverless.json")}
	if err := os.WriteFile(k.Config, []byte(configJSON), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() && k.log != nil {
			t.Logf("kvd's log (%s):\n%s", k.Addr, k.tail())
		}
		k.Stop()
	})
	return k
}

// start launches the process on a new free port and waits until it serves.
// A port taken between freeAddr and kvd's bind costs one more try, never a
// test talking to some other process.
func (k *kvd) start(args ...string) {
	k.t.Helper()
	for try := 1; ; try++ {
		err := k.startOnce(args...)
		if err == nil {
			return
		}
		if !strings.Contains(k.log.String(), "address already in use") || try == 3 {
			k.t.Fatal(err)
		}
		k.t.Logf("kvd could not bind %s; trying another port", k.Addr)
	}
}

// startOnce starts kvd and waits for its "kvd serving" line, which it logs
// once its protocol listener is bound.
func (k *kvd) startOnce(args ...string) error {
	k.Addr = freeAddr(k.t)
	all := append([]string{"--listen", k.Addr, "--data-dir", k.DataDir, "--config", k.Config,
		"--metrics-listen", ""}, args...)
	k.cmd = exec.Command(kvdBin, all...)
	if k.OpenFiles > 0 {
		k.cmd = exec.Command("sh", append([]string{"-c", fmt.Sprintf(`ulimit -n %d && exec "$0" "$@"`, k.OpenFiles), kvdBin}, all...)...)
	}
	if len(k.Env) > 0 {
		k.cmd.Env = append(os.Environ(), k.Env...)
	}
	k.log = new(lockedBuffer)
	k.cmd.Stdout, k.cmd.Stderr = k.log, k.log
	dieWithTest(k.cmd)
	if err := k.cmd.Start(); err != nil {
		return err
	}
	k.done = make(chan error, 1)
	go func() { k.done <- k.cmd.Wait() }()
	wait := k.StartWait
	if wait == 0 {
		wait = 15 * time.Second
	}
	deadline := time.Now().Add(wait)
	for time.Now().Before(deadline) {
		if strings.Contains(k.log.String(), "kvd serving") {
			if c, err := net.DialTimeout("tcp", k.Addr, 200*time.Millisecond); err == nil {
				_ = c.Close()
				return nil
			}
		}
		select {
		case err := <-k.done:
			k.cmd = nil
			return fmt.Errorf("kvd exited during start: %v\n%s", err, k.log.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
	return fmt.Errorf("kvd did not serve on %s within %v\n%s", k.Addr, wait, k.log.String())
}

// Stop sends SIGTERM and waits for a clean exit (status 0).
func (k *kvd) Stop() {
	if k.cmd == nil {
		return
	}
	_ = k.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-k.done:
		if err != nil {
			k.t.Errorf("kvd exit after SIGTERM: %v\n%s", err, k.tail())
		}
	case <-time.After(30 * time.Second):
		_ = k.cmd.Process.Kill()
		<-k.done
		k.t.Errorf("kvd did not exit within 30s of SIGTERM\n%s", k.tail())
	}
	k.cmd = nil
}

// Kill sends SIGKILL and waits.
func (k *kvd) Kill() {
	_ = k.cmd.Process.Kill()
	<-k.done
	k.cmd = nil
}

// Restart stops kvd (cleanly, or with SIGKILL when kill) and starts it again
// on the same data dir and config.
func (k *kvd) Restart(kill bool, args ...string) {
	if kill {
		k.Kill()
	} else {
		k.Stop()
	}
	k.start(args...)
}

// Alive reports whether the process is still running.
func (k *kvd) Alive() bool {
	select {
	case err := <-k.done:
		k.done <- err
		return false
	default:
		return true
	}
}

func (k *kvd) tail() string {
	s := k.log.String()
	if len(s) > 4000 {
		s = s[len(s)-4000:]
	}
	return s
}

// lockedBuffer collects kvd's output; tests may read it while kvd runs.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Log returns what kvd has logged so far.
func (k *kvd) Log() string { return k.log.String() }

// rawConn is a raw binary-protocol connection.
type rawConn struct {
	t  testing.TB
	nc net.Conn
	r  *bufio.Reader
}

func dialRaw(t testing.TB, addr string) *rawConn {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = nc.Close() })
	return &rawConn{t: t, nc: nc, r: bufio.NewReaderSize(nc, 64<<10)}
}

// send writes request frames.
func (c *rawConn) send(reqs ...*mc.Request) {
	c.t.Helper()
	var buf []byte
	for _, r := range reqs {
		buf = mc.AppendRequest(buf, r)
	}
	c.write(buf)
}

func (c *rawConn) write(b []byte) {
	c.t.Helper()
	_ = c.nc.SetWriteDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.nc.Write(b); err != nil {
		c.t.Fatalf("write: %v", err)
	}
}

// recv reads one response frame (its slices are owned by the caller).
func (c *rawConn) recv() *mc.Response {
	c.t.Helper()
	res, err := c.tryRecv(10 * time.Second)
	if err != nil {
		c.t.Fatalf("reading response: %v", err)
	}
	return res
}

func (c *rawConn) tryRecv(timeout time.Duration) (*mc.Response, error) {
	_ = c.nc.SetReadDeadline(time.Now().Add(timeout))
	hdr := make([]byte, mc.HeaderLen)
	if _, err := io.ReadFull(c.r, hdr); err != nil {
		return nil, err
	}
	body := int(uint32(hdr[8])<<24 | uint32(hdr[9])<<16 | uint32(hdr[10])<<8 | uint32(hdr[11]))
	frame := make([]byte, mc.HeaderLen+body)
	copy(frame, hdr)
	if _, err := io.ReadFull(c.r, frame[mc.HeaderLen:]); err != nil {
		return nil, err
	}
	res := new(mc.Response)
	if _, err := mc.DecodeResponse(frame, 1<<30, res); err != nil {
		return nil, err
	}
	return res, nil
}

// call sends one request and reads its response.
func (c *rawConn) call(r *mc.Request) *mc.Response {
	c.t.Helper()
	c.send(r)
	return c.recv()
}

// closed reports whether the server closed the connection within timeout.
func (c *rawConn) closed(timeout time.Duration) bool {
	_ = c.nc.SetReadDeadline(time.Now().Add(timeout))
	_, err := c.r.ReadByte()
	return err == io.EOF || (err != nil && strings.Contains(err.Error(), "reset"))
}

// auth performs SASL PLAIN and fails the test unless it succeeds.
func (c *rawConn) auth(user, password string) {
	c.t.Helper()
	res := c.call(&mc.Request{Magic: mc.MagicRequest, Opcode: mc.OpSASLAuth, Key: []byte("PLAIN"),
		Value: []byte("\x00" + user + "\x00" + password)})
	if res.Status != mc.StatusOK {
		c.t.Fatalf("auth %s: status %v %q", user, res.Status, res.Value)
	}
}

// selectBucket selects a bucket and returns the status.
func (c *rawConn) selectBucket(name string) mc.Status {
	c.t.Helper()
	return c.call(&mc.Request{Magic: mc.MagicRequest, Opcode: mc.OpSelectBucket, Key: []byte(name)}).Status
}

// Request builders.
func get(key string) *mc.Request {
	return &mc.Request{Magic: mc.MagicRequest, Opcode: mc.OpGet, Key: []byte(key)}
}

func set(key, value string) *mc.Request {
	return &mc.Request{Magic: mc.MagicRequest, Opcode: mc.OpSet, Key: []byte(key),
		Extras: mc.AppendSetExtras(nil, 0, 0), Value: []byte(value)}
}

func noop() *mc.Request { return &mc.Request{Magic: mc.MagicRequest, Opcode: mc.OpNoop} }
