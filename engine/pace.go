package engine

import (
	"bytes"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// Compaction pacing: while the machine's CPUs are contended, a compaction
// runs a quarter of the time and sleeps the rest, so that serving commands
// comes first; once the contention ends, or the LSM falls behind, it runs
// at full speed again. ScyllaDB's compaction controller and Cassandra's
// compaction throughput limit do the same for the same reason.
//
// On a store that grows (every SET a new key), compactions rewrite the
// store again and again: on a 2-core machine under memcaslap they took a
// fifth of kvd's CPU, from the event loops and the client. Most of that
// work can wait for a quieter moment. What cannot wait is bounded: pacing
// stops when L0 holds paceMaxL0Sublevels sublevels (reads of items that are
// not resident merge that many tables) or the compaction debt reaches
// paceMaxDebt, well before Pebble stops writes (l0StopWritesThreshold), and
// while the disk is filling up (less than twice the space guard's reserve
// free: compactions are what frees space). Flushes are never paced.
const (
	// paceShare is the fraction of wall time a paced compaction runs.
	paceShare = 4 // 1/paceShare
	// paceInterval is how often the pacer samples CPU pressure and the LSM.
	paceInterval = 100 * time.Millisecond
	// paceStallPct: the CPUs are contended when some task waited for one
	// for at least this percentage of the last interval (PSI "some").
	paceStallPct = 10
	// paceMaxL0Sublevels and paceMaxDebt bound what pacing may defer.
	paceMaxL0Sublevels = 2 * l0CompactionThreshold
	paceMaxDebt        = 4 * lBaseMaxBytes
	// paceMaxSleep bounds one sleep, so that a compaction resumes full
	// speed within it once pacing stops.
	paceMaxSleep = 10 * time.Millisecond
	// cpuPressureFile is Linux's pressure stall information for CPUs.
	cpuPressureFile = "/proc/pressure/cpu"
)

// pacer is kvd's pebble.CompactionScheduler. It grants compactions as
// Pebble's default scheduler does (as many as the DB allows without
// permission), and paces them (see above) through their grant handles.
//
// Locking follows Pebble's rule: the pacer's mutex comes after the DB's,
// and the pacer never holds it while calling GetWaitingCompaction or
// Schedule.
type pacer struct {
	// stall returns the total time some task waited for a CPU; ok is false
	// where the kernel does not tell (no PSI): then nothing is paced.
	stall func() (total time.Duration, ok bool)
	// backlog returns L0's sublevels and the compaction debt in bytes; ok
	// is false before the DB is open.
	backlog func() (l0Sublevels int, debt uint64, ok bool)
	// diskLow reports whether the disk is filling up (nil: never).
	diskLow func() bool
	sleep   func(time.Duration)
	now     func() time.Time

	paced     atomic.Bool  // set by the sampler: compactions are paced now
	pacedNano atomic.Int64 // total time compactions slept

	db  pebble.DBForCompaction    // set by Register
	lsm atomic.Pointer[pebble.DB] // set once Open has the DB

	mu       sync.Mutex
	running  int           // guarded by mu; granted compactions not yet done
	granting bool          // guarded by mu; a goroutine is granting
	cond     sync.Cond     // signals granting turning false
	closed   bool          // guarded by mu; Unregister was called
	poke     chan struct{} // wakes the sampler to grant now
	stop     chan struct{} // closed by Unregister
	done     chan struct{} // closed when the sampler exits
}

var _ pebble.CompactionScheduler = (*pacer)(nil)

func newPacer() *pacer {
	p := &pacer{stall: cpuStall, sleep: time.Sleep, now: time.Now,
		poke: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	p.backlog = p.lsmBacklog
	p.cond.L = &p.mu
	return p
}

// lsmBacklog reads L0's sublevels and the compaction debt from Pebble.
func (p *pacer) lsmBacklog() (int, uint64, bool) {
	d := p.lsm.Load()
	if d == nil {
		return 0, 0, false
	}
	m := d.Metrics()
	return int(m.Levels[0].Sublevels), m.Compact.EstimatedDebt, true
}

// PacedTime is how long compactions have slept for pacing since Open.
func (p *pacer) PacedTime() time.Duration { return time.Duration(p.pacedNano.Load()) }

// Register starts the sampler.
func (p *pacer) Register(_ int, db pebble.DBForCompaction) {
	p.db = db
	go p.sample()
}

// Unregister stops the sampler and waits until no grant is in progress.
// Pebble calls it once, after a Register.
func (p *pacer) Unregister() {
	close(p.stop)
	<-p.done
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	for p.granting {
		p.cond.Wait()
	}
}

// TrySchedule grants a compaction if the DB allows one more.
func (p *pacer) TrySchedule() (bool, pebble.CompactionGrantHandle) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || p.db.GetAllowedWithoutPermission() <= p.running {
		return false, nil
	}
	p.running++
	return true, p.handle()
}

// UpdateGetAllowedWithoutPermission: the DB may allow more compactions
// (after a flush); the sampler grants them.
func (p *pacer) UpdateGetAllowedWithoutPermission() {
	select {
	case p.poke <- struct{}{}:
	default:
	}
}

// grant starts as many waiting compactions as the DB allows.
func (p *pacer) grant() {
	p.mu.Lock()
	for p.granting {
		p.cond.Wait()
	}
	n := p.db.GetAllowedWithoutPermission() - p.running
	if p.closed || n <= 0 {
		p.mu.Unlock()
		return
	}
	p.granting = true
	p.mu.Unlock()
	for ; n > 0; n-- {
		if waiting, _ := p.db.GetWaitingCompaction(); !waiting {
			break
		}
		if !p.db.Schedule(p.handle()) {
			break
		}
		p.mu.Lock()
		p.running++
		p.mu.Unlock()
	}
	p.mu.Lock()
	p.granting = false
	p.cond.Broadcast()
	p.mu.Unlock()
}

// finish ends a granted compaction and grants what that allows.
func (p *pacer) finish() {
	p.mu.Lock()
	p.running--
	p.mu.Unlock()
	p.grant()
}

// sample updates paced every paceInterval and grants what the DB allows
// (Pebble's default scheduler samples the same way: flushes do not call
// TrySchedule).
func (p *pacer) sample() {
	defer close(p.done)
	t := time.NewTicker(paceInterval)
	defer t.Stop()
	var s stallSample
	s.take(p)
	for {
		select {
		case <-p.stop:
			return
		case <-p.poke:
			p.grant()
			continue
		case <-t.C:
		}
		p.paced.Store(s.take(p) && p.healthy())
		p.grant()
	}
}

// stallSample is the pacer's last reading of CPU pressure.
type stallSample struct {
	total time.Duration // time some task waited for a CPU, since boot
	at    time.Time
	ok    bool
}

// take reads the pressure again and reports whether the CPUs were
// contended since the last reading.
func (s *stallSample) take(p *pacer) (contended bool) {
	total, ok := p.stall()
	now := p.now()
	contended = s.ok && ok && 100*(total-s.total) >= paceStallPct*now.Sub(s.at)
	*s = stallSample{total: total, at: now, ok: ok}
	return contended
}

// healthy reports whether the LSM can take deferred compaction work.
func (p *pacer) healthy() bool {
	if p.diskLow != nil && p.diskLow() {
		return false
	}
	l0, debt, ok := p.backlog()
	return ok && l0 < paceMaxL0Sublevels && debt < paceMaxDebt
}

// handle returns the grant handle of one compaction.
func (p *pacer) handle() *pacedCompaction { return &pacedCompaction{p: p} }

// pacedCompaction is one granted compaction's handle. Pebble calls
// CumulativeStats from the compaction's goroutine every 128 keys and after
// each output table: there the compaction sleeps paceShare-1 times as long
// as it ran since the last call, while pacing holds.
type pacedCompaction struct {
	p    *pacer
	last time.Time // when the compaction last resumed
}

func (h *pacedCompaction) Started()                                  { h.last = h.p.now() }
func (h *pacedCompaction) MeasureCPU(pebble.CompactionGoroutineKind) {}
func (h *pacedCompaction) Done()                                     { h.p.finish() }

func (h *pacedCompaction) CumulativeStats(pebble.CompactionGrantHandleStats) {
	p := h.p
	now := p.now()
	if h.last.IsZero() { // Started not called: nothing to measure from
		h.last = now
		return
	}
	owed := (paceShare - 1) * now.Sub(h.last)
	for owed > 0 && p.paced.Load() {
		d := min(owed, paceMaxSleep)
		p.sleep(d)
		owed -= d
		p.pacedNano.Add(int64(d))
	}
	h.last = p.now()
}

// cpuStall reads the total time some task waited for a CPU from Linux's
// pressure stall information ("some ... total=<µs>").
func cpuStall() (time.Duration, bool) {
	b, err := os.ReadFile(cpuPressureFile)
	if err != nil {
		return 0, false
	}
	return parseStall(b)
}

// parseStall reads the "some" line's total (µs) of a PSI file.
func parseStall(b []byte) (time.Duration, bool) {
	line, _, _ := bytes.Cut(b, []byte("\n"))
	_, v, found := bytes.Cut(line, []byte("total="))
	if !bytes.HasPrefix(line, []byte("some ")) || !found {
		return 0, false
	}
	us, err := strconv.ParseInt(string(bytes.TrimSpace(v)), 10, 64)
	if err != nil {
		return 0, false
	}
	return time.Duration(us) * time.Microsecond, true
}
