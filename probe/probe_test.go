package probe

import (
	"errors"
	"math"
	"testing"
	"time"
)

// harness drives a Prober the way MongoDB's throughput_probing_test.cpp drives its
// ThroughputProbing: a fake clock advanced by 1 ms per step, a finished-commands
// counter and per-pool peaks set by the test, and the first step a no-op.
type harness struct {
	t    *testing.T
	p    *Prober
	now  time.Time
	prev Stats // stats before the last step
}

func newHarness(t *testing.T, o Options) *harness {
	t.Helper()
	p, err := New(o)
	if err != nil {
		t.Fatalf("New(%+v): %v", o, err)
	}
	h := &harness{t: t, p: p, now: time.Unix(1000, 0)}
	r, w := p.Sizes()
	if gr, gw := p.Probe(Sample{Now: h.now}); gr != r || gw != w {
		t.Fatalf("first sample changed sizes %d/%d to %d/%d", r, w, gr, gw)
	}
	return h
}

// step advances the clock by 1 ms and probes with the given counters.
func (h *harness) step(finished int64, readPeak, writePeak int) (read, write int) {
	h.prev = h.p.Stats()
	h.now = h.now.Add(time.Millisecond)
	return h.p.Probe(Sample{Now: h.now, Finished: finished, ReadPeak: readPeak, WritePeak: writePeak})
}

// delta returns how much the counters moved in the last step.
func (h *harness) delta() Stats {
	s := h.p.Stats()
	return Stats{
		TimesProbedStable:    s.TimesProbedStable - h.prev.TimesProbedStable,
		TimesProbedUp:        s.TimesProbedUp - h.prev.TimesProbedUp,
		TimesProbedDown:      s.TimesProbedDown - h.prev.TimesProbedDown,
		TimesIncreased:       s.TimesIncreased - h.prev.TimesIncreased,
		TimesDecreased:       s.TimesDecreased - h.prev.TimesDecreased,
		TotalAmountIncreased: s.TotalAmountIncreased - h.prev.TotalAmountIncreased,
		TotalAmountDecreased: s.TotalAmountDecreased - h.prev.TotalAmountDecreased,
	}
}

// expectSizes fails unless the pools are r and w.
func (h *harness) expectSizes(what string, r, w int) {
	h.t.Helper()
	if gr, gw := h.p.Sizes(); gr != r || gw != w {
		h.t.Fatalf("%s: sizes %d/%d, want %d/%d", what, gr, gw, r, w)
	}
}

// expectDelta fails unless the last step moved the counters exactly as want says.
func (h *harness) expectDelta(what string, want Stats) {
	h.t.Helper()
	if got := h.delta(); got != want {
		h.t.Fatalf("%s: counters moved by %+v, want %+v", what, got, want)
	}
}

func TestProbeUpSucceeds(t *testing.T) {
	h := newHarness(t, Options{Initial: 64})
	h.expectSizes("initial", 32, 32)

	// Read tickets exhausted: stable, then probe up by 10% of 64.
	h.step(1, 32, 0)
	h.expectSizes("probe up", 35, 35)
	h.expectDelta("stable", Stats{TimesProbedStable: 1})

	// Throughput rises: stable moves to 0.2·70 + 0.8·64 = 65.2, between the two.
	h.step(3, 0, 0)
	h.expectSizes("after success", 33, 33)
	h.expectDelta("probe up", Stats{TimesProbedUp: 1, TimesIncreased: 1, TotalAmountIncreased: 2})
	if got := h.p.Stats().StableConcurrency; math.Abs(got-65.2) > 1e-9 {
		t.Fatalf("StableConcurrency = %v, want 65.2", got)
	}
}

func TestProbeUpFails(t *testing.T) {
	h := newHarness(t, Options{Initial: 64})
	h.step(1, 32, 0)
	h.expectSizes("probe up", 35, 35)

	// Throughput stays at 1 per ms: back to the stable sizes.
	h.step(2, 0, 0)
	h.expectSizes("after failure", 32, 32)
	h.expectDelta("probe up", Stats{TimesProbedUp: 1})
	if got := h.p.Stats().StableConcurrency; got != 64 {
		t.Fatalf("StableConcurrency = %v, want 64", got)
	}
}

