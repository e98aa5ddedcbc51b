package tests

import (
	"bufio"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"
)

// textClient is a raw text-protocol connection for black-box tests.
type textClient struct {
	t  testing.TB
	nc net.Conn
	r  *bufio.Reader
}

func dialText(t testing.TB, addr string) *textClient {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = nc.Close() })
	return &textClient{t: t, nc: nc, r: bufio.NewReaderSize(nc, 1<<20)}
}

func (c *textClient) send(s string) {
	c.t.Helper()
	_ = c.nc.SetWriteDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c.nc, s); err != nil {
		c.t.Fatalf("write: %v", err)
	}
}

// line reads one reply line without its "\r\n".
func (c *textClient) line(timeout time.Duration) (string, error) {
	_ = c.nc.SetReadDeadline(time.Now().Add(timeout))
	s, err := c.r.ReadString('\n')
	return strings.TrimSuffix(s, "\r\n"), err
}

// expect reads one line per want and fails on the first that differs.
func (c *textClient) expect(what string, want ...string) {
	c.t.Helper()
	for _, w := range want {
		got, err := c.line(10 * time.Second)
		if err != nil || got != w {
			c.t.Fatalf("%s: got %q (%v), want %q", what, got, err, w)
		}
	}
}

// call sends s and expects the lines want.
func (c *textClient) call(what, s string, want ...string) {
	c.t.Helper()
	c.send(s)
	c.expect(what, want...)
}

// closedByPeer reports whether the server closed the connection (EOF or
// reset) within timeout, draining whatever came first.
func (c *textClient) closedByPeer(timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		_, err := c.line(time.Until(deadline))
		if err != nil {
			return !isTimeout(err)
		}
	}
	return false
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

// textLogin authenticates as memcached -Y does (a set whose data is
// "user password") and expects STORED.
func textLogin(t testing.TB, addr, user, password string) *textClient {
	t.Helper()
	c := dialText(t, addr)
	cred := user + " " + password
	c.call("login "+user, "set auth 0 0 "+itoa(len(cred))+"\r\n"+cred+"\r\n", "STORED")
	return c
}

func itoa(n int) string { return strconv.Itoa(n) }
