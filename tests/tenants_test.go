package tests

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	mc "kvd/protocol/binary"
)

// The tenant tests run once per client in tenantClients: always with the
// raw-frame client below, and with github.com/couchbase/gomemcached's client
// when built with -tags gomemcached (tenants_gomemcached_test.go; that
// package needs go.mod/go.sum entries for its dependencies).

// tenantClient is the little a tenant test needs from a memcached client.
// Implementations fail the test on transport errors and return statuses.
type tenantClient interface {
	authPlain(user, password string) mc.Status
	selectBucketStatus(name string) mc.Status
	getValue(key string) (mc.Status, string)
	setValue(key, value string) mc.Status
	adminCmd(op mc.Opcode, key, body string) (mc.Status, string)
}

// tenantClients dials a client of each kind by name.
var tenantClients = map[string]func(t testing.TB, addr string) tenantClient{
	"raw": func(t testing.TB, addr string) tenantClient { return rawTenantClient{dialRaw(t, addr)} },
}

// rawTenantClient speaks raw frames through the harness's rawConn.
type rawTenantClient struct{ c *rawConn }

func (r rawTenantClient) do(req *mc.Request) *mc.Response {
	r.c.t.Helper()
	req.Magic, req.Opaque = mc.MagicRequest, 0x5eed
	res := r.c.call(req)
	if res.Opcode != req.Opcode || res.Opaque != req.Opaque {
		r.c.t.Fatalf("%v: reply has opcode %v opaque %#x", req.Opcode, res.Opcode, res.Opaque)
	}
	return res
}

func (r rawTenantClient) authPlain(user, password string) mc.Status {
	return r.do(&mc.Request{Opcode: mc.OpSASLAuth, Key: []byte("PLAIN"),
		Value: []byte("\x00" + user + "\x00" + password)}).Status
}

func (r rawTenantClient) selectBucketStatus(name string) mc.Status {
	return r.do(&mc.Request{Opcode: mc.OpSelectBucket, Key: []byte(name)}).Status
}

func (r rawTenantClient) getValue(key string) (mc.Status, string) {
	res := r.do(&mc.Request{Opcode: mc.OpGet, Key: []byte(key)})
	return res.Status, string(res.Value)
}

func (r rawTenantClient) setValue(key, value string) mc.Status {
	return r.do(&mc.Request{Opcode: mc.OpSet, Key: []byte(key), Extras: mc.AppendSetExtras(nil, 0, 0),
		Value: []byte(value)}).Status
}

func (r rawTenantClient) adminCmd(op mc.Opcode, key, body string) (mc.Status, string) {
	req := &mc.Request{Opcode: op}
	if key != "" {
		req.Key = []byte(key)
	}
	if body != "" {
		req.Value = []byte(body)
	}
	res := r.do(req)
	return res.Status, string(res.Value)
}

// tenantConn is a tenant client with assertions.
type tenantConn struct {
	t    testing.TB
	c    tenantClient
	name string
}

// tenantDialer returns a function opening tconns of one client kind to addr; it
// is re-evaluated after a restart because the address changes.
func tenantDialer(t testing.TB, kind string) func(addr string) *tenantConn {
	return func(addr string) *tenantConn {
		return &tenantConn{t: t, c: tenantClients[kind](t, addr), name: "anonymous"}
	}
}

func (c *tenantConn) want(what string, got, want mc.Status, body string) {
	c.t.Helper()
	if got != want {
		c.t.Fatalf("%s as %s: status 0x%02x (%v) %q, want 0x%02x (%v)",
			what, c.name, uint16(got), got, body, uint16(want), want)
	}
}

func (c *tenantConn) login(user, password, bucket string) *tenantConn {
	c.t.Helper()
	c.want("SASL_AUTH "+user, c.c.authPlain(user, password), mc.StatusOK, "")
	c.name = user
	if bucket != "" {
		c.selectB(bucket, mc.StatusOK)
	}
	return c
}

func (c *tenantConn) selectB(bucket string, st mc.Status) {
	c.t.Helper()
	c.want("SELECT_BUCKET "+bucket, c.c.selectBucketStatus(bucket), st, "")
}

