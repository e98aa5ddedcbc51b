package tests

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	mc "kvd/protocol/binary"
	"kvd/tenant"
)

var (
	kvctlOnce sync.Once
	kvctlPath string
	kvctlErr  error
)

// kvctlBin builds cmd/kvctl once per test run.
func kvctlBin(t *testing.T) string {
	t.Helper()
	kvctlOnce.Do(func() {
		kvctlPath = filepath.Join(filepath.Dir(kvdBin), "kvctl")
		out, err := exec.Command("go", "build", "-o", kvctlPath, "kvd/cmd/kvctl").CombinedOutput()
		if err != nil {
			kvctlErr = fmt.Errorf("building kvctl: %v\n%s", err, out)
		}
	})
	if kvctlErr != nil {
		t.Fatal(kvctlErr)
	}
	return kvctlPath
}

// kvctl runs the CLI and returns its stdout, stderr and exit code.
func kvctl(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(kvctlBin(t), args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("kvctl %v: %v", args, err)
	}
	return out.String(), errb.String(), code
}

// TestKvctlRoundTrip drives every kvctl command against a running kvd and
// checks each effect through another command, and that refusals print the
// server's reason and exit non-zero.
func TestKvctlRoundTrip(t *testing.T) {
	t.Parallel()
	k := startKVD(t, testConfig)
	admin := []string{"--addr", k.Addr, "--user", "admin", "--password", "admin-pw"}
	run := func(wantCode int, wantText string, args ...string) string {
		t.Helper()
		out, errs, code := kvctl(t, append(append([]string{}, admin...), args...)...)
		if code != wantCode || !strings.Contains(out+errs, wantText) {
			t.Fatalf("kvctl %v: exit %d, want %d; want output containing %q\nstdout: %s\nstderr: %s",
				args, code, wantCode, wantText, out, errs)
		}
		return out
	}
	run(0, "other", "list-buckets")
	run(0, "reports", "create-bucket", "reports", "--reserved", "500")
	run(1, "exists", "create-bucket", "reports")
	run(0, "hard_limit=200", "bucket-throttle", "reports", "--reserved", "100", "--hard-limit", "200")
	var details map[string]map[string]any
	if err := json.Unmarshal([]byte(run(0, "reports", "--json", "stats", "bucket_details", "reports")), &details); err != nil {
		t.Fatal(err)
	}
	if d := details["reports"]; d["throttle_reserved"] != 100.0 || d["throttle_hard_limit"] != 200.0 {
		t.Errorf("bucket_details after bucket-throttle: %v", d)
	}
	run(1, "exceeds", "bucket-throttle", "reports", "--reserved", "900", "--hard-limit", "500")
	run(0, "capacity=30000", "node-throttle", "--capacity", "30000")
	run(0, "capacity 30000", "stats", "throttle")
	run(1, "default_throttle_reserved_units", "node-throttle", "--default-reserved", "10", "--default-hard-limit", "5")
	run(0, "deleted", "delete-bucket", "reports")
	if out := run(0, "app", "list-buckets"); strings.Contains(out, "reports") {
		t.Errorf("list-buckets after delete-bucket still lists reports: %q", out)
	}
	run(1, "no such bucket", "delete-bucket", "reports")
	_, errs, code := kvctl(t, "--addr", k.Addr, "--user", "alice", "--password", "alice-pw",
		"bucket-throttle", "app", "--reserved", "5")
	if code == 0 || !strings.Contains(errs, "access denied") {
		t.Errorf("alice's bucket-throttle: exit %d, stderr %q; want a refusal naming access", code, errs)
	}
	hash, _, code := kvctl(t, "hash-password", "s3cret")
	if code != 0 || !strings.HasPrefix(hash, "$argon2id$") {
		t.Fatalf("hash-password: exit %d, %q", code, hash)
	}
	if _, err := tenant.NewUser("h", "", strings.TrimSpace(hash), []string{"*"}, nil); err != nil {
		t.Errorf("hash-password output is not a hash the config accepts: %v", err)
	}
}

