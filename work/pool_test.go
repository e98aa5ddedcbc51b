package work

import (
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"kvd/catalog"
	"kvd/command"
	"kvd/engine"
	"kvd/ingress"
	mc "kvd/protocol/binary"
	"kvd/tenant"
)

// owner collects the batches handed back to it.
type owner struct{ done chan *Batch }

func (o *owner) Finish(b *Batch) { o.done <- b }

type fixture struct {
	pool    *Pool
	bucket  *catalog.Bucket
	ing     *ingress.Controller
	metered int
	mu      sync.Mutex
}

func newFixture(t *testing.T, walSync bool) *fixture {
	t.Helper()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	db, err := engine.Open(engine.Options{Dir: t.TempDir(), WALSync: walSync, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	cat, err := catalog.Open(catalog.Options{DB: db, Throttle: tenant.NewThrottle(1e6, time.Now()), Logger: quiet,
		Defaults: tenant.Settings{Reserved: tenant.Unlimited, HardLimit: tenant.Unlimited}})
	if err != nil {
		t.Fatal(err)
	}
	bk, err := cat.Create("b", tenant.Settings{Reserved: tenant.Unlimited, HardLimit: tenant.Unlimited}, "test")
	if err != nil {
		t.Fatal(err)
	}
	ing, err := ingress.New(ingress.Options{})
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{bucket: bk, ing: ing}
	f.pool = Start(Options{Ingress: ing, DB: db, WALSync: walSync, Now: time.Now, Logger: quiet,
		Meter: func(_ *catalog.Bucket, r *command.Request) {
			command.Units(r, 1024, 1024)
			f.mu.Lock()
			f.metered++
			f.mu.Unlock()
		},
		Executed:      func(bool, time.Duration) {},
		WriteUnitSize: func() int { return 1024 }})
	t.Cleanup(func() { _ = cat.Close(); _ = db.Close() })
	return f
}

func request(op mc.Opcode, opaque uint32, key, value string) *mc.Request {
	r := &mc.Request{Magic: mc.MagicRequest, Opcode: op, Opaque: opaque, Key: []byte(key), Value: []byte(value)}
	if op == mc.OpSet {
		r.Extras = make([]byte, 8)
	}
	return r
}

func replies(t *testing.T, out []byte) []mc.Response {
	t.Helper()
	var rs []mc.Response
	for len(out) > 0 {
		var r mc.Response
		n, err := mc.DecodeResponse(out, 1<<20, &r)
		if err != nil || n == 0 {
			t.Fatalf("undecodable replies: %v", err)
		}
		rs = append(rs, r)
		out = out[n:]
	}
	return rs
}

// TestPoolRunsInOrder: a batch's commands run in order (a GET sees the SET
// before it), every one is metered, its replies come back in request order
// to its owner, with wal_sync off and on (group commit), and Stop waits for
// what was submitted.
func TestPoolRunsInOrder(t *testing.T) {
	for _, walSync := range []bool{false, true} {
		f := newFixture(t, walSync)
		o := &owner{done: make(chan *Batch, 8)}
		enc := &command.Encoder{Now: time.Now}
		const batches = 5
		for i := range batches {
			b := f.pool.NewBatch(o, enc, f.bucket)
			// Each batch its own key and value: its GET can only have
			// seen its own SET.
			key, value := fmt.Sprintf("k%d", i), fmt.Sprintf("v%d", i)
			b.Add(request(mc.OpSet, uint32(10*i+1), key, value))
			b.Add(request(mc.OpGet, uint32(10*i+2), key, ""))
			f.pool.Submit(b)
		}
		f.pool.Stop()
		if n := len(o.done); n != batches {
			t.Fatalf("wal_sync %v: Stop returned with %d of %d batches finished", walSync, n, batches)
		}
		for range batches {
			b := <-o.done
			rs := replies(t, b.Out)
			if len(rs) != 2 || rs[0].Status != mc.StatusOK || rs[1].Status != mc.StatusOK ||
				string(rs[1].Value) != fmt.Sprintf("v%d", rs[0].Opaque/10) || rs[1].Opaque != rs[0].Opaque+1 {
				t.Fatalf("wal_sync %v: replies %+v", walSync, rs)
			}
			b.Release()
		}
		if f.metered != 2*batches {
			t.Fatalf("wal_sync %v: %d commands metered, want %d", walSync, f.metered, 2*batches)
		}
	}
}

// TestQueuedBatchExpires: a batch waiting for a ticket that is expired is
// answered 0x86 with the reason, counted as rejected, and handed back
// without running.
func TestQueuedBatchExpires(t *testing.T) {
	f := newFixture(t, false)
	defer f.pool.Stop()
	o := &owner{done: make(chan *Batch, 1)}
	b := f.pool.NewBatch(o, &command.Encoder{Now: time.Now}, f.bucket)
	b.Add(request(mc.OpSet, 7, "k", "v"))
	b.Expired("queue timeout")
	got := <-o.done
	rs := replies(t, got.Out)
	if len(rs) != 1 || rs[0].Status != mc.StatusTemporaryFailure || string(rs[0].Value) != "queue timeout" {
		t.Fatalf("replies %+v", rs)
	}
	if f.bucket.Throttle().Stats().Rejected != 1 || f.metered != 0 {
		t.Fatalf("rejected %d, metered %d: want 1 and 0", f.bucket.Throttle().Stats().Rejected, f.metered)
	}
}
