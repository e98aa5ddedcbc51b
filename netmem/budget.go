package netmem

import (
	"cmp"
	"iter"
	"log/slog"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/panjf2000/gnet/v2"
)

// The budget's constants.
const (
	// PauseFloor: connections holding less are never paused for memory (a
	// normal client's pipeline of small commands).
	PauseFloor = 64 << 10
	// SmallFrame: a frame up to this size is always read (Budget.Admit); a
	// larger one only while the node has room for all of it. What a
	// connection holds of a frame it was not admitted is at most this.
	SmallFrame = 8 << 10
	// CloseGrace is how long the node may stay over its budget before the
	// connection holding the most is closed; at most one per CloseEvery
	// after that.
	CloseGrace = 5 * time.Second
	CloseEvery = time.Second
	// ForceEvery: without room, when the total has not fallen for this
	// long, a paused connection holding PauseFloor or more of commands
	// whose client has read every reply is let go on, at most one this
	// often (Tick).
	ForceEvery = 100 * time.Millisecond
	// FreeOSEvery bounds how often freed buffer memory is returned to the
	// OS, and FreeOSMin is the peak that makes it worth it.
	FreeOSEvery = 10 * time.Second
	FreeOSMin   = 8 << 20
)

// Limits are the figures one pass is accounted against. The server reads
// them from its (reloadable) settings at each pass.
type Limits struct {
	Budget      int64 // max_buffer_bytes: what all connections together may hold
	ConnOutput  int   // max_conn_output: a connection's unsent replies before it stops executing
	ConnWaiting int   // the input a Waiting connection may hold before it is not read (WaitingInput)
	ConnBuffer  int   // a connection's input or output past which it is closed
}

// Stall is why a connection cannot decode what it holds now (Account).
type Stall uint8

const (
	NotStalled Stall = iota // it decodes, or waits for the rest of a frame: read
	// Waiting: its login waits for its turn at the login gate. It is read
	// until it holds Limits.ConnWaiting, so that a client that leaves is
	// seen and its attempt takes no turn.
	Waiting
	// Busy: a batch of its commands runs, its next command waits for an
	// ingress ticket or the throttle, or its output or memory stops it. It
	// is not read: gnet closes a connection when it reads the client's end
	// of file, so a client that half-closes after its last command would
	// lose the replies still to come, and the commands still to run (a
	// client that leaves while its command waits is seen once that command
	// has run, or at once when its socket is reset).
	Busy
)

// WaitingInput is the server's Limits.ConnWaiting: past it a Waiting
// connection is not read either, until half of it is left, so that a client
// pipelining behind its login is pushed back by TCP instead of reaching
// ConnBuffer.
const WaitingInput = 4 << 20

// Conn is what the budget does to a connection from housekeeping: wake its
// loop for a pass, or close it. gnet.Conn has both. A Conn that also
// implements [ReadSwitch] is paused through it instead of through gnet's
// poller (tests).
type Conn interface {
	Wake(cb gnet.AsyncCallback) error
	Close() error
}

// ReadSwitch turns a connection's read interest on or off (see
// Holder.setReading); a fake connection implements it to see its pauses.
type ReadSwitch interface {
	SetReading(on, writing, hangup bool) error
}

// Stats are the budget's figures, as STAT and /metrics show them.
type Stats struct {
	Held      int64 // bytes held by all connections, as last accounted
	Paused    int   // connections paused now for memory or output (not counting input pauses)
	MemPauses int64 // pauses for the node's budget since start
	OutPauses int64 // pauses for max_conn_output since start
	InPauses  int64 // stops in reading a connection whose input waited behind a stall, since start
	Closed    int64 // connections closed for memory (budget or ConnBuffer)
	Refused   int64 // frames refused at their header for memory (Admit) since start
}

// Budget is the node's network memory: the total the connections hold, the
// set of paused connections, and housekeeping's state. Create it with New.
type Budget struct {
	log     *slog.Logger
	release func() // hands freed memory back to the OS

	held      atomic.Int64 // sum of the Holders' held
	peak      atomic.Int64 // highest held since the last release
	memPauses atomic.Int64
	outPauses atomic.Int64
	inPauses  atomic.Int64
	closed    atomic.Int64
	refused   atomic.Int64
	memPaused atomic.Int64 // Holders paused for memory now
	unbound   Share        // the admitted frames of connections in no group
	frames    atomic.Int64 // the admitted frames of every group together

	mu     sync.Mutex
	paused map[*Holder]struct{} // guarded by mu: the Holders with a pause reason

	overSince, lastClose, lastFree time.Time // Tick's own
	lastTotal                      int64     // Tick's own: the total it saw last
	lastForced, lastFall           time.Time // Tick's own: when it last let one go on without room, saw the total fall
	tickList                       []*Holder // Tick's own: the paused set it works through
	closeList                      []*Holder // Tick's own: lastResort's candidates
	refusedLogged                  int64     // Tick's own: Refused when it last logged
	lastRefusedLog                 time.Time
}

