package ingress

import "time"

// memory is the node's budget of value bytes held by normal commands in flight
// (Options.MaxInflightBytes; Impala's memory admission). It is guarded by
// Controller.mu.
type memory struct {
	limit    int64       // 0: no limit
	inflight int64       // bytes charged to tickets in use
	peak     int64       // highest inflight since start
	head     *waiterNode // the waiter the memory is held back for, or nil
	waiting  int64       // queued waiters that found their bytes short
	waited   int64       // waiters that ever found their bytes short
	rejected int64       // commands refused as TooLarge
}

// fits reports whether n more bytes stay within the limit. A command of no bytes
// always fits.
func (m *memory) fits(n int64) bool {
	return n == 0 || m.limit == 0 || m.inflight+n <= m.limit
}

// clamp bounds a read's estimate by the limit, so that an estimate alone is never
// TooLarge.
func (m *memory) clamp(n int64) int64 {
	if m.limit > 0 {
		return min(n, m.limit)
	}
	return n
}

func (m *memory) add(n int64) {
	m.inflight += n
	m.peak = max(m.peak, m.inflight)
}

func (m *memory) markWaiting(n *waiterNode) {
	if !n.memWait {
		n.memWait = true
		m.waiting++
		m.waited++
	}
}

// unmarkWaiting forgets n as it leaves its queue.
func (m *memory) unmarkWaiting(n *waiterNode) {
	if n.memWait {
		m.waiting--
	}
	if m.head == n {
		m.head = nil
	}
}

// MemoryStats are the memory budget's figures (STAT ingress memory_…).
type MemoryStats struct {
	// InflightBytes are the bytes charged to normal tickets in use; LimitBytes the
	// budget (0: none); PeakBytes the highest InflightBytes since start.
	InflightBytes, LimitBytes, PeakBytes int64
	// Waiting counts queued commands that found their bytes short of the budget (now);
	// Waited counts every command that ever did.
	Waiting, Waited int64
	// Rejected counts commands refused as TooLarge.
	Rejected int64
}

func (m *memory) stats() MemoryStats {
	return MemoryStats{
		InflightBytes: m.inflight, LimitBytes: m.limit, PeakBytes: m.peak,
		Waiting: m.waiting, Waited: m.waited, Rejected: m.rejected,
	}
}

// SetMaxInflightBytes changes the memory budget at run time (0: none). Raising it
// grants waiters at once, on the calling goroutine; lowering it revokes nothing: the
// bytes in flight drain below it as commands end.
func (c *Controller) SetMaxInflightBytes(n int64, now time.Time) error {
	if err := validateInflightBytes(n); err != nil {
		return err
	}
	var granted chain
	c.mu.Lock()
	c.noteNowLocked(now)
	c.mem.limit = n
	c.pumpLocked(now, &granted)
	c.mu.Unlock()
	c.deliver(&granted)
	return nil
}
