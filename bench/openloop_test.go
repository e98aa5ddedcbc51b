package bench

import (
	"bytes"
	"context"
	"encoding/csv"
	"math"
	"strings"
	"testing"
	"time"
)

func TestArrivalClockFixed(t *testing.T) {
	start := time.Unix(1000, 0)
	// 1000/s over 4 connections: each every 4 ms, staggered by 1 ms.
	var all []time.Time
	for i := range 4 {
		c := newArrivalClock(Fixed, 1000, 4, i, start, 1)
		for range 5 {
			all = append(all, c.advance())
		}
	}
	for i := range 4 {
		for k := range 5 {
			want := start.Add(time.Duration(i)*time.Millisecond + time.Duration(k)*4*time.Millisecond)
			if got := all[i*5+k]; !got.Equal(want) {
				t.Fatalf("conn %d arrival %d at %v, want %v", i, k, got.Sub(start), want.Sub(start))
			}
		}
	}
}

func TestArrivalClockPoisson(t *testing.T) {
	start := time.Unix(1000, 0)
	c := newArrivalClock(Poisson, 500, 10, 3, start, 7) // mean gap 20 ms
	const n = 40000
	prev := c.advance()
	var sum, sumSq float64
	for range n {
		t := c.advance()
		g := float64(t.Sub(prev)) / float64(time.Millisecond)
		sum += g
		sumSq += g * g
		prev = t
	}
	mean := sum / n
	cv := math.Sqrt(sumSq/n-mean*mean) / mean
	if math.Abs(mean-20) > 0.5 || math.Abs(cv-1) > 0.05 {
		t.Fatalf("mean gap %.3f ms (want 20), coefficient of variation %.3f (want 1, exponential)", mean, cv)
	}
	d := newArrivalClock(Poisson, 500, 10, 3, start, 7)
	e := newArrivalClock(Poisson, 500, 10, 4, start, 7)
	if d.next != newArrivalClock(Poisson, 500, 10, 3, start, 7).next || d.next == e.next {
		t.Fatal("schedules must be deterministic per seed and differ per connection")
	}
}

func TestRetryAfterAndClassify(t *testing.T) {
	tests := []struct {
		body      string
		rejected  bool
		retry     time.Duration
		hasRetry  bool
		expired   bool
		otherFail bool
	}{
		{`{"error":{"context":"deadline 50 ms cannot be met: write p90 2000 us","retry_after_us":1250}}`, true, 1250 * time.Microsecond, true, false, false},
		{`deadline 50 ms cannot be met: write p90 2000 us retry_after_us=80`, true, 80 * time.Microsecond, true, false, false},
		{`{"error":{"context":"deadline 50 ms cannot be met"}}`, true, 0, false, false, false},
		{`{"error":{"context":"deadline passed after 51 ms in the queue"}}`, false, 0, false, true, false},
		{`{"error":{"context":"timed out after 10000 ms in bucket b"}}`, false, 0, false, false, true},
	}
	for _, tc := range tests {
		oc := &openConn{}
		oc.classify0x86([]byte(tc.body))
		n := oc.counts
		if (n.Rejected == 1) != tc.rejected || (n.Expired == 1) != tc.expired || (n.TempFail == 1) != tc.otherFail {
			t.Errorf("%s: counts %+v", tc.body, n)
		}
		if tc.rejected && ((n.RetryMissing == 0) != tc.hasRetry || n.RetryAfterSum != tc.retry) {
			t.Errorf("%s: retry %v missing %d, want %v %v", tc.body, n.RetryAfterSum, n.RetryMissing, tc.retry, tc.hasRetry)
		}
	}
}

