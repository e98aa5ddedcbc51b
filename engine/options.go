package engine

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// ItemCacheSizeFor is the item cache's size on a node that may use mem
// bytes: a quarter of it, never less than DefaultItemCacheSize (also when
// mem is unknown, 0). Pebble's block cache, memtables and the connections'
// buffers share the rest.
func ItemCacheSizeFor(mem int64) int64 { return max(mem/4, DefaultItemCacheSize) }

// BlockCacheSizeFor is Pebble's block cache on a node that may use mem
// bytes: a sixteenth of it, between 16 MiB and DefaultCacheSize
// (DefaultCacheSize when mem is unknown, 0).
func BlockCacheSizeFor(mem int64) int64 {
	if mem <= 0 {
		return DefaultCacheSize
	}
	return min(max(mem/16, 16<<20), DefaultCacheSize)
}

// Pebble's compaction settings (pebbleOptions): L0 files that start a
// compaction into Lbase, L0 files (read amplification) at which writes stop,
// and Lbase's size.
const (
	l0CompactionThreshold = 16
	l0StopWritesThreshold = 64
	lBaseMaxBytes         = 512 << 20
)

// Defaults applied by Options.EnsureDefaults to zero-valued fields.
const (
	// DefaultCacheSize is Pebble's block cache. Pebble fills it lazily,
	// so an idle store does not pay for it. It is large enough to keep
	// the index and filter blocks of a few GiB of items, which a SET of a
	// key that is not resident reads: with 64 MiB they were evicted by
	// data blocks and re-read with pread (A/B under memcaslap: +12% TPS
	// at -c 8, +23% at -c 32, user CPU per op −8–10%).
	DefaultCacheSize     = 512 << 20
	DefaultItemCacheSize = 64 << 20
	DefaultMemTableSize  = 32 << 20
	DefaultMaxValueSize  = 1 << 20
	DefaultSweepInterval = 5 * time.Second

	// maxValueLimit bounds MaxValueSize: a value and its record must fit
	// comfortably in one Pebble batch.
	maxValueLimit = 256 << 20
)

// Options configures Open. Zero values take the documented defaults
// (EnsureDefaults); Validate reports values that cannot work.
type Options struct {
	// Dir is the Pebble directory. Required.
	Dir string
	// WALSync: when true SyncWAL fsyncs the WAL; when false SyncWAL is a no-op
	// and acknowledged mutations may be lost on a crash or power loss.
	WALSync bool
	// CacheSize is the block cache size in bytes. Default 512 MiB.
	CacheSize int64
	// ItemCacheSize is the byte budget of the resident item cache (see the
	// package doc): key + value + a fixed per-item overhead of the items
	// kept in memory in front of Pebble. Default 64 MiB; negative disables
	// the cache (Peek always misses, Get always reads Pebble).
	ItemCacheSize int64
	// MemTableSize is Pebble's memtable size in bytes. Default the larger of
	// 32 MiB and 4×MaxValueSize: Pebble handles a batch over half a memtable
	// as a "large batch" (correct, but it forces a memtable flush). Unless
	// DiskReserve is negative, Open caps it at 1/16 of Dir's filesystem
	// (at least 1 MiB), so flushing a full memtable fits in the reserve.
	MemTableSize int64
	// DiskReserve is the free space, in bytes, kept on Dir's filesystem for
	// Pebble's flushes and compactions: a mutation that would leave less
	// fails with ErrNoSpace (deletes, Flush and the sweeper until half of
	// it), and writes resume by themselves once space returns. Default
	// (0): set at Open to a quarter of the filesystem, at most 4 GiB, and
	// at least 4×MemTableSize. Negative disables the guard.
	DiskReserve int64
	// MaxValueSize is the largest value Store may write (any mode, including
	// the result of APPEND/PREPEND); larger → ErrTooBig (ErrNotStored for an
	// APPEND/PREPEND result). Default 1 MiB.
	MaxValueSize int
	// SweepInterval is how often the sweeper deletes expired items from
	// disk. Default 5s.
	SweepInterval time.Duration
	// MaxOpenFiles bounds the table files Pebble keeps open (its table
	// cache). Default (0) Pebble's, 1,000.
	MaxOpenFiles int
	// Logger receives engine and Pebble logs. Default slog.Default().
	Logger *slog.Logger
	// Now is the clock the sweeper, the rate limit of Pebble's background
	// error logs and a key listing's idle time (Bucket.Dump) use, and
	// nothing else. Default time.Now.
	Now func() time.Time

	// fs replaces Pebble's filesystem; set by tests only.
	fs vfs.FS

	// l0Threshold is the L0 file count that starts a compaction into
	// Lbase: l0CompactionThreshold, lower on a small disk (sizeForDisk).
	l0Threshold int
}

