package tests

import (
	"bufio"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	mc "kvd/protocol/binary"
)

// bandReason is what kvd answers an ordinary user's login in the system band.
const bandReason = "too many open connections (max_connections): this one is in the system band, where only a privileged user may log in"

// TestSystemBand: a client holding every one of max_connections does not
// lock the operators out. Connections past max_connections land in the
// system band (system_connections), where only a privileged user's login
// is served:
//
//   - HELLO and SASL_LIST_MECHS are answered; any other command before a
//     login gets memcached's answer past max_connections, ERROR Too many
//     open connections, and the connection is closed, even with an
//     anonymous bucket (a memcached client sees what memcached would show it);
//   - an ordinary user's login is refused (0x24, with the reason) and the
//     connection closed;
//   - the admin's login works, and the admin's commands are served;
//   - with the band full, a new connection takes the place of the one that
//     waited longest without a login, which gets memcached's ERROR line;
//   - a band connection that never logs in is closed after the grace (5 s);
//   - with the band full of logged-in connections, a new one is refused;
//   - a text connection in the band gets the ERROR line too, and a text
//     login as an ordinary user is refused and closed.
func TestSystemBand(t *testing.T) {
	t.Parallel()
	metrics := freeAddr(t)
	k := startKVD(t, configWith(t, testConfig, map[string]any{"max_connections": 3, "system_connections": 3}), "--metrics-listen", metrics)
	var ordinary []*rawConn
	for range 3 {
		c := dialServed(t, k.Addr, 5*time.Second)
		c.expectStatus("SET on an ordinary connection", set("held", "x"), mc.StatusOK)
		ordinary = append(ordinary, c)
	}

	// A band connection, not logged in: the login's commands only.
	idle := dialRaw(t, k.Addr)
	idle.expectStatus("HELLO in the band", hello(), mc.StatusOK)
	if res := idle.expectStatus("SASL_LIST_MECHS in the band", &mc.Request{Magic: mc.MagicRequest, Opcode: mc.OpSASLListMechs}, mc.StatusOK); string(res.Value) != "PLAIN" {
		t.Errorf("SASL_LIST_MECHS in the band: %q", res.Value)
	}
	for _, r := range []*mc.Request{get("held"), noop(), {Magic: mc.MagicRequest, Opcode: mc.OpSelectBucket, Key: []byte("default")}} {
		c := dialRaw(t, k.Addr)
		c.send(r)
		if data, closed := c.drainUntilClosed(5 * time.Second); !closed || string(data) != "ERROR Too many open connections\r\n" {
			t.Errorf("%v in the band before a login: closed %v after %q; want memcached's ERROR line and closed", r.Opcode, closed, data)
		}
	}

	// An ordinary user's login in the band is refused, and closes it.
	alice := dialRaw(t, k.Addr)
	res := alice.call(saslReq("alice", "alice-pw"))
	if res.Status != mc.StatusAccessDenied || !strings.Contains(string(res.Value), bandReason) {
		t.Errorf("alice's login in the band: status 0x%02x %q, want 0x24 with the reason", uint16(res.Status), res.Value)
	}
	if !alice.closed(5 * time.Second) {
		t.Error("alice's band connection stayed open after the refused login")
	}

	// The admin gets in and is served.
	admin := dialRaw(t, k.Addr)
	admin.auth("admin", "admin-pw")
	if st := admin.selectBucket("default"); st != mc.StatusOK {
		t.Fatalf("admin's SELECT_BUCKET in the band: 0x%02x", uint16(st))
	}
	if res := admin.call(get("held")); res.Status != mc.StatusOK || string(res.Value) != "x" {
		t.Fatalf("admin's GET in the band: 0x%02x %q", uint16(res.Status), res.Value)
	}
	waitFor(t, 5*time.Second, "the refused login's slot freed", func() bool {
		s := admin.statGroup("")
		return s["curr_connections"] == "5" && s["system_connections"] == "2"
	})

	// The band is full only with the third: a fourth recycles the idle one,
	// the oldest without a login.
	opened := time.Now()
	waiting := dialRaw(t, k.Addr)
	waiting.expectStatus("HELLO on the second idle band connection", hello(), mc.StatusOK)
	fourth := dialRaw(t, k.Addr)
	fourth.expectStatus("HELLO on the connection that took a place", hello(), mc.StatusOK)
	if data, closed := idle.drainUntilClosed(5 * time.Second); !closed || string(data) != "ERROR Too many open connections\r\n" {
		t.Errorf("the oldest idle band connection: closed %v after %q; want memcached's ERROR line and closed", closed, data)
	}

	// Idle band connections are closed after the grace.
	data, closed := waiting.drainUntilClosed(20 * time.Second)
	if waited := time.Since(opened); !closed || string(data) != "ERROR Too many open connections\r\n" || waited < 5*time.Second {
		t.Errorf("an idle band connection: closed %v after %q, %v after it opened; want the ERROR line after the 5-s grace", closed, data, waited)
	}
	if data, closed := fourth.drainUntilClosed(5 * time.Second); !closed || string(data) != "ERROR Too many open connections\r\n" {
		t.Errorf("the other idle band connection: closed %v after %q; want the ERROR line after the grace", closed, data)
	}

	// A band of logged-in connections is full: the next is refused.
	admins := []*rawConn{admin}
	for range 2 {
		a := dialRaw(t, k.Addr)
		a.auth("admin", "admin-pw")
		admins = append(admins, a)
	}
	refused := dialRaw(t, k.Addr)
	if data, closed := refused.drainUntilClosed(5 * time.Second); !closed || string(data) != "ERROR Too many open connections\r\n" {
		t.Errorf("past a band of logged-in connections: closed %v after %q; want refused", closed, data)
	}
	if s := admin.statGroup(""); s["rejected_connections"] != "1" || s["system_connections"] != "3" {
		t.Errorf("STAT rejected_connections %s, system_connections %s; want 1 and 3", s["rejected_connections"], s["system_connections"])
	}
	if s := admin.statGroup("settings"); s["system_connections"] != "3" {
		t.Errorf("STAT settings system_connections %q, want 3", s["system_connections"])
	}
	for name, want := range map[string]float64{"kvd_system_connections": 3, "kvd_connections_rejected_total": 1} {
		if got, err := scrapeMetric(metrics, name); err != nil || got != want {
			t.Errorf("%s = %v (%v), want %v", name, got, err, want)
		}
	}

	// Text: memcached's ERROR line, and a text login as alice closes it.
	_ = admins[2].nc.Close()
	waitFor(t, 5*time.Second, "a band place for a text connection", func() bool { return admin.statGroup("")["system_connections"] == "2" })
	txt := dialText(t, k.Addr)
	txt.call("get in the band", "get held\r\n", "ERROR Too many open connections")
	if !txt.closedByPeer(5 * time.Second) {
		t.Error("the text band connection stayed open after its get")
	}
	waitFor(t, 5*time.Second, "the text connection's place freed", func() bool { return admin.statGroup("")["system_connections"] == "2" })
	txt = dialText(t, k.Addr)
	txt.call("alice's text login in the band", "set auth 0 0 14\r\nalice alice-pw\r\n", "CLIENT_ERROR authentication failure")
	if !txt.closedByPeer(5 * time.Second) {
		t.Error("the text band connection stayed open after alice's login")
	}

	// The ordinary connections served throughout.
	for i, c := range ordinary {
		if res := c.call(get("held")); res.Status != mc.StatusOK || string(res.Value) != "x" {
			t.Errorf("ordinary connection %d: GET 0x%02x %q", i, uint16(res.Status), res.Value)
		}
	}
	for _, want := range []string{"system band full: closed the connection that waited longest without a login",
		"closed system-band connections", "connection refused", `"login refused" user=alice`} {
		if !strings.Contains(k.Log(), want) {
			t.Errorf("no %q in kvd's log", want)
		}
	}
}