func (c *tenantConn) set(key, value string, st mc.Status) {
	c.t.Helper()
	c.want("SET "+key, c.c.setValue(key, value), st, "")
}

// get fails unless GET key answers st and, on a hit, value.
func (c *tenantConn) get(key string, st mc.Status, value string) {
	c.t.Helper()
	got, v := c.c.getValue(key)
	c.want("GET "+key, got, st, v)
	if st == mc.StatusOK && v != value {
		c.t.Fatalf("GET %s as %s = %q, want %q", key, c.name, v, value)
	}
}

func (c *tenantConn) admin(what string, op mc.Opcode, key, body string, st mc.Status) string {
	c.t.Helper()
	got, v := c.c.adminCmd(op, key, body)
	c.want(what, got, st, v)
	return v
}

// buckets returns what LIST_BUCKETS answers, sorted.
func (c *tenantConn) buckets() []string {
	c.t.Helper()
	names := strings.Fields(c.admin("LIST_BUCKETS", mc.OpListBuckets, "", "", mc.StatusOK))
	slices.Sort(names)
	return names
}

func (c *tenantConn) wantBuckets(want ...string) {
	c.t.Helper()
	if got := c.buckets(); !slices.Equal(got, want) {
		c.t.Errorf("LIST_BUCKETS as %s = %q, want %q", c.name, got, want)
	}
}

// forEachTenantClient runs body as a parallel subtest per client kind.
func forEachTenantClient(t *testing.T, body func(t *testing.T, dial func(addr string) *tenantConn)) {
	for _, kind := range slices.Sorted(maps.Keys(tenantClients)) {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			body(t, tenantDialer(t, kind))
		})
	}
}

// TestTenantIsolationAndAccess checks that tenants cannot see each other's
// keys, and the statuses of authentication, bucket access and LIST_BUCKETS.
func TestTenantIsolationAndAccess(t *testing.T) {
	forEachTenantClient(t, func(t *testing.T, dial func(string) *tenantConn) {
		k := startKVD(t, testConfig)
		alice := dial(k.Addr).login("alice", "alice-pw", "app")
		bob := dial(k.Addr).login("bob", "bob-pw", "other")
		anon := dial(k.Addr)

		alice.set("shared-name", "alice's value", mc.StatusOK)
		alice.get("shared-name", mc.StatusOK, "alice's value")
		bob.get("shared-name", mc.StatusKeyNotFound, "")  // not in bob's bucket
		anon.get("shared-name", mc.StatusKeyNotFound, "") // nor in the anonymous one
		bob.set("shared-name", "bob's value", mc.StatusOK)
		bob.get("shared-name", mc.StatusOK, "bob's value")
		alice.get("shared-name", mc.StatusOK, "alice's value")

		alice.selectB("other", mc.StatusAccessDenied)
		alice.get("shared-name", mc.StatusOK, "alice's value") // selection unchanged
		bob.selectB("app", mc.StatusAccessDenied)
		admin := dial(k.Addr).login("admin", "admin-pw", "")
		admin.selectB("no-such-bucket", mc.StatusKeyNotFound)
		admin.selectB("app", mc.StatusOK)
		admin.get("shared-name", mc.StatusOK, "alice's value")

		wrong := dial(k.Addr)
		wrong.want("SASL_AUTH alice with a wrong password", wrong.c.authPlain("alice", "not-her-pw"), mc.StatusAuthError, "")
		wrong.want("SASL_AUTH as an unknown user", wrong.c.authPlain("mallory", "x"), mc.StatusAuthError, "")
		wrong.get("shared-name", mc.StatusKeyNotFound, "") // still anonymous, on default

		noSel := dial(k.Addr).login("alice", "alice-pw", "")
		noSel.get("shared-name", mc.StatusNoBucket, "")
		noSel.set("x", "y", mc.StatusNoBucket)

		alice.wantBuckets("app")
		bob.wantBuckets("other")
		admin.wantBuckets("app", "default", "other")
	})
}

