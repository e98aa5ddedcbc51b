package tests

// The Grafana board (deploy/grafana/kvd-dashboard.json) read as data, and a
// small client of Prometheus's HTTP API to evaluate it: used by
// TestPrometheusDashboard in prometheus_test.go.

import (
	"encoding/json"
	"math"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

// boardNoData is the one place where a board query may return no data under
// the test's load, each with the reason it is empty on purpose (keyed
// "panel title/refId"). Every other query must return data.
var boardNoData = map[string]string{
	"Block cache hit rate/A": "Pebble's block cache sees no lookups in a short test: every read is answered " +
		"from kvd's resident item cache or the memtable, and the guard drops 0/0 instead of showing NaN",
	"etcd link up by node/A": "the test's kvd is a single node (no --cluster): it has no etcd link, and " +
		"kvd_cluster_etcd_up is exported only in a cluster (a 0 would page KvdClusterEtcdDown)",
	"Share of cluster-wide limits by bucket/A": "a single node has no share of cluster-wide limits: " +
		"kvd_bucket_share_units is exported only in a cluster",
	"Share of cluster-wide limits by bucket/B": "the bucket's units/s are shown only beside a share " +
		"(and on(instance, bucket) kvd_bucket_share_units), which a single node does not have",
}

// clusterOnlyTypes are the types of the metrics kvd exports only in a
// cluster (observe/cluster.go), which the single node of the test never
// shows to Prometheus's metadata API. TestCluster checks them on real
// cluster nodes.
var clusterOnlyTypes = map[string]string{
	"kvd_cluster_nodes":      "gauge",
	"kvd_cluster_etcd_up":    "gauge",
	"kvd_bucket_share_units": "gauge",
}

// rateInterval stands for Grafana's $__rate_interval: at least four scrape
// intervals (1 s here).
const rateInterval = "10s"

// board is the dashboard JSON, as much of it as the checks read.
type board struct {
	Panels     []boardPanel `json:"panels"`
	Templating struct {
		List []boardVariable `json:"list"`
	} `json:"templating"`
}

type boardPanel struct {
	ID      int                      `json:"id"`
	Title   string                   `json:"title"`
	Type    string                   `json:"type"`
	GridPos struct{ X, Y, W, H int } `json:"gridPos"`
	Targets []struct {
		RefID string `json:"refId"`
		Expr  string `json:"expr"`
	} `json:"targets"`
	Panels []boardPanel `json:"panels"` // a collapsed row's panels
}

type boardVariable struct {
	Name     string          `json:"name"`
	Type     string          `json:"type"`
	Query    json.RawMessage `json:"query"`
	AllValue string          `json:"allValue"`
}

// boardQuery is one PromQL expression of the board, named "title/refId".
type boardQuery struct{ where, expr string }

func loadBoard(t *testing.T, path string) *board {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b := new(board)
	if err := json.Unmarshal(raw, b); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return b
}

func (b *board) panels() []boardPanel {
	var out []boardPanel
	var walk func(ps []boardPanel)
	walk = func(ps []boardPanel) {
		for _, p := range ps {
			out = append(out, p)
			walk(p.Panels)
		}
	}
	walk(b.Panels)
	return out
}

// queries returns every target expression with the template variables
// substituted as Grafana would with "All" selected.
func (b *board) queries() []boardQuery {
	subst := []string{"$__rate_interval", rateInterval, "${__rate_interval}", rateInterval}
	for _, v := range b.Templating.List {
		if v.AllValue != "" {
			subst = append(subst, "${"+v.Name+"}", v.AllValue, "$"+v.Name, v.AllValue)
		}
	}
	r := strings.NewReplacer(subst...)
	var out []boardQuery
	for _, p := range b.panels() {
		for _, tg := range p.Targets {
			if tg.Expr != "" {
				out = append(out, boardQuery{p.Title + "/" + tg.RefID, r.Replace(tg.Expr)})
			}
		}
	}
	return out
}

// expr returns a panel target's expression, substituted.
func (b *board) expr(title, ref string) (string, bool) {
	for _, q := range b.queries() {
		if q.where == title+"/"+ref {
			return q.expr, true
		}
	}
	return "", false
}

// checkLayout: unique panel ids, every panel inside the 24-column grid, no
// two panels overlapping.
func (b *board) checkLayout(t *testing.T) {
	t.Helper()
	ps := b.panels()
	seen := map[int]string{}
	for i, p := range ps {
		if prev, dup := seen[p.ID]; dup {
			t.Errorf("panel id %d is used by %q and %q", p.ID, prev, p.Title)
		}
		seen[p.ID] = p.Title
		g := p.GridPos
		if g.X < 0 || g.W <= 0 || g.H <= 0 || g.X+g.W > 24 {
			t.Errorf("panel %d %q: gridPos %+v does not fit the 24-column grid", p.ID, p.Title, g)
		}
		for _, o := range ps[i+1:] {
			h := o.GridPos
			if g.X < h.X+h.W && h.X < g.X+g.W && g.Y < h.Y+h.H && h.Y < g.Y+g.H {
				t.Errorf("panels %d %q and %d %q overlap: %+v / %+v", p.ID, p.Title, o.ID, o.Title, g, h)
			}
		}
	}
}

// selectorRE finds kvd series selectors with their optional range.
var selectorRE = regexp.MustCompile(`\b(kvd_\w+)\s*(\{[^}]*\})?\s*(\[[^\]]*\])?`)

// matcherRE finds the equality and regexp label matchers of a selector.
var matcherRE = regexp.MustCompile(`(\w+)\s*(=~|=)\s*"([^"]*)"`)

// runTimeLabels are labels whose values come from the run (bucket names,
// targets, histogram bounds), not from kvd's code.
var runTimeLabels = map[string]bool{"bucket": true, "instance": true, "job": true, "le": true}

// checkSelectors: counters (and histogram series) are read only through a
// rate window of $__rate_interval, gauges never through a window (types
// maps a metric family to its type as Prometheus's metadata API reports
// it); and every literal label value a selector names (each alternative of
// pool=~"read|write") is one the metric has, so that a misspelt alternative
// cannot hide behind the others' data.
func (b *board) checkSelectors(t *testing.T, p *prometheus, types map[string]string) {
	t.Helper()
	for _, q := range b.queries() {
		for _, m := range selectorRE.FindAllStringSubmatch(q.expr, -1) {
			name, window := m[1], m[3]
			typ := metricType(types, name)
			if clusterOnlyTypes[name] == "" || types[name] != "" {
				p.checkLabelValues(t, q.where, name, m[2]) // the cluster's are absent on the test's single node
			}
			switch {
			case typ == "":
				t.Errorf("%s: %s is not a metric kvd exports (metadata has no type for it)", q.where, name)
			case typ == "counter" && window != "["+rateInterval+"]":
				t.Errorf("%s: counter %s read with window %q, want [$__rate_interval]", q.where, name, window)
			case typ == "gauge" && window != "":
				t.Errorf("%s: gauge %s read with a window %s", q.where, name, window)
			}
		}
	}
}

// metricType is the type of the series name as kvd exports it, from
// Prometheus's metadata (types): a histogram's _bucket, _count and _sum are
// counters; the cluster's metrics, which the test's single node does not
// export, have their known types. "" for a name kvd does not export.
func metricType(types map[string]string, name string) string {
	for _, suffix := range []string{"_bucket", "_count", "_sum"} {
		if base, ok := strings.CutSuffix(name, suffix); ok && types[base] == "histogram" {
			return "counter"
		}
	}
	if typ := types[name]; typ != "" {
		return typ
	}
	return clusterOnlyTypes[name]
}

// checkQueries evaluates every board query and template variable: each must
// return data (unless listed in boardNoData) and no NaN or infinity.
func (b *board) checkQueries(t *testing.T, p *prometheus) {
	t.Helper()
	qs := b.queries()
	empty := 0
	for _, q := range qs {
		r := p.query(t, q.expr)
		for _, s := range r.samples {
			if math.IsNaN(s.value) || math.IsInf(s.value, 0) {
				t.Errorf("%s: %v for %v\n  %s", q.where, s.value, s.metric, q.expr)
			}
		}
		if len(r.samples) > 0 {
			continue
		}
		if _, ok := boardNoData[q.where]; ok {
			continue
		}
		empty++
		hint := ""
		if strings.Contains(q.expr, "kvd_bucket_command_latency") || strings.Contains(q.expr, "kvd_bucket_throttle_park") ||
			strings.Contains(q.expr, "kvd_bucket_queue_wait") {
			hint = " (the latency histograms of package latency must be observed on the command path)"
		}
		t.Errorf("%s: no data%s\n  %s", q.where, hint, q.expr)
	}
	t.Logf("board: %d queries, %d with data, %d empty on purpose", len(qs), len(qs)-empty-len(boardNoData), len(boardNoData))
	for _, v := range b.Templating.List {
		if v.Type != "query" {
			continue
		}
		b.checkVariable(t, p, v)
	}
	for where := range boardNoData {
		if _, ok := b.expr(strings.Split(where, "/")[0], strings.Split(where, "/")[1]); !ok {
			t.Errorf("boardNoData lists %q, which the board does not have", where)
		}
	}
}

// labelValuesRE is Grafana's label_values(metric, label) variable query.
var labelValuesRE = regexp.MustCompile(`^\s*label_values\(\s*(\w+)\s*,\s*(\w+)\s*\)\s*$`)

func (b *board) checkVariable(t *testing.T, p *prometheus, v boardVariable) {
	t.Helper()
	var q struct {
		Query string `json:"query"`
	}
	if err := json.Unmarshal(v.Query, &q); err != nil {
		_ = json.Unmarshal(v.Query, &q.Query) // a plain string
	}
	m := labelValuesRE.FindStringSubmatch(q.Query)
	if m == nil {
		t.Errorf("variable $%s: query %q is not label_values(metric, label)", v.Name, q.Query)
		return
	}
	var values []string
	p.get(t, "/api/v1/label/"+m[2]+"/values?"+url.Values{"match[]": {m[1]}}.Encode(), &values)
	if len(values) == 0 {
		t.Errorf("variable $%s (%s): no values", v.Name, q.Query)
	}
}

// prometheus is a running Prometheus, spoken to through its HTTP API.
type prometheus struct {
	addr        string
	labelValues map[string][]string // "metric/label" → values, cached by checkLabelValues
}

type promSample struct {
	metric map[string]string
	value  float64
}

type promResult struct{ samples []promSample }

// get fetches an API path and decodes its "data" into out.
func (p *prometheus) get(t *testing.T, path string, out any) {
	t.Helper()
	res, err := http.Get("http://" + p.addr + path)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var env struct {
		Status string          `json:"status"`
		Error  string          `json:"error"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.NewDecoder(res.Body).Decode(&env); err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	if env.Status != "success" {
		t.Fatalf("GET %s: %s %s", path, env.Status, env.Error)
	}
	if err := json.Unmarshal(env.Data, out); err != nil {
		t.Fatalf("GET %s: data: %v", path, err)
	}
}

// query evaluates an instant query now. A malformed query fails the test.
func (p *prometheus) query(t *testing.T, expr string) promResult {
	t.Helper()
	var data struct {
		ResultType string          `json:"resultType"`
		Result     json.RawMessage `json:"result"`
	}
	p.get(t, "/api/v1/query?"+url.Values{"query": {expr}}.Encode(), &data)
	var r promResult
	switch data.ResultType {
	case "vector":
		var vec []struct {
			Metric map[string]string `json:"metric"`
			Value  [2]any            `json:"value"`
		}
		if err := json.Unmarshal(data.Result, &vec); err != nil {
			t.Fatal(err)
		}
		for _, s := range vec {
			r.samples = append(r.samples, promSample{s.Metric, parseSampleValue(t, s.Value[1])})
		}
	case "scalar":
		var v [2]any
		if err := json.Unmarshal(data.Result, &v); err != nil {
			t.Fatal(err)
		}
		r.samples = append(r.samples, promSample{nil, parseSampleValue(t, v[1])})
	default:
		t.Fatalf("query %s: result type %q", expr, data.ResultType)
	}
	return r
}

func parseSampleValue(t *testing.T, v any) float64 {
	s, _ := v.(string)
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		t.Fatalf("sample value %v: %v", v, err)
	}
	return f
}

// checkLabelValues fails for a literal matcher value that metric does not
// have (values are looked up once per metric and label).
func (p *prometheus) checkLabelValues(t *testing.T, where, metric, braces string) {
	t.Helper()
	for _, m := range matcherRE.FindAllStringSubmatch(braces, -1) {
		label, values := m[1], m[3]
		if runTimeLabels[label] || strings.ContainsAny(values, "$.*+?()[]") {
			continue
		}
		key := metric + "/" + label
		if p.labelValues == nil {
			p.labelValues = map[string][]string{}
		}
		have, ok := p.labelValues[key]
		if !ok {
			p.get(t, "/api/v1/label/"+label+"/values?"+url.Values{"match[]": {metric}}.Encode(), &have)
			p.labelValues[key] = have
		}
		for _, v := range strings.Split(values, "|") {
			if !slices.Contains(have, v) {
				t.Errorf("%s: %s{%s=%q}: %q is not a value of %s (it has %v)", where, metric, label, values, v, label, have)
			}
		}
	}
}

// waitFor polls until expr returns data.
func (p *prometheus) waitFor(t *testing.T, timeout time.Duration, expr string) {
	t.Helper()
	waitFor(t, timeout, expr, func() bool { return len(p.query(t, expr).samples) > 0 })
}

// metricTypes returns Prometheus's metadata: metric family → type.
func (p *prometheus) metricTypes(t *testing.T) map[string]string {
	t.Helper()
	var meta map[string][]struct {
		Type string `json:"type"`
	}
	p.get(t, "/api/v1/metadata", &meta)
	out := map[string]string{}
	for name, ms := range meta {
		if len(ms) > 0 {
			out[name] = ms[0].Type
		}
	}
	return out
}

// checkRuleHealth waits until Prometheus has evaluated every loaded rule and
// fails on any rule whose evaluation errs against kvd's real series (a
// many-to-many match, a wrong function argument…), or that names a metric
// kvd does not export (types: Prometheus's metadata), which evaluates
// without error and never fires.
func (p *prometheus) checkRuleHealth(t *testing.T, types map[string]string) {
	t.Helper()
	type rule struct {
		Name, Health, LastError, Query string
	}
	var rules []rule
	waitFor(t, 10*time.Second, "every alert rule evaluated", func() bool {
		var data struct {
			Groups []struct{ Rules []rule } `json:"groups"`
		}
		p.get(t, "/api/v1/rules", &data)
		rules = rules[:0]
		for _, g := range data.Groups {
			rules = append(rules, g.Rules...)
		}
		for _, r := range rules {
			if r.Health == "unknown" {
				return false
			}
		}
		return len(rules) > 0
	})
	var names []string
	for _, r := range rules {
		names = append(names, r.Name)
		if r.Health != "ok" {
			t.Errorf("alert rule %s: health %s: %s", r.Name, r.Health, r.LastError)
		}
		// A name kvd does not export evaluates as healthy and never fires.
		for _, m := range selectorRE.FindAllStringSubmatch(r.Query, -1) {
			if metricType(types, m[1]) == "" {
				t.Errorf("alert rule %s: %s is not a metric kvd exports\n  %s", r.Name, m[1], r.Query)
			}
		}
	}
	sort.Strings(names)
	t.Logf("alert rules evaluated by Prometheus: %d (%s)", len(rules), strings.Join(names, ", "))
	if len(rules) == 0 {
		t.Errorf("Prometheus loaded no rules from %s", alertRules)
	}
}
