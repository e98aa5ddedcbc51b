package engine

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime/debug"
	"strconv"
	"testing"
	"time"
)

// t0 is the "now" most tests run at; items expiring after it are live.
const t0 = 1_700_000_000

// testItemCacheSize is the Options.ItemCacheSize openTest starts from: 0
// (the default cache) in TestMain's first pass, -1 (disabled) in its second.
var testItemCacheSize int64

// TestMain runs every test twice: with the resident item cache at its
// default size, then with it disabled, so both paths keep memcached
// semantics. Tests that need a given cache set Options.ItemCacheSize
// themselves. Benchmarks run in the first pass only.
func TestMain(m *testing.M) {
	flag.Parse()
	code := m.Run()
	if os.Getenv(childDirEnv) != "" {
		os.Exit(code)
	}
	_ = flag.Set("test.bench", "")
	fmt.Println("engine: second pass, item cache disabled")
	testItemCacheSize = -1
	if code2 := m.Run(); code == 0 {
		code = code2
	}
	os.Exit(code)
}

// openTest opens a DB in a fresh temp dir with a quiet logger, the
// sweeper's clock stopped at t0 (so it never expires what tests store) and
// the item cache of the current TestMain pass, then applies mod.
func openTest(t testing.TB, mod func(*Options)) *DB {
	t.Helper()
	opts := Options{Dir: t.TempDir(), WALSync: true, Logger: quietLogger(), Now: clockAt(t0),
		ItemCacheSize: testItemCacheSize}
	if mod != nil {
		mod(&opts)
	}
	db, err := Open(opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

func clockAt(sec int64) func() time.Time {
	return func() time.Time { return time.Unix(sec, 0) }
}

func quietLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// newBucketT creates bucket name in db.
func newBucketT(t testing.TB, db *DB, name string) *Bucket {
	t.Helper()
	b, err := db.CreateBucket(name, nil)
	if err != nil {
		t.Fatalf("CreateBucket(%q): %v", name, err)
	}
	return b
}

func mustStore(t testing.TB, b *Bucket, mode StoreMode, key, val string, flags, exp uint32) uint64 {
	t.Helper()
	cas, err := b.Store(mode, []byte(key), []byte(val), flags, exp, 0, t0)
	if err != nil {
		t.Fatalf("Store(%d, %q): %v", mode, key, err)
	}
	return cas
}

// wantItem checks that key holds val with flags and expiry at now.
func wantItem(t testing.TB, b *Bucket, key, val string, flags, exp uint32, now uint32) Item {
	t.Helper()
	it, err := b.Get([]byte(key), now, nil)
	if err != nil {
		t.Fatalf("Get(%q): %v", key, err)
	}
	if string(it.Value) != val || it.Flags != flags || it.Expiry != exp {
		t.Fatalf("Get(%q) = %q flags %d exp %d, want %q flags %d exp %d",
			key, it.Value, it.Flags, it.Expiry, val, flags, exp)
	}
	return it
}

// raceEnabled reports whether the test binary was built with -race.
func raceEnabled() bool {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return false
	}
	for _, s := range bi.Settings {
		if s.Key == "-race" {
			return s.Value == "true"
		}
	}
	return false
}

func wantErr(t testing.TB, what string, got, want error) {
	t.Helper()
	if !errors.Is(got, want) {
		t.Fatalf("%s: err = %v, want %v", what, got, want)
	}
}

func TestStoreModes(t *testing.T) {
	b := newBucketT(t, openTest(t, nil), "b")
	k := []byte("k")

	_, err := b.Store(ModeReplace, k, []byte("x"), 0, 0, 0, t0)
	wantErr(t, "REPLACE missing", err, ErrNotFound)
	_, err = b.Store(ModeAppend, k, []byte("x"), 0, 0, 0, t0)
	wantErr(t, "APPEND missing", err, ErrNotStored)
	_, err = b.Store(ModePrepend, k, []byte("x"), 0, 0, 0, t0)
	wantErr(t, "PREPEND missing", err, ErrNotStored)

	c1 := mustStore(t, b, ModeAdd, "k", "v1", 7, 0)
	_, err = b.Store(ModeAdd, k, []byte("v2"), 0, 0, 0, t0)
	wantErr(t, "ADD existing", err, ErrExists)
	c2 := mustStore(t, b, ModeReplace, "k", "v2", 8, t0+100)
	it := wantItem(t, b, "k", "v2", 8, t0+100, t0)
	if it.CAS != c2 || c2 <= c1 {
		t.Fatalf("CAS: item %d, store returned %d after %d; want equal and increasing", it.CAS, c2, c1)
	}
	c3 := mustStore(t, b, ModeSet, "k", "v3", 9, 0)
	if c3 <= c2 {
		t.Fatalf("SET CAS %d not above %d", c3, c2)
	}
	wantItem(t, b, "k", "v3", 9, 0, t0)
	if n := b.ItemCount(); n != 1 {
		t.Fatalf("ItemCount = %d, want 1", n)
	}
	if _, err := b.Store(StoreMode(9), k, nil, 0, 0, 0, t0); err == nil {
		t.Fatal("Store with invalid mode succeeded")
	}
}

func TestStoreCAS(t *testing.T) {
	b := newBucketT(t, openTest(t, nil), "b")
	k := []byte("k")
	_, err := b.Store(ModeSet, k, []byte("x"), 0, 0, 12345, t0)
	wantErr(t, "SET with CAS on missing", err, ErrNotFound)
	_, err = b.Store(ModeReplace, k, []byte("x"), 0, 0, 12345, t0)
	wantErr(t, "REPLACE with CAS on missing", err, ErrNotFound)
	_, err = b.Store(ModeAppend, k, []byte("x"), 0, 0, 12345, t0)
	wantErr(t, "APPEND with CAS on missing", err, ErrNotStored)

	c1 := mustStore(t, b, ModeSet, "k", "v1", 0, 0)
	_, err = b.Store(ModeSet, k, []byte("x"), 0, 0, c1+1, t0)
	wantErr(t, "SET with wrong CAS", err, ErrExists)
	_, err = b.Store(ModeAppend, k, []byte("x"), 0, 0, c1-1, t0)
	wantErr(t, "APPEND with wrong CAS", err, ErrExists)
	c2, err := b.Store(ModeSet, k, []byte("v2"), 3, 0, c1, t0)
	if err != nil {
		t.Fatalf("SET with matching CAS: %v", err)
	}
	_, err = b.Store(ModeReplace, k, []byte("v3"), 0, 0, c1, t0)
	wantErr(t, "REPLACE with stale CAS", err, ErrExists)
	if _, err := b.Store(ModeAppend, k, []byte("+"), 0, 0, c2, t0); err != nil {
		t.Fatalf("APPEND with matching CAS: %v", err)
	}
	wantItem(t, b, "k", "v2+", 3, 0, t0)

	// A CAS on an expired item is a CAS on a missing item.
	c4 := mustStore(t, b, ModeSet, "e", "v", 0, t0+1)
	_, err = b.Store(ModeSet, []byte("e"), []byte("x"), 0, 0, c4, t0+1)
	wantErr(t, "SET with CAS on expired", err, ErrNotFound)
}

func TestExpiredItemIsMissing(t *testing.T) {
	b := newBucketT(t, openTest(t, nil), "b")
	mustStore(t, b, ModeSet, "k", "old", 5, t0+10)
	wantItem(t, b, "k", "old", 5, t0+10, t0+9)
	_, err := b.Get([]byte("k"), t0+10, nil)
	wantErr(t, "Get at expiry", err, ErrNotFound)
	_, err = b.Touch([]byte("k"), 0, t0+10, nil)
	wantErr(t, "Touch expired", err, ErrNotFound)
	_, err = b.Store(ModeReplace, []byte("k"), []byte("x"), 0, 0, 0, t0+10)
	wantErr(t, "REPLACE expired", err, ErrNotFound)
	_, err = b.Store(ModeAppend, []byte("k"), []byte("x"), 0, 0, 0, t0+10)
	wantErr(t, "APPEND expired", err, ErrNotStored)
	if _, err := b.Store(ModeAdd, []byte("k"), []byte("new"), 1, 0, 0, t0+10); err != nil {
		t.Fatalf("ADD on expired key: %v", err)
	}
	wantItem(t, b, "k", "new", 1, 0, t0+10)
	if n := b.ItemCount(); n != 1 {
		t.Fatalf("ItemCount after ADD over expired = %d, want 1", n)
	}
}

func TestAppendPrepend(t *testing.T) {
	b := newBucketT(t, openTest(t, func(o *Options) { o.MaxValueSize = 10 }), "b")
	mustStore(t, b, ModeSet, "k", "mid", 42, t0+500)
	// APPEND/PREPEND ignore the given flags and expiry.
	if _, err := b.Store(ModeAppend, []byte("k"), []byte("-end"), 1, 2, 0, t0); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Store(ModePrepend, []byte("k"), []byte("a-"), 3, 4, 0, t0); err != nil {
		t.Fatal(err)
	}
	wantItem(t, b, "k", "a-mid-end", 42, t0+500, t0)
	if _, n, err := b.StoreN(ModeAppend, []byte("k"), nil, 0, 0, 0, t0); err != nil || n != 9 {
		t.Fatalf("StoreN(APPEND nothing) = %d, %v; want length 9", n, err)
	}
	_, err := b.Store(ModeAppend, []byte("k"), []byte("XY"), 0, 0, 0, t0)
	wantErr(t, "APPEND over MaxValueSize", err, ErrNotStored)
	_, err = b.Store(ModePrepend, []byte("k"), []byte("XY"), 0, 0, 0, t0)
	wantErr(t, "PREPEND over MaxValueSize", err, ErrNotStored)
	wantItem(t, b, "k", "a-mid-end", 42, t0+500, t0)
	if _, err := b.Store(ModeAppend, []byte("k"), []byte("!"), 0, 0, 0, t0); err != nil {
		t.Fatalf("APPEND to exactly MaxValueSize: %v", err)
	}
	_, err = b.Store(ModeSet, []byte("big"), []byte("01234567890"), 0, 0, 0, t0)
	wantErr(t, "SET over MaxValueSize", err, ErrTooBig)
}

func TestArith(t *testing.T) {
	b := newBucketT(t, openTest(t, nil), "b")
	const max64 = "18446744073709551615"
	tests := []struct {
		name    string
		start   string // "" = missing, "\x00" = empty value
		incr    bool
		delta   uint64
		create  bool
		want    uint64
		wantErr error
	}{
		{"incr", "10", true, 5, false, 15, nil},
		{"decr", "10", false, 3, false, 7, nil},
		{"incr wraps", max64, true, 2, false, 1, nil},
		{"decr stops at zero", "3", false, 10, false, 0, nil},
		{"leading zeros", "007", true, 1, false, 8, nil},
		{"20 digits", "00000000000000000009", true, 1, false, 10, nil},
		// The rows below are Debian memcached 1.6.18's answers (strtoull).
		{"21 digits", "000000000000000000009", true, 1, false, 10, nil},
		{"43 digits", "0000000000000000000000000000000000000000042", false, 1, false, 41, nil},
		{"max with zeros", "000" + max64, false, 1, false, 18446744073709551614, nil},
		{"over uint64", "18446744073709551616", true, 1, false, 0, ErrNonNumeric},
		{"21 digits over", "111111111111111111110", true, 1, false, 0, ErrNonNumeric},
		{"non-numeric", "12a", true, 1, false, 0, ErrNonNumeric},
		{"hex", "0x10", true, 1, false, 0, ErrNonNumeric},
		{"trailing space", "12 ", true, 1, false, 13, nil},
		{"space then text", "12 abc", true, 1, false, 13, nil},
		{"leading white space", "\t\n 7", true, 1, false, 8, nil},
		{"trailing tab", "12\t", false, 1, false, 11, nil},
		{"trailing NUL", "12\x00z", true, 1, false, 13, nil},
		{"plus sign", "+12", true, 1, false, 13, nil},
		{"minus zero", "-0", true, 1, false, 1, nil},
		{"negative", "-1", false, 1, false, 0, ErrNonNumeric},
		{"sign only", "-", true, 1, false, 0, ErrNonNumeric},
		{"space only", " ", true, 1, false, 0, ErrNonNumeric},
		{"empty value", "\x00", true, 1, false, 0, ErrNonNumeric},
		{"missing, create", "", true, 5, true, 100, nil},
		{"missing, no create", "", true, 5, false, 0, ErrNotFound},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			key := "k" + strconv.Itoa(i)
			switch tt.start {
			case "":
			case "\x00":
				mustStore(t, b, ModeSet, key, "", 9, 0)
			default:
				mustStore(t, b, ModeSet, key, tt.start, 9, t0+50)
			}
			n, cas, err := b.Arith([]byte(key), tt.incr, tt.delta, 100, t0+77, tt.create, 0, t0)
			if tt.wantErr != nil {
				wantErr(t, "Arith", err, tt.wantErr)
				return
			}
			if err != nil || n != tt.want {
				t.Fatalf("Arith = %d, %v; want %d", n, err, tt.want)
			}
			flags, exp := uint32(9), uint32(t0+50) // existing items keep both
			if tt.start == "" {
				flags, exp = 0, t0+77
			}
			it := wantItem(t, b, key, strconv.FormatUint(tt.want, 10), flags, exp, t0)
			if it.CAS != cas {
				t.Fatalf("item CAS %d, Arith returned %d", it.CAS, cas)
			}
		})
	}
}