// New returns an empty budget that logs its pauses and closes to log.
func New(log *slog.Logger) *Budget {
	return &Budget{log: log, release: releaseMemory, paused: map[*Holder]struct{}{}}
}

// Stats returns the budget's figures.
func (b *Budget) Stats() Stats {
	b.mu.Lock()
	paused := len(b.paused)
	b.mu.Unlock()
	return Stats{Held: b.held.Load(), Paused: paused, MemPauses: b.memPauses.Load(),
		OutPauses: b.outPauses.Load(), InPauses: b.inPauses.Load(), Closed: b.closed.Load(),
		Refused: b.refused.Load()}
}

// pause reasons, bits of Holder.paused.
const (
	pausedOutput uint8 = 1 << iota // unsent replies over Limits.ConnOutput
	pausedMemory                   // the node over Limits.Budget
	pausedInput                    // stalled (Busy, or Waiting past ConnWaiting): not read
)

// Holder is one connection's share of the budget. The connection embeds it,
// calls Init once, and then only its event loop calls the budget's methods
// with it; housekeeping reads pub and sets resume.
type Holder struct {
	conn   Conn
	remote string // for the log
	held   int64  // bytes held at the end of the last pass
	paused uint8  // pause reasons
	epfd   int    // the loop's epoll descriptor: 0 unknown yet, -1 unavailable

	interest uint8 // the read interest setReading last set (interest bits); 0 none yet
	wrote    bool  // the connection gave gnet replies since the last Account (Wrote)

	share   *Share // the group its admitted frame counts in (Admit), nil if none
	shared  int64  // what that frame counts there (and in Budget.frames)
	refusal string // why Admit last refused a frame
	gone    bool   // Forget took it out: its connection closed, for good

	pub     atomic.Int64 // held, for housekeeping
	drained atomic.Bool  // its client has every reply (nothing out), for housekeeping
	resume  atomic.Bool  // housekeeping lets a memory-paused connection go on
	closing atomic.Bool  // the last resort closed it (gnet closes it on its loop, later)

	// Tick's own (due): pub when it last looked, and the gap between its
	// wakes of this paused connection and the ticks left until the next;
	// when Tick last let it go on without room (forceable).
	tickHeld          int64
	tickGap, tickWait int
	forcedAt          time.Time
}

// Init ties h to its connection, named remote in the log.
func (h *Holder) Init(c Conn, remote string) { h.conn, h.remote, h.gone = c, remote, false }

// Paused reports whether the connection is paused for memory or output: it
// decodes nothing until a pass's Account ends the pause. (An input pause
// stops only the reading: what was read is decoded as before.)
func (h *Holder) Paused() bool { return h.paused&^pausedInput != 0 }

