package engine

import (
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

const benchKeys = 10000

// Item cache settings for benchmarks (Options.ItemCacheSize).
const (
	cacheOn  = DefaultItemCacheSize
	cacheOff = -1
)

// benchBucket returns a bucket holding benchKeys items of valueSize bytes,
// flushed to sstables when flush is set, with the given item cache (every
// item is resident when it is on: stores write through).
func benchBucket(b *testing.B, valueSize int, flush bool, itemCache int64) (*Bucket, [][]byte) {
	b.Helper()
	db := openTest(b, func(o *Options) { o.ItemCacheSize = itemCache })
	bk := newBucketT(b, db, "bench")
	keys := make([][]byte, benchKeys)
	val := make([]byte, valueSize)
	for i := range keys {
		keys[i] = []byte("key:" + strconv.Itoa(i))
		if _, err := bk.Store(ModeSet, keys[i], val, 0, 0, 0, t0); err != nil {
			b.Fatal(err)
		}
	}
	if flush {
		if err := db.pdb.Flush(); err != nil {
			b.Fatal(err)
		}
	}
	return bk, keys
}

// BenchmarkGet: a hit from Pebble's memtable or an sstable with the item
// cache off, and a hit in the item cache.
func BenchmarkGet(b *testing.B) {
	cases := []struct {
		name      string
		flush     bool
		itemCache int64
	}{
		{"cache=off/sstable=false", false, cacheOff},
		{"cache=off/sstable=true", true, cacheOff},
		{"cache=on", true, cacheOn},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			bk, keys := benchBucket(b, 100, c.flush, c.itemCache)
			dst := make([]byte, 0, 256)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if _, err := bk.Get(keys[i%benchKeys], t0, dst); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}

func BenchmarkGetParallel(b *testing.B) {
	for _, itemCache := range []int64{cacheOff, cacheOn} {
		b.Run(fmt.Sprintf("cache=%v", itemCache > 0), func(b *testing.B) {
			bk, keys := benchBucket(b, 100, true, itemCache)
			b.ReportAllocs()
			b.ResetTimer()
			var seq atomic.Int64
			b.RunParallel(func(pb *testing.PB) {
				dst := make([]byte, 0, 256)
				i := int(seq.Add(7919))
				for pb.Next() {
					if _, err := bk.Get(keys[i%benchKeys], t0, dst); err != nil {
						b.Fatal(err)
					}
					i++
				}
			})
		})
	}
}

// BenchmarkPeek is the event loop's look-up: a hit in the item cache.
func BenchmarkPeek(b *testing.B) {
	bk, keys := benchBucket(b, 100, true, cacheOn)
	dst := make([]byte, 0, 256)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if _, ok := bk.Peek(keys[i%benchKeys], t0, dst); !ok {
			b.Fatal("miss")
		}
		i++
	}
}

func BenchmarkPeekParallel(b *testing.B) {
	bk, keys := benchBucket(b, 100, true, cacheOn)
	b.ReportAllocs()
	b.ResetTimer()
	var seq atomic.Int64
	b.RunParallel(func(pb *testing.PB) {
		dst := make([]byte, 0, 256)
		i := int(seq.Add(7919))
		for pb.Next() {
			if _, ok := bk.Peek(keys[i%benchKeys], t0, dst); !ok {
				b.Fatal("miss")
			}
			i++
		}
	})
}

func BenchmarkGetMiss(b *testing.B) {
	bk, _ := benchBucket(b, 100, true, cacheOn)
	key := []byte("absent-key")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := bk.Get(key, t0, nil); err != ErrNotFound {
			b.Fatal(err)
		}
	}
}

// BenchmarkStore overwrites resident items (with the cache on, each update
// reuses the entry's buffer).
func BenchmarkStore(b *testing.B) {
	for _, itemCache := range []int64{cacheOff, cacheOn} {
		for _, size := range []int{100, 4096} {
			b.Run(fmt.Sprintf("cache=%v/value=%d", itemCache > 0, size), func(b *testing.B) {
				bk, keys := benchBucket(b, size, false, itemCache)
				val := make([]byte, size)
				b.ReportAllocs()
				b.SetBytes(int64(size))
				i := 0
				for b.Loop() {
					if _, err := bk.Store(ModeSet, keys[i%benchKeys], val, 1, 0, 0, t0); err != nil {
						b.Fatal(err)
					}
					i++
				}
			})
		}
	}
}

