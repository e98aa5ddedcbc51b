package engine

import (
	"strings"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// tableWriteChunk is how much of a table pageFS holds before it writes: a
// whole number of pages. RocksDB buffers table writes the same way
// (writable_file_max_buffer_size, 1 MiB).
const tableWriteChunk = 256 << 10

// pageFS is the filesystem Pebble writes through: sstables reach the kernel
// in whole pages, WAL files sync as walFile says, every other file is as
// Pebble writes it.
//
// Pebble writes a table through a 4 KiB bufio.Writer, which passes a block
// larger than its buffer straight through. With 4 KiB values every block is,
// so every write from then on starts and ends inside a page, and for each
// new page ext4 first zeroes the part the write does not cover
// (zero_user_segments): 8% of kvd's CPU under memcaslap's 4 KiB values.
type pageFS struct{ vfs.FS }

// Create buffers the file when it is an sstable.
func (fs pageFS) Create(name string, category vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.Create(name, category)
	switch {
	case err != nil:
		return f, err
	case category == walCategory:
		return newWALFile(f), nil
	case strings.HasSuffix(name, ".sst"):
		return &pageFile{File: f, buf: make([]byte, 0, tableWriteChunk)}, nil
	}
	return f, nil
}

// walCategory is the category Pebble creates and recycles WAL files with.
const walCategory vfs.DiskWriteCategory = "pebble-wal"

// ReuseForWrite recycles a WAL file.
func (fs pageFS) ReuseForWrite(oldname, newname string, category vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.ReuseForWrite(oldname, newname, category)
	if err != nil || category != walCategory {
		return f, err
	}
	return newWALFile(f), nil
}

// pageFile holds writes until it has a whole chunk. Everything that reads,
// syncs or closes the file writes what it holds first; SyncTo, a hint to
// start writeback, asks only for what the kernel has.
type pageFile struct {
	vfs.File
	buf     []byte
	written int64 // bytes handed to the kernel
}

func (f *pageFile) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		k := copy(f.buf[len(f.buf):cap(f.buf)], p)
		f.buf, p = f.buf[:len(f.buf)+k], p[k:]
		if len(f.buf) == cap(f.buf) {
			if err := f.flush(); err != nil {
				return 0, err
			}
		}
	}
	return n, nil
}

// flush writes what f holds.
func (f *pageFile) flush() error {
	if len(f.buf) == 0 {
		return nil
	}
	n, err := f.File.Write(f.buf)
	f.written += int64(n)
	f.buf = f.buf[:copy(f.buf, f.buf[n:])]
	return err
}

func (f *pageFile) Close() error {
	err := f.flush()
	if cerr := f.File.Close(); err == nil {
		err = cerr
	}
	return err
}

func (f *pageFile) Sync() error {
	if err := f.flush(); err != nil {
		return err
	}
	return f.File.Sync()
}

func (f *pageFile) SyncData() error {
	if err := f.flush(); err != nil {
		return err
	}
	return f.File.SyncData()
}

// SyncTo starts writeback of at most what the kernel has. Flushing here
// would undo the alignment: Pebble calls it every 512 KiB (BytesPerSync).
// It never reports a full sync while f holds bytes.
func (f *pageFile) SyncTo(length int64) (fullSync bool, err error) {
	if length <= f.written {
		return f.File.SyncTo(length)
	}
	if f.written > 0 {
		if _, err := f.File.SyncTo(f.written); err != nil {
			return false, err
		}
	}
	return false, nil
}

func (f *pageFile) Stat() (vfs.FileInfo, error) {
	if err := f.flush(); err != nil {
		return nil, err
	}
	return f.File.Stat()
}

func (f *pageFile) Read(p []byte) (int, error) {
	if err := f.flush(); err != nil {
		return 0, err
	}
	return f.File.Read(p)
}

func (f *pageFile) ReadAt(p []byte, off int64) (int, error) {
	if err := f.flush(); err != nil {
		return 0, err
	}
	return f.File.ReadAt(p, off)
}
