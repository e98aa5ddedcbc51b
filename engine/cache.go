package engine

import (
	"bytes"
	"hash/maphash"
	"slices"
	"sync"
)

const (
	// cacheShards is the number of item cache shards; a power of two.
	cacheShards = 64
	// cacheShardBits is log2(cacheShards): a shard is chosen by the top
	// bits of the entry hash.
	cacheShardBits = 6
	// entryOverhead is charged per resident item on top of its buffer: the
	// slot (cacheEntry, 64 bytes), its index map entry and the map's slack.
	entryOverhead = 96
	// purgeChunk is how many slots dropBucket scans per shard lock hold.
	purgeChunk = 1024
)

// CacheStats describes the resident item cache (all zero when disabled).
// Hits and Misses count lookups by Peek and by Get; Evictions counts items
// dropped to make room (not invalidations by mutations, Flush or
// DeleteBucket).
type CacheStats struct {
	Hits      uint64
	Misses    uint64
	Evictions uint64
	Bytes     int64 // charged bytes resident: buffers (key+value) + per-item overhead
	Items     int64 // resident items
	Capacity  int64 // Options.ItemCacheSize
}

// itemCache is the resident set: recently used live items, keyed by bucket
// ID and key, in cacheShards shards that each hold 1/cacheShards of the byte
// budget and evict by CLOCK. Safe for concurrent use; every method takes one
// shard lock at a time and never holds it across I/O or a blocking call.
//
// Coherence is the callers' business (see the package doc): a mutation
// brackets its Pebble commit with begin and end under the key's stripe
// lock and calls set or remove after the commit, and Get fills the cache
// only through fill with the token of its miss, which drops the fill if a
// mutation in the shard began since the miss or was under way at it.
type itemCache struct {
	seed     maphash.Seed
	capacity int64
	shards   [cacheShards]cacheShard
}

// cacheShard is one shard of itemCache.
type cacheShard struct {
	mu sync.Mutex
	// index maps an entry hash (bucket ID and key) to its slot. Two items
	// with the same 64-bit hash cannot both be resident: the later one
	// replaces the earlier, and lookups compare the key.
	index map[uint64]int32 // guarded by mu
	slots []cacheEntry     // guarded by mu; the CLOCK ring
	free  []int32          // guarded by mu; unused slots
	hand  int              // guarded by mu; CLOCK hand
	bytes int64            // guarded by mu; charged bytes resident
	// seq counts mutations' begins in this shard, and pending the
	// mutations between begin and end: committing, their cache update not
	// yet made. A Get that missed fills in what it read
	// from Pebble only if no mutation was pending at the miss and seq has
	// not moved since, so what it installs is what Pebble held all along:
	// never a value older than one another reader has already been given.
	seq                     uint64 // guarded by mu
	pending                 int    // guarded by mu
	hits, misses, evictions uint64 // guarded by mu
	// complete (guarded by mu) holds while every item record in Pebble
	// whose hash falls in this shard is resident, expired ones included:
	// then a miss means "no such item" and nobody reads Pebble for it. A
	// new cache is complete; open's warm-up keeps it so while everything
	// on disk fits; the first item that leaves the shard while still on
	// disk (an eviction, a hash collision, an item too large or no room,
	// a commit whose outcome is unknown) ends it for good.
	complete bool

	budget   int64 // immutable: bytes this shard may hold
	maxEntry int64 // immutable: largest charge worth caching (budget/8)
	_        [64]byte
}

// cacheEntry is one resident item; buf == nil marks a free slot.
type cacheEntry struct {
	hash   uint64
	buf    []byte // key ‖ value; cap(buf) is charged
	klen   uint32
	id     uint32 // bucket ID
	flags  uint32
	expiry uint32
	cas    uint64
	ref    bool  // CLOCK reference bit: set by a hit, cleared by the hand
	state  uint8 // the header's meta states
	// The item's reads, for the meta protocol's h and l: see fetchState.
	fetched bool
	atime   uint32
}

