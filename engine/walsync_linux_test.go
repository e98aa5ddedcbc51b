//go:build linux

package engine

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestWALFileSyncsThroughAIO: the files Pebble creates and recycles as
// WALs are walFiles, their syncs go through AIO (not the plain fdatasync
// fallback) and succeed, and the data is there; other files are not
// walFiles.
func TestWALFileSyncsThroughAIO(t *testing.T) {
	dir := t.TempDir()
	fs := pageFS{vfs.Default}
	f, err := fs.Create(filepath.Join(dir, "000001.log"), walCategory)
	if err != nil {
		t.Fatal(err)
	}
	w, ok := f.(*walFile)
	if !ok {
		t.Fatalf("a WAL is a %T, want *walFile", f)
	}
	for i := range 3 {
		if _, err := f.Write([]byte("record " + strconv.Itoa(i) + "\n")); err != nil {
			t.Fatal(err)
		}
		if err := f.SyncData(); err != nil {
			t.Fatalf("sync %d: %v", i, err)
		}
		if w.plain || !w.used {
			t.Fatalf("sync %d took the plain fdatasync (plain %v, through AIO %v)", i, w.plain, w.used)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "000001.log")); string(b) != "record 0\nrecord 1\nrecord 2\n" {
		t.Fatalf("file holds %q", b)
	}

	r, err := fs.ReuseForWrite(filepath.Join(dir, "000001.log"), filepath.Join(dir, "000002.log"), walCategory)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := r.(*walFile); !ok {
		t.Fatalf("a recycled WAL is a %T, want *walFile", r)
	}
	if err := r.SyncData(); err != nil {
		t.Fatal(err)
	}
	_ = r.Close()

	o, err := fs.Create(filepath.Join(dir, "MANIFEST-000001"), vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	if _, ok := o.(*walFile); ok {
		t.Fatal("a MANIFEST is a walFile")
	}
}

// TestPebbleCreatesWALsAsWALs: the category pageFS recognises WALs by is
// the one Pebble creates them with (were it renamed, the WAL would silently
// sync the plain way).
func TestPebbleCreatesWALsAsWALs(t *testing.T) {
	fs := &categoryFS{FS: vfs.Default, of: map[string]vfs.DiskWriteCategory{}}
	db := openTest(t, func(o *Options) { o.fs = fs })
	mustStore(t, newBucketT(t, db, "b"), ModeSet, "k", "v", 0, 0)
	if err := db.SyncWAL(); err != nil {
		t.Fatal(err)
	}
	fs.mu.Lock()
	defer fs.mu.Unlock()
	logs := 0
	for name, c := range fs.of {
		if filepath.Ext(name) == ".log" {
			logs++
			if c != walCategory {
				t.Errorf("Pebble created %s with category %q, want %q", name, c, walCategory)
			}
		}
	}
	if logs == 0 {
		t.Fatalf("no WAL among the files Pebble created: %v", fs.of)
	}
}

// categoryFS records the category of every file created through it.
type categoryFS struct {
	vfs.FS
	mu sync.Mutex
	of map[string]vfs.DiskWriteCategory // guarded by mu
}

func (fs *categoryFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	fs.mu.Lock()
	fs.of[name] = c
	fs.mu.Unlock()
	return fs.FS.Create(name, c)
}

// TestWALFileWaitsPastTheQuickWait: a sync that outlasts the quick wait
// (here 0: every sync does) is waited for in a blocking syscall and still
// succeeds.
func TestWALFileWaitsPastTheQuickWait(t *testing.T) {
	defer func(d time.Duration) { walQuickWait = d }(walQuickWait)
	walQuickWait = 0
	f, err := pageFS{vfs.Default}.Create(filepath.Join(t.TempDir(), "000001.log"), walCategory)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for i := range 20 {
		if _, err := f.Write(make([]byte, 4096)); err != nil {
			t.Fatal(err)
		}
		if err := f.SyncData(); err != nil {
			t.Fatalf("sync %d: %v", i, err)
		}
	}
	if w := f.(*walFile); w.plain {
		t.Fatal("the syncs took the plain fdatasync")
	}
}

// TestWALFileReportsSyncErrors: where AIO cannot sync the file, walFile
// falls back to the plain fdatasync and reports its error. A pipe can be
// synced neither way (EINVAL).
func TestWALFileReportsSyncErrors(t *testing.T) {
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	defer pw.Close()
	p, err := vfs.Default.Open("/proc/self/fd/" + strconv.Itoa(int(pr.Fd())))
	if err != nil {
		t.Fatal(err)
	}
	f := newWALFile(p)
	w := f.(*walFile)
	if err := f.SyncData(); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("syncing a pipe: %v, want EINVAL", err)
	}
	if !w.plain {
		t.Fatal("walFile did not fall back to the plain fdatasync")
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestAIOWaitDoesNotHoldUpTheGC: a garbage collection's stop-the-world
// does not wait for an operation aioWait is waiting for in its raw
// syscall: the runtime's preemption signal ends the raw wait and the
// blocking wait that follows lets the world stop. The operation here is a
// poll (IOCB_CMD_POLL) of an empty pipe, which completes only when the
// test writes to it, with a quick wait of an hour. Were the raw wait to
// hold the world up, nothing in this process could run to end it: a shell
// writes to the pipe after 5 s, and the GC's time says what happened.
func TestAIOWaitDoesNotHoldUpTheGC(t *testing.T) {
	defer func(d time.Duration) { walQuickWait = d }(walQuickWait)
	walQuickWait = time.Hour
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	defer pw.Close()
	var ctx uintptr
	if _, _, e := syscall.Syscall(syscall.SYS_IO_SETUP, 1, uintptr(unsafe.Pointer(&ctx)), 0); e != 0 {
		t.Fatal("io_setup:", e)
	}
	defer syscall.Syscall(syscall.SYS_IO_DESTROY, ctx, 0, 0)
	const iocbCmdPoll, pollIn = 5, 1
	cb := &iocb{opcode: iocbCmdPoll, fildes: uint32(pr.Fd()), buf: pollIn}
	cbs := [1]*iocb{cb}
	if _, _, e := syscall.Syscall(syscall.SYS_IO_SUBMIT, ctx, 1, uintptr(unsafe.Pointer(&cbs[0]))); e != 0 {
		t.Fatal("io_submit:", e)
	}
	rescue := exec.Command("sh", "-c", fmt.Sprintf("sleep 5; printf x > /proc/%d/fd/%d", os.Getpid(), pw.Fd()))
	if err := rescue.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = rescue.Process.Kill(); _ = rescue.Wait() }()
	var ev ioEvent
	done := make(chan error, 1)
	go func() { done <- aioWait(ctx, &ev) }()
	time.Sleep(50 * time.Millisecond) // the waiter is in its raw wait
	gc := make(chan time.Duration, 1)
	go func() {
		start := time.Now()
		runtime.GC()
		gc <- time.Since(start)
	}()
	if d := <-gc; d > 2*time.Second {
		t.Fatalf("a GC took %v: it waited for aioWait's raw wait", d)
	} else {
		t.Logf("a GC took %v while aioWait waited", d)
	}
	select {
	case err := <-done:
		t.Fatalf("aioWait returned (%v) before the pipe had data", err)
	default:
	}
	if _, err := pw.Write([]byte{1}); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if ev.res&pollIn == 0 {
		t.Fatalf("poll event %+v, want POLLIN", ev)
	}
}

// TestWALFilesShareAIOContexts: closing a WAL destroys no AIO context
// (io_destroy waits for an RCU grace period, tens of milliseconds, and
// Pebble closes a WAL with every commit waiting): the next WAL's syncs use
// the context the last one gave back, and syncs in progress at once use
// one context each.
func TestWALFilesShareAIOContexts(t *testing.T) {
	dir := t.TempDir()
	idle := func() int {
		aioContexts.mu.Lock()
		defer aioContexts.mu.Unlock()
		return len(aioContexts.free)
	}
	syncs := func(name string) vfs.File {
		t.Helper()
		f, err := pageFS{vfs.Default}.Create(filepath.Join(dir, name), walCategory)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.Write([]byte("record\n")); err != nil {
			t.Fatal(err)
		}
		if err := f.SyncData(); err != nil || !f.(*walFile).used {
			t.Fatalf("%s: sync %v, through AIO %v", name, err, f.(*walFile).used)
		}
		return f
	}
	_ = syncs("000001.log").Close()
	n := idle()
	if n == 0 {
		t.Fatal("no AIO context idle after a WAL's sync and close")
	}
	for i := range 5 {
		_ = syncs(fmt.Sprintf("%06d.log", i+2)).Close()
	}
	if got := idle(); got != n {
		t.Fatalf("after five more WALs %d contexts idle, want the same %d: contexts set up per file", got, n)
	}

	// Two syncs at once: each takes a context of its own.
	a, b := aioContexts.get()
	c, d := aioContexts.get()
	if !b || !d || a == c {
		t.Fatalf("two contexts at once: %d %v, %d %v", a, b, c, d)
	}
	aioContexts.put(a)
	aioContexts.put(c)
}
