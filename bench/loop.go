package bench

import (
	"context"
	"fmt"
	"sync"
	"time"

	mc "kvd/protocol/binary"
)

// Waits before retrying a throttled op: when the 0x0c reply names no
// next_tick_us, and the most kvbench honours.
const (
	retryDefault = time.Millisecond
	retryMax     = time.Second
)

// preloadBatch is the least number of SETs a connection pipelines while
// preloading.
const preloadBatch = 64

// tally accumulates the results of one exchange; the connection then records
// it into its cell under one lock.
type tally struct {
	Counts
	lat      []time.Duration // latencies of the completed ops
	firstErr string          // description of the first error reply
}

func (t *tally) reset() {
	t.Counts = Counts{}
	t.lat = t.lat[:0]
	t.firstErr = ""
}

// cell is a connection's current window, shared with the sampler.
type cell struct {
	mu sync.Mutex
	w  Window // guarded by mu
}

// record adds a tally to the window.
func (s *cell) record(t *tally) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.w.Counts.add(&t.Counts)
	for _, d := range t.lat {
		s.w.Latency.Record(d)
	}
}

// drainInto moves the window's contents into dst and empties it.
func (s *cell) drainInto(dst *Window) {
	s.mu.Lock()
	defer s.mu.Unlock()
	dst.merge(&s.w)
	s.w.reset()
}

// run is the connection's closed loop: it sends a batch when the pacer
// allows, until stopAt (no batch starts after it) or until ctx is done.
func (c *client) run(ctx context.Context, stopAt time.Time) {
	pipeline := c.bucket.spec.Pipeline
	for ctx.Err() == nil {
		now := time.Now()
		d := c.pacer.Reserve(pipeline, now)
		if !now.Add(d).Before(stopAt) || !sleepCtx(ctx, d) {
			return
		}
		c.nextBatch(pipeline)
		err := c.exchange(ctx, c.batch, stopAt)
		c.stats.record(&c.tally)
		if c.tally.firstErr != "" {
			c.bucket.sample(c.tally.firstErr)
		}
		if err != nil {
			c.lost(ctx, err)
			return
		}
	}
}

// lost records a connection failure, unless it is the run being stopped.
func (c *client) lost(ctx context.Context, err error) {
	if ctx.Err() != nil {
		return
	}
	c.tally.reset()
	c.tally.Errors = 1
	c.stats.record(&c.tally)
	c.bucket.sample("connection lost: " + err.Error())
}

// nextBatch draws n operations from the workload into c.batch.
func (c *client) nextBatch(n int) {
	c.batch = c.batch[:0]
	for range n {
		get, k := c.work.next()
		c.batch = append(c.batch, op{get: get, key: k})
	}
}

// exchange sends ops in one write and reads their replies into c.tally.
// Throttled ops (0x0c) are sent again after the wait the server named, as
// long as that ends before stopAt and ctx is not done; then they are dropped.
func (c *client) exchange(ctx context.Context, ops []op, stopAt time.Time) error {
	c.tally.reset()
	for len(ops) > 0 {
		if err := c.send(ops); err != nil {
			return err
		}
		var wait time.Duration
		var err error
		if ops, wait, err = c.receive(ops); err != nil {
			return err
		}
		if len(ops) > 0 && (!time.Now().Add(wait).Before(stopAt) || !sleepCtx(ctx, wait)) {
			return nil
		}
	}
	return nil
}

// send encodes ops with fresh opaques and writes them at once. An op keeps
// the time of its first send, so a retried op's latency includes its waits.
func (c *client) send(ops []op) error {
	c.wbuf = c.wbuf[:0]
	for i := range ops {
		c.opaque++
		ops[i].opaque = c.opaque
		c.wbuf = c.appendOp(c.wbuf, &ops[i])
	}
	now := time.Now()
	for i := range ops {
		if ops[i].sent.IsZero() {
			ops[i].sent = now
		}
	}
	_, err := c.nc.Write(c.wbuf)
	return err
}

// appendOp appends o's request: a GET, or a SET of the bucket's value.
func (c *client) appendOp(dst []byte, o *op) []byte {
	c.key = c.work.appendKey(c.key[:0], o.key)
	req := mc.Request{Magic: c.magic(), Opcode: mc.OpGet, Opaque: o.opaque, Key: c.key}
	if !o.get {
		req.Opcode, req.Extras, req.Value = mc.OpSet, setExtras, c.bucket.value
	}
	return mc.AppendRequest(dst, &req)
}

