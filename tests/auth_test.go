package tests

import (
	"bufio"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	mc "kvd/protocol/binary"
	"kvd/tenant"
)

// statReq is a STAT request for group ("" for the general group).
func statReq(group string) *mc.Request {
	return &mc.Request{Magic: mc.MagicRequest, Opcode: mc.OpStat, Key: []byte(group)}
}

// TestUnauthenticatedStatRefused checks that on a node without an
// anonymous bucket every STAT group is refused with 0x24 before SASL, that
// VERSION and NOOP still answer, and that the same connection reads STAT
// once authenticated; with an anonymous bucket STAT answers before SASL.
func TestUnauthenticatedStatRefused(t *testing.T) {
	t.Parallel()
	k := startKVD(t, throttleConfig(t, nil, bucketConfig("app", nil, nil)))
	c := dialRaw(t, k.Addr)
	for _, g := range []string{"", "throttle", "ingress", "bucket_details", "bucket_details app", "nonsense"} {
		c.expectStatus("unauthenticated STAT "+g, statReq(g), mc.StatusAccessDenied)
	}
	c.expectStatus("unauthenticated VERSION", &mc.Request{Magic: mc.MagicRequest, Opcode: mc.OpVersion}, mc.StatusOK)
	c.expectStatus("unauthenticated NOOP", noop(), mc.StatusOK)
	c.auth("alice", "alice-pw")
	if got := c.statGroup("throttle"); len(got) == 0 {
		t.Errorf("authenticated STAT throttle: no stats")
	}
	anon := startKVD(t, testConfig)
	if got := dialRaw(t, anon.Addr).statGroup(""); got["pid"] == "" {
		t.Errorf("STAT before SASL with an anonymous bucket: no pid among %d stats", len(got))
	}
}

// TestRefusedLoginEndsIdentity: a connection whose SASL_AUTH is refused is
// unauthenticated again (Couchbase restarts authentication at each
// SASL_AUTH): an admin who retries with a wrong password keeps no admin
// rights. PLAIN's authorization identity must be empty or the user's own.
func TestRefusedLoginEndsIdentity(t *testing.T) {
	t.Parallel()
	k := startKVD(t, throttleConfig(t, nil, bucketConfig("app", nil, nil)))
	c := dialRaw(t, k.Addr)
	setNode := &mc.Request{Magic: mc.MagicRequest, Opcode: mc.OpSetNodeThrottle, Value: []byte(`{"capacity": 30000}`)}
	c.auth("admin", "admin-pw")
	c.expectStatus("admin's 0x2c", setNode, mc.StatusOK)
	c.expectStatus("admin again with a wrong password", saslReq("admin", "wrong"), mc.StatusAuthError)
	c.expectStatus("0x2c after the refused login", setNode, mc.StatusAccessDenied)
	c.expectStatus("STAT after the refused login", statReq(""), mc.StatusAccessDenied)
	c.auth("admin", "admin-pw")
	c.expectStatus("unsupported mechanism", &mc.Request{Magic: mc.MagicRequest, Opcode: mc.OpSASLAuth,
		Key: []byte("SCRAM-SHA1"), Value: []byte("x")}, mc.StatusAuthError)
	c.expectStatus("0x2c after a refused mechanism", setNode, mc.StatusAccessDenied)
	as := func(authz, user, pw string) *mc.Request {
		return &mc.Request{Magic: mc.MagicRequest, Opcode: mc.OpSASLAuth, Key: []byte("PLAIN"),
			Value: []byte(authz + "\x00" + user + "\x00" + pw)}
	}
	if r := c.expectStatus("alice asking to act as admin", as("admin", "alice", "alice-pw"), mc.StatusAuthError); !strings.Contains(string(r.Value), "authorization identity") {
		t.Errorf("authzid refusal says %q", r.Value)
	}
	c.expectStatus("admin naming itself", as("admin", "admin", "admin-pw"), mc.StatusOK)
	c.expectStatus("0x2c after logging in again", setNode, mc.StatusOK)
}