// fetchState is a resident item's history of reads: whether it was read
// since it was stored, and when it was last accessed. As in memcached
// (do_item_bump), its first read only marks it fetched, so the access
// time is when it was stored until its second read; every read after
// that sets it (memcached's bumps it lazily, at its LRU maintainer's
// pace). It lives only while the item is resident: an item read from
// Pebble starts again as if just stored.
type fetchState struct {
	atime   uint32 // Unix seconds
	fetched bool
}

// fetch records a read at now.
func (f *fetchState) fetch(now uint32) {
	if !f.fetched {
		f.fetched = true
		return
	}
	f.atime = now
}

func (e *cacheEntry) fetchState() fetchState {
	return fetchState{atime: e.atime, fetched: e.fetched}
}

func (e *cacheEntry) setFetchState(f fetchState) {
	e.atime, e.fetched = f.atime, f.fetched
}

// bump records a read of the entry at now.
func (e *cacheEntry) bump(now uint32) {
	f := e.fetchState()
	f.fetch(now)
	e.setFetchState(f)
}

// fetchStateOf returns the resident item's fetch state; ok is false when
// it is not resident.
func (c *itemCache) fetchStateOf(id uint32, key []byte) (f fetchState, ok bool) {
	ok = c.entry(id, key, func(e *cacheEntry) { f = e.fetchState() })
	return f, ok
}

// entry calls fn with key's resident entry under its shard's lock, and
// reports whether there is one.
func (c *itemCache) entry(id uint32, key []byte, fn func(e *cacheEntry)) bool {
	h := c.hash(id, key)
	s := c.shard(h)
	s.mu.Lock()
	defer s.mu.Unlock()
	i, ok := s.findLocked(h, id, key)
	if ok {
		fn(&s.slots[i])
	}
	return ok
}

// bump records a read at now of the item, if it is resident and live.
func (c *itemCache) bump(id uint32, key []byte, now uint32) {
	c.entry(id, key, func(e *cacheEntry) {
		if e.expiry == 0 || e.expiry > now {
			e.bump(now)
		}
	})
}

// access is what a mutation does to the item's fetchState: a new item
// (SET, APPEND, INCR, …) starts afresh at now; an item changed in place
// (keep: touch, a meta get's lease, invalidation) keeps it, and a touch
// counts as a read (fetch), as memcached's does.
type access struct {
	now         uint32
	keep, fetch bool
}

// apply returns the fetch state after the mutation, given the entry's
// before (ok false: not resident).
func (a access) apply(f fetchState, ok bool) fetchState {
	if !a.keep || !ok {
		f = fetchState{atime: a.now}
	}
	if a.fetch {
		f.fetch(a.now)
	}
	return f
}

func (e *cacheEntry) header() header {
	return header{flags: e.flags, expiry: e.expiry, cas: e.cas, state: e.state}
}

func (e *cacheEntry) key() []byte   { return e.buf[:e.klen] }
func (e *cacheEntry) value() []byte { return e.buf[e.klen:] }
func (e *cacheEntry) charge() int64 { return int64(cap(e.buf)) + entryOverhead }

// fillToken is what a Get that missed needs to fill the cache later.
type fillToken struct {
	hash uint64
	seq  uint64
	// absent: the shard is complete, so the miss is the answer and there
	// is nothing to read (or fill).
	absent bool
	// busy: a mutation in the shard was between begin and end at the miss,
	// so Pebble may already hold a version the cache does not: no fill.
	busy bool
}

// newItemCache returns a cache of capacity bytes, or nil if capacity < 0.
func newItemCache(capacity int64) *itemCache {
	if capacity < 0 {
		return nil
	}
	c := &itemCache{seed: maphash.MakeSeed(), capacity: capacity}
	for i := range c.shards {
		s := &c.shards[i]
		s.index = make(map[uint64]int32)
		s.budget = capacity / cacheShards
		s.maxEntry = s.budget / 8
		s.complete = true
	}
	return c
}

// hash mixes the bucket ID into the key's hash (splitmix64 finaliser).
func (c *itemCache) hash(id uint32, key []byte) uint64 {
	z := uint64(id) + 0x9e3779b97f4a7c15
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return maphash.Bytes(c.seed, key) ^ z ^ z>>31
}

func (c *itemCache) shard(h uint64) *cacheShard {
	return &c.shards[h>>(64-cacheShardBits)]
}