// reloadConfig is testConfig with a node capacity to edit.
func reloadConfig(capacity string, extraUser string) string {
	return `{"node_capacity": ` + capacity + `, "anonymous_bucket": "default",
  "buckets": [{"name": "default"}, {"name": "app"}],
  "users": [{"name": "admin", "password": "admin-pw", "buckets": ["*"],
             "privileges": ["BucketThrottleManagement", "Unthrottled", "Stats"]}` + extraUser + `]}`
}

// TestConfigReload edits the watched config file: a valid edit shows in
// STAT throttle within 10 s, an invalid one leaves the running values and
// logs one line naming the field, a user added with a password hash can log
// in without a restart.
func TestConfigReload(t *testing.T) {
	t.Parallel()
	k := startKVD(t, reloadConfig("25000", ""))
	c := dialRaw(t, k.Addr)
	c.auth("admin", "admin-pw")
	write := func(s string) {
		if err := os.WriteFile(k.Config, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(reloadConfig("12345", ""))
	waitFor(t, 10*time.Second, "node capacity 12345 in STAT throttle", func() bool {
		return statOf(c, "throttle", "capacity") == "12345"
	})
	write(reloadConfig(`"lots"`, ""))
	waitFor(t, 10*time.Second, "a log line rejecting the edit", func() bool {
		return strings.Contains(k.Log(), "config edit rejected")
	})
	lines := 0
	for _, l := range strings.Split(k.Log(), "\n") {
		if strings.Contains(l, "config edit rejected") {
			lines++
			if !strings.Contains(l, "node_capacity") {
				t.Errorf("rejection line does not name the field: %s", l)
			}
		}
	}
	if lines != 1 {
		t.Errorf("%d rejection lines for one invalid edit, want 1", lines)
	}
	if got := statOf(c, "throttle", "capacity"); got != "12345" {
		t.Errorf("after an invalid edit capacity is %s, want the running 12345", got)
	}
	hash, err := tenant.HashPassword("carol-pw")
	if err != nil {
		t.Fatal(err)
	}
	write(reloadConfig("12345", `, {"name": "carol", "password_hash": "`+hash+`", "buckets": ["app"]}`))
	waitFor(t, 10*time.Second, "carol able to log in", func() bool {
		d := dialRaw(t, k.Addr)
		res := d.call(&mc.Request{Magic: mc.MagicRequest, Opcode: mc.OpSASLAuth, Key: []byte("PLAIN"),
			Value: []byte("\x00carol\x00carol-pw")})
		return res.Status == mc.StatusOK
	})
}

// TestConfigEditConflictingWithRunTime: an edit of the file that is
// invalid only with a setting changed at run time (a bucket's reserved
// above the hard limit 0x2a gave it) is refused whole: the node capacity
// edited beside it does not change, in the running node or after a
// restart. And the node restarts with that file in place, keeping the
// settings stored in its data directory, instead of refusing to start. A
// refused edit, at start or at a reload, applies once a run-time change
// lifts the conflict, with no further save.
func TestConfigEditConflictingWithRunTime(t *testing.T) {
	t.Parallel()
	k := startKVD(t, reloadConfig("25000", ""))
	c := dialRaw(t, k.Addr)
	c.auth("admin", "admin-pw")
	c.expectStatus("0x2a app", reqWith(mc.OpSetBucketThrottle, 1, nil, "app", `{"reserved":100,"hard_limit":1000}`), mc.StatusOK)
	edited := strings.Replace(reloadConfig("12345", ""), `{"name": "app"}`, `{"name": "app", "reserved": 5000}`, 1)
	if err := os.WriteFile(k.Config, []byte(edited), 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "a log line rejecting the edit", func() bool {
		return strings.Contains(k.Log(), "config edit rejected")
	})
	check := func(when string, c *rawConn) {
		t.Helper()
		if got := statOf(c, "throttle", "capacity"); got != "25000" {
			t.Errorf("%s: capacity %s, want 25000 (the refused edit applied in part)", when, got)
		}
		if r, h := c.bucketStat("app").limits(); r != "100" || h != "1000" {
			t.Errorf("%s: app reserved %s hard_limit %s, want 100 and 1000", when, r, h)
		}
	}
	check("after the refused edit", c)
	k.Restart(false)
	c = dialRaw(t, k.Addr)
	c.auth("admin", "admin-pw")
	check("after a restart with the file in place", c)
	waitFor(t, 5*time.Second, "the start's log line refusing the edit", func() bool {
		return strings.Contains(k.Log(), "stored settings kept") // the log comes through a pipe
	})
	// Once a run-time change lifts the conflict, the edit refused at start
	// applies at the watcher's next try, with no save.
	c.expectStatus("0x2a app", reqWith(mc.OpSetBucketThrottle, 1, nil, "app", `{"reserved":100,"hard_limit":10000}`), mc.StatusOK)
	waitFor(t, 15*time.Second, "the edit refused at start applied by a retry", func() bool {
		r, h := c.bucketStat("app").limits()
		return statOf(c, "throttle", "capacity") == "12345" && r == "5000" && h == "10000"
	})
	// The same for an edit refused at a reload.
	c.expectStatus("0x2a app", reqWith(mc.OpSetBucketThrottle, 1, nil, "app", `{"reserved":100,"hard_limit":1000}`), mc.StatusOK)
	refused := strings.Count(k.Log(), "running config kept")
	edited = strings.Replace(strings.Replace(edited, "12345", "12346", 1), `"reserved": 5000`, `"reserved": 6000`, 1)
	if err := os.WriteFile(k.Config, []byte(edited), 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the next edit refused", func() bool {
		return strings.Count(k.Log(), "running config kept") > refused
	})
	c.expectStatus("0x2a app", reqWith(mc.OpSetBucketThrottle, 1, nil, "app", `{"reserved":100,"hard_limit":10000}`), mc.StatusOK)
	waitFor(t, 15*time.Second, "the edit refused at a reload applied by a retry", func() bool {
		r, h := c.bucketStat("app").limits()
		return statOf(c, "throttle", "capacity") == "12346" && r == "6000" && h == "10000"
	})
}

// TestMetricsAgreeWithStats checks the per-bucket Prometheus counters
// against STAT bucket_details: during load the scrape taken first never
// exceeds the STAT read after it, and once the load stops they are equal.
func TestMetricsAgreeWithStats(t *testing.T) {
	t.Parallel()
	metricsAddr := freeAddr(t)
	k := startKVD(t, testConfig, "--metrics-listen", metricsAddr)
	admin := dialRaw(t, k.Addr)
	admin.auth("admin", "admin-pw")
	var stop atomic.Bool
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := dialRaw(t, k.Addr)
			c.auth("alice", "alice-pw")
			if st := c.selectBucket("app"); st != mc.StatusOK {
				t.Errorf("alice selecting app: %v", st)
				return
			}
			for n := 0; !stop.Load(); n++ {
				key := fmt.Sprintf("k%d-%d", i, n%100)
				c.send(set(key, strings.Repeat("v", 1500)), get(key))
				for range 2 {
					if res := c.recv(); res.Status != mc.StatusOK {
						t.Errorf("load: %v %q", res.Status, res.Value)
						return
					}
				}
			}
		}()
	}
	time.Sleep(1500 * time.Millisecond)
	names := map[string]string{"ru": "kvd_bucket_read_units_total", "wu": "kvd_bucket_write_units_total",
		"num_commands": "kvd_bucket_commands_total", "num_throttled": "kvd_bucket_throttled_total"}
	check := func(during bool) {
		m := scrape(t, metricsAddr)
		d := bucketDetails(t, admin, "app")
		for field, metric := range names {
			mv, sv := m[metric+`{bucket="app"}`], d[field]
			if during && mv > sv || !during && mv != sv {
				t.Errorf("during=%v: %s = %v but bucket_details %s = %v", during, metric, mv, field, sv)
			}
		}
		if m[names["num_commands"]+`{bucket="app"}`] == 0 {
			t.Errorf("no commands counted for app in /metrics")
		}
		// The logins ran while the connections were on the anonymous
		// bucket: a login is not a data command, so it has no latency.
		for _, class := range []string{"read", "write"} {
			lat := `kvd_bucket_command_latency_seconds_count{bucket="default",class="` + class + `"}`
			if n := m[lat]; n != 0 {
				t.Errorf("%s = %v after logins only (sum %v)", lat, n, m[strings.Replace(lat, "_count", "_sum", 1)])
			}
		}
	}
	check(true)
	stop.Store(true)
	wg.Wait()
	time.Sleep(200 * time.Millisecond)
	check(false)
}

