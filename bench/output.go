package bench

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// CSVHeader is the first line WriteCSV writes. The first ten columns are
// the documented interface; later ones may be added.
var CSVHeader = []string{
	"second", "bucket", "ops", "ru", "wu", "throttled", "rejected", "errors", "p50_us", "p99_us",
	"busy", "misses", "p999_us", "interval_s",
}

// WriteCSV writes the per-second series: one row per bucket and second, and
// one with bucket "*" for the sum of all buckets. Counts are per interval
// (1 s, except a last partial second, whose length is interval_s).
func (r *Result) WriteCSV(w io.Writer) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(CSVHeader); err != nil {
		return err
	}
	for i := range r.Series {
		if err := cw.Write(csvRow(&r.Series[i])); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

func csvRow(p *SeriesPoint) []string {
	i := func(n int64) string { return strconv.FormatInt(n, 10) }
	f := func(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) }
	return []string{
		strconv.Itoa(p.Second), p.Bucket, i(p.Ops), i(p.RU), i(p.WU),
		i(p.Throttled), i(p.Rejected), i(p.Errors), f(micros(p.P50)), f(micros(p.P99)),
		i(p.Busy), i(p.Misses), f(micros(p.P999)), strconv.FormatFloat(p.Interval.Seconds(), 'f', 3, 64),
	}
}

// PNG size.
const (
	plotWidth  = 8 * vg.Inch
	plotHeight = 4.5 * vg.Inch
)

// WritePNG draws every bucket's ops/s over time, one line per bucket (the
// total is left out), and writes it to w as a PNG.
func (r *Result) WritePNG(w io.Writer) error {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("kvbench: ops/s per bucket (%s)", r.Addr)
	p.X.Label.Text = "time after warmup (s)"
	p.Y.Label.Text = "ops/s"
	p.X.Min, p.Y.Min = 0, 0
	p.Legend.Top, p.Legend.Left = true, true
	p.Legend.XOffs, p.Legend.YOffs = vg.Points(8), vg.Points(-4)
	p.Add(plotter.NewGrid())
	top := 1.0
	for i, name := range r.bucketNames() {
		xys := r.opsSeries(name)
		for _, xy := range xys {
			top = max(top, xy.Y)
		}
		line, err := plotter.NewLine(xys)
		if err != nil {
			return fmt.Errorf("bench: plot %s: %w", name, err)
		}
		line.Color = plotutil.Color(i)
		line.Dashes = plotutil.Dashes(i)
		line.Width = vg.Points(1.5)
		p.Add(line)
		p.Legend.Add(name, line)
	}
	p.Y.Max = top * 1.25 // headroom for the legend
	wt, err := p.WriterTo(plotWidth, plotHeight, "png")
	if err != nil {
		return fmt.Errorf("bench: plot: %w", err)
	}
	_, err = wt.WriteTo(w)
	return err
}

// bucketNames lists the buckets of the series in order of appearance.
func (r *Result) bucketNames() []string {
	var names []string
	seen := map[string]bool{TotalName: true}
	for i := range r.Series {
		if n := r.Series[i].Bucket; !seen[n] {
			seen[n] = true
			names = append(names, n)
		}
	}
	return names
}

// opsSeries is one bucket's ops/s, plotted at the end of each interval.
func (r *Result) opsSeries(bucket string) plotter.XYs {
	var xys plotter.XYs
	var t float64
	for i := range r.Series {
		p := &r.Series[i]
		if p.Bucket != bucket {
			continue
		}
		t = float64(p.Second-1) + p.Interval.Seconds()
		xys = append(xys, plotter.XY{X: t, Y: p.OpsPerSec()})
	}
	if len(xys) == 0 {
		xys = append(xys, plotter.XY{}) // NewLine needs one point; an empty run draws a dot at 0
	}
	return xys
}

// jsonSummary is Summary's JSON form: rates per second, latencies in µs.
type jsonSummary struct {
	Bucket       string   `json:"bucket"`
	Conns        int      `json:"conns"`
	Features     string   `json:"features,omitempty"`
	ElapsedS     float64  `json:"elapsed_s"`
	Ops          int64    `json:"ops"`
	OpsPerSec    float64  `json:"ops_per_s"`
	RUPerSec     float64  `json:"ru_per_s"`
	WUPerSec     float64  `json:"wu_per_s"`
	RU           int64    `json:"ru"`
	WU           int64    `json:"wu"`
	Units        string   `json:"units"`
	Misses       int64    `json:"misses"`
	Throttled    int64    `json:"throttled"`
	Rejected     int64    `json:"rejected"`
	Busy         int64    `json:"busy"`
	Errors       int64    `json:"errors"`
	ThrottleWait float64  `json:"throttle_wait_us"`
	P50          float64  `json:"p50_us"`
	P99          float64  `json:"p99_us"`
	P999         float64  `json:"p999_us"`
	Mean         float64  `json:"mean_us"`
	Max          float64  `json:"max_us"`
	ErrorSamples []string `json:"error_samples,omitempty"`
}

func toJSON(s *Summary) jsonSummary {
	return jsonSummary{
		Bucket: s.Bucket, Conns: s.Conns, Features: s.Features, ElapsedS: s.Elapsed.Seconds(),
		Ops: s.Ops, OpsPerSec: s.OpsPerSec(), RUPerSec: s.RUPerSec(), WUPerSec: s.WUPerSec(),
		RU: s.RU, WU: s.WU, Units: s.UnitSource(), Misses: s.Misses,
		Throttled: s.Throttled, Rejected: s.Rejected, Busy: s.Busy, Errors: s.Errors,
		ThrottleWait: micros(s.ThrottleWait),
		P50:          micros(s.Latency.Quantile(0.50)), P99: micros(s.Latency.Quantile(0.99)),
		P999: micros(s.Latency.Quantile(0.999)), Mean: micros(s.Latency.Mean()), Max: micros(s.Latency.Max()),
		ErrorSamples: s.ErrorSamples,
	}
}

func micros(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// WriteJSON writes the summary (not the series) as one indented JSON object.
func (r *Result) WriteJSON(w io.Writer) error {
	out := struct {
		Addr        string        `json:"addr"`
		WarmupS     float64       `json:"warmup_s"`
		ElapsedS    float64       `json:"elapsed_s"`
		Interrupted bool          `json:"interrupted"`
		Units       string        `json:"units"`
		Preloaded   int64         `json:"preloaded_keys,omitempty"`
		Buckets     []jsonSummary `json:"buckets"`
		Total       jsonSummary   `json:"total"`
	}{
		Addr: r.Addr, WarmupS: r.Warmup.Seconds(), ElapsedS: r.Elapsed.Seconds(),
		Interrupted: r.Interrupted, Units: r.unitsNote(), Preloaded: r.Preloaded,
		Total: toJSON(&r.Total),
	}
	for i := range r.Buckets {
		out.Buckets = append(out.Buckets, toJSON(&r.Buckets[i]))
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}
