package bench

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	mc "kvd/protocol/binary"
)

// deadlineFake is a stand-in for kvd with deadline admission, for the
// open-loop driver's tests: HELLO, SASL (any credentials), CREATE_BUCKET and
// SetBucketThrottleProperties with JSON settings, SELECT_BUCKET, and SET,
// executed by `workers` goroutines that take `service` each, FIFO. A bucket
// whose settings carry deadline_ms runs the seed's gate: a SET needs
// 2×(measured mean service)/deadline of a worker and is refused with 0x86 and the XERROR body
// when the accepted demand would exceed the worker count. Replies leave in
// request order per connection.
type deadlineFake struct {
	ln      net.Listener
	workers int
	service time.Duration
	xerror  bool // answer in XERROR JSON (else plain text)
	jobs    chan func()
	wg      sync.WaitGroup

	mu       sync.Mutex
	settings map[string]map[string]any // guarded by mu
	creators map[string]string         // guarded by mu: bucket → user who last configured it
	accepted float64                   // guarded by mu: workers' worth of demand accepted
	estimate time.Duration             // guarded by mu: moving average of measured service times
	conns    map[net.Conn]bool         // guarded by mu

	sets, rejected atomic.Int64
}

func startDeadlineFake(t *testing.T, workers int, service time.Duration) *deadlineFake {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &deadlineFake{
		ln: ln, workers: workers, service: service, xerror: true, jobs: make(chan func(), 1<<16),
		settings: map[string]map[string]any{}, creators: map[string]string{}, conns: map[net.Conn]bool{},
	}
	var workersWG sync.WaitGroup
	for range workers {
		workersWG.Go(func() {
			for job := range f.jobs {
				job()
			}
		})
	}
	f.wg.Go(f.accept)
	t.Cleanup(func() {
		ln.Close()
		f.mu.Lock()
		for c := range f.conns {
			c.Close()
		}
		f.mu.Unlock()
		f.wg.Wait()
		close(f.jobs)
		workersWG.Wait()
	})
	return f
}

func (f *deadlineFake) addr() string { return f.ln.Addr().String() }

func (f *deadlineFake) accept() {
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

// serve reads requests and queues one reply channel per request; a writer
// goroutine sends the replies in order.
func (f *deadlineFake) serve(nc net.Conn) {
	defer nc.Close()
	replies := make(chan chan []byte, 1<<14)
	var wg sync.WaitGroup
	wg.Go(func() {
		w := bufio.NewWriter(nc)
		for ch := range replies {
			var b []byte
			select {
			case b = <-ch:
			default: // flush what is ready before waiting for a worker
				if w.Flush() != nil {
					break
				}
				b = <-ch
			}
			w.Write(b)
			if len(replies) == 0 {
				w.Flush()
			}
		}
		w.Flush()
	})
	defer wg.Wait()
	defer close(replies)
	r := bufio.NewReader(nc)
	var st fakeConn
	var req mc.Request
	for {
		frame, err := readFrame(r)
		if err != nil {
			return
		}
		if _, err := mc.DecodeRequest(frame, 1<<24, &req); err != nil {
			return
		}
		ch := make(chan []byte, 1)
		replies <- ch
		f.handle(&req, &st, ch)
	}
}

// handle answers one request on ch, at once or from a worker.
func (f *deadlineFake) handle(req *mc.Request, st *fakeConn, ch chan []byte) {
	opcode, opaque, alt := req.Opcode, req.Opaque, req.Alt() // req is reused for the next frame
	reply := func(res mc.Response) {
		res.Opcode, res.Opaque = opcode, opaque
		ch <- mc.AppendResponse(nil, alt, &res)
	}
	switch req.Opcode {
	case mc.OpHello:
		reply(mc.Response{Value: append([]byte(nil), req.Value...)})
	case mc.OpNoop:
		reply(mc.Response{})
	case mc.OpSASLAuth:
		if parts := splitPlain(req.Value); len(parts) == 3 {
			st.user = parts[1]
		}
		reply(mc.Response{})
	case mc.OpCreateBucket, mc.OpSetBucketThrottle:
		reply(f.configure(req, st.user))
	case mc.OpSelectBucket:
		st.bucket = string(req.Key)
		reply(mc.Response{})
	case mc.OpSet:
		f.set(st.bucket, req, reply)
	default:
		reply(mc.Response{Status: mc.StatusUnknownCommand})
	}
}

func (f *deadlineFake) configure(req *mc.Request, user string) mc.Response {
	var s map[string]any
	if err := json.Unmarshal(req.Value, &s); err != nil {
		return mc.Response{Status: mc.StatusInvalidArguments, Value: []byte(err.Error())}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	_, exists := f.settings[string(req.Key)]
	if req.Opcode == mc.OpCreateBucket && exists {
		return mc.Response{Status: mc.StatusKeyExists}
	}
	f.settings[string(req.Key)] = s
	f.creators[string(req.Key)] = user
	return mc.Response{}
}

// set admits (or refuses) a SET and queues it for a worker.
func (f *deadlineFake) set(bucket string, req *mc.Request, reply func(mc.Response)) {
	f.sets.Add(1)
	f.mu.Lock()
	dl, _ := f.settings[bucket]["deadline_ms"].(float64)
	demand := 0.0
	if dl > 0 {
		// Twice the measured mean, standing in for kvd's pXX of its window.
		demand = 2 * float64(max(f.estimate, f.service)) / (dl * float64(time.Millisecond))
		if f.accepted+demand > float64(f.workers)+1e-9 {
			excess := f.accepted + demand - float64(f.workers)
			f.mu.Unlock()
			f.rejected.Add(1)
			retry := int64(excess / float64(f.workers) * dl * 1000)
			reply(mc.Response{Status: mc.StatusTemporaryFailure, Value: f.refusal(int(dl), max(retry, 1))})
			return
		}
		f.accepted += demand
	}
	f.mu.Unlock()
	f.jobs <- func() {
		start := time.Now()
		time.Sleep(f.service)
		took := time.Since(start)
		f.mu.Lock()
		f.estimate += (took - f.estimate) / 16
		f.accepted -= demand
		f.mu.Unlock()
		reply(mc.Response{})
	}
}

func (f *deadlineFake) refusal(dlMS int, retryUS int64) []byte {
	if f.xerror {
		return fmt.Appendf(nil, `{"error":{"context":"deadline %d ms cannot be met: write demand over capacity","retry_after_us":%d}}`, dlMS, retryUS)
	}
	return fmt.Appendf(nil, "deadline %d ms cannot be met: write demand over capacity retry_after_us=%d", dlMS, retryUS)
}
