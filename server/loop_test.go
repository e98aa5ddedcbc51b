package server

import (
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/panjf2000/gnet/v2"

	"kvd/ingress"
	"kvd/internal/clock"
	"kvd/netmem"
	mc "kvd/protocol/binary"
	"kvd/tenant"
)

// fakeConn stands in for gnet.Conn: input is what the client sent and the
// loop has not consumed, out is what the loop wrote, wakes counts Wake calls
// (from workers and ticks).
type fakeConn struct {
	mu     sync.Mutex
	in     []byte
	out    []byte
	closed bool
	wakes  chan struct{}

	failWrite func() // if set, a Write fails and calls it, as gnet calls OnClose from inside a failed write
	lateWrite int    // Writes after a failed one
}

func newFakeConn() *fakeConn { return &fakeConn{wakes: make(chan struct{}, 64)} }

func (f *fakeConn) Peek(n int) ([]byte, error) {
	if n > len(f.in) {
		return f.in, io.ErrShortBuffer
	}
	return f.in[:n], nil
}
func (f *fakeConn) Discard(n int) (int, error) { // as gnet's: n <= 0 discards everything
	if n <= 0 || n > len(f.in) {
		n = len(f.in)
	}
	f.in = f.in[n:]
	return n, nil
}
func (f *fakeConn) InboundBuffered() int  { return len(f.in) }
func (f *fakeConn) OutboundBuffered() int { return 0 }
func (f *fakeConn) Write(b []byte) (int, error) {
	if f.closed {
		f.lateWrite++
	}
	if f.failWrite != nil {
		f.closed, f.in = true, nil // gnet releases the buffers
		f.failWrite()
		return 0, syscall.EPIPE
	}
	f.out = append(f.out, b...)
	return len(b), nil
}
func (f *fakeConn) Wake(gnet.AsyncCallback) error { f.wakes <- struct{}{}; return nil }
func (f *fakeConn) Close() error                  { f.closed = true; return nil }
func (f *fakeConn) send(req *mc.Request)          { f.in = mc.AppendRequest(f.in, req) }
func (f *fakeConn) waitWake(t testing.TB)         { t.Helper(); waitWake(t, f.wakes) }
func (f *fakeConn) replies(t testing.TB) []mc.Response {
	t.Helper()
	var out []mc.Response
	for buf := f.out; len(buf) > 0; {
		var r mc.Response
		n, err := mc.DecodeResponse(buf, 1<<20, &r)
		if err != nil || n == 0 {
			t.Fatalf("undecodable reply: %v", err)
		}
		out = append(out, r)
		buf = buf[n:]
	}
	return out
}

// awaitBatch returns once the batch the last pass handed to a worker is
// collected: by that pass itself (runInline), or by one after the worker's
// wake. A wake may be spurious: a batch that finishes before the loop
// yields for it is Put with a wake and still collected inline, so it
// passes again until the batch is in.
func awaitBatch(t testing.TB, c *conn, f *fakeConn) {
	t.Helper()
	for c.inflight != nil {
		f.waitWake(t)
		c.onTraffic()
	}
}

// dropWakes forgets the wakes delivered so far (see awaitBatch), so that
// the next waitWake sees a new one.
func (f *fakeConn) dropWakes() {
	for {
		select {
		case <-f.wakes:
		default:
			return
		}
	}
}

func waitWake(t testing.TB, ch chan struct{}) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(5 * time.Second):
		t.Fatal("connection never woken")
	}
}

// fakeClock is the server's clock in these tests.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time          { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) advance(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }
func newClock() *fakeClock                   { return &fakeClock{t: time.Unix(1_800_000_000, 0)} }

// newLoopServer is a Server with its workers but no gnet engine: the test
// plays the event loop, calling onTraffic itself.
func newLoopServer(t testing.TB, clk *fakeClock, mutate func(*Options)) *Server {
	t.Helper()
	opts := Options{
		DataDir: t.TempDir(), DisableWALSync: true, Now: clk.now,
		Logger:          slog.New(slog.NewTextHandler(io.Discard, nil)),
		DefaultSettings: tenant.Settings{Reserved: tenant.Unlimited, HardLimit: tenant.Unlimited},
		AnonymousBucket: "b",
		Buckets:         []BucketSpec{{Name: "b", Settings: tenant.Settings{Reserved: tenant.Unlimited, HardLimit: tenant.Unlimited}}},
	}
	if mutate != nil {
		mutate(&opts)
	}
	s, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	s.started = clk.now()
	s.startWorkers()
	t.Cleanup(func() { s.work.Stop(); _ = s.Close() })
	return s
}

func (s *Server) openFake(t testing.TB) (*conn, *fakeConn) {
	f := newFakeConn()
	c := newConn(s, f, "fake")
	b, ok := s.cat.Get("b")
	if !ok {
		t.Fatal("bucket b missing")
	}
	c.selectBucket(b)
	return c, f
}

