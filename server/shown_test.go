package server

import (
	"fmt"
	"testing"
	"time"

	"kvd/catalog"
	"kvd/tenant"
)

// TestShownBuckets: up to the limit every bucket is shown; past it the
// active ones, the most active first, at most the limit; a bucket idle for
// longer than activeWindow drops off, one with a connection stays.
func TestShownBuckets(t *testing.T) {
	clk := newClock()
	s := newLoopServer(t, clk, func(o *Options) {
		for i := range 30 {
			o.Buckets = append(o.Buckets, BucketSpec{Name: fmt.Sprintf("x%02d", i), Settings: o.DefaultSettings})
		}
	})
	all := s.cat.All()
	if got := s.shownBuckets(all, 100); len(got) != 31 {
		t.Fatalf("limit 100: %d shown, want all 31", len(got))
	}
	if got := s.shownBuckets(all, 5); len(got) != 0 {
		t.Fatalf("limit 5, all idle: %d shown, want 0", len(got))
	}
	get := func(name string) *catalog.Bucket { b, _ := s.cat.Get(name); return b }
	for i := range 8 { // x00 uses 10 units, x01 20, …, x07 80
		s.throttle.Charge(get(fmt.Sprintf("x%02d", i)).Throttle(), int64(10*(i+1)), 0)
	}
	get("x20").Throttle().Attach() // a connection, no units
	clk.advance(time.Second)
	s.throttle.Tick(clk.now())
	got := names(s.shownBuckets(all, 5))
	if want := "x07 x06 x05 x04 x03"; got != want {
		t.Fatalf("limit 5: shown %q, want %q", got, want)
	}
	if got := len(s.shownBuckets(all, 20)); got != 9 {
		t.Fatalf("limit 20: %d shown, want the 9 active", got)
	}
	for range activeWindow + 1 {
		clk.advance(time.Second)
		s.throttle.Tick(clk.now())
	}
	if got := names(s.shownBuckets(all, 20)); got != "x20" {
		t.Fatalf("after %d idle seconds: shown %q, want only x20 (connected)", activeWindow+1, got)
	}
}

func names(bs []*catalog.Bucket) string {
	out := ""
	for i, b := range bs {
		if i > 0 {
			out += " "
		}
		out += b.Name()
	}
	return out
}

// TestNodeTotalsKeepDeleted: a deleted bucket's figures stay in the node
// totals, which therefore never go backwards.
func TestNodeTotalsKeepDeleted(t *testing.T) {
	s := newLoopServer(t, newClock(), nil)
	b, err := s.cat.Create("gone", tenant.Settings{Reserved: tenant.Unlimited, HardLimit: tenant.Unlimited}, "test")
	if err != nil {
		t.Fatal(err)
	}
	for range 7 {
		b.Throttle().CountCommand()
	}
	stateOf(b).latency().command(0, classRead, time.Millisecond, 0, 0)
	totals := func() *nodeTotals {
		n := new(nodeTotals)
		for _, b := range s.cat.All() {
			n.add(b)
		}
		s.retired.addTo(n)
		return n
	}
	before := totals()
	if err := s.cat.Delete("gone", "test"); err != nil {
		t.Fatal(err)
	}
	after := totals()
	_, countAfter, _ := after.lat[classRead].snapshot()
	if after.commands != before.commands || before.commands < 7 || countAfter != 1 {
		t.Fatalf("commands %d → %d after the delete (want ≥ 7, unchanged), read latency count %d (want 1)",
			before.commands, after.commands, countAfter)
	}
}
