package tenant_test

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"kvd/tenant"
)

// SPEC 9: a throttle check on the hot path costs 0 allocations and under
// 100 ns. The benchmarks measure the time; the tests below prove the
// allocations, which unlike speed is a property a unit test may assert.

// benchThrottle returns a node with 16 other buckets and the bucket under
// test. The capacity is so large that every Check passes: "reserved" answers
// at step 1, "freepool" walks all the steps (a finite hard limit included).
func benchThrottle(path string) (*tenant.Throttle, *tenant.BucketThrottle) {
	th := tenant.NewThrottle(1<<60, thrBase)
	for i := range 16 {
		th.Add(fmt.Sprintf("other%d", i), 1666, unl)
	}
	if path == "reserved" {
		return th, th.Add("bench", 1<<50, unl)
	}
	return th, th.Add("bench", 0, 1<<55)
}

func BenchmarkCheck(b *testing.B) {
	for _, path := range []string{"reserved", "freepool"} {
		b.Run(path, func(b *testing.B) {
			th, bt := benchThrottle(path)
			b.ReportAllocs()
			for b.Loop() {
				if !th.Check(bt, 1) {
					b.Fatal("refused")
				}
			}
		})
	}
	b.Run("refused", func(b *testing.B) {
		th := tenant.NewThrottle(1<<40, thrBase)
		bt := th.Add("bench", 0, 0) // hard limit 0: every check refused
		b.ReportAllocs()
		for b.Loop() {
			if th.Check(bt, 1) {
				b.Fatal("admitted")
			}
		}
	})
	b.Run("freepool/parallel", func(b *testing.B) {
		th, bt := benchThrottle("freepool")
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				th.Check(bt, 1)
			}
		})
	})
}

// BenchmarkCheckCharge is the throttle path of a command answered on the
// loop (a resident GET): Check, then Charge at once.
func BenchmarkCheckCharge(b *testing.B) {
	for _, path := range []string{"reserved", "freepool"} {
		b.Run(path, func(b *testing.B) {
			th, bt := benchThrottle(path)
			b.ReportAllocs()
			for b.Loop() {
				if !th.Check(bt, 1) {
					b.Fatal("refused")
				}
				th.Charge(bt, 1, 0)
			}
		})
	}
}

// BenchmarkAdmitCharge is the throttle path of a command that runs on a
// worker: Check and Hold (admit), then Charge and Release once it ran.
func BenchmarkAdmitCharge(b *testing.B) {
	for _, path := range []string{"reserved", "freepool"} {
		b.Run(path, func(b *testing.B) {
			th, bt := benchThrottle(path)
			b.ReportAllocs()
			for b.Loop() {
				h, ok := admit(th, bt, 1)
				if !ok {
					b.Fatal("refused")
				}
				th.Charge(bt, 1, 0)
				h.Release()
			}
		})
	}
	// Every goroutine on the same bucket: the worst case for the shared gauges.
	b.Run("freepool/parallel", func(b *testing.B) {
		th, bt := benchThrottle("freepool")
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if h, ok := admit(th, bt, 1); ok {
					th.Charge(bt, 1, 0)
					h.Release()
				}
			}
		})
	})
}

// BenchmarkTick measures the once-a-second work for a node of 100 buckets.
func BenchmarkTick(b *testing.B) {
	th := tenant.NewThrottle(25000, thrBase)
	for i := range 100 {
		th.Add(fmt.Sprintf("b%d", i), 100, unl).Attach()
	}
	b.ReportAllocs()
	sec := 0
	for b.Loop() {
		sec++
		th.Tick(atMs(1000 * sec))
	}
}

func TestThrottleHotPathDoesNotAllocate(t *testing.T) {
	for _, path := range []string{"reserved", "freepool"} {
		th, bt := benchThrottle(path)
		allocs := testing.AllocsPerRun(1000, func() {
			if h, ok := admit(th, bt, 1); ok {
				th.Charge(bt, 1, 0)
				h.Release()
			}
			th.Charge(bt, 0, 3)
		})
		if allocs != 0 {
			t.Errorf("%s: Admit+Charge+Release allocated %v times per run, want 0", path, allocs)
		}
	}
}

// Tick reuses its scratch space: once a second, no garbage either.
func TestThrottleTickDoesNotAllocate(t *testing.T) {
	th := tenant.NewThrottle(25000, thrBase)
	for i := range 20 {
		th.Add(fmt.Sprintf("b%d", i), 100, unl)
	}
	th.Tick(atMs(1000))
	sec := 1
	allocs := testing.AllocsPerRun(100, func() {
		sec++
		th.Tick(atMs(1000 * sec))
	})
	if allocs != 0 {
		t.Errorf("Tick allocated %v times per second, want 0", allocs)
	}
}

// Admit, Charge and Release from many goroutines while another ticks and changes
// settings: run with -race. Every admitted command is charged exactly once.
func TestThrottleConcurrentUse(t *testing.T) {
	th := tenant.NewThrottle(20000, thrBase)
	bs := []*tenant.BucketThrottle{th.Add("a", 1000, unl), th.Add("b", 0, 5000), th.Add("c", unl, unl)}
	var admitted, clock atomic.Int64
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			b := bs[g%len(bs)]
			b.Attach()
			defer b.Detach()
			for i := range 20000 {
				if g == 7 { // goroutine 7 is Unthrottled
					th.Charge(b, 1, 0)
					admitted.Add(1)
				} else if h, ok := admit(th, b, 1); ok {
					th.Charge(b, 1, 0)
					h.Release()
					admitted.Add(1)
				}
				if i%1000 == 0 {
					_, _ = b.Stats(), th.NextTick(atMs(int(clock.Load())))
				}
			}
		})
	}
	wg.Go(func() {
		for ms := 1; ms <= 10000; ms++ {
			clock.Store(int64(ms))
			th.Tick(atMs(ms))
			if ms%97 == 0 {
				th.SetLimits(bs[1], 0, int64(4000+ms%1000))
				th.SetCapacity(int64(20000 + ms%3000))
				th.Remove(th.Add("tmp", 100, 200))
				_ = th.Stats()
			}
		}
	})
	wg.Wait()
	sum := int64(0)
	for _, b := range bs {
		sum += b.Stats().RU
	}
	if sum != admitted.Load() {
		t.Errorf("buckets were charged %d RU for %d admitted commands", sum, admitted.Load())
	}
	if ticks := th.Stats().Ticks; ticks != 10 {
		t.Errorf("%d ticks over 10 simulated seconds", ticks)
	}
}

// TestRefusedCountsDemand: the units Check refuses are counted (the
// demand a cluster node publishes), those it admits are not.
func TestRefusedCountsDemand(t *testing.T) {
	th := tenant.NewThrottle(1000, thrBase)
	bt := th.Add("b", 0, 5)
	admitted := 0
	for range 10 {
		if th.Check(bt, 2) {
			th.Charge(bt, 2, 0)
			admitted++
		}
	}
	st := bt.Stats()
	if admitted != 2 || st.Refused != 16 || st.RU != 4 {
		t.Fatalf("admitted %d (want 2), refused %d units (want 16), charged %d (want 4)", admitted, st.Refused, st.RU)
	}
}
