package tests

// Black-box tests of throttling (SPEC section 5): the control commands and
// their errors, non-blocking mode, parking in order without blocking the
// loop, DELETE_BUCKET of a parked bucket, max_throttle_wait_ms, the
// Unthrottled privilege, slow start and ReportUnitUsage.

import (
	"errors"
	"fmt"
	"maps"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	mc "kvd/protocol/binary"
)

// TestThrottleControlErrors sends every invalid 0x2a / 0x2c of SPEC section
// 5 on connections with and without XERROR and checks the status and that
// the reason names the cause; the failed commands change nothing. Then valid
// ones change STAT bucket_details and STAT throttle, and the changes survive
// a restart.
func TestThrottleControlErrors(t *testing.T) {
	t.Parallel()
	k := startKVD(t, testConfig)
	adminX, admin := login(t, k.Addr, "admin", "admin-pw", ""), login(t, k.Addr, "admin", "admin-pw", "")
	aliceX, alice := login(t, k.Addr, "alice", "alice-pw", "app"), login(t, k.Addr, "alice", "alice-pw", "app")
	adminX.hello(featXError)
	aliceX.hello(featXError)

	pick := func(byAlice, xerror bool) *rawConn {
		switch {
		case byAlice && xerror:
			return aliceX
		case byAlice:
			return alice
		case xerror:
			return adminX
		}
		return admin
	}
	for i, tc := range throttleErrorCases() {
		for _, xerror := range []bool{true, false} {
			c := pick(tc.byAlice, xerror)
			req := reqWith(tc.op, uint32(100+i), nil, tc.key, tc.value)
			res := c.expectStatus(fmt.Sprintf("%s (XERROR %v)", tc.what, xerror), req, tc.want)
			reason := string(res.Value)
			if xerror {
				reason = xerrorContext(t, res)
			}
			if !mentions(reason, tc.cause...) {
				t.Errorf("%s (XERROR %v): reason %q mentions none of %q", tc.what, xerror, reason, tc.cause)
			}
		}
	}
	wantLimits(t, admin, "after the refused commands", "app", "1666", "unlimited")
	wantNodeThrottle(t, admin, "after the refused commands", "25000", "1666", "unlimited")

	applyThrottleChanges(admin)
	checkThrottleChanges(t, admin, "after the changes")
	k.Restart(false)
	checkThrottleChanges(t, login(t, k.Addr, "admin", "admin-pw", ""), "after a restart")
}

// throttleErrorCase is an invalid 0x2a / 0x2c and what it must get.
type throttleErrorCase struct {
	what    string
	byAlice bool // sent by alice, who lacks BucketThrottleManagement
	op      mc.Opcode
	key     string
	value   string
	want    mc.Status
	cause   []string // the reason must mention one of these
}

