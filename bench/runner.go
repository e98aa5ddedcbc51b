package bench

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Run-time constants.
const (
	// stopGrace is how long batches in flight at the end of the run may take
	// to complete before their connections are cut.
	stopGrace = 2 * time.Second
	// maxSamples is how many error descriptions a bucket keeps.
	maxSamples = 5
	// dialParallel bounds concurrent connection attempts.
	dialParallel = 64
)

// bucketRun is one tenant during a run.
type bucketRun struct {
	spec          BucketSpec
	index         int
	value         []byte // the value of every SET
	readUnitSize  int
	writeUnitSize int
	clients       []*client

	cur, total Window // the sampler's: this second, and the measurement

	mu      sync.Mutex
	samples []string // guarded by mu: the first maxSamples error descriptions
}

// sample keeps an error description if fewer than maxSamples are kept.
func (b *bucketRun) sample(s string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.samples) < maxSamples {
		b.samples = append(b.samples, s)
	}
}

// runner owns the connections and the sampler of one Run.
type runner struct {
	opts     Options
	buckets  []*bucketRun
	cur      Window // all buckets, this second
	total    Window // all buckets, the measurement
	series   []SeriesPoint
	stopFns  []func() bool // context.AfterFunc registrations, undone on close
	stopFnMu sync.Mutex    // guards stopFns while connecting
}

// Run connects, optionally preloads, then drives the server for
// opts.Warmup + opts.Duration and returns the figures of the measured part.
// Cancelling ctx ends the run early; the figures measured so far are
// returned with Result.Interrupted set. Setup failures (connect, HELLO,
// SASL, SELECT_BUCKET, preload) are returned as errors. Every connection
// and goroutine Run starts has ended when it returns.
func Run(ctx context.Context, opts Options) (*Result, error) {
	opts.EnsureDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	r := newRunner(opts)
	defer r.close()
	if err := r.connect(ctx); err != nil {
		return nil, err
	}
	res := r.newResult()
	if opts.Preload {
		start := time.Now()
		n, err := r.preload(ctx)
		res.Preloaded, res.PreloadTime = n, time.Since(start)
		if ctx.Err() != nil {
			res.Interrupted = true
			return res, nil
		}
		if err != nil {
			return nil, err
		}
	}
	res.Elapsed, res.Interrupted = r.measure(ctx, cancel)
	r.summarize(res)
	return res, nil
}

func newRunner(o Options) *runner {
	r := &runner{opts: o}
	for i, spec := range o.Buckets {
		r.buckets = append(r.buckets, &bucketRun{
			spec:          spec,
			index:         i,
			value:         makeValue(spec.ValueSize),
			readUnitSize:  o.ReadUnitSize,
			writeUnitSize: o.WriteUnitSize,
			clients:       make([]*client, spec.Conns),
		})
	}
	return r
}

// connect dials every connection, at most dialParallel at a time, and
// returns the first failure.
func (r *runner) connect(ctx context.Context) error {
	var wg sync.WaitGroup
	var failed atomic.Int64
	var firstErr error
	var errOnce sync.Once
	sem := make(chan struct{}, dialParallel)
	for _, b := range r.buckets {
		for i := range b.clients {
			sem <- struct{}{}
			wg.Go(func() {
				defer func() { <-sem }()
				c, err := dialClient(ctx, &r.opts, b, i)
				if err != nil {
					failed.Add(1)
					errOnce.Do(func() { firstErr = err })
					return
				}
				b.clients[i] = c
				r.stopFnMu.Lock()
				r.stopFns = append(r.stopFns, context.AfterFunc(ctx, c.interrupt))
				r.stopFnMu.Unlock()
			})
		}
	}
	wg.Wait()
	if n := failed.Load(); n > 1 {
		return fmt.Errorf("%w (and %d more connections failed)", firstErr, n-1)
	}
	return firstErr
}

// interrupt makes the connection's blocked reads and writes return at once.
func (c *client) interrupt() { _ = c.nc.SetDeadline(time.Unix(1, 0)) }

// close undoes the AfterFunc registrations and closes every connection.
func (r *runner) close() {
	for _, stop := range r.stopFns {
		stop()
	}
	for _, b := range r.buckets {
		for _, c := range b.clients {
			if c != nil {
				c.nc.Close()
			}
		}
	}
}

// preload has each bucket's connections SET a share of its key space.
func (r *runner) preload(ctx context.Context) (int64, error) {
	var wg sync.WaitGroup
	var stored atomic.Int64
	errs := make(chan error, 1)
	for _, b := range r.buckets {
		for i, c := range b.clients {
			wg.Go(func() {
				n, err := c.preload(ctx, int64(i), int64(len(b.clients)))
				stored.Add(n)
				if err != nil {
					select {
					case errs <- err:
					default:
					}
				}
			})
		}
	}
	wg.Wait()
	select {
	case err := <-errs:
		return stored.Load(), err
	default:
		return stored.Load(), nil
	}
}

