// Package catalog owns the node's buckets and their durable settings: the
// registry of buckets the server serves, loading them from the engine at
// start, creating and deleting them, the persisted node throttle settings
// (capacity and the defaults of new buckets), and the reconciliation of the
// config file with run-time changes ("newer wins").
//
// A Bucket is one tenant as the rest of kvd sees it: its keyspace (an
// engine.Bucket), its settings, its throttle gauge (a tenant.BucketThrottle),
// its command counters and the set of connections parked until its next
// throttle tick. The catalog never touches a connection: parked connections
// are Wakers, woken by WakeParked.
//
// # Invariants
//
//   - A bucket is in the registry if and only if the engine has it. Create
//     persists before it registers; Delete unregisters (and marks the bucket
//     deleted, so that connections holding it see that on their next
//     command) before it removes the data.
//   - Every settings change is persisted before it applies, and is logged
//     once, naming who made it.
//   - The config file wins only where it changed: ApplyFile compares the
//     file with what was applied from it last time (persisted in the engine
//     under "config_applied"), so an edit made while kvd was stopped wins
//     over an older run-time change, and a run-time change wins over a file
//     value that did not change since.
//
// # Concurrency
//
// Catalog and Bucket are safe for concurrent use. Get, All, Names and the
// Bucket accessors take at most a short read lock that is never held across
// I/O, so event loops may call them. Create, Delete, SetBucketSettings,
// SetNode and ApplyFile do engine I/O: call them off the loops. Mutations are
// serialized by one mutex (Catalog.mu), so a reload and a run-time change
// never interleave.
package catalog
