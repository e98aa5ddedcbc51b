package netmem

import (
	"runtime"
	"testing"
)

// TestDefaultBudget: the default is within its clamps, and on Linux the
// memory it is a share of can be read.
func TestDefaultBudget(t *testing.T) {
	if runtime.GOOS == "linux" && MemoryLimit() <= 0 {
		t.Fatal("MemoryLimit reads nothing on Linux")
	}
	if b := DefaultBudget(); b < MinDefaultBudget || b > MaxDefaultBudget {
		t.Fatalf("DefaultBudget() = %d, outside [%d, %d]", b, MinDefaultBudget, MaxDefaultBudget)
	}
}

func TestMemoryLimitOf(t *testing.T) {
	const meminfo = "MemTotal:        8052736 kB\nMemFree:  1 kB\n"
	for _, c := range []struct {
		meminfo, cgroup string
		want            int64
	}{
		{meminfo, "", 8052736 << 10},
		{"MemFree:  1 kB\nMemTotal: 4096 kB\n", "", 4096 << 10},
		{meminfo, "max\n", 8052736 << 10},                // a cgroup without a limit
		{meminfo, "1073741824\n", 1 << 30},               // a container's limit below the machine's
		{"MemTotal: 4096 kB\n", "1073741824\n", 4 << 20}, // the machine's below the cgroup's
		{"", "1073741824\n", 1 << 30},
		{"MemFree:  1 kB\n", "", 0},
		{"MemTotal: x kB\n", "garbage", 0},
		{"", "", 0},
	} {
		if got := memoryLimitOf([]byte(c.meminfo), []byte(c.cgroup)); got != c.want {
			t.Errorf("memoryLimitOf(%q, %q) = %d, want %d", c.meminfo, c.cgroup, got, c.want)
		}
	}
}
