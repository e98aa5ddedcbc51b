package server

import (
	"os"
	"strconv"
	"strings"
	"time"

	"kvd/engine"
	"kvd/tenant"
)

// Defaults of Options (SPEC sections 3–5), each stated once: EnsureDefaults
// applies them, the daemon's flags show them, and the shipped config file
// and README must agree with them (tests/defaults_test.go checks).
const (
	// DefaultListen is the protocol address.
	DefaultListen = "127.0.0.1:11211"
	// DefaultDataDir is the Pebble directory.
	DefaultDataDir = "./data"
	// DefaultCacheSize is Pebble's block cache in bytes (engine's default).
	DefaultCacheSize = engine.DefaultCacheSize
	// DefaultMaxConnections bounds open connections node-wide.
	DefaultMaxConnections = 10000
	// DefaultMaxConnectionsPerBucket bounds the connections that select one
	// bucket (privileged users exempt).
	DefaultMaxConnectionsPerBucket = 600
	// DefaultIdleTimeout closes a connection that holds an unfinished
	// frame this long.
	DefaultIdleTimeout = 60 * time.Second
	// DefaultMaxFrameSize is the largest frame body accepted (20 MiB).
	DefaultMaxFrameSize = 20 << 20
	// DefaultMaxItemSize is the largest value stored (1 MiB).
	DefaultMaxItemSize = 1 << 20
	// DefaultMaxConnBuffer closes a connection whose unread input or unsent
	// output passes it (64 MiB).
	DefaultMaxConnBuffer = 64 << 20
	// DefaultMaxConnOutput stops executing a connection's commands while
	// its unsent replies pass it (4 MiB).
	DefaultMaxConnOutput = 4 << 20
	// DefaultMaxThrottleWait is the longest a throttled command stays
	// parked before it is answered 0x86.
	DefaultMaxThrottleWait = 30 * time.Second
	// DefaultWALSync: every acknowledged mutation is fsynced (Options
	// states it as DisableWALSync false).
	DefaultWALSync = true
	// DefaultMetricsBucketLimit is how many buckets /metrics and STAT
	// bucket_details show per bucket at most (all of them up to it).
	DefaultMetricsBucketLimit = 1000
	// DefaultTextProtocol: memcached's text and meta protocols are served
	// on the protocol port beside binary (Options states it as DisableText
	// false).
	DefaultTextProtocol = true

	// The node throttle defaults are package tenant's.

	// DefaultNodeCapacity is the node's units per second.
	DefaultNodeCapacity = tenant.DefaultCapacity
	// DefaultReadUnitSize and DefaultWriteUnitSize are the bytes per read
	// and write unit.
	DefaultReadUnitSize  = tenant.DefaultReadUnitSize
	DefaultWriteUnitSize = tenant.DefaultWriteUnitSize
)

// DefaultItemCacheSize is the resident item cache's default budget: a
// quarter of the memory kvd may use (the smaller of the machine's MemTotal
// and the cgroup v2 memory.max), and never less than the engine's 64 MiB
// (also when neither can be read). Pebble's block cache, memtables and the
// connections' buffers share the rest.
func DefaultItemCacheSize() int64 {
	mem := memoryLimit()
	return max(mem/itemCacheShare, engine.DefaultItemCacheSize)
}

// DefaultMaxBufferBytes is the network memory budget's default: an eighth
// of the memory kvd may use (see DefaultItemCacheSize), within
// [MinDefaultBufferBytes, MaxDefaultBufferBytes]. The item cache takes a
// quarter and Pebble's caches their own; an eighth leaves room for both on
// a small machine and is more than any well-behaved load holds on a large
// one (the upper clamp), while a node without the figures gets the lower.
func DefaultMaxBufferBytes() int64 {
	return min(max(memoryLimit()/bufferShare, MinDefaultBufferBytes), MaxDefaultBufferBytes)
}

// The default network budget's share of the memory and its clamps.
const (
	bufferShare           = 8
	MinDefaultBufferBytes = 64 << 20
	MaxDefaultBufferBytes = 4 << 30
)

// itemCacheShare: the item cache takes 1/itemCacheShare of the memory.
const itemCacheShare = 4

// memoryLimit is the memory available to the process in bytes, 0 when
// unknown.
func memoryLimit() int64 {
	var total int64
	if raw, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, line := range strings.Split(string(raw), "\n") {
			if f := strings.Fields(line); len(f) >= 2 && f[0] == "MemTotal:" {
				kb, _ := strconv.ParseInt(f[1], 10, 64)
				total = kb << 10
			}
		}
	}
	if raw, err := os.ReadFile("/sys/fs/cgroup/memory.max"); err == nil {
		if lim, err := strconv.ParseInt(strings.TrimSpace(string(raw)), 10, 64); err == nil && lim > 0 &&
			(total == 0 || lim < total) {
			total = lim
		}
	}
	return total
}
