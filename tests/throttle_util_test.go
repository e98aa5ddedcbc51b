package tests

// Helpers of the throttling tests in throttle_test.go: configs with
// throttled buckets, expectations on STAT bucket_details and STAT throttle,
// the 0x0c body, TestThrottleParkingOrder's pipeline and its stall counter,
// and response frame infos.

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"maps"
	"testing"

	mc "kvd/protocol/binary"
)

// throttleConfig is a config with exactly the given buckets (see
// bucketConfig), testConfig's users plus "tenant" (password "tenant-pw",
// every bucket, no privileges), no anonymous bucket, and the given
// top-level fields.
func throttleConfig(t testing.TB, fields map[string]any, buckets ...map[string]any) string {
	t.Helper()
	m := map[string]any{
		"buckets": buckets,
		"users": []map[string]any{
			{"name": "admin", "password": "admin-pw", "buckets": []string{"*"},
				"privileges": []string{"BucketThrottleManagement", "Unthrottled", "Stats"}},
			{"name": "alice", "password": "alice-pw", "buckets": []string{"app"}},
			{"name": "bob", "password": "bob-pw", "buckets": []string{"other"}},
			{"name": "tenant", "password": "tenant-pw", "buckets": []string{"*"}},
		},
	}
	maps.Copy(m, fields)
	out, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

// bucketConfig is a config bucket entry; a nil limit is left to the
// defaults.
func bucketConfig(name string, reserved, hardLimit any) map[string]any {
	b := map[string]any{"name": name}
	if reserved != nil {
		b["reserved"] = reserved
	}
	if hardLimit != nil {
		b["hard_limit"] = hardLimit
	}
	return b
}

// wantLimits fails unless STAT bucket_details shows the bucket's limits.
func wantLimits(t *testing.T, c *rawConn, when, bucket, reserved, hardLimit string) {
	t.Helper()
	r, h := c.bucketStat(bucket).limits()
	if r != reserved || h != hardLimit {
		t.Errorf("%s: bucket %s has throttle_reserved %s, throttle_hard_limit %s; want %s, %s",
			when, bucket, r, h, reserved, hardLimit)
	}
}

// wantNodeThrottle fails unless STAT throttle shows the node settings.
func wantNodeThrottle(t *testing.T, c *rawConn, when, capacity, defReserved, defHard string) {
	t.Helper()
	m := c.statGroup("throttle")
	for _, f := range []struct{ name, want string }{{"capacity", capacity},
		{"default_throttle_reserved_units", defReserved}, {"default_throttle_hard_limit", defHard}} {
		if got := statValue(t, "throttle", m, f.name); got != f.want {
			t.Errorf("%s: STAT throttle %s = %s, want %s", when, f.name, got, f.want)
		}
	}
}

// nextTickUS parses the body of a 0x0c reply, {"next_tick_us": N}, and
// checks 0 < N <= 1,000,000.
func nextTickUS(t *testing.T, body []byte) int64 {
	t.Helper()
	var doc struct {
		NextTickUS *int64 `json:"next_tick_us"`
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&doc); err != nil || doc.NextTickUS == nil {
		t.Fatalf("0x0c body %q is not {\"next_tick_us\":N} (%v)", body, err)
	}
	if n := *doc.NextTickUS; n <= 0 || n > 1_000_000 {
		t.Fatalf("0x0c body %q: next_tick_us %d outside (0, 1000000]", body, n)
	}
	return *doc.NextTickUS
}

// stall counts the probes answered in a row while a parked pipeline's reply
// count stood still (before, during and between them).
type stall struct {
	at           int64 // the reply count of the current run
	run, longest int
}

// probe records one probe: the pipeline's reply count read just before it
// was sent and just after its reply, out of total replies.
func (s *stall) probe(before, after int64, total int) {
	switch {
	case before != after || after >= int64(total):
		s.run = 0
	case s.run > 0 && s.at == after:
		s.run++
	default:
		s.run = 1
	}
	s.at = after
	s.longest = max(s.longest, s.run)
}

// parkingPipeline is TestThrottleParkingOrder's stream: n commands
// alternating SET pNNN and GETK of it, opaques 1..n, then a NOOP (n+1).
func parkingPipeline(n int) []byte {
	var stream []byte
	for i := range n {
		key := fmt.Sprintf("p%03d", i/2)
		r := reqWith(mc.OpGetK, uint32(i+1), nil, key, "")
		if i%2 == 0 {
			r = reqWith(mc.OpSet, uint32(i+1), mc.AppendSetExtras(nil, 0, 0), key, "v-"+key)
		}
		stream = mc.AppendRequest(stream, r)
	}
	return mc.AppendRequest(stream, reqWith(mc.OpNoop, uint32(n+1), nil, "", ""))
}

// checkParkedReplies checks the replies to TestThrottleParkingOrder's
// pipeline: all of them, in order, each a success with the right key.
func checkParkedReplies(t *testing.T, got []*mc.Response, n int) {
	t.Helper()
	if len(got) != n+1 {
		t.Fatalf("%d replies, want %d", len(got), n+1)
	}
	for i, res := range got[:n] {
		key := fmt.Sprintf("p%03d", i/2)
		want := mc.OpGetK
		if i%2 == 0 {
			want = mc.OpSet
		}
		switch {
		case res.Opaque != uint32(i+1) || res.Opcode != want:
			t.Fatalf("reply %d is %v opaque %d, want %v opaque %d: out of order", i, res.Opcode, res.Opaque, want, i+1)
		case res.Status != mc.StatusOK:
			t.Fatalf("reply %d (%v %s): status 0x%02x %q", i, want, key, uint16(res.Status), res.Value)
		case want == mc.OpGetK && (string(res.Key) != key || string(res.Value) != "v-"+key):
			t.Fatalf("GETK %s: key %q value %q", key, res.Key, res.Value)
		}
	}
}

// frameInfos decodes response frame infos whose data is a u16, by id.
func frameInfos(t *testing.T, fi []byte) map[uint16]uint16 {
	t.Helper()
	out := map[uint16]uint16{}
	for len(fi) > 0 {
		id, data, rest, err := mc.NextFrameInfo(fi)
		if err != nil || len(data) != 2 {
			t.Fatalf("frame infos % x: id %d data % x: %v", fi, id, data, err)
		}
		out[id] = binary.BigEndian.Uint16(data)
		fi = rest
	}
	return out
}

// TestStall checks the counter TestThrottleParkingOrder's verdict rests on:
// a run grows only while the pipeline's reply count stands still, before,
// during and between probes, and short of complete.
func TestStall(t *testing.T) {
	type step struct{ before, after int64 }
	for _, tc := range []struct {
		name  string
		steps []step
		want  int
	}{
		{"still three times", []step{{5, 5}, {5, 5}, {5, 5}}, 3},
		{"moved during a probe", []step{{5, 5}, {5, 6}, {6, 6}}, 1},
		{"moved between probes", []step{{5, 5}, {6, 6}, {7, 7}}, 1},
		{"one probe per burst", []step{{0, 50}, {50, 100}, {100, 150}}, 0},
		{"complete", []step{{11, 11}, {11, 11}, {11, 11}}, 0},
		{"longest of two runs", []step{{1, 1}, {1, 1}, {1, 2}, {2, 2}}, 2},
	} {
		var s stall
		for _, st := range tc.steps {
			s.probe(st.before, st.after, 11)
		}
		if s.longest != tc.want {
			t.Errorf("%s: longest run %d, want %d", tc.name, s.longest, tc.want)
		}
	}
}
