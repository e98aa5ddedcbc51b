package tenant

import (
	"fmt"
	"testing"
	"time"
)

// TestAddManyMatchesAdd registers the same buckets one by one and at once:
// the node's free pool and every bucket's figures agree.
func TestAddManyMatchesAdd(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	one, many := NewThrottle(10000, now), NewThrottle(10000, now)
	var list []BucketLimits
	for i := range 50 {
		list = append(list, BucketLimits{Name: fmt.Sprintf("b%d", i), Reserved: int64(i * 20), HardLimit: int64(i*40 - 1)})
	}
	var a []*BucketThrottle
	for _, l := range list {
		a = append(a, one.Add(l.Name, l.Reserved, l.HardLimit))
	}
	b := many.AddMany(list)
	if one.Stats() != many.Stats() {
		t.Fatalf("node figures differ: one by one %+v, at once %+v", one.Stats(), many.Stats())
	}
	for i := range a {
		if a[i].Stats() != b[i].Stats() {
			t.Fatalf("bucket %d differs: one by one %+v, at once %+v", i, a[i].Stats(), b[i].Stats())
		}
	}
}

// TestAddRemoveIncremental adds and removes buckets one at a time, some
// with demand on the free pool: after each step the node's figures are
// those a full recomputation of the shares gives.
func TestAddRemoveIncremental(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	th := NewThrottle(30000, now) // contended at times: both paths of settleLocked
	var live []*BucketThrottle
	for i := range 400 {
		switch {
		case i%7 == 3 && len(live) > 0:
			th.Remove(live[i%len(live)])
			live = append(live[:i%len(live)], live[i%len(live)+1:]...)
		default:
			live = append(live, th.Add(fmt.Sprintf("b%d", i), int64(i%5*100), int64(i%3*2000-1)))
		}
		if i%50 == 49 { // some buckets use units: demands for the next second
			for j, b := range live {
				if j%4 == 0 {
					th.Charge(b, int64(j*10), 0)
				}
			}
			now = now.Add(time.Second)
			th.Tick(now)
		}
		got := th.Stats()
		type figures struct{ share, effective int64 }
		each := make([]figures, len(th.buckets))
		for k, b := range th.buckets {
			each[k] = figures{b.share.Load(), b.effective.Load()}
		}
		th.mu.Lock()
		th.refreshLocked()
		th.mu.Unlock()
		if want := th.Stats(); got.FreePool != want.FreePool || got.Spare != want.Spare {
			t.Fatalf("step %d: incremental free pool %d spare %d, recomputed %d and %d", i, got.FreePool, got.Spare, want.FreePool, want.Spare)
		}
		// And every bucket's reservation in force and share of the pool: a
		// share within a unit (each recomputation hands the division's
		// remainder to buckets from a rotating start), the shares' sum the same.
		var sumGot, sumWant int64
		for k, b := range th.buckets {
			want := figures{b.share.Load(), b.effective.Load()}
			if each[k].effective != want.effective || each[k].share < want.share-1 || each[k].share > want.share+1 {
				t.Fatalf("step %d: bucket %s incremental share %d effective %d, recomputed %d and %d",
					i, b.name, each[k].share, each[k].effective, want.share, want.effective)
			}
			sumGot, sumWant = sumGot+each[k].share, sumWant+want.share
		}
		if sumGot != sumWant {
			t.Fatalf("step %d: incremental shares sum to %d, recomputed to %d", i, sumGot, sumWant)
		}
		for k, b := range th.buckets {
			if b.index != k {
				t.Fatalf("step %d: bucket %s at %d has index %d", i, b.name, k, b.index)
			}
		}
	}
	if len(th.buckets) != len(live) {
		t.Fatalf("%d buckets registered, want %d", len(th.buckets), len(live))
	}
}
