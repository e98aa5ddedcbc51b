package tests

// Helpers shared by the throttling and ingress black-box tests
// (throttle_test.go, ingress_test.go): logging in, HELLO, STAT groups, error
// reasons, waiting for ingress to drain, and kvd's goroutine count from the
// Prometheus endpoint.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	mc "kvd/protocol/binary"
)

// HELLO feature codes the throttling and ingress tests negotiate.
const (
	featXError          uint16 = 0x07
	featAltRequest      uint16 = 0x10
	featReportUnitUsage uint16 = 0x1a
	featNonBlocking     uint16 = 0x1b
)

// login dials addr, authenticates as user and selects bucket ("" selects
// nothing).
func login(t testing.TB, addr, user, password, bucket string) *rawConn {
	t.Helper()
	c := dialRaw(t, addr)
	c.auth(user, password)
	if bucket != "" {
		if st := c.selectBucket(bucket); st != mc.StatusOK {
			t.Fatalf("%s: SELECT_BUCKET %s: status 0x%02x (%v)", user, bucket, uint16(st), st)
		}
	}
	return c
}

// hello negotiates features and fails unless the server grants every one.
func (c *rawConn) hello(features ...uint16) {
	c.t.Helper()
	var v []byte
	for _, f := range features {
		v = mc.AppendUint16(v, f)
	}
	res := c.call(&mc.Request{Magic: mc.MagicRequest, Opcode: mc.OpHello, Key: []byte("kvd-admin-test"), Value: v})
	if res.Status != mc.StatusOK || !bytes.Equal(res.Value, v) {
		c.t.Fatalf("HELLO % x: status %v, granted % x", v, res.Status, res.Value)
	}
}

// statGroup sends STAT key ("" for the general group) and returns the stats
// up to the terminator, by name. Any error reply fails the test.
func (c *rawConn) statGroup(key string) map[string]string {
	c.t.Helper()
	c.send(&mc.Request{Magic: mc.MagicRequest, Opcode: mc.OpStat, Key: []byte(key), Opaque: 0x5747})
	out := map[string]string{}
	for {
		res := c.recv()
		if res.Opcode != mc.OpStat || res.Opaque != 0x5747 || res.Status != mc.StatusOK {
			c.t.Fatalf("STAT %q: reply %v opaque %#x status 0x%02x %q", key, res.Opcode, res.Opaque, uint16(res.Status), res.Value)
		}
		if len(res.Key) == 0 {
			return out
		}
		out[string(res.Key)] = string(res.Value)
	}
}

// statInts is statGroup with every value parsed as an integer.
func (c *rawConn) statInts(key string) map[string]int64 {
	c.t.Helper()
	out := map[string]int64{}
	for name, v := range c.statGroup(key) {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			c.t.Fatalf("STAT %q: %s = %q is not an integer", key, name, v)
		}
		out[name] = n
	}
	return out
}

// statValue returns one stat of a group, failing when it is missing.
func statValue(t testing.TB, group string, m map[string]string, name string) string {
	t.Helper()
	v, ok := m[name]
	if !ok {
		t.Fatalf("STAT %s has no %q (has %d stats)", group, name, len(m))
	}
	return v
}

// bucketStat is the document of STAT "bucket_details NAME" (SPEC section
// 5). Limits stay raw: a number or "unlimited".
type bucketStat struct {
	Name              string          `json:"name"`
	Clients           int64           `json:"clients"`
	RU                int64           `json:"ru"`
	WU                int64           `json:"wu"`
	NumCommands       int64           `json:"num_commands"`
	NumThrottled      int64           `json:"num_throttled"`
	NumRejected       int64           `json:"num_rejected"`
	ThrottleWaitTime  int64           `json:"throttle_wait_time"`
	ThrottleReserved  json.RawMessage `json:"throttle_reserved"`
	ThrottleHardLimit json.RawMessage `json:"throttle_hard_limit"`
	UnitsHeld         int64           `json:"units_held"`
}

// limits returns the reserved and hard limit as text: "300", "unlimited".
func (b bucketStat) limits() (reserved, hardLimit string) {
	return strings.Trim(string(b.ThrottleReserved), `"`), strings.Trim(string(b.ThrottleHardLimit), `"`)
}

