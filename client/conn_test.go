package client_test

import (
	"errors"
	"io"
	"net"
	"reflect"
	"strings"
	"testing"
	"time"

	"kvd/client"
	"kvd/client/clienttest"
	"kvd/protocol/binary"
)

func dial(t *testing.T, s *clienttest.Server, o client.Options) *client.Conn {
	t.Helper()
	c, err := client.Dial(s.Addr, o)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestDialHandshake(t *testing.T) {
	s := clienttest.NewServer(t)
	s.SetCredentials("admin", "change-me")
	s.Handle(binary.OpHello, func(w *clienttest.Writer, req *binary.Request) {
		w.OK(nil, []byte{0x00, 0x07, 0x00, 0x0b}) // XERROR and JSON only
	})
	c := dial(t, s, client.Options{User: "admin", Password: "change-me", Bucket: "app", Agent: "kvctl"})

	reqs := s.Requests()
	var ops []binary.Opcode
	for _, r := range reqs {
		ops = append(ops, r.Opcode)
	}
	want := []binary.Opcode{binary.OpHello, binary.OpSASLAuth, binary.OpSelectBucket}
	if !reflect.DeepEqual(ops, want) {
		t.Fatalf("handshake sent %v, want %v", ops, want)
	}
	if k, v := string(reqs[0].Key), reqs[0].Value; k != "kvctl" || string(v) != "\x00\x07\x00\x08\x00\x0b" {
		t.Errorf("HELLO key %q value %x, want kvctl 0007 0008 000b", k, v)
	}
	if k, v := string(reqs[1].Key), string(reqs[1].Value); k != "PLAIN" || v != "\x00admin\x00change-me" {
		t.Errorf("SASL_AUTH key %q value %q", k, v)
	}
	if k := string(reqs[2].Key); k != "app" {
		t.Errorf("SELECT_BUCKET key %q, want app", k)
	}
	if got := c.Features(); !reflect.DeepEqual(got, []uint16{0x07, 0x0b}) {
		t.Errorf("Features() = %v, want [7 11]", got)
	}
	if !c.HasFeature(client.FeatureJSON) || c.HasFeature(client.FeatureSelectBucket) {
		t.Errorf("HasFeature disagrees with the granted list %v", c.Features())
	}
	seen := map[uint32]bool{}
	for _, r := range reqs {
		if seen[r.Opaque] {
			t.Errorf("opaque %d used twice", r.Opaque)
		}
		seen[r.Opaque] = true
	}
}

func TestDialAnonymousSendsOnlyHello(t *testing.T) {
	s := clienttest.NewServer(t)
	dial(t, s, client.Options{})
	reqs := s.Requests()
	if len(reqs) != 1 || reqs[0].Opcode != binary.OpHello || string(reqs[0].Key) != client.DefaultAgent {
		t.Fatalf("anonymous Dial sent %+v, want one HELLO from %s", reqs, client.DefaultAgent)
	}
}

func TestDialRefused(t *testing.T) {
	s := clienttest.NewServer(t)
	s.SetCredentials("admin", "change-me")
	s.Handle(binary.OpSelectBucket, func(w *clienttest.Writer, req *binary.Request) {
		w.Error(binary.StatusAccessDenied, "no access to bucket "+string(req.Key))
	})
	for _, tc := range []struct {
		o    client.Options
		want string
	}{
		{client.Options{User: "admin", Password: "wrong"}, "SASL_AUTH: authentication failed (0x20)"},
		{client.Options{User: "admin", Password: "change-me", Bucket: "x"},
			"SELECT_BUCKET: access denied (0x24): no access to bucket x"},
	} {
		c, err := client.Dial(s.Addr, tc.o)
		var se *client.StatusError
		if c != nil || !errors.As(err, &se) || err.Error() != tc.want {
			t.Errorf("Dial(%+v) = %v, %v; want *StatusError %q", tc.o, c, err, tc.want)
		}
	}
}

func TestDialOldServerWithoutHello(t *testing.T) {
	s := clienttest.NewServer(t)
	s.Handle(binary.OpHello, func(w *clienttest.Writer, _ *binary.Request) {
		w.Error(binary.StatusUnknownCommand, "Unknown command")
	})
	c := dial(t, s, client.Options{})
	if f := c.Features(); len(f) != 0 {
		t.Errorf("Features() = %v after HELLO got 0x81, want none", f)
	}
}

func TestDialNothingListening(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	if _, err := client.Dial(addr, client.Options{Timeout: time.Second}); err == nil {
		t.Fatalf("Dial(%s) with nothing listening succeeded", addr)
	}
}

func TestDoSuccessAndRefusal(t *testing.T) {
	s := clienttest.NewServer(t)
	s.Handle(binary.OpSetBucketThrottle, func(w *clienttest.Writer, req *binary.Request) {
		if string(req.Key) != "app" {
			w.Error(binary.StatusKeyNotFound, "no such bucket: "+string(req.Key))
			return
		}
		w.Error(binary.StatusInvalidArguments, "reserved 900 is above hard_limit 500")
	})
	s.Handle(binary.OpListBuckets, func(w *clienttest.Writer, _ *binary.Request) {
		w.OK(nil, []byte("app default"))
	})
	c := dial(t, s, client.Options{})

	req := &binary.Request{Opcode: binary.OpSetBucketThrottle, Key: []byte("app"), Value: []byte(`{"reserved":900}`)}
	res, err := c.Do(req)
	var se *client.StatusError
	if !errors.As(err, &se) || se.Status != binary.StatusInvalidArguments {
		t.Fatalf("Do = %v, want a 0x04 *StatusError", err)
	}
	const want = "SET_BUCKET_THROTTLE_PROPERTIES: invalid arguments (0x04): reserved 900 is above hard_limit 500"
	if err.Error() != want {
		t.Errorf("Error() = %q\nwant      %q", err.Error(), want)
	}
	if res == nil || res.Status != binary.StatusInvalidArguments {
		t.Errorf("Do returned reply %+v with the refusal, want the 0x04 reply", res)
	}
	if req.Opaque != 0 {
		t.Errorf("Do modified the caller's request (opaque %d)", req.Opaque)
	}

	// A refusal leaves the connection usable.
	res, err = c.Do(&binary.Request{Opcode: binary.OpListBuckets})
	if err != nil || string(res.Value) != "app default" {
		t.Fatalf("LIST_BUCKETS after a refusal = %v, %v", res, err)
	}
}

func TestDoRefusesRequestsWithoutOneReply(t *testing.T) {
	s := clienttest.NewServer(t)
	c := dial(t, s, client.Options{})
	for _, op := range []binary.Opcode{binary.OpGetQ, binary.OpSetQ, binary.OpStat} {
		if _, err := c.Do(&binary.Request{Opcode: op}); !errors.Is(err, client.ErrUnsupportedRequest) {
			t.Errorf("Do(%s) = %v, want ErrUnsupportedRequest", op, err)
		}
	}
	if _, err := c.Do(&binary.Request{Opcode: binary.OpNoop}); err != nil {
		t.Errorf("NOOP after refused requests: %v", err)
	}
}

func TestReplyOutOfStepClosesConn(t *testing.T) {
	for name, h := range map[string]clienttest.Handler{
		"wrong opaque": func(w *clienttest.Writer, req *binary.Request) {
			w.Reply(binary.Response{Opaque: req.Opaque + 1})
		},
		"wrong opcode": func(w *clienttest.Writer, req *binary.Request) {
			w.Reply(binary.Response{Opcode: binary.OpVersion})
		},
		"bad magic": func(w *clienttest.Writer, req *binary.Request) {
			w.Raw([]byte("SERVER_ERROR nope\r\n......"))
		},
	} {
		t.Run(name, func(t *testing.T) {
			s := clienttest.NewServer(t)
			s.Handle(binary.OpNoop, h)
			c := dial(t, s, client.Options{})
			if _, err := c.Do(&binary.Request{Opcode: binary.OpNoop}); !errors.Is(err, client.ErrUnexpectedReply) {
				t.Fatalf("Do = %v, want ErrUnexpectedReply", err)
			}
			if _, err := c.Do(&binary.Request{Opcode: binary.OpNoop}); !errors.Is(err, client.ErrClosed) {
				t.Errorf("Do after an out-of-step reply = %v, want ErrClosed", err)
			}
		})
	}
}

func TestServerHangsUp(t *testing.T) {
	s := clienttest.NewServer(t)
	s.Handle(binary.OpNoop, func(w *clienttest.Writer, _ *binary.Request) { w.Close() })
	c := dial(t, s, client.Options{})
	if _, err := c.Do(&binary.Request{Opcode: binary.OpNoop}); !errors.Is(err, io.EOF) {
		t.Fatalf("Do on a hung-up connection = %v, want EOF", err)
	}
	_, err := c.Stats("")
	if !errors.Is(err, client.ErrClosed) || !strings.Contains(err.Error(), "EOF") {
		t.Errorf("Stats after EOF = %v, want ErrClosed naming the EOF", err)
	}
}

func TestDoTimesOut(t *testing.T) {
	s := clienttest.NewServer(t)
	s.Handle(binary.OpNoop, func(*clienttest.Writer, *binary.Request) {}) // never answers
	c := dial(t, s, client.Options{Timeout: 200 * time.Millisecond})
	_, err := c.Do(&binary.Request{Opcode: binary.OpNoop})
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("Do on a silent server = %v, want a timeout", err)
	}
}

