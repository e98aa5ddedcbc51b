package engine

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fixedClock keeps the background sweeper at t0 and slows it down, so tests
// drive sweep(now) themselves.
func fixedClock(o *Options) {
	o.Now = clockAt(t0)
	o.SweepInterval = time.Hour
}

func TestSweepDeletesExpired(t *testing.T) {
	db := openTest(t, fixedClock)
	b, other := newBucketT(t, db, "b"), newBucketT(t, db, "other")
	mustStore(t, b, ModeSet, "a", "v", 0, t0+10)
	mustStore(t, b, ModeSet, "b", "v", 0, t0+20)
	mustStore(t, b, ModeSet, "forever", "v", 0, 0)
	mustStore(t, b, ModeSet, "touched", "v", 0, t0+10)
	if _, err := b.Touch([]byte("touched"), t0+100, t0, nil); err != nil {
		t.Fatal(err)
	}
	mustStore(t, b, ModeSet, "reset", "v", 0, t0+10)
	mustStore(t, b, ModeSet, "reset", "v2", 0, 0) // overwrite drops the expiry
	mustStore(t, other, ModeSet, "a", "v", 0, t0+10)
	if n := countKeys(t, db, kindExpiry); n != 4 { // a, b, touched, other/a
		t.Fatalf("%d expiry index entries, want 4", n)
	}

	if n := db.sweep(t0 + 9); n != 0 {
		t.Fatalf("sweep before expiry deleted %d", n)
	}
	if n := db.sweep(t0 + 10); n != 2 { // b/a and other/a
		t.Fatalf("sweep(t0+10) deleted %d, want 2", n)
	}
	if b.ItemCount() != 4 || other.ItemCount() != 0 {
		t.Fatalf("ItemCount b=%d other=%d, want 4 0", b.ItemCount(), other.ItemCount())
	}
	wantItem(t, b, "touched", "v", 0, t0+100, t0+10)
	wantItem(t, b, "reset", "v2", 0, 0, t0+10)
	if n := db.sweep(t0 + 1000); n != 2 { // b and touched
		t.Fatalf("sweep(t0+1000) deleted %d, want 2", n)
	}
	if n := countKeys(t, db, kindExpiry); n != 0 {
		t.Fatalf("%d expiry index entries left", n)
	}
	if n := countKeys(t, db, kindItem); n != 2 || b.ItemCount() != 2 {
		t.Fatalf("%d item records, ItemCount %d; want 2 (forever, reset)", n, b.ItemCount())
	}
}

func TestSweepManyAndStale(t *testing.T) {
	db := openTest(t, fixedClock)
	b := newBucketT(t, db, "b")
	const n = 3*sweepChunk + 17
	for i := range n {
		mustStore(t, b, ModeSet, fmt.Sprint("k", i), "v", 0, t0+1+uint32(i%5))
	}
	// A stale index entry (no such item) is removed without touching counts.
	stale := make([]byte, expiryPrefixLen+5)
	putExpiryKey(stale, b.id, t0+2, []byte("ghost"))
	if err := db.pdb.Set(stale, nil, db.writeO); err != nil {
		t.Fatal(err)
	}
	if got := db.sweep(t0 + 100); got != n {
		t.Fatalf("sweep deleted %d, want %d", got, n)
	}
	if b.ItemCount() != 0 || countKeys(t, db, kindItem) != 0 || countKeys(t, db, kindExpiry) != 0 {
		t.Fatalf("after sweep: ItemCount %d, %d items, %d index entries; want all 0",
			b.ItemCount(), countKeys(t, db, kindItem), countKeys(t, db, kindExpiry))
	}
}

func TestSweeperRunsOnItsClock(t *testing.T) {
	var now atomic.Int64
	now.Store(t0)
	db := openTest(t, func(o *Options) {
		o.Now = func() time.Time { return time.Unix(now.Load(), 0) }
		o.SweepInterval = 5 * time.Millisecond
	})
	b := newBucketT(t, db, "b")
	mustStore(t, b, ModeSet, "k", "v", 0, t0+60)
	mustStore(t, b, ModeSet, "keep", "v", 0, 0)
	time.Sleep(30 * time.Millisecond) // several sweeps at t0: nothing expires
	if n := b.ItemCount(); n != 2 {
		t.Fatalf("ItemCount before expiry = %d, want 2", n)
	}
	now.Store(t0 + 60)
	deadline := time.Now().Add(5 * time.Second)
	for b.ItemCount() != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("sweeper did not delete the expired item: ItemCount %d", b.ItemCount())
		}
		time.Sleep(5 * time.Millisecond)
	}
	if n := countKeys(t, db, kindExpiry); n != 0 {
		t.Fatalf("%d expiry index entries left", n)
	}
}

