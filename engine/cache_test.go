package engine

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// withCache gives a test an item cache of size bytes whatever the TestMain
// pass, and the fixed sweeper clock (tests call sweep themselves).
func withCache(size int64) func(*Options) {
	return func(o *Options) {
		fixedClock(o)
		o.ItemCacheSize = size
	}
}

// wantPeek checks that key is resident with val, flags, exp (and cas if
// non-zero) at now.
func wantPeek(t testing.TB, b *Bucket, key, val string, flags, exp uint32, cas uint64, now uint32) {
	t.Helper()
	it, ok := b.Peek([]byte(key), now, nil)
	if !ok {
		t.Fatalf("Peek(%q) missed, want %q", key, val)
	}
	if string(it.Value) != val || it.Flags != flags || it.Expiry != exp || cas != 0 && it.CAS != cas {
		t.Fatalf("Peek(%q) = %q flags %d exp %d cas %d, want %q flags %d exp %d cas %d",
			key, it.Value, it.Flags, it.Expiry, it.CAS, val, flags, exp, cas)
	}
}

func wantNoPeek(t testing.TB, b *Bucket, key string, now uint32) {
	t.Helper()
	if it, ok := b.Peek([]byte(key), now, nil); ok {
		t.Fatalf("Peek(%q) = %q (cas %d), want a miss", key, it.Value, it.CAS)
	}
}

// checkCache verifies every shard's bookkeeping: the index and the slots
// agree, bytes is the sum of the charges, and no shard exceeds its budget.
func checkCache(t testing.TB, c *itemCache) {
	t.Helper()
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.Lock()
		var bytes int64
		used := 0
		for j := range s.slots {
			e := &s.slots[j]
			if e.buf == nil {
				continue
			}
			used++
			bytes += e.charge()
			if k, ok := s.index[e.hash]; !ok || int(k) != j {
				t.Errorf("shard %d: slot %d (hash %x) not indexed", i, j, e.hash)
			}
		}
		if used != len(s.index) || used+len(s.free) != len(s.slots) || bytes != s.bytes || s.bytes > s.budget {
			t.Errorf("shard %d: %d used slots, %d indexed, %d free of %d; bytes %d counted %d, budget %d",
				i, used, len(s.index), len(s.free), len(s.slots), bytes, s.bytes, s.budget)
		}
		s.mu.Unlock()
	}
}

// evictKey drops key's entry as an eviction would (no mutation).
func evictKey(c *itemCache, id uint32, key []byte) {
	h := c.hash(id, key)
	s := c.shard(h)
	s.mu.Lock()
	if i, ok := s.findLocked(h, id, key); ok {
		s.removeLocked(i)
		s.complete = false // as an eviction does
	}
	s.mu.Unlock()
}

// shardComplete reports whether key's shard is complete.
func shardComplete(c *itemCache, id uint32, key []byte) bool {
	s := c.shard(c.hash(id, key))
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.complete
}

// pebbleItem reads key's record straight from Pebble, bypassing the cache.
func pebbleItem(t testing.TB, b *Bucket, key string) (Item, bool) {
	t.Helper()
	rec, closer, err := b.db.pdb.Get(appendItemKey(nil, b.id, []byte(key)))
	if errors.Is(err, pebble.ErrNotFound) {
		return Item{}, false
	}
	if err != nil {
		t.Fatal(err)
	}
	defer closer.Close()
	h, v, ok := decodeRecord(rec)
	if !ok {
		t.Fatalf("corrupt record for %q", key)
	}
	return Item{Flags: h.flags, Expiry: h.expiry, CAS: h.cas, Value: bytes.Clone(v)}, true
}