// TestTenantNoAnonymousBucket: without anonymous_bucket, unauthenticated
// connections may not touch data or select buckets.
func TestTenantNoAnonymousBucket(t *testing.T) {
	forEachTenantClient(t, func(t *testing.T, dial func(string) *tenantConn) {
		k := startKVD(t, `{"buckets": [{"name": "app"}],
		  "users": [{"name": "alice", "password": "alice-pw", "buckets": ["app"]}]}`)
		anon := dial(k.Addr)
		anon.get("k", mc.StatusAccessDenied, "")
		anon.set("k", "v", mc.StatusAccessDenied)
		anon.selectB("app", mc.StatusAccessDenied)
		alice := dial(k.Addr).login("alice", "alice-pw", "app")
		alice.get("k", mc.StatusKeyNotFound, "") // the refused SET stored nothing
		alice.set("k", "v", mc.StatusOK)
		alice.get("k", mc.StatusOK, "v")
	})
}

// TestTenantBucketAdmin covers CREATE_BUCKET and DELETE_BUCKET: privileges,
// duplicates, bad settings, connections that have a deleted bucket
// selected, re-creation, and persistence across a SIGTERM restart.
func TestTenantBucketAdmin(t *testing.T) {
	forEachTenantClient(t, func(t *testing.T, dial func(string) *tenantConn) {
		k := startKVD(t, testConfig)
		alice := dial(k.Addr).login("alice", "alice-pw", "app")
		admin := dial(k.Addr).login("admin", "admin-pw", "")

		alice.admin("CREATE_BUCKET", mc.OpCreateBucket, "alices", "", mc.StatusAccessDenied)
		alice.admin("DELETE_BUCKET other", mc.OpDeleteBucket, "other", "", mc.StatusAccessDenied)
		admin.admin("CREATE_BUCKET scratch", mc.OpCreateBucket, "scratch", "", mc.StatusOK)
		admin.admin("CREATE_BUCKET scratch again", mc.OpCreateBucket, "scratch", "", mc.StatusKeyExists)
		admin.admin("CREATE_BUCKET app", mc.OpCreateBucket, "app", "", mc.StatusKeyExists)
		for _, bad := range []string{`{"reserved": `, `{"reserved": "lots"}`, `[1, 2]`,
			`{"reserved": 200, "hard_limit": 100}`} {
			admin.admin("CREATE_BUCKET with settings "+bad, mc.OpCreateBucket, "badsettings", bad, mc.StatusInvalidArguments)
		}
		admin.wantBuckets("app", "default", "other", "scratch")
		alice.wantBuckets("app")

		user := dial(k.Addr).login("admin", "admin-pw", "scratch")
		for _, key := range []string{"a", "b", "c"} {
			user.set(key, "scratch "+key, mc.StatusOK)
		}
		admin.admin("DELETE_BUCKET scratch", mc.OpDeleteBucket, "scratch", "", mc.StatusOK)
		user.get("a", mc.StatusNoBucket, "")
		user.set("d", "v", mc.StatusNoBucket)
		user.selectB("scratch", mc.StatusKeyNotFound)
		admin.admin("DELETE_BUCKET scratch again", mc.OpDeleteBucket, "scratch", "", mc.StatusKeyNotFound)
		alice.get("a", mc.StatusKeyNotFound, "") // other buckets untouched

		admin.admin("re-CREATE_BUCKET scratch", mc.OpCreateBucket, "scratch", "", mc.StatusOK)
		user.selectB("scratch", mc.StatusOK)
		for _, key := range []string{"a", "b", "c"} {
			user.get(key, mc.StatusKeyNotFound, "")
		}

		admin.admin("CREATE_BUCKET runtime", mc.OpCreateBucket, "runtime",
			`{"reserved": 100, "hard_limit": 200}`, mc.StatusOK)
		admin.admin("CREATE_BUCKET doomed", mc.OpCreateBucket, "doomed", "", mc.StatusOK)
		rt := dial(k.Addr).login("admin", "admin-pw", "runtime")
		for i := range 50 {
			rt.set(fmt.Sprintf("kept-%d", i), fmt.Sprintf("value %d", i), mc.StatusOK)
		}
		user.set("also-kept", "in the re-created bucket", mc.StatusOK)
		admin.admin("DELETE_BUCKET doomed", mc.OpDeleteBucket, "doomed", "", mc.StatusOK)

		k.Restart(false)
		checkBucketsAfterRestart(t, dial, k.Addr)
	})
}