// openLoopAgainst runs one open-loop point against f's bucket.
func openLoopAgainst(t *testing.T, f *deadlineFake, bucket string, rate float64, deadline time.Duration) *OpenLoopResult {
	t.Helper()
	res, err := RunOpenLoop(context.Background(), OpenLoopOptions{
		Addr: f.addr(), Bucket: bucket, User: "admin", Password: "pw", Conns: 16, Rate: rate,
		Deadline: deadline, Duration: 1500 * time.Millisecond, Warmup: 300 * time.Millisecond,
		Grace: 20 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s at %.0f/s: offered %.0f completed %.0f within %.3f rejected %.3f p50/D %.2f p99/D %.2f lost %d samples %v",
		bucket, rate, res.Offered(), res.CompletedRate(), res.WithinFraction(), res.RejectedFraction(),
		res.Ratio(0.5), res.Ratio(0.99), res.Lost, res.ErrorSamples)
	return res
}

// TestOpenLoopGateOffVsOn: a fake server of 2 workers × 10 ms (200 SETs/s on
// an idle machine) at 300/s, each run on its own server. Gate off: every
// command completes, ever later. Gate on: the excess is refused with a retry
// estimate and the rest finish sooner. (The machine is shared: the test
// compares the two runs rather than asserting absolute latencies.)
func TestOpenLoopGateOffVsOn(t *testing.T) {
	const deadline = 200 * time.Millisecond
	run := func(settings map[string]any) *OpenLoopResult {
		f := startDeadlineFake(t, 2, 10*time.Millisecond)
		p := OpenLoopOptions{Addr: f.addr(), User: "admin", Password: "pw", DialTimeout: time.Second}
		if err := ApplyBucket(context.Background(), &p, "b", settings); err != nil {
			t.Fatal(err)
		}
		return openLoopAgainst(t, f, "b", 300, deadline)
	}
	checkNoLeak(t)
	off := run(map[string]any{"reserved": "unlimited"})
	on := run(map[string]any{"reserved": "unlimited", "deadline_ms": deadline.Milliseconds()})
	for _, r := range []*OpenLoopResult{off, on} {
		if math.Abs(r.Offered()-300) > 45 {
			t.Errorf("offered %.0f/s, want 300 ± 15%%", r.Offered())
		}
		if got := r.Completed + r.Rejected + r.Lost; got != r.Scheduled || r.Errors+r.TempFail+r.Busy+r.Lost != 0 {
			t.Errorf("counts do not add up or commands lost: %+v", r.OpenLoopCounts)
		}
		if r.Finished == 0 || r.Finished > r.Completed+r.Completed/2 {
			t.Errorf("finished in the window %d, completed %d", r.Finished, r.Completed)
		}
	}
	if off.Rejected != 0 || off.Completed != off.Scheduled {
		t.Errorf("gate off: %+v: want every command completed", off.OpenLoopCounts)
	}
	if on.Rejected == 0 || on.RetryMissing != 0 || on.RetryAfterSum <= 0 {
		t.Errorf("gate on: %+v: want rejections, each with retry_after_us", on.OpenLoopCounts)
	}
	if on.Ratio(0.99) >= off.Ratio(0.99) || on.WithinFraction() <= off.WithinFraction() {
		t.Errorf("gate on p99/D %.2f within %.3f, gate off p99/D %.2f within %.3f: want the gate to shorten the tail",
			on.Ratio(0.99), on.WithinFraction(), off.Ratio(0.99), off.WithinFraction())
	}
}

func TestOpenLoopPlainTextRefusal(t *testing.T) {
	f := startDeadlineFake(t, 1, 5*time.Millisecond)
	f.xerror = false
	p := OpenLoopOptions{Addr: f.addr(), DialTimeout: time.Second}
	if err := ApplyBucket(context.Background(), &p, "on", map[string]any{"deadline_ms": 50}); err != nil {
		t.Fatal(err)
	}
	r := openLoopAgainst(t, f, "on", 1000, 50*time.Millisecond)
	if r.Rejected == 0 || r.RetryMissing != 0 {
		t.Fatalf("plain-text refusals: %+v", r.OpenLoopCounts)
	}
}

func TestApplyBucketCreatesThenUpdates(t *testing.T) {
	f := startDeadlineFake(t, 1, time.Millisecond)
	p := OpenLoopOptions{Addr: f.addr(), DialTimeout: time.Second}
	for _, dl := range []int{50, 20} {
		if err := ApplyBucket(context.Background(), &p, "b", map[string]any{"deadline_ms": dl}); err != nil {
			t.Fatal(err)
		}
	}
	f.mu.Lock()
	got := f.settings["b"]["deadline_ms"]
	f.mu.Unlock()
	if got != float64(20) {
		t.Fatalf("deadline_ms after update = %v, want 20", got)
	}
}

// TestSweepFakeServer runs a small sweep end to end: capacity measured
// closed-loop, two loads, gate off and p90, CSV, table and PNG.
func TestSweepFakeServer(t *testing.T) {
	f := startDeadlineFake(t, 4, 2*time.Millisecond)
	checkNoLeak(t)
	var progress int
	res, err := Sweep(context.Background(), SweepOptions{
		Point: OpenLoopOptions{
			Addr: f.addr(), User: "bench", Password: "pw", Conns: 32,
			Duration: 400 * time.Millisecond, Warmup: 200 * time.Millisecond, DialTimeout: time.Second,
		},
		AdminUser: "admin", AdminPassword: "secret", Rounds: 2,
		Loads: []float64{0.5, 1.5}, Percentiles: []int{90}, CapacityConns: 16,
		Progress: func(*SweepPoint) { progress++ },
	})
	if err != nil {
		t.Fatal(err)
	}
	if !res.CapacityMeasured || res.Capacity < 50 || res.Capacity > 2100 {
		t.Errorf("capacity %.0f ops/s, want at most 2000 (4 workers × 2 ms)", res.Capacity)
	}
	if len(res.Points) != 4 || progress != 8 {
		t.Fatalf("%d points, %d progress calls; want 4 points run twice", len(res.Points), progress)
	}
	for _, p := range res.Points {
		if p.Measured != 800*time.Millisecond || math.Abs(p.Offered()-p.Rate) > 0.2*p.Rate {
			t.Errorf("%s: measured %v offered %.0f/s for %.0f/s: want two rounds merged", p.Bucket, p.Measured, p.Offered(), p.Rate)
		}
		if p.Gate != (p.Settings["deadline_percentile"] == 90) {
			t.Errorf("%s: gate %v settings %v", p.Bucket, p.Gate, p.Settings)
		}
		// (How much the fake's gate rejects at half load depends on how busy the
		// machine is; the driver's part is to count what it gets.)
		if !p.Gate && p.Rejected != 0 {
			t.Errorf("%s: %d rejected with the gate off", p.Bucket, p.Rejected)
		}
		if got := p.Completed + p.Rejected + p.Lost + p.Errors; got != p.Scheduled {
			t.Errorf("%s: counts do not add up: %+v", p.Bucket, p.OpenLoopCounts)
		}
	}
	if on := res.Points[3]; !on.Gate || on.Load != 1.5 || on.Rejected == 0 {
		t.Errorf("gate on at 1.5×: %+v", on.OpenLoopCounts)
	}
	if off := res.Points[2]; off.Gate || off.Rejected != 0 {
		t.Errorf("gate off at 1.5×: %+v", off.OpenLoopCounts)
	}
	f.mu.Lock()
	for b, u := range f.creators {
		if u != "admin" {
			t.Errorf("bucket %s configured by %q, want the admin user", b, u)
		}
	}
	f.mu.Unlock()
	checkSweepOutputs(t, res)
}

func checkSweepOutputs(t *testing.T, res *SweepResult) {
	t.Helper()
	var buf bytes.Buffer
	if err := res.WriteCSV(&buf); err != nil {
		t.Fatal(err)
	}
	rows, err := csv.NewReader(&buf).ReadAll()
	if err != nil || len(rows) != 1+len(res.Points) || len(rows[1]) != len(SweepCSVHeader) {
		t.Fatalf("CSV: %d rows, err %v", len(rows), err)
	}
	if rows[4][0] != res.Points[3].Bucket || rows[4][1] != "p90" || rows[4][3] != "1.50" {
		t.Errorf("CSV row %v", rows[4])
	}
	buf.Reset()
	if err := res.WriteTable(&buf); err != nil || !strings.Contains(buf.String(), "goodput/s") {
		t.Fatalf("table: %v\n%s", err, buf.String())
	}
	t.Log("\n" + buf.String())
	buf.Reset()
	if err := res.WritePNG(&buf); err != nil || !bytes.HasPrefix(buf.Bytes(), []byte("\x89PNG")) {
		t.Fatalf("PNG: %v, %d bytes", err, buf.Len())
	}
}

func TestRatioCDF(t *testing.T) {
	var h Histogram
	for i := 1; i <= 100; i++ {
		h.Record(time.Duration(i) * time.Millisecond)
	}
	xys := ratioCDF(&h, float64(50*time.Millisecond))
	last := xys[len(xys)-1]
	if last.Y != 1 || math.Abs(last.X-2) > 0.05 {
		t.Fatalf("last point %+v, want (2, 1)", last)
	}
	for i, p := range xys {
		if math.Abs(p.X-1) < 0.01 && math.Abs(p.Y-0.5) > 0.02 {
			t.Fatalf("point %d %+v: half the samples are within the deadline", i, p)
		}
		if i > 0 && (p.X <= xys[i-1].X || p.Y < xys[i-1].Y) {
			t.Fatalf("not monotone at %d", i)
		}
	}
	var empty Histogram
	if e := ratioCDF(&empty, 1); len(e) != 1 {
		t.Fatal("empty histogram")
	}
}
