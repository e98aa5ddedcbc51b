package bench

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	mc "kvd/protocol/binary"
)

// Arrivals is the arrival process of an open-loop run.
type Arrivals uint8

const (
	// Poisson: exponential gaps, the superposition of one Poisson process per
	// connection (which is again Poisson at the total rate).
	Poisson Arrivals = iota
	// Fixed: every connection sends at rate/conns, the connections staggered by
	// 1/rate, so the server sees one arrival every 1/rate.
	Fixed
)

// String returns "poisson" or "fixed".
func (a Arrivals) String() string {
	if a == Fixed {
		return "fixed"
	}
	return "poisson"
}

// ParseArrivals parses "poisson" or "fixed".
func ParseArrivals(s string) (Arrivals, error) {
	switch s {
	case "poisson":
		return Poisson, nil
	case "fixed":
		return Fixed, nil
	}
	return Poisson, fmt.Errorf("%w: arrivals %q: want poisson or fixed", ErrBadSpec, s)
}

// Defaults of OpenLoopOptions.
const (
	DefaultOpenLoopConns = 256
	DefaultOpenLoopGrace = 5 * time.Second
	// maxPendingPerConn bounds the requests a connection has sent and not yet
	// seen answered; a connection that reaches it sends late, and the lateness
	// counts in the latency, which runs from the scheduled time.
	maxPendingPerConn = 4096
)

// OpenLoopOptions configure RunOpenLoop: SETs to one bucket, sent at
// scheduled times whatever the server's replies, over many connections.
type OpenLoopOptions struct {
	Addr      string
	Bucket    string // the bucket to SELECT
	User      string // SASL PLAIN; empty = none
	Password  string
	Conns     int           // connections (default 256)
	Rate      float64       // arrivals per second, all connections together (> 0)
	Arrivals  Arrivals      // Poisson (default) or Fixed
	Deadline  time.Duration // the latency budget that "within" and the ratios refer to (> 0)
	Duration  time.Duration // measured: commands scheduled in [warmup, warmup+duration)
	Warmup    time.Duration // scheduled before the measurement, not counted
	Grace     time.Duration // how long replies may arrive after the last send (default 5 s)
	ValueSize int           // bytes per SET (default 100)
	Keys      int64         // key space (default 10000)
	Seed      uint64
	// DialTimeout bounds each connection's connect and handshake (default 5 s).
	DialTimeout time.Duration
}

// EnsureDefaults fills zero fields with their defaults.
func (o *OpenLoopOptions) EnsureDefaults() {
	if o.Addr == "" {
		o.Addr = DefaultAddr
	}
	if o.Conns == 0 {
		o.Conns = DefaultOpenLoopConns
	}
	if o.Grace == 0 {
		o.Grace = DefaultOpenLoopGrace
	}
	if o.ValueSize == 0 {
		o.ValueSize = DefaultValueSize
	}
	if o.Keys == 0 {
		o.Keys = DefaultKeys
	}
	if o.Duration == 0 {
		o.Duration = DefaultDuration
	}
	if o.DialTimeout == 0 {
		o.DialTimeout = DefaultDialTimeout
	}
}

// Validate reports the first invalid field, wrapping ErrBadSpec.
func (o *OpenLoopOptions) Validate() error {
	spec := o.spec()
	if err := spec.Validate(); err != nil {
		return err
	}
	switch {
	case !(o.Rate > 0) || o.Rate > 1e8:
		return fmt.Errorf("%w: open loop rate %g: want (0, 1e8]", ErrBadSpec, o.Rate)
	case o.Deadline <= 0:
		return fmt.Errorf("%w: open loop deadline %v: want > 0", ErrBadSpec, o.Deadline)
	case o.Duration <= 0 || o.Warmup < 0 || o.Grace < 0:
		return fmt.Errorf("%w: open loop duration %v, warmup %v, grace %v", ErrBadSpec, o.Duration, o.Warmup, o.Grace)
	case o.Arrivals > Fixed:
		return fmt.Errorf("%w: arrivals %d", ErrBadSpec, o.Arrivals)
	}
	return nil
}