func set(opaque uint32, key, value string) *mc.Request {
	return &mc.Request{Opcode: mc.OpSet, Opaque: opaque, Key: []byte(key), Value: []byte(value), Extras: make([]byte, 8)}
}

func opaques(rs []mc.Response) []uint32 {
	var out []uint32
	for _, r := range rs {
		out = append(out, r.Opaque)
	}
	return out
}

// TestLoopParksThrottledCommand: a command over the bucket's hard limit
// parks (nothing is answered, the input is kept), the next tick wakes the
// connection, and the command then runs, in order.
func TestLoopParksThrottledCommand(t *testing.T) {
	clk := newClock()
	s := newLoopServer(t, clk, func(o *Options) {
		o.Buckets[0].Settings = tenant.Settings{Reserved: 0, HardLimit: 1}
	})
	c, f := s.openFake(t)
	f.send(set(1, "k1", "v"))
	c.onTraffic()
	awaitBatch(t, c, f)
	if got := opaques(f.replies(t)); len(got) != 1 || got[0] != 1 {
		t.Fatalf("replies after first SET: %v", got)
	}
	f.send(set(2, "k2", "v"))
	c.onTraffic()
	thr := c.bucket.Throttle().Stats()
	if len(f.replies(t)) != 1 || f.InboundBuffered() == 0 || !c.parked.Load() || thr.Throttled != 1 {
		t.Fatalf("second SET not parked: replies %d, input %d, parked %v, throttled %d",
			len(f.replies(t)), f.InboundBuffered(), c.parked.Load(), thr.Throttled)
	}
	f.dropWakes()
	clk.advance(time.Second)
	if !s.tick(clk.now()) {
		t.Fatal("tick did not end the second")
	}
	f.waitWake(t) // the tick woke the parked connection
	c.onTraffic()
	awaitBatch(t, c, f) // the worker finished the SET
	rs := f.replies(t)
	if got := opaques(rs); len(got) != 2 || got[1] != 2 || rs[1].Status != mc.StatusOK {
		t.Fatalf("replies = %v (%v), want [1 2] both OK", got, rs[len(rs)-1].Status)
	}
	if w := c.bucket.Throttle().Stats().WaitUS; w < time.Second.Microseconds() {
		t.Fatalf("throttle wait = %d µs, want the parked second", w)
	}
}

// holdTicket takes the node's only ticket so that the next command queues.
func holdTicket(t *testing.T, s *Server, now time.Time) ingress.Ticket {
	t.Helper()
	tk, d, _ := s.ingress.Acquire(ingress.Write, nil, nil, 0, now)
	if d != ingress.Admitted {
		t.Fatalf("could not take the ticket: %v", d)
	}
	return tk
}

// TestLoopReplyOrderAcrossQueuedContinuation: a SET that waits for a ticket
// holds back the NOOP behind it; when the ticket frees, the SET runs on a
// worker and its reply leaves before the NOOP's.
func TestLoopReplyOrderAcrossQueuedContinuation(t *testing.T) {
	clk := newClock()
	s := newLoopServer(t, clk, func(o *Options) { o.Ingress.NodeTickets = 1 })
	c, f := s.openFake(t)
	held := holdTicket(t, s, clk.now())
	f.send(set(1, "k", "v"))
	f.send(&mc.Request{Opcode: mc.OpNoop, Opaque: 2})
	c.onTraffic()
	if len(f.out) != 0 || c.inflight == nil {
		t.Fatalf("SET not queued: out %d bytes, inflight %v", len(f.out), c.inflight)
	}
	if q := s.ingress.Stats().Write.QueueLength; q != 1 {
		t.Fatalf("write queue length = %d, want 1", q)
	}
	c.onTraffic() // a spurious pass answers nothing out of order
	if len(f.out) != 0 {
		t.Fatal("NOOP answered before the queued SET")
	}
	s.ingress.Release(held, clk.now()) // Granted: the SET goes to a worker
	f.waitWake(t)
	c.onTraffic()
	if got := opaques(f.replies(t)); len(got) != 2 || got[0] != 1 || got[1] != 2 {
		t.Fatalf("reply order = %v, want [1 2]", got)
	}
	if st := s.ingress.Stats().Write; st.Out != 0 || st.QueueLength != 0 {
		t.Fatalf("tickets leaked: %+v", st)
	}
}

