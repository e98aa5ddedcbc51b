package engine

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

// TestDump: a bucket's live items in key order, with size, expiry, CAS and
// the resident item's fetch state (an item not resident: never read,
// accessed now); other buckets' items and expired ones are not listed; fn
// can stop the listing; and a listing started during another is refused.
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
	err := b.Dump(t0+5, func(key []byte, it Item) bool {
		got = append(got, row{string(key), len(it.Value), it.Expiry, it.Accessed, it.CAS, it.Fetched})
		if err := b.Dump(t0+5, func([]byte, Item) bool { return true }); !errors.Is(err, ErrDumpBusy) {
			t.Errorf("a dump during a dump: %v, want ErrDumpBusy", err)
		}
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].key != "a" || got[0].atime != t0+5 || got[0].fetched || got[1] != (row{"b", 2, t0 + 100, t0, casB, true}) {
		t.Fatalf("Dump at t0+5: %+v; want a (not resident: never read, accessed now), then b as stored and read once", got)
	}
	n := 0
	if err := b.Dump(t0+5, func([]byte, Item) bool { n++; return false }); err != nil || n != 1 {
		t.Fatalf("a Dump whose fn stops at once: %d items, %v", n, err)
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
	err := b.Dump(t0, func([]byte, Item) bool {
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
