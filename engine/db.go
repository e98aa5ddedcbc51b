package engine

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// DB is kvd's store: one Pebble database holding the bucket registry, node
// meta records and every bucket's items. Open starts one sweeper goroutine
// that Close stops. Safe for concurrent use.
type DB struct {
	opts   Options
	pdb    *pebble.DB
	log    *slog.Logger
	writeO *pebble.WriteOptions // NoSync: item mutations

	// cas is the last CAS handed out; seeded at Open above the wall clock in
	// nanoseconds and above every stored CAS.
	cas atomic.Uint64

	// lister is the key listing running (Bucket.Dump); dumpMu is held by
	// a chunk of it while it reads, and by Close before Pebble closes.
	lister lister
	dumpMu sync.Mutex

	// space refuses mutations before the disk is full; nil if disabled.
	space *spaceGuard
	// failed is set when Pebble's commit path failed fatally (see commit);
	// every later mutation returns ErrStorage.
	failed atomic.Bool

	locks *stripes
	// cache is the resident item cache; nil when Options.ItemCacheSize < 0.
	cache *itemCache

	// testHookMissed and testHookBeforeFill, if set (by tests only), run in
	// Get after a cache miss, before its Pebble read and before its fill.
	testHookMissed, testHookBeforeFill func()
	// testHookRead, if set (by tests only), runs when a mutation reads the
	// key's current record from Pebble.
	testHookRead func()
	// testHookCommitted, if set (by tests only), runs when a store has
	// committed, before it updates the cache.
	testHookCommitted func()

	// adminMu serialises registry changes, PutMeta and Close. It is held
	// across their fsyncs, so nothing on a hot path may take it.
	adminMu sync.Mutex
	// nextID is the next bucket ID to hand out.
	nextID uint32 // guarded by adminMu

	// mu guards the bucket map and the closed flag. Never held across I/O.
	mu      sync.RWMutex
	buckets map[string]*bucketEntry // guarded by mu
	closed  bool                    // guarded by mu

	// openMu is held shared by SyncWAL and Meta across their Pebble calls
	// and exclusively by Close while it shuts Pebble down.
	openMu   sync.RWMutex
	pebbleOK bool // guarded by openMu

	sweepStop chan struct{} // closed by Close to stop the sweeper
	reclaimed atomic.Int64  // when the last reclaim started, Unix ns (space.go)
	sweepDone chan struct{} // closed by the sweeper when it exits
}

// bucketEntry is the registry's view of a bucket.
type bucketEntry struct {
	b        *Bucket
	settings []byte // owned by the registry; copied in and out
}

// Open opens (or creates) the store in opts.Dir, loads the bucket registry,
// counts every bucket's items and starts the sweeper.
func Open(opts Options) (*DB, error) {
	opts.EnsureDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	fs := opts.fs
	if fs == nil {
		fs = vfs.Default
	}
	if err := fs.MkdirAll(opts.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("engine: open %s: %w", opts.Dir, err)
	}
	if err := opts.sizeForDisk(fs); err != nil {
		return nil, err
	}
	space, err := openSpaceGuard(fs, &opts)
	if err != nil {
		return nil, err
	}
	po := opts.pebbleOptions()
	po.FS = pageFS{fs}
	po.ReadOnly = space.readOnlyOpen()
	pdb, err := openLocked(opts, po)
	if err != nil {
		return nil, fmt.Errorf("engine: open %s: %w", opts.Dir, err)
	}
	db := &DB{
		opts:      opts,
		pdb:       pdb,
		log:       opts.Logger,
		writeO:    pebble.NoSync,
		space:     space,
		locks:     &stripes{seed: maphash.MakeSeed()},
		cache:     newItemCache(opts.ItemCacheSize),
		buckets:   make(map[string]*bucketEntry),
		pebbleOK:  true,
		sweepStop: make(chan struct{}),
		sweepDone: make(chan struct{}),
	}
	if err := db.load(); err != nil {
		_ = pdb.Close()
		return nil, err
	}
	go db.sweepLoop()
	return db, nil
}

