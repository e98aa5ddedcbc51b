package ingress

import (
	"testing"
	"time"
)

// TestInputClock: a command's arrival is the read that brought its first
// byte; bytes that arrive while older ones wait keep their own time; marks
// of consumed bytes go; with more reads than marks pending, the newest mark
// stretches (earlier, never later); a byte never seen is "now".
func TestInputClock(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	var ic InputClock
	// Pass 1 at 0 ms: 30 bytes (frames of 10) read; one consumed.
	ic.Arrived(30, ms(0))
	if got := ic.At(30, ms(0)); !got.Equal(ms(0)) {
		t.Fatalf("first frame: %v", got.Sub(t0))
	}
	ic.Passed(20)
	// Pass 2 at 5 ms: 20 more bytes; 40 buffered. The first 20 are from 0 ms.
	ic.Arrived(40, ms(5))
	for _, tc := range []struct {
		buffered int
		want     time.Time
	}{{40, ms(0)}, {30, ms(0)}, {20, ms(5)}, {10, ms(5)}} {
		if got := ic.At(tc.buffered, ms(9)); !got.Equal(tc.want) {
			t.Fatalf("with %d buffered: arrival %v, want %v", tc.buffered, got.Sub(t0), tc.want.Sub(t0))
		}
	}
	if ic.n != 1 {
		t.Fatalf("%d marks left, want the 5 ms one", ic.n)
	}
	ic.Passed(10)
	// A wake with nothing new adds no mark.
	ic.Arrived(10, ms(7))
	if ic.n != 1 {
		t.Fatalf("a pass without new input added a mark: %d", ic.n)
	}
	ic.Passed(10)
	// More reads than marks while nothing is consumed: the newest mark stretches.
	buffered := 10
	for i := range inputMarks + 3 {
		buffered += 10
		ic.Arrived(buffered, ms(10+i))
		ic.Passed(buffered)
	}
	if got := ic.At(10, ms(99)); !got.Equal(ms(10 + inputMarks - 2)) {
		t.Fatalf("last bytes after the marks ran out: %v, want the newest mark's %v", got.Sub(t0), inputMarks+8)
	}
	// Everything consumed; bytes the clock never saw are now.
	if got := ic.At(0, ms(99)); !got.Equal(ms(99)) {
		t.Fatalf("nothing buffered: %v", got.Sub(t0))
	}
}
