package tests

import (
	"encoding/binary"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	mc "kvd/protocol/binary"
)

// memcachedCounters are the command figures of memcached's general STAT
// group that kvd reports too, for the selected bucket.
var memcachedCounters = []string{"cmd_get", "cmd_set", "cmd_flush", "cmd_touch", "get_hits", "get_misses",
	"delete_misses", "delete_hits", "incr_misses", "incr_hits", "decr_misses", "decr_hits",
	"cas_misses", "cas_hits", "cas_badval", "touch_hits", "touch_misses"}

// TestStatsCountersAsMemcached sends the same text and binary commands to
// Debian's memcached and to kvd (its anonymous bucket) and compares the
// hit, miss and CAS figures both report under memcached's names: text
// cas, a binary SET with a CAS, INCR creating its item from the initial
// value (neither a hit nor a miss), DELETE with a CAS that differs (counted
// nowhere; meta md's counts a miss), flush_all, touch and gat, and meta
// commands.
func TestStatsCountersAsMemcached(t *testing.T) {
	p := newDiffPair(t)
	mAddr, kAddr := p.mcd.nc.RemoteAddr().String(), p.kvd.nc.RemoteAddr().String()
	text := func(s string) {
		for _, addr := range []string{mAddr, kAddr} {
			c := dialText(t, addr)
			c.send(s + "quit\r\n")
			c.closedByPeer(5 * time.Second)
		}
	}
	text("set a 0 0 1\r\n1\r\nget a\r\nget nope\r\ncas a 0 0 1 999\r\n2\r\ncas nope 0 0 1 1\r\n2\r\n" +
		"incr a 5\r\nincr nope 1\r\ndecr a 1\r\ndecr nope 1\r\ntouch a 100\r\ntouch nope 100\r\n" +
		"gat 100 a nope\r\ndelete a\r\ndelete a\r\nappend nope 0 0 1\r\nx\r\n" +
		"ms m 1\r\n5\r\nma m\r\nma m MD\r\nma viv N0 J3\r\nma nope\r\nmg m v\r\nmg nope v\r\nmg m T30\r\n" +
		"me m\r\nme nope\r\nme m v\r\n" + // in no get figure
		"md m C1\r\nmd m\r\nmd m\r\nmn\r\n")
	withCAS := func(r *mc.Request, cas uint64) *mc.Request { r.CAS = cas; return r }
	for _, c := range []*rawConn{p.mcd, p.kvd} { // each server's own CAS
		cas := c.expectStatus("set b", setReq("b", "10"), mc.StatusOK).CAS
		c.expectStatus("set b with its CAS", withCAS(setReq("b", "11"), cas), mc.StatusOK)
		c.expectStatus("set b with the old CAS", withCAS(setReq("b", "12"), cas), mc.StatusKeyExists)
	}
	p.same("set missing with a CAS", withCAS(setReq("nob", "1"), 5))
	p.same("incr creating", reqWith(mc.OpIncrement, 3, mc.AppendArithExtras(nil, 1, 40, 0), "ctr", ""))
	p.same("incr", reqWith(mc.OpIncrement, 3, mc.AppendArithExtras(nil, 1, 40, 0), "ctr", ""))
	p.same("decr missing, no create", reqWith(mc.OpDecrement, 3, mc.AppendArithExtras(nil, 1, 0, 0xffffffff), "noc", ""))
	p.same("delete with another CAS", withCAS(reqWith(mc.OpDelete, 4, nil, "ctr", ""), 1))
	p.same("delete", reqWith(mc.OpDelete, 4, nil, "ctr", ""))
	exp := binary.BigEndian.AppendUint32(nil, 100)
	p.same("set t", setReq("t", "x"))
	for _, op := range []mc.Opcode{mc.OpTouch, mc.OpGAT, mc.OpGATK} {
		p.same(op.String()+" hit", reqWith(op, 6, exp, "t", ""))
		p.same(op.String()+" miss", reqWith(op, 6, exp, "nope", ""))
	}
	p.same("flush", flushReq(0))
	p.same("get after flush", reqWith(mc.OpGet, 5, nil, "b", ""))

	m, k := p.mcd.statGroup(""), p.kvd.statGroup("")
	for _, name := range memcachedCounters {
		if m[name] != k[name] {
			t.Errorf("STAT %s: kvd %q, memcached %q", name, k[name], m[name])
		}
	}
	t.Logf("memcached: %s", pickStats(m, memcachedCounters))
}

