package tests

// The shipped monitoring (deploy/) against a real Prometheus (Debian's
// prometheus and promtool, SPEC section 8): the alert rules' unit tests, and
// Prometheus scraping a real kvd every second under a multi-tenant load while
// the test evaluates every query of the Grafana board through the HTTP API.

import (
	"bytes"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	mc "kvd/protocol/binary"
)

const (
	alertRules      = "../deploy/prometheus/kvd-alerts.yml"
	alertRulesTests = "../deploy/prometheus/kvd-alerts_test.yml"
	scrapeConfig    = "../deploy/prometheus.yml"
	dashboardFile   = "../deploy/grafana/kvd-dashboard.json"
)

// toolPackages names the Debian package that ships each external tool, for
// requireTool's message.
var toolPackages = map[string]string{
	"memcached":   "memcached",
	"memccapable": "libmemcached-tools",
	"memcaslap":   "libmemcached-tools",
	"prometheus":  "prometheus",
	"promtool":    "prometheus",
	memcachedTool: "memcached",
}

// TestAlertRules runs `promtool check rules` on the shipped alert rules,
// `promtool test rules` on their unit tests (a firing and a silent case per
// rule) and `promtool check config` on the shipped scrape config, which
// loads the rules.
func TestAlertRules(t *testing.T) {
	t.Parallel()
	promtool := requireTool(t, "promtool")
	for _, args := range [][]string{
		{"check", "rules", alertRules}, {"test", "rules", alertRulesTests}, {"check", "config", scrapeConfig}} {
		out, err := exec.Command(promtool, args...).CombinedOutput()
		if err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// promLoadConfig: "limited" is held to 40 RU/s by its hard limit, "writer"
// syncs every batch to the WAL through a write pool fixed at 2 tickets (so
// its commands queue), "reader1" and "reader2" read a resident working set.
// The user "tenant" has no privileges: its connections are throttled and
// take tickets.
func promLoadConfig(t *testing.T) string {
	return throttleConfig(t, map[string]any{
		"wal_sync": true,
		"ingress":  map[string]any{"probe": map[string]any{"min": 2, "max": 2}},
	}, bucketConfig("limited", 0, 40), bucketConfig("writer", nil, nil),
		bucketConfig("reader1", nil, nil), bucketConfig("reader2", nil, nil))
}

// TestPrometheusDashboard starts kvd and Prometheus (scraping every second,
// with the alert rules loaded), drives the multi-tenant load, then checks:
// `promtool check metrics` on /metrics; every query of the board and every
// template variable returns data without NaN; the board's metric types are
// used as their types require (counters through rate, gauges not) and its
// literal label values exist; every alert rule names only metrics kvd
// exports and evaluates without error against the real series; and on the
// board's own per-bucket p99 query the throttled tenant's p99 stands far
// above its neighbour's.
func TestPrometheusDashboard(t *testing.T) {
	t.Parallel()
	promBin := requireTool(t, "prometheus")
	promtool := requireTool(t, "promtool")
	metricsAddr := freeAddr(t)
	k := startKVD(t, promLoadConfig(t), "--metrics-listen", metricsAddr)
	p := startPrometheus(t, promBin, metricsAddr)
	load := startPromLoad(t, k.Addr)
	// Every rate window ($__rate_interval = 10s) full of scrapes under load.
	p.waitFor(t, 30*time.Second, `count_over_time(kvd_connections{job="kvd"}[10s]) >= 8`)

	checkMetricsLint(t, promtool, metricsAddr)
	board := loadBoard(t, dashboardFile)
	board.checkLayout(t)
	types := p.metricTypes(t)
	board.checkSelectors(t, p, types)
	board.checkQueries(t, p)
	p.checkRuleHealth(t, types)
	checkNeighbourLatency(t, p, board)
	load.stop(t)
}

// checkMetricsLint runs `promtool check metrics` on kvd's /metrics.
func checkMetricsLint(t *testing.T, promtool, metricsAddr string) {
	t.Helper()
	res, err := http.Get("http://" + metricsAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	var body bytes.Buffer
	_, _ = body.ReadFrom(res.Body)
	_ = res.Body.Close()
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = &body
	if out, err := cmd.CombinedOutput(); err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("promtool check metrics on /metrics: %v\n%s", err, out)
	}
}

// checkNeighbourLatency evaluates the board's "p99 by bucket" query: the
// tenant parked by its hard limit must show a p99 of at least 100 ms and at
// least four times that of a reader on the same node, whose commands are
// never parked.
func checkNeighbourLatency(t *testing.T, p *prometheus, b *board) {
	t.Helper()
	q, ok := b.expr("p99 by bucket (end to end)", "A")
	if !ok {
		t.Fatal(`the board has no "p99 by bucket (end to end)" panel`)
	}
	p99 := map[string]float64{}
	for _, s := range p.query(t, q).samples {
		if s.metric["class"] == "read" {
			p99[s.metric["bucket"]] = s.value
		}
	}
	limited, okL := p99["limited"]
	reader, okR := p99["reader1"]
	if !okL || !okR {
		t.Errorf("per-bucket read p99: %v; want the limited and reader1 buckets (needs the latency histograms wired)", p99)
		return
	}
	t.Logf("read p99 on the board: limited (parked by its hard limit) %.3gs, reader1 %.3gs", limited, reader)
	if limited < 0.1 || limited < 4*reader {
		t.Errorf("read p99: limited %.3gs, reader1 %.3gs; want the parked tenant ≥ 100 ms and ≥ 4× its neighbour", limited, reader)
	}
}

// promLoad is the test's tenants, each on its own connections, until stop.
type promLoad struct {
	stopping atomic.Bool
	wg       sync.WaitGroup
	ops      atomic.Int64
}

// startPromLoad preloads the readers' and the limited tenant's keys (so
// their GETs are resident) and starts: 2 connections GETting on "limited",
// 4 connections pipelining 8 SETs of 900 bytes on "writer", 2 connections
// GETting on each of "reader1" and "reader2".
func startPromLoad(t *testing.T, addr string) *promLoad {
	t.Helper()
	admin := dialRaw(t, addr)
	admin.auth("admin", "admin-pw")
	for _, b := range []string{"limited", "reader1", "reader2"} {
		if st := admin.selectBucket(b); st != mc.StatusOK {
			t.Fatalf("admin selecting %s: %v", b, st)
		}
		for i := range 50 {
			admin.expectStatus("preload", set(fmt.Sprintf("k%d", i), strings.Repeat("r", 100)), mc.StatusOK)
		}
	}
	l := &promLoad{}
	for _, tenant := range []struct {
		bucket   string
		conns    int
		pipeline func(n int) []*mc.Request
	}{
		{"limited", 2, getPipeline(1)}, {"writer", 4, setPipeline(8)},
		{"reader1", 2, getPipeline(4)}, {"reader2", 2, getPipeline(4)},
	} {
		for range tenant.conns {
			c := dialRaw(t, addr)
			c.auth("tenant", "tenant-pw")
			if st := c.selectBucket(tenant.bucket); st != mc.StatusOK {
				t.Fatalf("tenant selecting %s: %v", tenant.bucket, st)
			}
			l.wg.Add(1)
			go l.run(t, c, tenant.bucket, tenant.pipeline)
		}
	}
	t.Cleanup(func() { l.stopping.Store(true); l.wg.Wait() })
	return l
}

func getPipeline(n int) func(int) []*mc.Request {
	return func(i int) []*mc.Request {
		reqs := make([]*mc.Request, n)
		for j := range reqs {
			reqs[j] = get(fmt.Sprintf("k%d", (i*n+j)%50))
		}
		return reqs
	}
}

func setPipeline(n int) func(int) []*mc.Request {
	value := strings.Repeat("w", 900)
	return func(i int) []*mc.Request {
		reqs := make([]*mc.Request, n)
		for j := range reqs {
			reqs[j] = set(fmt.Sprintf("w%d", (i*n+j)%5000), value)
		}
		return reqs
	}
}

// run sends pipelines on c until stop; every reply must be OK.
func (l *promLoad) run(t *testing.T, c *rawConn, bucket string, pipeline func(int) []*mc.Request) {
	defer l.wg.Done()
	for i := 0; !l.stopping.Load(); i++ {
		reqs := pipeline(i)
		var buf []byte
		for _, r := range reqs {
			buf = mc.AppendRequest(buf, r)
		}
		_ = c.nc.SetWriteDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.nc.Write(buf); err != nil {
			t.Errorf("%s: write: %v", bucket, err)
			return
		}
		for range reqs {
			res, err := c.tryRecv(10 * time.Second)
			if err != nil || res.Status != mc.StatusOK {
				t.Errorf("%s: reply %v, status %v", bucket, err, res)
				return
			}
			l.ops.Add(1)
		}
	}
}

// stop ends the load and fails the test if it did nothing.
func (l *promLoad) stop(t *testing.T) {
	l.stopping.Store(true)
	l.wg.Wait()
	if l.ops.Load() == 0 {
		t.Error("the load completed no command")
	}
}

// startPrometheus runs Debian's prometheus on a free loopback port with a
// temporary storage dir, scraping kvd's metricsAddr every second and
// evaluating the shipped alert rules every second. It is killed when the
// test ends.
func startPrometheus(t *testing.T, bin, metricsAddr string) *prometheus {
	t.Helper()
	dir := t.TempDir()
	rules, err := filepath.Abs(alertRules)
	if err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf(`global:
  scrape_interval: 1s
  scrape_timeout: 900ms
  evaluation_interval: 1s
rule_files: [%q]
scrape_configs:
  - job_name: kvd
    static_configs:
      - targets: [%q]
`, rules, metricsAddr)
	cfgFile := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	p := &prometheus{addr: freeAddr(t)}
	cmd := exec.Command(bin, "--config.file="+cfgFile, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+p.addr, "--log.level=warn")
	log := new(lockedBuffer)
	cmd.Stdout, cmd.Stderr = log, log
	t.Cleanup(func() { // runs after startHelper's kill
		if t.Failed() {
			t.Logf("prometheus log:\n%s", log.String())
		}
	})
	done := startHelper(t, cmd)
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if res, err := http.Get("http://" + p.addr + "/-/ready"); err == nil {
			_ = res.Body.Close()
			if res.StatusCode == http.StatusOK {
				return p
			}
		}
		select {
		case <-done:
			t.Fatalf("prometheus exited during start:\n%s", log.String())
		case <-time.After(100 * time.Millisecond):
		}
	}
	t.Fatalf("prometheus not ready on %s:\n%s", p.addr, log.String())
	return nil
}