// spec is the BucketSpec of the run's connections: SETs only.
func (o *OpenLoopOptions) spec() BucketSpec {
	return BucketSpec{
		Name: o.Bucket, Conns: o.Conns, Rate: o.Rate, User: o.User, Password: o.Password,
		Pipeline: 1, GetWeight: 0, SetWeight: 1, ValueSize: o.ValueSize, Keys: o.Keys,
	}
}

// OpenLoopCounts classify the commands scheduled in the measured interval.
type OpenLoopCounts struct {
	Scheduled int64 // commands due in the measured interval
	Completed int64 // answered OK
	// Finished counts OK replies that arrived in the measured interval,
	// whenever they were scheduled: the server's throughput. (Completed counts
	// the commands scheduled in the interval, whenever they were answered: with
	// a backlog those differ.)
	Finished int64
	Within   int64 // completed no later than Deadline after their scheduled time
	// Rejected: 0x86 whose reason says the deadline "cannot be met" (the gate);
	// RetryMissing of them carried no retry_after_us, RetryAfterSum sums the others.
	Rejected      int64
	RetryMissing  int64
	RetryAfterSum time.Duration
	Expired       int64 // 0x86 "deadline passed …" (expired in a queue)
	TempFail      int64 // other 0x86 (queue timeouts, …)
	Busy          int64 // 0x85
	Errors        int64 // any other status
	Lost          int64 // no reply by the end of the grace period (or connection lost)
}

func (c *OpenLoopCounts) add(o *OpenLoopCounts) {
	c.Scheduled += o.Scheduled
	c.Completed += o.Completed
	c.Finished += o.Finished
	c.Within += o.Within
	c.Rejected += o.Rejected
	c.RetryMissing += o.RetryMissing
	c.RetryAfterSum += o.RetryAfterSum
	c.Expired += o.Expired
	c.TempFail += o.TempFail
	c.Busy += o.Busy
	c.Errors += o.Errors
	c.Lost += o.Lost
}

// OpenLoopResult is the outcome of RunOpenLoop.
type OpenLoopResult struct {
	Options OpenLoopOptions
	OpenLoopCounts
	// Latency of the completed commands, from scheduled send time to the read
	// that completed the reply.
	Latency Histogram
	// SendLag is how late the client itself was for each measured command:
	// from its scheduled time to when the sender woke to write it. It is part
	// of Latency, and time no server can see; a client short of CPU makes it
	// large.
	SendLag      Histogram
	ErrorSamples []string // the first few unexpected replies
	Interrupted  bool
	Measured     time.Duration // Duration, times the runs merged into this result
}

// Merge adds the figures of another run of the same point (Sweep's rounds).
func (r *OpenLoopResult) Merge(o *OpenLoopResult) {
	r.OpenLoopCounts.add(&o.OpenLoopCounts)
	r.Latency.Merge(&o.Latency)
	r.SendLag.Merge(&o.SendLag)
	r.Measured += o.Measured
	r.Interrupted = r.Interrupted || o.Interrupted
	for _, s := range o.ErrorSamples {
		if len(r.ErrorSamples) < maxSamples {
			r.ErrorSamples = append(r.ErrorSamples, s)
		}
	}
}

// Offered is the measured arrival rate (scheduled commands per second).
func (r *OpenLoopResult) Offered() float64 { return perSec(r.Scheduled, r.Measured) }

// CompletedRate is the server's throughput: OK replies that arrived in the
// measured interval, per second.
func (r *OpenLoopResult) CompletedRate() float64 { return perSec(r.Finished, r.Measured) }

// Goodput is completions within the deadline per second.
func (r *OpenLoopResult) Goodput() float64 { return perSec(r.Within, r.Measured) }

// WithinFraction is the fraction of completed commands within the deadline.
func (r *OpenLoopResult) WithinFraction() float64 { return frac(r.Within, r.Completed) }

// RejectedFraction is the fraction of scheduled commands the gate rejected.
func (r *OpenLoopResult) RejectedFraction() float64 { return frac(r.Rejected, r.Scheduled) }

// Ratio returns the q-quantile of completed latency ÷ deadline.
func (r *OpenLoopResult) Ratio(q float64) float64 {
	return float64(r.Latency.Quantile(q)) / float64(r.Options.Deadline)
}

func frac(n, d int64) float64 {
	if d == 0 {
		return 0
	}
	return float64(n) / float64(d)
}

