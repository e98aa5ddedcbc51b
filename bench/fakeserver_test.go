package bench

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"

	mc "kvd/protocol/binary"
)

// fakeServer is a small kvd stand-in for tests: HELLO (every feature kvbench
// asks for), SASL PLAIN, SELECT_BUCKET, GET and SET on per-bucket maps, RU
// and WU frame infos in 0x18 replies, and, for connections in non-blocking
// mode, 0x0c {"next_tick_us":500} for every throttleEvery-th data command.
type fakeServer struct {
	ln            net.Listener
	users         map[string]string // user → password
	buckets       map[string]bool
	throttleEvery int64
	closeAfter    int64 // close a connection after this many data commands; 0 = never

	dataOps   atomic.Int64
	throttled atomic.Int64
	wg        sync.WaitGroup

	mu    sync.Mutex
	store map[string][]byte // guarded by mu; key = bucket + "\x00" + key
	conns map[net.Conn]bool // guarded by mu
}

func startFakeServer(t *testing.T, f *fakeServer) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f.ln, f.store, f.conns = ln, map[string][]byte{}, map[net.Conn]bool{}
	f.wg.Go(f.accept)
	t.Cleanup(func() {
		ln.Close()
		f.mu.Lock()
		for c := range f.conns {
			c.Close()
		}
		f.mu.Unlock()
		f.wg.Wait()
	})
	return ln.Addr().String()
}

func (f *fakeServer) accept() {
	for {
		nc, err := f.ln.Accept()
		if err != nil {
			return
		}
		f.mu.Lock()
		f.conns[nc] = true
		f.mu.Unlock()
		f.wg.Go(func() { f.serve(nc) })
	}
}

// fakeConn is one connection's state.
type fakeConn struct {
	feats  map[uint16]bool
	user   string
	bucket string
	ops    int64
}

func (f *fakeServer) serve(nc net.Conn) {
	defer nc.Close()
	r, w := bufio.NewReader(nc), bufio.NewWriter(nc)
	st := &fakeConn{feats: map[uint16]bool{}}
	var req mc.Request
	for {
		frame, err := readFrame(r)
		if err != nil {
			return
		}
		if _, err := mc.DecodeRequest(frame, 1<<24, &req); err != nil {
			return
		}
		res := f.handle(st, &req)
		res.Opcode, res.Opaque = req.Opcode, req.Opaque
		w.Write(mc.AppendResponse(nil, req.Alt(), &res))
		if f.closeAfter > 0 && st.ops >= f.closeAfter {
			w.Flush()
			return
		}
		if r.Buffered() == 0 && w.Flush() != nil {
			return
		}
	}
}

func readFrame(r *bufio.Reader) ([]byte, error) {
	hdr := make([]byte, mc.HeaderLen)
	if _, err := io.ReadFull(r, hdr); err != nil {
		return nil, err
	}
	body := make([]byte, mc.BodyLen(hdr))
	if _, err := io.ReadFull(r, body); err != nil {
		return nil, err
	}
	return append(hdr, body...), nil
}

func (f *fakeServer) handle(st *fakeConn, req *mc.Request) mc.Response {
	switch req.Opcode {
	case mc.OpHello:
		clear(st.feats)
		var granted []byte
		for v := req.Value; len(v) >= 2; v = v[2:] {
			st.feats[binary.BigEndian.Uint16(v)] = true
			granted = append(granted, v[:2]...)
		}
		return mc.Response{Value: granted}
	case mc.OpNoop:
		return mc.Response{}
	case mc.OpSASLAuth:
		return f.auth(st, req)
	case mc.OpSelectBucket:
		if !f.buckets[string(req.Key)] {
			return mc.Response{Status: mc.StatusKeyNotFound, Value: []byte("no such bucket")}
		}
		st.bucket = string(req.Key)
		return mc.Response{}
	case mc.OpGet, mc.OpSet:
		return f.data(st, req)
	}
	return mc.Response{Status: mc.StatusUnknownCommand}
}

func (f *fakeServer) auth(st *fakeConn, req *mc.Request) mc.Response {
	var user, pass string
	if parts := splitPlain(req.Value); len(parts) == 3 {
		user, pass = parts[1], parts[2]
	}
	if p, ok := f.users[user]; !ok || p != pass {
		return mc.Response{Status: mc.StatusAuthError, Value: []byte(`{"error":{"context":"bad credentials"}}`)}
	}
	st.user = user
	return mc.Response{}
}

func splitPlain(v []byte) []string {
	var parts []string
	start := 0
	for i, b := range v {
		if b == 0 {
			parts = append(parts, string(v[start:i]))
			start = i + 1
		}
	}
	return append(parts, string(v[start:]))
}

func (f *fakeServer) data(st *fakeConn, req *mc.Request) mc.Response {
	st.ops++
	if n := f.dataOps.Add(1); st.feats[featNonBlocking] && f.throttleEvery > 0 && n%f.throttleEvery == 0 {
		f.throttled.Add(1)
		return mc.Response{Status: mc.StatusWouldThrottle, Value: []byte(`{"next_tick_us": 500}`)}
	}
	k := st.bucket + "\x00" + string(req.Key)
	f.mu.Lock()
	defer f.mu.Unlock()
	var res mc.Response
	var ru, wu int64
	if req.Opcode == mc.OpSet {
		f.store[k] = append([]byte(nil), req.Value...)
		wu = writeUnits(len(req.Key), len(req.Value), 1024)
	} else if v, ok := f.store[k]; ok {
		res.Extras, res.Value = []byte{0, 0, 0, 0}, v
		ru = readUnits(len(req.Key), len(v), 4096)
	} else {
		return mc.Response{Status: mc.StatusKeyNotFound, Value: []byte("Not found")}
	}
	if st.feats[featUnitUsage] {
		// Report doubled units so that tests can tell them from computed ones.
		if ru > 0 {
			res.FrameInfo = mc.AppendFrameInfoUint16(res.FrameInfo, mc.FrameReadUnits, uint16(2*ru))
		}
		if wu > 0 {
			res.FrameInfo = mc.AppendFrameInfoUint16(res.FrameInfo, mc.FrameWriteUnits, uint16(2*wu))
		}
	}
	return res
}

func (f *fakeServer) String() string {
	return fmt.Sprintf("fake server: %d data ops, %d throttled", f.dataOps.Load(), f.throttled.Load())
}