// scrape reads /metrics into name{labels} → value.
func scrape(t *testing.T, addr string) map[string]float64 {
	t.Helper()
	res, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	out := map[string]float64{}
	for _, line := range strings.Split(string(body), "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			out[line[:i]] = v
		}
	}
	return out
}

// bucketDetails reads STAT "bucket_details NAME" as numbers.
func bucketDetails(t *testing.T, c *rawConn, name string) map[string]float64 {
	t.Helper()
	var doc map[string]any
	if err := json.Unmarshal([]byte(statOf(c, "bucket_details "+name, name)), &doc); err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for k, v := range doc {
		if f, ok := v.(float64); ok {
			out[k] = f
		}
	}
	return out
}

// statValue returns one stat of a STAT group ("" when absent).
func statOf(c *rawConn, group, name string) string {
	c.t.Helper()
	c.send(&mc.Request{Magic: mc.MagicRequest, Opcode: mc.OpStat, Key: []byte(group)})
	value := ""
	for {
		res := c.recv()
		if res.Status != mc.StatusOK {
			c.t.Fatalf("STAT %q: status %v %q", group, res.Status, res.Value)
		}
		if len(res.Key) == 0 {
			return value
		}
		if string(res.Key) == name {
			value = string(res.Value)
		}
	}
}

