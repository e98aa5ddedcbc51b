package server

import (
	"time"

	"kvd/engine"
	"kvd/netmem"
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
// quarter of the memory kvd may use (engine.ItemCacheSizeFor of
// netmem.MemoryLimit).
func DefaultItemCacheSize() int64 { return engine.ItemCacheSizeFor(netmem.MemoryLimit()) }

// DefaultMaxBufferBytes is the network memory budget's default: an eighth
// of the memory kvd may use (netmem.DefaultBudget).
func DefaultMaxBufferBytes() int64 { return netmem.DefaultBudget() }
