package tests

import (
	"fmt"
	"strings"
	"testing"

	mc "kvd/protocol/binary"
)

// TestItemCacheBytes: item_cache_bytes sets the resident item cache's
// budget. With 1 MiB, 3000 items of 1 KiB cannot all stay resident: the
// cache holds at most its budget and evicts; left out, the default (a
// quarter of the memory, at least 64 MiB) keeps them all and answers their
// GETs from memory; -1 disables the cache, so every GET misses it.
func TestItemCacheBytes(t *testing.T) {
	const items = 3000
	value := strings.Repeat("v", 1024)
	run := func(t *testing.T, fields map[string]any) map[string]float64 {
		metrics := freeAddr(t)
		k := startKVD(t, configWith(t, testConfig, fields), "--metrics-listen", metrics)
		c := dialRaw(t, k.Addr)
		var reqs []*mc.Request
		for i := range items {
			r := set(fmt.Sprintf("item-%d", i), value)
			r.Opcode = mc.OpSetQ
			reqs = append(reqs, r)
		}
		c.send(append(reqs, noop())...)
		if res := c.recv(); res.Opcode != mc.OpNoop {
			t.Fatalf("SETQ of %d items: got %v status %v before NOOP", items, res.Opcode, res.Status)
		}
		for i := range items {
			if res := c.call(get(fmt.Sprintf("item-%d", i))); res.Status != mc.StatusOK || string(res.Value) != value {
				t.Fatalf("GET item-%d: status %v, %d bytes", i, res.Status, len(res.Value))
			}
		}
		out := map[string]float64{}
		for _, name := range []string{`kvd_item_cache_bytes{state="capacity"}`, `kvd_item_cache_bytes{state="resident"}`,
			"kvd_item_cache_items", `kvd_item_cache_lookups_total{result="hit"}`, "kvd_item_cache_evictions_total"} {
			v, err := scrapeMetric(metrics, name)
			if err != nil {
				t.Fatal(err)
			}
			out[name] = v
		}
		return out
	}
	t.Run("1MiB", func(t *testing.T) {
		m := run(t, map[string]any{"item_cache_bytes": 1 << 20})
		if m[`kvd_item_cache_bytes{state="capacity"}`] != 1<<20 {
			t.Errorf("capacity %v, want %d", m[`kvd_item_cache_bytes{state="capacity"}`], 1<<20)
		}
		if r := m[`kvd_item_cache_bytes{state="resident"}`]; r > 1<<20 || r == 0 {
			t.Errorf("resident bytes %v, want in (0, 1 MiB]", r)
		}
		if m["kvd_item_cache_items"] >= items/2 || m["kvd_item_cache_evictions_total"] == 0 {
			t.Errorf("%v items resident, %v evictions: want fewer than %d resident and evictions", m["kvd_item_cache_items"],
				m["kvd_item_cache_evictions_total"], items/2)
		}
	})
	t.Run("default", func(t *testing.T) {
		m := run(t, nil)
		if m[`kvd_item_cache_bytes{state="capacity"}`] < 64<<20 {
			t.Errorf("default capacity %v, want at least 64 MiB", m[`kvd_item_cache_bytes{state="capacity"}`])
		}
		if m["kvd_item_cache_items"] != items || m["kvd_item_cache_evictions_total"] != 0 ||
			m[`kvd_item_cache_lookups_total{result="hit"}`] < items {
			t.Errorf("default: %v items resident, %v evictions, %v hits; want %d, 0, ≥ %d", m["kvd_item_cache_items"],
				m["kvd_item_cache_evictions_total"], m[`kvd_item_cache_lookups_total{result="hit"}`], items, items)
		}
	})
	t.Run("disabled", func(t *testing.T) {
		m := run(t, map[string]any{"item_cache_bytes": -1})
		if m[`kvd_item_cache_bytes{state="capacity"}`] != 0 || m["kvd_item_cache_items"] != 0 ||
			m[`kvd_item_cache_lookups_total{result="hit"}`] != 0 {
			t.Errorf("disabled: %v", m)
		}
	})
}

// TestBlockCacheBytes: block_cache_bytes sizes Pebble's block cache, as
// kvd_pebble_block_cache_bytes{state="capacity"} shows.
func TestBlockCacheBytes(t *testing.T) {
	t.Parallel()
	metrics := freeAddr(t)
	startKVD(t, configWith(t, testConfig, map[string]any{"block_cache_bytes": 32 << 20}), "--metrics-listen", metrics)
	if v, err := scrapeMetric(metrics, `kvd_pebble_block_cache_bytes{state="capacity"}`); err != nil || v != 32<<20 {
		t.Fatalf(`kvd_pebble_block_cache_bytes{state="capacity"} = %v (%v), want %d`, v, err, 32<<20)
	}
}
