package tests

import (
	"context"
	"flag"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

var caslapSeconds = flag.Int("caslap-seconds", 2, "TestMemcaslapText: seconds per memcaslap run")

// TestMemcaslapText drives kvd with memcaslap's text-protocol load (90%
// GET, 10% SET, 10% of GETs verified): no miss, no failed verification, and
// a throughput of at least 0.85 of kvd's own binary throughput measured in
// the same test, alternating text and binary runs and comparing medians of
// three. memcached's text throughput on the same load is logged beside it.
func TestMemcaslapText(t *testing.T) {
	bin := requireTool(t, "memcaslap")
	k := startKVD(t, testConfig)
	mcAddr := startMemcached(t)
	var textTPS, binTPS, mcTPS []float64
	for range 3 {
		textTPS = append(textTPS, caslap(t, bin, k.Addr, false))
		binTPS = append(binTPS, caslap(t, bin, k.Addr, true))
		mcTPS = append(mcTPS, caslap(t, bin, mcAddr, false))
	}
	txt, b, m := median(textTPS), median(binTPS), median(mcTPS)
	t.Logf("memcaslap -T 2 -c 16 -v 0.1, %d s runs, medians of 3: kvd text %.0f TPS, kvd binary %.0f TPS (text/binary %.2f), memcached text %.0f TPS (kvd text/memcached %.2f)",
		*caslapSeconds, txt, b, txt/b, m, txt/m)
	if txt < 0.85*b {
		t.Errorf("kvd text TPS %.0f < 0.85 × kvd binary TPS %.0f (runs: text %v, binary %v)", txt, b, textTPS, binTPS)
	}
	if !k.Alive() {
		t.Errorf("kvd died during memcaslap")
	}
}

var tpsPattern = regexp.MustCompile(`TPS: (\d+)`)

// caslap runs memcaslap against addr and returns its TPS, failing the test
// on any miss, failed verification or error it reports.
func caslap(t *testing.T, bin, addr string, binary bool) float64 {
	t.Helper()
	args := []string{"-s", addr, "-t", strconv.Itoa(*caslapSeconds) + "s", "-T", "2", "-c", "16", "-v", "0.1"}
	if binary {
		args = append(args, "-B")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(*caslapSeconds+30)*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
	text := string(out)
	if err != nil {
		t.Fatalf("memcaslap %v: %v\n%s", args, err, text)
	}
	for _, name := range []string{"get_misses", "verify_misses", "verify_failed"} {
		if v, ok := memcaslapStat(text, name); !ok || v != 0 {
			t.Fatalf("memcaslap %v: %s = %d (found %v), want 0\n%s", args, name, v, ok, text)
		}
	}
	for _, line := range strings.Split(text, "\n") {
		if l := strings.ToLower(line); strings.Contains(l, "error") {
			t.Fatalf("memcaslap %v reported: %s", args, line)
		}
	}
	m := tpsPattern.FindStringSubmatch(text)
	if m == nil {
		t.Fatalf("memcaslap %v printed no TPS:\n%s", args, text)
	}
	v, _ := strconv.ParseFloat(m[1], 64)
	return v
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}