// RunOpenLoop drives one bucket with SETs at scheduled times for Warmup +
// Duration, then waits up to Grace for the last replies. Each connection has
// a sender, which writes every command when it is due (all overdue ones in
// one write) without waiting for replies, and a receiver, which reads the
// replies in order. Latency runs from the scheduled time, so a server (or a
// client) that falls behind cannot hide its backlog (no coordinated
// omission). Setup failures are errors; the figures of an interrupted run are
// returned with Interrupted set.
func RunOpenLoop(ctx context.Context, o OpenLoopOptions) (*OpenLoopResult, error) {
	o.EnsureDefaults()
	if err := o.Validate(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	r := newRunner(Options{Addr: o.Addr, DialTimeout: o.DialTimeout, Seed: o.Seed, Buckets: []BucketSpec{o.spec()}})
	defer r.close()
	if err := r.connect(ctx); err != nil {
		return nil, err
	}
	b := r.buckets[0]
	start := time.Now()
	begin := start.Add(o.Warmup)
	end := begin.Add(o.Duration)
	cut := time.AfterFunc(time.Until(end.Add(o.Grace)), cancel)
	defer cut.Stop()
	conns := make([]*openConn, len(b.clients))
	var wg sync.WaitGroup
	for i, c := range b.clients {
		conns[i] = newOpenConn(c, &o, i, start, begin, end)
		wg.Go(func() { conns[i].run(ctx) })
	}
	wg.Wait()
	res := &OpenLoopResult{Options: o, Measured: o.Duration, Interrupted: ctx.Err() != nil && time.Now().Before(end.Add(o.Grace))}
	for _, oc := range conns {
		res.OpenLoopCounts.add(&oc.counts)
		res.Latency.Merge(&oc.lat)
		res.SendLag.Merge(&oc.sendLag)
		for _, s := range oc.samples {
			if len(res.ErrorSamples) < maxSamples {
				res.ErrorSamples = append(res.ErrorSamples, s)
			}
		}
	}
	return res, nil
}

// pending is a command sent and not yet answered.
type pending struct {
	opaque uint32
	due    time.Time // scheduled send time
}

// openConn is one connection of an open-loop run: a sender and a receiver
// goroutine around a client. The sender owns the client's write side
// (wbuf, key, work, opaque) and the arrival clock, the receiver its read side
// (rbuf, r, w, rtime) and the figures.
type openConn struct {
	c          *client
	deadline   time.Duration
	begin, end time.Time
	clock      arrivalClock
	inflight   chan pending

	sendLag Histogram // sender's: scheduled time → write, measured commands only

	counts  OpenLoopCounts // receiver's
	lat     Histogram      // receiver's
	samples []string       // receiver's
}

func newOpenConn(c *client, o *OpenLoopOptions, i int, start, begin, end time.Time) *openConn {
	return &openConn{
		c: c, deadline: o.Deadline, begin: begin, end: end,
		clock:    newArrivalClock(o.Arrivals, o.Rate, o.Conns, i, start, o.Seed),
		inflight: make(chan pending, maxPendingPerConn),
	}
}

// run starts the receiver, runs the sender, and waits for the receiver.
func (oc *openConn) run(ctx context.Context) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		oc.receive()
	}()
	oc.send(ctx)
	close(oc.inflight)
	<-done
}

// send writes every command when it is due until end or until ctx is done.
func (oc *openConn) send(ctx context.Context) {
	c := oc.c
	for ctx.Err() == nil {
		due := oc.clock.next
		if !due.Before(oc.end) || !sleepCtx(ctx, time.Until(due)) {
			return
		}
		now := time.Now()
		c.wbuf = c.wbuf[:0]
		for oc.clock.next.Before(oc.end) && !oc.clock.next.After(now) {
			sched := oc.clock.advance()
			if !sched.Before(oc.begin) {
				oc.sendLag.Record(now.Sub(sched))
			}
			c.opaque++
			_, k := c.work.next()
			c.wbuf = c.appendOp(c.wbuf, &op{key: k, opaque: c.opaque})
			select {
			case oc.inflight <- pending{opaque: c.opaque, due: sched}:
			case <-ctx.Done():
				return
			}
		}
		if _, err := c.nc.Write(c.wbuf); err != nil {
			return
		}
	}
}