// waitFor polls cond until it holds or the timeout passes.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for %s", timeout, what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestSignals: SIGHUP, whose default would end kvd at once (no drain),
// makes it check its config file now and go on serving; SIGUSR1 stops it
// gracefully, as memcached's does.
func TestSignals(t *testing.T) {
	t.Parallel()
	k := startKVD(t, reloadConfig("25000", ""))
	c := dialRaw(t, k.Addr)
	c.auth("admin", "admin-pw")
	if err := k.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "a log line for the SIGHUP", func() bool {
		return strings.Contains(k.Log(), "SIGHUP: checking the config file now")
	})
	if got := statOf(c, "throttle", "capacity"); got != "25000" {
		t.Fatalf("after SIGHUP with the file unchanged, capacity %q, want 25000", got)
	}
	if err := os.WriteFile(k.Config, []byte(reloadConfig("12345", "")), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := k.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "node capacity 12345 after the edit and SIGHUP", func() bool {
		return statOf(c, "throttle", "capacity") == "12345"
	})
	if err := k.cmd.Process.Signal(syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-k.done:
		k.cmd = nil
		if err != nil {
			t.Fatalf("kvd after SIGUSR1: %v\n%s", err, k.tail())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("kvd still running 30 s after SIGUSR1")
	}
	if !strings.Contains(k.Log(), `"shutting down" signal="user defined signal 1"`) {
		t.Errorf("no shutdown line naming SIGUSR1:\n%s", k.tail())
	}
}

// TestLogReaderGone: kvd whose log's reader went (the read end of its
// stdout and stderr pipe closed) serves on when it next logs, as memcached
// does; Go's default would end it with SIGPIPE at that line.
func TestLogReaderGone(t *testing.T) {
	t.Parallel()
	k := newKVD(t, testConfig)
	k.Addr = freeAddr(t)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(kvdBin, "--listen", k.Addr, "--data-dir", k.DataDir, "--config", k.Config, "--metrics-listen", "")
	cmd.Stdout, cmd.Stderr = w, w
	dieWithTest(cmd)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	_ = w.Close()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	served := bufio.NewScanner(r)
	for served.Scan() && !strings.Contains(served.Text(), "kvd serving") {
	}
	_ = r.Close()
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil { // a log line
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	c := dialText(t, k.Addr)
	c.call("a client after the log line", "version\r\n", "VERSION 1.6.18 kvd-0.1.0")
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("kvd: %v, want exit 0 after SIGTERM", err)
		}
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatal("kvd did not exit within 30 s of SIGTERM")
	}
}