// TestTenantDeleteBucketUnderLoad deletes a bucket while a connection has
// thousands of pipelined commands on it in flight: every command is
// answered, in order, with success or "no bucket" (never a hang or another
// error); once one got "no bucket" all later ones do; the re-created bucket
// is empty.
func TestTenantDeleteBucketUnderLoad(t *testing.T) {
	t.Parallel()
	k := startKVD(t, testConfig)
	admin := dialRaw(t, k.Addr)
	admin.auth("admin", "admin-pw")
	admin.expectStatus("CREATE_BUCKET victim", reqWith(mc.OpCreateBucket, 1, nil, "victim", ""), mc.StatusOK)

	load := dialRaw(t, k.Addr)
	load.auth("admin", "admin-pw")
	if st := load.selectBucket("victim"); st != mc.StatusOK {
		t.Fatalf("select victim: %v", st)
	}
	const n = 6000
	stream := setGetStream(n)
	type result struct {
		got []*mc.Response
		err error
	}
	done, begun := make(chan result, 1), make(chan struct{})
	go func() {
		got, err := readReplies(load.nc, load.r, 50, 30*time.Second) // some of it has run
		close(begun)
		if err == nil {
			var rest []*mc.Response
			rest, err = readReplies(load.nc, load.r, n+1, 30*time.Second)
			got = append(got, rest...)
		}
		done <- result{got, err}
	}()
	load.write(stream)
	<-begun // the delete lands in the middle: 5,950 commands (2,975 synced SETs) are still to come
	admin.expectStatus("DELETE_BUCKET victim", reqWith(mc.OpDeleteBucket, 2, nil, "victim", ""), mc.StatusOK)
	r := <-done
	if r.err != nil {
		t.Fatalf("after %d of %d replies: %v", len(r.got), n+1, r.err)
	}
	checkCutOff(t, r.got, n)

	admin.expectStatus("re-CREATE_BUCKET victim", reqWith(mc.OpCreateBucket, 3, nil, "victim", ""), mc.StatusOK)
	if st := load.selectBucket("victim"); st != mc.StatusOK {
		t.Fatalf("select the re-created victim: %v", st)
	}
	keys := make([]string, 0, n/2)
	for i := range n / 2 {
		keys = append(keys, fmt.Sprintf("v%05d", i))
	}
	if got := fetchAll(t, load, keys); len(got) != 0 {
		t.Errorf("the re-created bucket has %d of the deleted bucket's keys", len(got))
	}
}

// checkBucketsAfterRestart checks what TestTenantBucketAdmin left before its
// restart: the run-time buckets and their keys, and no deleted bucket.
func checkBucketsAfterRestart(t *testing.T, dial func(string) *tenantConn, addr string) {
	t.Helper()
	admin := dial(addr).login("admin", "admin-pw", "")
	admin.wantBuckets("app", "default", "other", "runtime", "scratch")
	admin.selectB("doomed", mc.StatusKeyNotFound)
	admin.selectB("runtime", mc.StatusOK)
	for i := range 50 {
		admin.get(fmt.Sprintf("kept-%d", i), mc.StatusOK, fmt.Sprintf("value %d", i))
	}
	admin.selectB("scratch", mc.StatusOK)
	admin.get("also-kept", mc.StatusOK, "in the re-created bucket")
	admin.get("a", mc.StatusKeyNotFound, "")
	alice := dial(addr).login("alice", "alice-pw", "app")
	alice.get("shared", mc.StatusKeyNotFound, "")
	alice.selectB("runtime", mc.StatusAccessDenied)
	alice.wantBuckets("app")
}

// setGetStream is n pipelined commands, SET and GET of the same key in
// turn (opaques 1..n), and a NOOP with opaque n+1.
func setGetStream(n int) []byte {
	var stream []byte
	for i := range n {
		key := fmt.Sprintf("v%05d", i/2)
		r := reqWith(mc.OpSet, uint32(i+1), mc.AppendSetExtras(nil, 0, 0), key, strings.Repeat("v", 200))
		if i%2 == 1 {
			r = reqWith(mc.OpGet, uint32(i+1), nil, key, "")
		}
		stream = mc.AppendRequest(stream, r)
	}
	return mc.AppendRequest(stream, reqWith(mc.OpNoop, uint32(n+1), nil, "", ""))
}

