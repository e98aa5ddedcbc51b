//go:build kvd_nolatency

package latency

// recording is false: this build measures kvd without its latency recorder
// (see record_on.go). Its latency histograms stay empty.
const recording = false
