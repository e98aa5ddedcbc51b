package server

import (
	"strings"
	"testing"
	"time"

	"kvd/ingress"
	mc "kvd/protocol/binary"
	"kvd/tenant"
)

// withDeadline gives the test bucket "b" deadline settings.
func withDeadline(deadline, expected time.Duration, nodeTickets int64) func(*Options) {
	return func(o *Options) {
		o.Buckets[0].Settings = tenant.Settings{Reserved: tenant.Unlimited, HardLimit: tenant.Unlimited,
			Deadline: deadline, DeadlinePercentile: 90, ExpectedExecution: expected}
		if nodeTickets > 0 {
			o.Ingress.NodeTickets = nodeTickets
		}
	}
}

// TestDeadlineCheckAllocs: the loop's deadline check allocates nothing,
// whether it admits (and the grant is dropped again) or refuses (the 0x86
// is encoded into the connection's output from its scratch buffer).
func TestDeadlineCheckAllocs(t *testing.T) {
	clk := newClock()
	for _, tc := range []struct {
		name   string
		waited time.Duration // before the check: past the deadline, even a command alone is refused
		want   verdict
	}{{"admit", 0, admitRun}, {"refuse", 2 * time.Second, admitAnswered}} {
		s := newLoopServer(t, clk, withDeadline(time.Second, time.Microsecond, 0))
		c, _ := s.openFake(t)
		req := set(1, "k", "v")
		run := func() {
			if v := s.checkDeadline(c, req, ingress.Write, clk.now().Add(-tc.waited), clk.now()); v != tc.want {
				t.Fatalf("%s: verdict %v, want %v", tc.name, v, tc.want)
			}
			c.dropGrant()
			c.out = c.out[:0]
		}
		run()
		if n := testing.AllocsPerRun(1000, run); n != 0 {
			t.Errorf("%s: %v allocations per check, want 0", tc.name, n)
		}
		if a := s.deadline.Accepted(ingress.Write); a != 0 {
			t.Errorf("%s: ledger %d after every grant was dropped", tc.name, a)
		}
	}
}

// BenchmarkDeadlineCheck is the loop's per-command cost of an admitting
// check (Admit and, here, the release of its grant).
func BenchmarkDeadlineCheck(b *testing.B) {
	t := &testing.T{}
	clk := newClock()
	s := newLoopServer(t, clk, withDeadline(time.Second, time.Microsecond, 0))
	c, _ := s.openFake(t)
	req, now := set(1, "k", "v"), clk.now()
	b.ReportAllocs()
	for b.Loop() {
		s.checkDeadline(c, req, ingress.Write, now, now)
		c.dropGrant()
	}
}

// TestLoopDeadlineExpiredAtGrant: a SET that waits for the node's only
// ticket past its bucket's 50 ms deadline is answered 0x86 "deadline passed
// after 60 ms in the queue" when the ticket comes, does not run, gives the
// ticket straight back and its demand too, and counts as expired.
func TestLoopDeadlineExpiredAtGrant(t *testing.T) {
	clk := newClock()
	s := newLoopServer(t, clk, withDeadline(50*time.Millisecond, time.Millisecond, 1))
	c, f := s.openFake(t)
	held := holdTicket(t, s, clk.now())
	f.send(set(1, "stale", "v"))
	c.onTraffic()
	if c.inflight == nil || s.deadline.Accepted(ingress.Write) == 0 {
		t.Fatalf("SET not queued with its demand: inflight %v, ledger %d", c.inflight, s.deadline.Accepted(ingress.Write))
	}
	clk.advance(60 * time.Millisecond)
	s.ingress.Release(held, clk.now())
	f.waitWake(t)
	c.onTraffic()
	rs := f.replies(t)
	if len(rs) != 1 || rs[0].Status != mc.StatusTemporaryFailure || string(rs[0].Value) != "deadline passed after 60 ms in the queue of bucket b" {
		t.Fatalf("replies %+v, want one 0x86 \"deadline passed after 60 ms in the queue of bucket b\"", rs)
	}
	if st := s.ingress.Stats().Write; st.Out != 0 || st.QueueLength != 0 {
		t.Fatalf("ticket not given back: %+v", st)
	}
	if a := s.deadline.Accepted(ingress.Write); a != 0 {
		t.Fatalf("ledger %d after the expiry", a)
	}
	if d := stateOf(c.bucket).dl.Stats(); d.Expired != 1 || d.Missed != 0 {
		t.Fatalf("deadline stats %+v, want 1 expired", d)
	}
	if c.bucket.Store().ItemCount() != 0 {
		t.Fatal("the expired SET was executed")
	}
}