// hello is a HELLO without features, which a band connection may send.
func hello() *mc.Request {
	return &mc.Request{Magic: mc.MagicRequest, Opcode: mc.OpHello, Key: []byte("kvd-test")}
}

// TestSystemBandFlood: a client that holds every ordinary slot and keeps
// opening more connections as fast as it can does not keep the admin out:
// each of its connections in the band gives its place to the next one, and
// the admin's, once its login is sent, is no longer anyone's to take. With
// the band off (system_connections 0) the same flood locks the admin out.
func TestSystemBandFlood(t *testing.T) {
	t.Parallel()
	for _, band := range []int{50, 0} {
		k := startKVD(t, configWith(t, testConfig, map[string]any{"max_connections": 20, "system_connections": band}))
		for range 20 {
			dialServed(t, k.Addr, 5*time.Second)
		}
		stop := make(chan struct{})
		var flood sync.WaitGroup
		var dials atomic.Int64
		for range 4 {
			flood.Go(func() {
				for n := 0; n < 2000; n++ {
					select {
					case <-stop:
						return
					default:
					}
					nc, err := net.DialTimeout("tcp", k.Addr, time.Second)
					if err != nil {
						continue
					}
					dials.Add(1)
					flood.Go(func() { // hold it until kvd closes it, at most 2 s
						_ = nc.SetReadDeadline(time.Now().Add(2 * time.Second))
						_, _ = io.Copy(io.Discard, nc)
						_ = nc.Close()
					})
				}
			})
		}
		time.Sleep(200 * time.Millisecond) // the flood is on
		var got string
		attempts := 0
		start := time.Now()
		for ; attempts < 3 && got == ""; attempts++ {
			nc, err := net.DialTimeout("tcp", k.Addr, time.Second)
			if err != nil {
				continue
			}
			c := &rawConn{t: t, nc: nc, r: bufio.NewReader(nc)}
			c.send(saslReq("admin", "admin-pw"))
			_ = nc.SetReadDeadline(time.Now().Add(time.Second))
			if first, err := c.r.Peek(1); err != nil || first[0] != byte(mc.MagicResponse) {
				_ = nc.Close() // refused: memcached's ERROR line, or nothing
				continue
			}
			if res, err := c.tryRecv(time.Second); err == nil && res.Status == mc.StatusOK {
				got = c.statGroup("")["curr_connections"]
			}
			_ = nc.Close()
		}
		tried := time.Since(start)
		close(stop)
		flood.Wait()
		t.Logf("system_connections %d: %d flood connections; admin in after %d attempts, %v (curr_connections %s)",
			band, dials.Load(), attempts, tried.Round(time.Millisecond), got)
		switch {
		case band > 0 && got == "":
			t.Errorf("system_connections %d: the admin could not log in through the flood in %d attempts", band, attempts)
		case band == 0 && got != "":
			t.Errorf("system_connections 0: the admin got in through the flood; the test does not flood")
		}
	}
}

