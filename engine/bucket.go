package engine

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2"
)

// Item is a stored value with its memcached metadata.
type Item struct {
	Flags  uint32
	Expiry uint32 // absolute Unix seconds, 0 = never
	CAS    uint64
	Value  []byte
	// The meta protocol's states (see Lease): the item was invalidated
	// (md I, ms I), and a win token for it was handed out.
	Stale, TokenSent bool
	// Its reads before this one, for the meta protocol's h and l (see
	// fetchState): whether it was read since it was stored, and when it
	// was last accessed (Unix seconds: stored, or last read, its first
	// read excepted, as in memcached). Kept while the item is resident in
	// the item cache; an item read from Pebble reads as never read and
	// accessed now.
	Fetched  bool
	Accessed uint32
}

// StoreMode selects the memcached store command.
type StoreMode uint8

// Store modes.
const (
	ModeSet     StoreMode = iota // store unconditionally
	ModeAdd                      // only if no live item (ErrExists otherwise)
	ModeReplace                  // only if a live item exists (ErrNotFound otherwise)
	ModeAppend                   // old value ‖ new (ErrNotStored if missing)
	ModePrepend                  // new ‖ old value (ErrNotStored if missing)
	// ModeInvalidate is meta ms's I with a CAS (memcached's set_stale): a
	// matching CAS stores as ModeSet does; a CAS lower than the live
	// item's stores the value too, but as a stale item that keeps the old
	// item's expiry and win token (a late write of a value read before the
	// item was invalidated); a higher one is ErrExists.
	ModeInvalidate
)

type bucketState uint8

const (
	stateLive bucketState = iota
	stateDeleted
	stateClosed
)

// Bucket is one tenant's keyspace. Safe for concurrent use.
//
// Every operation takes now (Unix seconds): an item whose expiry is ≤ now is
// treated as missing. Mutations commit without fsync (see DB.SyncWAL).
type Bucket struct {
	db   *DB
	name string
	id   uint32

	// count is the number of item records on disk: live items plus expired
	// ones the sweeper has not deleted yet.
	count atomic.Int64

	// flushAt is the pending delayed flush's deadline (Unix seconds), 0
	// for none; see FlushAt.
	flushAt atomic.Uint32

	// mu is held shared by every data operation and exclusively by Flush
	// and by state changes (DeleteBucket, Close), which thereby wait for
	// the operations in flight.
	mu    sync.RWMutex
	state bucketState // guarded by mu
}

func newBucket(db *DB, name string, id uint32) *Bucket {
	return &Bucket{db: db, name: name, id: id}
}

// Name returns the bucket's name.
func (b *Bucket) Name() string { return b.name }

// ItemCount returns the number of items stored (curr_items): counted at Open
// by a scan and kept by every mutation and by the sweeper. Expired items
// count until the sweeper deletes them, at most about one SweepInterval after
// they expire.
func (b *Bucket) ItemCount() int64 { return b.count.Load() }

// enter takes b.mu shared if the bucket is live; leave releases it.
func (b *Bucket) enter() error {
	b.mu.RLock()
	switch b.state {
	case stateLive:
		return nil
	case stateDeleted:
		b.mu.RUnlock()
		return ErrBucketDeleted
	default:
		b.mu.RUnlock()
		return ErrClosed
	}
}

func (b *Bucket) leave() { b.mu.RUnlock() }

// setState changes the state, waiting for operations in flight.
func (b *Bucket) setState(s bucketState) {
	b.mu.Lock()
	b.state = s
	b.mu.Unlock()
}

// Get returns the live item. Its Value is appended to dst[:0], so Get does
// not allocate when dst has room. It answers from the resident item cache
// when it can, and otherwise reads Pebble and makes the item resident.
// Errors: ErrNotFound (missing or expired).
//
// A miss reads Pebble without a lock, and its answer stands only if no
// mutation in the key's cache shard was under way at the miss or began
// during the read (the fill token says). Otherwise the read may have seen a
// commit whose mutation has not updated the cache yet: answering it while
// the cache still shows the version before would let a reader see the item
// go back in time on its next look. Get then reads again under the key's
// stripe lock, when no mutation of the key is in flight.
func (b *Bucket) Get(key []byte, now uint32, dst []byte) (Item, error) {
	return b.get(key, now, dst, true)
}