func pickStats(m map[string]string, names []string) string {
	var b strings.Builder
	for _, n := range names {
		fmt.Fprintf(&b, "%s=%s ", n, m[n])
	}
	return b.String()
}

// TestStatsGroupsForMonitoring: what Prometheus's memcached_exporter (and
// OpenTelemetry's memcached receiver, through the same client) asks of a
// server at every scrape, over text: "stats", "stats slabs" and "stats
// items", each read to its END, then "stats settings", whose every line must
// be "STAT name value". An ERROR to any of them makes the exporter report
// the server down. The general group has the figures it parses (cmd_set
// and the cas ones, rusage as seconds.micros); memcached's settings name
// kvd's limits. Binary STAT has the same groups.
func TestStatsGroupsForMonitoring(t *testing.T) {
	k := startKVD(t, configWith(t, testConfig, map[string]any{"max_connections": 777, "max_item_size": 500000}))
	c := dialText(t, k.Addr)
	c.send("set a 0 0 1\r\nx\r\n")
	c.expect("set", "STORED")
	group := func(cmd string) map[string]string {
		t.Helper()
		c.send(cmd + "\r\n")
		out := map[string]string{}
		for {
			line, err := c.line(5 * time.Second)
			if err != nil {
				t.Fatalf("%s: %v after %d stats (the exporter times out here)", cmd, err, len(out))
			}
			if line == "END" {
				return out
			}
			f := strings.Split(line, " ")
			if len(f) != 3 || f[0] != "STAT" {
				t.Fatalf("%s: line %q is not \"STAT name value\"", cmd, line)
			}
			out[f[1]] = f[2]
		}
	}
	general := group("stats")
	for _, name := range append([]string{"pid", "uptime", "time", "version", "curr_connections", "total_connections"}, memcachedCounters...) {
		if _, ok := general[name]; !ok {
			t.Errorf("stats: no %s", name)
		}
	}
	timeval := regexp.MustCompile(`^\d+\.\d{6}$`)
	for _, name := range []string{"rusage_user", "rusage_system"} {
		if !timeval.MatchString(general[name]) {
			t.Errorf("stats %s = %q, want seconds.micros", name, general[name])
		}
	}
	if general["cmd_set"] != "1" || general["pointer_size"] != "64" {
		t.Errorf("stats: cmd_set %q pointer_size %q, want 1 and 64", general["cmd_set"], general["pointer_size"])
	}
	if s := group("stats slabs"); s["active_slabs"] != "0" || len(s) != 2 {
		t.Errorf("stats slabs: %v, want active_slabs 0 and total_malloced 0 (kvd has no slab classes)", s)
	}
	if s := group("stats items"); len(s) != 0 {
		t.Errorf("stats items: %v, want none", s)
	}
	if s := group("stats sizes"); s["sizes_status"] != "disabled" {
		t.Errorf("stats sizes: %v, want sizes_status disabled", s)
	}
	_, port := hostPort(t, k.Addr)
	settings := group("stats settings")
	for name, want := range map[string]string{"maxconns": "777", "item_size_max": "500000", "tcpport": port,
		"inter": "127.0.0.1", "evictions": "off", "cas_enabled": "yes", "binding_protocol": "auto-negotiate",
		"wal_sync": "true", "anonymous_bucket": "default"} {
		if settings[name] != want {
			t.Errorf("stats settings %s = %q, want %q", name, settings[name], want)
		}
	}
	c.call("an unknown group", "stats nosuch\r\n", "ERROR")

	// Binary STAT answers the same groups.
	r := dialRaw(t, k.Addr)
	if s := r.statGroup("settings"); s["maxconns"] != "777" {
		t.Errorf("binary STAT settings: maxconns %q, want 777", s["maxconns"])
	}
	if s := r.statGroup("slabs"); s["active_slabs"] != "0" {
		t.Errorf("binary STAT slabs: %v", s)
	}
	if s := r.statGroup(""); s["cas_badval"] != "0" {
		t.Errorf("binary STAT: cas_badval %q, want 0", s["cas_badval"])
	}
}