// EnsureDefaults sets every zero-valued field to its default.
func (o *Options) EnsureDefaults() {
	if o.CacheSize == 0 {
		o.CacheSize = DefaultCacheSize
	}
	if o.ItemCacheSize == 0 {
		o.ItemCacheSize = DefaultItemCacheSize
	}
	if o.MaxValueSize == 0 {
		o.MaxValueSize = DefaultMaxValueSize
	}
	if o.MemTableSize == 0 {
		o.MemTableSize = max(DefaultMemTableSize, 4*int64(o.MaxValueSize))
	}
	if o.SweepInterval == 0 {
		o.SweepInterval = DefaultSweepInterval
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
}

// Validate reports the first field that cannot work. Call it after
// EnsureDefaults (Open does both).
func (o *Options) Validate() error {
	switch {
	case o.Dir == "":
		return errors.New("engine: options: Dir is required")
	case o.CacheSize < 0:
		return fmt.Errorf("engine: options: CacheSize %d is negative", o.CacheSize)
	case o.MemTableSize < 1<<20 || o.MemTableSize > 4<<30:
		return fmt.Errorf("engine: options: MemTableSize %d is outside [1 MiB, 4 GiB]", o.MemTableSize)
	case o.MaxValueSize <= 0 || o.MaxValueSize > maxValueLimit:
		return fmt.Errorf("engine: options: MaxValueSize %d is outside [1, %d]", o.MaxValueSize, maxValueLimit)
	case o.SweepInterval <= 0:
		return fmt.Errorf("engine: options: SweepInterval %v must be positive", o.SweepInterval)
	case o.Logger == nil:
		return errors.New("engine: options: Logger is nil")
	case o.Now == nil:
		return errors.New("engine: options: Now is nil")
	}
	return nil
}

// pebbleOptions translates o into Pebble's options.
func (o *Options) pebbleOptions() *pebble.Options {
	po := &pebble.Options{
		CacheSize:          o.CacheSize,
		MaxOpenFiles:       o.MaxOpenFiles,
		MemTableSize:       uint64(o.MemTableSize),
		FormatMajorVersion: pebble.FormatNewest,
		Logger:             pebbleLogger{o.Logger},
		EventListener:      o.eventListener(),
		// With wal_sync off nothing syncs the WAL until Pebble closes it
		// at a memtable rotation, and that close (its fdatasync of up to a
		// memtable's worth of dirty data) runs with every commit waiting.
		// Writing the WAL back every 512 KiB from its flusher
		// (sync_file_range) leaves the close little to do: SETs of 4 KiB
		// at 8,000/s from 16 connections, p99.9 75-80 ms → 36-37 ms
		// (kvbench, two runs each, docs/performance.md).
		WALBytesPerSync: 512 << 10,
	}
	// Bloom filters on every level make misses (ADD of a new key, GET of an
	// absent one) cheap: about one cached filter probe per level.
	for i := range po.Levels {
		po.Levels[i].FilterPolicy = bloom.FilterPolicy(10)
	}
	// Compaction tuned for writes. kvd's reads are served by the item
	// cache (complete while the data fits it), so Pebble's read
	// amplification matters less than the bytes compactions rewrite.
	// memcaslap with 4 KiB values (10% SETs, each of a key not stored
	// before: it never overwrites), three alternated rounds: +8% TPS, user
	// CPU per op -19%, system -11% against Pebble's defaults (4 L0 files,
	// stop at 12, 64 MiB Lbase).
	po.L0CompactionThreshold = cmp.Or(o.l0Threshold, l0CompactionThreshold)
	po.L0StopWritesThreshold = l0StopWritesThreshold
	po.LBaseMaxBytes = lBaseMaxBytes
	// No value separation (blob files). It cut the bytes written to disk
	// with 4 KiB values by a quarter, but memcaslap's throughput gain did
	// not hold as the store grew, and a restart got slower: the warm-up
	// reads every value in key order, across blob files (2.2 GB of 4 KiB
	// items: 11.4 s from a cold page cache against 4.9 s; bench/store.sh,
	// docs/performance.md).
	return po
}

// pebbleLogger adapts slog to Pebble's Logger interface. Pebble's Infof
// lines (WAL replay details at Open) go to Debug.
type pebbleLogger struct{ l *slog.Logger }

func (p pebbleLogger) Infof(format string, args ...any) {
	if p.l.Enabled(context.Background(), slog.LevelDebug) {
		p.l.Debug("pebble: " + fmt.Sprintf(format, args...))
	}
}

func (p pebbleLogger) Errorf(format string, args ...any) {
	p.l.Error("pebble: " + fmt.Sprintf(format, args...))
}

// Fatalf is called by Pebble on unrecoverable errors (e.g. a failed WAL
// write); Pebble's state is undefined afterwards, so it must not return. It
// panics with a fatalPanic, which DB.commit recovers on the committing
// goroutine (see "Disk full" in the package doc); on Pebble's background
// goroutines it still ends the process.
func (p pebbleLogger) Fatalf(format string, args ...any) {
	msg := "pebble: fatal: " + fmt.Sprintf(format, args...)
	p.l.Error(msg)
	panic(fatalPanic{msg})
}