// get looks the item up. A hit (a resident item live at now) appends its
// value to dst[:0]; a resident item expired at now is a miss (and is
// dropped, unless the shard is complete: its record is still on disk until
// the sweeper deletes it). On a miss the token says whether the item is
// absent (a complete shard), or lets the caller fill the entry after a
// Pebble read.
func (c *itemCache) get(id uint32, key []byte, now uint32, dst []byte, bump bool) (Item, bool, fillToken) {
	h := c.hash(id, key)
	s := c.shard(h)
	s.mu.Lock()
	defer s.mu.Unlock()
	i, ok := s.findLocked(h, id, key)
	if ok {
		e := &s.slots[i]
		if e.expiry == 0 || e.expiry > now {
			e.ref = true
			s.hits++
			it := e.header().item(append(dst[:0], e.value()...))
			it.Fetched, it.Accessed = e.fetched, e.atime
			if bump {
				e.bump(now)
			}
			return it, true, fillToken{}
		}
		if !s.complete {
			s.removeLocked(i)
		}
	}
	s.misses++
	return Item{}, false, fillToken{hash: h, seq: s.seq, absent: s.complete, busy: s.pending > 0}
}

// begin starts a mutation of key: until the returned shard's end, no Get
// fills the shard, and a Get that missed before begin fills nothing either
// (its read may predate the commit). Without this a Get that read the old
// version before the commit could install it after another Get had read
// the new one from Pebble, and a reader would see the item go back in time.
//
// It also returns the resident header of key (expired or not), for a
// mutation that needs no old value: it then skips its Pebble read. The
// caller holds the key's stripe lock, so no mutation of the key is between
// its commit and its cache update: a resident entry is what Pebble holds.
// It counts neither a hit nor a miss and leaves the CLOCK bit alone.
// absent reports a miss in a complete shard: the item does not exist. f is
// the resident item's fetch state (what a touch reports).
func (c *itemCache) begin(id uint32, key []byte) (s *cacheShard, hd header, f fetchState, resident, absent bool) {
	h := c.hash(id, key)
	s = c.shard(h)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seq++
	s.pending++
	i, ok := s.findLocked(h, id, key)
	if !ok {
		return s, header{}, fetchState{}, false, s.complete
	}
	return s, s.slots[i].header(), s.slots[i].fetchState(), true, false
}

// end ends a mutation begun in s, after its cache update (set or remove),
// or without one when it wrote nothing.
func (s *cacheShard) end() {
	s.mu.Lock()
	s.pending--
	s.mu.Unlock()
}

// fill reports whether what a Get read from Pebble after the miss that
// returned tok is what Pebble held all along: no mutation in the shard was
// under way at the miss or has begun since. If so, and the Get found the
// item (found), fill makes it resident unless it is resident already (a
// fill or mutation since put this same version there), as stored at now
// and read once (never, unless bump: the read did not count).
func (c *itemCache) fill(tok fillToken, id uint32, key []byte, hd header, value []byte, found bool, now uint32, bump bool) bool {
	s := c.shard(tok.hash)
	if tok.busy {
		return false
	}
	s.mu.Lock()
	_, resident := s.index[tok.hash]
	settled := s.seq == tok.seq
	s.mu.Unlock()
	if !settled || !found || resident || !s.fits(len(key)+len(value)) {
		return settled
	}
	buf := newEntryBuf(key, value, nil) // outside the lock
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, resident := s.index[tok.hash]; s.seq == tok.seq && !resident {
		s.installLocked(tok.hash, id, len(key), hd, fetchState{atime: now, fetched: bump}, buf)
	}
	return true
}

