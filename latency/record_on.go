//go:build !kvd_nolatency

package latency

// recording is true in every build but the A/B measurement one: building
// with -tags kvd_nolatency compiles the latency recorder out, so that
// bench/compare.sh can measure what it costs (docs/performance.md).
const recording = true
