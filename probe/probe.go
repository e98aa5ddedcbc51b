package probe

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// Errors returned by this package. Compare with errors.Is.
var (
	// ErrInvalidOptions is wrapped by Validate and New; the message names the field.
	ErrInvalidOptions = errors.New("probe: invalid options")
)

// Defaults, MongoDB's (throughputProbing* server parameters).
const (
	DefaultMin            = 4
	DefaultMax            = 128
	DefaultReadWriteRatio = 0.5
	DefaultEMAWeight      = 0.2
	DefaultStep           = 0.1
	DefaultInterval       = 100 * time.Millisecond
)

// Options configure a Prober. Zero fields take the defaults in EnsureDefaults. Min, Max
// bound each pool; Initial is a total for both pools.
type Options struct {
	// Min and Max bound each pool's size (default 4 and 128).
	Min, Max int
	// Initial is the initial total concurrency of both pools (default 2·GOMAXPROCS,
	// clamped to [2·Min, 2·Max]).
	Initial int
	// ReadWriteRatio is the read pool's share of the total, in [0, 1] (default 0.5,
	// which gives 1:1). Zero means the default; a read pool at Min is had with a small
	// ratio such as 0.01.
	ReadWriteRatio float64
	// EMAWeight is the weight of a successful probe's total in the stable concurrency's
	// moving average, in (0, 1] (default 0.2).
	EMAWeight float64
	// Step is the relative size of a probe, in (0, 1) (default 0.1: ±10%).
	Step float64
	// Interval is how often the owner calls Probe (default 100 ms). The prober measures
	// throughput over the actual time between samples; Interval is for the owner's
	// ticker and for reporting.
	Interval time.Duration
	// GOMAXPROCS is the caller's runtime.GOMAXPROCS(0), used only to derive Initial.
	// Zero leaves Initial at its floor, 2·Min.
	GOMAXPROCS int
}

// EnsureDefaults sets every zero field to its default.
func (o *Options) EnsureDefaults() {
	if o.Min == 0 {
		o.Min = DefaultMin
	}
	if o.Max == 0 {
		o.Max = max(DefaultMax, o.Min)
	}
	if o.Initial == 0 {
		o.Initial = min(max(2*o.GOMAXPROCS, 2*o.Min), 2*o.Max)
	}
	if o.ReadWriteRatio == 0 {
		o.ReadWriteRatio = DefaultReadWriteRatio
	}
	if o.EMAWeight == 0 {
		o.EMAWeight = DefaultEMAWeight
	}
	if o.Step == 0 {
		o.Step = DefaultStep
	}
	if o.Interval == 0 {
		o.Interval = DefaultInterval
	}
}

// Validate reports the first invalid field, wrapping ErrInvalidOptions. Call it after
// EnsureDefaults.
func (o *Options) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidOptions, fmt.Sprintf(format, args...))
	}
	switch {
	case o.Min < 1:
		return bad("Min %d < 1", o.Min)
	case o.Max < o.Min:
		return bad("Max %d < Min %d", o.Max, o.Min)
	case o.Initial < 2*o.Min || o.Initial > 2*o.Max:
		return bad("Initial %d outside [2·Min, 2·Max] = [%d, %d]", o.Initial, 2*o.Min, 2*o.Max)
	case !(o.ReadWriteRatio >= 0 && o.ReadWriteRatio <= 1):
		return bad("ReadWriteRatio %v outside [0, 1]", o.ReadWriteRatio)
	case !(o.EMAWeight > 0 && o.EMAWeight <= 1):
		return bad("EMAWeight %v outside (0, 1]", o.EMAWeight)
	case !(o.Step > 0 && o.Step < 1):
		return bad("Step %v outside (0, 1)", o.Step)
	case o.Interval <= 0:
		return bad("Interval %v <= 0", o.Interval)
	case o.GOMAXPROCS < 0:
		return bad("GOMAXPROCS %d < 0", o.GOMAXPROCS)
	}
	return nil
}