// checkCutOff checks the replies to setGetStream(n) cut off by a
// DELETE_BUCKET: all there, in order, OK until the first "no bucket" and
// "no bucket" from then on.
func checkCutOff(t *testing.T, got []*mc.Response, n int) {
	t.Helper()
	if len(got) != n+1 {
		t.Fatalf("%d replies, want %d", len(got), n+1)
	}
	ok, noBucket := 0, 0
	for i, res := range got[:n] {
		if res.Opaque != uint32(i+1) {
			t.Fatalf("reply %d has opaque %d, want %d", i, res.Opaque, i+1)
		}
		switch {
		case res.Status == mc.StatusNoBucket:
			noBucket++
		case noBucket > 0:
			t.Fatalf("reply %d (%v) has status 0x%02x after an earlier \"no bucket\"", i, res.Opcode, uint16(res.Status))
		case res.Status == mc.StatusOK:
			ok++
		default:
			t.Fatalf("reply %d (%v): status 0x%02x %q, want OK or no bucket", i, res.Opcode, uint16(res.Status), res.Value)
		}
	}
	t.Logf("%d commands succeeded before the delete, %d got \"no bucket\"", ok, noBucket)
	if noBucket == 0 {
		t.Errorf("the delete came after the whole pipeline: the test checked nothing about in-flight commands")
	}
}

// TestTenantMaxConnectionsPerBucket: with max_connections_per_bucket 2 a
// third non-privileged SELECT_BUCKET of the bucket gets 0x85 (and leaves
// the connection without a bucket), a privileged user is exempt,
// re-selecting the same bucket costs nothing, and a closed connection frees
// its place.
func TestTenantMaxConnectionsPerBucket(t *testing.T) {
	t.Parallel()
	k := startKVD(t, configWith(t, testConfig, map[string]any{"max_connections_per_bucket": 2}))
	dialAlice := func() *rawConn {
		c := dialRaw(t, k.Addr)
		c.auth("alice", "alice-pw")
		return c
	}
	first, second, third := dialAlice(), dialAlice(), dialAlice()
	for i, c := range []*rawConn{first, second} {
		if st := c.selectBucket("app"); st != mc.StatusOK {
			t.Fatalf("alice connection %d selects app: %v", i+1, st)
		}
	}
	if st := first.selectBucket("app"); st != mc.StatusOK {
		t.Fatalf("re-selecting app on a connection that has it: %v", st)
	}
	if res := third.call(&mc.Request{Magic: mc.MagicRequest, Opcode: mc.OpSelectBucket, Key: []byte("app")}); res.Status != mc.StatusBusy ||
		string(res.Value) != "too many connections to bucket app (max_connections_per_bucket=2)" {
		t.Fatalf("third alice connection selects app: status %v %q, want 0x85 naming the limit", res.Status, res.Value)
	}
	third.expectStatus("GET on the refused connection", reqWith(mc.OpGet, 1, nil, "k", ""), mc.StatusNoBucket)
	admin := dialRaw(t, k.Addr)
	admin.auth("admin", "admin-pw")
	if st := admin.selectBucket("app"); st != mc.StatusOK {
		t.Fatalf("admin (privileged) selects the full bucket: %v, want OK", st)
	}
	// Whether privileged connections count towards the limit is left open:
	// close the admin's before checking that a tenant's close frees a place.
	_ = admin.nc.Close()
	if st := third.selectBucket("app"); st != mc.StatusBusy {
		t.Fatalf("third alice connection selects app with two alice connections open: %v, want 0x85", st)
	}
	_ = second.nc.Close()
	deadline := time.Now().Add(5 * time.Second)
	for st := third.selectBucket("app"); st != mc.StatusOK; st = third.selectBucket("app") {
		if st != mc.StatusBusy || time.Now().After(deadline) {
			t.Fatalf("after a connection closed, selecting app: %v, want OK within 5 s", st)
		}
		time.Sleep(50 * time.Millisecond)
	}
	third.expectStatus("SET once admitted", reqWith(mc.OpSet, 2, mc.AppendSetExtras(nil, 0, 0), "k", "v"), mc.StatusOK)
}

