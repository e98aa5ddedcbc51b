package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// Disk space guard (see "Disk full" in the package doc).
const (
	// spaceRefreshBytes: the guard re-reads the filesystem's free space
	// after this many admitted bytes even when its estimate is comfortable.
	spaceRefreshBytes = 1 << 20
	// walRecordOverhead approximates what a mutation adds to the WAL and
	// the memtable besides its key and value.
	walRecordOverhead = 64
	// maxDefaultReserve caps the default DiskReserve.
	maxDefaultReserve = 4 << 30
	// memTableDiskShare: at Open MemTableSize is capped at 1/16 of the
	// filesystem, so a full memtable's flush fits in the reserve.
	memTableDiskShare = 16
	// l0DiskShare: at Open the L0 data that starts a compaction (the L0
	// threshold × MemTableSize) is kept within 1/8 of the filesystem, so
	// that overwritten and deleted items are compacted away well before
	// the reserve refuses writes.
	l0DiskShare = 8
	// reclaimInterval: while writes are refused for space, the sweeper
	// compacts the whole store at most this often (DB.reclaim).
	reclaimInterval = 30 * time.Second
	// backgroundErrorBackoff is how long Pebble's background goroutine
	// waits after an ENOSPC flush or compaction error before it retries.
	backgroundErrorBackoff = time.Second
	// errorLogInterval rate-limits repeated Pebble background error logs.
	errorLogInterval = time.Minute
)

// spaceGuard keeps Pebble away from ENOSPC: every mutation is admitted
// against an estimate of the filesystem's free space, refreshed with statfs
// every spaceRefreshBytes admitted bytes and whenever the estimate drops
// below the floor. Safe for concurrent use; admit allocates nothing.
type spaceGuard struct {
	fs      vfs.FS
	dir     string
	reserve int64 // item writes fail below it; the low floor is reserve/2
	log     *slog.Logger

	// readOnly: Open found less than half the reserve free and opened
	// Pebble read-only; every mutation fails with ErrNoSpace. Set before
	// the DB is published, never changed.
	readOnly bool

	avail atomic.Int64 // last statfs minus bytes admitted since
	since atomic.Int64 // bytes admitted since the last statfs
	full  atomic.Bool  // the last refresh found less than the reserve

	// mu serialises refreshes (one statfs at a time).
	mu sync.Mutex
}

// newSpaceGuard returns nil (no guard) when reserve < 0.
func newSpaceGuard(fs vfs.FS, dir string, reserve int64, log *slog.Logger) *spaceGuard {
	if reserve < 0 {
		return nil
	}
	g := &spaceGuard{fs: fs, dir: dir, reserve: reserve, log: log}
	g.avail.Store(-1) // forces a refresh on the first admit
	return g
}

// openSpaceGuard returns the guard for Open (nil when disabled) after a
// first look at the disk. With less than half the reserve free, Pebble
// could not even replay its WAL and write a new MANIFEST, so the guard is
// read-only: one log line says so and Open opens Pebble read-only (or,
// with no store in Dir yet, fails with ErrNoSpace).
func openSpaceGuard(fs vfs.FS, opts *Options) (*spaceGuard, error) {
	g := newSpaceGuard(fs, opts.Dir, opts.DiskReserve, opts.Logger)
	if g == nil {
		return nil, nil
	}
	u, err := fs.GetDiskUsage(opts.Dir)
	if err != nil {
		return nil, fmt.Errorf("engine: disk usage of %s: %w", opts.Dir, err)
	}
	if avail := int64(min(u.AvailBytes, 1<<62)); avail < g.reserve/2 {
		if d, err := pebble.Peek(opts.Dir, fs); err == nil && !d.Exists {
			return nil, fmt.Errorf("%w: %d bytes free on %s, less than half the %d reserved for compactions: no new store can be created there",
				ErrNoSpace, avail, opts.Dir, g.reserve)
		}
		g.readOnly = true
		g.full.Store(true)
		g.log.Error("engine: disk full at open: serving reads only; every write fails until kvd restarts with more free space",
			"dir", g.dir, "free_bytes", avail, "reserve_bytes", g.reserve)
		return g, nil
	}
	g.avail.Store(-1) // the first admit looks again
	return g, nil
}