// dialFrom dials addr from the loopback address local (127.0.0.0/8 is all
// loopback), so that the server sees a remote address of its own.
func dialFrom(t testing.TB, local, addr string) *rawConn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}, Timeout: 5 * time.Second}
	nc, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = nc.Close() })
	return &rawConn{t: t, nc: nc, r: bufio.NewReaderSize(nc, 64<<10)}
}

// saslReq is a SASL_AUTH PLAIN request.
func saslReq(user, password string) *mc.Request {
	return &mc.Request{Magic: mc.MagicRequest, Opcode: mc.OpSASLAuth, Key: []byte("PLAIN"),
		Value: []byte("\x00" + user + "\x00" + password)}
}

// vaultConfig is throttleConfig's with bucket app and a user vault
// (password vault-pw) whose password is an argon2id hash.
func vaultConfig(t *testing.T) string {
	hash, err := tenant.HashPassword("vault-pw")
	if err != nil {
		t.Fatal(err)
	}
	cfg := throttleConfig(t, nil, bucketConfig("app", nil, nil))
	return strings.Replace(cfg, `"users":[`, `"users":[{"name":"vault","password_hash":"`+hash+`","buckets":["app"]},`, 1)
}

// TestSASLFloodKeepsDataLatency floods kvd with wrong passwords for an
// argon2id user from 64 connections of one address (127.0.0.1) while an
// authenticated tenant on another address (127.0.0.2) sends GETs one at a
// time, and a genuine argon2id login comes from a third (127.0.0.3). The
// flood must be paced (few attempts answered), the tenant's GET p99 must
// stay under 20 ms (the target on an idle box is 2 ms; the figure is
// logged, with the p99 before the flood), and the genuine login must
// succeed within 10 s (a hash takes 0.4–4 s on the shared 2-core box).
func TestSASLFloodKeepsDataLatency(t *testing.T) {
	k := startKVD(t, vaultConfig(t))
	tenantConn := dialFrom(t, "127.0.0.2", k.Addr)
	tenantConn.auth("alice", "alice-pw")
	tenantConn.selectBucket("app")
	tenantConn.expectStatus("SET", set("k", "v"), mc.StatusOK)

	const flood, window = 64, 6 * time.Second
	base := getLatencies(tenantConn, 2*time.Second)
	var answered atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var floods []*rawConn
	for range flood {
		c := dialFrom(t, "127.0.0.1", k.Addr)
		floods = append(floods, c)
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				res, err := c.tryRecvAfter(saslReq("vault", "wrong"), 30*time.Second)
				if err != nil {
					select {
					case <-stop:
					default:
						t.Errorf("flood connection: %v", err)
					}
					return
				}
				if res.Status != mc.StatusAuthError {
					t.Errorf("wrong password: status 0x%02x", uint16(res.Status))
				}
				answered.Add(1)
			}
		})
	}
	time.Sleep(500 * time.Millisecond) // let the flood start
	var genuine time.Duration
	wg.Go(func() {
		c := dialFrom(t, "127.0.0.3", k.Addr)
		start := time.Now()
		res, err := c.tryRecvAfter(saslReq("vault", "vault-pw"), 10*time.Second)
		genuine = time.Since(start)
		if err != nil || res.Status != mc.StatusOK {
			t.Errorf("genuine login during the flood: %v, %+v", err, res)
		}
	})
	lat := getLatencies(tenantConn, window)
	close(stop)
	for _, c := range floods {
		_ = c.nc.Close() // unblocks the attempts still paced
	}
	n := answered.Load()
	p50, p99 := lat[len(lat)/2], lat[len(lat)*99/100]
	t.Logf("tenant GET before the flood: p50 %v p99 %v over %d GETs", base[len(base)/2], base[len(base)*99/100], len(base))
	t.Logf("flood of %d connections: %d wrong attempts answered in %v; tenant GET p50 %v p99 %v over %d GETs",
		flood, n, window, p50, p99, len(lat))
	if p99 > 20*time.Millisecond {
		t.Errorf("tenant GET p99 %v during the flood, want < 20 ms", p99)
	}
	// Paced, one address's failures wait 50 ms, doubling, before the next
	// attempt is verified: 50·(2⁷−1) ms = 6.35 s for the first 8, so at
	// most 9 fit the 6.5 s of flood whatever a hash costs. Unpaced, one
	// verification worker answers 6.5 s ÷ one hash: 16 at 0.4 s a hash, so
	// this detects a lost pacing only while hashes take under 0.6 s (the
	// figure is logged).
	if n > 10 {
		t.Errorf("%d wrong attempts answered in %v: the flood is not paced (at most 9 fit its schedule)", n, window)
	}
	wg.Wait()
	t.Logf("genuine argon2id login during the flood: %v", genuine)
	if genuine > 10*time.Second {
		t.Errorf("genuine login took %v during the flood, want < 10 s (a hash or two)", genuine)
	}
}

