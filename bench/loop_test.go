package bench

import (
	"testing"
	"time"

	mc "kvd/protocol/binary"
)

// testClient is a client without a connection, for the encode and account
// halves of the data path.
func testClient() *client {
	spec := BucketSpec{Name: "app"}
	spec.EnsureDefaults()
	b := &bucketRun{spec: spec, value: makeValue(spec.ValueSize), readUnitSize: 4096, writeUnitSize: 1024}
	return &client{bucket: b, work: newWorkload(&b.spec, 1, 0, 0), alt: true, rtime: t0.Add(time.Millisecond)}
}

// TestDataPathAllocs: after warm-up, encoding a batch and accounting for its
// replies allocate nothing, so the load generator measures the server, not
// the garbage collector.
func TestDataPathAllocs(t *testing.T) {
	c := testClient()
	hit := mc.Response{Status: mc.StatusOK, Value: c.bucket.value,
		FrameInfo: mc.AppendFrameInfoUint16(nil, mc.FrameReadUnits, 1)}
	throttled := mc.Response{Status: mc.StatusWouldThrottle, Value: []byte(`{"next_tick_us":250}`)}
	run := func() {
		c.nextBatch(16)
		c.wbuf = c.wbuf[:0]
		c.tally.reset()
		for i := range c.batch {
			c.batch[i].sent = t0
			c.wbuf = c.appendOp(c.wbuf, &c.batch[i])
			c.account(&c.batch[i], &hit)
		}
		c.account(&c.batch[0], &throttled)
		_ = nextTick(throttled.Value, retryDefault)
	}
	run()
	if a := testing.AllocsPerRun(100, run); a != 0 {
		t.Errorf("%v allocations per batch of 16, want 0", a)
	}
	if c.tally.Ops != 16 || c.tally.RU != 16 || c.tally.Throttled != 1 || c.tally.ServerUnitOps != 16 {
		t.Errorf("tally = %+v", c.tally.Counts)
	}
	if c.tally.lat[0] != time.Millisecond {
		t.Errorf("latency %v, want 1ms (send to read)", c.tally.lat[0])
	}
}

func TestAccountClassifies(t *testing.T) {
	tests := []struct {
		status mc.Status
		get    bool
		want   Counts
		retry  bool
	}{
		{mc.StatusOK, true, Counts{Ops: 1, RU: 1, ComputedUnitOps: 1}, false},
		{mc.StatusOK, false, Counts{Ops: 1, WU: 1, ComputedUnitOps: 1}, false},
		{mc.StatusKeyNotFound, true, Counts{Ops: 1, Misses: 1}, false},
		{mc.StatusKeyNotFound, false, Counts{Errors: 1}, false},
		{mc.StatusWouldThrottle, true, Counts{Throttled: 1}, true},
		{mc.StatusTemporaryFailure, false, Counts{Rejected: 1}, false},
		{mc.StatusBusy, true, Counts{Busy: 1}, false},
		{mc.StatusInternal, true, Counts{Errors: 1}, false},
	}
	for _, tt := range tests {
		c := testClient()
		c.tally.reset()
		res := mc.Response{Opcode: mc.OpGet, Status: tt.status, Value: []byte("v")}
		if retry := c.account(&op{get: tt.get}, &res); retry != tt.retry || c.tally.Counts != tt.want {
			t.Errorf("status %s get %v: retry %v, counts %+v; want %v, %+v", tt.status, tt.get, retry, c.tally.Counts, tt.retry, tt.want)
		}
		if tt.want.Errors > 0 && c.tally.firstErr == "" {
			t.Errorf("status %s: no error description kept", tt.status)
		}
	}
}

// TestAccountCountsHeldReplies: a reply the throttle held (blocking mode:
// a throttle-duration frame info) counts as throttled, with its wait.
func TestAccountCountsHeldReplies(t *testing.T) {
	c := testClient()
	c.tally.reset()
	res := mc.Response{Opcode: mc.OpGet, Status: mc.StatusOK, Value: []byte("v"),
		FrameInfo: mc.AppendFrameInfoUint16(nil, mc.FrameThrottleDuration, mc.EncodeDuration(1500000))}
	if retry := c.account(&op{get: true}, &res); retry || c.tally.Throttled != 1 || c.tally.Ops != 1 || c.tally.ThrottleWait <= 0 {
		t.Fatalf("a held GET: retry %v, counts %+v, wait %v; want not retried, 1 op, 1 throttled, a wait", retry, c.tally.Counts, c.tally.ThrottleWait)
	}
}

func TestNextTickAndFrameInfo(t *testing.T) {
	for body, want := range map[string]time.Duration{
		`{"next_tick_us":250}`:      250 * time.Microsecond,
		`{"next_tick_us": 1000000}`: time.Second,
		`{"error":{"context":"x"}}`: retryDefault,
		`{"next_tick_us":"soon"}`:   retryDefault,
		``:                          retryDefault,
	} {
		if got := nextTick([]byte(body), retryDefault); got != want {
			t.Errorf("nextTick(%s) = %v, want %v", body, got, want)
		}
	}
	fi := mc.AppendFrameInfoUint16(nil, mc.FrameReadUnits, 3)
	fi = mc.AppendFrameInfoUint16(fi, mc.FrameWriteUnits, 2)
	fi = mc.AppendFrameInfoUint16(fi, mc.FrameThrottleDuration, mc.EncodeDuration(time.Millisecond))
	ru, wu, thr, ok := frameInfo(&mc.Response{FrameInfo: fi})
	if ru != 3 || wu != 2 || !ok || thr < 990*time.Microsecond || thr > 1010*time.Microsecond {
		t.Errorf("frameInfo = %d RU, %d WU, %v throttled, reported %v", ru, wu, thr, ok)
	}
	if _, _, _, ok := frameInfo(&mc.Response{}); ok {
		t.Error("a reply without frame infos reported units")
	}
}
