package server

import (
	"testing"

	"kvd/command"
	mc "kvd/protocol/binary"
)

// TestStatRefusals: the STAT groups package observe refuses reach the
// client with the statuses and reasons they always had.
func TestStatRefusals(t *testing.T) {
	s := newLoopServer(t, newClock(), nil)
	seeAll := func(string) bool { return true }
	stat := func(group, arg string, canSee func(string) bool) (mc.Status, string, int) {
		n := 0
		emit := func(string, []byte) { n++ }
		if err := s.view.Stats(group, arg, nil, canSee, emit, emit); err != nil {
			st, reason := command.StatusOf(err)
			return st, reason, n
		}
		return mc.StatusOK, "", n
	}
	for _, c := range []struct {
		group, arg string
		canSee     func(string) bool
		st         mc.Status
		reason     string
	}{
		{"bucket_details", "b", func(string) bool { return false }, mc.StatusAccessDenied, "no access to bucket b"},
		{"bucket_details", "nope", seeAll, mc.StatusKeyNotFound, "no such bucket: nope"},
		{"cluster", "", seeAll, mc.StatusKeyNotFound, "not in a cluster: kvd was started without --cluster"},
		{"bogus", "", seeAll, mc.StatusKeyNotFound, `unknown stat group "bogus"`},
	} {
		if st, reason, _ := stat(c.group, c.arg, c.canSee); st != c.st || reason != c.reason {
			t.Errorf("%s %s: %v %q, want %v %q", c.group, c.arg, st, reason, c.st, c.reason)
		}
	}
	if st, _, n := stat("bucket_details", "b", seeAll); st != mc.StatusOK || n != 1 {
		t.Errorf("bucket_details b: %v, %d documents", st, n)
	}
}
