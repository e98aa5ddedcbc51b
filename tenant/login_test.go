package tenant

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestLoginDelay(t *testing.T) {
	for _, c := range []struct {
		fails int
		want  time.Duration
	}{{0, 0}, {1, loginDelayBase}, {2, 2 * loginDelayBase}, {4, 8 * loginDelayBase}, {8, loginDelayMax}, {1000, loginDelayMax}} {
		if got := loginDelay(c.fails); got != c.want {
			t.Errorf("loginDelay(%d) = %v, want %v", c.fails, got, c.want)
		}
	}
}

// TestLoginAddrRecord: failures count and delay the next attempt; a
// success keeps the count; a minute without failure forgets it.
func TestLoginAddrRecord(t *testing.T) {
	t0 := time.Unix(1000, 0)
	var a loginAddr
	for i, s := range []struct {
		ok    bool
		at    time.Duration
		fails int
		wait  time.Duration // from the outcome on
	}{
		{false, 0, 1, loginDelayBase},
		{false, time.Second, 2, 2 * loginDelayBase},
		{true, 2 * time.Second, 2, 2 * loginDelayBase}, // a success does not forgive
		{false, 3 * time.Second, 3, 4 * loginDelayBase},
		{true, 3*time.Second + loginForget + 1, 0, 0}, // forgotten
		{false, 2 * loginForget, 1, loginDelayBase},
	} {
		now := t0.Add(s.at)
		a.record(s.ok, now)
		if a.fails != s.fails || a.wait(now) != s.wait {
			t.Fatalf("step %d: fails %d wait %v, want %d %v", i, a.fails, a.wait(now), s.fails, s.wait)
		}
		if a.wait(now.Add(s.wait)) > 0 {
			t.Fatalf("step %d: still waiting after the delay", i)
		}
	}
	if a.idle(t0.Add(2 * loginForget)) {
		t.Fatal("idle right after a failure")
	}
	if !a.idle(t0.Add(3*loginForget + 1)) {
		t.Fatal("not idle after loginForget")
	}
}

// fakeClock is a settable clock.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// attempt is a login attempt whose verification the test lets finish.
type attempt struct {
	started chan struct{}
	finish  chan bool // the outcome
	done    chan struct{}
	gone    atomic.Bool // its client has left
	waits   bool        // Submit's answer
}

func submit(g *LoginGate, remote string) *attempt {
	a := &attempt{started: make(chan struct{}), finish: make(chan bool), done: make(chan struct{})}
	a.waits = g.Submit(remote, a.gone.Load, func() bool { close(a.started); return <-a.finish }, func() { close(a.done) })
	return a
}

func wait(t *testing.T, ch chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: never happened", what)
	}
}

func notYet(t *testing.T, ch chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
		t.Fatalf("%s: happened too early", what)
	case <-time.After(100 * time.Millisecond):
	}
}

// TestLoginGateOneAtATimePerAddress: one address's attempts are verified
// one after the other, in arrival order, whatever the port; another
// address goes on meanwhile.
func TestLoginGateOneAtATimePerAddress(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1000, 0)}
	g := NewLoginGate(LoginOptions{Workers: 4, Now: clk.now})
	a1 := submit(g, "10.0.0.1:1000")
	a2 := submit(g, "10.0.0.1:1001")
	a3 := submit(g, "10.0.0.1:1002")
	b1 := submit(g, "10.0.0.2:1000")
	wait(t, a1.started, "first attempt")
	wait(t, b1.started, "other address")
	notYet(t, a2.started, "second attempt while the first runs")
	a1.finish <- true
	wait(t, a1.done, "first answer")
	wait(t, a2.started, "second attempt")
	select {
	case <-a3.started:
		t.Fatal("third attempt before the second")
	default:
	}
	a2.finish <- true
	wait(t, a3.started, "third attempt")
	a3.finish <- true
	b1.finish <- true
	wait(t, a3.done, "third answer")
	wait(t, b1.done, "other answer")
}

// TestLoginGatePool: at most Workers verifications run at once.
func TestLoginGatePool(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1000, 0)}
	g := NewLoginGate(LoginOptions{Workers: 2, Now: clk.now})
	var as []*attempt
	for i := range 3 {
		as = append(as, submit(g, fmt.Sprintf("10.0.0.%d:1000", i+1)))
	}
	started := func() int {
		n := 0
		for _, a := range as {
			select {
			case <-a.started:
				n++
			default:
			}
		}
		return n
	}
	deadline := time.Now().Add(10 * time.Second)
	for started() < 2 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond)
	if n := started(); n != 2 {
		t.Fatalf("%d verifications running, want 2", n)
	}
	for _, a := range as {
		select {
		case <-a.started:
			a.finish <- true
			wait(t, a.done, "answer")
		default:
		}
	}
	for _, a := range as {
		wait(t, a.started, "the waiting attempt")
	}
	for _, a := range as {
		select {
		case <-a.done:
		default:
			a.finish <- true
			wait(t, a.done, "last answer")
		}
	}
}