// TestLoopDeadlineLedgerBalances: grants end exactly once on every path: a
// command that ran (Done, counted missed when late), one cancelled while
// queued (its client closed), and one refused by a full queue. The ledger
// is back at zero and nothing was counted twice.
func TestLoopDeadlineLedgerBalances(t *testing.T) {
	clk := newClock()
	s := newLoopServer(t, clk, func(o *Options) {
		withDeadline(50*time.Millisecond, time.Millisecond, 1)(o)
		o.Ingress.MaxQueueDepth = 1
	})
	c1, f1 := s.openFake(t)
	c2, f2 := s.openFake(t)
	c3, f3 := s.openFake(t)
	held := holdTicket(t, s, clk.now())
	f1.send(set(1, "a", "v"))
	c1.onTraffic() // queued
	f2.send(set(2, "b", "v"))
	c2.onTraffic() // queue full: 0x85, grant released
	if rs := f2.replies(t); len(rs) != 1 || rs[0].Status != mc.StatusBusy {
		t.Fatalf("second SET: %+v, want 0x85", rs)
	}
	c1.close() // cancelled while queued: grant released
	if a := s.deadline.Accepted(ingress.Write); a != 0 {
		t.Fatalf("ledger %d after a refusal and a cancel", a)
	}
	s.ingress.Release(held, clk.now())
	f3.send(set(3, "c", "v"))
	c3.onTraffic()
	awaitBatch(t, c3, f3)
	if rs := f3.replies(t); len(rs) != 1 || rs[0].Status != mc.StatusOK {
		t.Fatalf("third SET: %+v", rs)
	}
	d := stateOf(c3.bucket).dl.Stats()
	if a := s.deadline.Accepted(ingress.Write); a != 0 || s.deadline.StaleReleases() != 0 || d.WriteSamples != 1 || d.Expired != 0 {
		t.Fatalf("ledger %d, stale releases %d, stats %+v: want 0, 0, one sample", a, s.deadline.StaleReleases(), d)
	}
	if !strings.Contains(string(f2.out), "queue full") {
		t.Fatalf("0x85 reason %q", f2.out)
	}
}

