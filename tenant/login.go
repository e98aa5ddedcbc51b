package tenant

import (
	"net"
	"runtime"
	"slices"
	"sync"
	"time"
)

// Login pacing. Password verification (argon2id) is slow by design, so it
// must neither run on the server's data workers nor let a flood of wrong
// passwords take the CPU from the tenants' data commands. A [LoginGate]
// paces the attempts:
//
//   - verification runs on the gate's own small pool (at most
//     LoginOptions.Workers at once), never on the caller's goroutine;
//   - attempts from one remote address (IP, any port) are verified one at
//     a time, in arrival order;
//   - after a failure, that address's next attempt waits loginDelay(fails):
//     it doubles from loginDelayBase up to loginDelayMax; the failure count
//     is forgotten after loginForget without a failure. The wait is a
//     timer, never a sleep: the attempt simply starts later;
//   - an attempt whose client has gone (its gone reports true) is dropped
//     unverified whenever the address is scheduled: it takes no turn and no
//     wait, and counts as no failure, so a flood of attempts abandoned by
//     their clients neither holds their connections nor delays the
//     address's next live attempt.
const (
	loginDelayBase = 50 * time.Millisecond
	loginDelayMax  = 5 * time.Second
	loginForget    = time.Minute
	// loginPrune is the number of addresses past which idle, forgotten
	// records are dropped.
	loginPrune = 4096
)

// loginDelay is how long an address waits after its fails-th failure.
func loginDelay(fails int) time.Duration {
	if fails <= 0 {
		return 0
	}
	return min(loginDelayMax, loginDelayBase<<min(fails-1, 16))
}

// LoginOptions configure a LoginGate.
type LoginOptions struct {
	// Workers is how many attempts are verified at once. Default (0 or
	// less): a quarter of GOMAXPROCS, at least 1. An argon2id verification
	// at HashPassword's parameters runs 2 threads and allocates 64 MiB, so
	// more at once would take the cores (and the garbage collector) from
	// the event loops.
	Workers int
	// Now is the clock, read when an attempt ends and when a wait is
	// scheduled; the pacing itself takes time as an argument. Default
	// time.Now.
	Now func() time.Time
}

