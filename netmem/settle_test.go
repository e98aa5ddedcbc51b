//go:build linux

package netmem

import (
	"syscall"
	"testing"
	"time"
)

// TestSettle: a socket with unread input is not settled; one that has had
// none for the quiet time is; max ends the wait whatever the socket holds.
func TestSettle(t *testing.T) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fds[0])
	defer syscall.Close(fds[1])
	const quiet, max = 20 * time.Millisecond, time.Second
	t0 := time.Unix(1000, 0)
	var s Settle
	if s.Done(fds[0], t0, quiet, max) {
		t.Fatal("settled at the first look")
	}
	if _, err := syscall.Write(fds[1], []byte("get k\r\n")); err != nil {
		t.Fatal(err)
	}
	if s.Done(fds[0], t0.Add(30*time.Millisecond), quiet, max) {
		t.Fatal("settled with 7 bytes unread")
	}
	buf := make([]byte, 16)
	if _, err := syscall.Read(fds[0], buf); err != nil {
		t.Fatal(err)
	}
	if s.Done(fds[0], t0.Add(40*time.Millisecond), quiet, max) {
		t.Fatal("settled at the first quiet look after input")
	}
	if !s.Done(fds[0], t0.Add(60*time.Millisecond), quiet, max) {
		t.Fatal("not settled after 20 ms without input")
	}
	var busy Settle
	_, _ = syscall.Write(fds[1], []byte("x"))
	busy.Done(fds[0], t0, quiet, max)
	if !busy.Done(fds[0], t0.Add(max), quiet, max) {
		t.Fatal("not settled at max with input unread")
	}
}