// readOnlyOpen reports whether Open must open Pebble read-only.
func (g *spaceGuard) readOnlyOpen() bool { return g != nil && g.readOnly }

// admit reports whether a mutation adding about n bytes may be written:
// nil, or ErrNoSpace when the filesystem's free space would drop below the
// reserve, or below half of it for low (deletes, which free space once
// compacted, and small registry and meta records).
func (g *spaceGuard) admit(n int64, low bool) error {
	if g == nil {
		return nil
	}
	if g.readOnly {
		return fmt.Errorf("%w: opened read-only on a full disk; restart once space is freed", ErrNoSpace)
	}
	floor := g.reserve
	if low {
		floor /= 2
	}
	if g.avail.Add(-n) >= floor && g.since.Add(n) < spaceRefreshBytes {
		return nil
	}
	avail, err := g.refresh()
	if err != nil {
		return nil // cannot tell: let Pebble try
	}
	refused := avail-n < floor
	if refused || !low {
		g.setFull(refused, avail)
	}
	if refused {
		return fmt.Errorf("%w: %d bytes free on %s, %d reserved for compactions", ErrNoSpace, avail, g.dir, g.reserve)
	}
	return nil
}

// setFull records whether writes are refused, logging each transition once.
func (g *spaceGuard) setFull(full bool, avail int64) {
	if g.full.Swap(full) == full {
		return
	}
	if full {
		g.log.Error("engine: disk nearly full, refusing writes until space returns",
			"dir", g.dir, "free_bytes", avail, "reserve_bytes", g.reserve)
	} else {
		g.log.Warn("engine: disk space returned, accepting writes",
			"dir", g.dir, "free_bytes", avail, "reserve_bytes", g.reserve)
	}
}

// refresh reads the free space and resets the estimate.
func (g *spaceGuard) refresh() (int64, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	u, err := g.fs.GetDiskUsage(g.dir)
	if err != nil {
		return 0, err
	}
	avail := int64(min(u.AvailBytes, 1<<62))
	g.avail.Store(avail)
	g.since.Store(0)
	return avail, nil
}

// Full reports whether the last write refused for lack of space has not
// been followed by an admitted one (writes fail with ErrNoSpace meanwhile).
func (db *DB) Full() bool { return db.space != nil && db.space.full.Load() }

// sizeForDisk applies the disk-dependent defaults at Open: MemTableSize
// capped at 1/16 of the filesystem and the default DiskReserve.
func (o *Options) sizeForDisk(fs vfs.FS) error {
	if o.DiskReserve < 0 {
		return nil
	}
	u, err := fs.GetDiskUsage(o.Dir)
	if err != nil {
		return fmt.Errorf("engine: disk usage of %s: %w", o.Dir, err)
	}
	total := int64(min(u.TotalBytes, 1<<62))
	if limit := max(total/memTableDiskShare, 1<<20); o.MemTableSize > limit {
		o.MemTableSize = limit
	}
	if o.DiskReserve == 0 {
		o.DiskReserve = max(min(total/4, maxDefaultReserve), 4*o.MemTableSize)
	}
	o.l0Threshold = int(min(l0CompactionThreshold, max(2, total/l0DiskShare/o.MemTableSize)))
	return nil
}

// reclaim compacts the whole store while writes are refused for space, at
// most once every reclaimInterval (the sweeper calls it). Overwritten and
// deleted items keep their space until a compaction drops them, and with
// writes refused none may start: deletes alone may never fill a memtable,
// and L0 may stay under its threshold. The reserve is what the compaction
// needs. It stops when Close does.
func (db *DB) reclaim(now time.Time) {
	g, last := db.space, db.reclaimed.Load()
	if g == nil || g.readOnly || !g.full.Load() || now.UnixNano()-last < int64(reclaimInterval) ||
		!db.reclaimed.CompareAndSwap(last, now.UnixNano()) {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-db.sweepStop:
			cancel()
		case <-ctx.Done():
		}
	}()
	before, _ := g.refresh()
	err := db.pdb.Flush()
	if err == nil {
		err = db.pdb.Compact(ctx, []byte{0}, []byte{0xff}, true) // every key starts with a kind byte
	}
	after, _ := g.refresh()
	db.log.Warn("engine: disk full: compacted the store to reclaim overwritten and deleted items",
		"dir", g.dir, "free_bytes_before", before, "free_bytes_after", after, "reserve_bytes", g.reserve, "err", err)
	if after >= g.reserve {
		g.setFull(false, after)
	}
}

