package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"kvd/bench"
)

const deadlineUsage = `kvbench deadline runs the deadline-admission experiment (seed 004): synced SETs
to one bucket per point, offered open-loop (arrivals at a fixed rate spread over
many connections; latency from each command's scheduled send time), from 0.5× to
2× the capacity (closed-loop synced-SET throughput with 512 connections, measured
first unless --capacity is given), with the gate off and with deadline_percentile
50, 90 and 99. Each point creates its bucket <prefix>-off-x<load> or
<prefix>-p<pct>-x<load> with CREATE_BUCKET (or updates it with 0x2a) as
--admin-user, who needs BucketThrottleManagement; the load runs as --user, who
must be able to select those buckets and must NOT be Unthrottled (kvd exempts
Unthrottled connections from tickets, and so from the deadline gate).

usage: kvbench deadline [flags]

example:
  kvbench deadline --addr 127.0.0.1:11211 --admin-user admin --admin-password change-me \
      --user bench --password bench \
      --csv deadline.csv --png deadline.png

flags:
`

// deadlineCLI is the deadline subcommand's command line besides SweepOptions.
type deadlineCLI struct {
	csv, png string
}

func parseDeadlineFlags(args []string, stderr io.Writer) (bench.SweepOptions, deadlineCLI, error) {
	var o bench.SweepOptions
	var c deadlineCLI
	p := &o.Point
	fs := flag.NewFlagSet("kvbench deadline", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, deadlineUsage)
		printDefaults(fs, stderr)
	}
	loads := floatList(bench.DefaultSweepLoads)
	pcts := intList(bench.DefaultSweepPercentiles)
	arrivals, settings := "poisson", `{"reserved":"unlimited"}`
	fs.StringVar(&p.Addr, "addr", bench.DefaultAddr, "server `HOST:PORT`")
	fs.StringVar(&p.User, "user", "", "SASL PLAIN `user` of the load (selects the buckets; not Unthrottled)")
	fs.StringVar(&p.Password, "password", "", "SASL PLAIN `password`")
	fs.StringVar(&o.AdminUser, "admin-user", "", "SASL PLAIN `user` that creates the buckets (default --user)")
	fs.StringVar(&o.AdminPassword, "admin-password", "", "`password` of --admin-user")
	fs.IntVar(&p.Conns, "conns", bench.DefaultOpenLoopConns, "open-loop `connections` per point")
	fs.StringVar(&arrivals, "arrivals", arrivals, "arrival process: `poisson` or fixed")
	fs.DurationVar(&p.Duration, "duration", bench.DefaultSweepPointDuration, "measured `time` per point")
	fs.DurationVar(&p.Warmup, "warmup", bench.DefaultSweepPointWarmup, "`time` per point before the measurement")
	fs.DurationVar(&p.Grace, "grace", bench.DefaultOpenLoopGrace, "`time` replies may take after the last send")
	fs.IntVar(&p.ValueSize, "value", bench.DefaultValueSize, "`bytes` per SET")
	fs.Int64Var(&p.Keys, "keys", bench.DefaultKeys, "key space `size`")
	fs.Uint64Var(&p.Seed, "seed", 1, "`seed` of keys and arrivals")
	fs.DurationVar(&o.Deadline, "deadline", bench.DefaultSweepDeadline, "deadline_ms of the gated points (`duration`)")
	fs.DurationVar(&o.ExpectedExecution, "expected", bench.DefaultExpectedExecution, "expected_execution_us of the gated points (`duration`)")
	fs.Var(&loads, "loads", "offered loads, `multiples` of the capacity, comma-separated")
	fs.Var(&pcts, "percentiles", "deadline_percentile `list` of the gated points")
	fs.Float64Var(&o.Capacity, "capacity", 0, "capacity in `ops/s`; 0 = measure it")
	fs.IntVar(&o.CapacityConns, "capacity-conns", bench.DefaultCapacityConns, "closed-loop `connections` for the capacity")
	fs.DurationVar(&o.CapacityDuration, "capacity-duration", 0, "capacity measurement `time` (default --duration)")
	fs.IntVar(&o.Rounds, "rounds", 1, "run the list of points this many `times` and merge each point's runs")
	fs.StringVar(&o.Prefix, "prefix", bench.DefaultSweepPrefix, "bucket name `prefix`")
	fs.StringVar(&settings, "settings", settings, "`JSON` settings every point's bucket also gets")
	fs.StringVar(&c.csv, "csv", "", "write one row per point to `FILE` (CSV)")
	fs.StringVar(&c.png, "png", "", "draw goodput vs load and the 1.5× latency CDF to `FILE` (PNG)")
	if err := fs.Parse(args); err != nil {
		return o, c, err
	}
	if fs.NArg() > 0 {
		return o, c, fmt.Errorf("unexpected argument %q (flags only; see --help)", fs.Arg(0))
	}
	var err error
	if p.Arrivals, err = bench.ParseArrivals(arrivals); err != nil {
		return o, c, err
	}
	if err := json.Unmarshal([]byte(settings), &o.Settings); err != nil {
		return o, c, fmt.Errorf("--settings: %w", err)
	}
	o.Loads, o.Percentiles = loads, pcts
	return o, c, nil
}