// GetNoBump is Get for a read that does not count as one: the item's
// fetch state (meta h and l) stays as it was, as memcached's meta get
// with u leaves it (no bump). An item it makes resident reads as never
// read.
func (b *Bucket) GetNoBump(key []byte, now uint32, dst []byte) (Item, error) {
	return b.get(key, now, dst, false)
}

func (b *Bucket) get(key []byte, now uint32, dst []byte, bump bool) (Item, error) {
	if err := b.flushDue(now); err != nil {
		return Item{}, err
	}
	if err := b.enter(); err != nil {
		return Item{}, err
	}
	defer b.leave()
	c := b.db.cache
	if c == nil {
		_, it, err := b.read(key, now, dst)
		return it, err
	}
	it, hit, tok := c.get(b.id, key, now, dst, bump)
	switch {
	case hit:
		return it, nil
	case tok.absent:
		return Item{}, ErrNotFound
	case !tok.busy:
		if hook := b.db.testHookMissed; hook != nil {
			hook()
		}
		h, it, err := b.read(key, now, dst)
		if hook := b.db.testHookBeforeFill; hook != nil {
			hook()
		}
		if c.fill(tok, b.id, key, h, it.Value, err == nil, now, bump) {
			return it, err
		}
	}
	s := b.db.locks.lock(b.id, key)
	defer s.Unlock()
	_, it, err := b.read(key, now, dst)
	return it, err
}

// read reads key's live item from Pebble, its value appended to dst[:0].
func (b *Bucket) read(key []byte, now uint32, dst []byte) (header, Item, error) {
	kb := getKeyBuf()
	defer putKeyBuf(kb)
	kb.b = appendItemKey(kb.b[:0], b.id, key)
	rec, closer, err := b.db.pdb.Get(kb.b)
	if err != nil {
		return header{}, Item{}, readErr(err)
	}
	defer closer.Close()
	h, v, ok := decodeRecord(rec)
	if !ok {
		return header{}, Item{}, errCorrupt(b, key)
	}
	if !h.live(now) {
		return header{}, Item{}, ErrNotFound
	}
	it := h.item(append(dst[:0], v...))
	it.Accessed = now
	return h, it, nil
}

// Peek looks key up in the resident item cache only, for callers that must
// not block (kvd's event loops): it never touches Pebble and takes no lock
// but one cache shard's mutex, which is never held across I/O. ok is true
// only for a resident item live at now; its Value is appended to dst[:0]
// (no allocation when dst has room). ok false means "not resident": the
// item may still exist, and the caller must Get it (on a worker). A Peek
// never returns a value older than a mutation that has returned, nor one
// Pebble never committed. With the cache disabled Peek always misses.
func (b *Bucket) Peek(key []byte, now uint32, dst []byte) (Item, bool) {
	return b.peek(key, now, dst, true)
}

// PeekNoBump is Peek for a read that does not count as one, or not yet:
// the item's fetch state stays as it was. A caller that serves the item
// after all counts the read with Bump.
func (b *Bucket) PeekNoBump(key []byte, now uint32, dst []byte) (Item, bool) {
	return b.peek(key, now, dst, false)
}

func (b *Bucket) peek(key []byte, now uint32, dst []byte, bump bool) (Item, bool) {
	c := b.db.cache
	if c == nil || b.flushPending(now) {
		return Item{}, false
	}
	it, ok, _ := c.get(b.id, key, now, dst, bump)
	return it, ok
}

// Bump counts a read of key's resident item at now in its fetch state
// (nothing if it is not resident): what Peek does beside the look-up.
func (b *Bucket) Bump(key []byte, now uint32) {
	if c := b.db.cache; c != nil {
		c.bump(b.id, key, now)
	}
}

