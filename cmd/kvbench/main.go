// Command kvbench is a multi-tenant load generator for kvd and any server of
// the memcached binary protocol. It is flag parsing and printing around
// package kvd/bench; see that package for the model and the measurements.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"kvd/bench"
)

const usageHead = `kvbench drives a memcached binary-protocol server (kvd, memcached) with one or
more tenants and reports per-bucket ops/s, RU/s, WU/s, latency percentiles and
throttle counts.

usage: kvbench [flags]
       kvbench deadline [flags]   (the deadline-admission experiment; see its --help)
       kvbench neighbour [flags]  (a bucket without deadline next to one with; see its --help)

  --bucket SPEC is repeatable, one per tenant:
  %s
  Without --bucket: one tenant on the anonymous bucket (no auth, no SELECT_BUCKET).
  With --anonymous, no SELECT_BUCKET is sent: bucket names are only labels and
  key prefixes (for memcached, or several tenants on kvd's anonymous bucket).

examples:
  kvbench --bucket default:4 --bucket app:8:5000,user=app,password=app-secret
  kvbench --anonymous --bucket a:2 --bucket b:2,mix=50:50 --duration 5s --png ops.png

flags:
`

// bucketFlags collects repeated --bucket values.
type bucketFlags []bench.BucketSpec

func (b *bucketFlags) String() string { return "" }

func (b *bucketFlags) Set(s string) error {
	spec, err := bench.ParseBucketSpec(s)
	if err != nil {
		return err
	}
	*b = append(*b, spec)
	return nil
}

// cli is the command line besides bench.Options.
type cli struct {
	csv, png string
	json     bool
}

func parseFlags(args []string, stderr io.Writer) (bench.Options, cli, error) {
	o := bench.DefaultOptions()
	o.Buckets = nil
	var c cli
	var buckets bucketFlags
	fs := flag.NewFlagSet("kvbench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, usageHead, strings.ReplaceAll(bench.SpecSyntax, "\n", "\n  "))
		printDefaults(fs, stderr)
	}
	fs.StringVar(&o.Addr, "addr", o.Addr, "server `HOST:PORT`")
	fs.Var(&buckets, "bucket", "tenant `SPEC` (repeatable, see above)")
	fs.BoolVar(&o.Anonymous, "anonymous", false, "never SELECT_BUCKET; bucket names are labels (memcached)")
	fs.DurationVar(&o.Duration, "duration", o.Duration, "measured `time`")
	fs.DurationVar(&o.Warmup, "warmup", o.Warmup, "`time` run before the measurement, excluded from the figures")
	fs.BoolVar(&o.NonBlocking, "nonblocking", false, "negotiate NonBlockingThrottlingMode; retry 0x0c after next_tick_us")
	fs.BoolVar(&o.Preload, "preload", false, "SET every key of every key space once before the run")
	fs.IntVar(&o.ReadUnitSize, "read-unit-size", o.ReadUnitSize, "`bytes` per RU when the server does not report units")
	fs.IntVar(&o.WriteUnitSize, "write-unit-size", o.WriteUnitSize, "`bytes` per WU when the server does not report units")
	fs.Uint64Var(&o.Seed, "seed", 1, "`seed` of the per-connection key choice")
	fs.DurationVar(&o.DialTimeout, "dial-timeout", o.DialTimeout, "connect + handshake `timeout` per connection")
	fs.StringVar(&c.csv, "csv", "", "write the per-second series to `FILE` (CSV)")
	fs.StringVar(&c.png, "png", "", "draw per-bucket ops/s over time to `FILE` (PNG)")
	fs.BoolVar(&c.json, "json", false, "print the summary as JSON")
	if err := fs.Parse(args); err != nil {
		return o, c, err
	}
	if fs.NArg() > 0 {
		return o, c, fmt.Errorf("unexpected argument %q (flags only; see --help)", fs.Arg(0))
	}
	o.Buckets = buckets
	return o, c, nil
}

// printDefaults is flag.PrintDefaults with the --long spelling.
func printDefaults(fs *flag.FlagSet, w io.Writer) {
	fs.VisitAll(func(f *flag.Flag) {
		arg, usage := flag.UnquoteUsage(f)
		line := "  --" + f.Name
		if arg != "" {
			line += " " + arg
		}
		if f.DefValue != "" && f.DefValue != "false" {
			usage += fmt.Sprintf(" (default %s)", f.DefValue)
		}
		fmt.Fprintf(w, "%-28s %s\n", line, usage)
	})
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "deadline" {
		return runDeadline(args[1:], stdout, stderr)
	}
	if len(args) > 0 && args[0] == "neighbour" {
		return runNeighbour(args[1:], stdout, stderr)
	}
	opts, c, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	} else if err != nil {
		fmt.Fprintln(stderr, "kvbench:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() { <-ctx.Done(); stop() }() // a second Ctrl-C kills at once
	res, err := bench.Run(ctx, opts)
	stop()
	if err != nil {
		fmt.Fprintln(stderr, "kvbench:", err)
		return 1
	}
	if err := report(res, c, stdout); err != nil {
		fmt.Fprintln(stderr, "kvbench:", err)
		return 1
	}
	return 0
}

// report prints the summary and writes the requested files.
func report(res *bench.Result, c cli, stdout io.Writer) error {
	var err error
	if c.json {
		err = res.WriteJSON(stdout)
	} else {
		err = res.WriteTable(stdout)
	}
	if err == nil && c.csv != "" {
		err = writeFile(c.csv, res.WriteCSV)
	}
	if err == nil && c.png != "" {
		err = writeFile(c.png, res.WritePNG)
	}
	return err
}

func writeFile(path string, write func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		f.Close()
		return fmt.Errorf("%s: %w", path, err)
	}
	return f.Close()
}