// throttleErrorCases are the refusals SPEC section 5 lists for 0x2a and 0x2c.
func throttleErrorCases() []throttleErrorCase {
	over := `{"reserved":10,"hard_limit":20}` + strings.Repeat(" ", 1100) // valid JSON, over 1 KiB
	return []throttleErrorCase{
		{"0x2a bad JSON", false, mc.OpSetBucketThrottle, "app", `{"reserved":`, mc.StatusInvalidArguments, []string{"json"}},
		{"0x2a wrong type", false, mc.OpSetBucketThrottle, "app", `{"reserved":"lots"}`, mc.StatusInvalidArguments, []string{"reserved"}},
		{"0x2a negative hard_limit", false, mc.OpSetBucketThrottle, "app", `{"hard_limit":-1}`, mc.StatusInvalidArguments, []string{"hard_limit"}},
		{"0x2a fractional reserved", false, mc.OpSetBucketThrottle, "app", `{"reserved":1.5}`, mc.StatusInvalidArguments, []string{"reserved"}},
		{"0x2a not an object", false, mc.OpSetBucketThrottle, "app", `[300, 900]`, mc.StatusInvalidArguments, []string{"object"}},
		{"0x2a over 1 KiB", false, mc.OpSetBucketThrottle, "app", over, mc.StatusInvalidArguments, []string{"1024", "1 KiB", "too large", "too long"}},
		{"0x2a reserved > hard_limit", false, mc.OpSetBucketThrottle, "app", `{"reserved":500,"hard_limit":100}`, mc.StatusInvalidArguments, []string{"hard_limit"}},
		{"0x2a unknown bucket", false, mc.OpSetBucketThrottle, "nosuch", `{"reserved":1}`, mc.StatusKeyNotFound, []string{"nosuch"}},
		{"0x2a without BucketThrottleManagement", true, mc.OpSetBucketThrottle, "app", `{"reserved":1}`, mc.StatusAccessDenied, []string{"BucketThrottleManagement"}},
		{"0x2c reserved default alone", false, mc.OpSetNodeThrottle, "", `{"default_throttle_reserved_units":10}`, mc.StatusInvalidArguments, []string{"default_throttle_hard_limit", "together"}},
		{"0x2c hard-limit default alone", false, mc.OpSetNodeThrottle, "", `{"default_throttle_hard_limit":10}`, mc.StatusInvalidArguments, []string{"default_throttle_reserved_units", "together"}},
		{"0x2c wrong type", false, mc.OpSetNodeThrottle, "", `{"capacity":"big"}`, mc.StatusInvalidArguments, []string{"capacity"}},
		{"0x2c bad JSON", false, mc.OpSetNodeThrottle, "", `{capacity: 5}`, mc.StatusInvalidArguments, []string{"json"}},
		{"0x2c without BucketThrottleManagement", true, mc.OpSetNodeThrottle, "", `{"capacity":5}`, mc.StatusAccessDenied, []string{"BucketThrottleManagement"}},
	}
}

// applyThrottleChanges sends valid 0x2a and 0x2c commands and creates a
// bucket under the new defaults.
func applyThrottleChanges(admin *rawConn) {
	admin.t.Helper()
	admin.expectStatus("0x2a app", reqWith(mc.OpSetBucketThrottle, 1, nil, "app", `{"reserved":300,"hard_limit":900}`), mc.StatusOK)
	admin.expectStatus("0x2a other, hard_limit missing", reqWith(mc.OpSetBucketThrottle, 2, nil, "other", `{"reserved":200}`), mc.StatusOK)
	admin.expectStatus("0x2c capacity", reqWith(mc.OpSetNodeThrottle, 3, nil, "", `{"capacity":40000}`), mc.StatusOK)
	admin.expectStatus("0x2c defaults", reqWith(mc.OpSetNodeThrottle, 4, nil, "",
		`{"default_throttle_reserved_units":100,"default_throttle_hard_limit":500}`), mc.StatusOK)
	admin.expectStatus("CREATE_BUCKET later", reqWith(mc.OpCreateBucket, 5, nil, "later", ""), mc.StatusOK)
}

// checkThrottleChanges checks what applyThrottleChanges set.
func checkThrottleChanges(t *testing.T, c *rawConn, when string) {
	t.Helper()
	wantLimits(t, c, when, "app", "300", "900")
	wantLimits(t, c, when, "other", "200", "unlimited")
	wantLimits(t, c, when, "later", "100", "500") // the new defaults apply to buckets created afterwards
	wantLimits(t, c, when, "default", "1666", "unlimited")
	wantNodeThrottle(t, c, when, "40000", "100", "500")
}