// TestLoopDeadlineCountsInputAndExpiresAtTick: a SET pipelined behind one
// that waits for a ticket sits in the connection's input for 45 ms; its
// deadline counts from its arrival there, not from its decoding. Queued in
// turn, it is answered 0x86 "deadline passed after 51 ms in the queue of bucket b" by
// the housekeeping tick's ingress.Expire once 50 ms have passed since it
// arrived, while the ticket it waits for is still held, and it never runs.
func TestLoopDeadlineCountsInputAndExpiresAtTick(t *testing.T) {
	clk := newClock()
	s := newLoopServer(t, clk, withDeadline(50*time.Millisecond, time.Millisecond, 1))
	c, f := s.openFake(t)
	held := holdTicket(t, s, clk.now())
	f.send(set(1, "a", "v"))
	c.onTraffic() // A queued: the connection's one batch in flight
	f.send(set(2, "b", "v"))
	c.onTraffic() // B read at t0, left in the input
	clk.advance(45 * time.Millisecond)
	s.ingress.Release(held, clk.now()) // A granted 45 ms after it arrived: in time, it runs
	f.waitWake(t)
	held = holdTicket(t, s, clk.now())
	c.onTraffic() // A's reply; B decoded and admitted (alone), queued for the held ticket
	if rs := f.replies(t); len(rs) != 1 || rs[0].Status != mc.StatusOK || c.inflight == nil {
		t.Fatalf("replies %+v, B in flight %v: want A's OK and B queued", rs, c.inflight != nil)
	}
	clk.advance(5 * time.Millisecond)
	s.ingress.Expire(clk.now()) // t0+50 ms: not yet past
	select {
	case <-f.wakes:
		t.Fatal("B expired at its deadline, not after it")
	default:
	}
	clk.advance(time.Millisecond)
	s.ingress.Expire(clk.now()) // what housekeeping does every 10 ms
	f.waitWake(t)
	c.onTraffic()
	rs := f.replies(t)
	if len(rs) != 2 || rs[1].Opaque != 2 || rs[1].Status != mc.StatusTemporaryFailure ||
		string(rs[1].Value) != "deadline passed after 51 ms in the queue of bucket b" {
		t.Fatalf("replies %+v, want B's 0x86 \"deadline passed after 51 ms in the queue of bucket b\"", rs)
	}
	if st := s.ingress.Stats().Write; st.Out != 1 || st.QueueLength != 0 || st.Expired != 0 {
		t.Fatalf("write pool %+v: want the held ticket out, nobody queued, no queue timeout", st)
	}
	d := stateOf(c.bucket).dl.Stats()
	if a := s.deadline.Accepted(ingress.Write); a != 0 || d.Expired != 1 || d.Missed != 0 {
		t.Fatalf("ledger %d, deadline stats %+v: want 0 and one expired", a, d)
	}
	if _, ok := c.bucket.Store().Peek([]byte("b"), 0, nil); ok {
		t.Fatal("the expired SET was executed")
	}
	s.ingress.Release(held, clk.now())
}

// TestDeadlineRefusalEndsThrottleWait: a command refused by the gate after a
// throttle wait is answered; the wait does not carry over to the next
// command, whose deadline would otherwise count from the previous one's
// parking.
func TestDeadlineRefusalEndsThrottleWait(t *testing.T) {
	clk := newClock()
	s := newLoopServer(t, clk, withDeadline(10*time.Millisecond, time.Microsecond, 0))
	c, _ := s.openFake(t)
	c.throttledFor = time.Second
	if v := s.checkDeadline(c, set(1, "k", "v"), ingress.Write, clk.now().Add(-time.Second), clk.now()); v != admitAnswered {
		t.Fatalf("verdict %v, want answered", v)
	}
	if c.throttledFor != 0 {
		t.Fatalf("throttledFor %v after the refusal, want 0", c.throttledFor)
	}
}

// TestDeadlineCapacityIsTheBucketCap: the gate counts a bucket capped by
// max_concurrent as a pool of that many tickets: a second command whose
// demand fits the node's pool but not the bucket's one ticket is refused,
// naming 1 ticket.
func TestDeadlineCapacityIsTheBucketCap(t *testing.T) {
	clk := newClock()
	s := newLoopServer(t, clk, func(o *Options) {
		withDeadline(100*time.Millisecond, 50*time.Millisecond, 0)(o)
		o.Buckets[0].Settings.MaxConcurrent = 1
	})
	if n := s.ingress.PoolSize(ingress.Write); n < 2 {
		t.Fatalf("write pool of %d tickets: the test needs two or more", n)
	}
	c1, _ := s.openFake(t)
	c2, _ := s.openFake(t)
	now := clk.now()
	if v := s.checkDeadline(c1, set(1, "a", "v"), ingress.Write, now, now); v != admitRun {
		t.Fatalf("first command: %v, want admitted (nothing in flight)", v)
	}
	defer c1.dropGrant()
	if v := s.checkDeadline(c2, set(2, "b", "v"), ingress.Write, now, now); v != admitAnswered {
		t.Fatalf("second command: %v, want refused (a 50 ms command ahead of it on the bucket's one ticket)", v)
	}
	if out := string(c2.out); !strings.Contains(out, "of 1 tickets accepted") {
		t.Errorf("refusal %q does not count the bucket's 1 ticket", out)
	}
}