// TestCacheWriteThrough: after every kind of mutation returns, Peek
// answers the new state, and failed mutations leave the entry alone.
func TestCacheWriteThrough(t *testing.T) {
	db := openTest(t, withCache(DefaultItemCacheSize))
	b := newBucketT(t, db, "b")
	k := []byte("k")
	wantNoPeek(t, b, "k", t0)
	c1 := mustStore(t, b, ModeAdd, "k", "v1", 7, t0+100)
	wantPeek(t, b, "k", "v1", 7, t0+100, c1, t0)
	if _, err := b.Store(ModeSet, k, []byte("x"), 0, 0, c1+1, t0); !errors.Is(err, ErrExists) {
		t.Fatalf("SET with wrong CAS: %v", err)
	}
	wantPeek(t, b, "k", "v1", 7, t0+100, c1, t0)
	c2 := mustStore(t, b, ModeAppend, "k", "+a", 0, 0)
	wantPeek(t, b, "k", "v1+a", 7, t0+100, c2, t0)
	c3 := mustStore(t, b, ModePrepend, "k", "p-", 0, 0)
	wantPeek(t, b, "k", "p-v1+a", 7, t0+100, c3, t0)
	if _, err := b.Touch(k, t0+500, t0, nil); err != nil {
		t.Fatal(err)
	}
	wantPeek(t, b, "k", "p-v1+a", 7, t0+500, c3, t0)
	c4 := mustStore(t, b, ModeReplace, "k", "41", 1, 0)
	wantPeek(t, b, "k", "41", 1, 0, c4, t0)
	n, c5, err := b.Arith(k, true, 1, 0, 0, false, 0, t0)
	if err != nil || n != 42 {
		t.Fatalf("Arith = %d, %v", n, err)
	}
	wantPeek(t, b, "k", "42", 1, 0, c5, t0)
	if err := b.Delete(k, 0, t0); err != nil {
		t.Fatal(err)
	}
	wantNoPeek(t, b, "k", t0)
	if _, _, err := b.Arith(k, false, 1, 9, t0+60, true, 0, t0); err != nil {
		t.Fatal(err)
	}
	wantPeek(t, b, "k", "9", 0, t0+60, 0, t0)
	// Reclaiming an expired item with Delete drops it too.
	if err := b.Delete(k, 0, t0+60); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Delete expired: %v", err)
	}
	wantNoPeek(t, b, "k", t0)
	checkCache(t, db.cache)
}

// TestCacheGet: Get fills the cache on a miss and then answers from it
// without reading Pebble.
func TestCacheGet(t *testing.T) {
	db := openTest(t, withCache(DefaultItemCacheSize))
	b := newBucketT(t, db, "b")
	cas := mustStore(t, b, ModeSet, "k", "v", 3, 0)
	evictKey(db.cache, b.id, []byte("k"))
	wantNoPeek(t, b, "k", t0)
	wantItem(t, b, "k", "v", 3, 0, t0) // misses, reads Pebble, fills
	wantPeek(t, b, "k", "v", 3, 0, cas, t0)
	// Change Pebble behind the engine's back: a cached Get does not see it.
	rec := make([]byte, headerLen+len("disk"))
	header{flags: 3, cas: cas}.put(rec)
	copy(rec[headerLen:], "disk")
	if err := db.pdb.Set(appendItemKey(nil, b.id, []byte("k")), rec, db.writeO); err != nil {
		t.Fatal(err)
	}
	wantItem(t, b, "k", "v", 3, 0, t0)
	// A missing key is not cached (no negative entries).
	if _, err := b.Get([]byte("absent"), t0, nil); !errors.Is(err, ErrNotFound) {
		t.Fatal(err)
	}
	st := db.CacheStats()
	if st.Items != 1 || st.Hits != 2 || st.Misses != 3 || st.Capacity != DefaultItemCacheSize {
		t.Fatalf("CacheStats = %+v; want 1 item, 2 hits, 3 misses", st)
	}
}

// TestCacheFillLosesToMutation: a Get that read Pebble before a concurrent
// mutation committed must not install what it read after the mutation
// updated the cache, nor answer it: it reads again, and answers what
// Pebble holds after the mutation. The hook runs the mutation in that window.
func TestCacheFillLosesToMutation(t *testing.T) {
	mutations := map[string]func(*Bucket) error{
		"store": func(b *Bucket) error {
			_, err := b.Store(ModeSet, []byte("k"), []byte("new"), 0, 0, 0, t0)
			return err
		},
		"delete": func(b *Bucket) error { return b.Delete([]byte("k"), 0, t0) },
		"touch": func(b *Bucket) error {
			_, err := b.Touch([]byte("k"), t0+5, t0, nil)
			return err
		},
		"other key": func(b *Bucket) error { // same shard or not: never stale
			_, err := b.Store(ModeSet, []byte("k2"), []byte("x"), 0, 0, 0, t0)
			return err
		},
	}
	for name, mutate := range mutations {
		t.Run(name, func(t *testing.T) {
			db, b := storedEvicted(t)
			db.testHookBeforeFill = func() {
				db.testHookBeforeFill = nil
				if err := mutate(b); err != nil {
					t.Error(err)
				}
			}
			got, err := b.Get([]byte("k"), t0, nil)
			want, found := pebbleItem(t, b, "k")
			switch {
			case found != (err == nil):
				t.Fatalf("Get = %q, %v; Pebble has the item: %v", got.Value, err, found)
			case found && (got.CAS != want.CAS || got.Expiry != want.Expiry || !bytes.Equal(got.Value, want.Value)):
				t.Fatalf("Get = %q cas %d exp %d, Pebble has %q cas %d exp %d",
					got.Value, got.CAS, got.Expiry, want.Value, want.CAS, want.Expiry)
			}
			it, ok := b.Peek([]byte("k"), t0, nil)
			switch {
			case ok && !found:
				t.Fatalf("Peek = %q after the item was deleted", it.Value)
			case ok && (it.CAS != want.CAS || it.Expiry != want.Expiry || !bytes.Equal(it.Value, want.Value)):
				t.Fatalf("Peek = %q cas %d exp %d, Pebble has %q cas %d exp %d",
					it.Value, it.CAS, it.Expiry, want.Value, want.CAS, want.Expiry)
			}
			checkCache(t, db.cache)
		})
	}
}

