// Package etcdtest starts a real single-member etcd server on loopback for
// tests: free client and peer ports, a temporary data directory, and Stop /
// Start to simulate an outage without losing the data. It runs the etcd
// binary on PATH (Debian's etcd-server package installs /usr/bin/etcd,
// 3.4.x). Without it, Start skips the test loudly, or fails it when
// KVD_REQUIRE_TOOLS=1.
//
// A Server is owned by one test; it is stopped by t.Cleanup. It is not safe
// for concurrent use by several goroutines.
package etcdtest

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"kvd/internal/loopback"
)

// Errors returned by the helpers.
var (
	// ErrNotReady is returned when etcd does not answer within the start
	// timeout.
	ErrNotReady = errors.New("etcdtest: etcd did not become ready")
)

// startTimeout bounds how long Start waits for etcd to answer.
const startTimeout = 20 * time.Second

// Server is a running (or stopped) etcd member.
type Server struct {
	t       testing.TB
	bin     string
	dir     string
	client  string // client URL, http://127.0.0.1:port
	peer    string // peer URL
	cmd     *exec.Cmd
	waited  chan struct{}
	logMu   sync.Mutex
	logBuf  bytes.Buffer // guarded by logMu
	running bool
}

// Binary returns the path of the etcd binary, or "" when there is none.
func Binary() string {
	if p, err := exec.LookPath("etcd"); err == nil {
		return p
	}
	if _, err := os.Stat("/usr/bin/etcd"); err == nil {
		return "/usr/bin/etcd"
	}
	return ""
}

// Start starts etcd for t and registers its Stop with t.Cleanup. It skips
// the test when etcd is missing (fails it when KVD_REQUIRE_TOOLS=1).
func Start(t testing.TB) *Server {
	t.Helper()
	bin := Binary()
	if bin == "" {
		if os.Getenv("KVD_REQUIRE_TOOLS") == "1" {
			t.Fatal("etcdtest: etcd binary not found and KVD_REQUIRE_TOOLS=1 (apt-get install etcd-server)")
		}
		t.Skip("SKIPPED: etcd binary not found (apt-get install etcd-server); set KVD_REQUIRE_TOOLS=1 to fail instead")
	}
	s := &Server{t: t, bin: bin, dir: t.TempDir()}
	s.client = "http://" + freeAddr(t)
	s.peer = "http://" + freeAddr(t)
	t.Cleanup(s.Stop)
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	return s
}

// Endpoints returns the client URLs to dial.
func (s *Server) Endpoints() []string { return []string{s.client} }

// Restart starts the member again on the same ports and data directory
// (the first start, when called by Start) and waits until it answers.
func (s *Server) Restart() error {
	if s.running {
		return nil
	}
	cmd := exec.Command(s.bin,
		"--name", "kvdtest",
		"--data-dir", filepath.Join(s.dir, "data"),
		"--listen-client-urls", s.client,
		"--advertise-client-urls", s.client,
		"--listen-peer-urls", s.peer,
		"--initial-advertise-peer-urls", s.peer,
		"--initial-cluster", "kvdtest="+s.peer,
		"--initial-cluster-state", "new",
		"--log-level", "warn",
	)
	cmd.Stdout = s.logWriter()
	cmd.Stderr = s.logWriter()
	cmd.SysProcAttr = procAttr()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("etcdtest: start %s: %w", s.bin, err)
	}
	s.cmd, s.running = cmd, true
	s.waited = make(chan struct{})
	go func() { _ = cmd.Wait(); close(s.waited) }()
	return s.waitReady()
}

// Stop kills the member (SIGKILL: an outage, not a shutdown) and waits for
// it to exit. The data directory stays for Restart.
func (s *Server) Stop() {
	if !s.running {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGKILL)
	<-s.waited
	s.running = false
}

// Wipe kills the member, deletes its data and starts it again on the same
// ports with the same flags: etcd as after a disk loss, with the same
// cluster ID and its revisions starting over.
func (s *Server) Wipe() error {
	s.Stop()
	if err := os.RemoveAll(filepath.Join(s.dir, "data")); err != nil {
		return err
	}
	return s.Restart()
}

// Log returns what etcd printed so far (for failure messages).
func (s *Server) Log() string {
	s.logMu.Lock()
	defer s.logMu.Unlock()
	return s.logBuf.String()
}

// waitReady polls the /health endpoint's TCP port until etcd accepts a
// connection and reports healthy.
func (s *Server) waitReady() error {
	deadline := time.Now().Add(startTimeout)
	for time.Now().Before(deadline) {
		select {
		case <-s.waited:
			s.running = false
			return fmt.Errorf("%w: exited early:\n%s", ErrNotReady, s.Log())
		default:
		}
		if healthy(s.client) {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("%w within %v:\n%s", ErrNotReady, startTimeout, s.Log())
}

type lockedWriter struct{ s *Server }

func (w lockedWriter) Write(p []byte) (int, error) {
	w.s.logMu.Lock()
	defer w.s.logMu.Unlock()
	return w.s.logBuf.Write(p)
}

func (s *Server) logWriter() lockedWriter { return lockedWriter{s} }

// freeAddr returns a loopback address with a port that was free a moment
// ago, below the kernel's ephemeral range (see package loopback).
func freeAddr(t testing.TB) string {
	addr, err := loopback.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

// healthy reports whether etcd at url answers its /health endpoint with
// health true.
func healthy(url string) bool {
	c := http.Client{Timeout: time.Second}
	resp, err := c.Get(url + "/health")
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode == http.StatusOK && bytes.Contains(body, []byte(`"true"`))
}
