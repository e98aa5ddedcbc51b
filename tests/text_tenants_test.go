package tests

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	mc "kvd/protocol/binary"
)

// Text connections are tenants like binary ones: authenticated as memcached
// -Y does, throttled, admitted and counted in the same bucket figures.

// textAuthConfig has users and no anonymous bucket: text connections must
// log in first. alice may use a bucket named like her; bob may not, so he
// lands in his first bucket in name order ("app").
func textAuthConfig(withAlice bool) string {
	users := `{"name": "admin", "password": "admin-pw", "buckets": ["*"],
	  "privileges": ["BucketThrottleManagement", "Unthrottled", "Stats"]},
	 {"name": "bob", "password": "bob-pw", "buckets": ["other", "app"]}`
	if withAlice {
		users += `, {"name": "alice", "password": "alice-pw", "buckets": ["app", "alice"]}`
	}
	return `{"buckets": [{"name": "alice"}, {"name": "app"}, {"name": "other"}], "users": [` + users + `]}`
}

func TestTextAuth(t *testing.T) {
	t.Parallel()
	k := startKVD(t, textAuthConfig(true))
	admin := login(t, k.Addr, "admin", "admin-pw", "")

	// Before: every command is refused, the connection stays open.
	c := dialText(t, k.Addr)
	c.call("get before login", "get a\r\n", "CLIENT_ERROR unauthenticated")
	c.call("mn before login", "mn\r\n", "CLIENT_ERROR unauthenticated")
	c.call("version before login", "version\r\n", "CLIENT_ERROR unauthenticated")
	c.call("incr before login", "incr a 1\r\n", "CLIENT_ERROR unauthenticated")
	c.call("add before login", "add a 0 0 1\r\nx\r\n", "CLIENT_ERROR unauthenticated")
	// Good: STORED, then alice works in the bucket named like her.
	c.call("login alice", "set x 0 0 14\r\nalice alice-pw\r\n", "STORED")
	c.call("set after login", "set k 0 0 5\r\nalice\r\n", "STORED")
	c.call("get after login", "get k\r\n", "VALUE k 0 5", "alice", "END")
	wantBinaryValue(t, admin, "alice", "k", "alice")
	wantBinaryMiss(t, admin, "app", "k")

	// Bad password: refused as memcached 1.6 -Y refuses it, and the client
	// may try again on the same connection.
	bad := dialText(t, k.Addr)
	bad.call("bad password", "set x 0 0 11\r\nalice wrong\r\n", "CLIENT_ERROR authentication failure")
	bad.call("get after a bad password", "get k\r\n", "CLIENT_ERROR unauthenticated")
	bad.call("login after a bad password", "set x 0 0 14\r\nalice alice-pw\r\n", "STORED")
	bad.call("get after the login", "get k\r\n", "VALUE k 0 5", "alice", "END")
	// The data block is split at spaces, as memcached -Y splits it.
	for _, cred := range []string{"alice  alice-pw", " alice alice-pw ", "alice alice-pw extra"} {
		b := dialText(t, k.Addr)
		b.call("credentials "+cred, "set x 0 0 "+itoa(len(cred))+"\r\n"+cred+"\r\n", "STORED")
	}
	// A set announcing more than a login's data before the login is refused
	// at its line, and the connection closes: its block is never held.
	big := dialText(t, k.Addr)
	big.send("set x 0 0 1000000\r\n" + strings.Repeat("p", 1000))
	big.expect("a 1 MB set before login", "CLIENT_ERROR unauthenticated")
	if !big.closedByPeer(3 * time.Second) {
		t.Error("the connection stayed open after a 1 MB set before login")
	}
	// Past the item size the set is refused at its line by the codec; before
	// the login that is the same answer and close. An unfinished line past
	// 4 KiB (a get that would be up to 1 MiB) is not held before the login
	// either: memcached -Y closes a line past 2 KiB.
	for what, in := range map[string]string{
		"a set past the item size before login":   "set x 0 0 1048577\r\nalice alice-pw" + strings.Repeat("y", 5000),
		"a 5 KB unfinished get line before login": "get " + strings.Repeat("k ", 2500),
	} {
		b := dialText(t, k.Addr)
		b.send(in)
		b.expect(what, "CLIENT_ERROR unauthenticated")
		if !b.closedByPeer(3 * time.Second) {
			t.Errorf("%s: the connection stayed open", what)
		}
	}
	// Fewer than two tokens are a malformed login, an unknown user a bad
	// password (memcached's replies).
	for cred, want := range map[string]string{"alice": "CLIENT_ERROR bad authentication token format",
		"": "CLIENT_ERROR bad authentication token format", "nobody pw": "CLIENT_ERROR authentication failure"} {
		b := dialText(t, k.Addr)
		b.call("credentials "+strconv.Quote(cred), "set x 0 0 "+itoa(len(cred))+"\r\n"+cred+"\r\n", want)
	}

	// bob may not use a bucket named bob: his first bucket, by name, is app.
	bob := textLogin(t, k.Addr, "bob", "bob-pw")
	bob.call("bob set", "set k 0 0 3\r\nbob\r\n", "STORED")
	wantBinaryValue(t, admin, "app", "k", "bob")

	// Revoked: a reload that removes alice refuses her next login.
	if err := os.WriteFile(k.Config, []byte(textAuthConfig(false)), 0o644); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		r := dialText(t, k.Addr)
		r.send("set x 0 0 14\r\nalice alice-pw\r\n")
		got, _ := r.line(5 * time.Second)
		if got == "CLIENT_ERROR authentication failure" {
			break
		}
		if got != "STORED" || time.Now().After(deadline) {
			t.Fatalf("alice's login after the reload removed her: %q", got)
		}
		time.Sleep(200 * time.Millisecond)
	}
	// Revocation reaches open connections as over binary: alice's open
	// text connection is closed before its next command.
	c.send("get k\r\n")
	if !c.closedByPeer(5 * time.Second) {
		t.Error("a removed user's open text connection was kept")
	}
}