// storedEvicted opens a store with bucket b holding k = "old", evicted
// from the item cache.
func storedEvicted(t *testing.T) (*DB, *Bucket) {
	db := openTest(t, withCache(DefaultItemCacheSize))
	b := newBucketT(t, db, "b")
	mustStore(t, b, ModeSet, "k", "old", 0, 0)
	evictKey(db.cache, b.id, []byte("k"))
	return db, b
}

// heldStore stores value under key in the background and holds the store
// between its commit and its cache update until release, which returns the
// store's error. It returns once the store has committed.
func heldStore(db *DB, b *Bucket, key, value string) (release func() error) {
	committed, hold, stored := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	db.testHookCommitted = func() { close(committed); <-hold }
	go func() {
		_, err := b.Store(ModeSet, []byte(key), []byte(value), 0, 0, 0, t0)
		stored <- err
	}()
	<-committed
	return func() error {
		close(hold)
		return <-stored
	}
}

// getAsync runs Get in the background; its answer arrives on the channel.
func getAsync(t *testing.T, b *Bucket, key string) <-chan string {
	ch := make(chan string, 1)
	go func() {
		it, err := b.Get([]byte(key), t0, nil)
		if err != nil {
			t.Error(err)
		}
		ch <- string(it.Value)
	}()
	return ch
}

// answered returns Get's answer if it comes within a short while.
func answered(ch <-chan string) (string, bool) {
	select {
	case v := <-ch:
		return v, true
	case <-time.After(100 * time.Millisecond):
		return "", false
	}
}

// TestCacheMonotonicReads: once a Get has answered a version, no look at
// the item answers an older one. A Store's commit becomes visible in
// Pebble before its cache update, and a Get that reads Pebble in between
// must neither answer the new version while the cache still shows the old
// one nor let an old version it read be filled in after. Each subtest
// holds the store between its commit and its cache update, takes the
// answers that come meanwhile, and checks that Peek shows nothing older.
func TestCacheMonotonicReads(t *testing.T) {
	// X reads the old version and is about to fill it in; the store
	// commits; Y misses and reads the new version. X's fill must lose (or
	// the cache shows old after Y answered new).
	t.Run("stale fill", func(t *testing.T) {
		db, b := storedEvicted(t)
		held := make(chan func() error, 1)
		yc := make(chan (<-chan string), 1)
		yAtFill, xDone := make(chan struct{}), make(chan struct{})
		var fills atomic.Int32
		db.testHookBeforeFill = func() {
			switch fills.Add(1) {
			case 1: // X, holding the old version
				held <- heldStore(db, b, "k", "new")
				yc <- getAsync(t, b, "k")
				select { // Y reaches its fill, or waits for the store
				case <-yAtFill:
				case <-time.After(100 * time.Millisecond):
				}
			case 2: // Y, holding what it read: X fills first
				close(yAtFill)
				select {
				case <-xDone:
				case <-time.After(time.Second):
				}
			}
		}
		x := getAsync(t, b, "k")
		release, y := <-held, <-yc
		xv, xEarly := answered(x)
		close(xDone)
		yv, yEarly := answered(y)
		checkNotOlder(t, b, "k", xv, yv)
		if err := release(); err != nil {
			t.Fatal(err)
		}
		if !xEarly {
			xv = <-x
		}
		if !yEarly {
			yv = <-y
		}
		if xv != "old" && xv != "new" || yv != "new" {
			t.Errorf("X answered %q, Y %q; want old or new, and new", xv, yv)
		}
		wantPeek(t, b, "k", "new", 0, 0, 0, t0)
		checkCache(t, db.cache)
	})
	// Y misses; X fills the old version; the store commits; Y reads the new
	// version from Pebble while the cache shows the old one. Y must not
	// answer before the store has updated the cache.
	t.Run("read ahead of the cache", func(t *testing.T) {
		db, b := storedEvicted(t)
		held := make(chan func() error, 1)
		var misses atomic.Int32
		db.testHookMissed = func() {
			if misses.Add(1) != 1 {
				return // X
			}
			wantItem(t, b, "k", "old", 0, 0, t0) // X: fills old
			wantPeek(t, b, "k", "old", 0, 0, 0, t0)
			held <- heldStore(db, b, "k", "new")
		}
		y := getAsync(t, b, "k")
		release := <-held
		yv, early := answered(y)
		checkNotOlder(t, b, "k", yv)
		if err := release(); err != nil {
			t.Fatal(err)
		}
		if !early {
			yv = <-y
		}
		if yv != "new" {
			t.Errorf("Y answered %q after the commit; want new", yv)
		}
		wantPeek(t, b, "k", "new", 0, 0, 0, t0)
		checkCache(t, db.cache)
	})
}