// TestSystemBandReload: a reload that takes a user's last privilege away
// closes that user's connections in the system band (the band is the
// privileged users'), and leaves the user's ordinary connection open.
func TestSystemBandReload(t *testing.T) {
	t.Parallel()
	cfg := func(privileges string) string {
		return `{"anonymous_bucket": "default", "max_connections": 1, "system_connections": 2,
  "buckets": [{"name": "default"}],
  "users": [{"name": "ops", "password": "ops-pw", "buckets": ["*"], "privileges": [` + privileges + `]}]}`
	}
	k := startKVD(t, cfg(`"Stats"`))
	ordinary := dialServed(t, k.Addr, 5*time.Second)
	ordinary.auth("ops", "ops-pw")
	if st := ordinary.selectBucket("default"); st != mc.StatusOK {
		t.Fatalf("SELECT_BUCKET default: 0x%02x", uint16(st))
	}
	band := dialRaw(t, k.Addr)
	band.auth("ops", "ops-pw")
	if s := band.statGroup(""); s["system_connections"] != "1" {
		t.Fatalf("STAT system_connections %q after the band login, want 1", s["system_connections"])
	}
	if err := os.WriteFile(k.Config, []byte(cfg("")), 0o644); err != nil {
		t.Fatal(err)
	}
	_ = k.cmd.Process.Signal(syscall.SIGHUP)
	waitLog(t, k, "config reloaded", 1, 10*time.Second)
	band.send(noop()) // a connection applies a reload before its next command
	if data, closed := band.drainUntilClosed(5 * time.Second); !closed {
		t.Errorf("the band connection stayed open after its user lost the last privilege (read %q)", data)
	}
	ordinary.expectStatus("the ordinary connection after the reload", set("k", "v"), mc.StatusOK)
	if !strings.Contains(k.Log(), `"privileges changed" by=config`) {
		t.Errorf("no \"privileges changed\" line in kvd's log")
	}
}

// TestSystemBandBurst: 400 clients at once against max_connections 60 and
// a band of 20: 60 are served and the other 340 get memcached's answer,
// ERROR Too many open connections, whether at connect, at their first
// command in the band, or when their band place went to a newer connection.
// (10 runs of 10 beside the fuzzer and other tests: 0 without an answer.)
func TestSystemBandBurst(t *testing.T) {
	t.Parallel()
	k := startKVD(t, configWith(t, testConfig, map[string]any{"max_connections": 60, "system_connections": 20}))
	b := connectionBurst(k.Addr, 400)
	served, refused, failed := b.served, b.refused, b.failed
	for _, nc := range served {
		_ = nc.Close()
	}
	t.Logf("400 clients: %d served, %d refused with memcached's ERROR, %d without either %v", len(served), refused, failed, b.why)
	if len(served) != 60 || refused < 330 {
		t.Errorf("%d served (want 60), %d refused (want the other 340, at least 330)", len(served), refused)
	}
}