func wantBinaryValue(t *testing.T, admin *rawConn, bucket, key, want string) {
	t.Helper()
	if st := admin.selectBucket(bucket); st != mc.StatusOK {
		t.Fatalf("SELECT_BUCKET %s: %v", bucket, st)
	}
	res := admin.call(get(key))
	if res.Status != mc.StatusOK || string(res.Value) != want {
		t.Fatalf("bucket %s key %s over binary: status %v value %q, want %q", bucket, key, res.Status, res.Value, want)
	}
}

func wantBinaryMiss(t *testing.T, admin *rawConn, bucket, key string) {
	t.Helper()
	if st := admin.selectBucket(bucket); st != mc.StatusOK {
		t.Fatalf("SELECT_BUCKET %s: %v", bucket, st)
	}
	if res := admin.call(get(key)); res.Status != mc.StatusKeyNotFound {
		t.Fatalf("bucket %s key %s over binary: status %v, want not found", bucket, key, res.Status)
	}
}

// TestTextAnonymousAndIsolation: with anonymous_bucket set, a text
// connection works at once in it (and cannot log in: its set is a set);
// logged-in text connections of two tenants see only their own bucket.
func TestTextAnonymousAndIsolation(t *testing.T) {
	t.Parallel()
	k := startKVD(t, testConfig)
	anon := dialText(t, k.Addr)
	anon.call("anonymous set", "set k 0 0 4\r\nanon\r\n", "STORED")
	wantBinaryValue(t, login(t, k.Addr, "admin", "admin-pw", ""), "default", "k", "anon")

	k2 := startKVD(t, textAuthConfig(true))
	alice := textLogin(t, k2.Addr, "alice", "alice-pw") // bucket alice
	bob := textLogin(t, k2.Addr, "bob", "bob-pw")       // bucket app
	alice.call("alice set", "set k 0 0 5\r\nalice\r\n", "STORED")
	bob.call("bob get", "get k\r\n", "END")
	bob.call("bob set", "set k 0 0 3\r\nbob\r\n", "STORED")
	alice.call("alice get", "get k\r\n", "VALUE k 0 5", "alice", "END")
	bob.call("bob get", "get k\r\n", "VALUE k 0 3", "bob", "END")
	bob.call("bob flush_all", "flush_all\r\n", "OK")
	alice.call("alice get after bob's flush", "get k\r\n", "VALUE k 0 5", "alice", "END")
	bob.call("bob stats of alice's bucket", "stats bucket_details alice\r\n", "CLIENT_ERROR no access to bucket alice")
	// The text stats are observe's groups, as binary STAT's: cluster refuses
	// with binary's reason on a single node, an unknown group is ERROR.
	bob.call("stats cluster on a single node", "stats cluster\r\n", "CLIENT_ERROR not in a cluster: kvd was started without --cluster")
	bob.call("unknown stats group", "stats bogus\r\n", "ERROR")
}