// checkNotOlder fails if Peek shows "old" after a Get answered "new" ("",
// no answer yet).
func checkNotOlder(t *testing.T, b *Bucket, key string, answers ...string) {
	t.Helper()
	it, ok := b.Peek([]byte(key), t0, nil)
	if ok && string(it.Value) == "old" && slices.Contains(answers, "new") {
		t.Errorf("a Get answered new during the store (answers %q); Peek then old", answers)
	}
}

// TestCacheCoherenceUnderLoad hammers one key with every mutation, Get,
// Peek and evictions. Each reader must observe non-decreasing CAS values,
// each (CAS, value) pair it observes must be one a writer produced, a
// writer must never read a CAS older than its own after its mutation
// returned, and at the end Peek and Get must agree with Pebble.
func TestCacheCoherenceUnderLoad(t *testing.T) {
	db := openTest(t, withCache(DefaultItemCacheSize))
	b := newBucketT(t, db, "b")
	key := []byte("hot")
	var written sync.Map // CAS → value
	const writers, readers, ops = 3, 4, 1500
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() { coherenceWriter(t, b, key, w, ops, &written) })
	}
	seen := make([][]Item, readers)
	for r := range readers {
		wg.Go(func() { seen[r] = coherenceReader(t, b, key, r, ops) })
	}
	wg.Go(func() {
		for range ops {
			evictKey(db.cache, b.id, key)
		}
	})
	wg.Wait()
	for r, items := range seen {
		for _, it := range items {
			if v, ok := written.Load(it.CAS); !ok || v.(string) != string(it.Value) {
				t.Fatalf("reader %d saw %q with CAS %d; writers wrote %v", r, it.Value, it.CAS, v)
			}
		}
	}
	want, ok := pebbleItem(t, b, string(key))
	if !ok {
		t.Fatal("key missing at the end") // the last op of every writer is a Store
	}
	if it := wantItem(t, b, string(key), string(want.Value), 0, 0, t0); it.CAS != want.CAS {
		t.Fatalf("Get CAS %d, Pebble %d", it.CAS, want.CAS)
	}
	wantPeek(t, b, string(key), string(want.Value), 0, 0, want.CAS, t0)
	checkCache(t, db.cache)
}

// coherenceWriter runs ops mutations of key and records every (CAS, value)
// it produced. It checks what it reads back: never a CAS below the highest it
// wrote or saw, and after its Delete succeeded only items created since, with
// a higher CAS. Its last op is a Store, so the key exists at the end.
func coherenceWriter(t *testing.T, b *Bucket, key []byte, w, ops int, written *sync.Map) {
	var floor uint64 // highest CAS written or seen
	var deleted bool // a Delete returned since floor was seen
	check := func(what string, it Item) bool {
		if it.CAS < floor || deleted && it.CAS == floor {
			t.Errorf("writer %d: %s CAS %d; it wrote or saw %d (deleted since: %v)", w, what, it.CAS, floor, deleted)
			return false
		}
		floor, deleted = it.CAS, false
		return true
	}
	for i := range ops {
		var err error
		switch i % 5 {
		case 0, 1, 4:
			v := strconv.Itoa(w*1_000_000 + i)
			var cas uint64
			if cas, err = b.Store(ModeSet, key, []byte(v), 0, 0, 0, t0); err == nil {
				written.Store(cas, v)
				floor, deleted = max(floor, cas), false
			}
		case 2:
			var n, cas uint64
			if n, cas, err = b.Arith(key, true, 1, 0, 0, true, 0, t0); err == nil {
				written.Store(cas, strconv.FormatUint(n, 10))
				floor, deleted = max(floor, cas), false
			}
		case 3:
			if err = b.Delete(key, 0, t0); err == nil {
				deleted = true
			} else if errors.Is(err, ErrNotFound) {
				err = nil
			}
		}
		if err != nil {
			t.Error(err)
			return
		}
		if it, ok := b.Peek(key, t0, nil); ok && !check("Peek", it) {
			return
		}
		if it, err := b.Get(key, t0, nil); err == nil && !check("Get", it) {
			return
		}
	}
}