// A Sample is what the prober's owner observed at one interval.
type Sample struct {
	// Now is when the sample was taken. Throughput is measured over the time since the
	// previous sample.
	Now time.Time
	// Finished is the total number of commands finished so far, both pools together (a
	// monotonic counter; the prober takes the difference from the previous sample).
	Finished int64
	// ReadPeak and WritePeak are the highest number of tickets in use at once in each
	// pool since the previous sample. The prober keeps the maximum since its last
	// stable step itself.
	ReadPeak, WritePeak int
}

// Stats are the prober's counters (MongoDB's names) and current state.
type Stats struct {
	// TimesProbedStable, Up and Down count the steps taken in each state.
	TimesProbedStable, TimesProbedUp, TimesProbedDown int64
	// TimesIncreased and TimesDecreased count probes that raised throughput and so
	// moved the stable concurrency up or down (even when the rounded pool sizes did
	// not change yet).
	TimesIncreased, TimesDecreased int64
	// TotalAmountIncreased and TotalAmountDecreased sum, in tickets, how much those
	// probes changed the total of both pools' stable sizes.
	TotalAmountIncreased, TotalAmountDecreased int64
	// ReadTotal and WriteTotal are the pools' current sizes.
	ReadTotal, WriteTotal int
	// StableConcurrency is the stable total concurrency (before rounding and
	// clamping); StableThroughput the throughput, in commands per second, last
	// measured at it.
	StableConcurrency, StableThroughput float64
	// State is "stable", "up" or "down": the state of the next step.
	State string
}

// state is the prober's next step.
type state uint8

const (
	stateStable state = iota // measure a baseline, then probe up, down or stay
	stateUp                  // judge a probe up
	stateDown                // judge a probe down
)

func (s state) String() string {
	switch s {
	case stateUp:
		return "up"
	case stateDown:
		return "down"
	}
	return "stable"
}

// A Prober sizes the read and write ticket pools by throughput probing: one step of its
// state machine per Sample, once per interval.
//
// Each step measures throughput (commands finished per second since the previous
// sample). In the stable state it records that as the baseline and, if a pool below Max
// was exhausted, probes up by Step; if not and a pool's peak use was above Min, probes
// down by Step. The next step keeps the probe (moving the stable concurrency toward it
// by EMAWeight) only if throughput rose above the baseline, and returns to the stable
// sizes either way. Pool sizes always stay in [Min, Max]. The package comment gives the
// rounding rules and the decisions made where MongoDB has quirks.
//
// The first sample, a sample whose Finished went backwards, and a sample whose Now is
// not after the previous one only (re)start the measurement and change nothing.
//
// A Prober is not safe for concurrent use; one owner calls its methods.
type Prober struct {
	opts  Options // validated; ReadWriteRatio changes through SetReadWriteRatio
	state state

	read, write       int     // current pool sizes
	stableConcurrency float64 // total of both pools the prober returns to
	stableThroughput  float64 // commands/s measured at the stable sizes

	// Peak use per pool since the last stable step.
	readPeak, writePeak int

	started      bool      // a first sample has been seen
	lastNow      time.Time // Now of the previous sample
	lastFinished int64     // Finished of the previous sample

	stats Stats // counters only; the rest is filled in by Stats()
}

// New returns a prober in the stable state with pools sized from o.Initial. Zero fields
// of o take their defaults.
func New(o Options) (*Prober, error) {
	o.EnsureDefaults()
	if err := o.Validate(); err != nil {
		return nil, err
	}
	p := &Prober{opts: o, stableConcurrency: float64(o.Initial)}
	p.read, p.write = p.split(p.stableConcurrency)
	return p, nil
}

// Sizes returns the current read and write pool sizes.
func (p *Prober) Sizes() (read, write int) {
	return p.read, p.write
}

// SetReadWriteRatio sets the read pool's share of the total concurrency. It applies at
// the next probe: pool sizes do not change until then. A ratio outside [0, 1] is
// clamped into it; NaN is ignored.
func (p *Prober) SetReadWriteRatio(r float64) {
	if math.IsNaN(r) {
		return
	}
	p.opts.ReadWriteRatio = min(max(r, 0), 1)
}

// Stats returns the prober's counters and current sizes.
func (p *Prober) Stats() Stats {
	s := p.stats
	s.ReadTotal, s.WriteTotal = p.read, p.write
	s.StableConcurrency, s.StableThroughput = p.stableConcurrency, p.stableThroughput
	s.State = p.state.String()
	return s
}