// Account publishes what h's connection holds after a pass of its loop (in
// bytes of input not decoded yet, out of replies gnet has not sent) and
// decides its pauses, turning its socket's read interest off or on; stall
// says whether and why it cannot decode what it holds (see Stall). frame is
// the length of the frame Admit let it read that has not all arrived (0:
// none): it is held whole from its header on, and never paused for memory,
// since that would not free its bytes. It reports true when the connection
// is over lim.ConnBuffer and must be closed. After Forget it does nothing: a
// pass can outlive its connection (gnet closes one whose write fails from
// inside the write), and what it would account then is held by nobody.
func (b *Budget) Account(h *Holder, in, out, frame int, stall Stall, lim Limits) (closeConn bool) {
	if h.gone {
		return false
	}
	held := int64(max(in, frame) + out)
	total := b.publish(h, held)
	if d := out == 0; d != h.drained.Load() {
		h.drained.Store(d)
	}
	if in > lim.ConnBuffer || out > lim.ConnBuffer {
		b.closed.Add(1)
		b.log.Warn("closing connection", "remote", h.remote, "reason", "buffer over limit",
			"inbound", in, "outbound", out, "limit", lim.ConnBuffer)
		return true
	}
	was := h.paused
	h.paused = h.want(in, out, stall, held-int64(frame), total, lim)
	b.countMemory(was, h.paused)
	if h.paused != 0 || was != 0 {
		h.setInterest(b.log, h.paused == 0, out > 0, h.paused&pausedMemory != 0)
	}
	h.wrote = false
	// Housekeeping looks at the connections paused for memory or output;
	// one paused for input only is woken by what stalls it (its batch, the
	// throttle's tick).
	if watched, wasWatched := h.paused&^pausedInput != 0, was&^pausedInput != 0; watched && !wasWatched {
		b.watch(h, true)
	} else if !watched && wasWatched {
		b.watch(h, false)
	}
	if h.paused&^was&pausedMemory != 0 {
		b.memPauses.Add(1)
		b.log.Info("pausing connection", "remote", h.remote, "reason", "max_buffer_bytes",
			"bytes", held, "node_bytes", total, "limit", lim.Budget)
	}
	if h.paused&^was&pausedOutput != 0 {
		b.outPauses.Add(1)
	}
	if h.paused&^was&pausedInput != 0 && in > 0 {
		b.inPauses.Add(1)
	}
	return false
}

// publish records that h holds held bytes and returns the node's total.
// Most passes hold what they held: they write nothing the loops share.
func (b *Budget) publish(h *Holder, held int64) int64 {
	if held == h.held {
		return b.held.Load()
	}
	total := b.held.Add(held - h.held)
	h.held = held
	h.pub.Store(held)
	if total > b.peak.Load() {
		b.peak.Store(total)
	}
	return total
}

// want is h's pause state for the figures of this pass. Output pauses past
// the cap and lasts until half of it; a Busy connection is not read, nor
// one whose replies gnet still holds (gnet turns reading back on once they
// are sent), nor a Waiting one past ConnWaiting until half of it is left; a
// memory pause
// lasts until housekeeping lets the connection go on (resume). loose is
// what it holds besides an admitted frame: only that may pause it for
// memory.
func (h *Holder) want(in, out int, stall Stall, loose, total int64, lim Limits) uint8 {
	p := uint8(0)
	if out > lim.ConnOutput || (h.paused&pausedOutput != 0 && out > lim.ConnOutput/2) {
		p |= pausedOutput
	}
	if stall == Busy || out > 0 || stall == Waiting && (in > lim.ConnWaiting || h.paused&pausedInput != 0 && in > lim.ConnWaiting/2) {
		p |= pausedInput
	}
	if h.resume.Swap(false) {
		return p
	}
	if h.paused&pausedMemory != 0 || (total > lim.Budget && loose >= PauseFloor) {
		p |= pausedMemory
	}
	return p
}

// Share is what one group of connections (the server's: a bucket's) holds
// in admitted frames that have not all arrived. Its zero value is empty.
type Share struct{ n atomic.Int64 }

// Admit reports whether h's connection may read on into a frame of frame
// bytes whose header has come: a small frame always, a larger one while the
// node's total and all of it fit the budget, and while the frames its group
// sh (nil: the connections in no group, together) has admitted and it fit
// half of what the other groups' admitted frames leave of the budget.
// Account then holds it whole until it has arrived, so that the frames
// being read never add up past the budget, however many connections start
// one; and the connections of one group, or of a few, that start frames and
// stall cannot take the room every other group's large writes need (150
// connections holding half-sent 1 MB values refused every tenant's 200 KB
// SETs for 20 s; with each group held to half of the budget, two groups
// together could still fill it). A group alone may have half of the
// budget, a second half of the rest, and so on: the last group admitted
// always leaves at least what it holds. A refused frame is counted
// (Stats.Refused) and its reason kept (Refusal); the server answers it at
// its header and discards its body as it comes, so that it costs no
// memory. FrameDone (or Forget) ends what an admitted frame counts in its
// group.
func (b *Budget) Admit(h *Holder, frame int, budget int64, sh *Share) bool {
	if frame <= SmallFrame {
		return true
	}
	if h.gone {
		h.refusal = "the connection is closed"
		return false
	}
	f, who := int64(frame), "this bucket's connections"
	if sh == nil {
		sh, who = &b.unbound, "the connections without a bucket"
	}
	var why string
	held := sh.n.Load()
	switch others := b.frames.Load() - held; {
	case b.held.Load()+f > budget:
		why = "the connections hold max_buffer_bytes=" + strconv.FormatInt(budget, 10)
	case held+f > (budget-others)/2:
		why = who + " hold " + strconv.FormatInt(held, 10) + " bytes of unfinished frames and the others " +
			strconv.FormatInt(others, 10) + ": at most half of what the others leave of max_buffer_bytes=" +
			strconv.FormatInt(budget, 10)
	default:
		b.FrameDone(h)
		sh.n.Add(f)
		b.frames.Add(f)
		h.share, h.shared = sh, f
		return true
	}
	h.refusal = "no room for a frame of " + strconv.Itoa(frame) + " bytes: " + why
	b.refused.Add(1)
	return false
}