func TestProbeDownSucceeds(t *testing.T) {
	h := newHarness(t, Options{Initial: 64})
	// Not exhausted, busy above Min: probe down to 0.9·64 = 57.6 → 29 each.
	h.step(1, 31, 0)
	h.expectSizes("probe down", 29, 29)
	h.expectDelta("stable", Stats{TimesProbedStable: 1})

	// Throughput rises: stable moves to 0.2·58 + 0.8·64 = 62.8 → 31 each.
	h.step(3, 0, 0)
	h.expectSizes("after success", 31, 31)
	h.expectDelta("probe down", Stats{TimesProbedDown: 1, TimesDecreased: 1, TotalAmountDecreased: 2})
}

func TestProbeDownFails(t *testing.T) {
	h := newHarness(t, Options{Initial: 64})
	h.step(1, 31, 0)
	h.expectSizes("probe down", 29, 29)
	h.step(2, 0, 0)
	h.expectSizes("after failure", 32, 32)
	h.expectDelta("probe down", Stats{TimesProbedDown: 1})
}

// TestExhaustedAtMaxProbesDown: at Max a probe up is impossible; MongoDB and the seed's
// diagram ("or at maximum") probe down instead. Kept: it is the only way out of Max.
func TestExhaustedAtMaxProbesDown(t *testing.T) {
	h := newHarness(t, Options{Initial: 2 * DefaultMax})
	h.expectSizes("initial", 128, 128)
	h.step(1, 128, 128)
	h.expectDelta("stable", Stats{TimesProbedStable: 1})
	if st := h.p.Stats().State; st != "down" {
		t.Fatalf("State = %q, want down", st)
	}
	h.expectSizes("probe down", 115, 115) // round(256·0.9/2) = 115
}

func TestNoProbeDownAtMin(t *testing.T) {
	h := newHarness(t, Options{Initial: 2 * DefaultMin})
	h.step(1, 3, 3)
	h.expectSizes("stable at min", 4, 4)
	h.expectDelta("stable", Stats{TimesProbedStable: 1})
	if st := h.p.Stats().State; st != "stable" {
		t.Fatalf("State = %q, want stable", st)
	}
}

// TestNoProbeDownWhileUseAtMin: with peak use at or below Min a smaller pool could not
// change anything, so the prober does not probe down even with large pools (MongoDB's
// condition, chosen over the seed's comparison of concurrency with Min).
func TestNoProbeDownWhileUseAtMin(t *testing.T) {
	h := newHarness(t, Options{Initial: 64})
	for i := int64(1); i <= 10; i++ {
		h.step(i*100+i%3, DefaultMin, 1)
		h.expectSizes("light load", 32, 32)
	}
	if s := h.p.Stats(); s.TimesProbedDown != 0 || s.TimesProbedStable != 10 {
		t.Fatalf("stats %+v: want 10 stable steps and no probe", s)
	}
}

// TestStepAtLeastOneTicketAtMin is MongoDB's StepSizeNonZero: at 4+4, a 10% step rounds
// to nothing, so the probe still moves each pool by one ticket; with EMAWeight 0.3 it
// takes two successful probes before the stable sizes grow.
func TestStepAtLeastOneTicketAtMin(t *testing.T) {
	h := newHarness(t, Options{Initial: 2 * DefaultMin, EMAWeight: 0.3})
	h.step(1, 4, 0)
	h.expectSizes("first probe up", 5, 5)
	h.step(3, 0, 0) // success: stable 0.3·10 + 0.7·8 = 8.6 → round(4.3) = 4
	h.expectSizes("first success", 4, 4)
	h.expectDelta("first success", Stats{TimesProbedUp: 1, TimesIncreased: 1})

	h.step(4, 4, 0) // stable: round(8.6·1.1/2) = round(4.73) = 5
	h.expectSizes("second probe up", 5, 5)
	h.step(6, 0, 0) // success: stable 0.3·10 + 0.7·8.6 = 9.02 → round(4.51) = 5
	h.expectSizes("second success", 5, 5)
	h.expectDelta("second success", Stats{TimesProbedUp: 1, TimesIncreased: 1, TotalAmountIncreased: 2})
}

// TestReadWriteRatioChangedAtRunTime is MongoDB's ReadWriteRatio test: the new ratio
// applies at the next probe, not at once.
func TestReadWriteRatioChangedAtRunTime(t *testing.T) {
	h := newHarness(t, Options{Initial: 64})
	h.p.SetReadWriteRatio(0.67)
	h.expectSizes("ratio set", 32, 32)

	// Writes exhausted: probe up with the new ratio: 70.4·0.67 → 47, 70.4·0.33 → 23.
	h.step(1, 0, 32)
	h.expectSizes("probe up", 47, 23)

	// Success: stable 0.2·70 + 0.8·64 = 65.2 → 43.68 → 44 reads, 21.52 → 22 writes.
	h.step(3, 0, 0)
	h.expectSizes("after success", 44, 22)
	h.expectDelta("probe up", Stats{TimesProbedUp: 1, TimesIncreased: 1, TotalAmountIncreased: 2})
}

