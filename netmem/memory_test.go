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