// TestThrottleNonBlocking: a connection that negotiated
// NonBlockingThrottlingMode gets 0x0c at once, with {"next_tick_us":N}, when
// its bucket (hard_limit 5/s) is out of units; the bucket counts the
// throttle decision; coming back after N µs works.
func TestThrottleNonBlocking(t *testing.T) {
	t.Parallel()
	k := startKVD(t, throttleConfig(t, nil, bucketConfig("trickle", 0, 5)))
	admin := login(t, k.Addr, "admin", "admin-pw", "")
	c := login(t, k.Addr, "tenant", "tenant-pw", "trickle")
	c.hello(featNonBlocking, featXError)
	c.expectStatus("SET k", reqWith(mc.OpSet, 1, mc.AppendSetExtras(nil, 0, 0), "k", "v"), mc.StatusOK)
	before := admin.bucketStat("trickle").NumThrottled

	var nextTick int64
	served := 0
	for i := range 200 {
		start := time.Now()
		res := c.call(reqWith(mc.OpGet, uint32(10+i), nil, "k", ""))
		took := time.Since(start)
		if res.Opcode != mc.OpGet || res.Opaque != uint32(10+i) {
			t.Fatalf("GET %d: reply %v opaque %d", i, res.Opcode, res.Opaque)
		}
		if res.Status == mc.StatusOK {
			served++
			continue
		}
		if res.Status != mc.StatusWouldThrottle {
			t.Fatalf("GET %d: status 0x%02x %q, want OK or 0x0c", i, uint16(res.Status), res.Value)
		}
		if took > 500*time.Millisecond {
			t.Errorf("the 0x0c reply took %v: a non-blocking client must be answered at once", took)
		}
		nextTick = nextTickUS(t, res.Value)
		break
	}
	if nextTick == 0 {
		t.Fatalf("%d GETs under hard_limit 5/s were all served: never throttled", served)
	}
	t.Logf("%d GETs served, then 0x0c with next_tick_us %d", served, nextTick)
	if after := admin.bucketStat("trickle").NumThrottled; after <= before {
		t.Errorf("num_throttled %d -> %d: the 0x0c was not counted", before, after)
	}
	time.Sleep(time.Duration(nextTick)*time.Microsecond + 100*time.Millisecond)
	c.expectStatus("GET after next_tick_us", reqWith(mc.OpGet, 9, nil, "k", ""), mc.StatusOK)
}

// TestThrottleParkingOrder pipelines 250 SET/GETK commands in one write on a
// bucket with hard_limit 50/s: every reply arrives, complete and in request
// order, and it takes more than 2 s. Meanwhile a connection on another
// bucket is served while the pipeline waits: parking never blocks the loop.
// That is checked by order, not by the probes' latency: the parked pipeline
// advances in bursts, one per tick, and several probe GETs must be answered
// one after the other while its reply count stands still. A loop that slept
// until the next tick would answer at most one probe per burst; one that
// slept per command would let the pipeline advance between probes.
//
// Why 250: the throttle checks each command before it runs and charges it
// after it ran, so a server may let a batch collected in one pass overshoot
// the limit by up to one batch (64 commands), carry-over paying it back.
// Even so, finishing 250 units needs at least three ticks after the write:
// more than 2 s. (kvd meets the limit exactly: about 4 s.)
func TestThrottleParkingOrder(t *testing.T) {
	t.Parallel()
	k := startKVD(t, throttleConfig(t, nil, bucketConfig("slow", 0, 50), bucketConfig("other", nil, nil)))
	c := login(t, k.Addr, "tenant", "tenant-pw", "slow")
	other := login(t, k.Addr, "bob", "bob-pw", "other")
	other.expectStatus("SET probe", reqWith(mc.OpSet, 1, mc.AppendSetExtras(nil, 0, 0), "probe", "p"), mc.StatusOK)

	const n = 250
	stream := parkingPipeline(n)
	type result struct {
		got []*mc.Response
		err error
	}
	done := make(chan result, 1)
	var replied atomic.Int64 // pipeline replies read so far
	start := time.Now()
	go func() {
		var all []*mc.Response
		for len(all) < n+1 {
			// One reply per call: replies are checked to come in order below.
			got, err := readReplies(c.nc, c.r, uint32(len(all)+1), 30*time.Second)
			all = append(all, got...)
			replied.Store(int64(len(all)))
			if err != nil {
				done <- result{all, err}
				return
			}
		}
		done <- result{all, nil}
	}()
	c.write(stream)

	probes, stalled := 0, stall{}
	var r result
wait:
	for {
		select {
		case r = <-done:
			break wait
		case <-time.After(100 * time.Millisecond):
		}
		before := replied.Load()
		other.expectStatus("GET probe on the other bucket", reqWith(mc.OpGet, uint32(2+probes), nil, "probe", ""), mc.StatusOK)
		probes++
		stalled.probe(before, replied.Load(), n+1)
	}
	elapsed := time.Since(start)
	t.Logf("%d throttled commands took %v; %d GETs on the other bucket meanwhile, up to %d in a row while the pipeline stood still",
		n, elapsed, probes, stalled.longest)
	if r.err != nil {
		t.Fatalf("after %d of %d replies: %v", len(r.got), n+1, r.err)
	}
	checkParkedReplies(t, r.got, n)
	if stalled.longest < 3 {
		t.Errorf("at most %d GETs on an unthrottled bucket were answered in a row while the parked pipeline stood still, want 3: the loop was blocked", stalled.longest)
	}
	if elapsed < 2*time.Second {
		t.Errorf("250 units under hard_limit 50/s were served in %v: the throttle did not hold them", elapsed)
	}
	if probes < 5 {
		t.Errorf("only %d probe GETs ran while the pipeline was parked", probes)
	}
}