// Touch sets a new expiry (absolute, 0 = never) on a live item and returns
// it, its value appended to dst[:0]. The CAS is unchanged, as in memcached.
// Errors: ErrNotFound.
func (b *Bucket) Touch(key []byte, expiry, now uint32, dst []byte) (Item, error) {
	return b.touch(key, expiry, now, dst, true)
}

// TouchNoBump is Touch for a touch that does not count as a read (meta
// get's T with u): the item's fetch state stays as it was.
func (b *Bucket) TouchNoBump(key []byte, expiry, now uint32, dst []byte) (Item, error) {
	return b.touch(key, expiry, now, dst, false)
}

func (b *Bucket) touch(key []byte, expiry, now uint32, dst []byte, bump bool) (Item, error) {
	var it Item
	err := b.mutate(key, now, true, func(ik []byte, cur current) error {
		if !cur.live {
			return ErrNotFound
		}
		h := cur.h
		h.expiry = expiry
		if err := b.putLocked(ik, key, &cur, h, cur.value, nil, access{now: now, keep: true, fetch: bump}); err != nil {
			return err
		}
		it = h.item(append(dst[:0], cur.value...))
		cur.fetched(&it)
		return nil
	})
	return it, err
}

// Store writes value under key with memcached semantics and returns the new
// CAS (unique and increasing, also across restarts).
//
// cas != 0 must match the live item's CAS (ErrExists on mismatch, ErrNotFound
// if absent, except ErrNotStored for APPEND/PREPEND). ModeAdd on a live item → ErrExists; ModeReplace on a missing
// one → ErrNotFound; ModeAppend/ModePrepend on a missing one → ErrNotStored,
// and they keep the old flags and expiry, ignoring the given ones. A value
// over Options.MaxValueSize → ErrTooBig; an APPEND/PREPEND whose result would
// be → ErrNotStored (memcached's NOT_STORED: it cannot make the item, the
// value alone was fine).
func (b *Bucket) Store(mode StoreMode, key, value []byte, flags, expiry uint32, cas uint64, now uint32) (uint64, error) {
	c, _, err := b.StoreN(mode, key, value, flags, expiry, cas, now)
	return c, err
}

// StoreN is Store that also returns the length of the value it stored: the
// APPEND/PREPEND result, len(value) for the other modes (for exact write
// units).
func (b *Bucket) StoreN(mode StoreMode, key, value []byte, flags, expiry uint32, cas uint64, now uint32) (uint64, int, error) {
	if mode > ModeInvalidate {
		return 0, 0, fmt.Errorf("engine: invalid store mode %d", mode)
	}
	if len(value) > b.db.opts.MaxValueSize {
		return 0, 0, ErrTooBig
	}
	var newCAS uint64
	var n int
	needValue := mode == ModeAppend || mode == ModePrepend
	err := b.mutate(key, now, needValue, func(ik []byte, cur current) error {
		stale := false
		if err := checkStore(mode, &cur, cas); err != nil {
			if mode != ModeInvalidate || !errors.Is(err, ErrExists) || cas > cur.h.cas {
				return err
			}
			stale = true
		}
		h := header{flags: flags, expiry: expiry}
		if stale {
			h.expiry, h.state = cur.h.expiry, stateStale|cur.h.state&stateTokenSent
		}
		v1, v2 := value, []byte(nil)
		switch mode {
		case ModeAppend:
			h.flags, h.expiry = cur.h.flags, cur.h.expiry
			v1, v2 = cur.value, value
		case ModePrepend:
			h.flags, h.expiry = cur.h.flags, cur.h.expiry
			v2 = cur.value
		}
		if n = len(v1) + len(v2); n > b.db.opts.MaxValueSize {
			return ErrNotStored
		}
		h.cas = b.db.nextCAS()
		newCAS = h.cas
		return b.putLocked(ik, key, &cur, h, v1, v2, access{now: now})
	})
	if err != nil {
		return 0, 0, err
	}
	return newCAS, n, nil
}

