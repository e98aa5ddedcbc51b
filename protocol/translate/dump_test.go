package translate

import (
	"fmt"
	"strings"
	"testing"
)

func dumpOf(t *testing.T, line string) *Dump {
	t.Helper()
	return DumpOf(decoded(t, line).Command())
}

// list runs d to its end over n items named by key(i) (in key order),
// each with a value of size bytes, a chunk a call, and returns the reply
// and the number of chunks.
func list(t *testing.T, d *Dump, n, size int, key func(int) string) (string, int) {
	t.Helper()
	var out []byte
	chunks := 0
	for !d.Finished() {
		if chunks++; chunks > n+2 {
			t.Fatalf("%d chunks for %d items", chunks, n)
		}
		var err error
		out, err = d.Run(out, func(after []byte, fn func(DumpItem) bool) error {
			for i := range n {
				k := []byte(key(i))
				if after != nil && string(k) <= string(after) {
					continue
				}
				if !fn(DumpItem{Key: k, Size: size, Expiry: now + 100, Accessed: now, CAS: 7}) {
					return nil
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return string(out), chunks
}

// TestDumpRequests: the listings' arguments as memcached 1.6.18 takes them
// (its refusals were read off it): class 1 lists, another class is empty,
// malformed ones are refused with memcached's lines.
func TestDumpRequests(t *testing.T) {
	for line, want := range map[string]string{
		"stats cachedump 1 0\r\n":       "ITEM k0 [3 b; 1700000100 s]\r\nITEM k1 [3 b; 1700000100 s]\r\nEND\r\n",
		"stats cachedump 1 1\r\n":       "ITEM k0 [3 b; 1700000100 s]\r\nEND\r\n",
		"stats cachedump 1 0 extra\r\n": "ITEM k0 [3 b; 1700000100 s]\r\nITEM k1 [3 b; 1700000100 s]\r\nEND\r\n",
		"stats cachedump 0 0\r\n":       "END\r\n",
		"stats cachedump 63 0\r\n":      "END\r\n",
		"stats cachedump 64 0\r\n":      "CLIENT_ERROR Illegal slab id\r\n",
		"stats cachedump 1\r\n":         "CLIENT_ERROR bad command line\r\n",
		"stats cachedump x 0\r\n":       "CLIENT_ERROR bad command line format\r\n",
		"stats cachedump 1 -1\r\n":      "CLIENT_ERROR bad command line format\r\n",
		"lru_crawler metadump all\r\n":  "key=k0 exp=1700000100 la=1700000000 cas=7 fetch=no cls=1 size=64\nkey=k1 exp=1700000100 la=1700000000 cas=7 fetch=no cls=1 size=64\nEND\r\n",
		"lru_crawler metadump hash\r\n": "key=k0 exp=1700000100 la=1700000000 cas=7 fetch=no cls=1 size=64\nkey=k1 exp=1700000100 la=1700000000 cas=7 fetch=no cls=1 size=64\nEND\r\n",
		"lru_crawler metadump 2,1,\r\n": "key=k0 exp=1700000100 la=1700000000 cas=7 fetch=no cls=1 size=64\nkey=k1 exp=1700000100 la=1700000000 cas=7 fetch=no cls=1 size=64\nEND\r\n",
		"lru_crawler metadump 2,3\r\n":  "END\r\n",
		"lru_crawler metadump 0\r\n":    "BADCLASS invalid class id\r\n",
		"lru_crawler metadump 64\r\n":   "BADCLASS invalid class id\r\n",
		"lru_crawler metadump 1,x\r\n":  "BADCLASS invalid class id\r\n",
		"lru_crawler metadump ALL\r\n":  "BADCLASS invalid class id\r\n",
		"lru_crawler metadump ,\r\n":    "NOTSTARTED no items to crawl\r\n",
	} {
		if got, _ := list(t, dumpOf(t, line), 2, 3, func(i int) string { return fmt.Sprint("k", i) }); got != want {
			t.Errorf("%q: %q, want %q", line, got, want)
		}
	}
}

// TestDumpBounds: a cachedump reply stops before 2 MiB and leaves out keys
// that are not one token; a metadump URI-encodes them and lists all, a
// chunk of about 256 KiB at a time.
func TestDumpBounds(t *testing.T) {
	key := func(i int) string { return fmt.Sprintf("%0200d", i) }
	got, _ := list(t, dumpOf(t, "stats cachedump 1 0\r\n"), 20000, 1, key)
	if n := strings.Count(got, "ITEM "); len(got) > 2<<20 || len(got) < 2<<20-300 || !strings.HasSuffix(got, "\r\nEND\r\n") {
		t.Errorf("cachedump of 20,000 200-byte keys: %d lines, %d bytes; want under 2 MiB, full, END", n, len(got))
	}
	if got, _ := list(t, dumpOf(t, "stats cachedump 1 0\r\n"), 3, 1, func(i int) string { return []string{"a b", "c\x01", "d"}[i] }); got != "ITEM d [1 b; 1700000100 s]\r\nEND\r\n" {
		t.Errorf("cachedump of keys with a space, a control byte and neither: %q", got)
	}
	got, chunks := list(t, dumpOf(t, "lru_crawler metadump all\r\n"), 30000, 1, key)
	if n := strings.Count(got, "\nkey="); n != 30000-1 || !strings.HasSuffix(got, "\nEND\r\n") || chunks < len(got)/dumpChunk {
		t.Errorf("metadump of 30,000 200-byte keys (6.9 MB): %d lines after the first, %d bytes in %d chunks", n, len(got), chunks)
	}
	if got, _ := list(t, dumpOf(t, "lru_crawler metadump all\r\n"), 1, 1, func(int) string { return "a b%~\xff" }); !strings.HasPrefix(got, "key=a%20b%25~%FF exp=") {
		t.Errorf("metadump of a key with a space, %%, ~ and 0xff: %q", got)
	}
}
