package engine

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

// TestDump: a bucket's live items in key order, with size, expiry, CAS and
// the resident item's fetch state (an item not resident: never read,
// accessed now); other buckets' items and expired ones are not listed; a
// chunk starts after a key and fn can stop it; and another listing is
// refused until the first ends.
func TestDump(t *testing.T) {
	db := openTest(t, withCache(DefaultItemCacheSize))
	b, other := newBucketT(t, db, "b"), newBucketT(t, db, "other")
	store := func(bk *Bucket, key, value string, expiry uint32) uint64 {
		t.Helper()
		cas, err := bk.Store(ModeSet, []byte(key), []byte(value), 0, expiry, 0, t0)
		if err != nil {
			t.Fatal(err)
		}
		return cas
	}
	casB := store(b, "b", "vv", t0+100)
	store(b, "a", "v", 0)
	store(b, "gone", "v", t0+1)
	store(other, "x", "v", 0)
	if _, err := b.Get([]byte("b"), t0+1, nil); err != nil { // the first read marks it fetched
		t.Fatal(err)
	}
	evictKey(db.cache, b.id, []byte("a"))
	type row struct {
		key           string
		size          int
		expiry, atime uint32
		cas           uint64
		fetched       bool
	}
	var got []row
	mine, theirs := new(int), new(int)
	err := b.Dump(mine, t0+5, nil, func(key []byte, it Item) bool {
		got = append(got, row{string(key), len(it.Value), it.Expiry, it.Accessed, it.CAS, it.Fetched})
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].key != "a" || got[0].atime != t0+5 || got[0].fetched || got[1] != (row{"b", 2, t0 + 100, t0, casB, true}) {
		t.Fatalf("Dump at t0+5: %+v; want a (not resident: never read, accessed now), then b as stored and read once", got)
	}
	var keys []string
	if err := b.Dump(mine, t0+5, []byte("a"), func(k []byte, _ Item) bool { keys = append(keys, string(k)); return false }); err != nil || len(keys) != 1 || keys[0] != "b" {
		t.Fatalf("the next chunk, after a, stopped at its first item: %q, %v; want b", keys, err)
	}
	if err := b.Dump(theirs, t0+5, nil, func([]byte, Item) bool { return true }); !errors.Is(err, ErrDumpBusy) {
		t.Fatalf("another listing while the first runs: %v, want ErrDumpBusy", err)
	}
	b.EndDump(mine)
	if err := b.Dump(theirs, t0+5, nil, func([]byte, Item) bool { return true }); err != nil {
		t.Fatalf("another listing after the first ended: %v", err)
	}
}

// TestDumpIdleListingGivesWay: a listing that reads no chunk for dumpIdle
// (its client stopped reading, or left without ending it) gives way to
// another, and its next chunk gets ErrDumpBusy.
func TestDumpIdleListingGivesWay(t *testing.T) {
	now := time.Unix(t0, 0)
	db := openTest(t, func(o *Options) { o.Now = func() time.Time { return now } })
	b := newBucketT(t, db, "b")
	first, second := new(int), new(int)
	all := func([]byte, Item) bool { return true }
	if err := b.Dump(first, t0, nil, all); err != nil {
		t.Fatal(err)
	}
	now = now.Add(dumpIdle - time.Second)
	if err := b.Dump(second, t0, nil, all); !errors.Is(err, ErrDumpBusy) {
		t.Fatalf("another listing %v after the first's chunk: %v, want ErrDumpBusy", dumpIdle-time.Second, err)
	}
	now = now.Add(time.Second)
	if err := b.Dump(second, t0, nil, all); err != nil {
		t.Fatalf("another listing %v after the first's chunk: %v", dumpIdle, err)
	}
	if err := b.Dump(first, t0, nil, all); !errors.Is(err, ErrDumpBusy) {
		t.Fatalf("the first listing's next chunk after it gave way: %v, want ErrDumpBusy", err)
	}
}

// TestDumpYields: a flush and a Close during a long listing do not wait for
// it to end: a flush waits at most a stride of records, and a Close ends
// the listing with ErrClosed before Pebble closes under its iterator.
func TestDumpYields(t *testing.T) {
	db := openTest(t, withCache(DefaultItemCacheSize))
	b := newBucketT(t, db, "b")
	for i := range 4 * dumpStride {
		if _, err := b.Store(ModeSet, fmt.Appendf(nil, "k%04d", i), []byte("v"), 0, 0, 0, t0); err != nil {
			t.Fatal(err)
		}
	}
	flushed, closed := make(chan error), make(chan error)
	listed := 0
	err := b.Dump(new(int), t0, nil, func([]byte, Item) bool {
		switch listed++; listed {
		case 1:
			go func() { flushed <- b.Flush() }()
			time.Sleep(50 * time.Millisecond) // the flush waits for the bucket by then: the stride's end
		case 2 * dumpStride:
			select {
			case err := <-flushed:
				if err != nil {
					t.Errorf("the flush during the listing: %v", err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("the flush waited for the listing to end")
			}
			go func() { closed <- db.Close() }()
			time.Sleep(50 * time.Millisecond) // Close waits for the bucket: the stride's end
		}
		return true
	})
	if !errors.Is(err, ErrClosed) || listed < 2*dumpStride || listed > 3*dumpStride {
		t.Fatalf("the listing: %d items, %v; want ErrClosed after a close in its second stride", listed, err)
	}
	if err := <-closed; err != nil {
		t.Fatalf("Close during the listing: %v", err)
	}
}
