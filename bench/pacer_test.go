package bench

import (
	"bytes"
	"math/rand/v2"
	"testing"
	"time"
)

// fakeClock is the time a simulated connection sees; the tests advance it
// by the pacer's delays and by simulated service times.
type fakeClock struct{ now time.Time }

func (c *fakeClock) sleep(d time.Duration) { c.now = c.now.Add(d) }

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// simulate drives p like a connection does: reserve a batch, sleep the
// delay, spend service(i) on it. It returns the send times before until.
func simulate(p *Pacer, clk *fakeClock, batch int, until time.Time, service func(i int) time.Duration) []time.Time {
	var sends []time.Time
	for i := 0; ; i++ {
		clk.sleep(p.Reserve(batch, clk.now))
		if !clk.now.Before(until) {
			return sends
		}
		sends = append(sends, clk.now)
		clk.sleep(service(i))
	}
}

func TestPacerHoldsRateWithoutDrift(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	tests := []struct {
		name    string
		rate    float64
		batch   int
		service func(int) time.Duration
	}{
		{"instant service", 1000, 1, func(int) time.Duration { return 0 }},
		// Service averaging 90% of the interval, sometimes 1.8×: the
		// schedule is absolute, so late sends are made up.
		{"jittery service", 1000, 1, func(int) time.Duration { return time.Duration(rng.Int64N(int64(1800 * time.Microsecond))) }},
		{"batches of 10", 1000, 10, func(int) time.Duration { return 3 * time.Millisecond }},
		{"fractional interval", 3, 1, func(int) time.Duration { return time.Millisecond }},
	}
	for _, tt := range tests {
		clk := &fakeClock{now: t0}
		p := NewPacer(tt.rate, t0, 100*time.Millisecond)
		sends := simulate(&p, clk, tt.batch, t0.Add(10*time.Second), tt.service)
		ops := float64(len(sends) * tt.batch)
		if want := tt.rate * 10; ops < want-float64(tt.batch) || ops > want+float64(tt.batch) {
			t.Errorf("%s: %v ops in 10 s, want %v ± one batch", tt.name, ops, want)
		}
	}
}

func TestPacerDelaysAreAbsolute(t *testing.T) {
	p := NewPacer(100, t0, time.Second) // one op per 10 ms
	if d := p.Reserve(1, t0); d != 0 {
		t.Errorf("first op delayed %v, want 0", d)
	}
	// 3 ms after start, the second op is due at 10 ms: wait 7 ms.
	if d := p.Reserve(1, t0.Add(3*time.Millisecond)); d != 7*time.Millisecond {
		t.Errorf("second op delayed %v, want 7ms", d)
	}
	// Late by 25 ms (due at 20 ms, now 45 ms): no wait, and the ops due at
	// 30 and 40 ms are not delayed either.
	for i := range 3 {
		if d := p.Reserve(1, t0.Add(45*time.Millisecond)); d != 0 {
			t.Errorf("late op %d delayed %v, want 0", i, d)
		}
	}
	if d := p.Reserve(1, t0.Add(45*time.Millisecond)); d != 5*time.Millisecond {
		t.Errorf("op due at 50 ms delayed %v at 45 ms, want 5ms", d)
	}
}

func TestPacerBoundsCatchUp(t *testing.T) {
	const maxLag = 100 * time.Millisecond
	clk := &fakeClock{now: t0}
	p := NewPacer(1000, t0, maxLag)
	stall := 2 * time.Second
	sends := simulate(&p, clk, 1, t0.Add(3*time.Second), func(i int) time.Duration {
		if i == 100 {
			return stall // the 101st op takes 2 s
		}
		return 0
	})
	// After the stall, at most maxLag·rate = 100 ops go out at once.
	resume := sends[101]
	burst := 0
	for _, s := range sends[101:] {
		if s.Equal(resume) {
			burst++
		}
	}
	if burst < 100 || burst > 101 {
		t.Errorf("burst after the stall = %d ops, want 100 (maxLag × rate)", burst)
	}
	// Without the cap the 3 s would hold 3000 ops; with it, the 2 s stall
	// is lost except for 100 ms.
	if n := len(sends); n < 1095 || n > 1105 {
		t.Errorf("%d ops in 3 s with a 2 s stall, want about 1100", n)
	}
}

