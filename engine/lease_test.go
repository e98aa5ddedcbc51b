package engine

import "testing"

// TestLease: the meta protocol's win tokens and stale items, as memcached
// 1.6's mg N/R, md I and ms I have them.
func TestLease(t *testing.T) {
	db := openTest(t, nil)
	b := newBucketT(t, db, "b")
	k := []byte("k")
	lease := func(a LeaseArgs) (Item, bool, bool) {
		t.Helper()
		it, won, created, err := b.Lease(k, a, t0, nil)
		if err != nil {
			t.Fatalf("Lease(%+v): %v", a, err)
		}
		return it, won, created
	}

	// N: a miss creates an empty item and wins; the next one sees Z.
	_, _, _, err := b.Lease(k, LeaseArgs{}, t0, nil)
	wantErr(t, "Lease without N on a miss", err, ErrNotFound)
	viv := LeaseArgs{Vivify: true, VivifyExpiry: t0 + 30}
	it, won, created := lease(viv)
	if !won || !created || it.TokenSent || it.Stale || len(it.Value) != 0 || it.Expiry != t0+30 || it.CAS == 0 {
		t.Fatalf("vivify: %+v won %v created %v", it, won, created)
	}
	it, won, created = lease(viv)
	if won || created || !it.TokenSent {
		t.Fatalf("second vivify: %+v won %v created %v; want the token reported sent", it, won, created)
	}
	if got := wantItem(t, b, "k", "", 0, t0+30, t0); !got.TokenSent || got.Stale {
		t.Fatalf("Get after vivify: %+v", got)
	}

	// A plain store replaces the item and its states.
	cas := mustStore(t, b, ModeSet, "k", "v1", 3, t0+100)
	if got := wantItem(t, b, "k", "v1", 3, t0+100, t0); got.TokenSent || got.Stale {
		t.Fatalf("after a set: %+v", got)
	}

	// R: an item with less TTL left than R wins once.
	if _, won, _ := lease(LeaseArgs{RecacheBefore: t0 + 50}); won {
		t.Fatal("R50 won with 100 s left")
	}
	if it, won, _ := lease(LeaseArgs{RecacheBefore: t0 + 200}); !won || it.TokenSent || string(it.Value) != "v1" || it.CAS != cas {
		t.Fatalf("R200: %+v won %v; want a win, the value and the CAS unchanged", it, won)
	}
	if it, won, _ := lease(LeaseArgs{RecacheBefore: t0 + 200}); won || !it.TokenSent {
		t.Fatalf("second R200: %+v won %v", it, won)
	}

	// md I: stale, a new CAS, the token withdrawn; the next get wins.
	_, err = b.Invalidate(k, cas+1000, false, 0, t0)
	wantErr(t, "Invalidate with another CAS", err, ErrExists)
	icas, err := b.Invalidate(k, 0, true, t0+60, t0)
	if err != nil || icas <= cas {
		t.Fatalf("Invalidate: cas %d err %v", icas, err)
	}
	if it, won, _ := lease(LeaseArgs{}); !won || !it.Stale || it.TokenSent || it.CAS != icas || it.Expiry != t0+60 || string(it.Value) != "v1" {
		t.Fatalf("get after invalidate: %+v won %v", it, won)
	}
	if it, won, _ := lease(LeaseArgs{}); won || !it.Stale || !it.TokenSent {
		t.Fatalf("second get after invalidate: %+v won %v", it, won)
	}
	_, err = b.Invalidate([]byte("absent"), 0, false, 0, t0)
	wantErr(t, "Invalidate of a missing item", err, ErrNotFound)

	// ms I: a CAS below the item's stores a stale value with the old TTL
	// and token; a higher one is refused; the matching one stores plainly.
	_, err = b.Store(ModeInvalidate, k, []byte("late"), 0, 0, icas+1, t0)
	wantErr(t, "ms I with a higher CAS", err, ErrExists)
	if _, err := b.Store(ModeInvalidate, k, []byte("late"), 9, 0, icas-1, t0); err != nil {
		t.Fatalf("ms I with a lower CAS: %v", err)
	}
	if got := wantItem(t, b, "k", "late", 9, t0+60, t0); !got.Stale || !got.TokenSent {
		t.Fatalf("after a stale store: %+v", got)
	}
	scas, err := b.Store(ModeInvalidate, k, []byte("fresh"), 0, 0, 0, t0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = b.Store(ModeInvalidate, []byte("absent"), []byte("x"), 0, 0, 5, t0)
	wantErr(t, "ms I of a missing item", err, ErrNotFound)
	if _, err := b.Store(ModeInvalidate, k, []byte("new"), 0, 0, scas, t0); err != nil {
		t.Fatal(err)
	}
	if got := wantItem(t, b, "k", "new", 0, 0, t0); got.Stale || got.TokenSent {
		t.Fatalf("after a matching ms I: %+v", got)
	}

	// Touch (and T on a lease) keep the states; a touch alone wins nothing.
	if _, err := b.Invalidate(k, 0, false, 0, t0); err != nil {
		t.Fatal(err)
	}
	if it, err := b.Touch(k, t0+500, t0, nil); err != nil || !it.Stale {
		t.Fatalf("Touch of a stale item: %+v %v", it, err)
	}
	if it, won, _ := lease(LeaseArgs{Touch: true, NewExpiry: t0 + 700}); !won || !it.Stale || it.Expiry != t0+700 {
		t.Fatalf("lease with T: %+v won %v", it, won)
	}
	wantItem(t, b, "k", "new", 0, t0+700, t0)

	// The states survive a restart.
	dir := db.opts.Dir
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db = openTest(t, func(o *Options) { o.Dir = dir })
	b, err = db.Bucket("b")
	if err != nil {
		t.Fatal(err)
	}
	got := wantItem(t, b, "k", "new", 0, t0+700, t0)
	if !got.Stale || !got.TokenSent || got.CAS >= 1<<stateShift {
		t.Fatalf("after reopen: %+v", got)
	}
	if c := mustStore(t, b, ModeSet, "k2", "v", 0, 0); c <= got.CAS {
		t.Fatalf("CAS after reopen %d not above %d", c, got.CAS)
	}
	if it, ok := b.Peek(k, t0, nil); ok && (!it.Stale || !it.TokenSent) {
		t.Fatalf("Peek after reopen: %+v", it)
	}
}
