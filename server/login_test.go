package server

import (
	"testing"
	"time"
)

func TestLoginDelay(t *testing.T) {
	for _, c := range []struct {
		fails int
		want  time.Duration
	}{{0, 0}, {1, loginDelayBase}, {2, 2 * loginDelayBase}, {4, 8 * loginDelayBase}, {8, loginDelayMax}, {1000, loginDelayMax}} {
		if got := loginDelay(c.fails); got != c.want {
			t.Errorf("loginDelay(%d) = %v, want %v", c.fails, got, c.want)
		}
	}
}
