package tests

import (
	"encoding/json"
	"os"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"

	"kvd/bench"
	"kvd/config"
	"kvd/ingress"
	"kvd/probe"
	"kvd/server/options"
	"kvd/tenant"
)

// defaultValues are the config file's defaults as the packages that apply
// them name them, keyed by the field's dotted path. Each is stated once,
// in its package; the shipped file, config.Default and README must agree.
func defaultValues() map[string]any {
	return map[string]any{
		"node_capacity":                   tenant.DefaultCapacity,
		"default_throttle_reserved_units": tenant.Limit(tenant.DefaultReserved),
		"default_throttle_hard_limit":     tenant.Limit(tenant.DefaultHardLimit),
		"read_unit_size":                  tenant.DefaultReadUnitSize,
		"write_unit_size":                 tenant.DefaultWriteUnitSize,
		"max_connections_per_bucket":      options.DefaultMaxConnectionsPerBucket,
		"max_connections":                 options.DefaultMaxConnections,
		"max_throttle_wait_ms":            options.DefaultMaxThrottleWait.Milliseconds(),
		"max_item_size":                   options.DefaultMaxItemSize,
		"max_frame_size":                  options.DefaultMaxFrameSize,
		"idle_timeout_ms":                 options.DefaultIdleTimeout.Milliseconds(),
		"item_cache_bytes":                0, // a quarter of the memory
		"block_cache_bytes":               0, // a sixteenth of the memory, at most 512 MiB
		"wal_sync":                        options.DefaultWALSync,
		"text_protocol":                   options.DefaultTextProtocol,
		"metrics_bucket_limit":            options.DefaultMetricsBucketLimit,
		"ingress.tickets":                 ingress.DefaultNodeTickets,
		"ingress.max_queue_depth":         ingress.DefaultMaxQueueDepth,
		"ingress.queue_timeout_ms":        ingress.DefaultQueueTimeout.Milliseconds(),
		"ingress.fair_dequeue":            true, // ingress.Options.FIFO false
		"ingress.probe.interval_ms":       probe.DefaultInterval.Milliseconds(),
		"ingress.probe.min":               probe.DefaultMin,
		"ingress.probe.max":               probe.DefaultMax,
		"ingress.probe.initial":           0, // 2×GOMAXPROCS
		"ingress.probe.read_write_ratio":  probe.DefaultReadWriteRatio,
		"ingress.probe.ema_weight":        probe.DefaultEMAWeight,
		"ingress.probe.step":              probe.DefaultStep,
	}
}

// notDefaults are fields the shipped file sets to something other than a
// default on purpose (an example), not numbers or switches.
var notDefaults = map[string]bool{"anonymous_bucket": true, "buckets": true, "users": true}

// flatten returns the leaves of a JSON object by dotted path, each as its
// JSON text.
func flatten(t *testing.T, raw []byte, prefix string, out map[string]string) {
	t.Helper()
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil {
		t.Fatalf("%s: %v", prefix, err)
	}
	for k, v := range obj {
		path := prefix + k
		if len(v) > 0 && v[0] == '{' {
			flatten(t, v, path+".", out)
			continue
		}
		out[path] = string(v)
	}
}

// sameJSON reports whether JSON text got encodes the value want.
func sameJSON(t *testing.T, got string, want any) bool {
	t.Helper()
	w, err := json.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	var a, b any
	if json.Unmarshal([]byte(got), &a) != nil || json.Unmarshal(w, &b) != nil {
		return false
	}
	return reflect.DeepEqual(a, b)
}

// serverOwned are the fields config leaves nil when absent: the daemon
// passes zero and options.Options.EnsureDefaults applies the default.
var serverOwned = map[string]bool{
	"max_connections_per_bucket": true, "max_connections": true, "max_throttle_wait_ms": true,
	"max_item_size": true, "max_frame_size": true, "idle_timeout_ms": true, "wal_sync": true,
	"text_protocol": true, "metrics_bucket_limit": true,
}

// computedAtStart are the fields whose default the daemon computes when it
// starts (max_inflight_bytes: a quarter of physical memory; max_buffer_bytes:
// an eighth, options.DefaultMaxBufferBytes; system_connections: a tenth of
// max_connections): there is no
// constant to compare, and the shipped file and config.Default leave them
// out (an explicit value, 0 included, overrides the computed one).
var computedAtStart = map[string]bool{"max_inflight_bytes": true, "max_buffer_bytes": true, "system_connections": true}

