package bench

import (
	"encoding/csv"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// SweepCSVHeader is the first line of SweepResult.WriteCSV.
var SweepCSVHeader = []string{
	"bucket", "gate", "percentile", "load", "target_ops_s", "offered_ops_s", "completed_ops_s",
	"within_fraction", "goodput_ops_s", "rejected_fraction", "ratio_p50", "ratio_p99", "ratio_p999",
	"scheduled", "completed", "finished_in_window", "within", "rejected", "retry_missing", "retry_after_mean_us",
	"expired", "tempfail", "busy", "errors", "lost", "deadline_ms", "capacity_ops_s",
}

// gateName is "off" or "p<percentile>".
func (p *SweepPoint) gateName() string {
	if !p.Gate {
		return "off"
	}
	return "p" + strconv.Itoa(p.Percentile)
}

// retryMean is the mean retry_after of the rejections that carried one.
func (p *SweepPoint) retryMean() float64 {
	n := p.Rejected - p.RetryMissing
	if n <= 0 {
		return 0
	}
	return micros(p.RetryAfterSum) / float64(n)
}

// WriteCSV writes one row per point.
func (r *SweepResult) WriteCSV(w io.Writer) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(SweepCSVHeader); err != nil {
		return err
	}
	f := func(v float64, prec int) string { return strconv.FormatFloat(v, 'f', prec, 64) }
	i := func(n int64) string { return strconv.FormatInt(n, 10) }
	for k := range r.Points {
		p := &r.Points[k]
		row := []string{
			p.Bucket, p.gateName(), strconv.Itoa(p.Percentile), f(p.Load, 2), f(p.Rate, 1),
			f(p.Offered(), 1), f(p.CompletedRate(), 1), f(p.WithinFraction(), 5), f(p.Goodput(), 1),
			f(p.RejectedFraction(), 5), f(p.Ratio(0.5), 4), f(p.Ratio(0.99), 4), f(p.Ratio(0.999), 4),
			i(p.Scheduled), i(p.Completed), i(p.Finished), i(p.Within), i(p.Rejected), i(p.RetryMissing), f(p.retryMean(), 1),
			i(p.Expired), i(p.TempFail), i(p.Busy), i(p.Errors), i(p.Lost),
			i(r.Deadline.Milliseconds()), f(r.Capacity, 1),
		}
		if err := cw.Write(row); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

// WriteTable writes the human-readable report.
func (r *SweepResult) WriteTable(w io.Writer) error {
	var b strings.Builder
	how := "given"
	if r.CapacityMeasured {
		how = "measured"
	}
	fmt.Fprintf(&b, "deadline sweep: capacity %.0f ops/s (%s), deadline %s\n", r.Capacity, how, fmtDur(r.Deadline))
	tw := tabwriter.NewWriter(&b, 2, 8, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "gate\tload\toffered/s\tcompleted/s\twithin%\tgoodput/s\trejected%\tp50/D\tp99/D\tp99.9/D\tretry_us\tno_retry\texpired\tother\tlost\t")
	for k := range r.Points {
		p := &r.Points[k]
		fmt.Fprintf(tw, "%s\t%.2f\t%.0f\t%.0f\t%.2f\t%.0f\t%.2f\t%.3f\t%.3f\t%.3f\t%.0f\t%d\t%d\t%d\t%d\t\n",
			p.gateName(), p.Load, p.Offered(), p.CompletedRate(), 100*p.WithinFraction(), p.Goodput(),
			100*p.RejectedFraction(), p.Ratio(0.5), p.Ratio(0.99), p.Ratio(0.999), p.retryMean(),
			p.RetryMissing, p.Expired, p.TempFail+p.Busy+p.Errors, p.Lost)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for k := range r.Points {
		for _, s := range r.Points[k].ErrorSamples {
			fmt.Fprintf(&b, "sample [%s]: %s\n", r.Points[k].Bucket, s)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// CDFLoad is the load whose latency CDF WritePNG draws.
const CDFLoad = 1.5

// WritePNG draws two panels: goodput against offered load, one line per gate
// setting; and the CDF of completed latency ÷ deadline at the load nearest
// CDFLoad.
func (r *SweepResult) WritePNG(w io.Writer) error {
	good, err := r.goodputPlot()
	if err != nil {
		return err
	}
	cdf, err := r.cdfPlot()
	if err != nil {
		return err
	}
	img := vgimg.New(2*plotWidth, plotHeight)
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 1, Cols: 2, PadX: vg.Points(12), PadY: vg.Points(8), PadTop: vg.Points(4), PadBottom: vg.Points(4), PadLeft: vg.Points(4), PadRight: vg.Points(8)}
	canvases := plot.Align([][]*plot.Plot{{good, cdf}}, tiles, dc)
	good.Draw(canvases[0][0])
	cdf.Draw(canvases[0][1])
	_, err = vgimg.PngCanvas{Canvas: img}.WriteTo(w)
	return err
}

// gates lists the gate settings in the order of the points ("off", "p50", …).
func (r *SweepResult) gates() []string {
	var names []string
	for k := range r.Points {
		if n := r.Points[k].gateName(); !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	return names
}

func (r *SweepResult) goodputPlot() (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("goodput (completed within %s) vs offered load", fmtDur(r.Deadline))
	p.X.Label.Text = "offered load (× capacity " + strconv.FormatFloat(r.Capacity, 'f', 0, 64) + " ops/s)"
	p.Y.Label.Text = "goodput (ops/s)"
	p.X.Min, p.Y.Min = 0, 0
	p.Legend.Top, p.Legend.Left = true, true
	p.Legend.XOffs, p.Legend.YOffs = vg.Points(12), vg.Points(-4)
	p.Add(plotter.NewGrid())
	for i, g := range r.gates() {
		var xys plotter.XYs
		for k := range r.Points {
			if pt := &r.Points[k]; pt.gateName() == g {
				xys = append(xys, plotter.XY{X: pt.Offered() / max(r.Capacity, 1), Y: pt.Goodput()})
			}
		}
		line, points, err := plotter.NewLinePoints(xys)
		if err != nil {
			return nil, fmt.Errorf("bench: plot goodput %s: %w", g, err)
		}
		line.Color, line.Dashes, line.Width = plotutil.Color(i), plotutil.Dashes(i), vg.Points(1.5)
		points.Color, points.Shape = plotutil.Color(i), plotutil.Shape(i)
		p.Add(line, points)
		p.Legend.Add("gate "+g, line, points)
	}
	return p, nil
}

// cdfLoad is the measured load nearest CDFLoad.
func (r *SweepResult) cdfLoad() float64 {
	best := math.Inf(1)
	for k := range r.Points {
		if l := r.Points[k].Load; math.Abs(l-CDFLoad) < math.Abs(best-CDFLoad) {
			best = l
		}
	}
	return best
}

func (r *SweepResult) cdfPlot() (*plot.Plot, error) {
	load := r.cdfLoad()
	p := plot.New()
	p.Title.Text = fmt.Sprintf("CDF of latency ÷ deadline at %.2f× load (completed commands)", load)
	p.X.Label.Text = "latency ÷ deadline (log scale; 1 = the deadline)"
	p.Y.Label.Text = "fraction of completed commands"
	p.X.Scale, p.X.Tick.Marker = plot.LogScale{}, plot.LogTicks{Prec: -1}
	p.Y.Min, p.Y.Max = 0, 1
	p.Legend.Top, p.Legend.Left = true, true
	p.Legend.XOffs, p.Legend.YOffs = vg.Points(12), vg.Points(-4)
	p.Add(plotter.NewGrid())
	for i, pt := range r.pointsAt(load) {
		xys := ratioCDF(&pt.Latency, float64(r.Deadline))
		line, err := plotter.NewLine(xys)
		if err != nil {
			return nil, fmt.Errorf("bench: plot cdf %s: %w", pt.gateName(), err)
		}
		line.Color, line.Dashes, line.Width = plotutil.Color(i), plotutil.Dashes(i), vg.Points(1.5)
		p.Add(line)
		p.Legend.Add("gate "+pt.gateName(), line)
	}
	mark, err := plotter.NewLine(plotter.XYs{{X: 1, Y: 0}, {X: 1, Y: 1}})
	if err != nil {
		return nil, err
	}
	mark.Width, mark.Dashes = vg.Points(0.8), []vg.Length{vg.Points(2), vg.Points(2)}
	p.Add(mark)
	return p, nil
}

// minRatio keeps the log-scale axis away from zero.
const minRatio = 1e-4

// ratioCDF is the cumulative fraction of h's observations at or below each
// bucket's upper bound, the bounds divided by scale. An empty histogram gives
// one point (minRatio, 0), so that the line can still be drawn.
func ratioCDF(h *Histogram, scale float64) plotter.XYs {
	if h.total == 0 {
		return plotter.XYs{{X: minRatio, Y: 0}}
	}
	var xys plotter.XYs
	var seen uint64
	for i := h.lo; i <= h.hi; i++ {
		if h.counts[i] == 0 {
			continue
		}
		seen += h.counts[i]
		low, width := histBounds(i)
		x := max(float64(low+width)/scale, minRatio)
		xys = append(xys, plotter.XY{X: x, Y: float64(seen) / float64(h.total)})
	}
	return xys
}
