package engine

import (
	"errors"
	"testing"
)

// TestFlushAt follows memcached's FLUSH with a delay: items are served until
// the deadline, everything written before it (also after the FlushAt call)
// is gone from the deadline on, items written at or after it survive.
func TestFlushAt(t *testing.T) {
	db := openTest(t, nil)
	b := newBucketT(t, db, "b")
	other := newBucketT(t, db, "other")
	mustStore(t, b, ModeSet, "old", "1", 0, 0)
	mustStore(t, other, ModeSet, "o", "1", 0, 0)
	if err := b.FlushAt(t0+10, t0); err != nil {
		t.Fatal(err)
	}
	if got := b.FlushPending(); got != t0+10 {
		t.Fatalf("FlushPending = %d, want %d", got, t0+10)
	}
	if _, err := b.Store(ModeSet, []byte("between"), []byte("2"), 0, 0, 0, t0+5); err != nil {
		t.Fatal(err)
	}
	wantItem(t, b, "old", "1", 0, 0, t0+9)
	if _, ok := b.Peek([]byte("between"), t0+9, nil); !ok && testItemCacheSize >= 0 {
		t.Fatalf("Peek before the deadline missed")
	}
	if _, ok := b.Peek([]byte("between"), t0+10, nil); ok {
		t.Fatalf("Peek at the deadline hit a flushed item")
	}
	if _, err := b.Store(ModeSet, []byte("at"), []byte("3"), 0, 0, 0, t0+10); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"old", "between"} {
		if _, err := b.Get([]byte(k), t0+10, nil); !errors.Is(err, ErrNotFound) {
			t.Fatalf("Get(%s) after the deadline: %v, want ErrNotFound", k, err)
		}
	}
	wantItem(t, b, "at", "3", 0, 0, t0+11)
	wantItem(t, other, "o", "1", 0, 0, t0+11)
	if b.ItemCount() != 1 || b.FlushPending() != 0 {
		t.Fatalf("after the flush: count %d, pending %d; want 1, 0", b.ItemCount(), b.FlushPending())
	}
}

func TestFlushAtPastAndReplaced(t *testing.T) {
	db := openTest(t, nil)
	b := newBucketT(t, db, "b")
	mustStore(t, b, ModeSet, "k", "1", 0, 0)
	if err := b.FlushAt(t0-100, t0); err != nil || b.FlushPending() != 0 {
		t.Fatalf("FlushAt in the past: %v, pending %d", err, b.FlushPending())
	}
	wantItem(t, b, "k", "1", 0, 0, t0+1000)
	if err := b.FlushAt(t0+10, t0); err != nil {
		t.Fatal(err)
	}
	if err := b.FlushAt(t0+20, t0); err != nil { // replaces the first
		t.Fatal(err)
	}
	wantItem(t, b, "k", "1", 0, 0, t0+15)
	if err := b.Flush(); err != nil || b.FlushPending() != 0 { // cancels it
		t.Fatalf("Flush: %v, pending %d", err, b.FlushPending())
	}
	mustStore(t, b, ModeSet, "k2", "2", 0, 0)
	wantItem(t, b, "k2", "2", 0, 0, t0+30)
}

// TestFlushAtSurvivesRestart: the deadline is persisted; the sweeper
// performs a due flush without any traffic.
func TestFlushAtSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	opts := Options{Dir: dir, WALSync: true, Logger: quietLogger(), Now: clockAt(t0), ItemCacheSize: testItemCacheSize}
	db, err := Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	b := newBucketT(t, db, "b")
	mustStore(t, b, ModeSet, "k", "1", 0, 0)
	if err := b.FlushAt(t0+10, t0); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if db, err = Open(opts); err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if b, err = db.Bucket("b"); err != nil {
		t.Fatal(err)
	}
	if b.FlushPending() != t0+10 {
		t.Fatalf("after reopen FlushPending = %d, want %d", b.FlushPending(), t0+10)
	}
	wantItem(t, b, "k", "1", 0, 0, t0+9)
	db.sweep(t0 + 10)
	if b.ItemCount() != 0 || b.FlushPending() != 0 {
		t.Fatalf("after the sweep at the deadline: count %d, pending %d", b.ItemCount(), b.FlushPending())
	}
}