// coherenceReader alternates Get and Peek on key and returns what it saw,
// failing if the CAS ever goes backwards, or if an item Get reported gone
// comes back (anything found after that must have been created since).
func coherenceReader(t *testing.T, b *Bucket, key []byte, r, ops int) []Item {
	var seen []Item
	var last uint64
	gone := false
	for i := range 2 * ops {
		var it Item
		found := false
		if i%2 == 0 {
			var err error
			it, err = b.Get(key, t0, nil)
			if err != nil && !errors.Is(err, ErrNotFound) {
				t.Error(err)
				return seen
			}
			found, gone = err == nil, gone || err != nil
		} else {
			it, found = b.Peek(key, t0, nil)
		}
		if !found {
			continue
		}
		if it.CAS < last || gone && it.CAS == last {
			t.Errorf("reader %d: CAS went from %d to %d (gone in between: %v; op %d)", r, last, it.CAS, gone, i)
			return seen
		}
		last, gone = it.CAS, false
		seen = append(seen, it)
	}
	return seen
}

// TestCacheBucketIsolation: entries are per bucket, and Flush and
// DeleteBucket drop (and free) only their bucket's entries.
func TestCacheBucketIsolation(t *testing.T) {
	db := openTest(t, withCache(DefaultItemCacheSize))
	a, b, gone := newBucketT(t, db, "a"), newBucketT(t, db, "b"), newBucketT(t, db, "gone")
	for i := range 100 {
		k := fmt.Sprint("k", i)
		mustStore(t, a, ModeSet, k, "a-"+k, 1, 0)
		mustStore(t, b, ModeSet, k, "b-"+k, 2, 0)
		mustStore(t, gone, ModeSet, k, "g-"+k, 3, 0)
	}
	wantPeek(t, a, "k7", "a-k7", 1, 0, 0, t0)
	wantPeek(t, b, "k7", "b-k7", 2, 0, 0, t0)
	wantNoPeek(t, a, "only-b", t0)
	mustStore(t, b, ModeSet, "only-b", "v", 0, 0)
	wantNoPeek(t, a, "only-b", t0)
	if st := db.CacheStats(); st.Items != 301 {
		t.Fatalf("%d items resident, want 301", st.Items)
	}

	if err := b.Flush(); err != nil {
		t.Fatal(err)
	}
	wantNoPeek(t, b, "k7", t0)
	wantPeek(t, a, "k7", "a-k7", 1, 0, 0, t0)
	if st := db.CacheStats(); st.Items != 200 {
		t.Fatalf("%d items resident after Flush, want 200", st.Items)
	}
	if err := db.DeleteBucket("gone"); err != nil {
		t.Fatal(err)
	}
	wantNoPeek(t, gone, "k7", t0)
	wantPeek(t, a, "k7", "a-k7", 1, 0, 0, t0)
	if st := db.CacheStats(); st.Items != 100 {
		t.Fatalf("%d items resident after DeleteBucket, want 100", st.Items)
	}
	again := newBucketT(t, db, "gone")
	wantNoPeek(t, again, "k7", t0)
	checkCache(t, db.cache)

	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	wantNoPeek(t, a, "k7", t0)
	if st := db.CacheStats(); st.Items != 0 || st.Bytes != 0 {
		t.Fatalf("after Close: %+v", st)
	}
}