// TestSASLLeaversLetGo: clients that send a wrong password and leave before
// their paced attempt's turn free their connections at once (kvd reads a
// connection whose login waits, so it sees the FIN), and their attempts take
// no turn: a genuine login from the same address is answered within one
// pacing delay (5 s at most), not after every leaver's turn. Before, 40 such
// leavers held their connections in CLOSE-WAIT for minutes, one released every
// 5 s, with the genuine login queued behind them (a soak audit's finding).
func TestSASLLeaversLetGo(t *testing.T) {
	k := startKVD(t, vaultConfig(t))
	admin := dialFrom(t, "127.0.0.6", k.Addr)
	admin.auth("admin", "admin-pw")
	conns := func() int64 {
		admin.send(statReq(""))
		v := int64(-1)
		for res := admin.recv(); len(res.Key) > 0; res = admin.recv() {
			if string(res.Key) == "curr_connections" {
				v, _ = strconv.ParseInt(string(res.Value), 10, 64)
			}
		}
		return v
	}
	base := conns()
	const leavers = 40
	for range leavers {
		c := dialFrom(t, "127.0.0.5", k.Addr)
		c.send(saslReq("alice", "wrong"))
		time.Sleep(20 * time.Millisecond)
		_ = c.nc.Close() // without reading: most never got their turn
	}
	start := time.Now()
	waitFor(t, 5*time.Second, "the leavers' connections closed", func() bool { return conns() <= base })
	t.Logf("%d leavers' connections gone %v after the last left (curr_connections %d)", leavers, time.Since(start), conns())
	c := dialFrom(t, "127.0.0.5", k.Addr)
	start = time.Now()
	res, err := c.tryRecvAfter(saslReq("alice", "alice-pw"), 15*time.Second)
	if err != nil || res.Status != mc.StatusOK {
		t.Fatalf("genuine login from the leavers' address: %v, %+v", err, res)
	}
	t.Logf("genuine login from the leavers' address answered in %v", time.Since(start))
	if d := time.Since(start); d > 6*time.Second {
		t.Errorf("genuine login took %v: it waited behind the leavers' turns (want one pacing delay, at most 5 s)", d)
	}
	_ = c.nc.Close()
	// Leavers from as many addresses, against an argon2id user: none waits
	// behind its address, but all wait for the verification pool (a quarter
	// of the cores). Those are read too, and dropped unverified.
	start = time.Now()
	for i := range leavers {
		c := dialFrom(t, fmt.Sprintf("127.0.1.%d", i+1), k.Addr)
		c.send(saslReq("vault", "wrong"))
		time.Sleep(20 * time.Millisecond)
		_ = c.nc.Close()
	}
	waitFor(t, 10*time.Second, "the pool-waiting leavers' connections closed", func() bool { return conns() <= base })
	n := strings.Count(k.Log(), `"login refused" user=vault`)
	t.Logf("%d leavers from %d addresses: connections gone %v after the first arrived, %d verified", leavers, leavers, time.Since(start), n)
	if n > leavers/2 { // those that found the pool free are verified (the client is not read meanwhile)
		t.Errorf("%d of %d leavers' argon2id attempts verified: those waiting for the pool should be dropped", n, leavers)
	}
}

// getLatencies sends GET k one at a time for d and returns the latencies,
// sorted.
func getLatencies(c *rawConn, d time.Duration) []time.Duration {
	var lat []time.Duration
	for end := time.Now().Add(d); time.Now().Before(end); {
		start := time.Now()
		c.expectStatus("GET", get("k"), mc.StatusOK)
		lat = append(lat, time.Since(start))
	}
	slices.Sort(lat)
	return lat
}