func TestConcurrentIncr(t *testing.T) {
	b := newBucketT(t, openTest(t, nil), "b")
	mustStore(t, b, ModeSet, "n", "0", 0, 0)
	const workers, each = 8, 1000
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for range each {
				if _, _, err := b.Arith([]byte("n"), true, 1, 0, 0, false, 0, t0); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	wantItem(t, b, "n", fmt.Sprint(workers*each), 0, 0, t0)
}

func TestConcurrentAddAndCAS(t *testing.T) {
	b := newBucketT(t, openTest(t, nil), "b")
	const workers = 8
	var wins atomic.Int32
	var wg sync.WaitGroup
	for i := range workers {
		wg.Go(func() {
			_, err := b.Store(ModeAdd, []byte("once"), []byte(fmt.Sprint(i)), 0, 0, 0, t0)
			switch {
			case err == nil:
				wins.Add(1)
			case !errors.Is(err, ErrExists):
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if wins.Load() != 1 {
		t.Fatalf("%d concurrent ADDs succeeded, want 1", wins.Load())
	}

	// Optimistic increments with get + CAS store never lose an update.
	mustStore(t, b, ModeSet, "c", "0", 0, 0)
	for range workers {
		wg.Go(func() {
			for done := 0; done < 200; {
				it, err := b.Get([]byte("c"), t0, nil)
				if err != nil {
					t.Error(err)
					return
				}
				n, _ := parseUint(it.Value)
				_, err = b.Store(ModeSet, []byte("c"), fmt.Append(nil, n+1), 0, 0, it.CAS, t0)
				if err == nil {
					done++
				} else if !errors.Is(err, ErrExists) {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	wantItem(t, b, "c", fmt.Sprint(workers*200), 0, 0, t0)
}

// TestItemCountUnderConcurrency races every mutation and the sweeper on a
// small key set and then checks ItemCount against the records on disk.
func TestItemCountUnderConcurrency(t *testing.T) {
	db := openTest(t, fixedClock)
	b := newBucketT(t, db, "b")
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Go(func() {
		for now := uint32(t0); ; now++ {
			select {
			case <-stop:
				return
			default:
				db.sweep(now)
			}
		}
	})
	for w := range 8 {
		wg.Go(func() { churn(t, b, uint64(w)) })
	}
	time.Sleep(300 * time.Millisecond)
	close(stop)
	wg.Wait()
	if got, disk := b.ItemCount(), int64(countKeys(t, db, kindItem)); got != disk {
		t.Fatalf("ItemCount %d, records on disk %d", got, disk)
	}
	db.sweep(t0 + 1<<20)
	if got, disk := b.ItemCount(), int64(countKeys(t, db, kindItem)); got != disk {
		t.Fatalf("after final sweep: ItemCount %d, records on disk %d", got, disk)
	}
}

// churn runs 2000 random mutations on 16 keys.
func churn(t *testing.T, b *Bucket, seed uint64) {
	r := rand.New(rand.NewPCG(seed, 1))
	for range 2000 {
		key := []byte(fmt.Sprint("k", r.IntN(16)))
		now := uint32(t0 + r.IntN(50))
		exp := uint32(0)
		if r.IntN(2) == 0 {
			exp = uint32(t0 + r.IntN(60))
		}
		var err error
		switch r.IntN(6) {
		case 0, 1:
			_, err = b.Store(StoreMode(r.IntN(5)), key, []byte("1"), 0, exp, 0, now)
		case 2:
			err = b.Delete(key, 0, now)
		case 3:
			_, err = b.Touch(key, exp, now, nil)
		case 4:
			_, _, err = b.Arith(key, true, 1, 0, exp, true, 0, now)
		case 5:
			_, err = b.Get(key, now, nil)
		}
		if err != nil && !errors.Is(err, ErrNotFound) && !errors.Is(err, ErrExists) &&
			!errors.Is(err, ErrNotStored) && !errors.Is(err, ErrNonNumeric) {
			t.Error(err)
			return
		}
	}
}

// TestDeleteBucketUnderLoad deletes a bucket while writers hammer it: no
// write may land after the DeleteRange and leave orphan records.
func TestDeleteBucketUnderLoad(t *testing.T) {
	db := openTest(t, nil)
	b := newBucketT(t, db, "b")
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := 0; ; i++ {
				_, err := b.Store(ModeSet, fmt.Appendf(nil, "k%d-%d", w, i), []byte("v"), 0, t0+5, 0, t0)
				if errors.Is(err, ErrBucketDeleted) {
					return
				}
				if err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	time.Sleep(50 * time.Millisecond)
	if err := db.DeleteBucket("b"); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if n, x := countKeys(t, db, kindItem), countKeys(t, db, kindExpiry); n != 0 || x != 0 {
		t.Fatalf("%d item records and %d index entries survive DeleteBucket", n, x)
	}
}