// TestCacheEviction: a small cache stays within its budget, evicts, keeps
// a hot item under CLOCK, and never caches items over 1/8 of a shard.
func TestCacheEviction(t *testing.T) {
	const size = cacheShards * 8 << 10 // 8 KiB per shard
	db := openTest(t, withCache(size))
	b := newBucketT(t, db, "b")
	mustStore(t, b, ModeSet, "hot", "h", 0, 0)
	for i := range 5000 {
		mustStore(t, b, ModeSet, fmt.Sprint("cold", i), string(make([]byte, 10+i%300)), 0, 0)
		if _, ok := b.Peek([]byte("hot"), t0, nil); !ok {
			t.Fatalf("hot item evicted after %d cold stores", i+1)
		}
		if st := db.CacheStats(); st.Bytes > size {
			t.Fatalf("after %d stores: %d bytes resident, budget %d", i+1, st.Bytes, size)
		}
	}
	st := db.CacheStats()
	if st.Evictions == 0 || st.Bytes < size/2 {
		t.Fatalf("CacheStats = %+v; want evictions and a well-used budget", st)
	}
	t.Logf("small cache after 5000 stores: %+v", st)
	checkCache(t, db.cache)

	big := string(make([]byte, 1<<10)) // 1 KiB + overhead > 8 KiB / 8
	mustStore(t, b, ModeSet, "big", big, 0, 0)
	wantNoPeek(t, b, "big", t0)
	wantItem(t, b, "big", big, 0, 0, t0)
	wantNoPeek(t, b, "big", t0)
	// A resident item that grows too big is dropped, not left stale.
	mustStore(t, b, ModeSet, "grows", "small", 0, 0)
	wantPeek(t, b, "grows", "small", 0, 0, 0, t0)
	mustStore(t, b, ModeAppend, "grows", big, 0, 0)
	wantNoPeek(t, b, "grows", t0)
	checkCache(t, db.cache)
}

// TestCacheBufferReuse: an update that fits reuses the entry's buffer; one
// that would waste over half of it gets a new one; bytes stay exact.
func TestCacheBufferReuse(t *testing.T) {
	db := openTest(t, withCache(DefaultItemCacheSize))
	b := newBucketT(t, db, "b")
	mustStore(t, b, ModeSet, "k", string(make([]byte, 1000)), 0, 0)
	buf := func() *byte {
		h := db.cache.hash(b.id, []byte("k"))
		s := db.cache.shard(h)
		s.mu.Lock()
		defer s.mu.Unlock()
		return &s.slots[s.index[h]].buf[:1][0]
	}
	p := buf()
	mustStore(t, b, ModeSet, "k", string(make([]byte, 900)), 0, 0)
	if buf() != p {
		t.Fatal("an update that fits did not reuse the buffer")
	}
	mustStore(t, b, ModeSet, "k", "tiny", 0, 0)
	if buf() == p {
		t.Fatal("a 4-byte value kept a 1 KiB buffer")
	}
	wantPeek(t, b, "k", "tiny", 0, 0, 0, t0)
	checkCache(t, db.cache)
}

// TestCacheExpiry: Peek and Get treat a resident item expired at now as a
// miss; a complete shard keeps it (its record is on disk until the sweeper
// deletes it), an incomplete one drops it; the sweeper's deletion drops it
// for every clock.
func TestCacheExpiry(t *testing.T) {
	db := openTest(t, withCache(DefaultItemCacheSize))
	b := newBucketT(t, db, "b")
	mustStore(t, b, ModeSet, "k", "v", 0, t0+10)
	wantPeek(t, b, "k", "v", 0, t0+10, 0, t0+9)
	wantNoPeek(t, b, "k", t0+10)
	wantPeek(t, b, "k", "v", 0, t0+10, 0, t0+9) // complete: kept
	evictKey(db.cache, b.id, []byte("other"))   // no such key: the shard stays complete
	mustStore(t, b, ModeSet, "k", "v", 0, t0+10)
	s := db.cache.shard(db.cache.hash(b.id, []byte("k")))
	s.mu.Lock()
	s.complete = false
	s.mu.Unlock()
	wantNoPeek(t, b, "k", t0+10)
	wantNoPeek(t, b, "k", t0+9) // incomplete: dropped by the expired look-up
	if _, err := b.Get([]byte("k"), t0+10, nil); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get expired: %v", err)
	}
	wantNoPeek(t, b, "k", t0) // an expired read does not fill
	wantItem(t, b, "k", "v", 0, t0+10, t0)
	wantPeek(t, b, "k", "v", 0, t0+10, 0, t0)

	// The sweeper deletes it from Pebble: a reader with an older clock must
	// not find it resident any more.
	if n := db.sweep(t0 + 10); n != 1 {
		t.Fatalf("sweep deleted %d, want 1", n)
	}
	wantNoPeek(t, b, "k", t0)
	if _, err := b.Get([]byte("k"), t0, nil); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get after sweep: %v", err)
	}
	checkCache(t, db.cache)
}

// TestCacheDisabled: a negative ItemCacheSize disables the cache.
func TestCacheDisabled(t *testing.T) {
	db := openTest(t, withCache(-1))
	if db.cache != nil {
		t.Fatal("cache allocated with ItemCacheSize -1")
	}
	b := newBucketT(t, db, "b")
	mustStore(t, b, ModeSet, "k", "v", 0, 0)
	wantItem(t, b, "k", "v", 0, 0, t0)
	wantNoPeek(t, b, "k", t0)
	if st := db.CacheStats(); st != (CacheStats{}) {
		t.Fatalf("CacheStats = %+v, want zero", st)
	}
}

