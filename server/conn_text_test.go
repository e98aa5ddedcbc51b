package server

import (
	"strings"
	"testing"

	"kvd/command"
	"kvd/internal/version"
	mc "kvd/protocol/binary"
	"kvd/protocol/text"
	"kvd/protocol/translate"
)

// openText is openFake for a text connection: its first bytes are text.
func (s *Server) openText(t *testing.T, in string) (*conn, *fakeConn) {
	c, f := s.openFake(t)
	f.in = append(f.in, in...)
	return c, f
}

// drain runs loop passes until the connection has nothing in flight and
// no input left, waiting for the worker's wake between passes.
func drain(t *testing.T, c *conn, f *fakeConn) string {
	t.Helper()
	for i := 0; i < 100; i++ {
		c.onTraffic()
		if c.inflight == nil && len(f.in) == 0 {
			return string(f.out)
		}
		if c.inflight != nil {
			f.waitWake(t)
		}
	}
	t.Fatalf("connection did not drain; output so far %q", f.out)
	return ""
}

// TestTextPipelineOrder: a text pipeline mixing worker batches, GETs of
// resident items answered on the loop, loop-only commands and errors is
// answered in request order, each reply the text one.
func TestTextPipelineOrder(t *testing.T) {
	s := newLoopServer(t, newClock(), nil)
	c, f := s.openText(t, "set a 5 0 2\r\nhi\r\nget a nope a\r\nmn\r\nbogus\r\n"+
		"gets nope\r\nincr a 1\r\nms n 2 T0 c\r\n10\r\nma n v\r\nmg n v t f\r\nversion\r\n"+
		"delete a\r\ndelete a noreply\r\nadd a 0 0 1\r\nx\r\nadd a 0 0 1\r\ny\r\ncas a 0 0 1 0\r\nz\r\nget a\r\n")
	got := drain(t, c, f)
	want := "STORED\r\nVALUE a 5 2\r\nhi\r\nVALUE a 5 2\r\nhi\r\nEND\r\nMN\r\nERROR\r\nEND\r\n" +
		"CLIENT_ERROR cannot increment or decrement non-numeric value\r\nHD c#\r\nVA 2\r\n11\r\nVA 2 t-1 f0\r\n11\r\n" +
		"VERSION " + version.Reply + "\r\nDELETED\r\nSTORED\r\nNOT_STORED\r\nEXISTS\r\nVALUE a 0 1\r\nx\r\nEND\r\n"
	if got = maskCAS(got); got != want {
		t.Errorf("pipeline replies:\n got %q\nwant %q", got, want)
	}
	if c.txt == nil || c.proto != protoText {
		t.Error("the connection was not recognized as text")
	}
}

// TestTextRefusals: a refused storage command is answered once its data
// block has been swallowed, across passes (a too-large set also unlinks
// its key); a bad data chunk's remainder is a command of its own; the
// commands after a refusal are served.
func TestTextRefusals(t *testing.T) {
	s := newLoopServer(t, newClock(), func(o *Options) { o.MaxItemSize = 16 })
	c, f := s.openText(t, "set big 0 0 3\r\nold\r\nset big 0 0 40\r\n"+strings.Repeat("x", 30))
	if got := drain(t, c, f); got != "STORED\r\n" {
		t.Fatalf("before the block is swallowed: %q", got)
	}
	f.in = append(f.in, strings.Repeat("x", 10)+"\r\nget big\r\nset k 0 0 3\r\nabcdef\r\nversion\r\n"...)
	want := "STORED\r\nSERVER_ERROR object too large for cache\r\nEND\r\n" +
		"CLIENT_ERROR bad data chunk\r\nERROR\r\nVERSION " + version.Reply + "\r\n"
	if got := drain(t, c, f); got != want {
		t.Errorf("refusals:\n got %q\nwant %q", got, want)
	}
	if c.quitting {
		t.Error("a refusal closed the connection")
	}
}

// maskCAS replaces the digits after " c" in meta replies.
func maskCAS(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		b.WriteByte(s[i])
		if s[i] == 'c' && i > 0 && s[i-1] == ' ' && i+1 < len(s) && s[i+1] >= '0' && s[i+1] <= '9' {
			b.WriteByte('#')
			for i+1 < len(s) && s[i+1] >= '0' && s[i+1] <= '9' {
				i++
			}
		}
	}
	return b.String()
}

// TestTextFirstByte: 0x80 and 0x08 make a binary connection, anything else
// a text one; with DisableText a text first byte stays binary (and is a
// protocol error, as before text support).
func TestTextFirstByte(t *testing.T) {
	s := newLoopServer(t, newClock(), nil)
	c, f := s.openFake(t)
	f.send(&mc.Request{Magic: mc.MagicRequest, Opcode: mc.OpNoop})
	c.onTraffic()
	if c.proto != protoBinary || c.txt != nil {
		t.Errorf("0x80 first: proto %d", c.proto)
	}
	off := newLoopServer(t, newClock(), func(o *Options) { o.DisableText = true })
	c, f = off.openText(t, "version\r\n")
	c.onTraffic()
	if c.proto != protoBinary || !c.quitting {
		t.Errorf("text with DisableText: proto %d quitting %v, want binary and closing", c.proto, c.quitting)
	}
}

// TestTextResidentGetAllocs: a loop pass answering a text GET of a
// resident item allocates nothing once the connection is warm.
func TestTextResidentGetAllocs(t *testing.T) {
	s := newLoopServer(t, newClock(), nil)
	c, f := s.openText(t, "set k 0 0 5\r\nvalue\r\nget k\r\n")
	drain(t, c, f)
	in := make([]byte, 0, 64) // Discard reslices f.in: refill from a fixed array
	pass := func() {
		f.in = append(in[:0], "get k\r\nmg k v c f t\r\n"...)
		f.out = f.out[:0]
		c.onTraffic()
		if c.inflight != nil {
			t.Fatal("a resident GET went to a worker")
		}
	}
	pass()
	if n := testing.AllocsPerRun(200, pass); n != 0 {
		t.Errorf("a pass answering a resident text get and mg: %v allocations, want 0", n)
	}
}

// TestTextExpiryMeaning: the expiries translate states for text commands
// mean to the executor what memcached means: a negative exptime is born
// expired, and incr/decr never create (command.NoCreate).
func TestTextExpiryMeaning(t *testing.T) {
	now := uint32(1_700_000_000)
	if at := command.ExpiryAt(translate.Expiry(-1), now); at == 0 || at >= now {
		t.Errorf("exptime -1 expires at %d, want in the past of %d", at, now)
	}
	s := translate.NewSession(0)
	if _, ok := s.Decode([]byte("incr k 1\r\n")); !ok || s.Next() != translate.Run {
		t.Fatal("incr did not translate into a request")
	}
	if _, _, exp, ok := mc.ArithExtras(s.Request().Extras); !ok || exp != command.NoCreate {
		t.Errorf("incr's expiry %#x, want NoCreate", exp)
	}
	if s.Command().Kind != text.KindIncr {
		t.Errorf("decoded %v", s.Command().Kind)
	}
}
