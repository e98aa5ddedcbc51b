package tests

// Scale of the catalog (issue 12, item 5): a node with many buckets starts,
// reloads and restarts in time linear in the number of buckets, and its
// /metrics and STAT bucket_details stay bounded. The test runs at a CI size
// (scaleBuckets: 10,000 buckets by default; KVD_SCALE_BUCKETS=100000 for
// the hand run whose figures are in the README) and asserts what could fail
// without timing anything: the number of WAL fsyncs a reload costs, the
// size of /metrics and bucket_details, and that every bucket is there after
// a restart. The times it logs are figures, never assertions.

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	mc "kvd/protocol/binary"
)

// scaleBuckets is the number of buckets the config file names at start;
// the reload adds as many again.
func scaleBuckets(t *testing.T) int {
	n := 10000
	if v := os.Getenv("KVD_SCALE_BUCKETS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 10 {
			t.Fatalf("KVD_SCALE_BUCKETS=%q: want a number ≥ 10", v)
		}
	}
	return n
}

// scaleConfig names buckets s0000000 … of [from, to) and an admin.
func scaleConfig(from, to int) string {
	var b strings.Builder
	b.WriteString(`{"buckets": [`)
	for i := from; i < to; i++ {
		if i > from {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"name": "s%07d"}`, i)
	}
	b.WriteString(`], "users": [{"name": "admin", "password": "admin-pw", "buckets": ["*"],
	  "privileges": ["BucketThrottleManagement", "Unthrottled", "Stats"]}]}`)
	return b.String()
}

// scrapeAll returns the whole /metrics page.
func scrapeAll(t *testing.T, addr string) string {
	t.Helper()
	client := &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	res, err := client.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %v %v", res.Status, err)
	}
	return string(body)
}

// sample returns the value of the sample whose name and labels are exactly
// series (`kvd_buckets` or `kvd_bucket_commands_total{bucket="x"}`), and
// whether the page has it.
func sample(page, series string) (float64, bool) {
	sc := bufio.NewScanner(strings.NewReader(page))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, series+" "); ok {
			v, err := strconv.ParseFloat(rest, 64)
			return v, err == nil
		}
	}
	return 0, false
}

// bucketsWithSeries counts the distinct buckets with a
// kvd_bucket_commands_total series on the page.
func bucketsWithSeries(page string) int {
	return strings.Count(page, "\nkvd_bucket_commands_total{")
}

// waitLog waits until kvd's log holds want at least n times.
func waitLog(t *testing.T, k *kvd, want string, n int, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for strings.Count(k.Log(), want) < n {
		if time.Now().After(deadline) {
			t.Fatalf("no %d× %q in kvd's log within %v\n%s", n, want, within, k.tail())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestCatalogScale(t *testing.T) {
	n := scaleBuckets(t)
	wait := 30*time.Second + time.Duration(n)*time.Millisecond // generous: a bound, not a figure
	metrics := freeAddr(t)
	k := newKVD(t, scaleConfig(0, n))
	k.StartWait = wait
	start := time.Now()
	k.start("--metrics-listen", metrics)
	t.Logf("first start, %d buckets created from the config: serving after %v", n, time.Since(start).Round(time.Millisecond))

	before, _ := sample(scrapeAll(t, metrics), "kvd_pebble_wal_fsync_latency_seconds_count")
	if err := os.WriteFile(k.Config, []byte(scaleConfig(0, 2*n)), 0o644); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	waitLog(t, k, "config reloaded", 1, wait)
	t.Logf("reload adding %d buckets (%d in all): %v after the edit (the watcher looks every 2 s)",
		n, 2*n, time.Since(start).Round(time.Millisecond))
	page := scrapeAll(t, metrics)
	after, _ := sample(page, "kvd_pebble_wal_fsync_latency_seconds_count")
	if got, ok := sample(page, "kvd_buckets"); !ok || got != float64(2*n) {
		t.Fatalf("kvd_buckets after the reload = %v (found %v), want %d", got, ok, 2*n)
	}
	// One fsync per bucket created is what made a 100k reload take minutes;
	// a reload creates its buckets in batches.
	if fsyncs := after - before; fsyncs > 64 {
		t.Errorf("the reload that created %d buckets cost %v WAL fsyncs, want a few (batched)", n, fsyncs)
	} else {
		t.Logf("the reload cost %v WAL fsyncs", fsyncs)
	}

	created := createOneByOne(t, k, min(n/5, 2000))
	total := 2*n + created
	useOneBucket(t, k, "s0000007")
	checkBoundedMetrics(t, scrapeAll(t, metrics), total, "s0000007")
	checkBoundedDetails(t, k, total, "s0000007")

	start = time.Now()
	k.Restart(false, "--metrics-listen", metrics)
	t.Logf("restart with %d buckets: serving after %v", total, time.Since(start).Round(time.Millisecond))
	admin := login(t, k.Addr, "admin", "admin-pw", "")
	res := admin.call(&mc.Request{Magic: mc.MagicRequest, Opcode: mc.OpListBuckets})
	if got := len(strings.Fields(string(res.Value))); res.Status != mc.StatusOK || got != total {
		t.Fatalf("LIST_BUCKETS after the restart: status %v, %d buckets, want %d", res.Status, got, total)
	}
}

// createOneByOne creates m buckets with CREATE_BUCKET, one round trip each,
// and logs the rate of each tenth: it stays level when a create costs the
// same with 10k buckets as with 10. It returns m.
func createOneByOne(t *testing.T, k *kvd, m int) int {
	admin := login(t, k.Addr, "admin", "admin-pw", "")
	chunk := max(m/10, 1)
	var rates []string
	start := time.Now()
	for i := range m {
		name := fmt.Sprintf("c%07d", i)
		if res := admin.call(reqWith(mc.OpCreateBucket, uint32(i), nil, name, "")); res.Status != mc.StatusOK {
			t.Fatalf("CREATE_BUCKET %s: status %v %q", name, res.Status, res.Value)
		}
		if (i+1)%chunk == 0 {
			rates = append(rates, fmt.Sprintf("%.0f", float64(chunk)/time.Since(start).Seconds()))
			start = time.Now()
		}
	}
	t.Logf("CREATE_BUCKET one at a time, %d buckets, creations/s per tenth: %s", m, strings.Join(rates, " "))
	return m
}

// useOneBucket runs a few commands in one bucket among many idle ones.
func useOneBucket(t *testing.T, k *kvd, name string) {
	c := login(t, k.Addr, "admin", "admin-pw", name)
	for i := range 20 {
		c.expectStatus("SET", set(fmt.Sprintf("k%d", i), "v"), mc.StatusOK)
	}
}

// checkBoundedMetrics: with more buckets than metrics_buckets_max, /metrics
// has per-bucket series only for the active buckets (here: one), the node
// totals count every bucket, and the page stays small.
func checkBoundedMetrics(t *testing.T, page string, total int, active string) {
	t.Helper()
	t.Logf("/metrics with %d buckets: %d bytes, %d buckets with series", total, len(page), bucketsWithSeries(page))
	if got, ok := sample(page, "kvd_buckets"); !ok || got != float64(total) {
		t.Errorf("kvd_buckets = %v (found %v), want %d", got, ok, total)
	}
	if got, ok := sample(page, `kvd_bucket_commands_total{bucket="`+active+`"}`); !ok || got < 20 {
		t.Errorf("the active bucket %s: kvd_bucket_commands_total = %v (found %v), want ≥ 20", active, got, ok)
	}
	if got, ok := sample(page, "kvd_node_commands_total"); !ok || got < 20 {
		t.Errorf("kvd_node_commands_total = %v (found %v), want ≥ 20", got, ok)
	}
	if b := bucketsWithSeries(page); b > 100 {
		t.Errorf("%d buckets have series in /metrics, want at most the 100 most active", b)
	}
	if len(page) > 1<<20 {
		t.Errorf("/metrics is %d bytes with %d buckets, want under 1 MiB", len(page), total)
	}
}

// checkBoundedDetails: STAT bucket_details lists the active buckets and
// says how many it left out; bucket_details NAME answers for any bucket.
func checkBoundedDetails(t *testing.T, k *kvd, total int, active string) {
	t.Helper()
	admin := login(t, k.Addr, "admin", "admin-pw", "")
	doc := admin.statGroup("bucket_details")["bucket_details"]
	t.Logf("STAT bucket_details with %d buckets: %d bytes", total, len(doc))
	if !strings.Contains(doc, `"name":"`+active+`"`) || !strings.Contains(doc, `"buckets_total":`+strconv.Itoa(total)) {
		t.Errorf("STAT bucket_details lacks the active bucket %s or buckets_total %d: %.300s", active, total, doc)
	}
	if len(doc) > 256<<10 {
		t.Errorf("STAT bucket_details is %d bytes with %d buckets, want under 256 KiB", len(doc), total)
	}
	if b := admin.bucketStat("s0000003"); b.Name != "s0000003" {
		t.Errorf("bucket_details s0000003: got %+v", b)
	}
}

// TestMetricsBucketLimit: with metrics_bucket_limit 2 and five buckets,
// /metrics carries per-bucket series only for the one bucket with activity
// (kvd_buckets_exported says how many), the node totals count its commands
// and latency, STAT bucket_details names what it left out, and
// "bucket_details *" still lists every bucket.
func TestMetricsBucketLimit(t *testing.T) {
	metrics := freeAddr(t)
	cfg := strings.Replace(scaleConfig(0, 5), `{"buckets"`, `{"metrics_bucket_limit": 2, "buckets"`, 1)
	k := startKVD(t, cfg, "--metrics-listen", metrics)
	useOneBucket(t, k, "s0000002")
	page := scrapeAll(t, metrics)
	for series, want := range map[string]float64{"kvd_buckets": 5, "kvd_buckets_exported": 1} {
		if got, ok := sample(page, series); !ok || got != want {
			t.Errorf("%s = %v (found %v), want %v", series, got, ok, want)
		}
	}
	if b := bucketsWithSeries(page); b != 1 || !strings.Contains(page, `kvd_bucket_commands_total{bucket="s0000002"}`) {
		t.Errorf("%d buckets with series, want only the active s0000002", b)
	}
	// A command's latency is observed just after its reply is written: the
	// last SET's may trail its reply by a moment.
	const lat = `kvd_node_command_latency_seconds_count{class="write"}`
	got, ok := sample(page, lat)
	for deadline := time.Now().Add(2 * time.Second); got < 20 && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
		got, ok = sample(scrapeAll(t, metrics), lat)
	}
	if !ok || got < 20 {
		t.Errorf("%s = %v (found %v), want ≥ 20", lat, got, ok)
	}
	admin := login(t, k.Addr, "admin", "admin-pw", "")
	doc := admin.statGroup("bucket_details")["bucket_details"]
	if !strings.Contains(doc, `"buckets_total":5`) || !strings.Contains(doc, `"buckets_omitted":4`) {
		t.Errorf("STAT bucket_details: want buckets_total 5 and buckets_omitted 4: %.400s", doc)
	}
	all := admin.statGroup("bucket_details *")
	t.Logf("bucket_details *: %.200s", all)
	for i := range 5 {
		name := fmt.Sprintf("s%07d", i)
		found := false
		for _, v := range all {
			found = found || strings.Contains(v, `"name":"`+name+`"`)
		}
		if !found {
			t.Errorf("STAT bucket_details * lacks %s", name)
		}
	}
}
