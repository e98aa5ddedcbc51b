package lograte

import (
	"testing"
	"time"
)

func TestLimiter(t *testing.T) {
	var l Limiter
	t0 := time.Unix(1000, 0)
	if ok, n := l.Allow(t0); !ok || n != 0 {
		t.Fatalf("first line: %v, %d; want allowed, 0 left out", ok, n)
	}
	for i := range 5 {
		if ok, _ := l.Allow(t0.Add(time.Duration(i) * 100 * time.Millisecond)); ok {
			t.Fatalf("line %d within the second allowed", i)
		}
	}
	if ok, n := l.Allow(t0.Add(time.Second)); !ok || n != 5 {
		t.Fatalf("a second later: %v, %d; want allowed, 5 left out", ok, n)
	}
	if ok, n := l.Allow(t0.Add(3 * time.Second)); !ok || n != 0 {
		t.Fatalf("after a quiet second: %v, %d; want allowed, 0 left out", ok, n)
	}
}
