package command

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"kvd/engine"
	mc "kvd/protocol/binary"
	"kvd/tenant"
)

func TestExpiryAt(t *testing.T) {
	const now = 1_800_000_000
	for _, tc := range []struct{ exp, want uint32 }{
		{0, 0},       // never
		{1, now + 1}, // relative
		{relativeExpiryLimit, now + relativeExpiryLimit},   // 30 days: still relative
		{relativeExpiryLimit + 1, relativeExpiryLimit + 1}, // absolute, long past
		{now + 50, now + 50},                               // absolute in the future
	} {
		if got := ExpiryAt(tc.exp, now); got != tc.want {
			t.Errorf("ExpiryAt(%d) = %d, want %d", tc.exp, got, tc.want)
		}
	}
}

func TestUnits(t *testing.T) {
	for _, tc := range []struct {
		size, unit int
		want       int64
	}{
		{0, 1024, 1}, {1, 1024, 1}, {1024, 1024, 1}, {1025, 1024, 2}, {5000, 4096, 2}, {8192, 4096, 2},
	} {
		if got := UnitsOf(tc.size, tc.unit); got != tc.want {
			t.Errorf("UnitsOf(%d, %d) = %d, want %d", tc.size, tc.unit, got, tc.want)
		}
	}
	big := make([]byte, 3000)
	for _, tc := range []struct {
		op   mc.Opcode
		want int64
	}{{mc.OpSet, 3}, {mc.OpAppendQ, 3}, {mc.OpGet, 1}, {mc.OpDelete, 1}, {mc.OpIncrement, 1}, {mc.OpTouch, 1}} {
		req := &mc.Request{Opcode: tc.op, Key: []byte("k"), Value: big}
		if tc.op == mc.OpGet || tc.op == mc.OpDelete || tc.op == mc.OpIncrement || tc.op == mc.OpTouch {
			req.Value = nil
		}
		if got := PendingUnits(req, 1024); got != tc.want {
			t.Errorf("PendingUnits(%v) = %d, want %d", tc.op, got, tc.want)
		}
	}
}

func TestStatusOf(t *testing.T) {
	for _, tc := range []struct {
		err    error
		status mc.Status
		reason string
	}{
		{engine.ErrNotFound, mc.StatusKeyNotFound, "Not found"},
		{fmt.Errorf("wrapped: %w", engine.ErrExists), mc.StatusKeyExists, "Data exists for key."},
		{engine.ErrNotStored, mc.StatusNotStored, "Not stored."},
		{engine.ErrNonNumeric, mc.StatusNonNumeric, "Non-numeric server-side value for incr or decr"},
		{engine.ErrTooBig, mc.StatusTooBig, "Too large."},
		{engine.ErrBucketDeleted, mc.StatusNoBucket, "the selected bucket was deleted"},
		{tenant.ErrAuthFailed, mc.StatusAuthError, "Auth failure"},
		{fmt.Errorf("%w: reserved 9 exceeds hard_limit 5", tenant.ErrInvalidSettings), mc.StatusInvalidArguments,
			"invalid settings: reserved 9 exceeds hard_limit 5"},
		{errors.New("disk on fire"), mc.StatusInternal, "disk on fire"},
	} {
		st, reason := StatusOf(tc.err)
		if st != tc.status || reason != tc.reason {
			t.Errorf("StatusOf(%v) = %v %q, want %v %q", tc.err, st, reason, tc.status, tc.reason)
		}
	}
}

func TestErrorJSONIsValid(t *testing.T) {
	for _, reason := range []string{"plain", `quote " and \ backslash`, "no such bucket: a\x01b", "bad \xff utf8"} {
		var doc struct {
			Error struct {
				Context      string `json:"context"`
				RetryAfterUS *int64 `json:"retry_after_us"`
			} `json:"error"`
		}
		raw := appendErrorJSON(nil, reason, 42)
		if err := json.Unmarshal(raw, &doc); err != nil {
			t.Errorf("%q: body %s is not JSON: %v", reason, raw, err)
			continue
		}
		if doc.Error.RetryAfterUS == nil || *doc.Error.RetryAfterUS != 42 {
			t.Errorf("%q: retry_after_us missing in %s", reason, raw)
		}
		if !strings.HasPrefix(reason, "bad") && doc.Error.Context != reason {
			t.Errorf("context %q, want %q", doc.Error.Context, reason)
		}
	}
}

