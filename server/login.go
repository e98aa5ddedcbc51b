package server

import (
	"bytes"
	"net"
	"runtime"
	"sync"
	"time"

	mc "kvd/protocol/binary"
)

// Login throttling. Password verification (argon2id) is slow by design, so
// it must neither run on the data workers nor let a flood of wrong
// passwords take the CPU from the tenants' data commands:
//
//   - verification runs on its own small pool (loginGate.sem: at most
//     loginWorkers hashes at once), never on a loop or a data worker;
//   - attempts from one remote address (IP, any port) are verified one at
//     a time, in arrival order;
//   - after a failure, that address's next attempt waits loginDelay(fails):
//     it doubles from loginDelayBase up to loginDelayMax; the failure count
//     is forgotten after loginForget without a failure. The wait is a timer,
//     never a sleep on a loop: the connection just has its SASL_AUTH in
//     flight until it is answered.
const (
	loginDelayBase = 50 * time.Millisecond
	loginDelayMax  = 5 * time.Second
	loginForget    = time.Minute
	// loginPrune is the number of addresses past which idle, forgotten
	// records are dropped.
	loginPrune = 4096
)

// loginWorkers is the size of the password-verification pool: a quarter
// of the cores, at least 1. An argon2id verification at HashPassword's
// parameters runs 2 threads and allocates 64 MiB, so more hashes at once
// would take the cores (and the garbage collector) from the loops.
func loginWorkers() int { return max(1, runtime.GOMAXPROCS(0)/4) }

// loginDelay is how long an address waits after its fails-th failure.
func loginDelay(fails int) time.Duration {
	if fails <= 0 {
		return 0
	}
	return min(loginDelayMax, loginDelayBase<<min(fails-1, 16))
}

// loginGate orders and paces the SASL attempts of each remote address and
// bounds how many are verified at once.
type loginGate struct {
	now func() time.Time
	sem chan struct{} // one token per verification running

	mu  sync.Mutex
	ips map[string]*loginAddr // guarded by mu
}

// loginAddr is one remote address's attempts and failures.
type loginAddr struct {
	ip      string
	queue   []*batch  // attempts waiting, in arrival order
	busy    bool      // an attempt is being verified, or a timer is pending
	fails   int       // failures not yet forgotten
	last    time.Time // last failure
	notTill time.Time // the next attempt may start then
}

func newLoginGate(now func() time.Time) *loginGate {
	return &loginGate{now: now, sem: make(chan struct{}, loginWorkers()), ips: map[string]*loginAddr{}}
}

// submit queues a SASL_AUTH batch of the connection from remote ("ip:port").
// The batch's job verifies the credentials; its connection is woken with
// the answer when it is done.
func (g *loginGate) submit(remote string, b *batch) {
	ip, _, err := net.SplitHostPort(remote)
	if err != nil {
		ip = remote
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	a := g.ips[ip]
	if a == nil {
		if len(g.ips) >= loginPrune {
			g.pruneLocked()
		}
		a = &loginAddr{ip: ip}
		g.ips[ip] = a
	}
	a.queue = append(a.queue, b)
	g.scheduleLocked(a)
}

// scheduleLocked starts the address's next attempt when it may start, or
// sets a timer for when it may.
func (g *loginGate) scheduleLocked(a *loginAddr) {
	if a.busy || len(a.queue) == 0 {
		return
	}
	a.busy = true
	if wait := a.notTill.Sub(g.now()); wait > 0 {
		time.AfterFunc(wait, func() {
			g.mu.Lock()
			a.busy = false
			g.scheduleLocked(a)
			g.mu.Unlock()
		})
		return
	}
	b := a.queue[0]
	a.queue[0] = nil
	a.queue = a.queue[1:]
	go g.verify(a, b)
}

// verify runs one attempt on the bounded pool, records its outcome and
// hands the batch back to its connection.
func (g *loginGate) verify(a *loginAddr, b *batch) {
	g.sem <- struct{}{}
	ok := b.c.authenticate(b)
	<-g.sem
	now := g.now()
	g.mu.Lock()
	if now.Sub(a.last) > loginForget {
		a.fails = 0
	}
	if !ok {
		a.fails++
		a.last = now
	}
	a.notTill = now.Add(loginDelay(a.fails))
	a.busy = false
	g.scheduleLocked(a)
	g.mu.Unlock()
	b.c.finish(b)
}

// pruneLocked drops the idle addresses whose failures are forgotten.
func (g *loginGate) pruneLocked() {
	now := g.now()
	for ip, a := range g.ips {
		if !a.busy && len(a.queue) == 0 && now.Sub(a.last) > loginForget {
			delete(g.ips, ip)
		}
	}
}

// authenticate verifies the PLAIN credentials of b's SASL_AUTH (run by
// loginGate.verify) and encodes the answer; on success the login is
// applied on the loop when the batch is collected. It reports success. A
// connection already closed is not verified.
func (c *conn) authenticate(b *batch) bool {
	c.mu.Lock()
	gone := c.gone
	c.mu.Unlock()
	if gone {
		return true // nothing was tried: no failure to count
	}
	r := b.reqs[0]
	parts := bytes.SplitN(r.value, []byte{0}, 3)
	name, password := string(parts[1]), parts[2]
	gen := c.srv.usersGen.Load() // the users this login is checked against
	user, err := c.srv.users.Authenticate(name, password)
	if err != nil {
		c.srv.log.Warn("login refused", "user", name, "remote", c.remote)
		st, reason := statusOf(err)
		b.out = c.appendError(b.out, r.hdr, st, reason, nil)
		return false
	}
	b.out = c.appendReply(b.out, r.hdr, mc.StatusOK, 0, nil, nil, []byte("Authenticated"))
	b.after = func(c *conn) { c.login(user); c.usersGen = gen }
	return true
}