func TestReadHeavy(t *testing.T) {
	o := Options{Initial: 16, ReadWriteRatio: 0.9}
	t.Run("write pool clamped at min", func(t *testing.T) {
		h := newHarness(t, o)
		h.expectSizes("initial", 14, 4) // 1.6 writes → Min
	})
	t.Run("increasing moves the small pool by one", func(t *testing.T) {
		h := newHarness(t, o)
		h.step(1, 0, 4) // writes exhausted
		h.expectSizes("probe up", 16, 5)
	})
	t.Run("decreasing keeps the pool at min", func(t *testing.T) {
		// MongoDB's quirk takes the write pool to Min−1 = 3 here. Pools stay in
		// [Min, Max]: the write pool stays at 4 while the read pool shrinks.
		h := newHarness(t, o)
		h.step(1, 13, 0)
		h.expectSizes("probe down", 13, 4)
	})
}

func TestWriteHeavy(t *testing.T) {
	o := Options{Initial: 16, ReadWriteRatio: 0.1}
	t.Run("read pool clamped at min", func(t *testing.T) {
		h := newHarness(t, o)
		h.expectSizes("initial", 4, 14)
	})
	t.Run("increasing moves the small pool by one", func(t *testing.T) {
		h := newHarness(t, o)
		h.step(1, 4, 0) // reads exhausted
		h.expectSizes("probe up", 5, 16)
	})
	t.Run("decreasing keeps the pool at min", func(t *testing.T) {
		h := newHarness(t, o) // MongoDB: reads to 3.
		h.step(1, 0, 13)
		h.expectSizes("probe down", 4, 13)
	})
}

// TestProbeUpKeepsPoolAtMax: the write pool is exhausted below Max, the read pool sits
// at Max. MongoDB's nudge would take the read pool to Max+1; here it stays at Max.
func TestProbeUpKeepsPoolAtMax(t *testing.T) {
	h := newHarness(t, Options{Max: 16, Initial: 24, ReadWriteRatio: 0.75})
	h.expectSizes("initial", 16, 6)
	h.step(1, 16, 6)
	h.expectSizes("probe up", 16, 7)
}

// TestPeakDuringProbeCounts: the peak since the last stable step includes the probe's
// interval, as MongoDB resets its peak only in the stable step.
func TestPeakDuringProbeCounts(t *testing.T) {
	h := newHarness(t, Options{Initial: 64})
	h.step(1, 31, 0) // probe down to 29/29
	h.step(2, 29, 0) // fails, back to 32/32; peak 29 seen during the probe
	h.step(3, 0, 0)  // stable: peak 29 < 32, not exhausted, busy: probe down again
	h.expectSizes("probe down", 29, 29)
}

func TestProbeIgnoresUnusableSamples(t *testing.T) {
	h := newHarness(t, Options{Initial: 64})
	h.step(100, 32, 0) // probe up to 35/35
	h.expectSizes("probe up", 35, 35)

	// No time passed: nothing happens, the next sample measures from the previous one.
	h.p.Probe(Sample{Now: h.now, Finished: 500})
	h.expectSizes("zero elapsed", 35, 35)
	// The counter went backwards (the owner restarted it): re-base only.
	h.step(10, 0, 0)
	h.expectSizes("counter reset", 35, 35)
	if s := h.p.Stats(); s.TimesProbedUp != 0 || s.State != "up" {
		t.Fatalf("stats %+v: want the probe still pending", s)
	}
	// Measured from the new base: 2 commands in 1 ms, below the 100 per ms baseline.
	h.step(12, 0, 0)
	h.expectSizes("probe judged", 32, 32)
}

func TestSetReadWriteRatioClamps(t *testing.T) {
	h := newHarness(t, Options{Initial: 64})
	for _, tt := range []struct{ in, want float64 }{{-1, 0}, {2, 1}, {0.3, 0.3}, {math.NaN(), 0.3}} {
		h.p.SetReadWriteRatio(tt.in)
		if got := h.p.opts.ReadWriteRatio; got != tt.want {
			t.Errorf("SetReadWriteRatio(%v): ratio %v, want %v", tt.in, got, tt.want)
		}
	}
	h.p.SetReadWriteRatio(1)
	h.step(1, 32, 0)
	h.expectSizes("all reads", 70, DefaultMin) // 64·1.1 = 70.4 reads, 0 writes → Min
}