func TestPacerUnlimited(t *testing.T) {
	p := NewPacer(0, t0, time.Second)
	for i := range 1000 {
		if d := p.Reserve(64, t0.Add(time.Duration(i))); d != 0 {
			t.Fatalf("unlimited pacer delayed %v", d)
		}
	}
	var zero Pacer
	if d := zero.Reserve(1, t0); d != 0 {
		t.Errorf("zero Pacer delayed %v", d)
	}
}

func TestConnPacersShareTheRate(t *testing.T) {
	const conns, rate = 4, 400.0
	total := 0
	var firsts []time.Time
	for i := range conns {
		clk := &fakeClock{now: t0}
		p := connPacer(rate, conns, i, t0)
		sends := simulate(&p, clk, 1, t0.Add(10*time.Second), func(int) time.Duration { return 0 })
		total += len(sends)
		firsts = append(firsts, sends[0])
	}
	if total < 3996 || total > 4004 {
		t.Errorf("%d conns at a shared %v ops/s sent %d ops in 10 s, want 4000", conns, rate, total)
	}
	for i, f := range firsts {
		if want := t0.Add(time.Duration(i) * 2500 * time.Microsecond); !f.Equal(want) {
			t.Errorf("conn %d starts at +%v, want staggered at +%v", i, f.Sub(t0), want.Sub(t0))
		}
	}
}

func TestWorkloadDeterministic(t *testing.T) {
	spec := BucketSpec{Name: "app", Keys: 1000, GetWeight: 3, SetWeight: 1}
	a, b := newWorkload(&spec, 7, 1, 2), newWorkload(&spec, 7, 1, 2)
	other := newWorkload(&spec, 7, 1, 3)
	gets, same := 0, 0
	for range 10000 {
		ga, ka := a.next()
		gb, kb := b.next()
		_, ko := other.next()
		if ga != gb || ka != kb {
			t.Fatal("same seed, bucket and conn gave different sequences")
		}
		if ka >= 1000 {
			t.Fatalf("key %d outside the key space", ka)
		}
		if ga {
			gets++
		}
		if ka == ko {
			same++
		}
	}
	if gets < 7300 || gets > 7700 {
		t.Errorf("%d gets in 10000 ops with mix 3:1, want about 7500", gets)
	}
	if same > 100 {
		t.Errorf("connections 2 and 3 drew the same key %d times in 10000: streams not independent", same)
	}
	if k := a.appendKey(nil, 7); !bytes.Equal(k, []byte("kvb:app:007")) || len(k) != a.keyLen() {
		t.Errorf("key 7 = %q (keyLen %d), want kvb:app:007", k, a.keyLen())
	}
}

func TestComputedUnits(t *testing.T) {
	tests := []struct {
		key, val, size int
		read, write    int64
	}{
		{10, 100, 4096, 1, 1},
		{10, 0, 4096, 1, 1},
		{24, 1000, 1024, 1, 1},
		{24, 1001, 1024, 2, 2},
		{100, 8192, 4096, 3, 3},
	}
	for _, tt := range tests {
		if r := readUnits(tt.key, tt.val, tt.size); r != tt.read {
			t.Errorf("readUnits(%d, %d, %d) = %d, want %d", tt.key, tt.val, tt.size, r, tt.read)
		}
		if w := writeUnits(tt.key, tt.val, tt.size); w != tt.write {
			t.Errorf("writeUnits(%d, %d, %d) = %d, want %d", tt.key, tt.val, tt.size, w, tt.write)
		}
	}
}
