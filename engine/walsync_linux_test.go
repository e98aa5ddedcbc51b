//go:build linux

package engine

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

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
		if w.plain || w.ctx == 0 {
			t.Fatalf("sync %d took the plain fdatasync (plain %v, AIO context %d)", i, w.plain, w.ctx)
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