// bucketStat reads STAT "bucket_details NAME".
func (c *rawConn) bucketStat(name string) bucketStat {
	c.t.Helper()
	m := c.statGroup("bucket_details " + name)
	raw, ok := m[name]
	if !ok || len(m) != 1 {
		c.t.Fatalf("STAT bucket_details %s: want one stat named %q, got %v", name, name, m)
	}
	var b bucketStat
	for _, field := range []string{"name", "clients", "ru", "wu", "num_commands", "num_throttled",
		"num_rejected", "throttle_wait_time", "throttle_reserved", "throttle_hard_limit"} {
		if !strings.Contains(raw, `"`+field+`":`) {
			c.t.Fatalf("STAT bucket_details %s lacks %q: %s", name, field, raw)
		}
	}
	if err := json.Unmarshal([]byte(raw), &b); err != nil {
		c.t.Fatalf("STAT bucket_details %s: %v in %s", name, err, raw)
	}
	return b
}

// xerrorContext returns the reason of an error reply sent with XERROR: the
// context of its {"error":{"context":…}} body.
func xerrorContext(t testing.TB, res *mc.Response) string {
	t.Helper()
	var doc struct {
		Error struct {
			Context *string `json:"context"`
		} `json:"error"`
	}
	if err := json.Unmarshal(res.Value, &doc); err != nil || doc.Error.Context == nil {
		t.Fatalf("%v status 0x%02x: body %q is not {\"error\":{\"context\":…}} (%v)", res.Opcode, uint16(res.Status), res.Value, err)
	}
	return *doc.Error.Context
}

// mentions reports whether reason contains any of words, ignoring case.
func mentions(reason string, words ...string) bool {
	r := strings.ToLower(reason)
	for _, w := range words {
		if strings.Contains(r, strings.ToLower(w)) {
			return true
		}
	}
	return false
}

// scrapeMetric reads one unlabelled sample from the Prometheus endpoint at
// addr (host:port), e.g. "go_goroutines".
func scrapeMetric(addr, name string) (float64, error) {
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	res, err := client.Get("http://" + addr + "/metrics")
	if err != nil {
		return 0, err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("GET /metrics: %s", res.Status)
	}
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 2 && f[0] == name {
			return strconv.ParseFloat(f[1], 64)
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("/metrics has no sample %q", name)
}

// waitIngressIdle fails unless, within 10 s, no ticket is out and nothing
// waits: the stopped writers' commands were all finished or canceled.
func waitIngressIdle(t *testing.T, c *rawConn) map[string]int64 {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		s := c.statInts("ingress")
		idle := true
		for _, f := range []string{"read_out", "write_out", "read_queue_length", "write_queue_length"} {
			idle = idle && s[f] == 0
		}
		if idle {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("10 s after the clients left, tickets are still out or queued: read_out %d write_out %d read_queue_length %d write_queue_length %d",
				s["read_out"], s["write_out"], s["read_queue_length"], s["write_queue_length"])
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// idleGoroutines is kvd's goroutine count once it has settled: the lowest
// of the samples taken over a second, once /metrics answers.
func idleGoroutines(t *testing.T, metrics string) float64 {
	t.Helper()
	low, err := scrapeMetric(metrics, "go_goroutines")
	for deadline := time.Now().Add(10 * time.Second); err != nil && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
		low, err = scrapeMetric(metrics, "go_goroutines")
	}
	if err != nil {
		t.Fatalf("scraping go_goroutines from %s: %v", metrics, err)
	}
	for range 10 {
		time.Sleep(100 * time.Millisecond)
		if n, err := scrapeMetric(metrics, "go_goroutines"); err == nil {
			low = min(low, n)
		}
	}
	return low
}

// waitGoroutines fails unless kvd's goroutine count comes back to within a
// few of baseline within 10 s.
func waitGoroutines(t *testing.T, metrics string, baseline float64) {
	t.Helper()
	const margin = 5
	var n float64
	var err error
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if n, err = scrapeMetric(metrics, "go_goroutines"); err == nil && n <= baseline+margin {
			t.Logf("goroutines: %v idle before, %v after", baseline, n)
			return
		}
	}
	t.Errorf("kvd has %v goroutines 10 s after the churn, idle baseline %v (+%d allowed); scrape error: %v", n, baseline, margin, err)
}