func BenchmarkStoreParallel(b *testing.B) {
	bk, keys := benchBucket(b, 100, false, cacheOn)
	val := make([]byte, 100)
	b.ReportAllocs()
	b.ResetTimer()
	var seq atomic.Int64
	b.RunParallel(func(pb *testing.PB) {
		i := int(seq.Add(7919))
		for pb.Next() {
			if _, err := bk.Store(ModeSet, keys[i%benchKeys], val, 1, 0, 0, t0); err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
}

// BenchmarkStoreSyncWAL is the server's write pattern with WALSync on: a
// Store then a SyncWAL per command, from parallel goroutines whose fsyncs
// Pebble groups.
func BenchmarkStoreSyncWAL(b *testing.B) {
	fs := newWALSyncFS()
	bk := newBucketT(b, openTest(b, func(o *Options) { o.fs = fs }), "bench")
	keys := make([][]byte, benchKeys)
	for i := range keys {
		keys[i] = []byte("key:" + strconv.Itoa(i))
	}
	val := make([]byte, 100)
	fs.syncs.Store(0)
	b.ReportAllocs()
	b.ResetTimer()
	var seq atomic.Int64
	b.SetParallelism(8)
	b.RunParallel(func(pb *testing.PB) {
		i := int(seq.Add(7919))
		for pb.Next() {
			if _, err := bk.Store(ModeSet, keys[i%benchKeys], val, 1, 0, 0, t0); err != nil {
				b.Fatal(err)
			}
			if err := bk.db.SyncWAL(); err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
	b.ReportMetric(float64(fs.syncs.Load())/float64(b.N), "fsyncs/op")
}

func BenchmarkIncr(b *testing.B) {
	bk, _ := benchBucket(b, 1, false, cacheOn)
	key := []byte("counter")
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := bk.Arith(key, true, 1, 0, 0, true, 0, t0); err != nil {
			b.Fatal(err)
		}
	}
}

// walSyncFS counts fsyncs of WAL files (*.log) made through it.
type walSyncFS struct {
	vfs.FS
	syncs *atomic.Int64
}

func newWALSyncFS() walSyncFS { return walSyncFS{FS: vfs.Default, syncs: new(atomic.Int64)} }

func (fs walSyncFS) wrap(name string, f vfs.File, err error) (vfs.File, error) {
	if err != nil || !strings.HasSuffix(name, ".log") {
		return f, err
	}
	return walSyncFile{File: f, syncs: fs.syncs}, nil
}

func (fs walSyncFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.Create(name, c)
	return fs.wrap(name, f, err)
}

func (fs walSyncFS) ReuseForWrite(old, name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.ReuseForWrite(old, name, c)
	return fs.wrap(name, f, err)
}

type walSyncFile struct {
	vfs.File
	syncs *atomic.Int64
}

func (f walSyncFile) Sync() error {
	f.syncs.Add(1)
	return f.File.Sync()
}

func (f walSyncFile) SyncData() error {
	f.syncs.Add(1)
	return f.File.SyncData()
}

// Fd hides the descriptor: pageFS then leaves the file as it is instead of
// making it a walFile, which would sync the descriptor itself and bypass
// the count.
func (f walSyncFile) Fd() uintptr { return vfs.InvalidFd }

// BenchmarkCacheGetLarge: item cache hits over a resident set far larger
// than the CPU caches (320k items of 64-byte keys and 1 KiB values, as
// memcaslap leaves), in random order, against a Go map of the same items
// answering the same look-ups (the bare ceiling server's way). Memory
// latency dominates both: the figure to watch is the ratio.
func BenchmarkCacheGetLarge(b *testing.B) {
	const n = 320_000
	keys := make([][]byte, n)
	val := make([]byte, 1024)
	for i := range keys {
		keys[i] = fmt.Appendf(nil, "%064d", i*7919)
	}
	order := make([]int32, 1<<20)
	for i := range order {
		order[i] = int32((uint64(i) * 0x9e3779b97f4a7c15 >> 17) % n)
	}
	b.Run("cache", func(b *testing.B) {
		c := newItemCache(2 << 30)
		for _, k := range keys {
			c.set(1, k, header{flags: 1}, val, nil, access{now: t0})
		}
		dst := make([]byte, 0, 2048)
		b.ResetTimer()
		for i := 0; b.Loop(); i++ {
			it, ok, _ := c.get(1, keys[order[i&(len(order)-1)]], t0, dst, true)
			if !ok {
				b.Fatal("miss")
			}
			dst = it.Value
		}
	})
	b.Run("gomap", func(b *testing.B) {
		type item struct {
			flags uint32
			value []byte
		}
		m := make(map[string]*item)
		for _, k := range keys {
			m[string(k)] = &item{flags: 1, value: append([]byte(nil), val...)}
		}
		dst := make([]byte, 0, 2048)
		b.ResetTimer()
		for i := 0; b.Loop(); i++ {
			it, ok := m[string(keys[order[i&(len(order)-1)]])]
			if !ok {
				b.Fatal("miss")
			}
			dst = append(dst[:0], it.value...)
		}
	})
}