// TestStatsReset: memcached's "stats reset", text and binary, against
// Debian's memcached: the command counters start again from 0 (RESET over
// text, only the terminator over binary), and count on from there as
// memcached's do. A tenant's reset covers its bucket's figures only; the
// node's connection counters go back to 0 for a user with the Stats
// privilege, and /metrics, whose counters only go up, is not reset.
func TestStatsReset(t *testing.T) {
	mAddr := startMemcached(t)
	metrics := freeAddr(t)
	k := startKVD(t, testConfig, "--metrics-listen", metrics)
	mcd, kvd := dialRaw(t, mAddr), dialRaw(t, k.Addr)
	work := "set a 0 0 1\r\n1\r\nget a\r\nget nope\r\nincr a 1\r\ndelete a\r\ndelete a\r\ntouch nope 1\r\n"
	for _, addr := range []string{mAddr, k.Addr} {
		c := dialText(t, addr)
		c.send(work + "mn\r\n")
		c.expect("work", "STORED", "VALUE a 0 1", "1", "END", "END", "2", "DELETED", "NOT_FOUND", "NOT_FOUND", "MN")
		c.call("stats reset", "stats reset\r\n", "RESET")
		c.call("after the reset", "get a\r\nmn\r\n", "END", "MN")
	}
	for _, s := range []map[string]string{mcd.statGroup(""), kvd.statGroup("")} {
		if s["cmd_get"] != "1" || s["get_misses"] != "1" || s["cmd_set"] != "0" || s["delete_hits"] != "0" || s["touch_misses"] != "0" {
			t.Errorf("after a text reset and one get: %s", pickStats(s, memcachedCounters))
		}
	}
	if s := kvd.statGroup(""); s["text_commands"] != "1" || s["binary_commands"] != "0" {
		t.Errorf("kvd after a text reset and one get: text_commands %s binary_commands %s, want 1 and 0", s["text_commands"], s["binary_commands"])
	}
	for _, c := range []*rawConn{mcd, kvd} {
		if s := c.statGroup("reset"); len(s) != 0 {
			t.Errorf("binary STAT reset answered %v, want only the terminator", s)
		}
		c.expectStatus("get after the binary reset", reqWith(mc.OpGet, 1, nil, "x", ""), mc.StatusKeyNotFound)
	}
	m, kv := mcd.statGroup(""), kvd.statGroup("")
	for _, name := range memcachedCounters {
		if m[name] != kv[name] {
			t.Errorf("after the binary reset: STAT %s: kvd %q, memcached %q", name, kv[name], m[name])
		}
	}
	if kv["binary_commands"] != "1" || kv["text_commands"] != "0" {
		t.Errorf("kvd after a binary reset and one GET: binary_commands %s text_commands %s", kv["binary_commands"], kv["text_commands"])
	}

	// alice's reset is her bucket's: the default bucket's counters and the
	// node's connection counters stay.
	kvd.expectStatus("get in default", reqWith(mc.OpGet, 1, nil, "x", ""), mc.StatusKeyNotFound)
	alice := login(t, k.Addr, "alice", "alice-pw", "app")
	alice.expectStatus("alice's get", reqWith(mc.OpGet, 1, nil, "x", ""), mc.StatusKeyNotFound)
	alice.statGroup("reset")
	if s := alice.statGroup(""); s["cmd_get"] != "0" || s["bucket"] != "app" {
		t.Errorf("alice after her reset: bucket %s cmd_get %s, want app 0", s["bucket"], s["cmd_get"])
	}
	s := kvd.statGroup("")
	if s["cmd_get"] != "2" || s["total_connections"] == "0" {
		t.Errorf("default after alice's reset: cmd_get %s total_connections %s, want 2 and not 0", s["cmd_get"], s["total_connections"])
	}
	admin := login(t, k.Addr, "admin", "admin-pw", "")
	admin.statGroup("reset")
	if s := kvd.statGroup(""); s["total_connections"] != "0" || s["rejected_connections"] != "0" || s["cmd_get"] != "2" {
		t.Errorf("after admin's reset (no bucket selected): total_connections %s rejected_connections %s cmd_get %s, want 0, 0, 2",
			s["total_connections"], s["rejected_connections"], s["cmd_get"])
	}
	// A NOOP's answer: the connection is open on the server's side too.
	dialRaw(t, k.Addr).expectStatus("NOOP", reqWith(mc.OpNoop, 1, nil, "", ""), mc.StatusOK)
	if s := kvd.statGroup(""); s["total_connections"] != "1" {
		t.Errorf("one connection after the node's reset: total_connections %s", s["total_connections"])
	}
	if got, err := scrapeMetric(metrics, "kvd_connections_total"); err != nil || got < 5 {
		t.Errorf("kvd_connections_total %v (%v) after the reset, want every connection (at least 5)", got, err)
	}
}
