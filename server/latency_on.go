//go:build !kvd_nolatency

package server

// recordLatency is true in every build but the A/B measurement one: building
// with -tags kvd_nolatency compiles the latency recorder out, so that
// bench/compare.sh can measure what it costs (docs/performance.md).
const recordLatency = true