// TestTextThrottleHardLimit: a text tenant with hard_limit 100 units/s
// pipelining GETs from one connection gets 100/s ± 5%, every command parked
// and answered, none refused.
func TestTextThrottleHardLimit(t *testing.T) {
	t.Parallel()
	k := startKVD(t, throttleConfig(t, map[string]any{"anonymous_bucket": "slow"}, bucketConfig("slow", 0, 100)))
	admin := login(t, k.Addr, "admin", "admin-pw", "")
	c := dialText(t, k.Addr)
	c.call("set", "set k 0 0 1\r\nv\r\n", "STORED")
	const n = 600
	c.send(strings.Repeat("get k\r\n", n))
	times := make([]time.Time, 0, n)
	for i := 0; i < n; i++ {
		c.expect("parked get", "VALUE k 0 1", "v")
		got, err := c.line(10 * time.Second)
		if err != nil || got != "END" {
			t.Fatalf("get %d of %d: %q %v", i+1, n, got, err)
		}
		times = append(times, time.Now())
	}
	// The first second may use a carried-over allowance: rate from the
	// 101st reply on.
	rate := float64(n-101) / times[n-1].Sub(times[100]).Seconds()
	t.Logf("%d GETs under hard_limit 100/s: %.1f/s from the 101st reply on", n, rate)
	if rate < 95 || rate > 105 {
		t.Errorf("text tenant at hard_limit 100 delivered %.1f/s, want 100 ± 5%%", rate)
	}
	d := admin.bucketStat("slow")
	if d.NumThrottled < 1 || d.NumRejected != 0 {
		t.Errorf("bucket slow: num_throttled %d, num_rejected %d; want >= 1 and 0", d.NumThrottled, d.NumRejected)
	}
}

// TestTextBinarySharedGauge: a text and a binary connection in the same
// bucket are two clients of one throttle: both count, both draw from the
// same hard limit, and the bucket tells their commands apart.
func TestTextBinarySharedGauge(t *testing.T) {
	t.Parallel()
	k := startKVD(t, throttleConfig(t, map[string]any{"anonymous_bucket": "slow"}, bucketConfig("slow", 0, 100)))
	admin := login(t, k.Addr, "admin", "admin-pw", "")
	txt := dialText(t, k.Addr)
	txt.call("set", "set k 0 0 1\r\nv\r\n", "STORED")
	bin := dialRaw(t, k.Addr) // anonymous: selects slow
	bin.call(get("k"))
	if d := admin.bucketStat("slow"); d.Clients != 2 {
		t.Fatalf("bucket slow has %d clients, want 2 (one text, one binary)", d.Clients)
	}
	const each = 150
	start := time.Now()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		for range each {
			txt.send("get k\r\n")
			txt.expect("text get", "VALUE k 0 1", "v", "END")
		}
	}()
	go func() {
		defer wg.Done()
		for range each {
			if res := bin.call(get("k")); res.Status != mc.StatusOK {
				t.Errorf("binary GET: %v", res.Status)
				return
			}
		}
	}()
	wg.Wait()
	elapsed := time.Since(start)
	t.Logf("%d text + %d binary GETs under one hard_limit of 100/s took %v", each, each, elapsed)
	if elapsed < 1500*time.Millisecond {
		t.Errorf("300 units under a shared hard_limit of 100/s took %v: the two protocols did not share the gauge", elapsed)
	}
	raw := admin.statGroup("bucket_details slow")["slow"]
	var d struct {
		Text   int64 `json:"text_commands"`
		Binary int64 `json:"binary_commands"`
	}
	if err := json.Unmarshal([]byte(raw), &d); err != nil {
		t.Fatal(err)
	}
	if d.Text != each+1 || d.Binary != each+1 {
		t.Errorf("bucket_details slow: text_commands %d, binary_commands %d; want %d each", d.Text, d.Binary, each+1)
	}
}

