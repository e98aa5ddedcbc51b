package bench

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// Counts are the event counters of one bucket (or all) over an interval.
type Counts struct {
	Ops       int64 // completed operations: OK, or a miss on GET
	Misses    int64 // GETs answered 0x01 Key not found (included in Ops)
	RU, WU    int64 // units, reported by the server or computed
	Throttled int64 // replies the throttle held (a throttle-duration frame info) or refused (0x0c; every retry counts)
	Rejected  int64 // 0x86 Temporary failure replies
	Busy      int64 // 0x85 Busy replies
	Errors    int64 // other statuses, and connections lost mid-run

	ServerUnitOps   int64 // completed ops whose units the server reported
	ComputedUnitOps int64 // completed ops whose units were computed

	ThrottleWait time.Duration // sum of the server's throttle-duration frame infos
}

func (c *Counts) add(o *Counts) {
	c.Ops += o.Ops
	c.Misses += o.Misses
	c.RU += o.RU
	c.WU += o.WU
	c.Throttled += o.Throttled
	c.Rejected += o.Rejected
	c.Busy += o.Busy
	c.Errors += o.Errors
	c.ServerUnitOps += o.ServerUnitOps
	c.ComputedUnitOps += o.ComputedUnitOps
	c.ThrottleWait += o.ThrottleWait
}

// UnitSource says where the units of c come from: "server" (reported in
// frame infos), "computed" (SPEC section 5 from sizes), "mixed" or "none".
func (c *Counts) UnitSource() string {
	switch {
	case c.ServerUnitOps > 0 && c.ComputedUnitOps > 0:
		return "mixed"
	case c.ServerUnitOps > 0:
		return "server"
	case c.ComputedUnitOps > 0:
		return "computed"
	}
	return "none"
}

// Window is what a bucket did over one interval: counts and the latency
// histogram of its completed operations.
type Window struct {
	Counts
	Latency Histogram
}

func (w *Window) merge(o *Window) {
	w.Counts.add(&o.Counts)
	w.Latency.Merge(&o.Latency)
}

func (w *Window) reset() {
	w.Counts = Counts{}
	w.Latency.Reset()
}

// SeriesPoint is one bucket's figures for one second of the measurement.
type SeriesPoint struct {
	Second   int           // 1 for the first second after the warmup
	Bucket   string        // bucket name; TotalName for the sum of all
	Interval time.Duration // 1s, except for a last partial second
	Counts
	P50, P99, P999 time.Duration
}

// TotalName labels the sum over all buckets in series and summaries.
const TotalName = "*"

// OpsPerSec is the point's operation rate.
func (p *SeriesPoint) OpsPerSec() float64 { return perSec(p.Ops, p.Interval) }

// Summary is one bucket's (or the total's) figures over the measurement.
type Summary struct {
	Bucket   string
	Conns    int
	Features string // HELLO features the server granted (first connection)
	Elapsed  time.Duration
	Counts
	Latency Histogram

	// ErrorSamples are the first few error replies and connection failures,
	// with their bodies.
	ErrorSamples []string
}

// Per-second rates over Elapsed.
func (s *Summary) OpsPerSec() float64 { return perSec(s.Ops, s.Elapsed) }
func (s *Summary) RUPerSec() float64  { return perSec(s.RU, s.Elapsed) }
func (s *Summary) WUPerSec() float64  { return perSec(s.WU, s.Elapsed) }

func perSec(n int64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}

// Result is the outcome of Run.
type Result struct {
	Addr          string
	Warmup        time.Duration
	Elapsed       time.Duration // measured time (shorter than planned if interrupted)
	Interrupted   bool          // the context was cancelled before the end
	ReadUnitSize  int
	WriteUnitSize int
	Preloaded     int64         // keys written by the preload phase
	PreloadTime   time.Duration // how long the preload took
	Buckets       []Summary
	Total         Summary
	Series        []SeriesPoint // per bucket and TotalName, second by second
}

// unitsNote describes the unit source for the output.
func (r *Result) unitsNote() string {
	src := r.Total.UnitSource()
	switch src {
	case "computed", "mixed":
		return fmt.Sprintf("%s (read unit %d B, write unit %d B)", src, r.ReadUnitSize, r.WriteUnitSize)
	}
	return src
}

// features lists the HELLO features granted to the first bucket's first
// connection.
func (r *Result) features() string {
	if len(r.Buckets) == 0 || r.Buckets[0].Features == "" {
		return "none (no HELLO, or nothing granted)"
	}
	return r.Buckets[0].Features
}

// WriteTable writes the human-readable report: a header, one line per
// bucket and a total line, then the error samples.
func (r *Result) WriteTable(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "kvbench → %s: %s measured after %s warmup", r.Addr, fmtDur(r.Elapsed), fmtDur(r.Warmup))
	if r.Interrupted {
		b.WriteString(" (interrupted)")
	}
	fmt.Fprintf(&b, "\nunits: %s\nserver features: %s\n", r.unitsNote(), r.features())
	if r.Preloaded > 0 {
		fmt.Fprintf(&b, "preloaded %d keys in %s\n", r.Preloaded, fmtDur(r.PreloadTime))
	}
	tw := tabwriter.NewWriter(&b, 2, 8, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "bucket\tconns\tops/s\tRU/s\tWU/s\tp50\tp99\tp99.9\tmiss%\tthrottled\trejected\tbusy\terrors\t")
	for i := range r.Buckets {
		writeRow(tw, &r.Buckets[i])
	}
	writeRow(tw, &r.Total)
	if err := tw.Flush(); err != nil {
		return err
	}
	for i := range r.Buckets {
		for _, e := range r.Buckets[i].ErrorSamples {
			fmt.Fprintf(&b, "error sample [%s]: %s\n", r.Buckets[i].Bucket, e)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func writeRow(w io.Writer, s *Summary) {
	name := s.Bucket
	if name == TotalName {
		name = "total"
	}
	miss := 0.0
	if s.Ops > 0 {
		miss = 100 * float64(s.Misses) / float64(s.Ops)
	}
	fmt.Fprintf(w, "%s\t%d\t%.0f\t%.0f\t%.0f\t%s\t%s\t%s\t%.1f\t%d\t%d\t%d\t%d\t\n",
		name, s.Conns, s.OpsPerSec(), s.RUPerSec(), s.WUPerSec(),
		fmtDur(s.Latency.Quantile(0.50)), fmtDur(s.Latency.Quantile(0.99)), fmtDur(s.Latency.Quantile(0.999)),
		miss, s.Throttled, s.Rejected, s.Busy, s.Errors)
}

// fmtDur prints a duration with three significant digits: 87µs, 1.25ms, 2.5s.
func fmtDur(d time.Duration) string {
	switch {
	case d == 0:
		return "0s"
	case d < time.Microsecond:
		return fmt.Sprintf("%dns", d.Nanoseconds())
	case d < time.Millisecond:
		return fmt.Sprintf("%.3gµs", float64(d)/float64(time.Microsecond))
	case d < time.Second:
		return fmt.Sprintf("%.3gms", float64(d)/float64(time.Millisecond))
	}
	return fmt.Sprintf("%.3gs", d.Seconds())
}
