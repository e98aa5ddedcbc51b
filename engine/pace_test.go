package engine

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// fakeLSM is a DBForCompaction with n compactions waiting.
type fakeLSM struct {
	mu      sync.Mutex
	allowed int
	waiting int
	started []pebble.CompactionGrantHandle
}

func (f *fakeLSM) GetAllowedWithoutPermission() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.allowed
}

func (f *fakeLSM) GetWaitingCompaction() (bool, pebble.WaitingCompaction) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.waiting > 0, pebble.WaitingCompaction{}
}

func (f *fakeLSM) Schedule(h pebble.CompactionGrantHandle) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.waiting == 0 {
		return false
	}
	f.waiting--
	f.started = append(f.started, h)
	h.Started()
	return true
}

func (f *fakeLSM) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.started)
}

// TestPacerGrantsWhatTheDBAllows: the pacer runs as many compactions at a
// time as the DB allows without permission, starts the next one when one
// is done, and more when the DB allows more.
func TestPacerGrantsWhatTheDBAllows(t *testing.T) {
	p := newPacer()
	p.stall = func() (time.Duration, bool) { return 0, false }
	lsm := &fakeLSM{allowed: 1, waiting: 4}
	p.Register(1, lsm)
	ok, h := p.TrySchedule()
	if !ok {
		t.Fatal("TrySchedule with nothing running: refused")
	}
	h.Started()
	if ok, _ := p.TrySchedule(); ok {
		t.Fatal("TrySchedule beyond the one allowed: granted")
	}
	h.Done() // the next waiting compaction starts at once
	if got := lsm.count(); got != 1 {
		t.Fatalf("after Done, %d compactions scheduled; want 1", got)
	}
	lsm.mu.Lock()
	lsm.allowed = 3
	lsm.mu.Unlock()
	p.UpdateGetAllowedWithoutPermission() // the sampler grants two more
	waitFor(t, func() bool { return lsm.count() == 3 })
	if ok, _ := p.TrySchedule(); ok {
		t.Fatal("TrySchedule with 3 running of 3 allowed: granted")
	}
	for _, h := range lsm.started {
		h.Done()
	}
	p.Unregister()
	if ok, _ := p.TrySchedule(); ok {
		t.Fatal("TrySchedule after Unregister: granted")
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in 5s")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestPacedCompactionSleeps: while paced, a compaction sleeps three times
// as long as it ran, in steps of at most paceMaxSleep, and stops sleeping
// as soon as pacing ends; unpaced it never sleeps.
func TestPacedCompactionSleeps(t *testing.T) {
	p := newPacer()
	clock := time.Unix(1000, 0)
	var slept []time.Duration
	p.now = func() time.Time { return clock }
	p.sleep = func(d time.Duration) { slept = append(slept, d); clock = clock.Add(d) }
	h := p.handle()
	h.Started()

	clock = clock.Add(4 * time.Millisecond)
	h.CumulativeStats(pebble.CompactionGrantHandleStats{})
	if len(slept) != 0 {
		t.Fatalf("unpaced: slept %v", slept)
	}

	p.paced.Store(true)
	clock = clock.Add(4 * time.Millisecond)
	h.CumulativeStats(pebble.CompactionGrantHandleStats{})
	if fmt.Sprint(slept) != "[10ms 2ms]" || p.PacedTime() != 12*time.Millisecond {
		t.Fatalf("paced after 4ms of work: slept %v (total %v); want [10ms 2ms]", slept, p.PacedTime())
	}

	slept = nil
	p.sleep = func(d time.Duration) { slept = append(slept, d); clock = clock.Add(d); p.paced.Store(false) }
	clock = clock.Add(20 * time.Millisecond)
	h.CumulativeStats(pebble.CompactionGrantHandleStats{})
	if fmt.Sprint(slept) != "[10ms]" {
		t.Fatalf("pacing ended during the first sleep: slept %v; want [10ms]", slept)
	}
}

// TestPacerDecides: paced when some task waited for a CPU at least 10% of
// the interval and the LSM is within bounds.
func TestPacerDecides(t *testing.T) {
	p := newPacer()
	clock := time.Unix(1000, 0)
	stall, ok := time.Duration(0), true
	p.now = func() time.Time { return clock }
	p.stall = func() (time.Duration, bool) { return stall, ok }
	var s stallSample
	if s.take(p) {
		t.Fatal("first reading: contended without a previous one")
	}
	for _, c := range []struct {
		stall time.Duration
		ok    bool
		want  bool
	}{
		{15 * time.Millisecond, true, true},
		{5 * time.Millisecond, true, false},
		{10 * time.Millisecond, true, true},
		{50 * time.Millisecond, false, false}, // no reading
		{50 * time.Millisecond, true, false},  // no previous reading
	} {
		clock = clock.Add(100 * time.Millisecond)
		stall += c.stall
		ok = c.ok
		if got := s.take(p); got != c.want {
			t.Errorf("%v stalled of 100ms (readable %v): contended %v; want %v", c.stall, c.ok, got, c.want)
		}
	}

	for _, c := range []struct {
		l0   int
		debt uint64
		ok   bool
		want bool
	}{
		{0, 0, false, false}, // not open yet
		{paceMaxL0Sublevels - 1, paceMaxDebt - 1, true, true},
		{paceMaxL0Sublevels, 0, true, false},
		{0, paceMaxDebt, true, false},
	} {
		p.backlog = func() (int, uint64, bool) { return c.l0, c.debt, c.ok }
		if got := p.healthy(); got != c.want {
			t.Errorf("L0 %d, debt %d (open %v): healthy %v; want %v", c.l0, c.debt, c.ok, got, c.want)
		}
	}
	p.backlog = func() (int, uint64, bool) { return 0, 0, true }
	g := newSpaceGuard(nil, "", 1000, quietLogger())
	p.diskLow = g.low
	for _, c := range []struct {
		avail int64
		want  bool
	}{{-1, false}, {1999, false}, {2000, true}} {
		g.avail.Store(c.avail)
		if got := p.healthy(); got != c.want {
			t.Errorf("%d bytes free, reserve 1000: healthy %v; want %v", c.avail, got, c.want)
		}
	}
}

func TestParseStall(t *testing.T) {
	for _, c := range []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"some avg10=0.97 avg60=25.68 avg300=37.09 total=19676373287\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n",
			19676373287 * time.Microsecond, true},
		{"some avg10=0.00 avg60=0.00 avg300=0.00 total=12\n", 12 * time.Microsecond, true},
		{"full avg10=0.00 total=5\n", 0, false},
		{"some avg10=0.00 total=x\n", 0, false},
		{"", 0, false},
	} {
		if got, ok := parseStall([]byte(c.in)); got != c.want || ok != c.ok {
			t.Errorf("parseStall(%q) = %v, %v; want %v, %v", c.in, got, ok, c.want, c.ok)
		}
	}
}