// TestCacheAllocs: a Peek or Get hit allocates nothing, and a Store that
// updates a resident item in place allocates no more than without a cache.
func TestCacheAllocs(t *testing.T) {
	if raceEnabled() {
		t.Skip("the race detector makes sync.Pool drop items at random")
	}
	storeAllocs := func(size int64) float64 {
		b := newBucketT(t, openTest(t, withCache(size)), "b")
		val := make([]byte, 100)
		return testing.AllocsPerRun(1000, func() {
			if _, err := b.Store(ModeSet, []byte("key"), val, 0, 0, 0, t0); err != nil {
				t.Fatal(err)
			}
		})
	}
	with, without := storeAllocs(DefaultItemCacheSize), storeAllocs(-1)
	t.Logf("Store: %.1f allocs/op with the cache, %.1f without", with, without)
	if with > without {
		t.Fatalf("Store allocates %.1f times per call with the cache, %.1f without", with, without)
	}

	b := newBucketT(t, openTest(t, withCache(DefaultItemCacheSize)), "b")
	mustStore(t, b, ModeSet, "key", string(make([]byte, 100)), 0, 0)
	key, dst := []byte("key"), make([]byte, 0, 256)
	if allocs := testing.AllocsPerRun(1000, func() {
		if _, ok := b.Peek(key, t0, dst); !ok {
			t.Fatal("Peek missed")
		}
	}); allocs != 0 {
		t.Fatalf("Peek hit allocates %.1f times per call", allocs)
	}
	if allocs := testing.AllocsPerRun(1000, func() {
		if _, err := b.Get(key, t0, dst); err != nil {
			t.Fatal(err)
		}
	}); allocs != 0 {
		t.Fatalf("Get hit allocates %.1f times per call", allocs)
	}
}

// TestCacheWarmComplete: open puts the items on disk in the cache while they
// fit; a complete shard then answers a miss without reading Pebble (GET, and a
// SET of a new key). Reopened with a cache too small for them, the shards that
// could not hold theirs read Pebble on a miss, and every item is still found.
func TestCacheWarmComplete(t *testing.T) {
	dir := t.TempDir()
	open := func(size int64) *DB {
		db, err := Open(Options{Dir: dir, Logger: quietLogger(), Now: clockAt(t0), ItemCacheSize: size})
		if err != nil {
			t.Fatal(err)
		}
		return db
	}
	db := open(DefaultItemCacheSize)
	b := newBucketT(t, db, "b")
	const n = 2000
	value := string(make([]byte, 500))
	for i := range n {
		mustStore(t, b, ModeSet, "k"+strconv.Itoa(i), value, uint32(i), 0)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	db = open(DefaultItemCacheSize)
	b, _ = db.Bucket("b")
	for i := range db.cache.shards {
		if !db.cache.shards[i].complete {
			t.Fatalf("shard %d incomplete after warming %d items into %d bytes", i, n, DefaultItemCacheSize)
		}
	}
	reads := 0
	db.testHookRead = func() { reads++ }
	wantPeek(t, b, "k7", value, 7, 0, 0, t0)
	if _, err := b.Get([]byte("absent"), t0, nil); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get(absent) = %v, want ErrNotFound", err)
	}
	mustStore(t, b, ModeAdd, "new", "v", 0, 0)
	if reads != 0 || b.ItemCount() != n+1 {
		t.Fatalf("%d Pebble reads, %d items; want 0 and %d", reads, b.ItemCount(), n+1)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	db = open(cacheShards * 4096) // 4 KiB a shard: a few items each
	defer db.Close()
	b, _ = db.Bucket("b")
	incomplete := 0
	for i := range db.cache.shards {
		if !db.cache.shards[i].complete {
			incomplete++
		}
	}
	if incomplete != cacheShards {
		t.Fatalf("%d of %d shards incomplete with a 4 KiB budget each, want all", incomplete, cacheShards)
	}
	for i := range n {
		wantItem(t, b, "k"+strconv.Itoa(i), value, uint32(i), 0, t0)
	}
	if _, err := b.Get([]byte("absent"), t0, nil); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get(absent) = %v, want ErrNotFound", err)
	}
	checkCache(t, db.cache)
}