func TestStats(t *testing.T) {
	s := clienttest.NewServer(t)
	s.Handle(binary.OpStat, func(w *clienttest.Writer, req *binary.Request) {
		switch string(req.Key) {
		case "":
			w.Stat("pid", "42")
			w.Stat("version", "kvd 0.1")
			w.OK(nil, nil)
		case "bucket_details app":
			w.Stat("app", `{"name":"app","ru":3}`)
			w.OK(nil, nil)
		case "empty":
			w.OK(nil, nil)
		default:
			w.Error(binary.StatusKeyNotFound, `unknown stat group "`+string(req.Key)+`"`)
		}
	})
	c := dial(t, s, client.Options{})
	for _, tc := range []struct {
		group string
		want  []client.Stat
	}{
		{"", []client.Stat{{"pid", "42"}, {"version", "kvd 0.1"}}},
		{"bucket_details app", []client.Stat{{"app", `{"name":"app","ru":3}`}}},
		{"empty", []client.Stat{}},
	} {
		got, err := c.Stats(tc.group)
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("Stats(%q) = %v, %v; want %v", tc.group, got, err, tc.want)
		}
	}
	_, err := c.Stats("nope")
	if err == nil || err.Error() != `STAT: not found (0x01): unknown stat group "nope"` {
		t.Errorf("Stats(nope) = %v", err)
	}
	if _, err := c.Stats(""); err != nil {
		t.Errorf("Stats after a refused group: %v", err)
	}
}

func TestCloseTwice(t *testing.T) {
	s := clienttest.NewServer(t)
	c := dial(t, s, client.Options{})
	if err := c.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := c.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := c.Do(&binary.Request{Opcode: binary.OpNoop}); !errors.Is(err, client.ErrClosed) {
		t.Errorf("Do after Close = %v, want ErrClosed", err)
	}
}
