package tests

import (
	"os"
	"strings"
	"testing"
	"time"

	mc "kvd/protocol/binary"
)

// revokeConfig has alice on "app" (and "other" when both), bob on "other",
// carol Unthrottled on "app" unless demoted, and no anonymous bucket.
func revokeConfig(aliceBoth, withBob, carolUnthrottled bool) string {
	alice := `["app"]`
	if aliceBoth {
		alice = `["app", "other"]`
	}
	users := `{"name": "alice", "password": "alice-pw", "buckets": ` + alice + `}`
	if withBob {
		users += `, {"name": "bob", "password": "bob-pw", "buckets": ["other"]}`
	}
	priv := `[]`
	if carolUnthrottled {
		priv = `["Unthrottled"]`
	}
	users += `, {"name": "carol", "password": "carol-pw", "buckets": ["app"], "privileges": ` + priv + `}`
	return `{"buckets": [{"name": "app"}, {"name": "other", "reserved": 1, "hard_limit": 1}],
  "max_throttle_wait_ms": 60000, "users": [` + users + `]}`
}

// TestRevocationReachesOpenConnections edits the watched config while
// connections are open: alice loses "other" (which her open connection
// has selected), bob is deleted, carol loses Unthrottled. Within 10 s of
// the edit alice's open connection gets 0x08 on "other" and keeps "app"
// on another connection, bob's idle connection is closed without sending
// anything, the admin log names the connections, and bob cannot log in.
func TestRevocationReachesOpenConnections(t *testing.T) {
	t.Parallel()
	k := startKVD(t, revokeConfig(true, true, true))
	aliceOther := login(t, k.Addr, "alice", "alice-pw", "other")
	aliceApp := login(t, k.Addr, "alice", "alice-pw", "app")
	bob := login(t, k.Addr, "bob", "bob-pw", "other")
	for _, c := range []*rawConn{aliceOther, aliceApp, bob} {
		c.expectStatus("SET before the edit", set("k", "v"), mc.StatusOK)
	}
	if err := os.WriteFile(k.Config, []byte(revokeConfig(false, false, false)), 0o644); err != nil {
		t.Fatal(err)
	}
	edited := time.Now()
	waitFor(t, 10*time.Second, "alice's open connection losing bucket other", func() bool {
		res := aliceOther.call(get("k"))
		if res.Status != mc.StatusOK && res.Status != mc.StatusNoBucket {
			t.Fatalf("GET on a revoked bucket: status 0x%02x %q", uint16(res.Status), res.Value)
		}
		return res.Status == mc.StatusNoBucket
	})
	t.Logf("bucket revoked on the open connection %v after the edit", time.Since(edited))
	if !bob.closed(10*time.Second - time.Since(edited)) {
		t.Fatalf("deleted user's idle connection still open 10 s after the edit")
	}
	aliceApp.expectStatus("GET on the bucket alice keeps", get("k"), mc.StatusOK)
	if st := aliceOther.selectBucket("other"); st != mc.StatusAccessDenied {
		t.Errorf("alice re-selecting other: status 0x%02x, want 0x24", uint16(st))
	}
	d := dialRaw(t, k.Addr)
	if res := d.call(&mc.Request{Magic: mc.MagicRequest, Opcode: mc.OpSASLAuth, Key: []byte("PLAIN"),
		Value: []byte("\x00bob\x00bob-pw")}); res.Status != mc.StatusAuthError {
		t.Errorf("deleted user's login: status 0x%02x, want 0x20", uint16(res.Status))
	}
	for _, want := range []string{"user=alice bucket=other", "user=bob reason=\"user deleted"} {
		waitFor(t, 5*time.Second, "the admin log saying "+want, func() bool { return strings.Contains(k.Log(), want) })
	}
}

// TestRevokedUnthrottledIsThrottled demotes an Unthrottled user by a
// config edit: her open connection is throttled from then on, and the admin
// log says so.
func TestRevokedUnthrottledIsThrottled(t *testing.T) {
	t.Parallel()
	k := startKVD(t, strings.Replace(revokeConfig(true, true, true), `["app"], "privileges"`, `["other"], "privileges"`, 1))
	carol := login(t, k.Addr, "carol", "carol-pw", "other")
	carol.hello(featNonBlocking)
	for i := range 20 {
		carol.expectStatus("unthrottled SET", reqWith(mc.OpSet, uint32(i), mc.AppendSetExtras(nil, 0, 0), "k", "v"), mc.StatusOK)
	}
	cfg := strings.Replace(revokeConfig(true, true, false), `["app"], "privileges"`, `["other"], "privileges"`, 1)
	if err := os.WriteFile(k.Config, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "carol's open connection throttled (0x0c) in a bucket of 1 unit/s", func() bool {
		return carol.call(set("k", "v")).Status == mc.StatusWouldThrottle
	})
	// The log reaches the harness through a pipe: the reply can come first.
	waitFor(t, 5*time.Second, "the admin log naming carol's demoted connection", func() bool {
		return strings.Contains(k.Log(), "user=carol from=Unthrottled")
	})
}

