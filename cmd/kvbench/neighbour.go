package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"os/signal"
	"slices"
	"sync"
	"syscall"
	"time"

	"kvd/bench"
)

const neighbourUsage = `kvbench neighbour checks that a bucket without a deadline is unaffected by a
neighbour's deadline settings (issue 10): in the same run, --rounds times, it
runs two open-loop loads of synced SETs at once, the neighbour N at
--n-load × --capacity on a bucket without deadline, and the deadline bucket D
at --d-load × --capacity, with D's gate off, then on (deadline_ms --deadline,
deadline_percentile --percentile). Every phase uses fresh buckets
(<prefix>-n-<gate>-<round>, <prefix>-d-<gate>-<round>). It prints N's
completed ops/s and within-deadline fraction per phase, and the median of N's
throughput with D's gate on ÷ off.

usage: kvbench neighbour [flags]

flags:
`

// neighbourOptions is the neighbour subcommand's command line.
type neighbourOptions struct {
	point                    bench.OpenLoopOptions
	adminUser, adminPassword string
	capacity, nLoad, dLoad   float64
	percentile, rounds       int
	expected                 time.Duration
	prefix                   string
}

func parseNeighbourFlags(args []string, stderr io.Writer) (neighbourOptions, error) {
	var o neighbourOptions
	p := &o.point
	fs := flag.NewFlagSet("kvbench neighbour", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, neighbourUsage); printDefaults(fs, stderr) }
	fs.StringVar(&p.Addr, "addr", bench.DefaultAddr, "server `HOST:PORT`")
	fs.StringVar(&p.User, "user", "", "SASL PLAIN `user` of the loads (not Unthrottled)")
	fs.StringVar(&p.Password, "password", "", "SASL PLAIN `password`")
	fs.StringVar(&o.adminUser, "admin-user", "", "`user` that creates the buckets (BucketThrottleManagement)")
	fs.StringVar(&o.adminPassword, "admin-password", "", "`password` of --admin-user")
	fs.IntVar(&p.Conns, "conns", 128, "open-loop `connections` per load")
	fs.DurationVar(&p.Duration, "duration", 5*time.Second, "measured `time` per phase")
	fs.DurationVar(&p.Warmup, "warmup", time.Second, "`time` per phase before the measurement")
	fs.DurationVar(&p.Grace, "grace", 2*time.Second, "`time` replies may take after the last send")
	fs.DurationVar(&p.Deadline, "deadline", bench.DefaultSweepDeadline, "D's deadline_ms (`duration`)")
	fs.DurationVar(&o.expected, "expected", bench.DefaultExpectedExecution, "D's expected_execution_us (`duration`)")
	fs.IntVar(&o.percentile, "percentile", 90, "D's deadline_percentile")
	fs.Float64Var(&o.capacity, "capacity", 0, "capacity in `ops/s` (required: see kvbench deadline)")
	fs.Float64Var(&o.nLoad, "n-load", 0.25, "N's offered load, a `multiple` of the capacity")
	fs.Float64Var(&o.dLoad, "d-load", 1.5, "D's offered load, a `multiple` of the capacity")
	fs.IntVar(&o.rounds, "rounds", 3, "off/on `pairs`")
	fs.StringVar(&o.prefix, "prefix", "kvbench-neighbour", "bucket name `prefix`")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if o.capacity <= 0 || o.rounds < 1 || o.nLoad <= 0 || o.dLoad <= 0 {
		return o, fmt.Errorf("--capacity, --rounds, --n-load and --d-load must be > 0")
	}
	p.EnsureDefaults()
	if o.adminUser == "" {
		o.adminUser, o.adminPassword = p.User, p.Password
	}
	return o, nil
}

// runNeighbour is `kvbench neighbour`.
func runNeighbour(args []string, stdout, stderr io.Writer) int {
	o, err := parseNeighbourFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	} else if err != nil {
		fmt.Fprintln(stderr, "kvbench neighbour:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	fmt.Fprintf(stdout, "round,d_gate,n_offered_ops_s,n_completed_ops_s,n_within_fraction,d_completed_ops_s,d_within_fraction,d_rejected_fraction\n")
	var ratios []float64
	for round := range o.rounds {
		var nOff float64
		for _, gate := range []bool{false, true} {
			n, d, err := o.phase(ctx, round, gate)
			if err != nil {
				fmt.Fprintln(stderr, "kvbench neighbour:", err)
				return 1
			}
			fmt.Fprintf(stdout, "%d,%s,%.1f,%.1f,%.5f,%.1f,%.5f,%.5f\n", round+1, map[bool]string{false: "off", true: "on"}[gate],
				n.Offered(), n.CompletedRate(), n.WithinFraction(), d.CompletedRate(), d.WithinFraction(), d.RejectedFraction())
			if !gate {
				nOff = n.CompletedRate()
			} else if nOff > 0 {
				ratios = append(ratios, n.CompletedRate()/nOff)
			}
		}
	}
	slices.Sort(ratios)
	if len(ratios) > 0 {
		fmt.Fprintf(stdout, "# N throughput with D's gate on ÷ off: median %.4f of %d rounds %v\n", ratios[len(ratios)/2], len(ratios), ratios)
	}
	return 0
}

// phase runs N and D at once on fresh buckets, D's gate off or on.
func (o *neighbourOptions) phase(ctx context.Context, round int, gate bool) (n, d *bench.OpenLoopResult, err error) {
	g := map[bool]string{false: "off", true: "on"}[gate]
	base := map[string]any{"reserved": "unlimited"}
	dset := maps.Clone(base)
	if gate {
		dset["deadline_ms"] = o.point.Deadline.Milliseconds()
		dset["deadline_percentile"] = o.percentile
		dset["expected_execution_us"] = o.expected.Microseconds()
	}
	admin := o.point
	admin.User, admin.Password = o.adminUser, o.adminPassword
	np, dp := o.point, o.point
	np.Bucket, np.Rate, np.Seed = fmt.Sprintf("%s-n-%s-%d", o.prefix, g, round+1), o.nLoad*o.capacity, uint64(2*round+1)
	dp.Bucket, dp.Rate, dp.Seed = fmt.Sprintf("%s-d-%s-%d", o.prefix, g, round+1), o.dLoad*o.capacity, uint64(2*round+2)
	for _, b := range []struct {
		name string
		set  map[string]any
	}{{np.Bucket, base}, {dp.Bucket, dset}} {
		if err := bench.ApplyBucket(ctx, &admin, b.name, b.set); err != nil {
			return nil, nil, err
		}
	}
	var wg sync.WaitGroup
	var nerr, derr error
	wg.Add(2)
	go func() { defer wg.Done(); n, nerr = bench.RunOpenLoop(ctx, np) }()
	go func() { defer wg.Done(); d, derr = bench.RunOpenLoop(ctx, dp) }()
	wg.Wait()
	return n, d, errors.Join(nerr, derr)
}