func TestArithCAS(t *testing.T) {
	b := newBucketT(t, openTest(t, nil), "b")
	_, _, err := b.Arith([]byte("absent"), true, 1, 0, 0, false, 99, t0)
	wantErr(t, "Arith with CAS on missing", err, ErrNotFound)
	// A missing item is created whatever the CAS says, as memcached does:
	// the CAS is compared with a live item's only.
	if n, _, err := b.Arith([]byte("new"), true, 1, 7, 0, true, 99, t0); err != nil || n != 7 {
		t.Fatalf("Arith creating with a CAS = %d, %v; want the initial value 7", n, err)
	}
	c := mustStore(t, b, ModeSet, "k", "1", 0, 0)
	_, _, err = b.Arith([]byte("k"), true, 1, 0, 0, false, c+1, t0)
	wantErr(t, "Arith with wrong CAS", err, ErrExists)
	n, c2, err := b.Arith([]byte("k"), true, 1, 0, 0, false, c, t0)
	if err != nil || n != 2 || c2 <= c {
		t.Fatalf("Arith with matching CAS = %d, %d, %v; want 2, >%d, nil", n, c2, err, c)
	}
	// An expired counter is missing: create starts over at initial.
	mustStore(t, b, ModeSet, "e", "50", 0, t0+1)
	n, _, err = b.Arith([]byte("e"), true, 1, 7, 0, true, 0, t0+1)
	if err != nil || n != 7 {
		t.Fatalf("Arith create over expired = %d, %v; want 7", n, err)
	}
}

