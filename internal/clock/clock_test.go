package clock

import (
	"strings"
	"testing"
	"time"
)

// TestNowIsTimeNow: Now lies between two time.Now readings taken around it,
// by the monotonic clock and by the wall clock to within a millisecond, also
// across a rebase.
func TestNowIsTimeNow(t *testing.T) {
	check := func() {
		t.Helper()
		before := time.Now()
		now := Now()
		after := time.Now()
		if now.Before(before) || now.After(after) {
			t.Fatalf("Now %v outside [%v, %v] by the monotonic clock", now, before, after)
		}
		if w := now.Round(0); w.Before(before.Round(0).Add(-time.Millisecond)) || w.After(after.Round(0).Add(time.Millisecond)) {
			t.Fatalf("Now's wall clock %v more than 1 ms outside [%v, %v]", w, before.Round(0), after.Round(0))
		}
	}
	first := *base.Load()
	for range 1000 {
		check()
	}
	time.Sleep(rebase + 10*time.Millisecond)
	check()
	if b := *base.Load(); !b.After(first) {
		t.Errorf("base %v not retaken after %v (first %v)", b, rebase, first)
	}
	check()
}

func BenchmarkNow(b *testing.B) {
	for b.Loop() {
		_ = Now()
	}
}

func BenchmarkTimeNow(b *testing.B) {
	for b.Loop() {
		_ = time.Now()
	}
}

func TestWholeSecond(t *testing.T) {
	now := time.Now()
	w := WholeSecond(now)
	if w.Nanosecond() != 0 || now.Sub(w) < 0 || now.Sub(w) >= time.Second || w.Unix() != now.Unix() {
		t.Fatalf("WholeSecond(%v) = %v", now, w)
	}
	if !strings.Contains(w.String(), "m=") { // the monotonic reading, kept
		t.Fatalf("WholeSecond dropped the monotonic reading: %v", w)
	}
}