// TestTextAdmissionRefusal: a command that waits past max_throttle_wait_ms
// is answered with one SERVER_ERROR line carrying binary's reason, and the
// connection stays usable. A classic noreply command refused the same way
// gets no line, as memcached sends a noreply command none, errors included:
// the next line is the next command's reply.
func TestTextAdmissionRefusal(t *testing.T) {
	t.Parallel()
	k := startKVD(t, throttleConfig(t, map[string]any{"anonymous_bucket": "drip", "max_throttle_wait_ms": 1000},
		bucketConfig("drip", 0, 1)))
	c := dialText(t, k.Addr)
	v := strings.Repeat("x", 100_000)
	c.call("set 100 KB", "set k 0 0 100000\r\n"+v+"\r\n", "STORED")
	c.send("get k\r\n")
	got, err := c.line(10 * time.Second)
	if err != nil || !strings.HasPrefix(got, "SERVER_ERROR throttled for ") || !strings.Contains(got, "max_throttle_wait_ms=1000") {
		t.Fatalf("get behind 100 s of carry-over: %q %v; want SERVER_ERROR naming max_throttle_wait_ms", got, err)
	}
	c.call("version after the refusal", "version\r\n", "VERSION 1.6.18 kvd-0.1.0")
	c.call("stats after the refusal", "stats nothing\r\n", "ERROR")
	start := time.Now()
	c.send("set q 0 0 1 noreply\r\nv\r\nversion\r\n")
	if got, err := c.line(10 * time.Second); err != nil || got != "VERSION 1.6.18 kvd-0.1.0" {
		t.Fatalf("a noreply set behind the carry-over, then version: %q %v; want the version line alone", got, err)
	}
	if took := time.Since(start); took < time.Second {
		t.Errorf("the version after a parked noreply set came after %v: the set was not held for max_throttle_wait_ms", took)
	}
}

// TestTextDeadlineRefusal: a text or meta command the deadline gate
// refuses gets one SERVER_ERROR line with binary's reason, as the other
// admission refusals do (it used to get a binary 0x86 frame in the text
// stream). Bucket dl's hard limit of one unit per second parks the second
// command of a pipeline past its 10 ms deadline, counted from its arrival.
func TestTextDeadlineRefusal(t *testing.T) {
	t.Parallel()
	k := startKVD(t, throttleConfig(t, map[string]any{"anonymous_bucket": "dl"},
		deadlineBucket("dl", map[string]any{"deadline_ms": 10, "reserved": 0, "hard_limit": 1})))
	c := dialText(t, k.Addr)
	refused := 0
	for _, cmd := range []string{"set k 0 0 1\r\nv\r\n", "ms k 1 T0\r\nv\r\n", "incr n 1\r\n", "set q 0 0 1 noreply\r\nv\r\n"} {
		c.send("set first 0 0 1\r\nv\r\n" + cmd + "mn\r\n")
		for n := 0; ; n++ {
			got, err := c.line(10 * time.Second)
			switch {
			case err != nil || n > 2 || strings.IndexByte(got, 0x81) >= 0:
				t.Fatalf("after %q: %q (%v), want STORED/HD/NOT_FOUND or SERVER_ERROR lines, then MN", cmd, got, err)
			case got == "MN":
			case strings.HasPrefix(got, "SERVER_ERROR deadline 10 ms cannot be met: ") && strings.Contains(got, " retry_after_us="):
				refused++
				continue
			case got == "STORED" || got == "HD" || got == "NOT_FOUND":
				continue
			default:
				t.Fatalf("after %q: %q", cmd, got)
			}
			break
		}
	}
	if refused == 0 {
		t.Fatal("no command was refused for its deadline: the throttle never held one 10 ms")
	}
	c.call("version after the refusals", "version\r\n", "VERSION 1.6.18 kvd-0.1.0")
}

