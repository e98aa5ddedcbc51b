// Package engine is kvd's storage engine: one Pebble database per node, split
// into one keyspace per bucket (tenant), with memcached item semantics on top.
//
// # What engine owns
//
//   - The Pebble database under Options.Dir and its lifetime (Open, Close).
//   - The bucket registry: bucket names, their never-reused numeric IDs and an
//     opaque settings blob per bucket that the caller owns (JSON in kvd).
//   - Small node-level records (PutMeta, Meta), e.g. node throttle settings.
//   - Items: flags, absolute expiry, CAS, value and the meta protocol's
//     stale and win-token states (Lease) per key, with the memcached
//     rules for SET/ADD/REPLACE/APPEND/PREPEND, CAS checks, INCR/DECR, TOUCH,
//     DELETE and FLUSH (at once, or delayed: FlushAt); the per-bucket item
//     count; one background sweeper goroutine that deletes expired items
//     from disk and performs delayed flushes that fell due.
//   - The resident item cache: recently used live items kept in memory in
//     front of Pebble (see below).
//
// It knows nothing about the wire protocol: it returns the sentinel errors
// below (compare with errors.Is) and the server maps them to statuses.
//
// # Key layout
//
// Every Pebble key starts with one kind byte:
//
//	'i' name                          internal records: "next_bucket_id" → u32 BE
//	'b' name                          bucket registry: name → id u32 BE ‖ settings
//	'm' key                           node meta (PutMeta/Meta): key → value
//	'k' id u32 BE ‖ key               item: flags u32 ‖ expiry u32 ‖ state u2 ‖ cas u62 (BE) ‖ value
//	'x' id u32 BE ‖ expiry u32 BE ‖ key   expiry index entry (empty value), only when expiry ≠ 0
//	'f' id u32 BE                     pending delayed flush (FlushAt): deadline u32 BE
//
// Bucket IDs come from a counter persisted in the 'i' records and are never
// reused, so flushing or deleting a bucket is one DeleteRange over its 'k' and
// its 'x' prefix, and a bucket re-created under an old name starts empty. The
// expiry index is ordered by time, so a sweep reads only entries that have
// expired; an item record and its index entry always change in one batch.
//
// # Durability contract
//
// Item mutations (Store, Delete, Arith, Touch, Flush, FlushAt) commit with
// pebble.NoSync: they are visible to every reader when they return, but not yet
// durable. DB.SyncWAL makes every mutation that returned before the call
// durable; the server calls it once per batch of mutations and acknowledges
// them only afterwards. Concurrent SyncWAL calls share fsyncs through Pebble's
// group commit. With Options.WALSync false SyncWAL does nothing and acknowledged
// writes may be lost on a crash or power loss. Note that a reader can see a
// mutation before it is durable (read-uncommitted with respect to fsync).
// Registry changes (CreateBucket, CreateBuckets: one sync per batch of 4096,
// DeleteBucket, SetBucketSettings) and PutMeta
// are synced before they return, whatever WALSync says. On Linux the WAL's
// fdatasync goes through AIO and is waited for first in a bounded raw
// syscall (walFile: with a plain blocking fdatasync every few hundred µs, Go's
// sysmon never stopped retaking the flusher's processor).
//
// # Disk full
//
// Pebble cannot survive ENOSPC on its own: a failed WAL write ends in
// Logger.Fatalf (or a panic) with its commit pipeline wedged, a failed
// MANIFEST write likewise on a background goroutine, and a failed flush is
// retried at once, forever. So engine keeps Pebble away from a full disk
// instead of handling ENOSPC after the fact. A space guard admits every
// mutation against an estimate of the free space on Dir's filesystem
// (statfs every 1 MiB admitted, and whenever the estimate drops below the
// floor; one atomic add otherwise): a mutation that would leave less than
// Options.DiskReserve free fails with ErrNoSpace before anything is
// written; deletes, Flush, DeleteBucket and the sweeper may go down to half
// the reserve, since they free space once compacted, and so may the small
// registry and meta records (CreateBucket, SetBucketSettings, PutMeta) a
// restart needs; PutMeta and SetBucketSettings of an unchanged value write
// nothing. The reserve (default
// a quarter of the filesystem, at most 4 GiB, at least 4×MemTableSize) is
// what Pebble's flushes and compactions need to finish; MemTableSize is
// capped at 1/16 of the filesystem so a full memtable's flush fits in it.
// Writes succeed again by themselves once the free space is back above the
// reserve (the guard looks again on every refused write). Reads are never
// refused. One log line marks entering and one leaving the full state.
// Overwritten and deleted items hold space until a compaction drops them,
// and with writes refused none may start, so while the guard refuses
// writes the sweeper flushes and compacts the whole store every
// reclaimInterval (DB.reclaim). On a small disk the L0 compaction
// threshold is lowered so that L0 holds at most 1/8 of the filesystem.
//
// At Open, with less than half the reserve free, Pebble could not even
// replay its WAL: Open logs one line and opens Pebble read-only (reads
// served, every mutation ErrNoSpace) until kvd restarts with more space.
//
// Safety nets, for space taken by something else: Fatalf panics with a
// value DB.commit recovers on the committing goroutine, turning it into
// ErrStorage for that and every later mutation (no further call reaches
// Pebble's commit pipeline; reads continue; recovery needs a restart, which
// replays the WAL, so no acknowledged write is lost); a fatal error on a
// Pebble background goroutine still ends the process. Pebble's background
// errors are logged at most once a minute (with a count), and an ENOSPC
// flush or compaction error waits a second before Pebble retries. No
// ballast file: the reserve plays its role without a file to manage.
//
// # Resident item cache
//
// A bounded in-memory copy of recently used live items (the resident set):
// flags, expiry, CAS, key and value, keyed by bucket ID and key, in 64
// shards chosen by hash, each with 1/64 of Options.ItemCacheSize (default
// 64 MiB; negative disables the cache) and its own mutex. An item costs
// its buffer (key + value, rounded up to the allocator's size class) plus
// a fixed 96 bytes; items over 1/8 of a shard are never resident. Each
// shard evicts by CLOCK: a hit sets an item's reference bit, the hand
// clears it or evicts. Mutations write through (insert or update the entry,
// reusing its buffer when the value fits); Get answers from the cache when
// it can and otherwise makes what it read from Pebble resident. There are
// no negative entries: a missing key is never resident.
//
// Coherence. A resident item is always what Pebble holds for the key, except
// while a mutation is between its commit and its return:
//
//   - Every item mutation (Store in every mode, Arith, Touch, Delete, and the
//     sweeper's deletes) updates or drops the key's entry under the key's
//     stripe lock after its Pebble commit (drops it if the commit failed), so
//     no mutation returns before the cache shows it, and nothing uncommitted
//     is ever resident.
//   - A Get that misses reads Pebble without a stripe lock, so a mutation may
//     commit during its read, and a commit is visible in Pebble before the
//     mutation updates the cache. Each mutation (the sweeper's deletes
//     too) brackets its read, commit and cache update with the shard's
//     begin and end: begin bumps the shard's seq and counts the mutation
//     pending, end uncounts it. The miss records seq and whether a
//     mutation was pending. If none was and seq has not moved by the end
//     of the read, what the Get read is what Pebble held all along: it
//     answers it and fills it in (unless the key is resident again).
//     Otherwise it neither fills nor answers what it read, but reads again
//     under the key's stripe lock, after any mutation of the key has
//     updated the cache. So no reader sees an item go back in time: an old
//     version filled in after a newer one was read, or a newer one answered
//     from Pebble while the cache still shows the old.
//   - Flush drops the bucket's entries while it holds the bucket exclusively,
//     after its commit; DeleteBucket drops them once the bucket is marked
//     deleted, before its commit; Close drops everything after closing the
//     buckets. In each case no operation that could fill the cache for that
//     bucket can run any more, so memory is reclaimed at once.
//   - A resident item expired at the caller's now is a miss (and is dropped).
//   - Because of this, a mutation that needs no old value (SET, ADD,
//     REPLACE, DELETE: only existence, expiry and CAS) takes a resident
//     key's header from the cache under the stripe lock instead of reading
//     Pebble (a "blind" write); the item count and the expiry index stay
//     exact. APPEND, PREPEND, INCR/DECR, TOUCH and non-resident keys read.
//
// What the event loop may call: Bucket.Peek, which looks in the cache only,
// never touches Pebble, and takes one shard mutex that nobody holds across
// I/O or a blocking call (mutations take it after their commit, for a copy;
// the stripe and bucket locks, which are held across Pebble calls, are never
// taken by Peek). A Peek hit copies the value into the caller's buffer and
// allocates nothing. A miss means only "not resident": the loop then hands
// the command to a worker for Get. DB.CacheStats reports hits and misses
// (of Peek and Get look-ups), evictions, bytes and items.
//
// # Concurrency
//
// DB and Bucket are safe for concurrent use. Read-modify-write operations on a
// key (CAS checks, ADD, APPEND, INCR, ...) are atomic: they hold one of 1024
// striped mutexes, chosen by hashing bucket ID and key, across the read and the
// NoSync commit, never across an fsync. A Bucket's RWMutex is held shared by
// every data operation and exclusively by Flush, FlushAt, a delayed flush
// falling due, DeleteBucket and Close, so no
// write lands in a keyspace after it was cleared. Get takes no stripe lock;
// Peek takes neither the bucket's lock nor a stripe lock. Lock order: bucket
// mu, then a stripe, then an item cache shard.
//
// Times are arguments: every data operation takes now (Unix seconds) and treats
// an item whose expiry is ≤ now as missing. Only the sweeper reads a clock
// (Options.Now); Open seeds the CAS counter from the wall clock (nanoseconds)
// or, if higher, the largest CAS on disk, so CAS keeps increasing across
// restarts.
package engine

