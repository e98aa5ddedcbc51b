package engine

import (
	"bytes"
	"io"
	"math/rand/v2"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// recordFS records the size of every write and every SyncTo its files get.
type recordFS struct {
	vfs.FS
	writes []int
	syncTo []int64
}

func (fs *recordFS) Create(name string, category vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.Create(name, category)
	return &recordFile{File: f, fs: fs}, err
}

type recordFile struct {
	vfs.File
	fs *recordFS
}

func (f *recordFile) Write(p []byte) (int, error) {
	f.fs.writes = append(f.fs.writes, len(p))
	return f.File.Write(p)
}

func (f *recordFile) SyncTo(length int64) (bool, error) {
	f.fs.syncTo = append(f.fs.syncTo, length)
	return f.File.SyncTo(length)
}

// TestPageFSWritesWholeChunks: an sstable reaches the file in whole chunks
// whatever sizes Pebble writes, with only the tail written by Sync; SyncTo
// never asks past what the file has; the bytes are all there, in order.
// Other files are written as they come.
func TestPageFSWritesWholeChunks(t *testing.T) {
	rec := &recordFS{FS: vfs.NewMem()}
	fs := pageFS{rec}
	f, err := fs.Create("000007.sst", vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	var want bytes.Buffer
	handed := int64(0)
	for want.Len() < 3*tableWriteChunk+12345 {
		p := make([]byte, 1+rng.IntN(3*4096))
		for i := range p {
			p[i] = byte(rng.Uint32())
		}
		want.Write(p)
		if n, err := f.Write(p); err != nil || n != len(p) {
			t.Fatalf("Write(%d bytes) = %d, %v", len(p), n, err)
		}
		handed += int64(len(p))
		if full, err := f.SyncTo(handed); err != nil || full {
			t.Fatalf("SyncTo(%d) = %v, %v: want a partial sync", handed, full, err)
		}
	}
	for i, n := range rec.writes {
		if n != tableWriteChunk {
			t.Fatalf("write %d was %d bytes before Sync; want %d", i, n, tableWriteChunk)
		}
	}
	for _, l := range rec.syncTo {
		if l%tableWriteChunk != 0 || l > int64(len(rec.writes))*tableWriteChunk {
			t.Fatalf("SyncTo(%d) past the %d chunks written", l, len(rec.writes))
		}
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if tail := rec.writes[len(rec.writes)-1]; tail != want.Len()%tableWriteChunk {
		t.Errorf("Sync wrote %d bytes; want the tail, %d", tail, want.Len()%tableWriteChunk)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	r, err := rec.Open("000007.sst")
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(r)
	if err != nil || !bytes.Equal(got, want.Bytes()) {
		t.Fatalf("read back %d bytes (%v); want the %d written", len(got), err, want.Len())
	}

	m, err := fs.Create("MANIFEST-000001", vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := m.(*pageFile); ok {
		t.Error("a MANIFEST is buffered; only sstables should be")
	}
}