// Refusal is why Admit last refused a frame of h's connection.
func (h *Holder) Refusal() string { return h.refusal }

// FrameDone ends what h's admitted frame counts in its group: it has
// arrived, or was given up.
func (b *Budget) FrameDone(h *Holder) {
	if h.share != nil {
		h.share.n.Add(-h.shared)
		b.frames.Add(-h.shared)
		h.share, h.shared = nil, 0
	}
}

// Over reports whether the node would be over budget if h held held bytes
// instead of what it last accounted: a connection's pass asks it before
// adding to replies it already holds (the server's output stop).
func (b *Budget) Over(h *Holder, held, budget int64) bool {
	return b.held.Load()-h.held+held > budget
}

// Forget takes a closing connection out of the node's figures, for good:
// Account and Admit ignore it from then on.
func (b *Budget) Forget(h *Holder) {
	h.gone = true
	b.FrameDone(h)
	b.held.Add(-h.held)
	h.held = 0
	h.pub.Store(0)
	if h.paused != 0 {
		b.countMemory(h.paused, 0)
		h.paused = 0
		b.watch(h, false)
	}
}

// countMemory keeps Budget.memPaused as a Holder's pause reasons go from
// was to now.
func (b *Budget) countMemory(was, now uint8) {
	switch {
	case was&pausedMemory == 0 && now&pausedMemory != 0:
		b.memPaused.Add(1)
	case was&pausedMemory != 0 && now&pausedMemory == 0:
		b.memPaused.Add(-1)
	}
}

// Unpause ends h's pauses and reads its socket again, whatever it holds (the
// server shutting down answers what is left); writing tells whether gnet
// still holds replies for it.
func (b *Budget) Unpause(h *Holder, writing bool) {
	if h.paused == 0 {
		return
	}
	b.countMemory(h.paused, 0)
	h.paused = 0
	b.watch(h, false)
	h.setReading(b.log, true, writing, false)
}

// Wrote tells h that its connection gave gnet replies (gnet.Conn.Write)
// since the last Account: gnet may have changed the socket's interest.
func (h *Holder) Wrote() { h.wrote = true }

// Bits of Holder.interest.
const (
	interestSet uint8 = 1 << iota
	interestOn
	interestWriting
	interestHangup
)

// setInterest is setReading unless that interest is the one set last and
// gnet cannot have changed it since. gnet changes it only when a write
// leaves replies in an empty outbound buffer (reading and writing on),
// which happens in the connection's own pass (Wrote), and when that buffer
// drains (reading on), after which out is 0 and the interest wanted has no
// writing where the one set last had it. A paused connection woken by
// every Tick then costs no epoll_ctl a pass (1,500 readers that never read
// spent half of kvd's CPU in it).
func (h *Holder) setInterest(log *slog.Logger, on, writing, hangup bool) {
	if interestOf(on, writing, hangup) == h.interest && !h.wrote {
		return
	}
	h.setReading(log, on, writing, hangup)
}

func interestOf(on, writing, hangup bool) uint8 {
	i := interestSet
	if on {
		i |= interestOn
	}
	if writing {
		i |= interestWriting
	}
	if hangup {
		i |= interestHangup
	}
	return i
}

// setReading puts the socket's interest in its loop's epoll set to read (on)
// or to nothing but write when replies wait (off). With hangup, a client's
// FIN (EPOLLRDHUP) reaches gnet, which then closes the connection: a
// memory-paused client that leaves frees what it holds at once, instead of
// at the idle timeout. (An output pause leaves it out: a client that
// half-closes and then reads its replies slowly is served to the end.)
// gnet itself turns reading back on when its outbound buffer drains;
// Account turns it off again on the next pass if the connection is still
// paused.
func (h *Holder) setReading(log *slog.Logger, on, writing, hangup bool) {
	h.interest = interestOf(on, writing, hangup)
	if rs, ok := h.conn.(ReadSwitch); ok {
		_ = rs.SetReading(on, writing, hangup)
		return
	}
	if gc, ok := h.conn.(gnet.Conn); ok {
		h.epollReading(log, gc, on, writing, hangup)
	}
}

