package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"slices"
	"strconv"
	"time"

	mc "kvd/protocol/binary"
)

// The deadline experiment (seed 004's question, kvd issue 10): does deadline
// admission keep commands within their deadline? One workload (synced SETs to
// one bucket, open loop), FIFO; independent variable: the gate off or on (with
// deadline_percentile 50, 90, 99); offered load from 0.5× to 2× the capacity;
// dependent variable: each command's latency at the client ÷ its deadline.

// Defaults of SweepOptions.
var (
	DefaultSweepLoads       = []float64{0.5, 0.75, 1, 1.25, 1.5, 1.75, 2}
	DefaultSweepPercentiles = []int{50, 90, 99}
)

// Defaults of SweepOptions.
const (
	DefaultSweepDeadline      = 50 * time.Millisecond
	DefaultCapacityConns      = 512
	DefaultSweepPrefix        = "kvbench-deadline"
	DefaultExpectedExecution  = 2 * time.Millisecond
	DefaultSweepPointDuration = 10 * time.Second
	DefaultSweepPointWarmup   = 2 * time.Second
)

// SweepOptions configure Sweep.
type SweepOptions struct {
	// Point is the template of every point: Addr, User, Password, Conns,
	// Arrivals, Duration, Warmup, Grace, ValueSize, Keys, Seed, DialTimeout.
	// Its Bucket, Rate and Deadline are set per point. Its user must be
	// allowed to select the buckets and must not be Unthrottled (kvd exempts
	// Unthrottled connections from tickets, and so from the gate).
	Point OpenLoopOptions

	// AdminUser and AdminPassword authenticate the connection that creates the
	// buckets (BucketThrottleManagement); empty AdminUser means Point's user.
	AdminUser, AdminPassword string

	Deadline          time.Duration // deadline_ms of the gated points (default 50 ms)
	ExpectedExecution time.Duration // expected_execution_us of the gated points (default 2 ms)
	Loads             []float64     // multiples of the capacity (default 0.5 … 2)
	Percentiles       []int         // deadline_percentile of the gated points (default 50, 90, 99)
	Prefix            string        // bucket names are <prefix>-off-x<load>, <prefix>-p<pct>-x<load>

	// Capacity is the synced-SET throughput in ops/s; 0 measures it closed-loop
	// with CapacityConns connections for CapacityDuration on <prefix>-capacity.
	Capacity         float64
	CapacityConns    int           // default 512
	CapacityDuration time.Duration // default Point.Duration

	// Settings are extra bucket settings every point's bucket gets (default
	// {"reserved":"unlimited"}: throttling must not be what limits the run).
	Settings map[string]any

	// Rounds runs the whole list of points this many times (default 1) and
	// merges each point's runs, so that a noisy moment of a shared machine
	// spreads over every point instead of spoiling one.
	Rounds int

	// Progress, if set, is called after each run of a point.
	Progress func(p *SweepPoint)
}

// EnsureDefaults fills zero fields with their defaults.
func (o *SweepOptions) EnsureDefaults() {
	if o.Point.Duration == 0 {
		o.Point.Duration = DefaultSweepPointDuration
	}
	if o.Point.Warmup == 0 {
		o.Point.Warmup = DefaultSweepPointWarmup
	}
	o.Point.EnsureDefaults()
	if o.Deadline == 0 {
		o.Deadline = DefaultSweepDeadline
	}
	if o.ExpectedExecution == 0 {
		o.ExpectedExecution = DefaultExpectedExecution
	}
	if len(o.Loads) == 0 {
		o.Loads = DefaultSweepLoads
	}
	if len(o.Percentiles) == 0 {
		o.Percentiles = DefaultSweepPercentiles
	}
	if o.Prefix == "" {
		o.Prefix = DefaultSweepPrefix
	}
	if o.CapacityConns == 0 {
		o.CapacityConns = DefaultCapacityConns
	}
	if o.CapacityDuration == 0 {
		o.CapacityDuration = o.Point.Duration
	}
	if o.AdminUser == "" {
		o.AdminUser, o.AdminPassword = o.Point.User, o.Point.Password
	}
	if o.Settings == nil {
		o.Settings = map[string]any{"reserved": "unlimited"}
	}
	if o.Rounds == 0 {
		o.Rounds = 1
	}
}

