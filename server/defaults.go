package server

import (
	"time"

	"kvd/engine"
	"kvd/netmem"
	"kvd/tenant"
)

// Defaults of Options (SPEC sections 3–5), each stated once: EnsureDefaults
// applies them, the daemon's flags show them, and the shipped config file
// and README must agree with them (tests/defaults_test.go checks). The
// Options field of each says what it bounds.
const (
	DefaultListen                  = "127.0.0.1:11211"
	DefaultDataDir                 = "./data"
	DefaultCacheSize               = engine.DefaultCacheSize // Pebble's block cache
	DefaultMaxConnections          = 10000
	DefaultMaxConnectionsPerBucket = 600
	DefaultIdleTimeout             = 60 * time.Second
	DefaultMaxFrameSize            = 20 << 20
	DefaultMaxItemSize             = 1 << 20
	DefaultMaxConnBuffer           = 64 << 20
	DefaultMaxConnOutput           = 4 << 20
	DefaultMaxThrottleWait         = 30 * time.Second
	DefaultWALSync                 = true // every acknowledged mutation is fsynced (DisableWALSync false)
	DefaultMetricsBucketLimit      = 1000
	DefaultTextProtocol            = true // text and meta beside binary (DisableText false)

	// The node throttle defaults are package tenant's.
	DefaultNodeCapacity  = tenant.DefaultCapacity
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