// watch adds h to the paused set (on) or takes it out.
func (b *Budget) watch(h *Holder, on bool) {
	b.mu.Lock()
	if on {
		b.paused[h] = struct{}{}
	} else {
		delete(b.paused, h)
	}
	b.mu.Unlock()
}

// pausedHolders lists the paused set in b.tickList, those holding the
// least first when sorted.
func (b *Budget) pausedHolders(sorted bool) []*Holder {
	b.mu.Lock()
	list := b.tickList[:0]
	for h := range b.paused {
		list = append(list, h)
	}
	b.mu.Unlock()
	if sorted {
		slices.SortFunc(list, func(x, y *Holder) int { return cmp.Compare(x.pub.Load(), y.pub.Load()) })
	}
	b.tickList = list
	return list
}

// MaxWakeGap is the most ticks housekeeping lets pass between two wakes of
// a paused connection whose figures do not change (Holder.due).
const MaxWakeGap = 8

// Tick is housekeeping's part, called from one goroutine: wake paused
// connections to look at their output (due), let memory-paused ones go on
// when there is room, or one at a time when nothing drains (below), close
// the largest holders as the last resort (all lists the open connections'
// Holders; it is read only when the node is past 3/4 of its budget), and
// return memory to the OS after a peak.
//
// Without room, when the total has not fallen for ForceEvery, a tick lets
// one forceable paused connection go on, at most one every ForceEvery: the
// one let go on longest ago (or never), the smallest of those. What paused
// connections hold in commands they have read can drain only by running
// them, and when they held 3/4 of the budget themselves nothing moved until
// the last resort closed them (40 clients pipelining 1 MiB SET/GET pairs
// against 64 MiB lost a sixth of their replies to resets). Taking turns,
// small connections that refill at once cannot keep a large one waiting.
// While one is forceable the node is not stuck, and the last resort waits
// for the budget itself (lastResort).
func (b *Budget) Tick(now time.Time, budget int64, all iter.Seq[*Holder]) {
	total := b.held.Load()
	room := budget*3/4 - total
	if total < b.lastTotal || room > 0 || b.lastFall.IsZero() {
		b.lastFall = now
	}
	b.lastTotal = total
	stuck := now.Sub(b.lastFall) >= ForceEvery && now.Sub(b.lastForced) >= ForceEvery
	list := b.pausedHolders(room > 0 || stuck) // the order matters when there is room to give or a turn
	moving := false                            // a paused connection can be let go on without room
	var turn *Holder                           // the one that will be
	for i, h := range list {
		resumed := room > 0
		if resumed {
			room -= h.pub.Load() + PauseFloor
			h.resume.Store(true)
		} else if h.forceable() {
			moving = true
			if stuck && (turn == nil || h.forcedAt.Before(turn.forcedAt)) { // list is sorted: the smallest of equals
				turn = h
			}
		}
		if h.due() || resumed {
			_ = h.conn.Wake(nil)
		}
		list[i] = nil
	}
	if turn != nil {
		b.lastForced, turn.forcedAt = now, now
		turn.resume.Store(true)
		_ = turn.conn.Wake(nil)
	}
	b.lastResort(now, total, budget, moving, all)
	b.logRefused(now, total, budget)
	b.freeOS(now, total)
}

// forceable reports whether Tick may let h, paused, go on without room: it
// holds PauseFloor or more and its client has read every reply, so what it
// holds is commands it has read. One whose pass ran nothing (its command
// waits for the throttle, say) takes its turn again after the others: it
// may run next time. Connections whose clients read slowly hold replies or
// little else, so they wait for room; those whose clients do not read are
// never chosen.
func (h *Holder) forceable() bool {
	return h.pub.Load() >= PauseFloor && h.drained.Load()
}