// gateAfterFailure is a one-worker gate on a clock standing still whose
// first attempt, from 10.0.0.1, has failed.
func gateAfterFailure(t *testing.T) (*fakeClock, *LoginGate) {
	clk := &fakeClock{t: time.Unix(1000, 0)}
	g := NewLoginGate(LoginOptions{Workers: 1, Now: clk.now})
	a1 := submit(g, "10.0.0.1:1000")
	wait(t, a1.started, "first attempt")
	a1.finish <- false
	wait(t, a1.done, "first answer")
	return clk, g
}

// TestLoginGateDelayAfterFailure: after a failure the address's next
// attempt waits until the clock has passed the delay.
func TestLoginGateDelayAfterFailure(t *testing.T) {
	clk, g := gateAfterFailure(t)
	a2 := submit(g, "10.0.0.1:1001")
	other := submit(g, "10.0.0.2:1000")
	wait(t, other.started, "another address")
	other.finish <- false
	notYet(t, a2.started, "the attempt after a failure, the clock standing still")
	clk.add(loginDelayBase)
	wait(t, a2.started, "the attempt once the delay passed")
	a2.finish <- true
	wait(t, a2.done, "second answer")
}

// TestLoginGateDropsGone: an attempt whose client left while it waited is
// answered unverified and dropped; it takes no turn and counts no failure,
// and the live attempt behind it starts as soon as the delay has passed.
func TestLoginGateDropsGone(t *testing.T) {
	clk, g := gateAfterFailure(t)
	a2 := submit(g, "10.0.0.1:1001")
	a3 := submit(g, "10.0.0.1:1002")
	if !a2.waits || !a3.waits {
		t.Fatalf("Submit after a failure: waits %v, %v; want true, true", a2.waits, a3.waits)
	}
	a2.gone.Store(true)
	wait(t, a2.done, "the answer to the attempt whose client left") // at the timer's next schedule
	select {
	case <-a2.started:
		t.Fatal("an attempt whose client left was verified")
	default:
	}
	notYet(t, a3.started, "the live attempt, the clock standing still")
	clk.add(loginDelayBase)
	wait(t, a3.started, "the live attempt once the delay passed")
	a3.finish <- false
	wait(t, a3.done, "the live attempt's answer")
	g.mu.Lock()
	fails := g.addrs["10.0.0.1"].fails
	g.mu.Unlock()
	if fails != 2 {
		t.Fatalf("%d failures recorded, want 2: the attempt whose client left counts none", fails)
	}
	if a4 := submit(g, "10.0.0.9:1"); a4.waits {
		t.Fatal("Submit from a new address, the pool free: waits true, want false")
	} else {
		wait(t, a4.started, "the new address's attempt")
		if a5 := submit(g, "10.0.0.10:1"); !a5.waits { // the one worker verifies a4
			t.Fatal("Submit from another new address, the pool busy: waits false, want true")
		} else {
			a4.finish <- true
			wait(t, a5.started, "the attempt that waited for the pool")
			a5.finish <- true
		}
	}
}

// TestLoginGateDrain: after Drain an attempt waiting out a failure's delay
// starts at once, and so does the next, the clock standing still.
func TestLoginGateDrain(t *testing.T) {
	_, g := gateAfterFailure(t)
	a2 := submit(g, "10.0.0.1:1001")
	notYet(t, a2.started, "the attempt after a failure, the clock standing still")
	g.Drain()
	wait(t, a2.started, "the waiting attempt once the gate drains")
	a2.finish <- false
	wait(t, a2.done, "second answer")
	a3 := submit(g, "10.0.0.1:1002")
	wait(t, a3.started, "an attempt after a failure while draining")
	a3.finish <- true
	wait(t, a3.done, "third answer")
}

// TestLoginGatePrune: past loginPrune addresses, the records of idle
// addresses whose failures are forgotten are dropped.
func TestLoginGatePrune(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1000, 0)}
	g := NewLoginGate(LoginOptions{Workers: 4, Now: clk.now})
	var wg sync.WaitGroup
	for i := range loginPrune {
		wg.Add(1)
		ok := i%2 == 0
		g.Submit(fmt.Sprintf("10.%d.%d.1:1", i>>8, i&255), func() bool { return false }, func() bool { return ok }, wg.Done)
	}
	wg.Wait()
	clk.add(loginForget / 2)
	wg.Add(1) // the 4097th address: the successes' records go, the failures' stay
	g.Submit("192.0.2.1:1", func() bool { return false }, func() bool { return false }, wg.Done)
	wg.Wait()
	g.mu.Lock()
	n := len(g.addrs)
	_, kept := g.addrs["10.0.1.1"]
	_, dropped := g.addrs["10.0.0.1"]
	g.mu.Unlock()
	if n != loginPrune/2+1 || !kept || dropped {
		t.Fatalf("%d addresses after pruning (failure kept %v, success dropped %v), want %d",
			n, kept, !dropped, loginPrune/2+1)
	}
}