import "errors"

// Errors returned by engine. Callers compare with errors.Is; other errors
// (I/O, corruption) are wrapped Pebble errors.
var (
	// ErrNotFound: the key (or meta record) does not exist or has expired.
	ErrNotFound = errors.New("engine: key not found")
	// ErrExists: CAS mismatch, or ADD on a live item.
	ErrExists = errors.New("engine: key exists")
	// ErrNotStored: APPEND or PREPEND on a missing item, or whose result
	// would exceed Options.MaxValueSize.
	ErrNotStored = errors.New("engine: item not stored")
	// ErrNonNumeric: INCR/DECR on a value that memcached would not parse
	// as a decimal uint64 (see Bucket.Arith).
	ErrNonNumeric = errors.New("engine: value is not a decimal number")
	// ErrTooBig: the value would exceed Options.MaxValueSize.
	ErrTooBig = errors.New("engine: value too big")
	// ErrBucketExists: CreateBucket with a name already in use.
	ErrBucketExists = errors.New("engine: bucket exists")
	// ErrBucketNotFound: no bucket with that name.
	ErrBucketNotFound = errors.New("engine: bucket not found")
	// ErrBucketDeleted: the *Bucket was deleted; get a new one with Bucket.
	ErrBucketDeleted = errors.New("engine: bucket deleted")
	// ErrBadBucketName: name is not 1–100 bytes of [A-Za-z0-9_.%-].
	ErrBadBucketName = errors.New("engine: bad bucket name")
	// ErrClosed: the DB was closed.
	ErrClosed = errors.New("engine: closed")
	// ErrNoSpace: the mutation was refused because the disk is (nearly)
	// full: writing it would leave less than Options.DiskReserve free.
	// Nothing was written; reads continue, and writes succeed again by
	// themselves once space returns.
	ErrNoSpace = errors.New("engine: no space left on device")
	// ErrStorage: Pebble's commit path failed fatally (e.g. a WAL write);
	// every mutation is refused until the process restarts and replays
	// the WAL. Reads continue. Wraps ErrNoSpace too when the cause was
	// ENOSPC.
	ErrStorage = errors.New("engine: storage failed, writes disabled until restart")
	// ErrDumpBusy: another key listing is running (Bucket.Dump); one runs
	// at a time, as memcached runs one LRU crawl.
	ErrDumpBusy = errors.New("engine: another key listing is running")
)