// fatalPanic is what pebbleLogger.Fatalf panics with; DB.commit recovers it.
type fatalPanic struct{ msg string }

func (f fatalPanic) String() string { return f.msg }

// commit commits batch. Pebble ends a failed WAL write with Fatalf (or a
// panic of the error) on the committing goroutine; commit recovers that,
// marks the DB failed (every later mutation returns ErrStorage without
// touching Pebble's commit pipeline, which may be stuck) and returns
// ErrStorage. Other panics are not Pebble's fatal path and propagate.
func (db *DB) commit(batch *pebble.Batch, o *pebble.WriteOptions) (err error) {
	if db.failed.Load() {
		return ErrStorage
	}
	defer func() {
		if r := recover(); r != nil {
			err = db.fail(r)
		}
	}()
	return batch.Commit(o)
}

// logData is commit for an empty LogData record (SyncWAL).
func (db *DB) logData(o *pebble.WriteOptions) (err error) {
	if db.failed.Load() {
		return ErrStorage
	}
	defer func() {
		if r := recover(); r != nil {
			err = db.fail(r)
		}
	}()
	return db.pdb.LogData(nil, o)
}

// fail turns a recovered Pebble fatal panic into ErrStorage (wrapping
// ErrNoSpace too when the cause is ENOSPC) and logs it once.
func (db *DB) fail(r any) error {
	var cause error
	switch v := r.(type) {
	case fatalPanic:
		cause = errors.New(v.msg)
	case error:
		cause = v
	default:
		panic(r)
	}
	if !db.failed.Swap(true) {
		db.log.Error("engine: storage failed: writes are refused until kvd restarts; reads continue",
			"dir", db.opts.Dir, "err", cause)
	}
	if isNoSpace(cause) {
		return fmt.Errorf("%w (%w): %v", ErrStorage, ErrNoSpace, cause)
	}
	return fmt.Errorf("%w: %v", ErrStorage, cause)
}

// isNoSpace reports whether err is (or, through Pebble's string-formatted
// fatal messages, reads as) ENOSPC.
func isNoSpace(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || strings.Contains(err.Error(), "no space left on device")
}

// eventListener makes Pebble's background errors bounded: each distinct
// kind is logged at most once per errorLogInterval (with the number
// suppressed), and an ENOSPC flush or compaction failure waits
// backgroundErrorBackoff before Pebble retries, instead of spinning.
func (o *Options) eventListener() *pebble.EventListener {
	bg := &rateLog{log: o.Logger, now: o.Now}
	slow := &rateLog{log: o.Logger, now: o.Now}
	return &pebble.EventListener{
		BackgroundError: func(err error) {
			bg.logf("pebble: background error", err)
			if isNoSpace(err) {
				time.Sleep(backgroundErrorBackoff)
			}
		},
		DiskSlow: func(info pebble.DiskSlowInfo) {
			slow.logf("pebble: disk slow", errors.New(info.String()))
		},
	}
}

// rateLog logs an error at most once per errorLogInterval.
type rateLog struct {
	log *slog.Logger
	now func() time.Time

	mu         sync.Mutex
	last       time.Time // guarded by mu
	suppressed int       // guarded by mu
}

func (r *rateLog) logf(msg string, err error) {
	r.mu.Lock()
	now := r.now()
	if !r.last.IsZero() && now.Sub(r.last) < errorLogInterval {
		r.suppressed++
		r.mu.Unlock()
		return
	}
	n := r.suppressed
	r.last, r.suppressed = now, 0
	r.mu.Unlock()
	r.log.Error(msg, "err", err, "suppressed_since_last", n)
}