// TestPasswordChangeEndsOpenSessions: a reload that changes a user's
// password closes the connections that logged in with the old one (an
// operator rotating a leaked password shuts its holder out); the new
// password logs in, and a user whose password stayed keeps hers open.
func TestPasswordChangeEndsOpenSessions(t *testing.T) {
	t.Parallel()
	k := startKVD(t, revokeConfig(true, true, true))
	alice := login(t, k.Addr, "alice", "alice-pw", "app")
	bob := login(t, k.Addr, "bob", "bob-pw", "other")
	cfg := strings.Replace(revokeConfig(true, true, true), `"alice-pw"`, `"alice-new-pw"`, 1)
	if err := os.WriteFile(k.Config, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	if !alice.closed(10 * time.Second) {
		t.Fatalf("alice's connection still open 10 s after her password changed")
	}
	bob.expectStatus("bob's SET after alice's password changed", set("k", "v"), mc.StatusOK)
	login(t, k.Addr, "alice", "alice-new-pw", "app").expectStatus("SET with the new password", set("k", "v"), mc.StatusOK)
	waitFor(t, 5*time.Second, "the admin log naming alice's closed connection", func() bool {
		return strings.Contains(k.Log(), "user=alice reason=\"password changed")
	})
}

// TestPromotedWhileParked: a config edit that makes a user Unthrottled
// while its connection's command is parked by the throttle lets the
// command run, and the connection goes on serving what follows (it used to
// stay parked for good: never read again, never let go, CLOSE-WAIT after
// the client left; a config audit's finding).
func TestPromotedWhileParked(t *testing.T) {
	t.Parallel()
	cfg := func(unthrottled bool) string {
		return strings.Replace(revokeConfig(true, true, unthrottled), `["app"], "privileges"`, `["other"], "privileges"`, 1)
	}
	k := startKVD(t, cfg(false))
	carol := login(t, k.Addr, "carol", "carol-pw", "other")
	// 100 KB in a bucket of 1 unit a second: about 98 s of carried-over debt.
	carol.expectStatus("SET of 100 KB", set("k", strings.Repeat("v", 100_000)), mc.StatusOK)
	carol.send(set("parked", "v")) // parked behind the debt
	if res, err := carol.tryRecv(500 * time.Millisecond); err == nil {
		t.Fatalf("a SET behind 98 s of debt was answered at once: %v", res.Status)
	}
	if err := os.WriteFile(k.Config, []byte(cfg(true)), 0o644); err != nil {
		t.Fatal(err)
	}
	if res, err := carol.tryRecv(10 * time.Second); err != nil || res.Status != mc.StatusOK {
		t.Fatalf("the parked SET after carol became Unthrottled: %v %+v", err, res)
	}
	for i := range 5 {
		res, err := carol.tryRecvAfter(get("parked"), 5*time.Second)
		if err != nil || res.Status != mc.StatusOK || string(res.Value) != "v" {
			t.Fatalf("GET %d after the parked SET ran: %v %+v", i, err, res)
		}
	}
}

// TestRevocationBesideRefusedBucketEdit: a config edit that deletes a user
// and also conflicts with a run-time bucket setting is refused for its
// buckets, but the user's deletion applies at once, as it would at a start
// with that file (it used to wait until the conflict was lifted: the user
// went on logging in; a config audit's finding).
func TestRevocationBesideRefusedBucketEdit(t *testing.T) {
	t.Parallel()
	cfg := func(app string, withBob bool) string {
		users := `{"name": "admin", "password": "admin-pw", "buckets": ["*"], "privileges": ["BucketThrottleManagement", "Stats"]}`
		if withBob {
			users += `, {"name": "bob", "password": "bob-pw", "buckets": ["app"]}`
		}
		return `{"buckets": [` + app + `], "users": [` + users + `]}`
	}
	k := startKVD(t, cfg(`{"name": "app"}`, true))
	admin := login(t, k.Addr, "admin", "admin-pw", "")
	admin.expectStatus("0x2a app", reqWith(mc.OpSetBucketThrottle, 1, nil, "app", `{"reserved":50,"hard_limit":100}`), mc.StatusOK)
	bob := login(t, k.Addr, "bob", "bob-pw", "app")
	bob.expectStatus("SET before the edit", set("k", "v"), mc.StatusOK)
	// The file's reserved 200 is above app's run-time hard limit: refused.
	if err := os.WriteFile(k.Config, []byte(cfg(`{"name": "app", "reserved": 200}`, false)), 0o644); err != nil {
		t.Fatal(err)
	}
	if !bob.closed(10 * time.Second) {
		t.Fatal("the deleted user's open connection is still open 10 s after the edit")
	}
	d := dialRaw(t, k.Addr)
	if res := d.call(&mc.Request{Magic: mc.MagicRequest, Opcode: mc.OpSASLAuth, Key: []byte("PLAIN"),
		Value: []byte("\x00bob\x00bob-pw")}); res.Status != mc.StatusAuthError {
		t.Errorf("the deleted user's login: status 0x%02x, want 0x20", uint16(res.Status))
	}
	if r, h := admin.bucketStat("app").limits(); r != "50" || h != "100" {
		t.Errorf("app %s/%s after the refused edit, want the run-time 50/100", r, h)
	}
	waitFor(t, 5*time.Second, "the log saying the edit was rejected in part", func() bool {
		return strings.Contains(k.Log(), "config edit rejected in part")
	})
}