// runDeadline is `kvbench deadline`.
func runDeadline(args []string, stdout, stderr io.Writer) int {
	o, c, err := parseDeadlineFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	} else if err != nil {
		fmt.Fprintln(stderr, "kvbench deadline:", err)
		return 2
	}
	o.Progress = func(p *bench.SweepPoint) {
		fmt.Fprintf(stderr, "%s: offered %.0f/s, within %.1f%%, goodput %.0f/s, rejected %.1f%%, client send lag p50 %.1f ms p99 %.1f ms\n",
			p.Bucket, p.Offered(), 100*p.WithinFraction(), p.Goodput(), 100*p.RejectedFraction(),
			ms(p.SendLag.Quantile(0.5)), ms(p.SendLag.Quantile(0.99)))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	res, err := bench.Sweep(ctx, o)
	stop()
	if res != nil && len(res.Points) > 0 {
		if werr := reportSweep(res, c, stdout); werr != nil {
			fmt.Fprintln(stderr, "kvbench deadline:", werr)
			return 1
		}
	}
	if err != nil {
		fmt.Fprintln(stderr, "kvbench deadline:", err)
		return 1
	}
	return 0
}

func reportSweep(res *bench.SweepResult, c deadlineCLI, stdout io.Writer) error {
	err := res.WriteTable(stdout)
	if err == nil && c.csv != "" {
		err = writeFile(c.csv, res.WriteCSV)
	}
	if err == nil && c.png != "" {
		err = writeFile(c.png, res.WritePNG)
	}
	return err
}

// floatList is a comma-separated flag of numbers.
type floatList []float64

func (l *floatList) String() string {
	s := make([]string, len(*l))
	for i, v := range *l {
		s[i] = strconv.FormatFloat(v, 'g', -1, 64)
	}
	return strings.Join(s, ",")
}

func (l *floatList) Set(v string) error {
	*l = nil
	for f := range strings.SplitSeq(v, ",") {
		x, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil {
			return fmt.Errorf("%q is not a number", f)
		}
		*l = append(*l, x)
	}
	return nil
}

// intList is a comma-separated flag of integers.
type intList []int

func (l *intList) String() string {
	s := make([]string, len(*l))
	for i, v := range *l {
		s[i] = strconv.Itoa(v)
	}
	return strings.Join(s, ",")
}

func (l *intList) Set(v string) error {
	*l = nil
	for f := range strings.SplitSeq(v, ",") {
		x, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			return fmt.Errorf("%q is not an integer", f)
		}
		*l = append(*l, x)
	}
	return nil
}

// ms is d in milliseconds.
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
