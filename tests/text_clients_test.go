package tests

import (
	"os"
	"os/exec"
	"strings"
	"testing"
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
