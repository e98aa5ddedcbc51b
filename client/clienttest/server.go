// Package clienttest is a fake memcached binary-protocol server for tests of
// package client and of the tools built on it, in the manner of
// net/http/httptest. It listens on 127.0.0.1:0, records every request and
// answers each with what the Handler registered for its opcode writes.
// It knows nothing of kvd's server package: replies are canned by the
// test.
//
// Without a Handler, HELLO grants every feature asked for, SASL_AUTH
// accepts any PLAIN credentials (or only those given to SetCredentials),
// SELECT_BUCKET and NOOP succeed, and any other opcode gets 0x81 Unknown
// command. A Server is safe for concurrent use; each connection is served
// by its own goroutine, stopped by Close.
package clienttest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"math"
	"net"
	"sync"
	"testing"

	"kvd/protocol/binary"
)

// Handler answers one request by writing zero or more replies to w.
// req and its slices are the handler's to keep.
type Handler func(w *Writer, req *binary.Request)

// Server is a fake server. Create it with NewServer.
type Server struct {
	// Addr is the host:port the server listens on.
	Addr string

	ln net.Listener
	wg sync.WaitGroup // connection goroutines and the accept loop

	mu       sync.Mutex
	handlers map[binary.Opcode]Handler // guarded by mu
	requests []binary.Request          // guarded by mu
	conns    map[net.Conn]struct{}     // guarded by mu
	user     string                    // guarded by mu; "" accepts anyone
	password string                    // guarded by mu
	closed   bool                      // guarded by mu
}

// NewServer starts a fake server on 127.0.0.1:0 and closes it when tb's
// test ends.
func NewServer(tb testing.TB) *Server {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("clienttest: listen: %v", err)
	}
	s := &Server{
		Addr:     ln.Addr().String(),
		ln:       ln,
		handlers: map[binary.Opcode]Handler{},
		conns:    map[net.Conn]struct{}{},
	}
	s.wg.Add(1)
	go s.accept()
	tb.Cleanup(s.Close)
	return s
}

// Handle makes h answer every later request with opcode op.
func (s *Server) Handle(op binary.Opcode, h Handler) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.handlers[op] = h
}

// SetCredentials makes the default SASL_AUTH handler accept only user and
// password, answering anything else with 0x20.
func (s *Server) SetCredentials(user, password string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.user, s.password = user, password
}

// Requests returns the requests received so far, in order, over all
// connections.
func (s *Server) Requests() []binary.Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]binary.Request(nil), s.requests...)
}

// Last returns the last request received with opcode op.
func (s *Server) Last(op binary.Opcode) (binary.Request, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := len(s.requests) - 1; i >= 0; i-- {
		if s.requests[i].Opcode == op {
			return s.requests[i], true
		}
	}
	return binary.Request{}, false
}

// Close stops the server, closes its connections and waits for their
// goroutines.
func (s *Server) Close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	s.ln.Close()
	for nc := range s.conns {
		nc.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

func (s *Server) accept() {
	defer s.wg.Done()
	for {
		nc, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			nc.Close()
			return
		}
		s.conns[nc] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go s.serve(nc)
	}
}

// serve answers one connection's requests until it closes or a handler
// closes it.
func (s *Server) serve(nc net.Conn) {
	defer s.wg.Done()
	defer func() {
		s.mu.Lock()
		delete(s.conns, nc)
		s.mu.Unlock()
		nc.Close()
	}()
	r := bufio.NewReader(nc)
	for {
		req, err := readRequest(r)
		if err != nil {
			return
		}
		w := &Writer{req: req}
		s.handler(req)(w, req)
		if len(w.out) > 0 {
			if _, err := nc.Write(w.out); err != nil {
				return
			}
		}
		if w.close {
			return
		}
	}
}

// handler records req and returns the Handler that answers it.
func (s *Server) handler(req *binary.Request) Handler {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requests = append(s.requests, *req)
	if h, ok := s.handlers[req.Opcode]; ok {
		return h
	}
	switch req.Opcode {
	case binary.OpHello:
		return func(w *Writer, req *binary.Request) { w.OK(nil, req.Value) }
	case binary.OpSASLAuth:
		return s.saslAuth(s.user, s.password)
	case binary.OpSelectBucket, binary.OpNoop:
		return func(w *Writer, _ *binary.Request) { w.OK(nil, nil) }
	}
	return func(w *Writer, _ *binary.Request) { w.Error(binary.StatusUnknownCommand, "unknown command") }
}

func (s *Server) saslAuth(user, password string) Handler {
	return func(w *Writer, req *binary.Request) {
		parts := bytes.SplitN(req.Value, []byte{0}, 3)
		switch {
		case string(req.Key) != "PLAIN" || len(parts) != 3:
			w.Error(binary.StatusAuthError, "malformed PLAIN credentials")
		case user != "" && (string(parts[1]) != user || string(parts[2]) != password):
			w.Error(binary.StatusAuthError, "Authentication failed")
		default:
			w.OK(nil, []byte("Authenticated"))
		}
	}
}

// readRequest reads one request frame into its own memory.
func readRequest(r *bufio.Reader) (*binary.Request, error) {
	hdr := make([]byte, binary.HeaderLen)
	if _, err := io.ReadFull(r, hdr); err != nil {
		return nil, err
	}
	req := new(binary.Request)
	if _, err := binary.DecodeRequest(hdr, math.MaxUint32, req); err != nil {
		return nil, err
	}
	buf := append(hdr, make([]byte, binary.BodyLen(hdr))...)
	if _, err := io.ReadFull(r, buf[binary.HeaderLen:]); err != nil {
		return nil, err
	}
	n, err := binary.DecodeRequest(buf, math.MaxUint32, req)
	if err == nil && n != len(buf) {
		err = errors.New("clienttest: short frame")
	}
	return req, err
}

// Writer collects the replies to one request. Its methods echo the
// request's opcode and opaque unless told otherwise.
type Writer struct {
	req   *binary.Request
	out   []byte
	close bool
}

// OK writes a success reply with key and value.
func (w *Writer) OK(key, value []byte) {
	w.Reply(binary.Response{Status: binary.StatusOK, Key: key, Value: value})
}

// Stat writes one statistic of a STAT reply; end the group with OK(nil,
// nil).
func (w *Writer) Stat(name, value string) {
	w.OK([]byte(name), []byte(value))
}

// Error writes an error reply with kvd's XERROR body,
// {"error":{"context":reason}}, and datatype JSON.
func (w *Writer) Error(st binary.Status, reason string) {
	ctx, _ := json.Marshal(reason)
	body := []byte(`{"error":{"context":` + string(ctx) + `}}`)
	w.Reply(binary.Response{Status: st, Datatype: binary.DatatypeJSON, Value: body})
}

// Reply writes res as it is, except that a zero Opcode and Opaque are
// taken from the request (write a wrong opaque on purpose by setting it).
func (w *Writer) Reply(res binary.Response) {
	if res.Opcode == 0 {
		res.Opcode = w.req.Opcode
	}
	if res.Opaque == 0 {
		res.Opaque = w.req.Opaque
	}
	w.out = binary.AppendResponse(w.out, false, &res)
}

// Raw writes b to the connection as it is (a malformed frame, say).
func (w *Writer) Raw(b []byte) {
	w.out = append(w.out, b...)
}

// Close closes the connection once the replies are written.
func (w *Writer) Close() {
	w.close = true
}