// TestTextProtocolOff: text_protocol false closes a text connection at its
// first byte, as kvd did before text support; binary is unaffected.
func TestTextProtocolOff(t *testing.T) {
	t.Parallel()
	k := startKVD(t, configWith(t, testConfig, map[string]any{"text_protocol": false}))
	c := dialText(t, k.Addr)
	c.send("version\r\n")
	if !c.closedByPeer(3 * time.Second) {
		t.Error("text_protocol false: a text connection stayed open")
	}
	waitFor(t, 5*time.Second, "a log line naming text_protocol as the reason", func() bool {
		return strings.Contains(k.Log(), "text_protocol is false") // the log comes through a pipe
	})
	b := dialRaw(t, k.Addr)
	if res := b.call(set("k", "v")); res.Status != mc.StatusOK {
		t.Errorf("binary SET with text off: %v", res.Status)
	}
	on := startKVD(t, testConfig)
	before := dialText(t, on.Addr)
	before.call("text on by default", "version\r\n", "VERSION 1.6.18 kvd-0.1.0")
	// A reload turns it off for the connections that open afterwards; the
	// text connection already open goes on.
	if err := os.WriteFile(on.Config, []byte(configWith(t, testConfig, map[string]any{"text_protocol": false})), 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "a new text connection closed after text_protocol false is reloaded", func() bool {
		c := dialText(t, on.Addr)
		c.send("version\r\n")
		return c.closedByPeer(time.Second)
	})
	before.call("the text connection open before the reload", "version\r\n", "VERSION 1.6.18 kvd-0.1.0")
}

// textClient is a raw text-protocol connection for black-box tests.
type textClient struct {
	t  testing.TB
	nc net.Conn
	r  *bufio.Reader
}

func dialText(t testing.TB, addr string) *textClient {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = nc.Close() })
	return &textClient{t: t, nc: nc, r: bufio.NewReaderSize(nc, 1<<20)}
}

func (c *textClient) send(s string) {
	c.t.Helper()
	_ = c.nc.SetWriteDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c.nc, s); err != nil {
		c.t.Fatalf("write: %v", err)
	}
}

// line reads one reply line without its "\r\n".
func (c *textClient) line(timeout time.Duration) (string, error) {
	_ = c.nc.SetReadDeadline(time.Now().Add(timeout))
	s, err := c.r.ReadString('\n')
	return strings.TrimSuffix(s, "\r\n"), err
}

// expect reads one line per want and fails on the first that differs.
func (c *textClient) expect(what string, want ...string) {
	c.t.Helper()
	for _, w := range want {
		got, err := c.line(10 * time.Second)
		if err != nil || got != w {
			c.t.Fatalf("%s: got %q (%v), want %q", what, got, err, w)
		}
	}
}

// call sends s and expects the lines want.
func (c *textClient) call(what, s string, want ...string) {
	c.t.Helper()
	c.send(s)
	c.expect(what, want...)
}

// closedByPeer reports whether the server closed the connection (EOF or
// reset) within timeout, draining whatever came first.
func (c *textClient) closedByPeer(timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		_, err := c.line(time.Until(deadline))
		if err != nil {
			return !isTimeout(err)
		}
	}
	return false
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

// textLogin authenticates as memcached -Y does (a set whose data is
// "user password") and expects STORED.
func textLogin(t testing.TB, addr, user, password string) *textClient {
	t.Helper()
	c := dialText(t, addr)
	cred := user + " " + password
	c.call("login "+user, "set auth 0 0 "+itoa(len(cred))+"\r\n"+cred+"\r\n", "STORED")
	return c
}

func itoa(n int) string { return strconv.Itoa(n) }

// TestTextCommandsMetric: kvd_bucket_text_commands_total counts a bucket's
// text data commands and not its binary ones, which
// kvd_bucket_commands_total counts too.
func TestTextCommandsMetric(t *testing.T) {
	t.Parallel()
	metricsAddr := freeAddr(t)
	k := startKVD(t, testConfig, "--metrics-listen", metricsAddr)
	c := dialText(t, k.Addr)
	c.call("set", "set k 0 0 1\r\nv\r\n", "STORED")
	c.call("get", "get k k nokey\r\n", "VALUE k 0 1", "v", "VALUE k 0 1", "v", "END")
	b := dialRaw(t, k.Addr)
	b.call(get("k"))
	b.call(get("k"))
	m := scrape(t, metricsAddr)
	text, all := m[`kvd_bucket_text_commands_total{bucket="default"}`], m[`kvd_bucket_commands_total{bucket="default"}`]
	if text != 4 || all != 6 {
		t.Errorf("bucket default: kvd_bucket_text_commands_total %v, kvd_bucket_commands_total %v; want 4 and 6", text, all)
	}
}

