package main

import "testing"

func TestInflightBytes(t *testing.T) {
	zero, four := int64(0), int64(4<<20)
	if got := inflightBytes(nil, 123); got != 123 {
		t.Errorf("absent: %d, want the default 123", got)
	}
	if got := inflightBytes(&zero, 123); got != 0 {
		t.Errorf("0: %d, want 0 (off)", got)
	}
	if got := inflightBytes(&four, 123); got != four {
		t.Errorf("4 MiB: %d", got)
	}
}