// checkStore applies the CAS and mode preconditions of Store. APPEND and
// PREPEND on a missing item are ErrNotStored even with a CAS, as in memcached.
func checkStore(mode StoreMode, cur *current, cas uint64) error {
	if (mode == ModeAppend || mode == ModePrepend) && !cur.live {
		return ErrNotStored
	}
	if err := checkCAS(cur, cas); err != nil {
		return err
	}
	switch {
	case mode == ModeAdd && cur.live:
		return ErrExists
	case mode == ModeReplace && !cur.live:
		return ErrNotFound
	}
	return nil
}

// checkCAS: cas != 0 must match the live item's CAS.
func checkCAS(cur *current, cas uint64) error {
	switch {
	case cas == 0:
		return nil
	case !cur.live:
		return ErrNotFound
	case cur.h.cas != cas:
		return ErrExists
	}
	return nil
}

// Delete removes the live item. cas != 0 must match its CAS (ErrExists).
// Errors: ErrNotFound (missing or expired).
func (b *Bucket) Delete(key []byte, cas uint64, now uint32) error {
	return b.mutate(key, now, false, func(ik []byte, cur current) error {
		if !cur.live {
			if cur.exists { // expired: reclaim it now
				if err := b.deleteLocked(ik, key, &cur); err != nil {
					return err
				}
			}
			return ErrNotFound
		}
		if err := checkCAS(&cur, cas); err != nil {
			return err
		}
		return b.deleteLocked(ik, key, &cur)
	})
}

// Invalidate marks the live item stale instead of deleting it (meta md's
// I): it keeps its value, takes a new CAS and, with touch, the expiry, and
// its win token is withdrawn, so that the next meta get wins the right to
// recache it (Lease). cas != 0 must match its CAS (ErrExists). Errors:
// ErrNotFound (missing or expired).
func (b *Bucket) Invalidate(key []byte, cas uint64, touch bool, expiry, now uint32) (uint64, error) {
	var newCAS uint64
	err := b.mutate(key, now, true, func(ik []byte, cur current) error {
		if !cur.live {
			return ErrNotFound
		}
		if err := checkCAS(&cur, cas); err != nil {
			return err
		}
		h := cur.h
		h.state = h.state&^stateTokenSent | stateStale
		if touch {
			h.expiry = expiry
		}
		h.cas = b.db.nextCAS()
		newCAS = h.cas
		return b.putLocked(ik, key, &cur, h, cur.value, nil, access{now: now, keep: true})
	})
	return newCAS, err
}

// LeaseArgs are what a meta get asks beyond a read: memcached's flags that
// hand one client the right to recache an item (a win token, W) while the
// others, told so (Z), keep using what there is.
type LeaseArgs struct {
	// Vivify creates a missing item, empty, with flags 0 and the expiry
	// VivifyExpiry (absolute, 0 = never), and wins its token (N).
	Vivify       bool
	VivifyExpiry uint32
	// RecacheBefore (absolute, 0 = none): a live item with an expiry
	// before it whose token has not been handed out wins it (R).
	RecacheBefore uint32
	// Touch sets the item's expiry to NewExpiry (mg's T).
	Touch     bool
	NewExpiry uint32
}

// Wins reports whether a meta get of it under a wins its token, or needs
// Lease to create it: a stale item, or one due for recaching, whose token
// is not out yet.
func (a LeaseArgs) Wins(it Item) bool {
	return !it.TokenSent && (it.Stale || a.RecacheBefore != 0 && it.Expiry != 0 && it.Expiry < a.RecacheBefore)
}

