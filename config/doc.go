// Package config reads kvd's config file, config/serverless.json: the
// node's throttle, connection, size and ingress settings, the buckets to
// create at start-up and the users. It owns the file's format and its
// defaults and nothing else: it does not build users, open buckets or watch
// the file. The daemon turns a *File into tenant users and settings, and
// re-reads the file when it changes.
//
// The format is strict JSON. Every field is optional. Each default is a
// named constant of the package that applies it: Default fills in
// tenant's, ingress's and probe's, and leaves the server's fields (pointers)
// nil, for the server's Options.EnsureDefaults to apply (the daemon checks
// the frame headroom on the effective sizes, CheckFrameHeadroom). A key the
// format does not define is an error naming the key by its full path (`config: unknown field "ingress.probe.foo"`),
// and so is a value of the wrong type (`config: wrong type for field
// "buckets[1].hard_limit": got number -5, want a non-negative integer or
// "unlimited"`). Limits are a number or the string "unlimited" (Limit).
// The shipped file is compiled in as Embedded, for a daemon started
// without one on disk.
//
// Invariants: Parse and Load return a *File only if it passed Validate,
// so the sizes it sets are positive, reserved ≤ hard limit everywhere
// (taking the node defaults into account), bucket and user names are unique and
// anonymous_bucket names a bucket of the file. Privilege names and password
// hashes are left to package tenant.
//
// Concurrency: Parse, Load, Default and Validate are safe to call
// concurrently. A *File is plain data: share it read-only, or copy it.
// Embedded must not be modified.
//
// It imports tenant (for Limit and the node throttle defaults), ingress
// and probe (for their defaults) and the standard library; only cmd/*
// imports it.
package config