func TestEnsureDefaults(t *testing.T) {
	tests := []struct {
		name        string
		in          Options
		wantInitial int
	}{
		{"no GOMAXPROCS: floor 2·Min", Options{}, 8},
		{"2·GOMAXPROCS", Options{GOMAXPROCS: 12}, 24},
		{"clamped up to 2·Min", Options{GOMAXPROCS: 1}, 8},
		{"clamped down to 2·Max", Options{GOMAXPROCS: 1000}, 256},
		{"custom bounds", Options{Min: 2, Max: 10, GOMAXPROCS: 8}, 16},
		{"explicit Initial kept", Options{Initial: 40, GOMAXPROCS: 8}, 40},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := tt.in
			o.EnsureDefaults()
			if o.Initial != tt.wantInitial {
				t.Errorf("Initial = %d, want %d", o.Initial, tt.wantInitial)
			}
			if err := o.Validate(); err != nil {
				t.Errorf("Validate after EnsureDefaults: %v", err)
			}
		})
	}
	var o Options
	o.EnsureDefaults()
	want := Options{Min: 4, Max: 128, Initial: 8, ReadWriteRatio: 0.5, EMAWeight: 0.2, Step: 0.1, Interval: 100 * time.Millisecond}
	if o != want {
		t.Fatalf("defaults %+v, want %+v", o, want)
	}
}

func TestValidate(t *testing.T) {
	valid := func() Options { o := Options{}; o.EnsureDefaults(); return o }
	tests := []struct {
		name   string
		modify func(*Options)
	}{
		{"Min negative", func(o *Options) { o.Min = -1 }},
		{"Max below Min", func(o *Options) { o.Max = 3 }},
		{"Initial below 2·Min", func(o *Options) { o.Initial = 7 }},
		{"Initial above 2·Max", func(o *Options) { o.Initial = 257 }},
		{"ratio above 1", func(o *Options) { o.ReadWriteRatio = 1.5 }},
		{"ratio NaN", func(o *Options) { o.ReadWriteRatio = math.NaN() }},
		{"EMAWeight above 1", func(o *Options) { o.EMAWeight = 1.1 }},
		{"EMAWeight negative", func(o *Options) { o.EMAWeight = -0.2 }},
		{"Step 1", func(o *Options) { o.Step = 1 }},
		{"Interval negative", func(o *Options) { o.Interval = -time.Second }},
		{"GOMAXPROCS negative", func(o *Options) { o.GOMAXPROCS = -1 }},
	}
	if err := (&Options{}).Validate(); !errors.Is(err, ErrInvalidOptions) {
		t.Errorf("zero Options without EnsureDefaults: Validate() = %v, want ErrInvalidOptions", err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := valid()
			tt.modify(&o)
			err := o.Validate()
			if !errors.Is(err, ErrInvalidOptions) {
				t.Fatalf("Validate() = %v, want ErrInvalidOptions", err)
			}
			if _, err := New(o); !errors.Is(err, ErrInvalidOptions) {
				t.Fatalf("New() error = %v, want ErrInvalidOptions", err)
			}
		})
	}
}

// BenchmarkProbe measures one step of the state machine, alternating stable and probe
// steps under a load that keeps the pools exhausted.
func BenchmarkProbe(b *testing.B) {
	p, err := New(Options{GOMAXPROCS: 8})
	if err != nil {
		b.Fatal(err)
	}
	now := time.Unix(0, 0)
	var finished int64
	b.ReportAllocs()
	for b.Loop() {
		now = now.Add(DefaultInterval)
		finished += 1000
		r, w := p.Sizes()
		p.Probe(Sample{Now: now, Finished: finished, ReadPeak: r, WritePeak: w})
	}
}

func TestProbeDoesNotAllocate(t *testing.T) {
	p, err := New(Options{GOMAXPROCS: 8})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(0, 0)
	var finished int64
	allocs := testing.AllocsPerRun(100, func() {
		now = now.Add(DefaultInterval)
		finished += 1000
		r, w := p.Sizes()
		p.Probe(Sample{Now: now, Finished: finished, ReadPeak: r, WritePeak: w})
		_ = p.Stats()
	})
	if allocs != 0 {
		t.Fatalf("Probe allocates %.1f times per step, want 0", allocs)
	}
}