// load reads the registry and the ID counter, counts items per bucket and
// seeds the CAS counter.
func (db *DB) load() error {
	v, err := db.getCopy(keyNextBucketID)
	switch {
	case errors.Is(err, ErrNotFound):
		db.nextID = 1
	case err != nil:
		return err
	case len(v) != 4:
		return fmt.Errorf("engine: corrupt next bucket id record (%d bytes)", len(v))
	default:
		db.nextID = binary.BigEndian.Uint32(v)
	}
	if err := db.loadBuckets(); err != nil {
		return err
	}
	if err := db.loadFlushes(); err != nil {
		return err
	}
	maxCAS, err := db.countItems()
	if err != nil {
		return err
	}
	db.cas.Store(max(uint64(time.Now().UnixNano()), maxCAS))
	return nil
}

// loadBuckets fills db.buckets from the 'b' records.
func (db *DB) loadBuckets() error {
	it, err := db.pdb.NewIter(&pebble.IterOptions{
		LowerBound: []byte{kindBucket},
		UpperBound: []byte{kindBucket + 1},
	})
	if err != nil {
		return fmt.Errorf("engine: load buckets: %w", err)
	}
	for it.First(); it.Valid(); it.Next() {
		name := string(it.Key()[1:])
		v := it.Value()
		if len(v) < 4 || !validBucketName(name) {
			_ = it.Close()
			return fmt.Errorf("engine: corrupt registry record for bucket %q", name)
		}
		id := binary.BigEndian.Uint32(v)
		db.buckets[name] = &bucketEntry{
			b:        newBucket(db, name, id),
			settings: append([]byte(nil), v[4:]...),
		}
	}
	return closeIter(it, "load buckets")
}

// countItems scans every item record once, sets each bucket's count,
// warms the resident item cache (while everything fits, a miss is then an
// answer: no Pebble read) and returns the largest CAS found. Records of
// unknown bucket IDs are ignored.
func (db *DB) countItems() (uint64, error) {
	byID := make(map[uint32]*Bucket, len(db.buckets))
	for _, e := range db.buckets {
		byID[e.b.id] = e.b
	}
	it, err := db.pdb.NewIter(&pebble.IterOptions{
		LowerBound: []byte{kindItem},
		UpperBound: []byte{kindItem + 1},
	})
	if err != nil {
		return 0, fmt.Errorf("engine: count items: %w", err)
	}
	var maxCAS uint64
	openedAt := unixSeconds(db.opts.Now())
	for it.First(); it.Valid(); it.Next() {
		k := it.Key()
		if len(k) < bucketPrefixLen {
			continue
		}
		b := byID[binary.BigEndian.Uint32(k[1:5])]
		if b == nil {
			continue
		}
		b.count.Add(1)
		h, v, ok := decodeRecord(it.Value())
		if ok {
			maxCAS = max(maxCAS, h.cas)
		}
		if db.cache != nil {
			if ok {
				db.cache.warm(b.id, k[bucketPrefixLen:], h, v, openedAt)
			} else {
				db.cache.forget(b.id, k[bucketPrefixLen:])
			}
		}
	}
	return maxCAS, closeIter(it, "count items")
}

