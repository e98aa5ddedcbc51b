package tests

// Helpers of the per-bucket admission tests (pools_test.go, SPEC section
// 7): a config with a bucket's pool settings, load from many synced
// writers whose every reply is timed at the client, and STAT readers for the
// admission figures.

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	mc "kvd/protocol/binary"
)

// poolConfig is a node with WAL sync on, an unthrottled anonymous "default"
// bucket, the given top-level fields, and buckets with reserved
// "unlimited" (only admission holds their load back) plus the given extra
// settings each.
func poolConfig(t testing.TB, fields map[string]any, buckets map[string]map[string]any) string {
	t.Helper()
	base := map[string]any{"wal_sync": true, "anonymous_bucket": "default"}
	for k, v := range fields {
		base[k] = v
	}
	list := []map[string]any{bucketConfig("default", "unlimited", nil)}
	names := make([]string, 0, len(buckets))
	for name := range buckets {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		b := bucketConfig(name, "unlimited", nil)
		for k, v := range buckets[name] {
			b[k] = v
		}
		list = append(list, b)
	}
	return throttleConfig(t, base, list...)
}

// poolStat is the admission part of STAT "bucket_details NAME".
type poolStat struct {
	InFlight       int64 `json:"in_flight"`
	QueueLength    int64 `json:"queue_length"`
	NumQueued      int64 `json:"num_queued"`
	NumQueueFull   int64 `json:"num_queue_full"`
	NumTimedOut    int64 `json:"num_timed_out"`
	QueueWaitTime  int64 `json:"queue_wait_time"`
	PeakInFlight   int64 `json:"peak_in_flight"`
	MaxConcurrent  int64 `json:"max_concurrent"`
	MaxQueued      int64 `json:"max_queued"`
	QueueTimeoutMS int64 `json:"queue_timeout_ms"`
}

// poolStat reads the admission figures of a bucket, failing the test if one
// is missing.
func (c *rawConn) poolStat(bucket string) poolStat {
	c.t.Helper()
	raw := statValue(c.t, "bucket_details "+bucket, c.statGroup("bucket_details "+bucket), bucket)
	for _, f := range []string{"in_flight", "queue_length", "num_queued", "num_queue_full", "num_timed_out",
		"queue_wait_time", "peak_in_flight", "max_concurrent", "max_queued", "queue_timeout_ms"} {
		if !strings.Contains(raw, `"`+f+`":`) {
			c.t.Fatalf("STAT bucket_details %s lacks %q: %s", bucket, f, raw)
		}
	}
	var s poolStat
	if err := json.Unmarshal([]byte(raw), &s); err != nil {
		c.t.Fatalf("STAT bucket_details %s: %v in %s", bucket, err, raw)
	}
	return s
}

// reply is one command's outcome as a writer saw it.
type reply struct {
	status  mc.Status
	reason  string        // the XERROR context of an error reply
	latency time.Duration // from sending the request to reading its reply
}

// writers are n connections of user "tenant" on one bucket, each sending
// synced SETs of value one at a time until stop, timing every reply.
type writers struct {
	t       testing.TB
	mu      sync.Mutex
	replies []reply
	errs    []string
	stopped chan struct{}
	wg      sync.WaitGroup
}

// startWriters starts the writers; value is each SET's value.
func startWriters(t testing.TB, addr, bucket string, n int, value []byte) *writers {
	t.Helper()
	w := &writers{t: t, stopped: make(chan struct{})}
	for i := range n {
		c := login(t, addr, "tenant", "tenant-pw", bucket)
		c.hello(featXError)
		w.wg.Add(1)
		go w.run(c, fmt.Sprintf("%s-w%d", bucket, i), value)
	}
	return w
}

func (w *writers) run(c *rawConn, key string, value []byte) {
	defer w.wg.Done()
	frame := mc.AppendRequest(nil, &mc.Request{Magic: mc.MagicRequest, Opcode: mc.OpSet, Key: []byte(key),
		Extras: mc.AppendSetExtras(nil, 0, 0), Value: value})
	for {
		select {
		case <-w.stopped:
			return
		default:
		}
		r, err := roundTrip(c, frame)
		if err != nil {
			w.problem("%s: %v", key, err)
			return
		}
		w.mu.Lock()
		w.replies = append(w.replies, r)
		w.mu.Unlock()
	}
}