// EnsureDefaults fills the unset fields. Every value is valid after it.
func (o *LoginOptions) EnsureDefaults() {
	if o.Workers <= 0 {
		o.Workers = max(1, runtime.GOMAXPROCS(0)/4)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
}

// LoginGate orders and paces the login attempts of each remote address and
// bounds how many are verified at once. Its methods are safe for
// concurrent use; each attempt's verify and done run on a goroutine of the
// gate's, never on Submit's caller.
type LoginGate struct {
	now func() time.Time
	sem chan struct{} // one token per verification running

	mu       sync.Mutex
	addrs    map[string]*loginAddr // guarded by mu
	draining bool                  // guarded by mu: Drain was called, attempts no longer wait
}

// loginAttempt is one queued attempt: verify reports success, done hands
// the answer back.
type loginAttempt struct {
	gone   func() bool
	verify func() bool
	done   func()
}

// loginAddr is one remote address's attempts and failures. Its fields are
// guarded by LoginGate.mu.
type loginAddr struct {
	queue   []loginAttempt // waiting, in arrival order
	busy    bool           // an attempt is being verified, or a timer is pending
	timer   *time.Timer    // the pending timer
	fails   int            // failures not yet forgotten
	last    time.Time      // last failure
	notTill time.Time      // the next attempt may start then
}

// NewLoginGate returns an empty gate.
func NewLoginGate(opts LoginOptions) *LoginGate {
	opts.EnsureDefaults()
	return &LoginGate{now: opts.Now, sem: make(chan struct{}, opts.Workers), addrs: map[string]*loginAddr{}}
}

// Submit queues a login attempt from remote ("ip:port"; another form counts
// as an address of its own). When the address's earlier attempts are done
// and its wait has passed, verify runs on the gate's pool and reports
// whether the credentials were right; done runs after the outcome has
// been counted. gone reports that the attempt's client has left: the
// attempt is then dropped unverified (done still runs). waits reports that
// the attempt will not be verified at once: it is queued behind the
// address's other attempts or its wait after a failure, or the pool is busy
// (a hint: the pool may free up before the attempt takes its place).
func (g *LoginGate) Submit(remote string, gone, verify func() bool, done func()) (waits bool) {
	ip, _, err := net.SplitHostPort(remote)
	if err != nil {
		ip = remote
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	a := g.addrs[ip]
	if a == nil {
		if len(g.addrs) >= loginPrune {
			g.pruneLocked(g.now())
		}
		a = &loginAddr{}
		g.addrs[ip] = a
	}
	busy := len(g.sem) == cap(g.sem) // looked at first: ours, once started, takes a place at once
	a.queue = append(a.queue, loginAttempt{gone, verify, done})
	g.scheduleLocked(a)
	// Only the head leaves per schedule: ours, the last, left only if it was the head.
	return len(a.queue) > 0 || busy
}

// scheduleLocked starts the address's next attempt when it may start, or
// sets a timer for when it may.
func (g *LoginGate) scheduleLocked(a *loginAddr) {
	a.dropGone()
	if a.busy || len(a.queue) == 0 {
		return
	}
	a.busy = true
	if wait := a.wait(g.now()); wait > 0 && !g.draining {
		a.timer = time.AfterFunc(wait, func() {
			g.mu.Lock()
			a.busy, a.timer = false, nil
			g.scheduleLocked(a)
			g.mu.Unlock()
		})
		return
	}
	at := a.queue[0]
	a.queue[0] = loginAttempt{}
	a.queue = a.queue[1:]
	go g.verify(a, at)
}

// Drain stops the pacing: the attempts waiting and those to come start at
// once (still bounded by the pool), so that a server shutting down answers
// them within its grace period instead of closing their connections
// unanswered.
func (g *LoginGate) Drain() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.draining = true
	for _, a := range g.addrs {
		if a.timer != nil && a.timer.Stop() {
			a.busy, a.timer = false, nil
			g.scheduleLocked(a)
		}
	}
}

// verify runs one attempt on the bounded pool, records its outcome and
// hands the answer back.
func (g *LoginGate) verify(a *loginAddr, at loginAttempt) {
	g.sem <- struct{}{}
	tried := !at.gone() // it may have left while it waited for the pool
	ok := tried && at.verify()
	<-g.sem
	now := g.now()
	g.mu.Lock()
	if tried {
		a.record(ok, now)
	}
	a.busy = false
	g.scheduleLocked(a)
	g.mu.Unlock()
	at.done()
}

// dropGone takes the attempts whose client has gone out of the queue and
// answers them (done, on a goroutine of their own: never under the gate's
// lock).
func (a *loginAddr) dropGone() {
	a.queue = slices.DeleteFunc(a.queue, func(at loginAttempt) bool {
		gone := at.gone() // once: the client may leave between two looks
		if gone {
			go at.done()
		}
		return gone
	})
}

// pruneLocked drops the idle addresses whose failures are forgotten.
func (g *LoginGate) pruneLocked(now time.Time) {
	for ip, a := range g.addrs {
		if a.idle(now) {
			delete(g.addrs, ip)
		}
	}
}

// wait is how long the address's next attempt must still wait at now.
func (a *loginAddr) wait(now time.Time) time.Duration { return a.notTill.Sub(now) }

// record counts an attempt's outcome at now: a failure more (the count
// forgotten first when the last one is older than loginForget), and when
// the next attempt may start.
func (a *loginAddr) record(ok bool, now time.Time) {
	if now.Sub(a.last) > loginForget {
		a.fails = 0
	}
	if !ok {
		a.fails++
		a.last = now
	}
	a.notTill = now.Add(loginDelay(a.fails))
}

// idle reports whether the address has nothing queued or running and its
// failures are forgotten at now: its record can go.
func (a *loginAddr) idle(now time.Time) bool {
	return !a.busy && len(a.queue) == 0 && now.Sub(a.last) > loginForget
}
