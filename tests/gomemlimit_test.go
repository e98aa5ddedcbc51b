package tests

import (
	"strings"
	"testing"

	"kvd/server/options"
)

// TestGoMemoryLimit: kvd sets the Go runtime's soft memory limit to nine
// tenths of the memory it may use (the machine's, or its cgroup's if lower),
// so that the garbage collector works harder before memory runs out, and
// GOMEMLIMIT overrides it. The runtime's own figure is on /metrics
// (go_gc_gomemlimit_bytes).
func TestGoMemoryLimit(t *testing.T) {
	t.Parallel()
	want := options.GoMemoryLimit()
	if want <= 0 {
		t.Skip("this machine's memory cannot be read (no /proc/meminfo): kvd sets no limit")
	}
	for _, c := range []struct {
		env  string
		want float64
		log  string
	}{
		{"GOMEMLIMIT=", float64(want), `"go memory limit" bytes=`},
		{"GOMEMLIMIT=200MiB", 200 << 20, `"go memory limit" from=GOMEMLIMIT value=200MiB`},
	} {
		metrics := freeAddr(t)
		k := newKVD(t, testConfig)
		k.Env = []string{c.env}
		k.start("--metrics-listen", metrics)
		got, err := scrapeMetric(metrics, "go_gc_gomemlimit_bytes")
		if err != nil || got != c.want {
			t.Errorf("%s: go_gc_gomemlimit_bytes %v (%v), want %v", c.env, got, err, c.want)
		}
		if !strings.Contains(k.Log(), c.log) {
			t.Errorf("%s: no %q in kvd's log", c.env, c.log)
		}
		k.Stop()
	}
}
