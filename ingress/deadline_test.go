package ingress

import (
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

var dt0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC) // the deadline tests' clock

func newDeadlineBucket(t testing.TB, g *DeadlineGate, s DeadlineSettings) *BucketDeadline {
	t.Helper()
	b, err := NewBucketDeadline(g, s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestDeadlineSettingsValidate(t *testing.T) {
	tests := []struct {
		s    DeadlineSettings
		ok   bool
		want string
	}{
		{DeadlineSettings{}, true, ""},
		{DeadlineSettings{Deadline: 50 * time.Millisecond}, true, ""},
		{DeadlineSettings{Deadline: 50 * time.Millisecond, Percentile: 49}, false, "deadline_percentile 49"},
		{DeadlineSettings{Deadline: 50 * time.Millisecond, Percentile: 100}, false, "deadline_percentile 100"},
		{DeadlineSettings{Deadline: -1}, false, "deadline_ms"},
		{DeadlineSettings{Deadline: time.Millisecond, ExpectedExecution: -1}, false, "expected_execution_us"},
	}
	for _, tc := range tests {
		s := tc.s
		s.EnsureDefaults()
		err := s.Validate()
		if tc.ok != (err == nil) || (err != nil && (!errors.Is(err, ErrInvalidOptions) || !strings.Contains(err.Error(), tc.want))) {
			t.Errorf("%+v: Validate = %v, want ok=%v containing %q", tc.s, err, tc.ok, tc.want)
		}
	}
	s := DeadlineSettings{Deadline: time.Second}
	s.EnsureDefaults()
	if s.Percentile != DefaultDeadlinePercentile || s.ExpectedExecution != DefaultExpectedExecution {
		t.Fatalf("EnsureDefaults: %+v", s)
	}
}

// TestDeadlineAdmitPredictsCompletion: expected 10 ms, deadline 50 ms → 0.2 of a
// ticket per command; in a pool of 2 tickets a command is admitted while the demand
// ahead of it, drained at 2 tickets per 50 ms, leaves it its 10 ms within the 35 ms
// the gate aims at (TargetPercent): A ≤ 1.0 ticket. So 6 are admitted, the 7th is
// refused with a retry estimate, and commands are admitted again once one completes.
func TestDeadlineAdmitPredictsCompletion(t *testing.T) {
	var g DeadlineGate
	b := newDeadlineBucket(t, &g, DeadlineSettings{Deadline: 50 * time.Millisecond, Percentile: 90, ExpectedExecution: 10 * time.Millisecond})
	var grants []Grant
	for i := range 6 {
		gr, ok, retry := b.Admit(Write, 2, dt0, dt0)
		if !ok || retry != 0 || gr.Demand() != 200_000 || gr.Alone() != (i == 0) {
			t.Fatalf("admit %d: ok=%v retry=%v demand=%d alone=%v", i, ok, retry, gr.Demand(), gr.Alone())
		}
		grants = append(grants, gr)
	}
	if a := g.Accepted(Write); a != 1_200_000 {
		t.Fatalf("accepted = %d, want 1200000", a)
	}
	if b.Fits(Write, 2, dt0, dt0) {
		t.Fatal("Fits with 1.2 of 2 tickets accepted")
	}
	gr, ok, retry := b.Admit(Write, 2, dt0, dt0)
	// excess 0.2 ticket over 2 tickets × 50 ms = 5 ms.
	if ok || retry != 5*time.Millisecond {
		t.Fatalf("7th: ok=%v retry=%v, want refused with 5ms", ok, retry)
	}
	reason := string(gr.AppendReason(nil, "b", 2))
	want := "deadline 50 ms cannot be met: write p90 10000 us + queue ~30000 us (1.200000 of 2 tickets accepted) + 0 us waited before admission > 35000 us (70% of the deadline) in bucket b"
	if reason != want {
		t.Fatalf("reason %q\nwant   %q", reason, want)
	}
	// The read pool has its own ledger.
	if _, ok, _ := b.Admit(Read, 2, dt0, dt0); !ok {
		t.Fatal("read refused while only the write pool is full")
	}
	// A larger pool (the prober grew it) drains faster: admitted at once.
	if gr, ok, _ := b.Admit(Write, 3, dt0, dt0); !ok {
		t.Fatal("refused with capacity 3")
	} else {
		b.Done(gr, 10*time.Millisecond, true, dt0.Add(10*time.Millisecond))
	}
	b.Done(grants[0], 10*time.Millisecond, true, dt0.Add(10*time.Millisecond))
	if !b.Fits(Write, 2, dt0, dt0) {
		t.Fatal("no Fits after a release")
	}
	if _, ok, _ := b.Admit(Write, 2, dt0, dt0); !ok {
		t.Fatal("refused after a release")
	}
	if st := b.Stats(); st.Rejected != 1 || st.Missed != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// TestDeadlineAdmitCountsTimeWaited: the time a command spent before Admit (in its
// connection's input, parked by the throttle) comes off its deadline. With 0.8 of 2
// tickets ahead (20 ms of queue) and pXX 10 ms, a command that waited 5 ms just fits
// the 35 ms the gate aims at under a 50 ms deadline, and one that waited 6 ms does
// not; a fresh command could run, so the retry estimate is the minimum.
func TestDeadlineAdmitCountsTimeWaited(t *testing.T) {
	var g DeadlineGate
	b := newDeadlineBucket(t, &g, DeadlineSettings{Deadline: 50 * time.Millisecond, Percentile: 90, ExpectedExecution: 10 * time.Millisecond})
	for range 4 {
		if _, ok, _ := b.Admit(Write, 2, dt0, dt0); !ok {
			t.Fatal("refused")
		}
	}
	now := dt0.Add(time.Second)
	gr, ok, retry := b.Admit(Write, 2, now.Add(-6*time.Millisecond), now)
	if ok || retry != time.Microsecond {
		t.Fatalf("waited 6 ms: ok=%v retry=%v, want refused, retry 1µs", ok, retry)
	}
	want := "deadline 50 ms cannot be met: write p90 10000 us + queue ~20000 us (0.800000 of 2 tickets accepted) + 6000 us waited before admission > 35000 us (70% of the deadline) in bucket b"
	if reason := string(gr.AppendReason(nil, "b", 2)); reason != want {
		t.Fatalf("reason %q\nwant   %q", reason, want)
	}
	if b.Fits(Write, 2, now.Add(-6*time.Millisecond), now) || !b.Fits(Write, 2, now.Add(-5*time.Millisecond), now) {
		t.Fatal("Fits disagrees with Admit")
	}
	gr, ok, _ = b.Admit(Write, 2, now.Add(-5*time.Millisecond), now)
	if !ok || gr.Due() != now.Add(45*time.Millisecond) {
		t.Fatalf("waited 5 ms: ok=%v due %v, want admitted, due 45 ms from now", ok, gr.Due().Sub(now))
	}
}

// TestDeadlineAloneIsAdmitted: a bucket whose one command needs more than the whole
// pool (pXX 200 ms under a 50 ms deadline) or whose neighbour filled the pool's
// ledger still runs one command at a time, so it never locks itself out and its
// window learns when execution gets faster; a command whose deadline has passed
// already is not admitted even alone.
func TestDeadlineAloneIsAdmitted(t *testing.T) {
	var g DeadlineGate
	s := DeadlineSettings{Deadline: 50 * time.Millisecond, Percentile: 90, ExpectedExecution: 200 * time.Millisecond}
	b := newDeadlineBucket(t, &g, s)
	first, ok, _ := b.Admit(Write, 4, dt0, dt0)
	if !ok || !first.Alone() || first.Demand() != 4*Micro {
		t.Fatalf("first: ok=%v alone=%v demand %d, want admitted alone with 4 tickets", ok, first.Alone(), first.Demand())
	}
	_, ok, retry := b.Admit(Write, 4, dt0, dt0)
	if ok || retry != 200*time.Millisecond {
		t.Fatalf("second while the first runs: ok=%v retry=%v, want refused, retry pXX", ok, retry)
	}
	b.Done(first, time.Millisecond, true, dt0.Add(time.Millisecond))
	if st := b.Stats(); st.WritePXX != time.Millisecond {
		t.Fatalf("window did not learn: %+v", st)
	}
	gr, ok, _ := b.Admit(Write, 4, dt0, dt0)
	if !ok || gr.Demand() != 20_000 {
		t.Fatalf("after one fast command: ok=%v demand %d, want 20000", ok, gr.Demand())
	}
	b.Release(gr)
	// A neighbour with small commands fills the ledger to 3.94 of 4 tickets; b2, whose
	// 10 ms commands fit only below 3.2, still runs one while it has nothing in flight.
	n := newDeadlineBucket(t, &g, DeadlineSettings{Deadline: 50 * time.Millisecond, ExpectedExecution: time.Millisecond})
	for {
		if _, ok, _ := n.Admit(Write, 4, dt0, dt0); !ok {
			break
		}
	}
	b2 := newDeadlineBucket(t, &g, DeadlineSettings{Deadline: 50 * time.Millisecond, ExpectedExecution: 10 * time.Millisecond})
	if gr, ok, _ := b2.Admit(Write, 4, dt0, dt0); !ok || !gr.Alone() {
		t.Fatal("b2 refused with nothing in flight")
	}
	if _, ok, _ := b2.Admit(Write, 4, dt0, dt0); ok {
		t.Fatal("b2's second command admitted into a full ledger")
	}
	// Alone, but late already: refused.
	c := newDeadlineBucket(t, &g, s)
	if _, ok, _ := c.Admit(Read, 4, dt0, dt0.Add(50*time.Millisecond)); ok {
		t.Fatal("a command whose deadline passed before Admit was admitted")
	}
}

// TestDeadlineQueueChargedAtMean: a heavy tail, as group commit gives synced
// writes (230 executions of 0.5 ms, 26 of 8 ms: p90 8 ms, mean 1.26 ms). With 50
// commands ahead in a pool of 8 tickets, the queue works off in about 50 × 1.26 ÷ 8
// = 7.9 ms, and the command then runs for its p90: 16 ms, well within 50 ms, so it is
// admitted. Charged at p90 (the seed's demand), the same queue would count as
// 50 × 8 ÷ 8 = 50 ms and the command would be refused at a fraction of the capacity.
func TestDeadlineQueueChargedAtMean(t *testing.T) {
	var g DeadlineGate
	b := newDeadlineBucket(t, &g, DeadlineSettings{Deadline: 50 * time.Millisecond, Percentile: 90, ExpectedExecution: time.Millisecond})
	for i := range WindowSize {
		gr, _, _ := b.Admit(Write, 8, dt0, dt0)
		exec := 500 * time.Microsecond
		if i%10 == 0 { // 26 of 256
			exec = 8 * time.Millisecond
		}
		b.Done(gr, exec, true, dt0)
	}
	if st := b.Stats(); st.WritePXX != 8*time.Millisecond {
		t.Fatalf("p90 %v, want 8ms", st.WritePXX)
	}
	var ahead []Grant
	for range 50 {
		gr, ok, _ := b.Admit(Write, 8, dt0, dt0)
		if !ok {
			t.Fatalf("refused with %d ahead: %s", len(ahead), gr.AppendReason(nil, "b", 8))
		}
		ahead = append(ahead, gr)
	}
	gr, ok, _ := b.Admit(Write, 8, dt0, dt0)
	if !ok || gr.Demand() != 25_235 {
		t.Fatalf("51st: ok=%v demand %d, want admitted with 25235 (mean 1.26 ms / 50 ms)", ok, gr.Demand())
	}
	if w := queueWait(g.Accepted(Write), 8, 50*time.Millisecond); w < 7*time.Millisecond || w > 9*time.Millisecond {
		t.Fatalf("predicted queue %v, want about 7.9 ms", w)
	}
}

func TestDeadlineLimitAndRetry(t *testing.T) {
	const ms = time.Millisecond
	tests := []struct {
		waited, pxx time.Duration
		d           time.Duration
		capacity    int
		limit       int64
	}{
		{0, 10 * ms, 50 * ms, 2, 1_000_000}, // aims at 35 ms: 25 ms of queue
		{20 * ms, 10 * ms, 50 * ms, 2, 200_000},
		{25 * ms, 10 * ms, 50 * ms, 2, 0},
		{26 * ms, 10 * ms, 50 * ms, 2, -1},
		{0, 36 * ms, 50 * ms, 8, -1}, // pXX alone past the target
		{0, ms, 50 * ms, 0, -1},
		{0, ms, 50 * ms, 100, 68 * Micro},
	}
	for _, tc := range tests {
		if got := limitAhead(tc.waited, tc.pxx, int64(tc.d), tc.capacity); got != tc.limit {
			t.Errorf("limitAhead(%v, %v, %v, %d) = %d, want %d", tc.waited, tc.pxx, tc.d, tc.capacity, got, tc.limit)
		}
	}
	retries := []struct {
		seen     int64
		pxx, d   time.Duration
		capacity int
		want     time.Duration
	}{
		{1_200_000, 10 * ms, 50 * ms, 2, 5 * ms},
		{1_000_001, 10 * ms, 50 * ms, 2, time.Microsecond}, // tiny excess: 1 µs floor
		{0, 10 * ms, 50 * ms, 2, time.Microsecond},         // refused for its own wait only
		{3_000_000, 10 * ms, 50 * ms, 2, 50 * ms},          // 2 tickets over: one deadline
		{0, 60 * ms, 50 * ms, 2, 60 * ms},                  // pXX alone exceeds the deadline: pXX
		{Micro, ms, 20 * ms, 0, 20 * ms},                   // no capacity: one deadline
	}
	for _, tc := range retries {
		if got := retryEstimate(tc.seen, tc.pxx, int64(tc.d), tc.capacity); got != tc.want {
			t.Errorf("retryEstimate(%d, %v, %v, %d) = %v, want %v", tc.seen, tc.pxx, tc.d, tc.capacity, got, tc.want)
		}
	}
}

// TestDeadlineLedgerSharedAcrossBuckets: two buckets with deadlines divide one pool;
// a bucket without a deadline takes nothing and is never refused.
func TestDeadlineLedgerSharedAcrossBuckets(t *testing.T) {
	var g DeadlineGate
	a := newDeadlineBucket(t, &g, DeadlineSettings{Deadline: 10 * time.Millisecond, ExpectedExecution: 5 * time.Millisecond})
	b := newDeadlineBucket(t, &g, DeadlineSettings{Deadline: 10 * time.Millisecond, ExpectedExecution: 5 * time.Millisecond})
	none := newDeadlineBucket(t, &g, DeadlineSettings{})
	if _, ok, _ := a.Admit(Read, 1, dt0, dt0); !ok {
		t.Fatal("a refused")
	}
	if _, ok, _ := b.Admit(Read, 1, dt0, dt0); !ok {
		t.Fatal("b refused")
	}
	if _, ok, _ := a.Admit(Read, 1, dt0, dt0); ok {
		t.Fatal("a admitted beyond the shared capacity")
	}
	if _, ok, _ := b.Admit(Read, 1, dt0, dt0); ok {
		t.Fatal("b admitted beyond the shared capacity")
	}
	for range 100 {
		gr, ok, _ := none.Admit(Read, 1, dt0, dt0)
		if !ok || gr.Demand() != 0 {
			t.Fatal("bucket without deadline refused or charged")
		}
		none.Done(gr, time.Millisecond, true, dt0)
	}
	if g.Accepted(Read) != Micro {
		t.Fatalf("accepted %d", g.Accepted(Read))
	}
}

// TestDeadlineWindowDrivesDemand: once the window has samples its pXX replaces
// expected_execution_us; failures are not recorded.
func TestDeadlineWindowDrivesDemand(t *testing.T) {
	var g DeadlineGate
	b := newDeadlineBucket(t, &g, DeadlineSettings{Deadline: 100 * time.Millisecond, Percentile: 90, ExpectedExecution: 50 * time.Millisecond})
	gr, _, _ := b.Admit(Read, 10, dt0, dt0)
	if gr.Demand() != Micro/2 || gr.PXX() != 50*time.Millisecond {
		t.Fatalf("before samples: demand %d pxx %v", gr.Demand(), gr.PXX())
	}
	b.Done(gr, time.Second, false, dt0) // a failure: not a sample
	if st := b.Stats(); st.ReadSamples != 0 || st.ReadPXX != 50*time.Millisecond {
		t.Fatalf("failure recorded: %+v", st)
	}
	for i := 1; i <= 10; i++ {
		gr, _, _ := b.Admit(Read, 10, dt0, dt0)
		b.Done(gr, time.Duration(i)*time.Millisecond, true, dt0)
	}
	st := b.Stats()
	if st.ReadSamples != 10 || st.ReadPXX != 9*time.Millisecond || st.WritePXX != 50*time.Millisecond {
		t.Fatalf("after samples: %+v", st)
	}
	if gr, _, _ := b.Admit(Read, 10, dt0, dt0); gr.Demand() != 55_000 || gr.PXX() != 9*time.Millisecond {
		t.Fatalf("demand %d pXX %v, want 55000 (mean 5.5 ms / 100 ms) and 9 ms", gr.Demand(), gr.PXX())
	}
	// A new percentile applies at once to the kept window.
	if err := b.SetSettings(DeadlineSettings{Deadline: 100 * time.Millisecond, Percentile: 50, ExpectedExecution: 50 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	if st := b.Stats(); st.ReadPXX != 5*time.Millisecond {
		t.Fatalf("p50 = %v, want 5ms", st.ReadPXX)
	}
}

func TestDeadlineMissedExpiredAndPassed(t *testing.T) {
	var g DeadlineGate
	b := newDeadlineBucket(t, &g, DeadlineSettings{Deadline: 10 * time.Millisecond, ExpectedExecution: time.Millisecond})
	gr, _, _ := b.Admit(Write, 4, dt0, dt0)
	if gr.Passed(dt0.Add(10*time.Millisecond)) || !gr.Passed(dt0.Add(11*time.Millisecond)) {
		t.Fatal("Passed wrong around the deadline")
	}
	if gr.Due() != dt0.Add(10*time.Millisecond) {
		t.Fatalf("Due %v", gr.Due())
	}
	b.Done(gr, 2*time.Millisecond, true, dt0.Add(12*time.Millisecond)) // late: a miss
	gr, _, _ = b.Admit(Write, 4, dt0, dt0)
	b.Done(gr, 2*time.Millisecond, true, dt0.Add(9*time.Millisecond)) // in time
	gr, _, _ = b.Admit(Write, 4, dt0, dt0)
	b.Expire(gr)
	gr, _, _ = b.Admit(Write, 4, dt0, dt0)
	if g.Accepted(Write) == 0 {
		t.Fatal("nothing accepted")
	}
	b.Release(gr) // counts nothing
	st := b.Stats()
	if st.Missed != 1 || st.Expired != 1 || st.Rejected != 0 || g.Accepted(Write) != 0 {
		t.Fatalf("stats %+v accepted %d", st, g.Accepted(Write))
	}
	if (Grant{}).Passed(dt0.Add(time.Hour)) || !(Grant{}).Due().IsZero() {
		t.Fatal("a grant without deadline passed")
	}
}

// TestDeadlineDoubleDoneClamps: a Grant given back twice cannot take the ledger
// below zero; it is counted instead.
func TestDeadlineDoubleDoneClamps(t *testing.T) {
	var g DeadlineGate
	b := newDeadlineBucket(t, &g, DeadlineSettings{Deadline: 10 * time.Millisecond, ExpectedExecution: time.Millisecond})
	gr, _, _ := b.Admit(Read, 1, dt0, dt0)
	b.Done(gr, 0, false, dt0)
	b.Done(gr, 0, false, dt0)
	if g.Accepted(Read) != 0 || g.StaleReleases() != 1 {
		t.Fatalf("accepted %d stale %d", g.Accepted(Read), g.StaleReleases())
	}
	// A refused Grant holds nothing: Done on it releases nothing.
	for {
		if _, ok, _ := b.Admit(Read, 1, dt0, dt0); !ok {
			break
		}
	}
	refused, ok, _ := b.Admit(Read, 1, dt0, dt0)
	before := g.Accepted(Read)
	b.Done(refused, 0, false, dt0)
	if ok || g.Accepted(Read) != before {
		t.Fatalf("a refused grant released demand: %d → %d", before, g.Accepted(Read))
	}
}

// TestDeadlineConcurrentNoLeak: many goroutines admit and complete, each
// holding up to four grants at a time, so that admissions meet others in
// flight and race on the ledger's shared check (executions of 4-4.7 ms
// against a 10 ms deadline at p90: a demand of about 0.45 of a ticket, so
// six or seven fit the capacity of three tickets and the 32 that could be
// held at once are often refused). The ledger never exceeds capacity and
// returns to zero.
func TestDeadlineConcurrentNoLeak(t *testing.T) {
	var g DeadlineGate
	b := newDeadlineBucket(t, &g, DeadlineSettings{Deadline: 10 * time.Millisecond, Percentile: 90, ExpectedExecution: 4 * time.Millisecond})
	const capacity = 3
	var wg sync.WaitGroup
	var over sync.Once
	var inFlight, besideOthers, refused atomic.Int64
	for w := range 8 {
		wg.Go(func() {
			var held []Grant
			done := func() {
				b.Done(held[0], time.Duration(4000+(w*131+len(held)*17)%700)*time.Microsecond, w%5 != 0, dt0)
				held = held[1:]
				inFlight.Add(-1)
			}
			for i := range 5000 {
				class := Pool(i % 2)
				if len(held) == 4 || len(held) > 0 && i%3 == 0 {
					done()
				}
				gr, ok, _ := b.Admit(class, capacity, dt0, dt0)
				if a := g.Accepted(class); a > capacity*Micro {
					over.Do(func() { t.Errorf("accepted %d over capacity", a) })
				}
				if !ok {
					refused.Add(1)
					continue
				}
				if inFlight.Add(1) > 1 {
					besideOthers.Add(1)
				}
				held = append(held, gr)
			}
			for len(held) > 0 {
				done()
			}
		})
	}
	wg.Wait()
	t.Logf("%d admitted beside others in flight, %d refused", besideOthers.Load(), refused.Load())
	if besideOthers.Load() < 1000 || refused.Load() < 1000 {
		t.Errorf("%d admissions beside others, %d refused: the goroutines did not contend", besideOthers.Load(), refused.Load())
	}
	if g.Accepted(Read) != 0 || g.Accepted(Write) != 0 || g.StaleReleases() != 0 {
		t.Fatalf("leak: read %d write %d stale %d", g.Accepted(Read), g.Accepted(Write), g.StaleReleases())
	}
}

func TestDeadlineAdmitDoesNotAllocate(t *testing.T) {
	var g DeadlineGate
	b := newDeadlineBucket(t, &g, DeadlineSettings{Deadline: 10 * time.Millisecond, ExpectedExecution: time.Millisecond})
	allocs := testing.AllocsPerRun(1000, func() {
		gr, ok, _ := b.Admit(Write, 8, dt0, dt0)
		if ok {
			b.Done(gr, time.Millisecond, true, dt0)
		}
	})
	if allocs != 0 {
		t.Fatalf("Admit+Done allocates %v times", allocs)
	}
}

// BenchmarkDeadlineAdmit is the hot-path check alone (the event loop's part): Admit
// with room, in a pool so large that the ledger never fills.
func BenchmarkDeadlineAdmit(b *testing.B) {
	var g DeadlineGate
	bd := newDeadlineBucket(b, &g, DeadlineSettings{Deadline: 10 * time.Millisecond, ExpectedExecution: time.Millisecond})
	b.ReportAllocs()
	for b.Loop() {
		if _, ok, _ := bd.Admit(Write, 1<<30, dt0, dt0); !ok {
			b.Fatal("refused")
		}
	}
}

// BenchmarkDeadlineAdmitRelease is Admit plus the release a completion makes.
func BenchmarkDeadlineAdmitRelease(b *testing.B) {
	var g DeadlineGate
	bd := newDeadlineBucket(b, &g, DeadlineSettings{Deadline: 10 * time.Millisecond, ExpectedExecution: time.Millisecond})
	b.ReportAllocs()
	for b.Loop() {
		gr, ok, _ := bd.Admit(Write, 8, dt0, dt0)
		if !ok {
			b.Fatal("refused")
		}
		bd.Release(gr)
	}
}

// BenchmarkDeadlineAdmitRefused is the check when the pool is full.
func BenchmarkDeadlineAdmitRefused(b *testing.B) {
	var g DeadlineGate
	bd := newDeadlineBucket(b, &g, DeadlineSettings{Deadline: 10 * time.Millisecond, ExpectedExecution: time.Millisecond})
	for {
		if _, ok, _ := bd.Admit(Write, 1, dt0, dt0); !ok {
			break
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, ok, _ := bd.Admit(Write, 1, dt0, dt0); ok {
			b.Fatal("admitted")
		}
	}
}

// BenchmarkDeadlineDone is the worker's part: release, window insert, new demand.
func BenchmarkDeadlineDone(b *testing.B) {
	var g DeadlineGate
	bd := newDeadlineBucket(b, &g, DeadlineSettings{Deadline: 10 * time.Millisecond, ExpectedExecution: time.Millisecond})
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		gr, _, _ := bd.Admit(Write, 8, dt0, dt0)
		bd.Done(gr, time.Duration(i*7919%3000)*time.Microsecond, true, dt0)
	}
}

// BenchmarkDeadlineAdmitParallel: every P admits and releases on one bucket.
func BenchmarkDeadlineAdmitParallel(b *testing.B) {
	var g DeadlineGate
	bd := newDeadlineBucket(b, &g, DeadlineSettings{Deadline: 10 * time.Millisecond, ExpectedExecution: time.Millisecond})
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			gr, ok, _ := bd.Admit(Write, 1000, dt0, dt0)
			if ok {
				bd.Release(gr)
			}
		}
	})
}

// TestPoolSize: the lock-free mirror the deadline gate reads follows New, Resize
// (negative sizes clamp to 0) and rejects a value that is not a pool.
func TestPoolSize(t *testing.T) {
	c, _ := newTest(t, 3, 5, Options{})
	if r, w := c.PoolSize(Read), c.PoolSize(Write); r != 3 || w != 5 {
		t.Fatalf("after Resize(3, 5): PoolSize %d, %d", r, w)
	}
	c.Resize(7, -1)
	s := c.Stats()
	if c.PoolSize(Read) != 7 || c.PoolSize(Write) != 0 || int(s.Read.Total) != 7 || s.Write.Total != 0 {
		t.Fatalf("after Resize(7, -1): PoolSize %d, %d; Stats %d, %d", c.PoolSize(Read), c.PoolSize(Write), s.Read.Total, s.Write.Total)
	}
	if c.PoolSize(Pool(9)) != 0 {
		t.Fatal("PoolSize of a non-pool")
	}
	if n := testing.AllocsPerRun(100, func() { _ = c.PoolSize(Write) }); n != 0 {
		t.Fatalf("PoolSize allocates %v", n)
	}
}

// TestDemandOf: the seed's pXX ÷ D, rounded up, at least 1 Micro.
func TestDemandOf(t *testing.T) {
	const d = int64(50 * time.Millisecond)
	for _, tc := range []struct {
		pxx  time.Duration
		want int64
	}{
		{10 * time.Millisecond, 200_000},
		{25 * time.Millisecond, 500_000},
		{100 * time.Millisecond, 2 * Micro},
		{time.Nanosecond, 1}, // 1e6 / 5e7 rounded up
		{0, 1},
	} {
		if got := demandOf(tc.pxx, d); got != tc.want {
			t.Errorf("pxx %v: %d, want %d", tc.pxx, got, tc.want)
		}
	}
}

// TestDeadlineReturnedTicket: a synced write gives its ticket back at commit
// (Returned) and its reply comes after the shared fsync (Done). Its demand leaves
// the ledger at Returned, Done gives nothing back twice, the window (pXX) holds
// ticket → reply, and the demand is charged on the ticket time alone.
func TestDeadlineReturnedTicket(t *testing.T) {
	var g DeadlineGate
	b := newDeadlineBucket(t, &g, DeadlineSettings{Deadline: 50 * time.Millisecond, Percentile: 90, ExpectedExecution: time.Millisecond})
	for range WindowSize {
		gr, ok, _ := b.Admit(Write, 4, dt0, dt0)
		if !ok {
			t.Fatal("refused on an empty pool")
		}
		gr = b.Returned(gr, 200*time.Microsecond)
		if a := g.Accepted(Write); a != 0 {
			t.Fatalf("ledger %d after Returned, want 0", a)
		}
		if again := b.Returned(gr, time.Second); again != gr {
			t.Fatal("a second Returned changed the grant")
		}
		b.Done(gr, 3*time.Millisecond, true, dt0)
	}
	if a, s := g.Accepted(Write), g.StaleReleases(); a != 0 || s != 0 {
		t.Fatalf("ledger %d, stale releases %d after Done, want 0 and 0", a, s)
	}
	st := b.Stats()
	if st.WritePXX != 3*time.Millisecond {
		t.Fatalf("p90 %v, want the ticket → reply time 3ms", st.WritePXX)
	}
	gr, ok, _ := b.Admit(Write, 4, dt0, dt0)
	if !ok || gr.Demand() != 4_000 {
		t.Fatalf("demand %d (ok=%v), want 4000: 200 µs of ticket ÷ 50 ms", gr.Demand(), ok)
	}
	b.Release(gr)
	// A command that keeps its ticket to its reply charges its whole execution.
	var g2 DeadlineGate
	b2 := newDeadlineBucket(t, &g2, DeadlineSettings{Deadline: 50 * time.Millisecond, Percentile: 90, ExpectedExecution: time.Millisecond})
	gr, _, _ = b2.Admit(Write, 4, dt0, dt0)
	b2.Done(gr, 5*time.Millisecond, true, dt0)
	if gr, _, _ = b2.Admit(Write, 4, dt0, dt0); gr.Demand() != 100_000 {
		t.Fatalf("demand %d, want 100000: 5 ms ÷ 50 ms", gr.Demand())
	}
}
