package main

import "testing"

func TestMemTotal(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int64
	}{
		{"MemTotal:        8052736 kB\nMemFree:  1 kB\n", 8052736 * 1024},
		{"MemFree:  1 kB\nMemTotal: 4096 kB\n", 4096 * 1024},
		{"MemFree:  1 kB\n", 0},
		{"MemTotal: x kB\n", 0},
		{"", 0},
	} {
		if got := memTotal([]byte(c.in)); got != c.want {
			t.Errorf("memTotal(%q) = %d, want %d", c.in, got, c.want)
		}
	}
}

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
	if defaultInflightBytes() <= 0 {
		t.Errorf("defaultInflightBytes() = %d on Linux, want a quarter of MemTotal", defaultInflightBytes())
	}
}