// TestMaxConnectionsPerBucketAutomaticSelection: the limit holds for the
// buckets a connection lands on without SELECT_BUCKET too — the anonymous
// bucket, and the bucket named after the user at login. A connection that
// finds its bucket full is without one, and its data commands' 0x08 (text:
// SERVER_ERROR) says why; once a place frees, its next data command lands
// on the bucket, as does a new connection. (It once stayed without a bucket
// for good: a text client, which cannot select one, never recovered.)
func TestMaxConnectionsPerBucketAutomaticSelection(t *testing.T) {
	t.Parallel()
	k := startKVD(t, `{"anonymous_bucket": "default", "max_connections_per_bucket": 2,
  "buckets": [{"name": "default"}, {"name": "carol"}],
  "users": [{"name": "carol", "password": "carol-pw", "buckets": ["carol"]}]}`)
	get := reqWith(mc.OpGet, 1, nil, "k", "")
	landed := func(what string, c *rawConn) {
		t.Helper()
		c.expectStatus(what, get, mc.StatusKeyNotFound)
	}
	refused := func(what string, c *rawConn) {
		t.Helper()
		res := c.expectStatus(what, get, mc.StatusNoBucket)
		if !strings.Contains(string(res.Value), "max_connections_per_bucket=2") {
			t.Errorf("%s: 0x08 says %q, not why", what, res.Value)
		}
	}
	// Four anonymous connections held open: at most two land on default
	// (the harness's own readiness probe may still hold a place), the
	// others get 0x08 naming the limit.
	var in, out []*rawConn
	for i := range 4 {
		c := dialRaw(t, k.Addr)
		switch res := c.call(get); res.Status {
		case mc.StatusKeyNotFound:
			in = append(in, c)
		case mc.StatusNoBucket:
			out = append(out, c)
			if !strings.Contains(string(res.Value), "max_connections_per_bucket=2") {
				t.Errorf("anonymous connection %d: 0x08 says %q, not why", i+1, res.Value)
			}
		default:
			t.Fatalf("anonymous connection %d: GET status %v", i+1, res.Status)
		}
	}
	if len(in) == 0 || len(in) > 2 {
		t.Fatalf("%d of 4 anonymous connections landed on default, want 1 or 2 (limit 2)", len(in))
	}
	for end := time.Now().Add(5 * time.Second); len(in) < 2; time.Sleep(50 * time.Millisecond) { // fill it
		if c := dialRaw(t, k.Addr); c.call(get).Status == mc.StatusKeyNotFound {
			in = append(in, c)
		} else if _ = c.nc.Close(); time.Now().After(end) {
			t.Fatal("the harness's probe held a place on default for 5 s")
		}
	}
	txt := dialText(t, k.Addr)
	txt.call("a text connection on the full bucket", "get k\r\n",
		"SERVER_ERROR no bucket selected: bucket default has max_connections_per_bucket=2 connections")
	carol := func() *rawConn {
		c := dialRaw(t, k.Addr)
		c.auth("carol", "carol-pw")
		return c
	}
	c1, c2, c3 := carol(), carol(), carol()
	landed("carol's first login", c1)
	landed("carol's second login", c2)
	refused("carol's third login", c3)
	_ = c1.nc.Close()
	waitFor(t, 5*time.Second, "carol's third login landing once her first left", func() bool {
		return c3.call(get).Status == mc.StatusKeyNotFound
	})
	for _, c := range in {
		_ = c.nc.Close()
	}
	waitFor(t, 5*time.Second, "a refused anonymous connection landing once a place freed", func() bool {
		return out[0].call(get).Status == mc.StatusKeyNotFound
	})
	waitFor(t, 5*time.Second, "the refused text connection landing", func() bool {
		txt.send("get k\r\n")
		l, err := txt.line(2 * time.Second)
		return err == nil && l == "END"
	})
	_, _ = out[0].nc.Close(), txt.nc.Close()
	waitFor(t, 5*time.Second, "a new anonymous connection landing on default once they closed", func() bool {
		c := dialRaw(t, k.Addr)
		defer c.nc.Close()
		return c.call(get).Status == mc.StatusKeyNotFound
	})
}