// Close stops the sweeper (waiting for it), flushes the memtables and closes
// Pebble. It waits for operations in flight; afterwards every call returns
// ErrClosed (ErrBucketDeleted for buckets deleted before). A second Close
// returns ErrClosed.
func (db *DB) Close() error {
	db.adminMu.Lock()
	defer db.adminMu.Unlock()
	db.mu.Lock()
	if db.closed {
		db.mu.Unlock()
		return ErrClosed
	}
	db.closed = true
	entries := make([]*bucketEntry, 0, len(db.buckets))
	for _, e := range db.buckets {
		entries = append(entries, e)
	}
	db.mu.Unlock()

	close(db.sweepStop)
	<-db.sweepDone
	for _, e := range entries {
		e.b.setState(stateClosed)
	}
	db.dumpMu.Lock() // a Dump sees its bucket closed within a stride and closes its iterator
	defer db.dumpMu.Unlock()
	if db.cache != nil {
		db.cache.reset() // after setState: nothing can fill it any more
	}
	db.openMu.Lock()
	defer db.openMu.Unlock()
	db.pebbleOK = false
	var ferr error
	if !db.space.readOnlyOpen() { // read-only: nothing to flush
		if ferr = db.pdb.Flush(); ferr != nil {
			ferr = fmt.Errorf("engine: flush: %w", ferr)
		}
	}
	if err := db.pdb.Close(); err != nil {
		return errors.Join(ferr, fmt.Errorf("engine: close: %w", err))
	}
	return ferr
}

// SyncWAL makes every mutation that returned before the call durable by
// committing an empty LogData record with pebble.Sync: Pebble's WAL is one
// append-only file per memtable, written in commit order, and a sync request
// fsyncs everything written before it (an older WAL file is fsynced when it is
// rotated out). Concurrent callers are grouped into shared fsyncs by Pebble's
// WAL flusher. No-op when Options.WALSync is false.
func (db *DB) SyncWAL() error {
	if !db.opts.WALSync {
		return nil
	}
	db.openMu.RLock()
	defer db.openMu.RUnlock()
	if !db.pebbleOK {
		return ErrClosed
	}
	if err := db.logData(pebble.Sync); err != nil {
		return fmt.Errorf("engine: sync wal: %w", err)
	}
	return nil
}

// CacheStats returns the resident item cache's figures (zero when the cache
// is disabled).
func (db *DB) CacheStats() CacheStats {
	if db.cache == nil {
		return CacheStats{}
	}
	return db.cache.stats()
}

// BlockCacheSize is the capacity of Pebble's block cache (Options.CacheSize).
func (db *DB) BlockCacheSize() int64 { return db.opts.CacheSize }

// Pebble returns the underlying Pebble database, for metrics only. It must
// not be used after Close, and writing through it bypasses every invariant.
func (db *DB) Pebble() *pebble.DB { return db.pdb }

// nextCAS returns a new CAS, unique and increasing for this DB. It is never
// 0 (which means "no CAS"): the counter starts near 2^60 (Unix nanoseconds).
func (db *DB) nextCAS() uint64 { return db.cas.Add(1) }

// getCopy reads key and returns a copy of its value, ErrNotFound if absent.
func (db *DB) getCopy(key []byte) ([]byte, error) {
	v, closer, err := db.pdb.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("engine: get: %w", err)
	}
	out := append([]byte(nil), v...)
	return out, closer.Close()
}

func closeIter(it *pebble.Iterator, what string) error {
	if err := it.Close(); err != nil {
		return fmt.Errorf("engine: %s: %w", what, err)
	}
	return nil
}

// lockWait is how long Open waits for the store's lock while another
// process holds it: a kvd killed with -9 and started again at once finds
// its predecessor's lock until the kernel has finished that process.
const lockWait = 5 * time.Second

// openLocked opens Pebble, waiting up to lockWait (one log line) while
// another process holds the store's lock; a second kvd on the same data
// directory then fails with the lock error.
func openLocked(opts Options, po *pebble.Options) (*pebble.DB, error) {
	deadline := time.Now().Add(lockWait)
	for logged := false; ; logged = true {
		pdb, err := pebble.Open(opts.Dir, po)
		if !errors.Is(err, syscall.EAGAIN) {
			return pdb, err
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%w: another process uses this data directory (it holds the store's LOCK)", err)
		}
		if !logged {
			opts.Logger.Warn("engine: the store's lock is held by another process; waiting for it",
				"dir", opts.Dir, "wait", lockWait)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