// TestThrottleDeleteWhileParked parks a connection on a bucket with
// hard_limit 1/s and deletes the bucket: the parked command and the ones
// behind it are answered 0x08 promptly, the connection stays usable, and the
// DELETE_BUCKET answers OK.
func TestThrottleDeleteWhileParked(t *testing.T) {
	t.Parallel()
	k := startKVD(t, throttleConfig(t, nil, bucketConfig("drip", 0, 1)))
	admin := login(t, k.Addr, "admin", "admin-pw", "")
	c := login(t, k.Addr, "tenant", "tenant-pw", "drip")
	c.expectStatus("SET k", reqWith(mc.OpSet, 1, mc.AppendSetExtras(nil, 0, 0), "k", "v"), mc.StatusOK)

	const n = 40
	var stream []byte
	for i := range n {
		stream = mc.AppendRequest(stream, reqWith(mc.OpGet, uint32(i+1), nil, "k", ""))
	}
	c.write(stream)
	got := 0
	for ; got < n; got++ { // until no reply for 300 ms: parked
		res, err := c.tryRecv(300 * time.Millisecond)
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			break
		}
		if err != nil {
			t.Fatalf("reading GET %d: %v", got+1, err)
		}
		if res.Opaque != uint32(got+1) || res.Status != mc.StatusOK {
			t.Fatalf("GET %d before the delete: opaque %d status 0x%02x %q", got+1, res.Opaque, uint16(res.Status), res.Value)
		}
	}
	if got == n {
		t.Fatalf("all %d GETs under hard_limit 1/s were served: nothing parked", n)
	}
	t.Logf("%d GETs served, %d parked", got, n-got)

	start := time.Now()
	admin.expectStatus("DELETE_BUCKET drip", reqWith(mc.OpDeleteBucket, 2, nil, "drip", ""), mc.StatusOK)
	for ; got < n; got++ {
		res, err := c.tryRecv(time.Until(start.Add(2 * time.Second)))
		if err != nil {
			t.Fatalf("the parked connection got %d of %d replies within 2 s of DELETE_BUCKET: %v", got, n, err)
		}
		if res.Opaque != uint32(got+1) || res.Status != mc.StatusNoBucket {
			t.Fatalf("GET %d after the delete: opaque %d status 0x%02x %q, want 0x08", got+1, res.Opaque, uint16(res.Status), res.Value)
		}
	}
	t.Logf("the parked GETs were answered %v after the delete", time.Since(start))
	c.expectStatus("GET on the deleted bucket", reqWith(mc.OpGet, 100, nil, "k", ""), mc.StatusNoBucket)
	c.expectStatus("NOOP", reqWith(mc.OpNoop, 101, nil, "", ""), mc.StatusOK)
}