// Lease is a meta get's write side, as memcached 1.6 has it: a missing item
// is created with a.Vivify; a live item's token goes to this caller when
// a.Wins it (stale, or due for recaching, and no token out); a.Touch sets
// the expiry. It returns the item (its value appended to dst[:0]) with the
// token state it had before the call, which is what Z reports, whether the
// caller won the token (W) and whether the item was created. Winning,
// touching and creating write the item; the CAS stays, but for a created
// item's new one. Errors: ErrNotFound (missing, without a.Vivify).
func (b *Bucket) Lease(key []byte, a LeaseArgs, now uint32, dst []byte) (it Item, won, created bool, err error) {
	err = b.mutate(key, now, true, func(ik []byte, cur current) error {
		h, v := cur.h, cur.value
		switch {
		case cur.live:
			it = h.item(nil)
			won = a.Wins(it)
		case a.Vivify:
			h, v, created, won = header{expiry: a.VivifyExpiry, cas: b.db.nextCAS()}, nil, true, true
			it = h.item(nil)
		default:
			return ErrNotFound
		}
		it.Value = append(dst[:0], v...)
		if created {
			it.Accessed = now
		} else {
			cur.fetched(&it)
		}
		if !won && !a.Touch {
			return nil // a read: nothing to write
		}
		if a.Touch {
			h.expiry, it.Expiry = a.NewExpiry, a.NewExpiry
		}
		if won {
			h.state |= stateTokenSent
		}
		return b.putLocked(ik, key, &cur, h, v, nil, access{now: now, keep: !created})
	})
	return it, won, created, err
}

// Arith adds (incr) or subtracts delta from the item's decimal value: INCR
// wraps at 2^64, DECR stops at 0. The value is parsed as memcached parses it
// (strtoull: leading white space, a sign and leading zeros allowed, anything
// after a white space or NUL ignored; see parseUint); otherwise, or if it
// overflows uint64, ErrNonNumeric. The new value is stored as plain decimal
// digits (memcached pads it with spaces to the old length when shorter). A missing item is created with
// initial (stored as decimal text, given expiry, flags 0) and initial is
// returned, if create; else ErrNotFound. Existing items keep flags and
// expiry. cas != 0 must match a live item's CAS (ErrExists), checked after
// an empty value (ErrNonNumeric), as memcached does; a missing item
// is created whatever cas is, as memcached does. Returns the new value and
// CAS.
func (b *Bucket) Arith(key []byte, incr bool, delta, initial uint64, expiry uint32, create bool, cas uint64, now uint32) (uint64, uint64, error) {
	r, err := b.ArithItem(key, ArithArgs{Incr: incr, Delta: delta, Initial: initial, Expiry: expiry, Create: create, CAS: cas}, now)
	return r.Value, r.CAS, err
}

// ArithArgs is what ArithItem is asked to do (Arith's arguments, and meta
// arithmetic's new TTL).
type ArithArgs struct {
	Incr           bool
	Delta, Initial uint64
	Expiry         uint32 // a created item's expiry: absolute, 0 = never
	Create         bool   // create a missing item holding Initial
	CAS            uint64 // non-zero: must match a live item's CAS
	// Touch sets the item's expiry to NewExpiry when the arithmetic
	// succeeds, an existing item's or a created one's (memcached's ma T).
	Touch     bool
	NewExpiry uint32
}

// ArithResult is what ArithItem did: the new value and CAS, the item's
// expiry (absolute, 0 = never), whether the miss created the item, and
// the length of the value it read (0 when it created the item): what the
// command is charged for its read.
type ArithResult struct {
	Value   uint64
	CAS     uint64
	Expiry  uint32
	Created bool
	Read    int
}

// ArithItem is Arith that also reports the item's expiry and whether it
// was created (memcached's meta arithmetic returns both), and can set a new
// expiry on success (a.Touch).
func (b *Bucket) ArithItem(key []byte, a ArithArgs, now uint32) (ArithResult, error) {
	var n, newCAS uint64
	created, read := false, 0
	var h header
	err := b.mutate(key, now, true, func(ik []byte, cur current) error {
		created, read = false, 0
		if cur.live {
			if len(cur.value) == 0 {
				return ErrNonNumeric // before the CAS, as memcached's do_add_delta
			}
			if err := checkCAS(&cur, a.CAS); err != nil {
				return err
			}
		}
		switch {
		case cur.live:
			old, ok := parseUint(cur.value)
			if !ok {
				return ErrNonNumeric
			}
			n, h, read = applyDelta(old, a.Incr, a.Delta), cur.h, len(cur.value)
		case a.Create:
			n, h, created = a.Initial, header{expiry: a.Expiry}, true
		default:
			return ErrNotFound
		}
		if a.Touch {
			h.expiry = a.NewExpiry
		}
		h.cas = b.db.nextCAS()
		newCAS = h.cas
		var digits [maxDigits]byte
		return b.putLocked(ik, key, &cur, h, strconv.AppendUint(digits[:0], n, 10), nil, access{now: now})
	})
	if err != nil {
		return ArithResult{}, err
	}
	return ArithResult{Value: n, CAS: newCAS, Expiry: h.expiry, Created: created, Read: read}, nil
}

