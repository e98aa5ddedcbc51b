package work

import (
	"runtime"
	"sync"
)

// Mailbox is where an owner's one batch in flight comes back: the goroutine
// that finished it puts it there, and the owner's event loop takes it. It is
// the one place where a loop and a worker meet over a batch.
type Mailbox struct {
	mu     sync.Mutex
	done   *Batch // the finished batch, not yet taken
	gone   bool   // the owner closed: batches are released, not kept
	inline bool   // the owner yielded its processor for the batch and takes it itself (Yield)
}

// Put leaves b, finished, for the owner and reports whether the owner's loop
// must be woken to take it: not when it is yielding for b (Yield), nor when
// the owner is gone, in which case b is released here.
func (m *Mailbox) Put(b *Batch) (wake bool) {
	m.mu.Lock()
	gone, inline := m.gone, m.inline
	if !gone {
		m.done = b
	}
	m.mu.Unlock()
	if gone {
		b.Release()
	}
	return !gone && !inline
}

// Take returns the finished batch, or nil while it is still out.
func (m *Mailbox) Take() *Batch {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.takeLocked()
}

// takeLocked empties the mailbox and returns what it held.
func (m *Mailbox) takeLocked() *Batch {
	b := m.done
	m.done = nil
	return b
}

// Yield gives the loop's processor, once, to the worker a batch that
// Pool.Yieldable approves was just handed to (runtime.Gosched: Submit made
// that worker the next goroutine to run there), so that the batch runs at
// once instead of when the loop next runs out of input. It returns the batch
// if it finished meanwhile: the owner then answers it in the same pass, with
// no wake. A batch that finishes later is Put with a wake as usual.
func (m *Mailbox) Yield() *Batch {
	m.mu.Lock()
	m.inline = true
	m.mu.Unlock()
	runtime.Gosched()
	m.mu.Lock()
	defer m.mu.Unlock()
	m.inline = false
	return m.takeLocked()
}

// Gone reports whether the owner has closed.
func (m *Mailbox) Gone() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.gone
}

// Close marks the owner gone and releases a finished batch it did not take.
// A batch still out is released by Put when it finishes.
func (m *Mailbox) Close() {
	m.mu.Lock()
	m.gone = true
	b := m.takeLocked()
	m.mu.Unlock()
	if b != nil {
		b.Release()
	}
}

// Yieldable reports whether b is worth yielding the loop for
// (Mailbox.Yield): it can be done by the time the loop resumes. It is a few
// data commands, none a read (a read that reaches a worker missed the item
// cache and reads Pebble), with small values, and it is acknowledged at
// commit: with WALSync its mutations wait for the group's fsync, and the
// loop would wait behind the worker, the syncer and Pebble's WAL flusher for
// nothing.
func (p *Pool) Yieldable(b *Batch) bool {
	return !p.opts.WALSync && b.Job == nil && b.Reads == 0 && len(b.Reqs) <= maxShortCommands &&
		b.Bytes <= maxShortBytes
}

// A yieldable batch's limits (Pool.Yieldable).
const (
	maxShortCommands = 8
	maxShortBytes    = 64 << 10
)
