package engine

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// countKeys counts the Pebble keys of one kind.
func countKeys(t testing.TB, db *DB, kind byte) int {
	t.Helper()
	it, err := db.pdb.NewIter(&pebble.IterOptions{LowerBound: []byte{kind}, UpperBound: []byte{kind + 1}})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for it.First(); it.Valid(); it.Next() {
		n++
	}
	if err := it.Close(); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestOptions(t *testing.T) {
	var o Options
	o.EnsureDefaults()
	if o.CacheSize != 512<<20 || o.ItemCacheSize != 64<<20 || o.MaxValueSize != 1<<20 ||
		o.SweepInterval != 5*time.Second || o.MemTableSize != 32<<20 || o.Logger == nil || o.Now == nil {
		t.Fatalf("defaults: %+v", o)
	}
	if err := o.Validate(); err == nil || !strings.Contains(err.Error(), "Dir") {
		t.Fatalf("Validate without Dir = %v, want an error naming Dir", err)
	}
	bad := []func(*Options){
		func(o *Options) { o.CacheSize = -1 },
		func(o *Options) { o.MaxValueSize = -1 },
		func(o *Options) { o.SweepInterval = -time.Second },
		func(o *Options) { o.MemTableSize = 1 },
	}
	for i, mod := range bad {
		o := Options{Dir: "x"}
		mod(&o)
		o.EnsureDefaults()
		if err := o.Validate(); err == nil {
			t.Errorf("case %d: Validate accepted %+v", i, o)
		}
	}
	o = Options{MaxValueSize: 20 << 20}
	o.EnsureDefaults()
	if o.MemTableSize != 80<<20 {
		t.Fatalf("MemTableSize for 20 MiB values = %d, want 80 MiB", o.MemTableSize)
	}
}

func TestBucketRegistry(t *testing.T) {
	db := openTest(t, nil)
	for _, name := range []string{"", strings.Repeat("a", 101), "a b", "ü", "a/b"} {
		_, err := db.CreateBucket(name, nil)
		wantErr(t, fmt.Sprintf("CreateBucket(%q)", name), err, ErrBadBucketName)
	}
	if _, err := db.CreateBucket(strings.Repeat("z", 100), nil); err != nil {
		t.Fatalf("100-byte name: %v", err)
	}
	b1, err := db.CreateBucket("Az09_.%-", []byte(`{"reserved":1}`))
	if err != nil {
		t.Fatal(err)
	}
	_, err = db.CreateBucket("Az09_.%-", nil)
	wantErr(t, "CreateBucket existing", err, ErrBucketExists)
	if b, err := db.Bucket("Az09_.%-"); err != nil || b != b1 || b.Name() != "Az09_.%-" {
		t.Fatalf("Bucket = %p, %v; want %p", b, err, b1)
	}
	_, err = db.Bucket("nope")
	wantErr(t, "Bucket missing", err, ErrBucketNotFound)
	wantErr(t, "DeleteBucket missing", db.DeleteBucket("nope"), ErrBucketNotFound)
	wantErr(t, "SetBucketSettings missing", db.SetBucketSettings("nope", nil), ErrBucketNotFound)
	if err := db.SetBucketSettings("Az09_.%-", []byte(`{"reserved":2}`)); err != nil {
		t.Fatal(err)
	}
	got := db.Buckets()
	if len(got) != 2 || got[0].Name != "Az09_.%-" || string(got[0].Settings) != `{"reserved":2}` ||
		got[1].Name != strings.Repeat("z", 100) || got[0].ID == got[1].ID {
		t.Fatalf("Buckets = %+v", got)
	}
	got[0].Settings[0] = 'X' // a copy: the registry is unaffected
	if s := db.Buckets()[0].Settings; string(s) != `{"reserved":2}` {
		t.Fatalf("settings changed through returned slice: %s", s)
	}
}

func TestBucketsIsolated(t *testing.T) {
	db := openTest(t, nil)
	a, b := newBucketT(t, db, "a"), newBucketT(t, db, "b")
	mustStore(t, a, ModeSet, "k", "from-a", 1, 0)
	mustStore(t, b, ModeSet, "k", "from-b", 2, 0)
	mustStore(t, b, ModeSet, "k2", "b-only", 0, t0+100)
	wantItem(t, a, "k", "from-a", 1, 0, t0)
	wantItem(t, b, "k", "from-b", 2, 0, t0)
	_, err := a.Get([]byte("k2"), t0, nil)
	wantErr(t, "key of other bucket", err, ErrNotFound)

	if err := b.Flush(); err != nil {
		t.Fatal(err)
	}
	wantItem(t, a, "k", "from-a", 1, 0, t0)
	_, err = b.Get([]byte("k"), t0, nil)
	wantErr(t, "Get after Flush", err, ErrNotFound)
	if a.ItemCount() != 1 || b.ItemCount() != 0 {
		t.Fatalf("ItemCount after Flush of b: a=%d b=%d, want 1 0", a.ItemCount(), b.ItemCount())
	}
	if n := countKeys(t, db, kindExpiry); n != 0 {
		t.Fatalf("Flush left %d expiry index entries", n)
	}
	mustStore(t, b, ModeAdd, "k", "again", 0, 0) // usable after Flush
	wantItem(t, b, "k", "again", 0, 0, t0)
}

func TestDeleteBucketThenRecreate(t *testing.T) {
	db := openTest(t, nil)
	other := newBucketT(t, db, "other")
	mustStore(t, other, ModeSet, "k", "keep", 0, 0)
	old := newBucketT(t, db, "b")
	mustStore(t, old, ModeSet, "k", "old", 0, 0)
	mustStore(t, old, ModeSet, "k2", "old", 0, t0+10)
	if err := db.DeleteBucket("b"); err != nil {
		t.Fatal(err)
	}
	_, err := old.Get([]byte("k"), t0, nil)
	wantErr(t, "Get on deleted bucket", err, ErrBucketDeleted)
	_, err = old.Store(ModeSet, []byte("k"), nil, 0, 0, 0, t0)
	wantErr(t, "Store on deleted bucket", err, ErrBucketDeleted)
	wantErr(t, "Flush on deleted bucket", old.Flush(), ErrBucketDeleted)
	_, err = db.Bucket("b")
	wantErr(t, "Bucket after delete", err, ErrBucketNotFound)

	b := newBucketT(t, db, "b")
	if b.id == old.id {
		t.Fatalf("re-created bucket reuses ID %d", b.id)
	}
	_, err = b.Get([]byte("k"), t0, nil)
	wantErr(t, "Get in re-created bucket", err, ErrNotFound)
	if n := b.ItemCount(); n != 0 {
		t.Fatalf("re-created bucket ItemCount = %d", n)
	}
	wantItem(t, other, "k", "keep", 0, 0, t0)
	if n := countKeys(t, db, kindItem); n != 1 {
		t.Fatalf("%d item records on disk, want 1 (other's)", n)
	}
	if n := countKeys(t, db, kindExpiry); n != 0 {
		t.Fatalf("%d expiry index entries on disk, want 0", n)
	}
}

// fillForReopen writes buckets, items, a deleted bucket and a meta record,
// and returns the last CAS handed out and the deleted bucket's ID.
func fillForReopen(t *testing.T, db *DB) (lastCAS uint64, goneID uint32) {
	a := newBucketT(t, db, "a")
	if _, err := db.CreateBucket("b", []byte(`{"hard_limit":9}`)); err != nil {
		t.Fatal(err)
	}
	gone := newBucketT(t, db, "gone")
	for i := range 10 {
		lastCAS = mustStore(t, a, ModeSet, fmt.Sprint("k", i), fmt.Sprint("v", i), uint32(i), t0+100+uint32(i))
	}
	if err := a.Delete([]byte("k0"), 0, t0); err != nil {
		t.Fatal(err)
	}
	mustStore(t, gone, ModeSet, "x", "y", 0, 0)
	if err := db.DeleteBucket("gone"); err != nil {
		t.Fatal(err)
	}
	if err := db.PutMeta("node", []byte("capacity=1")); err != nil {
		t.Fatal(err)
	}
	return lastCAS, gone.id
}

func TestReopen(t *testing.T) {
	dir := t.TempDir()
	opts := Options{Dir: dir, Logger: quietLogger(), Now: clockAt(t0)}
	db, err := Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	lastCAS, goneID := fillForReopen(t, db)
	before := db.Buckets()
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	wantErr(t, "second Close", db.Close(), ErrClosed)

	db = openTest(t, func(o *Options) { o.Dir = dir })
	if after := db.Buckets(); !reflect.DeepEqual(before, after) {
		t.Fatalf("Buckets after reopen = %+v, want %+v", after, before)
	}
	a, err := db.Bucket("a")
	if err != nil {
		t.Fatal(err)
	}
	if n := a.ItemCount(); n != 9 {
		t.Fatalf("ItemCount after reopen = %d, want 9", n)
	}
	wantItem(t, a, "k7", "v7", 7, t0+107, t0)
	if v, err := db.Meta("node"); err != nil || string(v) != "capacity=1" {
		t.Fatalf("Meta = %q, %v", v, err)
	}
	_, err = db.Meta("absent")
	wantErr(t, "Meta absent", err, ErrNotFound)
	if c := mustStore(t, a, ModeSet, "new", "v", 0, 0); c <= lastCAS {
		t.Fatalf("CAS after reopen %d not above %d", c, lastCAS)
	}
	g := newBucketT(t, db, "gone")
	if _, err := g.Get([]byte("x"), t0, nil); !errors.Is(err, ErrNotFound) {
		t.Fatalf("re-created bucket after reopen sees old data: %v", err)
	}
	if g.id != goneID+1 {
		t.Fatalf("re-created bucket has ID %d after reopen, want %d (never reused)", g.id, goneID+1)
	}
}

// TestCASSeedAboveStored: a stored CAS ahead of the wall clock (e.g. after
// the clock stepped back) still seeds the counter on reopen.
func TestCASSeedAboveStored(t *testing.T) {
	dir := t.TempDir()
	db := openTest(t, func(o *Options) { o.Dir = dir })
	b := newBucketT(t, db, "b")
	const future = 1 << 61 // 2043; CAS values stay below 2^62 (stateShift)
	rec := make([]byte, headerLen+1)
	header{cas: future}.put(rec)
	if err := db.pdb.Set(appendItemKey(nil, b.id, []byte("k")), rec, pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db = openTest(t, func(o *Options) { o.Dir = dir })
	b, err := db.Bucket("b")
	if err != nil {
		t.Fatal(err)
	}
	if c := mustStore(t, b, ModeSet, "k2", "v", 0, 0); c <= future {
		t.Fatalf("CAS after reopen %d, want above stored %d", c, uint64(future))
	}
}

func TestClosed(t *testing.T) {
	db := openTest(t, nil)
	b := newBucketT(t, db, "b")
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	_, err := b.Get([]byte("k"), t0, nil)
	wantErr(t, "Get", err, ErrClosed)
	_, err = b.Store(ModeSet, []byte("k"), nil, 0, 0, 0, t0)
	wantErr(t, "Store", err, ErrClosed)
	wantErr(t, "Flush", b.Flush(), ErrClosed)
	wantErr(t, "SyncWAL", db.SyncWAL(), ErrClosed)
	wantErr(t, "PutMeta", db.PutMeta("k", nil), ErrClosed)
	_, err = db.Meta("k")
	wantErr(t, "Meta", err, ErrClosed)
	_, err = db.CreateBucket("c", nil)
	wantErr(t, "CreateBucket", err, ErrClosed)
	wantErr(t, "DeleteBucket", db.DeleteBucket("b"), ErrClosed)
	_, err = db.Bucket("b")
	wantErr(t, "Bucket", err, ErrClosed)
	if bs := db.Buckets(); bs != nil {
		t.Fatalf("Buckets after Close = %v", bs)
	}
}

func TestNoGoroutineLeak(t *testing.T) {
	base := runtime.NumGoroutine()
	for range 3 {
		db := openTest(t, func(o *Options) { o.SweepInterval = time.Millisecond })
		b := newBucketT(t, db, "b")
		mustStore(t, b, ModeSet, "k", "v", 0, 0)
		if err := db.SyncWAL(); err != nil {
			t.Fatal(err)
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > base {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("goroutines: %d after Close, %d before\n%s",
				runtime.NumGoroutine(), base, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestSyncWALFsyncs counts WAL fsyncs: SyncWAL fsyncs when WALSync is on,
// never when it is off, and concurrent callers share fsyncs.
func TestSyncWALFsyncs(t *testing.T) {
	for _, walSync := range []bool{false, true} {
		fs := newWALSyncFS()
		db := openTest(t, func(o *Options) { o.fs, o.WALSync = fs, walSync })
		b := newBucketT(t, db, "b")
		fs.syncs.Store(0)
		for i := range 10 {
			mustStore(t, b, ModeSet, fmt.Sprint("k", i), "v", 0, 0)
			if err := db.SyncWAL(); err != nil {
				t.Fatal(err)
			}
		}
		if n := fs.syncs.Load(); walSync && n != 10 || !walSync && n != 0 {
			t.Fatalf("WALSync=%v: 10 serial Store+SyncWAL made %d WAL fsyncs", walSync, n)
		}
	}
	fs := newWALSyncFS()
	db := openTest(t, func(o *Options) { o.fs, o.WALSync = fs, true })
	b := newBucketT(t, db, "b")
	fs.syncs.Store(0)
	const workers, each = 16, 50
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				_, err := b.Store(ModeSet, fmt.Appendf(nil, "k%d-%d", w, i), []byte("v"), 0, 0, 0, t0)
				if err == nil {
					err = db.SyncWAL()
				}
				if err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	n := fs.syncs.Load()
	t.Logf("%d concurrent Store+SyncWAL calls made %d WAL fsyncs", workers*each, n)
	// Sixteen goroutines that each wait for their fsync share them: 100-120
	// for the 800 calls here. Half as many fsyncs as calls is the bound; one
	// per call is no sharing at all.
	if n == 0 || n > workers*each/2 {
		t.Fatalf("%d WAL fsyncs for %d SyncWAL calls: want them shared, at most %d", n, workers*each, workers*each/2)
	}
}

// TestSyncWALSurvivesExit stores items in a child process that calls
// SyncWAL and then exits without Close, as kill -9 would leave it: the items
// must be there when the parent reopens the directory. (Without SyncWAL the
// tail of the WAL can still sit in Pebble's user-space buffer at exit.)
func TestSyncWALSurvivesExit(t *testing.T) {
	if dir := os.Getenv(childDirEnv); dir != "" {
		childWriteAndExit(dir)
		return
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestSyncWALSurvivesExit$")
	cmd.Env = append(os.Environ(), childDirEnv+"="+dir)
	if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "synced") {
		t.Fatalf("child: %v\n%s", err, out)
	}
	db := openTest(t, func(o *Options) { o.Dir = dir })
	b, err := db.Bucket("b")
	if err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		wantItem(t, b, fmt.Sprint("k", i), fmt.Sprint("v", i), 0, 0, t0)
	}
	if n := b.ItemCount(); n != 100 {
		t.Fatalf("ItemCount = %d, want 100", n)
	}
}

// childDirEnv names the child's data directory in TestSyncWALSurvivesExit.
const childDirEnv = "KVD_ENGINE_CHILD_DIR"

func childWriteAndExit(dir string) {
	db, err := Open(Options{Dir: dir, WALSync: true, Logger: quietLogger()})
	if err != nil {
		fmt.Println(err)
		os.Exit(2)
	}
	b, err := db.CreateBucket("b", nil)
	for i := 0; err == nil && i < 100; i++ {
		_, err = b.Store(ModeSet, []byte(fmt.Sprint("k", i)), []byte(fmt.Sprint("v", i)), 0, 0, 0, t0)
	}
	if err == nil {
		err = db.SyncWAL()
	}
	if err != nil {
		fmt.Println(err)
		os.Exit(2)
	}
	fmt.Println("synced")
	os.Exit(0)
}

func TestItemCacheSizeFor(t *testing.T) {
	for _, tc := range []struct{ mem, want int64 }{
		{0, DefaultItemCacheSize}, {100 << 20, DefaultItemCacheSize}, {8 << 30, 2 << 30},
	} {
		if got := ItemCacheSizeFor(tc.mem); got != tc.want {
			t.Errorf("ItemCacheSizeFor(%d) = %d, want %d", tc.mem, got, tc.want)
		}
	}
}

func TestBlockCacheSizeFor(t *testing.T) {
	for _, tc := range []struct{ mem, want int64 }{
		{0, DefaultCacheSize}, {100 << 20, 16 << 20}, {2 << 30, 128 << 20}, {24 << 30, DefaultCacheSize},
	} {
		if got := BlockCacheSizeFor(tc.mem); got != tc.want {
			t.Errorf("BlockCacheSizeFor(%d) = %d, want %d", tc.mem, got, tc.want)
		}
	}
}

// TestPebbleCompactionSettings: Pebble runs with the compaction settings
// tuned for writes, not its defaults (4 L0 files, stop at 12, 64 MiB
// Lbase), and with bloom filters on every level.
func TestPebbleCompactionSettings(t *testing.T) {
	o := Options{Dir: t.TempDir()}
	o.EnsureDefaults()
	po := o.pebbleOptions()
	if po.L0CompactionThreshold != 16 || po.L0StopWritesThreshold != 64 || po.LBaseMaxBytes != 512<<20 {
		t.Errorf("L0 compaction %d, L0 stop %d, Lbase %d: want 16, 64, 512 MiB",
			po.L0CompactionThreshold, po.L0StopWritesThreshold, po.LBaseMaxBytes)
	}
	for i, l := range po.Levels {
		if l.FilterPolicy == nil {
			t.Errorf("level %d has no bloom filter", i)
		}
	}
	if vs := po.Experimental.ValueSeparationPolicy; vs != nil && vs().Enabled {
		t.Errorf("value separation is on: the open's warm-up would read values across blob files")
	}
}

// TestOpenWaitsForTheLock: a store whose lock another process holds is
// opened once that process exits within lockWait (a kvd started again
// right after a kill -9), and otherwise Open fails saying the directory is
// in use. The other process is this test binary, holding the store open
// for KVD_ENGINE_HOLD.
func TestOpenWaitsForTheLock(t *testing.T) {
	if dir := os.Getenv(childDirEnv); dir != "" {
		hold, _ := time.ParseDuration(os.Getenv("KVD_ENGINE_HOLD"))
		if _, err := Open(Options{Dir: dir, Logger: quietLogger(), Now: clockAt(t0)}); err != nil {
			fmt.Println(err)
			os.Exit(2)
		}
		fmt.Println("holding")
		time.Sleep(hold)
		os.Exit(0) // without Close, as a kill would
	}
	holder := func(dir, hold string) *exec.Cmd {
		cmd := exec.Command(os.Args[0], "-test.run=^TestOpenWaitsForTheLock$")
		cmd.Env = append(os.Environ(), childDirEnv+"="+dir, "KVD_ENGINE_HOLD="+hold)
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		line, _ := bufio.NewReader(out).ReadString('\n')
		if line != "holding\n" {
			t.Fatalf("holder: %q", line)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		return cmd
	}
	dir := t.TempDir()
	holder(dir, "500ms")
	db, err := Open(Options{Dir: dir, Logger: quietLogger(), Now: clockAt(t0)})
	if err != nil {
		t.Fatalf("Open while another process was about to let the store go: %v", err)
	}
	_ = db.Close()
	busy := t.TempDir()
	holder(busy, "20s")
	start := time.Now()
	if _, err := Open(Options{Dir: busy, Logger: quietLogger(), Now: clockAt(t0)}); err == nil ||
		!strings.Contains(err.Error(), "another process uses this data directory") {
		t.Errorf("Open of a store in use: %v, want the lock explained", err)
	}
	if d := time.Since(start); d < lockWait {
		t.Errorf("gave up after %v, want %v", d, lockWait)
	}
}