// Validate reports the first invalid option, wrapping ErrBadSpec.
func (o *SweepOptions) Validate() error {
	p := o.Point // bucket, rate and deadline are set per point
	p.Bucket, p.Rate, p.Deadline = o.Prefix+"-capacity", 1, o.Deadline
	if err := p.Validate(); err != nil {
		return err
	}
	for _, l := range o.Loads {
		if !(l > 0) || l > 100 {
			return fmt.Errorf("%w: load %g: want (0, 100] × capacity", ErrBadSpec, l)
		}
	}
	for _, p := range o.Percentiles {
		if p < 50 || p > 99 {
			return fmt.Errorf("%w: percentile %d: want 50-99", ErrBadSpec, p)
		}
	}
	switch {
	case o.Deadline < time.Millisecond:
		return fmt.Errorf("%w: deadline %v: want ≥ 1ms", ErrBadSpec, o.Deadline)
	case o.ExpectedExecution < time.Microsecond:
		return fmt.Errorf("%w: expected execution %v: want ≥ 1µs", ErrBadSpec, o.ExpectedExecution)
	case o.Rounds < 1 || o.Rounds > 1000:
		return fmt.Errorf("%w: rounds %d: want 1-1000", ErrBadSpec, o.Rounds)
	case o.Capacity < 0 || o.CapacityConns < 1 || o.CapacityConns > maxConns:
		return fmt.Errorf("%w: capacity %g with %d conns", ErrBadSpec, o.Capacity, o.CapacityConns)
	}
	return nil
}

// PointSpec is one point of the sweep: a bucket, the settings it is created
// (or updated) with, and the offered rate.
type PointSpec struct {
	Bucket     string
	Settings   map[string]any // CREATE_BUCKET / SetBucketThrottleProperties JSON
	Gate       bool           // the settings carry deadline_ms
	Percentile int            // deadline_percentile; 0 with the gate off
	Load       float64        // multiple of the capacity
	Rate       float64        // ops/s
}

// SweepPoint is one measured point.
type SweepPoint struct {
	PointSpec
	*OpenLoopResult
}

// SweepResult is the outcome of Sweep.
type SweepResult struct {
	Capacity         float64 // ops/s, measured or given
	CapacityMeasured bool
	Deadline         time.Duration
	Points           []SweepPoint
}

// Points returns the sweep's points in run order: for each load, the gate off,
// then on with each percentile.
func (o *SweepOptions) Points(capacity float64) []PointSpec {
	var pts []PointSpec
	for _, l := range o.Loads {
		off := maps.Clone(o.Settings)
		pts = append(pts, PointSpec{Bucket: fmt.Sprintf("%s-off-x%s", o.Prefix, loadName(l)), Settings: off, Load: l, Rate: l * capacity})
		for _, p := range o.Percentiles {
			on := maps.Clone(o.Settings)
			on["deadline_ms"] = o.Deadline.Milliseconds()
			on["deadline_percentile"] = p
			on["expected_execution_us"] = o.ExpectedExecution.Microseconds()
			pts = append(pts, PointSpec{
				Bucket: fmt.Sprintf("%s-p%d-x%s", o.Prefix, p, loadName(l)), Settings: on,
				Gate: true, Percentile: p, Load: l, Rate: l * capacity,
			})
		}
	}
	return pts
}

func loadName(l float64) string { return strconv.FormatFloat(l, 'f', 2, 64) }

// Sweep measures the capacity (unless given), then runs every point, Rounds
// times: it creates the point's bucket with its settings (or, if it exists,
// applies them with SetBucketThrottleProperties) and runs RunOpenLoop against
// it. Rounds after the first use buckets of their own (<bucket>-r2, …). Points run one after the other; an error stops the sweep and is
// returned with the points measured so far (after the first round, every
// point with the rounds it completed).
func Sweep(ctx context.Context, o SweepOptions) (*SweepResult, error) {
	o.EnsureDefaults()
	if err := o.Validate(); err != nil {
		return nil, err
	}
	res := &SweepResult{Capacity: o.Capacity, Deadline: o.Deadline}
	if res.Capacity == 0 {
		c, err := MeasureCapacity(ctx, &o)
		if err != nil {
			return res, err
		}
		res.Capacity, res.CapacityMeasured = c, true
	}
	specs := o.Points(res.Capacity)
	res.Points = make([]SweepPoint, 0, len(specs))
	for round := range o.Rounds {
		for i, ps := range specs {
			if round > 0 {
				// A fresh bucket per round: its window and counters start
				// empty as in the first round (and kvd's 0x2a need not
				// accept the deadline settings).
				ps.Bucket = fmt.Sprintf("%s-r%d", ps.Bucket, round+1)
			}
			r, err := o.runPoint(ctx, ps)
			if err != nil {
				return res, err
			}
			if round == 0 {
				res.Points = append(res.Points, SweepPoint{PointSpec: ps, OpenLoopResult: r})
			} else {
				res.Points[i].Merge(r)
			}
			if o.Progress != nil {
				o.Progress(&SweepPoint{PointSpec: ps, OpenLoopResult: r})
			}
		}
	}
	return res, nil
}