// TestLoopDisconnectWhileQueued: closing a connection whose command waits
// for a ticket takes it out of the queue (canceled, never run), and the
// freed ticket wakes nobody.
func TestLoopDisconnectWhileQueued(t *testing.T) {
	clk := newClock()
	s := newLoopServer(t, clk, func(o *Options) { o.Ingress.NodeTickets = 1 })
	c, f := s.openFake(t)
	held := holdTicket(t, s, clk.now())
	f.send(set(1, "gone", "v"))
	c.onTraffic()
	c.close()
	st := s.ingress.Stats().Write
	if st.QueueLength != 0 || st.Canceled != 1 {
		t.Fatalf("after close: queue %d canceled %d, want 0 and 1", st.QueueLength, st.Canceled)
	}
	s.ingress.Release(held, clk.now())
	select {
	case <-f.wakes:
		t.Fatal("a closed connection's canceled command was woken")
	case <-time.After(50 * time.Millisecond):
	}
	if st := s.ingress.Stats().Write; st.Out != 0 || st.Started != st.Finished {
		t.Fatalf("tickets leaked: %+v", st)
	}
	if b, _ := s.cat.Get("b"); b.Store().ItemCount() != 0 {
		t.Fatal("the canceled SET was executed")
	}
}

// TestLoopClosedInsideWrite: gnet closes a connection whose write fails
// from inside the write, so OnClose runs in the middle of a pass. The rest
// of the pass writes nothing more (the fd's number may belong to a new
// connection already), and the frame it admitted meanwhile counts in the
// node's network memory no longer: what it held before goes with it.
func TestLoopClosedInsideWrite(t *testing.T) {
	s := newLoopServer(t, newClock(), nil)
	c, f := s.openFake(t)
	f.failWrite = func() { c.close() }
	f.send(set(1, "a", "v"))
	big := mc.AppendRequest(nil, set(2, "big", strings.Repeat("v", 4*netmem.SmallFrame)))
	f.in = append(f.in, big[:len(big)/2]...) // a frame netmem admits, cut short
	c.onTraffic()
	for !f.closed && c.inflight != nil {
		f.waitWake(t)
		c.onTraffic()
	}
	if !f.closed {
		t.Fatal("the SET's reply was never written")
	}
	if st := s.flow.Stats(); st.Held != 0 || st.Paused != 0 {
		t.Fatalf("after the close: network memory held %d, paused %d; want 0 and 0", st.Held, st.Paused)
	}
	if f.lateWrite != 0 {
		t.Fatalf("%d writes after the connection closed", f.lateWrite)
	}
}

// BenchmarkResidentGet: the loop's own work for one GET of a resident 1 KiB
// item: decoding, admission (throttle, deadline gate, ingress ticket), the
// item cache, the reply and the latency record, without gnet's syscalls (a
// fake connection) and with the real clock. The bucket is throttled as in
// bench/compare.sh (reserved 0, a node capacity never reached), so that the
// throttle's check goes through the free pool's figures, as it does for a
// bucket that has used its reservation.
func BenchmarkResidentGet(b *testing.B) {
	const key = "key:0000000000000000000000000000000000000000000000000000000000" // 64 bytes, as memcaslap's
	s := newLoopServer(b, newClock(), func(o *Options) {
		o.Now, o.NodeCapacity = clock.Now, 1_000_000_000
		o.Buckets[0].Settings = tenant.Settings{Reserved: 0, HardLimit: tenant.Unlimited}
	})
	c, f := s.openFake(b)
	f.send(set(1, key, strings.Repeat("v", 1024)))
	c.onTraffic()
	awaitBatch(b, c, f)
	if rs := f.replies(b); len(rs) != 1 || rs[0].Status != mc.StatusOK {
		b.Fatalf("SET: %+v", rs)
	}
	get := mc.AppendRequest(nil, &mc.Request{Opcode: mc.OpGet, Opaque: 2, Key: []byte(key)})
	b.ReportAllocs()
	for b.Loop() {
		f.in, f.out = get, f.out[:0] // the loop only reads its input
		c.onTraffic()
	}
	if rs := f.replies(b); len(rs) != 1 || rs[0].Status != mc.StatusOK || len(rs[0].Value) != 1024 {
		b.Fatalf("GET: %+v", rs)
	}
}

// TestLoopAnswersShortBatchInPass: with wal_sync off, a pass that hands a
// SET to a worker yields its processor to it (runInline) and, the worker
// being done by the time the loop resumes, answers the SET in that same
// pass. With one processor the yield runs the worker at once (Submit made
// it the next goroutine to run); with more, the worker may run elsewhere
// and finish later, and only the wake's pass answers it. Every SET is
// answered, in order, either way.
func TestLoopAnswersShortBatchInPass(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	s := newLoopServer(t, newClock(), nil)
	c, f := s.openFake(t)
	inPass := 0
	for i := range 50 {
		f.send(set(uint32(i), fmt.Sprintf("k%d", i), "v"))
		c.onTraffic()
		if c.inflight == nil {
			inPass++
		}
		awaitBatch(t, c, f)
	}
	rs := f.replies(t)
	for i, r := range rs {
		if r.Opaque != uint32(i) || r.Status != mc.StatusOK {
			t.Fatalf("reply %d: opaque %d status 0x%02x, want %d OK", i, r.Opaque, uint16(r.Status), i)
		}
	}
	if len(rs) != 50 || inPass < 45 {
		t.Fatalf("%d replies, %d answered in their own pass: want 50, at least 45", len(rs), inPass)
	}
}
