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