func applyDelta(v uint64, incr bool, delta uint64) uint64 {
	switch {
	case incr:
		return v + delta // wraps at 2^64
	case delta > v:
		return 0
	default:
		return v - delta
	}
}

// current is what a mutation found under the key's stripe lock.
type current struct {
	exists bool // a record exists, live or expired
	live   bool // it exists and has not expired
	h      header
	value  []byte     // valid until release
	closer io.Closer  // pins value
	fetch  fetchState // the item's reads so far (resident ones only)
}

// fetched copies c's read history into it: what a mutation that reads
// (touch, a meta get's lease) reports, as it was before.
func (c *current) fetched(it *Item) {
	it.Fetched, it.Accessed = c.fetch.fetched, c.fetch.atime
}

func (c *current) release() {
	if c.closer != nil {
		_ = c.closer.Close()
		c.closer = nil
	}
}

// mutate runs fn with the bucket entered, the key's stripe locked and the
// key's current record read. fn receives the encoded item key. When fn
// needs no old value (needValue false: SET, ADD, REPLACE, DELETE, which
// look only at existence, expiry and CAS) and the key is resident, the
// header comes from the item cache and Pebble is not read ("blind" write):
// cur.value is then nil, and the expiry index and item count stay exact
// because the resident header is the one on disk. A key missing from a
// complete cache shard does not exist, and is not read either.
func (b *Bucket) mutate(key []byte, now uint32, needValue bool, fn func(ik []byte, cur current) error) error {
	if err := b.flushDue(now); err != nil {
		return err
	}
	if err := b.enter(); err != nil {
		return err
	}
	defer b.leave()
	kb := getKeyBuf()
	defer putKeyBuf(kb)
	kb.b = appendItemKey(kb.b[:0], b.id, key)
	s := b.db.locks.lock(b.id, key)
	defer s.Unlock()
	fetch := fetchState{atime: now} // not resident: as if just stored
	if c := b.db.cache; c != nil {
		cs, h, f, resident, absent := c.begin(b.id, key)
		defer cs.end()
		switch {
		case absent:
			return fn(kb.b, current{fetch: fetch}) // a complete cache: no such item on disk
		case resident && !needValue:
			return fn(kb.b, current{exists: true, live: h.live(now), h: h, fetch: f})
		case resident:
			fetch = f
		}
	}
	cur, err := b.readLocked(kb.b, key, now)
	if err != nil {
		return err
	}
	defer cur.release()
	cur.fetch = fetch
	return fn(kb.b, cur)
}

// readLocked reads item key ik. The caller holds its stripe lock and must
// release the result.
func (b *Bucket) readLocked(ik, key []byte, now uint32) (current, error) {
	if hook := b.db.testHookRead; hook != nil {
		hook()
	}
	rec, closer, err := b.db.pdb.Get(ik)
	if errors.Is(err, pebble.ErrNotFound) {
		return current{}, nil
	}
	if err != nil {
		return current{}, readErr(err)
	}
	h, v, ok := decodeRecord(rec)
	if !ok {
		_ = closer.Close()
		return current{}, errCorrupt(b, key)
	}
	return current{exists: true, live: h.live(now), h: h, value: v, closer: closer}, nil
}