// receive reads one reply per op, in order, and accounts for it. It returns
// the ops to retry (compacted into the front of ops) and how long to wait
// first: the longest next_tick_us among their replies.
func (c *client) receive(ops []op) (retry []op, wait time.Duration, err error) {
	retry = ops[:0]
	var res mc.Response
	for i := range ops {
		o := ops[i]
		if err := c.readReply(&res); err != nil {
			return nil, 0, err
		}
		if res.Opaque != o.opaque {
			return nil, 0, fmt.Errorf("%w: reply opaque %d (%s), want %d", ErrProtocol, res.Opaque, res.Opcode, o.opaque)
		}
		if c.account(&o, &res) {
			retry = append(retry, o) // index <= i: never overwrites an unread op
			wait = max(wait, min(nextTick(res.Value, retryDefault), retryMax))
		}
	}
	return retry, wait, nil
}

// account classifies one reply into c.tally and reports whether the op is
// to be retried (0x0c Would throttle).
func (c *client) account(o *op, res *mc.Response) (retry bool) {
	t := &c.tally
	ru, wu, throttled, reported := frameInfo(res)
	t.ThrottleWait += throttled
	if throttled > 0 && res.Status != mc.StatusWouldThrottle {
		t.Throttled++ // held by the throttle (blocking mode), then answered
	}
	switch {
	case res.Status == mc.StatusOK:
		c.completed(o, res, ru, wu, reported, true)
	case res.Status == mc.StatusKeyNotFound && o.get:
		t.Misses++
		c.completed(o, res, ru, wu, reported, false)
	case res.Status == mc.StatusWouldThrottle:
		t.Throttled++
		return true
	case res.Status == mc.StatusTemporaryFailure:
		t.Rejected++
	case res.Status == mc.StatusBusy:
		t.Busy++
	default:
		t.Errors++
		if t.firstErr == "" {
			t.firstErr = fmt.Sprintf("%s: %s", res.Opcode, describe(res))
		}
	}
	return false
}

// completed counts a finished op, its latency and its units: the server's
// when it reported them, else computed (a miss costs nothing).
func (c *client) completed(o *op, res *mc.Response, ru, wu int64, reported, hit bool) {
	t := &c.tally
	t.Ops++
	t.lat = append(t.lat, c.rtime.Sub(o.sent))
	b := c.bucket
	switch {
	case reported:
		t.RU, t.WU = t.RU+ru, t.WU+wu
		t.ServerUnitOps++
	case !hit:
	case o.get:
		t.RU += readUnits(c.work.keyLen(), len(res.Value), b.readUnitSize)
		t.ComputedUnitOps++
	default:
		t.WU += writeUnits(c.work.keyLen(), len(b.value), b.writeUnitSize)
		t.ComputedUnitOps++
	}
}

// preload SETs the keys first, first+step, … of the key space, a batch at a
// time, and returns how many were stored. Any failure is ErrPreload.
func (c *client) preload(ctx context.Context, first, step int64) (int64, error) {
	keys := c.bucket.spec.Keys
	batch := max(c.bucket.spec.Pipeline, preloadBatch)
	never := time.Now().Add(100 * 365 * 24 * time.Hour)
	var stored int64
	for k := first; k < keys; {
		c.batch = c.batch[:0]
		for ; k < keys && len(c.batch) < batch; k += step {
			c.batch = append(c.batch, op{key: uint64(k)})
		}
		if err := c.exchange(ctx, c.batch, never); err != nil {
			return stored, err
		}
		stored += c.tally.Ops
		if bad := c.tally.Errors + c.tally.Rejected + c.tally.Busy; bad > 0 {
			return stored, fmt.Errorf("%w: bucket %q: %d SETs failed (errors %d, rejected %d, busy %d) %s",
				ErrPreload, c.bucket.spec.Name, bad, c.tally.Errors, c.tally.Rejected, c.tally.Busy, c.tally.firstErr)
		}
	}
	return stored, nil
}

// sleepCtx sleeps for d and reports whether ctx is still live.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