// runPoint applies a point's bucket settings and runs it once.
func (o *SweepOptions) runPoint(ctx context.Context, ps PointSpec) (*OpenLoopResult, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := o.apply(ctx, ps.Bucket, ps.Settings); err != nil {
		return nil, err
	}
	po := o.Point
	po.Bucket, po.Rate, po.Deadline = ps.Bucket, ps.Rate, o.Deadline
	r, err := RunOpenLoop(ctx, po)
	if err != nil {
		return nil, fmt.Errorf("point %s: %w", ps.Bucket, err)
	}
	return r, nil
}

// MeasureCapacity runs synced SETs closed-loop (one in flight per connection)
// with CapacityConns connections on <prefix>-capacity, created with
// o.Settings, and returns the completed ops/s.
func MeasureCapacity(ctx context.Context, o *SweepOptions) (float64, error) {
	name := o.Prefix + "-capacity"
	if err := o.apply(ctx, name, o.Settings); err != nil {
		return 0, err
	}
	p := &o.Point
	r, err := Run(ctx, Options{
		Addr: p.Addr, Duration: o.CapacityDuration, Warmup: p.Warmup, Seed: p.Seed, DialTimeout: p.DialTimeout,
		Buckets: []BucketSpec{{
			Name: name, Conns: o.CapacityConns, User: p.User, Password: p.Password,
			GetWeight: 0, SetWeight: 1, ValueSize: p.ValueSize, Keys: p.Keys,
		}},
	})
	if err != nil {
		return 0, fmt.Errorf("capacity: %w", err)
	}
	if r.Total.Ops == 0 || r.Total.Errors+r.Total.Rejected+r.Total.Busy > 0 {
		return 0, fmt.Errorf("capacity: %d SETs completed, %d errors, %d rejected, %d busy %v",
			r.Total.Ops, r.Total.Errors, r.Total.Rejected, r.Total.Busy, r.Total.ErrorSamples)
	}
	return r.Total.OpsPerSec(), nil
}

// apply is ApplyBucket as the admin user.
func (o *SweepOptions) apply(ctx context.Context, name string, settings map[string]any) error {
	admin := o.Point
	admin.User, admin.Password = o.AdminUser, o.AdminPassword
	return ApplyBucket(ctx, &admin, name, settings)
}

// ApplyBucket creates bucket name with settings (CREATE_BUCKET, JSON value),
// or, if it exists (0x02), applies them with SetBucketThrottleProperties
// (0x2a), on a connection to p.Addr authenticated as p.User.
func ApplyBucket(ctx context.Context, p *OpenLoopOptions, name string, settings map[string]any) error {
	js, err := json.Marshal(settings)
	if err != nil {
		return fmt.Errorf("%w: settings of %s: %w", ErrBadSpec, name, err)
	}
	c, err := dialAdmin(ctx, p)
	if err != nil {
		return err
	}
	defer c.nc.Close()
	res, err := c.call(mc.OpCreateBucket, []byte(name), js)
	if err != nil {
		return fmt.Errorf("CREATE_BUCKET %s: %w", name, err)
	}
	if res.Status == mc.StatusKeyExists {
		if res, err = c.call(mc.OpSetBucketThrottle, []byte(name), js); err != nil {
			return fmt.Errorf("SET_BUCKET_THROTTLE_PROPERTIES %s: %w", name, err)
		}
	}
	if res.Status != mc.StatusOK {
		return fmt.Errorf("%w: %s %s %s: %s", ErrHandshake, res.Opcode, name, js, describe(&res))
	}
	return nil
}

// dialAdmin connects, negotiates HELLO and authenticates, without selecting a
// bucket.
func dialAdmin(ctx context.Context, p *OpenLoopOptions) (*client, error) {
	d := net.Dialer{Timeout: p.DialTimeout}
	nc, err := d.DialContext(ctx, "tcp", p.Addr)
	if err != nil {
		return nil, fmt.Errorf("admin connection: %w", err)
	}
	c := &client{nc: nc, rbuf: make([]byte, 64<<10)}
	_ = nc.SetDeadline(time.Now().Add(p.DialTimeout))
	err = c.hello(false)
	if err == nil && p.User != "" {
		err = c.expectOK(mc.OpSASLAuth, []byte("PLAIN"), []byte("\x00"+p.User+"\x00"+p.Password))
	}
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("admin connection: %w", err)
	}
	return c, nil
}

// pointsAt returns the points run at load l, gate off first.
func (r *SweepResult) pointsAt(l float64) []*SweepPoint {
	var out []*SweepPoint
	for i := range r.Points {
		if r.Points[i].Load == l {
			out = append(out, &r.Points[i])
		}
	}
	slices.SortStableFunc(out, func(a, b *SweepPoint) int { return a.Percentile - b.Percentile })
	return out
}