// TestErrorDatatype: an XERROR body is JSON, marked as JSON only for a
// connection that negotiated the JSON feature (a client is never sent a
// datatype bit it did not ask for, as from Couchbase's KV engine).
func TestErrorDatatype(t *testing.T) {
	for _, tc := range []struct {
		features Features
		want     uint8
		json     bool
	}{{0, 0, false}, {FeatXError, 0, true}, {FeatXError | FeatJSON, mc.DatatypeJSON, true}, {FeatJSON, 0, false}} {
		e := &Encoder{Features: tc.features}
		var res mc.Response
		if _, err := mc.DecodeResponse(e.Error(nil, Header{Op: mc.OpGet}, mc.StatusKeyNotFound, "gone", nil), 1<<20, &res); err != nil {
			t.Fatal(err)
		}
		if res.Datatype != tc.want || json.Valid(res.Value) != tc.json {
			t.Errorf("features %b: datatype %d body %q, want datatype %d and JSON %v", tc.features, res.Datatype, res.Value, tc.want, tc.json)
		}
	}
}

// The reply of a GET hit, the hot path's encode, allocates nothing.
func TestAppendResultAllocs(t *testing.T) {
	e := &Encoder{Features: FeatReportUnits}
	r := &Request{Hdr: Header{Op: mc.OpGet, Opaque: 7}, Res: []byte("value"), CAS: 9, RU: 1}
	dst := make([]byte, 0, 256)
	if n := testing.AllocsPerRun(1000, func() { dst = e.Result(dst[:0], r) }); n != 0 {
		t.Errorf("Result allocates %.1f times per GET hit, want 0", n)
	}
	var res mc.Response
	if _, err := mc.DecodeResponse(dst, 1<<20, &res); err != nil || string(res.Value) != "value" || res.Magic != mc.MagicAltResponse {
		t.Errorf("decoded %+v, %v: want the value in 0x18 framing (unit frames)", res, err)
	}
}

// TestHello: unknown and repeated codes are left out of the features and
// the reply; the reply keeps the order asked.
func TestHello(t *testing.T) {
	asked := []byte{0x00, 0x1a, 0xff, 0xff, 0x00, 0x07, 0x00, 0x1a, 0x00, 0x1b}
	f, reply := Hello(asked)
	want := []byte{0x00, 0x1a, 0x00, 0x07, 0x00, 0x1b}
	if f != FeatReportUnits|FeatXError|FeatNonBlocking || string(reply) != string(want) {
		t.Fatalf("Hello(% x) = %b, % x; want ReportUnits|XError|NonBlocking, % x", asked, f, reply, want)
	}
}

// TestFlushAt: memcached's flush delays. Relative delays and future
// absolute times take effect a second early (memcached's oldest_live is
// realtime(delay) - 1); an absolute time that has passed flushes now if
// it is after the server started (less memcached's 62 s slack) and nothing
// if it is before.
func TestFlushAt(t *testing.T) {
	const now, started = 2_000_000_000, 1_999_990_000
	for _, c := range []struct {
		delay, at uint32
		ok        bool
	}{
		{0, 0, true},
		{1, 0, true}, // memcached's oldest_live is now: at once
		{10, now + 9, true},
		{now + 100, now + 99, true},
		{now + 1, 0, true},
		{now - 5, 0, true},                  // passed, after the start: at once
		{started - 61, 0, true},             // within the slack: at once
		{started - 62, 0, false},            // before the (slackened) start: nothing
		{relativeExpiryLimit + 1, 0, false}, // 1970: nothing
	} {
		at, ok := FlushAt(c.delay, now, started)
		if at != c.at || ok != c.ok {
			t.Errorf("FlushAt(%d) = %d, %v; want %d, %v", c.delay, at, ok, c.at, c.ok)
		}
	}
}