// putLocked writes item ik = header h ‖ v1 ‖ v2, moves its expiry index
// entry from cur's expiry to h.expiry, commits without sync, and then
// writes the item through to the resident cache.
func (b *Bucket) putLocked(ik, key []byte, cur *current, h header, v1, v2 []byte, a access) error {
	n := len(ik) + headerLen + len(v1) + len(v2) + 2*(expiryPrefixLen+len(key)) + walRecordOverhead
	if err := b.db.space.admit(int64(n), false); err != nil {
		return err
	}
	batch := b.db.pdb.NewBatch()
	defer batch.Close()
	op := batch.SetDeferred(len(ik), headerLen+len(v1)+len(v2))
	copy(op.Key, ik)
	h.put(op.Value)
	copy(op.Value[headerLen+copy(op.Value[headerLen:], v1):], v2)
	_ = op.Finish()
	var oldExpiry uint32
	if cur.exists {
		oldExpiry = cur.h.expiry
	}
	if oldExpiry != h.expiry {
		b.indexDelete(batch, oldExpiry, key)
		b.indexSet(batch, h.expiry, key)
	}
	if err := b.db.commit(batch, b.db.writeO); err != nil {
		b.forget(key) // Pebble's state is unknown
		return fmt.Errorf("engine: store in %q: %w", b.name, err)
	}
	if !cur.exists {
		b.count.Add(1)
	}
	if hook := b.db.testHookCommitted; hook != nil {
		hook()
	}
	if b.db.cache != nil {
		b.db.cache.set(b.id, key, h, v1, v2, a)
	}
	return nil
}

// deleteLocked deletes item ik and its expiry index entry, without sync,
// and drops the key from the resident cache.
func (b *Bucket) deleteLocked(ik, key []byte, cur *current) error {
	if err := b.db.space.admit(int64(len(ik)+expiryPrefixLen+len(key)+walRecordOverhead), true); err != nil {
		return err
	}
	batch := b.db.pdb.NewBatch()
	defer batch.Close()
	_ = batch.Delete(ik, nil)
	b.indexDelete(batch, cur.h.expiry, key)
	err := b.db.commit(batch, b.db.writeO)
	if err != nil {
		b.forget(key) // Pebble's state is unknown
		return fmt.Errorf("engine: delete in %q: %w", b.name, err)
	}
	b.uncache(key)
	b.count.Add(-1)
	return nil
}

// uncache drops key's resident item, if any, once it is deleted. Mutations
// call it (or cache.set) under the key's stripe lock after their commit.
func (b *Bucket) uncache(key []byte) {
	if b.db.cache != nil {
		b.db.cache.remove(b.id, key)
	}
}

// forget drops key's resident item after a commit that failed: the key's
// state on disk is unknown.
func (b *Bucket) forget(key []byte) {
	if b.db.cache != nil {
		b.db.cache.forget(b.id, key)
	}
}

// indexSet adds key's expiry index entry to batch (nothing for expiry 0).
func (b *Bucket) indexSet(batch *pebble.Batch, expiry uint32, key []byte) {
	if expiry == 0 {
		return
	}
	op := batch.SetDeferred(expiryPrefixLen+len(key), 0)
	putExpiryKey(op.Key, b.id, expiry, key)
	_ = op.Finish()
}

// indexDelete removes key's expiry index entry in batch (nothing for 0).
func (b *Bucket) indexDelete(batch *pebble.Batch, expiry uint32, key []byte) {
	if expiry == 0 {
		return
	}
	op := batch.DeleteDeferred(expiryPrefixLen + len(key))
	putExpiryKey(op.Key, b.id, expiry, key)
	_ = op.Finish()
}

// readErr maps a Pebble read error.
func readErr(err error) error {
	if errors.Is(err, pebble.ErrNotFound) {
		return ErrNotFound
	}
	return fmt.Errorf("engine: read: %w", err)
}

func errCorrupt(b *Bucket, key []byte) error {
	return fmt.Errorf("engine: corrupt item record for key %q in bucket %q", key, b.name)
}