func checkDefaults(t *testing.T, what string, leaves map[string]string, all bool) {
	t.Helper()
	want := defaultValues()
	keys := make([]string, 0, len(leaves))
	for k := range leaves {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		w, ok := want[k]
		switch {
		case notDefaults[strings.SplitN(k, ".", 2)[0]]:
		case computedAtStart[k] && all:
			t.Errorf("%s states %s = %s: leave it out, the daemon computes its default", what, k, leaves[k])
		case computedAtStart[k]:
		case !ok:
			t.Errorf("%s states %s = %s, but no named default is known for it: add it to defaultValues", what, k, leaves[k])
		case !sameJSON(t, leaves[k], w):
			t.Errorf("%s states %s = %s, but its default is %v", what, k, leaves[k], w)
		}
	}
	if all {
		for k := range want {
			if _, ok := leaves[k]; !ok && !serverOwned[k] {
				t.Errorf("%s has no %s", what, k)
			}
			if _, ok := leaves[k]; ok && serverOwned[k] {
				t.Errorf("%s states the server's %s = %s: leave it nil, the server applies its default", what, k, leaves[k])
			}
		}
	}
}

// TestDefaultsShippedConfig: every number and switch the shipped
// config/serverless.json states is the named default it documents, and
// config.Default fills in exactly those defaults, except the server's,
// which it leaves out for the server to apply.
func TestDefaultsShippedConfig(t *testing.T) {
	raw, err := os.ReadFile("../config/serverless.json")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := config.Parse(raw); err != nil {
		t.Fatalf("shipped config: %v", err)
	}
	shipped := map[string]string{}
	flatten(t, raw, "", shipped)
	checkDefaults(t, "config/serverless.json", shipped, false)

	def, err := json.Marshal(config.Default())
	if err != nil {
		t.Fatal(err)
	}
	leaves := map[string]string{}
	flatten(t, def, "", leaves)
	checkDefaults(t, "config.Default()", leaves, true)
}

// TestDefaultsReadme: README's config table gives the same defaults.
func TestDefaultsReadme(t *testing.T) {
	raw, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(raw), "| field | default | meaning |\n|---|---|---|\n")
	if !ok {
		t.Fatal("README has no config table (| field | default | meaning |)")
	}
	table, _, _ = strings.Cut(table, "\n\n")
	leaves := map[string]string{}
	pair := regexp.MustCompile("`([a-z_]+)` ([0-9.]+)")
	for _, row := range strings.Split(table, "\n") {
		cells := strings.Split(strings.Trim(row, "|"), "|")
		if len(cells) < 2 {
			t.Fatalf("README config table row %q", row)
		}
		names := strings.Split(strings.TrimSpace(cells[0]), " / ")
		values := strings.Split(strings.TrimSpace(cells[1]), " / ")
		if len(names) == 1 && len(pair.FindAllString(values[0], -1)) > 1 {
			for _, m := range pair.FindAllStringSubmatch(values[0], -1) {
				leaves[strings.Trim(names[0], "`")+"."+m[1]] = m[2]
			}
			continue
		}
		if len(names) != len(values) {
			t.Fatalf("README config table row %q: %d names, %d values", row, len(names), len(values))
		}
		for i, n := range names {
			v := strings.Trim(values[i], "`")
			if v == "none" || v == "[]" {
				continue
			}
			leaves[strings.Trim(n, "`")] = v
		}
	}
	if len(leaves) < 15 {
		t.Fatalf("read only %d defaults from README's table: %v", len(leaves), leaves)
	}
	checkDefaults(t, "README", leaves, false)
}

// TestDefaultsBenchUnits: kvbench computes units with the server's unit
// sizes when the server does not report them; bench cannot import tenant,
// so it states them and this test holds them equal.
func TestDefaultsBenchUnits(t *testing.T) {
	if bench.DefaultReadUnitSize != tenant.DefaultReadUnitSize || bench.DefaultWriteUnitSize != tenant.DefaultWriteUnitSize {
		t.Errorf("bench unit sizes %d/%d, tenant's %d/%d", bench.DefaultReadUnitSize, bench.DefaultWriteUnitSize,
			tenant.DefaultReadUnitSize, tenant.DefaultWriteUnitSize)
	}
}