// TestArithTouch: meta arithmetic's T sets the expiry on success, of an
// existing item or a created one, and not when the arithmetic fails.
func TestArithTouch(t *testing.T) {
	b := newBucketT(t, openTest(t, nil), "b")
	c := mustStore(t, b, ModeSet, "k", "5", 7, t0+10)
	touch := func(key string, a ArithArgs) (ArithResult, error) {
		a.Incr, a.Delta, a.Touch = true, 1, true
		return b.ArithItem([]byte(key), a, t0)
	}
	r, err := touch("k", ArithArgs{NewExpiry: t0 + 1000})
	if err != nil || r.Value != 6 || r.Expiry != t0+1000 {
		t.Fatalf("ArithItem with Touch = %+v, %v; want 6, expiry %d", r, err, t0+1000)
	}
	wantItem(t, b, "k", "6", 7, t0+1000, t0+500) // outlives the old expiry, flags kept
	if _, err := touch("k", ArithArgs{CAS: c, NewExpiry: t0 + 1}); err != ErrExists {
		t.Fatalf("ArithItem with a stale CAS = %v; want ErrExists", err)
	}
	wantItem(t, b, "k", "6", 7, t0+1000, t0+500) // the failed command touched nothing
	r, err = touch("k", ArithArgs{NewExpiry: 0})
	if err != nil || r.Expiry != 0 {
		t.Fatalf("ArithItem with Touch to 0 = %+v, %v; want expiry 0 (never)", r, err)
	}
	wantItem(t, b, "k", "7", 7, 0, t0+5000)
	r, err = touch("n", ArithArgs{Initial: 3, Create: true, Expiry: t0 + 50, NewExpiry: t0 + 60})
	if err != nil || !r.Created || r.Expiry != t0+60 {
		t.Fatalf("ArithItem creating with Touch = %+v, %v; want created, expiry %d", r, err, t0+60)
	}
	wantItem(t, b, "n", "3", 0, t0+60, t0+55)
	if _, err := touch("missing", ArithArgs{NewExpiry: t0 + 60}); err != ErrNotFound {
		t.Fatalf("ArithItem on a missing item = %v; want ErrNotFound", err)
	}
}

