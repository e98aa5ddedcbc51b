// Package bench is kvd's load generator, the library behind cmd/kvbench. It
// drives a memcached binary-protocol server (kvd, or any memcached) with many
// tenants at once and measures what each tenant gets: operations per second,
// read and write units per second, latency percentiles and how often it was
// throttled, rejected or refused.
//
// # Model
//
// A run is described by Options: a server address and one BucketSpec per
// tenant. A tenant has a name (the bucket it selects), a number of
// connections, a target rate shared by its connections, optional SASL PLAIN
// credentials, a pipeline depth, a get:set mix, a value size and a key space.
// ParseBucketSpec reads the command-line form of a BucketSpec:
//
//	name[:conns[:rate]][,user=U][,password=P][,pipeline=N][,mix=G:S][,value=BYTES][,keys=N]
//
// Run connects every connection first (HELLO, SASL, SELECT_BUCKET), optionally
// writes every key once (Options.Preload), then runs a closed loop on each
// connection for Options.Warmup + Options.Duration: it writes `pipeline`
// requests in one write, reads their replies in order, and starts the next
// batch when the connection's Pacer allows. A Pacer schedules operations on
// absolute times (rate/conns per connection), so a slow batch is made up for
// instead of drifting. Keys are drawn from a per-connection random source
// seeded from Options.Seed, the bucket and the connection index, so the same
// flags produce the same key sequence.
//
// # Measurements
//
// Latency is measured per operation from the write of its batch to the read
// that completed its reply, and kept in a Histogram: log-linear buckets (64 per
// power of two, so a quantile is within 0.8% of the exact order statistic)
// like HdrHistogram, without its dependencies. Only completed operations (OK, or a miss on GET) count as ops
// and have their latency recorded; a throttled operation that is retried
// (non-blocking mode) counts once, with the latency from its first send.
//
// Units come from the server when it reports them (HELLO ReportUnitUsage and
// responses in 0x18 framing with frame infos 1 = RU and 2 = WU); otherwise
// they are computed with the rules of kvd's SPEC section 5 and
// Options.ReadUnitSize / WriteUnitSize. Every Summary says which source it
// used.
//
// A sampler closes a Window every second. The windows of the warmup are
// discarded; the others become the per-second Series (for CSV and PNG
// output) and are merged into per-bucket and total summaries.
//
// # Concurrency and lifetime
//
// Run starts one goroutine per connection and one sampler, and waits for all
// of them before it returns; every connection is closed when it returns.
// Cancelling its context (Ctrl-C in kvbench) stops the run early and still
// returns the figures measured so far. Histogram, Pacer and the other value
// types are not safe for concurrent use; Result is plain data.
//
// # Open loop and the deadline experiment
//
// RunOpenLoop (openloop.go) is the other mode: SETs to one bucket at
// scheduled times (Poisson or fixed-interval arrivals at a total rate, spread
// over many connections), each connection with a sender that never waits for
// replies and a receiver that reads them in order (both have ended when
// RunOpenLoop returns). Latency runs from each
// command's scheduled send time to its reply, so a backlog cannot hide
// (no coordinated omission). 0x86 replies are sorted by their reason: the
// deadline gate's "cannot be met" (Rejected, with its retry_after_us from the
// XERROR JSON or the plain text), "deadline passed" (Expired), and others.
// Sweep (sweep.go) runs seed 004's experiment on top of it: the capacity
// measured closed-loop with 512 connections, then for each offered load
// (0.5× to 2× the capacity) one point with the gate off and one per
// deadline_percentile, each on its own bucket created with its settings; it
// reports offered and completed ops/s, the fraction within the deadline,
// goodput, the fraction rejected and latency ÷ deadline quantiles, as a
// table, CSV and PNG (sweep_output.go).
package bench

import "errors"

// Sentinel errors. Run and ParseBucketSpec wrap them with context; compare
// with errors.Is.
var (
	// ErrBadSpec: a bucket spec or an option is malformed or out of range.
	ErrBadSpec = errors.New("bench: invalid spec")

	// ErrHandshake: the server refused HELLO, SASL_AUTH or SELECT_BUCKET on
	// a connection, or answered it with something unexpected.
	ErrHandshake = errors.New("bench: handshake failed")

	// ErrProtocol: a reply could not be decoded or did not match the request
	// it should answer (opaque, opcode). The connection stops.
	ErrProtocol = errors.New("bench: protocol error")

	// ErrPreload: a SET of the preload phase failed.
	ErrPreload = errors.New("bench: preload failed")
)