// TestPacedCompactionsFinish: with the CPUs reported contended all the
// time, Pebble's compactions still run (paced) and bring L0 back down.
func TestPacedCompactionsFinish(t *testing.T) {
	db := openTest(t, func(o *Options) {
		o.WALSync = false
		o.MemTableSize = 1 << 20
		o.DiskReserve = -1 // paced however full the disk
		o.PaceCompactions = true
		o.pace = func(p *pacer) {
			var mu sync.Mutex
			var total time.Duration
			p.stall = func() (time.Duration, bool) { // always a full stall
				mu.Lock()
				defer mu.Unlock()
				total += time.Second
				return total, true
			}
		}
	})
	b := newBucketT(t, db, "b")
	value := make([]byte, 4096)
	for i := range 12000 {
		key := fmt.Appendf(nil, "k%08d", (i*7919)%12000)
		if _, err := b.Store(ModeSet, key, value, 0, 0, 0, 0); err != nil {
			t.Fatalf("Store %s: %v", key, err)
		}
	}
	waitFor(t, func() bool {
		m := db.Pebble().Metrics()
		return m.Compact.Count > 0 && m.Levels[0].Sublevels < l0CompactionThreshold && db.CompactionPacedTime() > 0
	})
	for i := range 12000 {
		key := fmt.Appendf(nil, "k%08d", i)
		if it, err := b.Get(key, 0, nil); err != nil || len(it.Value) != len(value) {
			t.Fatalf("Get %s after the compactions: %d bytes, %v", key, len(it.Value), err)
		}
	}
}
