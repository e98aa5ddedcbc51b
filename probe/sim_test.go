package probe

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// The workload simulator runs the prober against a synthetic node for many intervals of
// simulated time and checks where it settles. Each pool's throughput depends on the
// number of its commands in flight c by a parabola that peaks at cOpt:
//
//	throughput(c) = peak · max(floor, 1 − ((c − cOpt)/cOpt)²)
//
// multiplied by deterministic noise of ±noise from a seeded generator. Clients keep
// demand commands per pool in flight (0: unbounded, an overload), so c = min(demand,
// pool size) and the pool's peak use is c: tickets are exhausted exactly when demand
// reaches the pool size.

const (
	simInterval = 100 * time.Millisecond
	simFloor    = 0.02 // throughput never drops below 2% of peak
	simNoise    = 0.01 // ±0.5% measurement noise
)

// poolModel is one pool's workload at some interval.
type poolModel struct {
	peak   float64 // commands per second at cOpt
	cOpt   float64 // concurrency of peak throughput
	demand int     // commands the clients keep in flight; 0 = unbounded
}

func (m poolModel) inFlight(size int) int {
	if m.demand > 0 {
		return min(m.demand, size)
	}
	return size
}

func (m poolModel) throughput(c int) float64 {
	x := (float64(c) - m.cOpt) / m.cOpt
	return m.peak * max(simFloor, 1-x*x)
}

// scenario is one simulated run.
type scenario struct {
	name       string
	gomaxprocs int                   // sets the prober's initial concurrency
	intervals  int                   // how long to run
	model      func(i int) poolModel // the workload of both pools at interval i
	// From interval settleBy on, every stable size of each pool must be within 20% of
	// target and the stable sizes must span at most one step.
	settleBy int
	target   float64
}

// simPoint is the state after one interval.
type simPoint struct {
	read, write int
	state       string
	throughput  float64
}

// simulate runs a scenario and returns the trajectory and the prober's final stats.
func simulate(tb testing.TB, sc scenario, seed uint64) ([]simPoint, Stats) {
	tb.Helper()
	p, err := New(Options{GOMAXPROCS: sc.gomaxprocs})
	if err != nil {
		tb.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(seed, 0x6b7664))
	now := time.Unix(0, 0)
	var finished float64
	p.Probe(Sample{Now: now})
	traj := make([]simPoint, 0, sc.intervals)
	for i := range sc.intervals {
		m := sc.model(i)
		read, write := p.Sizes()
		cr, cw := m.inFlight(read), m.inFlight(write)
		noise := 1 + simNoise*(2*rng.Float64()-1)
		tp := (m.throughput(cr) + m.throughput(cw)) * noise
		finished += tp * simInterval.Seconds()
		now = now.Add(simInterval)
		r, w := p.Probe(Sample{Now: now, Finished: int64(finished), ReadPeak: cr, WritePeak: cw})
		traj = append(traj, simPoint{read: r, write: w, state: p.Stats().State, throughput: tp})
	}
	return traj, p.Stats()
}

// logTrajectory prints the stable sizes whenever they change and every 10 s of
// simulated time, with the throughput of the following interval, run at those sizes.
func logTrajectory(t *testing.T, traj []simPoint) {
	t.Helper()
	var b strings.Builder
	every := int(10 * time.Second / simInterval)
	lastR, lastW := -1, -1
	for i, pt := range traj {
		if pt.state != "stable" || (pt.read == lastR && pt.write == lastW && (i+1)%every != 0) {
			continue
		}
		lastR, lastW = pt.read, pt.write
		fmt.Fprintf(&b, "\n  t=%6.1fs read=%3d write=%3d %7.0f ops/s",
			float64(i+1)*simInterval.Seconds(), pt.read, pt.write, traj[min(i+1, len(traj)-1)].throughput)
	}
	t.Log(b.String())
}

// settled checks that from settleBy on every stable size is within 20% of target and the
// stable sizes of each pool span at most one step. It returns the range seen.
func settled(traj []simPoint, settleBy int, target float64) (lo, hi int, err error) {
	lo, hi = math.MaxInt, 0
	for i := settleBy; i < len(traj); i++ {
		pt := traj[i]
		if pt.state != "stable" {
			continue // a probe in progress: its sizes are a step off by design
		}
		for _, size := range []int{pt.read, pt.write} {
			lo, hi = min(lo, size), max(hi, size)
			if math.Abs(float64(size)-target) > 0.2*target {
				return lo, hi, fmt.Errorf("interval %d: stable size %d not within 20%% of %.0f", i, size, target)
			}
		}
	}
	step := max(1, int(math.Round(DefaultStep*target)))
	if hi-lo > step {
		return lo, hi, fmt.Errorf("stable sizes span [%d, %d], more than one step (%d)", lo, hi, step)
	}
	return lo, hi, nil
}