// Probe takes one step of the state machine with the counters in s and returns the new
// pool sizes, which the caller applies (shrinking never revokes a ticket in use).
func (p *Prober) Probe(s Sample) (read, write int) {
	p.readPeak = max(p.readPeak, s.ReadPeak)
	p.writePeak = max(p.writePeak, s.WritePeak)
	if !p.started || s.Finished < p.lastFinished {
		p.started, p.lastNow, p.lastFinished = true, s.Now, s.Finished
		return p.read, p.write
	}
	elapsed := s.Now.Sub(p.lastNow)
	if elapsed <= 0 {
		// No time has passed (a coarse or stepped clock): wait for the next sample.
		return p.read, p.write
	}
	throughput := float64(s.Finished-p.lastFinished) / elapsed.Seconds()
	p.lastNow, p.lastFinished = s.Now, s.Finished
	switch p.state {
	case stateStable:
		p.probeStable(throughput)
	case stateUp:
		p.judgeProbe(throughput)
		p.stats.TimesProbedUp++
	case stateDown:
		p.judgeProbe(throughput)
		p.stats.TimesProbedDown++
	}
	return p.read, p.write
}

// probeStable records the baseline and starts a probe up or down, or stays.
func (p *Prober) probeStable(throughput float64) {
	p.stableThroughput = throughput
	exhausted := (p.read < p.opts.Max && p.readPeak >= p.read) ||
		(p.write < p.opts.Max && p.writePeak >= p.write)
	busy := p.readPeak > p.opts.Min || p.writePeak > p.opts.Min
	p.readPeak, p.writePeak = 0, 0
	switch {
	case exhausted:
		p.state = stateUp
		p.resize(1+p.opts.Step, +1)
	case busy:
		// Not exhausted, or exhausted only at Max: try a little less.
		p.state = stateDown
		p.resize(1-p.opts.Step, -1)
	}
	p.stats.TimesProbedStable++
}

// judgeProbe ends a probe up or down: if throughput rose above the baseline, it moves
// the stable concurrency toward the probed total by the moving average and counts the
// change. Either way the pools go back to the stable concurrency.
func (p *Prober) judgeProbe(throughput float64) {
	up := p.state == stateUp
	p.state = stateStable
	oldRead, oldWrite := p.split(p.stableConcurrency)
	if !(throughput > p.stableThroughput) {
		p.read, p.write = oldRead, oldWrite
		return
	}
	w := p.opts.EMAWeight
	p.stableConcurrency = float64(p.read+p.write)*w + p.stableConcurrency*(1-w)
	p.stableThroughput = throughput
	p.read, p.write = p.split(p.stableConcurrency)
	change := int64(p.read + p.write - oldRead - oldWrite)
	if up {
		p.stats.TimesIncreased++
		p.stats.TotalAmountIncreased += max(change, 0)
	} else {
		p.stats.TimesDecreased++
		p.stats.TotalAmountDecreased += max(-change, 0)
	}
}

// resize sets the pools to the stable concurrency times factor. A pool whose rounded
// size would not change moves by nudge (one ticket) instead, within [Min, Max].
func (p *Prober) resize(factor float64, nudge int) {
	r, w := p.split(p.stableConcurrency * factor)
	if r == p.read {
		r = p.clamp(r + nudge)
	}
	if w == p.write {
		w = p.clamp(w + nudge)
	}
	p.read, p.write = r, w
}

// split divides a total concurrency into pools by the read/write ratio: each share
// rounded half away from zero, then clamped to [Min, Max].
func (p *Prober) split(total float64) (read, write int) {
	ratio := p.opts.ReadWriteRatio
	return p.clamp(roundInt(total * ratio)), p.clamp(roundInt(total * (1 - ratio)))
}

func (p *Prober) clamp(n int) int {
	return min(max(n, p.opts.Min), p.opts.Max)
}

// roundInt rounds half away from zero into [0, MaxInt32]; callers then clamp to
// [Min, Max].
func roundInt(x float64) int {
	x = math.Round(x)
	switch {
	case x >= math.MaxInt32:
		return math.MaxInt32
	case x <= 0:
		return 0
	}
	return int(x)
}