// TestTextLoginPaced: memcached -Y logins go through the login gate like
// SASL: after wrong passwords from one address, its next attempt waits
// (50 ms doubling per failure), so a text client cannot try passwords
// faster than a binary one.
func TestTextLoginPaced(t *testing.T) {
	t.Parallel()
	k := startKVD(t, textAuthConfig(true))
	attempt := func(cred string) (string, time.Time) {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.4")}, Timeout: 5 * time.Second}
		nc, err := d.Dial("tcp", k.Addr)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		c := &textClient{t: t, nc: nc, r: bufio.NewReaderSize(nc, 1<<16)}
		c.send("set x 0 0 " + itoa(len(cred)) + "\r\n" + cred + "\r\n")
		got, err := c.line(30 * time.Second)
		if err != nil {
			t.Fatalf("login %q: %v", cred, err)
		}
		return got, time.Now()
	}
	var lastFailure time.Time
	for range 5 {
		got, at := attempt("alice wrong")
		if got != "CLIENT_ERROR authentication failure" {
			t.Fatalf("wrong password answered %q", got)
		}
		lastFailure = at
	}
	// After 5 failures the address waits 50 ms << 4 = 800 ms from the last
	// one before its next attempt is verified, right password or not.
	got, at := attempt("alice alice-pw")
	took := at.Sub(lastFailure)
	if got != "STORED" {
		t.Fatalf("right password after the failures: %q", got)
	}
	if took < 700*time.Millisecond {
		t.Errorf("the attempt after 5 wrong passwords was answered %v after the last: text logins are not paced", took)
	}
	t.Logf("attempt after 5 wrong passwords answered %v after the last", took)
}

// TestTextMultiGetUnderContention: a multi-key get whose keys queue for an
// ingress ticket (one read ticket, 16 connections at once) answers every
// hit in order and then END, on every connection. A key queued for its
// ticket used to be overtaken by the next key, and two batches then
// overwrote each other, losing VALUE blocks or the END.
func TestTextMultiGetUnderContention(t *testing.T) {
	t.Parallel()
	k := startKVD(t, configWith(t, testConfig, map[string]any{"node_capacity": 1_000_000_000,
		"ingress": map[string]any{"probe": map[string]any{"min": 1, "max": 1}}}))
	dialText(t, k.Addr).call("set K1", "set mgK1 0 0 2\r\nv1\r\n", "STORED")
	dialText(t, k.Addr).call("set K2", "set mgK2 0 0 2\r\nv2\r\n", "STORED")
	const want = "VALUE mgK1 0 2\r\nv1\r\nVALUE mgK2 0 2\r\nv2\r\nEND\r\nMN\r\n"
	var wg sync.WaitGroup
	var mu sync.Mutex
	var wrong []string
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			nc, err := net.DialTimeout("tcp", k.Addr, 5*time.Second)
			if err != nil {
				t.Error(err)
				return
			}
			defer nc.Close()
			r := bufio.NewReader(nc)
			for i := 0; i < 100; i++ {
				_ = nc.SetDeadline(time.Now().Add(10 * time.Second))
				if _, err := io.WriteString(nc, "get mgMISS1 mgK1 mgK2 mgMISS2\r\nmn\r\n"); err != nil {
					t.Error(err)
					return
				}
				var got strings.Builder
				for !strings.HasSuffix(got.String(), "MN\r\n") {
					line, err := r.ReadString('\n')
					got.WriteString(line)
					if err != nil {
						mu.Lock()
						wrong = append(wrong, fmt.Sprintf("%q then %v", got.String(), err))
						mu.Unlock()
						return
					}
				}
				if got.String() != want {
					mu.Lock()
					wrong = append(wrong, strconv.Quote(got.String()))
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	if len(wrong) > 0 {
		t.Errorf("%d of 1,600 multi-gets answered wrong (want %q), e.g. %s", len(wrong), want, wrong[0])
	}
}