// TestThrottleMaxWait: with max_throttle_wait_ms 300, each of three GETs
// parked behind a deep carry-over (a ~100 WU SET under hard_limit 1/s) is
// answered 0x86 after 300 ms — not at the throttle's next tick, up to a
// second later (the tick alone would answer all three within 700 ms about
// one time in sixteen) — with a reason naming max_throttle_wait_ms; the
// bucket counts the rejections and the waits.
func TestThrottleMaxWait(t *testing.T) {
	t.Parallel()
	const maxWait = 300 * time.Millisecond
	k := startKVD(t, throttleConfig(t, map[string]any{"max_throttle_wait_ms": maxWait.Milliseconds()}, bucketConfig("drip", 0, 1)))
	admin := login(t, k.Addr, "admin", "admin-pw", "")
	c := login(t, k.Addr, "tenant", "tenant-pw", "drip")
	c.hello(featXError)
	c.expectStatus("SET 100 KB", reqWith(mc.OpSet, 1, mc.AppendSetExtras(nil, 0, 0), "k", strings.Repeat("x", 100_000)), mc.StatusOK)
	for i := range 3 {
		start := time.Now()
		res := c.expectStatus("GET behind 100 s of carry-over", reqWith(mc.OpGet, uint32(2+i), nil, "k", ""), mc.StatusTemporaryFailure)
		took := time.Since(start)
		reason := xerrorContext(t, res)
		t.Logf("0x86 after %v: %q", took, reason)
		if took < maxWait || took > maxWait+400*time.Millisecond {
			t.Errorf("GET %d: 0x86 after %v, want %v to %v", i+1, took, maxWait, maxWait+400*time.Millisecond)
		}
		if !mentions(reason, "max_throttle_wait_ms") {
			t.Errorf("reason %q does not mention max_throttle_wait_ms", reason)
		}
	}
	d := admin.bucketStat("drip")
	if d.NumRejected < 3 || d.ThrottleWaitTime < 3*maxWait.Microseconds() {
		t.Errorf("bucket drip: num_rejected %d, throttle_wait_time %d µs; want >= 3 and >= %d", d.NumRejected, d.ThrottleWaitTime, 3*maxWait.Microseconds())
	}
}

// TestThrottleUnthrottledAdmin: the admin (Unthrottled) runs 50,000
// pipelined GETs on a bucket with hard_limit 100/s well under 10 s, none
// throttled; the units are still charged to the bucket, so a tenant of the
// bucket is throttled afterwards.
func TestThrottleUnthrottledAdmin(t *testing.T) {
	t.Parallel()
	k := startKVD(t, throttleConfig(t, nil, bucketConfig("capped", 0, 100)))
	admin := login(t, k.Addr, "admin", "admin-pw", "capped")
	obs := login(t, k.Addr, "admin", "admin-pw", "")
	admin.expectStatus("SET hot", reqWith(mc.OpSet, 1, mc.AppendSetExtras(nil, 0, 0), "hot", "value"), mc.StatusOK)
	before := obs.bucketStat("capped").RU

	const n, perWrite = 50_000, 500
	type result struct {
		got []*mc.Response
		err error
	}
	done := make(chan result, 1)
	go func() {
		got, err := readReplies(admin.nc, admin.r, n+1, 30*time.Second)
		done <- result{got, err}
	}()
	start := time.Now()
	for w := 0; w < n; w += perWrite {
		var chunk []byte
		for i := w; i < w+perWrite; i++ {
			chunk = mc.AppendRequest(chunk, reqWith(mc.OpGet, uint32(i+1), nil, "hot", ""))
		}
		admin.write(chunk)
	}
	admin.write(mc.AppendRequest(nil, reqWith(mc.OpNoop, n+1, nil, "", "")))
	r := <-done
	took := time.Since(start)
	if r.err != nil || len(r.got) != n+1 {
		t.Fatalf("%d of %d replies: %v", len(r.got), n+1, r.err)
	}
	for i, res := range r.got[:n] { // all OK: none 0x0c or 0x86
		if res.Opaque != uint32(i+1) || res.Status != mc.StatusOK {
			t.Fatalf("GET %d of the Unthrottled admin: opaque %d status 0x%02x %q", i+1, res.Opaque, uint16(res.Status), res.Value)
		}
	}
	t.Logf("%d GETs in %v", n, took)
	if took > 10*time.Second {
		t.Errorf("%d Unthrottled GETs took %v, want well under 10 s", n, took)
	}
	if ru := obs.bucketStat("capped").RU; ru-before < n {
		t.Errorf("bucket ru grew by %d, want >= %d: Unthrottled units must be charged", ru-before, n)
	}
	tenant := login(t, k.Addr, "tenant", "tenant-pw", "capped")
	tenant.hello(featNonBlocking)
	res := tenant.call(reqWith(mc.OpGet, 2, nil, "hot", ""))
	if res.Status != mc.StatusWouldThrottle {
		t.Errorf("a tenant GET after the admin's 50,000 units: status 0x%02x, want 0x0c (the admin's units count against hard_limit)", uint16(res.Status))
	}
}

