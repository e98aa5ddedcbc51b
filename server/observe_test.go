package server

import (
	"testing"

	mc "kvd/protocol/binary"
)

// TestStatRefusals: the STAT groups package observe refuses reach the
// client with the statuses and reasons they always had.
func TestStatRefusals(t *testing.T) {
	s := newLoopServer(t, newClock(), nil)
	seeAll := func(string) bool { return true }
	for _, c := range []struct {
		what   string
		st     mc.Status
		reason string
	}{
		{"no access", mc.StatusAccessDenied, "no access to bucket b"},
		{"no bucket", mc.StatusKeyNotFound, "no such bucket: nope"},
		{"cluster", mc.StatusKeyNotFound, "not in a cluster: kvd was started without --cluster"},
	} {
		var st mc.Status
		var reason string
		switch c.what {
		case "no access":
			_, _, st, reason = s.bucketDetails("b", func(string) bool { return false })
		case "no bucket":
			_, _, st, reason = s.bucketDetails("nope", seeAll)
		case "cluster":
			_, st, reason = s.clusterStats(seeAll)
		}
		if st != c.st || reason != c.reason {
			t.Errorf("%s: %v %q, want %v %q", c.what, st, reason, c.st, c.reason)
		}
	}
	if name, doc, st, _ := s.bucketDetails("b", seeAll); st != mc.StatusOK || name != "b" || len(doc) == 0 {
		t.Errorf("bucket_details b: %v %q %s", st, name, doc)
	}
}