// set makes key's entry hold the item a mutation just committed: value
// v1 ‖ v2 with header hd. The caller holds the key's stripe lock. An entry
// whose buffer fits is updated in place without allocating; otherwise a
// new buffer is allocated outside the shard lock and replaces the entry.
// A complete shard keeps showing the old version until then (a reader
// concurrent with the mutation may see either; none can see neither); an
// incomplete one drops it at once, so a Get that misses meanwhile reads
// Pebble, where the new version is.
func (c *itemCache) set(id uint32, key []byte, hd header, v1, v2 []byte, a access) {
	h := c.hash(id, key)
	s := c.shard(h)
	n := len(key) + len(v1) + len(v2)
	s.mu.Lock()
	var prev fetchState
	i, resident := s.index[h]
	same := resident && s.slots[i].id == id && bytes.Equal(s.slots[i].key(), key)
	if same {
		prev = s.slots[i].fetchState()
	}
	f := a.apply(prev, same)
	if resident {
		e := &s.slots[i]
		if same && reusable(cap(e.buf), n) {
			e.buf = e.buf[:n]
			copy(e.buf[len(key)+copy(e.buf[len(key):], v1):], v2)
			e.flags, e.expiry, e.cas, e.state = hd.flags, hd.expiry, hd.cas, hd.state
			e.setFetchState(f)
			s.mu.Unlock()
			return
		}
		if !s.complete {
			s.removeLocked(i)
		}
	}
	if !s.fits(n) {
		s.replaceLocked(h, id, key, nil)
		s.mu.Unlock()
		return
	}
	s.mu.Unlock()
	buf := newEntryBuf(key, v1, v2)
	s.mu.Lock()
	defer s.mu.Unlock()
	// No Get fills the key in between the two lock holds: the mutation
	// is pending (begin).
	s.replaceLocked(h, id, key, &newEntry{hd: hd, f: f, buf: buf})
}

// newEntry is an item to install: its header, fetch state and key ‖ value
// buffer.
type newEntry struct {
	hd  header
	f   fetchState
	buf []byte
}

// replaceLocked makes ne (nil: nothing) the entry of hash h for (id, key),
// whose current version is on disk. Dropping another item of the same hash
// (also on disk), or leaving (id, key) out, ends the shard's completeness.
func (s *cacheShard) replaceLocked(h uint64, id uint32, key []byte, ne *newEntry) {
	if i, ok := s.index[h]; ok {
		if e := &s.slots[i]; e.id != id || !bytes.Equal(e.key(), key) {
			s.complete = false
		}
		s.removeLocked(i)
	}
	if ne == nil || !s.installLocked(h, id, len(key), ne.hd, ne.f, ne.buf) {
		s.complete = false
	}
}

// remove drops key's entry, if resident, for a mutation that deleted the
// item. The caller holds the key's stripe lock. An entry of the same hash
// that is another item's stays.
func (c *itemCache) remove(id uint32, key []byte) { c.drop(id, key, true) }

// forget drops key's entry, if resident, for a mutation whose commit failed:
// whether the item is on disk is unknown, so its shard is complete no more.
func (c *itemCache) forget(id uint32, key []byte) { c.drop(id, key, false) }

func (c *itemCache) drop(id uint32, key []byte, deleted bool) {
	h := c.hash(id, key)
	s := c.shard(h)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.complete = s.complete && deleted
	if i, ok := s.index[h]; ok {
		if e := &s.slots[i]; e.id == id && bytes.Equal(e.key(), key) {
			s.removeLocked(i)
		}
	}
}

// warm installs an item record found on disk at open (now), without
// evicting anything. One that cannot be resident (too large, no room, a
// hash collision) leaves its shard incomplete.
func (c *itemCache) warm(id uint32, key []byte, hd header, value []byte, now uint32) {
	h := c.hash(id, key)
	s := c.shard(h)
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.complete {
		return // a miss reads Pebble anyway: leave the memory to the load
	}
	if _, taken := s.index[h]; taken || !s.fits(len(key)+len(value)) {
		s.complete = false
		return
	}
	// Room runs out at the budget: installLocked would evict (which ends
	// completeness) or give up, and either way the shard is incomplete.
	if !s.installLocked(h, id, len(key), hd, fetchState{atime: now}, newEntryBuf(key, value, nil)) {
		s.complete = false
	}
}

// dropBucket drops every entry of bucket id, a chunk of slots per lock hold.
// The caller keeps every writer of the bucket out (it holds the bucket's
// mu exclusively or has marked it deleted or closed).
func (c *itemCache) dropBucket(id uint32) {
	for i := range c.shards {
		s := &c.shards[i]
		for start := 0; s.dropChunk(id, start); start += purgeChunk {
		}
	}
}