// roundTrip sends one request frame and times its reply.
func roundTrip(c *rawConn, frame []byte) (reply, error) {
	start := time.Now()
	_ = c.nc.SetWriteDeadline(start.Add(10 * time.Second))
	if _, err := c.nc.Write(frame); err != nil {
		return reply{}, err
	}
	res, err := c.tryRecv(10 * time.Second)
	if err != nil {
		return reply{}, err
	}
	r := reply{status: res.Status, latency: time.Since(start)}
	if res.Status != mc.StatusOK {
		r.reason = contextOf(res)
	}
	return r, nil
}

// contextOf is an error reply's XERROR context, or its raw body.
func contextOf(res *mc.Response) string {
	var doc struct {
		Error struct {
			Context string `json:"context"`
		} `json:"error"`
	}
	if json.Unmarshal(res.Value, &doc) != nil {
		return string(res.Value)
	}
	return doc.Error.Context
}

func (w *writers) problem(format string, args ...any) {
	w.mu.Lock()
	w.errs = append(w.errs, fmt.Sprintf(format, args...))
	w.mu.Unlock()
}

// stop ends the writers (each finishes its command in flight) and returns
// every reply; a writer's I/O error fails the test.
func (w *writers) stop() []reply {
	w.t.Helper()
	close(w.stopped)
	w.wg.Wait()
	if len(w.errs) > 0 {
		w.t.Fatalf("writers failed: %v", w.errs)
	}
	return w.replies
}

// byStatus splits replies by status.
func byStatus(rs []reply) map[mc.Status][]reply {
	out := map[mc.Status][]reply{}
	for _, r := range rs {
		out[r.status] = append(out[r.status], r)
	}
	return out
}

// wantOnly fails unless every reply is stored (0x00) or refused with status
// st and exactly reason.
func wantOnly(t *testing.T, got map[mc.Status][]reply, st mc.Status, reason string) {
	t.Helper()
	for s, rs := range got {
		if s != mc.StatusOK && s != st {
			t.Errorf("%d replies with status 0x%02x (%q), want only 0x00 and 0x%02x", len(rs), uint16(s), rs[0].reason, uint16(st))
		}
	}
	for _, r := range got[st] {
		if r.reason != reason {
			t.Fatalf("0x%02x reason %q, want %q", uint16(st), r.reason, reason)
		}
	}
}

// percentile is the q-quantile (0..1) of the replies' latencies.
func percentile(rs []reply, q float64) time.Duration {
	if len(rs) == 0 {
		return 0
	}
	ls := make([]time.Duration, len(rs))
	for i, r := range rs {
		ls[i] = r.latency
	}
	slices.Sort(ls)
	return ls[min(len(ls)-1, int(q*float64(len(ls))))]
}

// sampleInFlight reads the bucket's in_flight and queue_length every few
// ms until stop is closed, and returns the highest of each and the number
// of samples.
func sampleInFlight(c *rawConn, bucket string, stop <-chan struct{}) (maxInFlight, maxQueue int64, n int) {
	for {
		select {
		case <-stop:
			return maxInFlight, maxQueue, n
		case <-time.After(2 * time.Millisecond):
		}
		s := c.poolStat(bucket)
		maxInFlight, maxQueue, n = max(maxInFlight, s.InFlight), max(maxQueue, s.QueueLength), n+1
	}
}

// waitPoolIdle fails unless, within 10 s, the bucket has nothing in flight
// or queued and STAT ingress has every started command finished.
func waitPoolIdle(t *testing.T, c *rawConn, bucket string) poolStat {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		s, in := c.poolStat(bucket), c.statInts("ingress")
		if s.InFlight == 0 && s.QueueLength == 0 && in["write_started"] == in["write_finished"] &&
			in["read_started"] == in["read_finished"] && in["memory_inflight_bytes"] == 0 {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("10 s after the load stopped: bucket %s in_flight %d queue_length %d; ingress write_started %d write_finished %d read_started %d read_finished %d memory_inflight_bytes %d",
				bucket, s.InFlight, s.QueueLength, in["write_started"], in["write_finished"],
				in["read_started"], in["read_finished"], in["memory_inflight_bytes"])
		}
		time.Sleep(20 * time.Millisecond)
	}
}
