package netmem

import (
	"os"
	"strconv"
	"strings"
)

// The default budget's share of the memory and its clamps.
const (
	budgetShare      = 8
	MinDefaultBudget = 64 << 20
	MaxDefaultBudget = 4 << 30
)

// DefaultBudget is the network memory budget's default: an eighth of the
// memory kvd may use (MemoryLimit), within [MinDefaultBudget,
// MaxDefaultBudget]. The engine's item cache takes a quarter and Pebble's
// caches their own; an eighth leaves room for both on a small machine and
// is more than any well-behaved load holds on a large one (the upper
// clamp), while a node without the figures gets the lower.
func DefaultBudget() int64 {
	return min(max(MemoryLimit()/budgetShare, MinDefaultBudget), MaxDefaultBudget)
}

// MemoryLimit is the memory available to the process in bytes: the smaller
// of the machine's MemTotal and the cgroup v2 memory.max, 0 when neither
// can be read. The node's memory budgets are shares of it.
func MemoryLimit() int64 {
	meminfo, _ := os.ReadFile("/proc/meminfo")
	cgroupMax, _ := os.ReadFile("/sys/fs/cgroup/memory.max")
	return memoryLimitOf(meminfo, cgroupMax)
}

// memoryLimitOf is MemoryLimit of the two files' contents (nil when one
// cannot be read; memory.max says "max" without a limit).
func memoryLimitOf(meminfo, cgroupMax []byte) int64 {
	var total int64
	for _, line := range strings.Split(string(meminfo), "\n") {
		if f := strings.Fields(line); len(f) >= 3 && f[0] == "MemTotal:" && f[2] == "kB" {
			if kb, err := strconv.ParseInt(f[1], 10, 64); err == nil && kb > 0 {
				total = kb << 10
			}
		}
	}
	if lim, err := strconv.ParseInt(strings.TrimSpace(string(cgroupMax)), 10, 64); err == nil && lim > 0 &&
		(total == 0 || lim < total) {
		total = lim
	}
	return total
}