// dropChunk drops the entries of bucket id in slots [start, start+purgeChunk)
// and reports whether slots remain after them.
func (s *cacheShard) dropChunk(id uint32, start int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	end := min(start+purgeChunk, len(s.slots))
	for i := start; i < end; i++ {
		if e := &s.slots[i]; e.buf != nil && e.id == id {
			s.removeLocked(int32(i))
		}
	}
	return end < len(s.slots)
}

// reset drops everything (DB.Close).
func (c *itemCache) reset() {
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.Lock()
		s.index = make(map[uint64]int32) // release the old map's memory too
		s.slots, s.free, s.hand, s.bytes = nil, nil, 0, 0
		s.complete = false
		s.mu.Unlock()
	}
}

// stats sums the shards' figures.
func (c *itemCache) stats() CacheStats {
	st := CacheStats{Capacity: c.capacity}
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.Lock()
		st.Hits += s.hits
		st.Misses += s.misses
		st.Evictions += s.evictions
		st.Bytes += s.bytes
		st.Items += int64(len(s.index))
		s.mu.Unlock()
	}
	return st
}

// fits reports whether an item of n key+value bytes is small enough to cache.
func (s *cacheShard) fits(n int) bool {
	return int64(n)+entryOverhead <= s.maxEntry
}

// reusable reports whether a buffer of capacity c may hold n bytes in place:
// it must fit, and not waste more than half of itself.
func reusable(c, n int) bool {
	return c >= n && c <= 2*n+64
}

// newEntryBuf returns key ‖ v1 ‖ v2 in a new buffer whose capacity is the
// allocator's size class (so the charge is what the heap really holds).
func newEntryBuf(key, v1, v2 []byte) []byte {
	buf := slices.Grow([]byte(nil), len(key)+len(v1)+len(v2))
	return append(append(append(buf, key...), v1...), v2...)
}

// findLocked returns the slot of (id, key).
func (s *cacheShard) findLocked(h uint64, id uint32, key []byte) (int32, bool) {
	i, ok := s.index[h]
	if !ok {
		return 0, false
	}
	e := &s.slots[i]
	if e.id != id || !bytes.Equal(e.key(), key) {
		return 0, false // another item with the same hash
	}
	return i, true
}

// installLocked makes room and adds a new entry; the hash must not be
// resident. If room cannot be made the item is not cached and it reports
// false.
func (s *cacheShard) installLocked(h uint64, id uint32, klen int, hd header, f fetchState, buf []byte) bool {
	need := int64(cap(buf)) + entryOverhead
	s.evictLocked(need)
	if s.bytes+need > s.budget {
		return false
	}
	var i int32
	if n := len(s.free); n > 0 {
		i, s.free = s.free[n-1], s.free[:n-1]
	} else {
		s.slots = append(s.slots, cacheEntry{})
		i = int32(len(s.slots) - 1)
	}
	s.slots[i] = cacheEntry{hash: h, buf: buf, klen: uint32(klen), id: id,
		flags: hd.flags, expiry: hd.expiry, cas: hd.cas, state: hd.state}
	s.slots[i].setFetchState(f)
	s.index[h] = i
	s.bytes += need
	return true
}

// evictLocked runs the CLOCK hand until need more bytes fit in the budget
// or the shard is empty: an entry with its reference bit set gets a second
// chance (the bit is cleared), one without is evicted. Two passes over the
// ring at most.
func (s *cacheShard) evictLocked(need int64) {
	for s.bytes+need > s.budget && len(s.index) > 0 {
		if s.hand >= len(s.slots) {
			s.hand = 0
		}
		switch e := &s.slots[s.hand]; {
		case e.buf == nil:
		case e.ref:
			e.ref = false
		default:
			s.removeLocked(int32(s.hand))
			s.evictions++
			s.complete = false
		}
		s.hand++
	}
}

// removeLocked frees slot i, which must be in use.
func (s *cacheShard) removeLocked(i int32) {
	e := &s.slots[i]
	delete(s.index, e.hash)
	s.bytes -= e.charge()
	*e = cacheEntry{}
	s.free = append(s.free, i)
}