func overload(cOpt float64) poolModel { return poolModel{peak: 50000, cOpt: cOpt} }

// The scenarios of the brief. GOMAXPROCS 2 starts the overload runs at the floor, 2·Min
// = 8 tickets (4 per pool), below the optimum, where MongoDB's default expects to start.
var simScenarios = []scenario{
	{
		name: "overload, cOpt 10", gomaxprocs: 2, intervals: 600,
		model:    func(int) poolModel { return overload(10) },
		settleBy: 200, target: 10,
	},
	{
		// cOpt jumps at t = 60 s; the prober has 100 s to follow before it is checked.
		name: "overload, cOpt 10 then 100", gomaxprocs: 2, intervals: 2400,
		model: func(i int) poolModel {
			if i < 600 {
				return overload(10)
			}
			return overload(100)
		},
		settleBy: 1600, target: 100,
	},
	{
		// 10 commands per pool in flight, cOpt 50, pools start at 16: tickets are never
		// exhausted, so the prober never probes up; it probes down until a smaller pool
		// would cut throughput, and settles just above the demand, not at cOpt, which
		// the clients never offer.
		name: "demand-limited below cOpt", gomaxprocs: 16, intervals: 1200,
		model:    func(int) poolModel { return poolModel{peak: 50000, cOpt: 50, demand: 10} },
		settleBy: 300, target: 10,
	},
}

func TestSimulate(t *testing.T) {
	for _, sc := range simScenarios {
		t.Run(sc.name, func(t *testing.T) {
			for seed := uint64(1); seed <= 20; seed++ {
				traj, st := simulate(t, sc, seed)
				if seed == 1 {
					logTrajectory(t, traj)
				}
				lo, hi, err := settled(traj, sc.settleBy, sc.target)
				if err != nil {
					t.Fatalf("seed %d: %v", seed, err)
				}
				if seed == 1 {
					t.Logf("settled by t=%.1fs in [%d, %d] per pool (target %.0f); %+v",
						settleTime(traj, sc.target).Seconds(), lo, hi, sc.target, st)
				}
				if m := sc.model(0); m.demand > 0 {
					checkDemandLimited(t, seed, traj, st, m.demand)
				}
			}
		})
	}
}

// checkDemandLimited: with demand below the pool sizes the prober never probes up, and
// its stable sizes never drop below the demand (it never throttles the clients).
func checkDemandLimited(t *testing.T, seed uint64, traj []simPoint, st Stats, demand int) {
	t.Helper()
	if st.TimesProbedUp != 0 {
		t.Fatalf("seed %d: %d probes up with tickets never exhausted", seed, st.TimesProbedUp)
	}
	for i, pt := range traj {
		if pt.state == "stable" && min(pt.read, pt.write) < demand {
			t.Fatalf("seed %d, interval %d: stable size %d/%d below demand %d", seed, i, pt.read, pt.write, demand)
		}
	}
}

// settleTime returns the simulated time after which every stable size stays within 20%
// of target.
func settleTime(traj []simPoint, target float64) time.Duration {
	last := -1
	for i, pt := range traj {
		if pt.state == "stable" && (math.Abs(float64(pt.read)-target) > 0.2*target ||
			math.Abs(float64(pt.write)-target) > 0.2*target) {
			last = i
		}
	}
	return time.Duration(last+1) * simInterval
}

// TestSimulateKnownLimitation documents the seed's limitation (see the package
// comment): under overload a prober that starts above the optimum only ever probes up,
// every probe fails, and it stays where it started, here 16 tickets per pool against an
// optimum of 10, at 64% of the best throughput. A change that lets the prober come down
// must update this test.
func TestSimulateKnownLimitation(t *testing.T) {
	sc := scenario{gomaxprocs: 16, intervals: 600, model: func(int) poolModel { return overload(10) }}
	traj, st := simulate(t, sc, 1)
	last := traj[len(traj)-1]
	t.Logf("final %d/%d, %.0f ops/s; %+v", last.read, last.write, last.throughput, st)
	if last.read != 16 || last.write != 16 || st.TimesIncreased != 0 || st.TimesProbedDown != 0 {
		t.Fatalf("prober left 16/16 (now %d/%d, %+v): the limitation is gone; update the package comment and this test",
			last.read, last.write, st)
	}
}

// BenchmarkSimulate runs the "cOpt 10 then 100" scenario and reports how long, in
// simulated seconds after the jump, the prober took to settle within 20% of 100.
func BenchmarkSimulate(b *testing.B) {
	sc := simScenarios[1]
	var traj []simPoint
	b.ReportAllocs()
	for b.Loop() {
		traj, _ = simulate(b, sc, 1)
	}
	jump := 600 * simInterval
	b.ReportMetric((settleTime(traj, sc.target) - jump).Seconds(), "settle-s")
	b.ReportMetric(float64(traj[len(traj)-1].read), "final-read-tickets")
}