// receive reads one reply per pending command, in order. After a read error
// it counts every remaining command as lost.
func (oc *openConn) receive() {
	var res mc.Response
	broken := false
	for p := range oc.inflight {
		if broken {
			oc.lost(p)
			continue
		}
		if err := oc.c.readReply(&res); err != nil {
			broken = true
			oc.lost(p)
			continue
		}
		if res.Opaque != p.opaque {
			broken = true
			oc.sample(fmt.Sprintf("reply opaque %d, want %d: connection abandoned", res.Opaque, p.opaque))
			oc.lost(p)
			continue
		}
		oc.account(p, &res)
	}
}

func (oc *openConn) measured(p pending) bool {
	return !p.due.Before(oc.begin) && p.due.Before(oc.end)
}

func (oc *openConn) lost(p pending) {
	if oc.measured(p) {
		oc.counts.Scheduled++
		oc.counts.Lost++
	}
}

func (oc *openConn) sample(s string) {
	if len(oc.samples) < maxSamples {
		oc.samples = append(oc.samples, s)
	}
}

// account classifies one reply of a measured command.
func (oc *openConn) account(p pending, res *mc.Response) {
	if res.Status == mc.StatusOK && !oc.c.rtime.Before(oc.begin) && oc.c.rtime.Before(oc.end) {
		oc.counts.Finished++
	}
	if !oc.measured(p) {
		return
	}
	n := &oc.counts
	n.Scheduled++
	switch res.Status {
	case mc.StatusOK:
		n.Completed++
		lat := oc.c.rtime.Sub(p.due)
		oc.lat.Record(lat)
		if lat <= oc.deadline {
			n.Within++
		}
	case mc.StatusTemporaryFailure:
		oc.classify0x86(res.Value)
	case mc.StatusBusy:
		n.Busy++
	default:
		n.Errors++
		oc.sample(describe(res))
	}
}

// classify0x86 sorts a 0x86 reply by its reason (XERROR JSON context or plain
// text): the gate's "cannot be met" rejection, a "deadline passed" expiry, or
// another temporary failure.
func (oc *openConn) classify0x86(body []byte) {
	n := &oc.counts
	switch {
	case bytes.Contains(body, []byte("cannot be met")):
		n.Rejected++
		if d, ok := retryAfter(body); ok {
			n.RetryAfterSum += d
		} else {
			n.RetryMissing++
			oc.sample("deadline rejection without retry_after_us: " + string(body))
		}
	case bytes.Contains(body, []byte("deadline passed")):
		n.Expired++
	default:
		n.TempFail++
		oc.sample("0x86: " + string(body))
	}
}

// retryAfter reads N from `"retry_after_us":N` (XERROR JSON) or
// `retry_after_us=N` (plain text).
func retryAfter(body []byte) (time.Duration, bool) {
	for _, field := range [][]byte{[]byte(`"retry_after_us"`), []byte("retry_after_us=")} {
		if us, ok := numberAfter(body, field); ok {
			return time.Duration(us) * time.Microsecond, true
		}
	}
	return 0, false
}

// arrivalClock is one connection's arrival schedule: next is when the next
// command is due.
type arrivalClock struct {
	next time.Time
	gap  float64 // mean gap in ns
	rng  *rand.Rand
}

// newArrivalClock returns connection i's schedule for a total rate over conns
// connections: Fixed staggers the connections by 1/rate; Poisson starts each
// at a random exponential gap.
func newArrivalClock(a Arrivals, rate float64, conns, i int, start time.Time, seed uint64) arrivalClock {
	gap := float64(conns) / rate * float64(time.Second)
	c := arrivalClock{gap: gap}
	if a == Fixed {
		c.next = start.Add(time.Duration(float64(i) / rate * float64(time.Second)))
		return c
	}
	c.rng = rand.New(rand.NewPCG(seed^0x6f70656e6c6f6f70, uint64(i)))
	c.next = start.Add(time.Duration(c.rng.ExpFloat64() * gap))
	return c
}

// advance returns the due time of the next command and schedules the one
// after it.
func (c *arrivalClock) advance() time.Time {
	t := c.next
	g := c.gap
	if c.rng != nil {
		g = c.rng.ExpFloat64() * c.gap
	}
	c.next = t.Add(time.Duration(g))
	return t
}