// TestCacheFetchState: the meta protocol's h and l: the first read marks
// an item fetched, every later one (a touch too) sets its access time; a
// store starts afresh, an invalidation keeps the history; an item read
// from Pebble starts as if stored then.
func TestCacheFetchState(t *testing.T) {
	db := openTest(t, withCache(DefaultItemCacheSize))
	b := newBucketT(t, db, "b")
	key := []byte("k")
	want := func(step string, it Item, fetched bool, accessed uint32) {
		t.Helper()
		if it.Fetched != fetched || it.Accessed != accessed {
			t.Fatalf("%s: fetched %v accessed t0%+d, want %v t0%+d", step, it.Fetched, int64(it.Accessed)-t0,
				fetched, int64(accessed)-t0)
		}
	}
	peek := func(now uint32) Item {
		t.Helper()
		it, ok := b.Peek(key, now, nil)
		if !ok {
			t.Fatalf("Peek at t0%+d missed", int64(now)-t0)
		}
		return it
	}
	if _, err := b.Store(ModeSet, key, []byte("v"), 0, 0, 0, t0); err != nil {
		t.Fatal(err)
	}
	want("first read", peek(t0+2), false, t0)
	want("second read", peek(t0+3), true, t0)
	it, err := b.Get(key, t0+4, nil)
	if err != nil {
		t.Fatal(err)
	}
	want("third read (Get)", it, true, t0+3)
	if _, err := b.Touch(key, t0+100, t0+5, nil); err != nil {
		t.Fatal(err)
	}
	want("after a touch", peek(t0+6), true, t0+5)
	if _, err := b.Store(ModeSet, key, []byte("w"), 0, 0, 0, t0+7); err != nil {
		t.Fatal(err)
	}
	want("after a store", peek(t0+8), false, t0+7)
	evictKey(db.cache, b.id, key)
	if it, err = b.Get(key, t0+9, nil); err != nil {
		t.Fatal(err)
	}
	want("read from Pebble", it, false, t0+9)
	want("read after the fill", peek(t0+10), true, t0+9)
	if _, err := b.Invalidate(key, 0, false, 0, t0+11); err != nil {
		t.Fatal(err)
	}
	want("after an invalidation", peek(t0+12), true, t0+10)
	if _, _, err := b.Arith([]byte("n"), true, 1, 5, 0, true, 0, t0+13); err != nil {
		t.Fatal(err)
	}
	if it, _ = b.Peek([]byte("n"), t0+14, nil); !it.Fetched && it.Accessed == t0+13 {
		if it, _ = b.Peek([]byte("n"), t0+15, nil); it.Fetched && it.Accessed == t0+13 {
			return
		}
	}
	t.Fatalf("created by INCR, read twice: fetched %v accessed t0%+d", it.Fetched, int64(it.Accessed)-t0)
}

// TestCacheNoBump: reads that do not count (meta get's u) leave the fetch
// state as it was, resident or filled from Pebble, and Bump counts one.
func TestCacheNoBump(t *testing.T) {
	db := openTest(t, withCache(DefaultItemCacheSize))
	b := newBucketT(t, db, "b")
	key := []byte("k")
	state := func(now uint32) (bool, uint32) {
		it, ok := b.PeekNoBump(key, now, nil)
		if !ok {
			t.Fatalf("PeekNoBump at t0%+d missed", int64(now)-t0)
		}
		return it.Fetched, it.Accessed
	}
	want := func(step string, now uint32, fetched bool, accessed uint32) {
		t.Helper()
		if f, a := state(now); f != fetched || a != accessed {
			t.Fatalf("%s: fetched %v accessed t0%+d, want %v t0%+d", step, f, int64(a)-t0, fetched, int64(accessed)-t0)
		}
	}
	if _, err := b.Store(ModeSet, key, []byte("v"), 0, 0, 0, t0); err != nil {
		t.Fatal(err)
	}
	want("stored, peeked without a bump twice", t0+1, false, t0)
	if _, err := b.GetNoBump(key, t0+2, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := b.TouchNoBump(key, t0+100, t0+3, nil); err != nil {
		t.Fatal(err)
	}
	want("after GetNoBump and TouchNoBump", t0+4, false, t0)
	b.Bump(key, t0+5)
	want("after a Bump", t0+6, true, t0)
	b.Bump(key, t0+7)
	want("after a second Bump", t0+8, true, t0+7)
	evictKey(db.cache, b.id, key)
	if it, err := b.GetNoBump(key, t0+9, nil); err != nil || it.Fetched || it.Accessed != t0+9 {
		t.Fatalf("GetNoBump from Pebble: %+v, %v; want never read, accessed t0+9", it, err)
	}
	want("filled without a bump", t0+10, false, t0+9)
	b.Bump([]byte("absent"), t0+11) // not resident: nothing to count
}
