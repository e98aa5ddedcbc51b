package engine

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
)

// TestBlindWrites: SET, ADD, REPLACE and DELETE of a resident key take its
// header from the item cache and do not read Pebble; APPEND and the others,
// and any mutation of a key that is not resident, read it. The results,
// the item count and the expiry index are those of a read.
func TestBlindWrites(t *testing.T) {
	db := openTest(t, func(o *Options) { fixedClock(o); o.ItemCacheSize = 1 << 20 })
	b := newBucketT(t, db, "b")
	reads := 0
	db.testHookRead = func() { reads++ }
	step := func(what string, wantReads int, f func() error, wantErr error) {
		t.Helper()
		reads = 0
		if err := f(); !errors.Is(err, wantErr) {
			t.Fatalf("%s: err %v, want %v", what, err, wantErr)
		}
		if reads != wantReads {
			t.Fatalf("%s: %d Pebble reads, want %d", what, reads, wantReads)
		}
	}
	store := func(mode StoreMode, key, val string, exp uint32, cas uint64, now uint32) func() error {
		return func() error { _, err := b.Store(mode, []byte(key), []byte(val), 0, exp, cas, now); return err }
	}
	step("SET new key, complete cache", 0, store(ModeSet, "n", "v", 0, 0, t0), nil)
	step("DELETE it", 0, func() error { return b.Delete([]byte("n"), 0, t0) }, nil)
	step("DELETE missing, complete cache", 0, func() error { return b.Delete([]byte("n"), 0, t0) }, ErrNotFound)
	evictKey(db.cache, b.id, []byte("k")) // not resident: ends no shard's completeness
	for i := range cacheShards {
		db.cache.shards[i].complete = false // as after evictions: misses read Pebble
	}
	step("SET new key", 1, store(ModeSet, "k", "v1", t0+10, 0, t0), nil)
	step("SET resident", 0, store(ModeSet, "k", "v2", 0, 0, t0), nil)
	step("ADD resident", 0, store(ModeAdd, "k", "x", 0, 0, t0), ErrExists)
	step("SET resident, CAS mismatch", 0, store(ModeSet, "k", "x", 0, 1, t0), ErrExists)
	step("REPLACE resident", 0, store(ModeReplace, "k", "v3", t0+20, 0, t0), nil)
	step("APPEND reads", 1, store(ModeAppend, "k", "+", 0, 0, t0), nil)
	wantItem(t, b, "k", "v3+", 0, t0+20, t0)
	if n := countKeys(t, db, kindExpiry); n != 1 || b.ItemCount() != 1 {
		t.Fatalf("%d expiry entries, ItemCount %d; want 1 1", n, b.ItemCount())
	}
	// Expired but still resident: SET replaces it without counting a new item.
	step("SET over expired resident", 0, store(ModeSet, "k", "v4", 0, 0, t0+30), nil)
	if n := countKeys(t, db, kindExpiry); n != 0 || b.ItemCount() != 1 {
		t.Fatalf("after SET over expired: %d expiry entries, ItemCount %d; want 0 1", n, b.ItemCount())
	}
	step("DELETE resident", 0, func() error { return b.Delete([]byte("k"), 0, t0+30) }, nil)
	step("DELETE missing", 1, func() error { return b.Delete([]byte("k"), 0, t0+30) }, ErrNotFound)
	if b.ItemCount() != 0 || countKeys(t, db, kindItem) != 0 {
		t.Fatalf("after DELETE: ItemCount %d, %d records", b.ItemCount(), countKeys(t, db, kindItem))
	}
	step("SET again", 1, store(ModeSet, "k", "v5", t0+40, 0, t0+30), nil)
	evictKey(db.cache, b.id, []byte("k"))
	step("SET evicted key reads", 1, store(ModeSet, "k", "v6", 0, 0, t0+30), nil)
	if n := countKeys(t, db, kindExpiry); n != 0 || b.ItemCount() != 1 {
		t.Fatalf("after SET of evicted: %d expiry entries, ItemCount %d; want 0 1", n, b.ItemCount())
	}
}