// measure runs every connection until the end of the run and samples them
// every second. It returns the measured time and whether ctx was cancelled
// (rather than the run ending, or every connection being lost).
func (r *runner) measure(ctx context.Context, cancel context.CancelFunc) (time.Duration, bool) {
	start := time.Now()
	begin := start.Add(r.opts.Warmup)
	end := begin.Add(r.opts.Duration)
	cut := time.AfterFunc(time.Until(end.Add(stopGrace)), cancel)
	defer cut.Stop()
	var wg sync.WaitGroup
	for _, b := range r.buckets {
		for i, c := range b.clients {
			c.pacer = connPacer(b.spec.Rate, len(b.clients), i, start)
			wg.Go(func() { c.run(ctx, end) })
		}
	}
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	elapsed, interrupted := r.sample(ctx, done, begin, end)
	<-done
	return elapsed, interrupted
}

// sample closes a window every second from begin to end and returns the
// measured time. The warmup's window is discarded. The last window waits for
// the connections to finish, so it includes the batches in flight at the
// end. If ctx is done (interrupted) or every connection has ended, it closes
// a last, partial window at once.
func (r *runner) sample(ctx context.Context, done <-chan struct{}, begin, end time.Time) (time.Duration, bool) {
	if !waitUntil(ctx, done, begin) {
		<-done
		return 0, ctx.Err() != nil
	}
	r.drain()
	r.discard()
	prev := begin
	for sec := 1; ; sec++ {
		tick := begin.Add(time.Duration(sec) * time.Second)
		if tick.After(end) {
			tick = end
		}
		if !waitUntil(ctx, done, tick) {
			now := time.Now()
			<-done
			r.collect(sec, now.Sub(prev))
			return now.Sub(begin), ctx.Err() != nil
		}
		if !tick.Before(end) {
			<-done
			r.collect(sec, tick.Sub(prev))
			return end.Sub(begin), false
		}
		r.collect(sec, tick.Sub(prev))
		prev = tick
	}
}

// waitUntil waits for t and reports false if ctx or done ended the wait.
func waitUntil(ctx context.Context, done <-chan struct{}, t time.Time) bool {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-ctx.Done():
		return false
	case <-done:
		return false
	}
}

// drain moves every connection's window into its bucket's current window.
func (r *runner) drain() {
	for _, b := range r.buckets {
		for _, c := range b.clients {
			c.stats.drainInto(&b.cur)
		}
	}
}

// discard empties the current windows (the warmup).
func (r *runner) discard() {
	for _, b := range r.buckets {
		b.cur.reset()
	}
	r.cur.reset()
}

// collect drains the connections and closes second sec, which lasted
// interval: one series point per bucket and one for the total.
func (r *runner) collect(sec int, interval time.Duration) {
	r.drain()
	for _, b := range r.buckets {
		r.series = append(r.series, point(sec, b.spec.Name, interval, &b.cur))
		b.total.merge(&b.cur)
		r.cur.merge(&b.cur)
		b.cur.reset()
	}
	r.series = append(r.series, point(sec, TotalName, interval, &r.cur))
	r.total.merge(&r.cur)
	r.cur.reset()
}

func point(sec int, bucket string, interval time.Duration, w *Window) SeriesPoint {
	return SeriesPoint{
		Second: sec, Bucket: bucket, Interval: interval, Counts: w.Counts,
		P50: w.Latency.Quantile(0.50), P99: w.Latency.Quantile(0.99), P999: w.Latency.Quantile(0.999),
	}
}

func (r *runner) newResult() *Result {
	return &Result{
		Addr: r.opts.Addr, Warmup: r.opts.Warmup,
		ReadUnitSize: r.opts.ReadUnitSize, WriteUnitSize: r.opts.WriteUnitSize,
	}
}

// summarize fills the per-bucket and total summaries and the series.
func (r *runner) summarize(res *Result) {
	res.Series = r.series
	res.Total = Summary{Bucket: TotalName, Elapsed: res.Elapsed, Counts: r.total.Counts, Latency: r.total.Latency}
	for _, b := range r.buckets {
		s := Summary{
			Bucket: b.spec.Name, Conns: len(b.clients), Elapsed: res.Elapsed,
			Counts: b.total.Counts, Latency: b.total.Latency,
		}
		s.Features = b.clients[0].features
		b.mu.Lock()
		s.ErrorSamples = append([]string(nil), b.samples...)
		b.mu.Unlock()
		res.Buckets = append(res.Buckets, s)
		res.Total.Conns += s.Conns
	}
}
