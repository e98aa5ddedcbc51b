// Package tenant owns who may do what, and how each bucket is to be
// throttled and queued. It does not speak the wire protocol and does not
// store data: it returns Go errors, and the server maps them to statuses.
//
// What it owns:
//
//   - Privileges: the bit set [Privilege] and the names a config file uses
//     for its bits ("BucketThrottleManagement", "Unthrottled", "Stats").
//   - Users: a [User] (name, privileges, the buckets it may select, a
//     password verifier) and [Users], the configured set that the server
//     authenticates SASL PLAIN against. Password hashes are PHC strings:
//     argon2id as the reference argon2 CLI prints it, or bcrypt
//     ($2a$/$2b$/$2y$). [HashPassword] makes the argon2id form. A plain
//     password is accepted for development; [User.UsesPlainPassword]
//     tells the daemon to warn about it.
//   - Login pacing: [LoginGate] verifies login attempts on a small pool of
//     its own, one at a time per remote address, the next attempt after a
//     failure waiting a delay that doubles from 50 ms to 5 s (forgotten
//     after a minute without failures). The caller hands it a job (verify)
//     and a callback (done); the server's job calls [Users.Authenticate].
//   - Bucket settings: [Settings] (reserved and hard-limit units per
//     second, per-bucket queue and deadline limits), their validation, and
//     their JSON form, used for CREATE_BUCKET values and for persisting
//     settings across restarts. [ValidBucketName] is the naming rule.
//   - Limits: [Limit], the one codec of `a non-negative integer or
//     "unlimited"` ([Unlimited]) for JSON, with [ParseLimit] and
//     [FormatLimit] for text; the config file, settings and kvctl use it.
//   - The throttle commands' documents: [ParseBucketThrottle] reads a
//     SetBucketThrottleProperties (0x2a) value's limits,
//     [ParseBucketSettings] the whole extended value (limits and the SPEC
//     section 7 queue and deadline fields) over a bucket's settings, and [ParseNodeThrottle] a
//     SetNodeThrottleProperties (0x2c) value into [NodeSettings], with
//     gjson, at most [MaxThrottleDocLen] bytes; their errors match
//     [ErrInvalidSettings] and their text is the reason for the client.
//   - The node throttle defaults: [DefaultCapacity], [DefaultReserved],
//     [DefaultHardLimit], [DefaultReadUnitSize], [DefaultWriteUnitSize].
//   - The live throttle: [Throttle] (the node's capacity, free pool and
//     one-second tick) and a [BucketThrottle] per bucket (its gauge, slow
//     start, counters), deciding seed 003's four steps in [Throttle.Check].
//     Time is an argument; the server passes it.
//
// Invariants:
//
//   - A *User never changes after [NewUser] returns; [Users.Replace] swaps
//     whole sets, so a connection holding a *User keeps a consistent view.
//   - Unknown user and wrong password are indistinguishable to the caller:
//     [Users.Authenticate] returns [ErrAuthFailed] for both and spends the
//     same argon2id work on both (except against plain-password users,
//     which are for development only).
//   - A [Settings] that passed [Settings.Validate] has reserved ≤ hard
//     limit (an unlimited reservation requires an unlimited hard limit) and
//     no negative field.
//
// Concurrency: [User] and [Users] are safe for concurrent use. Verifying an
// argon2id password costs tens of milliseconds and m KiB of memory (64 MiB
// at the default parameters), so callers must never call
// [User.CheckPassword] or [Users.Authenticate] on an event loop. At most
// min(GOMAXPROCS, 8) hash verifications (argon2id or bcrypt) run at once
// in the process; further callers wait for a slot, which bounds the memory
// a burst of logins can take.
// [LoginGate] is safe for concurrent use; it runs the jobs on goroutines
// of its own and reads the clock given in [LoginOptions] only when an
// attempt ends or a wait is scheduled. [Settings] is a plain value.
package tenant

import "errors"

// Errors returned by this package. Functions wrap them with context (the
// user, field or reason); compare with errors.Is.
var (
	// ErrAuthFailed: unknown user or wrong password (deliberately the same).
	ErrAuthFailed = errors.New("tenant: authentication failed")
	// ErrInvalidUser: a user definition is malformed (name, password
	// fields, bucket list).
	ErrInvalidUser = errors.New("tenant: invalid user")
	// ErrInvalidHash: a password_hash is not a supported, well-formed PHC
	// string.
	ErrInvalidHash = errors.New("tenant: invalid password hash")
	// ErrUnknownPrivilege: a privilege name is not one of the known ones.
	ErrUnknownPrivilege = errors.New("tenant: unknown privilege")
	// ErrDuplicateUser: two users share a name.
	ErrDuplicateUser = errors.New("tenant: duplicate user")
	// ErrInvalidSettings: bucket settings are malformed or inconsistent
	// (for example reserved > hard_limit).
	ErrInvalidSettings = errors.New("tenant: invalid settings")
	// ErrInvalidBucketName: a bucket name breaks the naming rule.
	ErrInvalidBucketName = errors.New("tenant: invalid bucket name")
	// ErrNotPrivileged: the user has none of the privileges a connection
	// requires (a connection in the system band).
	ErrNotPrivileged = errors.New("tenant: not privileged")
)