func TestTouch(t *testing.T) {
	b := newBucketT(t, openTest(t, nil), "b")
	_, err := b.Touch([]byte("k"), t0+5, t0, nil)
	wantErr(t, "Touch missing", err, ErrNotFound)
	c := mustStore(t, b, ModeSet, "k", "val", 3, t0+10)
	dst := make([]byte, 0, 16)
	it, err := b.Touch([]byte("k"), t0+1000, t0, dst)
	if err != nil {
		t.Fatal(err)
	}
	if string(it.Value) != "val" || it.Flags != 3 || it.Expiry != t0+1000 || it.CAS != c {
		t.Fatalf("Touch = %+v; want val, flags 3, expiry %d, CAS %d", it, t0+1000, c)
	}
	if &it.Value[0] != &dst[:1][0] {
		t.Fatal("Touch did not append the value to dst")
	}
	wantItem(t, b, "k", "val", 3, t0+1000, t0+500) // outlives the old expiry
	if _, err := b.Touch([]byte("k"), 0, t0, nil); err != nil {
		t.Fatal(err)
	}
	wantItem(t, b, "k", "val", 3, 0, t0+1<<30)
}

func TestDelete(t *testing.T) {
	b := newBucketT(t, openTest(t, nil), "b")
	wantErr(t, "Delete missing", b.Delete([]byte("k"), 0, t0), ErrNotFound)
	c := mustStore(t, b, ModeSet, "k", "v", 0, 0)
	wantErr(t, "Delete wrong CAS", b.Delete([]byte("k"), c+1, t0), ErrExists)
	if err := b.Delete([]byte("k"), c, t0); err != nil {
		t.Fatalf("Delete matching CAS: %v", err)
	}
	_, err := b.Get([]byte("k"), t0, nil)
	wantErr(t, "Get deleted", err, ErrNotFound)
	mustStore(t, b, ModeSet, "k", "v", 0, 0)
	if err := b.Delete([]byte("k"), 0, t0); err != nil {
		t.Fatalf("Delete without CAS: %v", err)
	}
	// Deleting an expired item reports ErrNotFound but reclaims it.
	mustStore(t, b, ModeSet, "e", "v", 0, t0+1)
	if n := b.ItemCount(); n != 1 {
		t.Fatalf("ItemCount = %d, want 1", n)
	}
	wantErr(t, "Delete expired", b.Delete([]byte("e"), 0, t0+1), ErrNotFound)
	if n := b.ItemCount(); n != 0 {
		t.Fatalf("ItemCount after deleting expired = %d, want 0", n)
	}
	if n := countKeys(t, b.db, kindExpiry); n != 0 {
		t.Fatalf("%d expiry index entries left", n)
	}
}

