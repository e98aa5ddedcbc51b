package tests

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bradfitz/gomemcache/memcache"
)

// debianPython is Debian's interpreter, which has python3-pymemcache (the
// python3 first on PATH may be another one without it).
const debianPython = "/usr/bin/python3"

// requirePymemcache skips loudly without Debian's python3-pymemcache, and
// fails with KVD_REQUIRE_TOOLS=1.
func requirePymemcache(t *testing.T) {
	t.Helper()
	err := exec.Command(debianPython, "-c", "import pymemcache").Run()
	if err == nil {
		return
	}
	msg := "MISSING TOOL pymemcache: install it with `apt-get install -y python3-pymemcache` (" + err.Error() + ")"
	if os.Getenv("KVD_REQUIRE_TOOLS") == "1" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// TestTextPymemcache runs Python's pymemcache, unchanged, through every
// call of its base client (testdata/pymemcache_suite.py) against kvd.
func TestTextPymemcache(t *testing.T) {
	requirePymemcache(t)
	k := startKVD(t, testConfig)
	out, err := exec.Command(debianPython, "testdata/pymemcache_suite.py", k.Addr).CombinedOutput()
	if err != nil {
		t.Fatalf("pymemcache suite failed: %v\n%s\nkvd log:\n%s", err, out, k.tail())
	}
	if !strings.Contains(string(out), " passed, 0 failed") {
		t.Fatalf("pymemcache suite printed no verdict:\n%s", out)
	}
	t.Logf("pymemcache: %s", strings.TrimSpace(string(out)))
}

// TestTextGomemcache drives kvd with github.com/bradfitz/gomemcache, Go's
// usual memcached client (text protocol), through every call it offers,
// unchanged: only the address is kvd's.
func TestTextGomemcache(t *testing.T) {
	k := startKVD(t, testConfig)
	mc := memcache.New(k.Addr)
	mc.Timeout = 5 * time.Second
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	want := func(what string, err, target error) {
		t.Helper()
		if !errors.Is(err, target) {
			t.Fatalf("%s: got %v, want %v", what, err, target)
		}
	}
	must("Ping", mc.Ping())
	must("FlushAll", mc.FlushAll())
	must("Set", mc.Set(&memcache.Item{Key: "a", Value: []byte("alpha"), Flags: 7}))
	it, err := mc.Get("a")
	must("Get", err)
	if string(it.Value) != "alpha" || it.Flags != 7 {
		t.Fatalf("Get a: %q flags %d", it.Value, it.Flags)
	}
	_, err = mc.Get("missing")
	want("Get missing", err, memcache.ErrCacheMiss)
	want("Add existing", mc.Add(&memcache.Item{Key: "a", Value: []byte("x")}), memcache.ErrNotStored)
	must("Add new", mc.Add(&memcache.Item{Key: "b", Value: []byte("beta")}))
	want("Replace missing", mc.Replace(&memcache.Item{Key: "zz", Value: []byte("x")}), memcache.ErrNotStored)
	must("Replace", mc.Replace(&memcache.Item{Key: "b", Value: []byte("BETA")}))
	must("Append", mc.Append(&memcache.Item{Key: "b", Value: []byte("++")}))
	must("Prepend", mc.Prepend(&memcache.Item{Key: "b", Value: []byte("--")}))
	want("Append missing", mc.Append(&memcache.Item{Key: "zz", Value: []byte("x")}), memcache.ErrNotStored)
	it, err = mc.Get("b")
	must("Get b", err)
	if string(it.Value) != "--BETA++" {
		t.Fatalf("after append/prepend: %q", it.Value)
	}
	// CompareAndSwap: Get fetched with gets; a second swap with the old CAS fails.
	it.Value = []byte("swapped")
	must("CompareAndSwap", mc.CompareAndSwap(it))
	it.Value = []byte("again")
	want("CompareAndSwap stale", mc.CompareAndSwap(it), memcache.ErrCASConflict)
	keys := make([]string, 40)
	for i := range keys {
		keys[i] = "multi" + strconv.Itoa(i)
		if i%2 == 0 {
			must("Set multi", mc.Set(&memcache.Item{Key: keys[i], Value: []byte(keys[i])}))
		}
	}
	got, err := mc.GetMulti(keys)
	must("GetMulti", err)
	if len(got) != 20 || string(got["multi4"].Value) != "multi4" {
		t.Fatalf("GetMulti: %d items", len(got))
	}
	must("Set n", mc.Set(&memcache.Item{Key: "n", Value: []byte("10")}))
	if v, err := mc.Increment("n", 5); err != nil || v != 15 {
		t.Fatalf("Increment: %d %v", v, err)
	}
	if v, err := mc.Decrement("n", 100); err != nil || v != 0 {
		t.Fatalf("Decrement: %d %v", v, err)
	}
	_, err = mc.Increment("nothing", 1)
	want("Increment missing", err, memcache.ErrCacheMiss)
	must("Touch", mc.Touch("a", 100))
	want("Touch missing", mc.Touch("nothing", 100), memcache.ErrCacheMiss)
	it, err = mc.GetAndTouch("a", 200)
	must("GetAndTouch", err)
	if string(it.Value) != "alpha" {
		t.Fatalf("GetAndTouch: %q", it.Value)
	}
	_, err = mc.GetAndTouch("nothing", 1)
	want("GetAndTouch missing", err, memcache.ErrCacheMiss)
	must("Set expiring", mc.Set(&memcache.Item{Key: "e", Value: []byte("x"), Expiration: -1}))
	_, err = mc.Get("e")
	want("Get of an item set with a negative expiration", err, memcache.ErrCacheMiss)
	must("Delete", mc.Delete("a"))
	want("Delete missing", mc.Delete("a"), memcache.ErrCacheMiss)
	big := make([]byte, 2<<20)
	if err := mc.Set(&memcache.Item{Key: "big", Value: big}); err == nil {
		t.Fatal("Set of 2 MiB (over max_item_size): no error")
	}
	must("Set after a refused one", mc.Set(&memcache.Item{Key: "after", Value: []byte("ok")}))
	must("DeleteAll", mc.DeleteAll())
	_, err = mc.Get("b")
	want("Get after DeleteAll", err, memcache.ErrCacheMiss)
	must("Close", mc.Close())
}

var caslapSeconds = flag.Int("caslap-seconds", 2, "TestMemcaslapText: seconds per memcaslap run")

// TestMemcaslapText drives kvd with memcaslap's text-protocol load (90%
// GET, 10% SET, 10% of GETs verified) and asserts no miss, no failed
// verification and a live server. It also measures, and logs, kvd's text
// throughput against its own binary throughput and memcached's text
// throughput (alternating runs, medians of three, WAL sync off, throttling
// on but not binding) — the
// issue's figure; a test never asserts speed, so the ratio is not checked
// here (run with -v to read it).
func TestMemcaslapText(t *testing.T) {
	bin := requireTool(t, "memcaslap")
	// WAL sync off: the fsync of the 10% SETs would dominate and make the
	// comparison one of disk noise, not of the protocols (memcached keeps
	// nothing on disk either).
	// A node capacity no load here reaches: at the default 25,000 units/s
	// the throttle, not the protocol, would set both of kvd's figures.
	k := startKVD(t, configWith(t, testConfig, map[string]any{"wal_sync": false, "node_capacity": 1_000_000_000}))
	mcAddr := startMemcached(t)
	var textTPS, binTPS, mcTPS []float64
	runs := []func(){
		func() { textTPS = append(textTPS, caslap(t, bin, k.Addr, false)) },
		func() { binTPS = append(binTPS, caslap(t, bin, k.Addr, true)) },
		func() { mcTPS = append(mcTPS, caslap(t, bin, mcAddr, false)) },
	}
	for round := range 3 { // each round starts one run later, so that none always follows the same one
		for i := range runs {
			runs[(round+i)%len(runs)]()
		}
	}
	txt, b, m := median(textTPS), median(binTPS), median(mcTPS)
	t.Logf("memcaslap -T 2 -c 16 -v 0.1, %d s runs, medians of 3: kvd text %.0f TPS, kvd binary %.0f TPS (text/binary %.2f), memcached text %.0f TPS (kvd text/memcached %.2f)",
		*caslapSeconds, txt, b, txt/b, m, txt/m)
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

// median is the median of xs (the upper one of an even count).
func median[T cmp.Ordered](xs []T) T {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}