// TestThrottleSlowStart: a bucket without connections reserves 10% of its
// reserved units; from the tick after a connection selects it, all of them,
// which STAT throttle's free pool shows.
func TestThrottleSlowStart(t *testing.T) {
	t.Parallel()
	k := startKVD(t, throttleConfig(t, map[string]any{"node_capacity": 10000},
		bucketConfig("cold", 5000, "unlimited"), bucketConfig("idle", 1000, "unlimited")))
	admin := login(t, k.Addr, "admin", "admin-pw", "")
	freePool := func() int64 {
		t.Helper()
		v, err := strconv.ParseInt(statValue(t, "throttle", admin.statGroup("throttle"), "free_pool"), 10, 64)
		if err != nil {
			t.Fatalf("STAT throttle free_pool: %v", err)
		}
		return v
	}
	const idleEffective = 1000 / 10 // no connection ever selects "idle"
	if got, want := freePool(), int64(10000-idleEffective-5000/10); got != want {
		t.Fatalf("free_pool %d before anyone selects cold, want 10000 - %d - 500 = %d", got, idleEffective, want)
	}
	login(t, k.Addr, "tenant", "tenant-pw", "cold")
	selected := time.Now()
	want := int64(10000 - idleEffective - 5000)
	var got int64
	for time.Since(selected) < 1500*time.Millisecond {
		if got = freePool(); got == want {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got != want {
		t.Fatalf("free_pool %d 1.5 s after a connection selected cold, want %d (full reservation 5000)", got, want)
	}
	t.Logf("cold got its full reservation %v after the select", time.Since(selected))
}

// TestThrottleReportUnitUsage: with ReportUnitUsage, replies come in 0x18
// framing with the units as frame infos: a GET of 5000 bytes costs 2 RU
// (id 1), a SET of 3000 bytes 3 WU (id 2), an INCR of a 9000-byte number
// 3 RU and 1 WU. Misses cost nothing; without the
// feature replies stay classic.
func TestThrottleReportUnitUsage(t *testing.T) {
	t.Parallel()
	k := startKVD(t, throttleConfig(t, nil, bucketConfig("app", nil, nil)))
	c := login(t, k.Addr, "alice", "alice-pw", "app")
	c.hello(featAltRequest, featReportUnitUsage)
	units := func(what string, r *mc.Request, want map[uint16]uint16) *mc.Response {
		t.Helper()
		res := c.expectStatus(what, r, mc.StatusOK)
		if res.Magic != mc.MagicAltResponse {
			t.Errorf("%s: reply magic 0x%02x, want 0x18", what, res.Magic)
		}
		if got := frameInfos(t, res.FrameInfo); !maps.Equal(got, want) {
			t.Errorf("%s: frame infos %v, want %v (1 = RU, 2 = WU)", what, got, want)
		}
		return res
	}
	units("SET 3000 bytes", reqWith(mc.OpSet, 1, mc.AppendSetExtras(nil, 0, 0), "w3000", strings.Repeat("w", 3000)), map[uint16]uint16{2: 3})
	units("SET 5000 bytes", reqWith(mc.OpSet, 2, mc.AppendSetExtras(nil, 0, 0), "r5000", strings.Repeat("r", 5000)), map[uint16]uint16{2: 5})
	if res := units("GET 5000 bytes", reqWith(mc.OpGet, 3, nil, "r5000", ""), map[uint16]uint16{1: 2}); len(res.Value) != 5000 {
		t.Errorf("GET r5000: %d bytes", len(res.Value))
	}
	// INCR costs the value it read and the digits it wrote (an audit found
	// the digits charged for both: 1 RU for a 100,000-byte value).
	units("SET 9000 digits", reqWith(mc.OpSet, 6, mc.AppendSetExtras(nil, 0, 0), "n9000", strings.Repeat("0", 8999)+"5"), map[uint16]uint16{2: 9})
	if res := units("INCR of 9000 digits", reqWith(mc.OpIncrement, 7, mc.AppendArithExtras(nil, 1, 0, 0), "n9000", ""), map[uint16]uint16{1: 3, 2: 1}); string(res.Value) != "\x00\x00\x00\x00\x00\x00\x00\x06" {
		t.Errorf("INCR n9000: value % x, want 6", res.Value)
	}
	units("INCR creating", reqWith(mc.OpIncrement, 8, mc.AppendArithExtras(nil, 1, 41, 0), "made", ""), map[uint16]uint16{1: 1, 2: 1})
	miss := c.expectStatus("GET a miss", reqWith(mc.OpGet, 4, nil, "nothing", ""), mc.StatusKeyNotFound)
	if got := frameInfos(t, miss.FrameInfo); got[1] != 0 || got[2] != 0 {
		t.Errorf("a miss reported units %v: a failed command costs nothing", got)
	}
	plain := login(t, k.Addr, "alice", "alice-pw", "app")
	if res := plain.expectStatus("GET without ReportUnitUsage", reqWith(mc.OpGet, 5, nil, "r5000", ""), mc.StatusOK); res.Magic != mc.MagicResponse {
		t.Errorf("without ReportUnitUsage the reply has magic 0x%02x, want 0x81", res.Magic)
	}
}

// TestThrottlePipelinesHoldTheirUnits: SPEC 9's "node usage stays ≤
// capacity (+ one command's units per bucket)" for clients that pipeline.
// Four connections of one bucket that has only the free pool (node
// capacity 100, reserved 0) each send 15 SETs of 10 write units in one
// write. The throttle checks a command before it runs and charges it after,
// so without the units of admitted commands held from check to charge,
// every command a batch collected passed against the same gauges (up to 300
// units in one second here before the hold). Each finished second's node usage
// must stay within the capacity and one command's units for the bucket
// (which the two event loops' check-then-hold race can take: gauge package).
func TestThrottlePipelinesHoldTheirUnits(t *testing.T) {
	t.Parallel()
	const capacity, conns, perConn, units = 100, 4, 15, 10
	// Pools of 128 tickets, so that a batch can collect a whole pipeline.
	probe := map[string]any{"min": 32, "max": 128, "initial": 128}
	k := startKVD(t, throttleConfig(t, map[string]any{"node_capacity": capacity, "ingress": map[string]any{"probe": probe}},
		bucketConfig("tiny", 0, "unlimited")))
	admin := login(t, k.Addr, "admin", "admin-pw", "")
	value := strings.Repeat("v", units*1024-10)
	done := make(chan error, conns)
	for i := range conns {
		c := login(t, k.Addr, "tenant", "tenant-pw", "tiny")
		var pipe []byte
		for j := range perConn {
			key := fmt.Sprintf("c%d-%02d", i, j)
			pipe = mc.AppendRequest(pipe, reqWith(mc.OpSet, uint32(j+1), mc.AppendSetExtras(nil, 0, 0), key, value))
		}
		c.write(pipe)
		go func() {
			got, err := readReplies(c.nc, c.r, perConn, 60*time.Second)
			for j, res := range got {
				if err == nil && res.Status != mc.StatusOK {
					err = fmt.Errorf("SET %d: status 0x%02x %q", j+1, uint16(res.Status), res.Value)
				}
			}
			if err == nil && len(got) != perConn {
				err = fmt.Errorf("%d of %d replies", len(got), perConn)
			}
			done <- err
		}()
	}
	seconds := map[int64]int64{} // tick → node usage of the second before it
	for finished := 0; finished < conns; {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			finished++
		case <-time.After(50 * time.Millisecond):
		}
		st := admin.statGroup("throttle")
		tick, err1 := strconv.ParseInt(st["ticks"], 10, 64)
		used, err2 := strconv.ParseInt(st["node_units_last_second"], 10, 64)
		if err1 != nil || err2 != nil {
			t.Fatalf("STAT throttle: ticks %q, node_units_last_second %q", st["ticks"], st["node_units_last_second"])
		}
		seconds[tick] = used
	}
	var peak, total int64
	for _, used := range seconds {
		peak, total = max(peak, used), total+used
	}
	t.Logf("%d seconds, node usage per second %v, peak %d", len(seconds), seconds, peak)
	if limit := int64(capacity + units); peak > limit {
		t.Errorf("a second used %d units of a node capacity of %d, want <= %d", peak, capacity, limit)
	}
	if total < conns*perConn*units/2 {
		t.Errorf("the seconds seen add up to %d units of the %d written: too few to tell", total, conns*perConn*units)
	}
}