// due reports whether housekeeping wakes h, paused, in this tick, so that
// a pass looks at what gnet still holds for it (gnet tells nobody when an
// outbound buffer drains): at once when what it holds changed since the
// last tick, else after a gap that doubles while nothing changes, up to
// MaxWakeGap ticks. A connection whose client reads nothing then costs a
// pass every MaxWakeGap ticks, not every tick (1,500 of them woke kvd's
// loops 150,000 times a second); one whose client reads is looked at again
// within a tick of a pass that saw it.
func (h *Holder) due() bool {
	if cur := h.pub.Load(); cur != h.tickHeld {
		h.tickHeld, h.tickGap, h.tickWait = cur, 1, 0
		return true
	}
	if h.tickWait > 0 {
		h.tickWait--
		return false
	}
	h.tickGap = min(2*max(h.tickGap, 1), MaxWakeGap)
	h.tickWait = h.tickGap - 1
	return true
}

// lastResort closes the connections holding the most, as many as it takes
// to bring the node's total under 3/4 of its budget, where paused
// connections go on again, once the node has gone CloseGrace without room:
// over its budget, or over 3/4 of it while connections are paused for
// memory and none can be let go on (moving: Tick's forceable), so that
// nothing drains. Over twice its budget it does not wait.
// It closes at most once per CloseEvery, as Redis's maxmemory-clients
// evicts the clients using the most until the total is under its limit.
// (Closing one connection a second left 1,450 connections whose clients
// had gone holding 93 MB: each held 64 KiB of commands kvd no longer read,
// and the client's FIN waited behind them.)
func (b *Budget) lastResort(now time.Time, total, budget int64, moving bool, all iter.Seq[*Holder]) {
	target := budget * 3 / 4 // Tick resumes paused connections only under it
	if total < target {
		b.overSince = time.Time{}
		return
	}
	// What the connections being closed hold leaves when gnet has closed
	// them, on their loops, later: it does not count.
	list := b.closeList[:0]
	for h := range all {
		switch held := h.pub.Load(); {
		case h.closing.Load():
			total -= held
		case held > 0:
			list = append(list, h)
		}
	}
	defer func() { clear(list); b.closeList = list[:0] }()
	if total < target || total <= budget && (b.memPaused.Load() == 0 || moving) {
		b.overSince = time.Time{}
		return
	}
	if b.overSince.IsZero() {
		b.overSince = now
	}
	if total <= 2*budget && (now.Sub(b.overSince) < CloseGrace || now.Sub(b.lastClose) < CloseEvery) {
		return
	}
	slices.SortFunc(list, func(x, y *Holder) int { return cmp.Compare(y.pub.Load(), x.pub.Load()) })
	closed, freed := 0, int64(0)
	for _, h := range list {
		if total-freed < target {
			break
		}
		if closed == 0 {
			b.log.Warn("closing connection", "remote", h.remote, "reason", "max_buffer_bytes: holds the most",
				"bytes", h.pub.Load(), "node_bytes", total, "limit", budget,
				"over_for", now.Sub(b.overSince).Round(time.Millisecond).String())
		}
		freed += h.pub.Load()
		closed++
		h.closing.Store(true)
		_ = h.conn.Close()
	}
	if closed == 0 {
		return
	}
	if closed > 1 {
		b.log.Warn("closed connections", "reason", "max_buffer_bytes: held the most", "connections", closed,
			"bytes", freed, "node_bytes", total, "limit", budget)
	}
	b.lastClose = now
	b.closed.Add(int64(closed))
}

// logRefused logs the frames Admit refused since the last line, at most
// one line a second.
func (b *Budget) logRefused(now time.Time, total, budget int64) {
	r := b.refused.Load()
	if r == b.refusedLogged || now.Sub(b.lastRefusedLog) < time.Second {
		return
	}
	b.log.Warn("refusing frames", "reason", "max_buffer_bytes", "frames", r-b.refusedLogged,
		"node_bytes", total, "limit", budget)
	b.refusedLogged, b.lastRefusedLog = r, now
}

// freeOS returns freed buffer memory to the OS once the connections hold a
// quarter of their peak or less, at most every FreeOSEvery: gnet's buffers
// and the Go heap otherwise keep RSS near the peak long after the clients
// left.
func (b *Budget) freeOS(now time.Time, total int64) {
	peak := b.peak.Load()
	if peak < FreeOSMin || total > peak/4 || now.Sub(b.lastFree) < FreeOSEvery {
		return
	}
	b.lastFree = now
	b.peak.Store(total)
	b.release()
}

// releaseMemory is Budget.release outside tests.
func releaseMemory() {
	runtime.GC() // gnet's buffer pools (sync.Pool) keep what they held for one more collection
	debug.FreeOSMemory()
}