// TestBlindWritesModel runs the same random mutations against a DB whose
// item cache is small (so keys come and go: blind and read paths mix) and
// one without a cache (always read), and compares every result, the item
// counts, the expiry index and the final contents.
func TestBlindWritesModel(t *testing.T) {
	small := openTest(t, func(o *Options) { fixedClock(o); o.ItemCacheSize = 64 << 10 })
	none := openTest(t, func(o *Options) { fixedClock(o); o.ItemCacheSize = -1 })
	bs, bn := newBucketT(t, small, "b"), newBucketT(t, none, "b")
	rng := rand.New(rand.NewPCG(1, 2))
	now := uint32(t0)
	for i := range 5000 {
		key := []byte("key-" + strconv.Itoa(rng.IntN(300)))
		val := bytes.Repeat([]byte{byte('a' + i%26)}, rng.IntN(900)) // which op stored it shows
		exp := []uint32{0, 0, now + 5, now + 50}[rng.IntN(4)]
		mode := StoreMode(rng.IntN(5))
		var es, en error
		switch op := rng.IntN(10); {
		case op < 6:
			_, es = bs.Store(mode, key, val, 7, exp, 0, now)
			_, en = bn.Store(mode, key, val, 7, exp, 0, now)
		case op < 8:
			es, en = bs.Delete(key, 0, now), bn.Delete(key, 0, now)
		default:
			var is, in Item
			is, es = bs.Get(key, now, nil)
			in, en = bn.Get(key, now, nil)
			if d := itemDiff(is, in); es == nil && en == nil && d != "" {
				t.Fatalf("op %d: GET %s: %s", i, key, d)
			}
		}
		if !errors.Is(es, en) && !errors.Is(en, es) {
			t.Fatalf("op %d on %s: cached DB %v, uncached %v", i, key, es, en)
		}
		if rng.IntN(50) == 0 {
			now += uint32(rng.IntN(20))
		}
		if bs.ItemCount() != bn.ItemCount() {
			t.Fatalf("op %d: ItemCount %d vs %d", i, bs.ItemCount(), bn.ItemCount())
		}
	}
	for k := range 300 { // the final contents, key by key
		key := []byte("key-" + strconv.Itoa(k))
		is, es := bs.Get(key, now, nil)
		in, en := bn.Get(key, now, nil)
		if !errors.Is(es, en) || es == nil && itemDiff(is, in) != "" {
			t.Fatalf("at the end, %s: cached DB %v %s", key, es, itemDiff(is, in))
		}
	}
	if a, b := countKeys(t, small, kindExpiry), countKeys(t, none, kindExpiry); a != b {
		t.Fatalf("expiry index: %d entries vs %d", a, b)
	}
	if a, b := countKeys(t, small, kindItem), countKeys(t, none, kindItem); a != b || int64(a) != bs.ItemCount() {
		t.Fatalf("item records: %d vs %d, ItemCount %d", a, b, bs.ItemCount())
	}
	if a, b := small.sweep(now+1000), none.sweep(now+1000); a != b || bs.ItemCount() != bn.ItemCount() {
		t.Fatalf("sweep deleted %d vs %d; ItemCount %d vs %d", a, b, bs.ItemCount(), bn.ItemCount())
	}
	checkCache(t, small.cache)
}

// itemDiff says how two reads of an item differ in what a client sees
// (value, flags, expiry), or "" (CAS values are each DB's own).
func itemDiff(a, b Item) string {
	switch {
	case !bytes.Equal(a.Value, b.Value):
		return fmt.Sprintf("values %q vs %q", a.Value, b.Value)
	case a.Flags != b.Flags || a.Expiry != b.Expiry:
		return fmt.Sprintf("flags %d vs %d, expiry %d vs %d", a.Flags, b.Flags, a.Expiry, b.Expiry)
	}
	return ""
}