func TestGetAppendsToDst(t *testing.T) {
	b := newBucketT(t, openTest(t, nil), "b")
	mustStore(t, b, ModeSet, "k", "hello", 0, 0)
	dst := []byte("garbage-with-room")
	it, err := b.Get([]byte("k"), t0, dst)
	if err != nil || !bytes.Equal(it.Value, []byte("hello")) || &it.Value[0] != &dst[0] {
		t.Fatalf("Get = %q, %v; want hello in dst's array", it.Value, err)
	}
}

// TestGetAllocs checks the Get hot path with a dst that has room. The engine
// pools its key buffer and Pebble pools its get iterator, so a memtable hit
// allocates nothing. An sstable hit costs one 16-byte allocation per sstable
// the Get opens, inside Pebble: sstable.(*Reader).
// TryAddBlockPropertyFilterForHideObsoletePoints appends a filter to the nil
// PointKeyFilters slice that DB.Get passes (pebble v2.1.7, file_cache.go);
// the public Get API offers no way to hand it a slice with room.
func TestGetAllocs(t *testing.T) {
	if raceEnabled() {
		t.Skip("the race detector makes sync.Pool drop items at random")
	}
	// The Pebble path; TestCacheAllocs covers the item cache.
	b := newBucketT(t, openTest(t, func(o *Options) { o.ItemCacheSize = -1 }), "b")
	mustStore(t, b, ModeSet, "key", string(make([]byte, 100)), 0, 0)
	key, dst := []byte("key"), make([]byte, 0, 256)
	get := func() {
		if _, err := b.Get(key, t0, dst); err != nil {
			t.Fatal(err)
		}
	}
	if allocs := testing.AllocsPerRun(1000, get); allocs != 0 {
		t.Fatalf("Get (memtable hit) allocates %.1f times per call, want 0", allocs)
	}
	if err := b.db.pdb.Flush(); err != nil { // now served from one sstable
		t.Fatal(err)
	}
	allocs := testing.AllocsPerRun(1000, get)
	t.Logf("Get (hit in one sstable): %.1f allocs/op", allocs)
	if allocs > 1 {
		t.Fatalf("Get (hit in one sstable) allocates %.1f times per call, want at most 1", allocs)
	}
}
