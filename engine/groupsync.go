package engine

import (
	"sync"
	"sync/atomic"
)

// GroupSync is group commit across callers. A caller whose mutations are
// committed hands a Waiter to Add instead of calling SyncWAL itself and
// goes on with other work. One goroutine takes every queued waiter, makes
// their mutations durable with one SyncWAL (which covers every mutation
// committed before the call) and only then calls their Synced. While it
// waits on the disk the next group gathers, so the waiters of many callers
// share each fsync and none is told before it.
//
// The early budget bounds the bytes committed by waiters that released
// what they held (package server: their ingress tickets) before their
// fsync: Reserve takes from it, and a waiter's reservation goes back when
// the fsync that covers it begins.
type GroupSync struct {
	db     *DB
	mu     sync.Mutex
	cond   sync.Cond     // signalled when the queue grows or the group sync closes
	queue  []groupWaiter // guarded by mu
	spare  []groupWaiter // the previous group's slice, reused
	early  atomic.Int64  // bytes reserved by queued waiters
	limit  int64         // the early budget
	closed bool          // guarded by mu
	done   chan struct{}
}

// Waiter is told when the mutations it committed are durable, or that the
// sync failed.
type Waiter interface {
	Synced(err error)
}

type groupWaiter struct {
	w        Waiter
	reserved int64
}

// StartGroupSync starts db's group commit with an early budget of
// earlyBytes. Close ends it.
func (db *DB) StartGroupSync(earlyBytes int64) *GroupSync {
	g := &GroupSync{db: db, limit: earlyBytes, done: make(chan struct{})}
	g.cond.L = &g.mu
	go g.loop()
	return g
}

// Reserve takes n bytes of the early budget and reports whether they fit;
// if they do not, nothing is taken. A reservation is handed to Add.
func (g *GroupSync) Reserve(n int64) bool {
	if g.early.Add(n) <= g.limit {
		return true
	}
	g.early.Add(-n)
	return false
}

// Add queues w for the next shared sync, with the bytes it reserved (0 for
// none). It never blocks on I/O.
func (g *GroupSync) Add(w Waiter, reserved int64) {
	g.mu.Lock()
	g.queue = append(g.queue, groupWaiter{w, reserved})
	g.mu.Unlock()
	g.cond.Signal()
}

func (g *GroupSync) loop() {
	defer close(g.done)
	for {
		g.mu.Lock()
		for len(g.queue) == 0 && !g.closed {
			g.cond.Wait()
		}
		group := g.queue
		if len(group) == 0 {
			g.mu.Unlock()
			return
		}
		g.queue = g.spare[:0]
		for _, q := range group {
			g.early.Add(-q.reserved)
		}
		g.mu.Unlock()
		err := g.db.SyncWAL()
		for i, q := range group {
			q.w.Synced(err)
			group[i] = groupWaiter{}
		}
		g.spare = group
	}
}

// Close ends the group sync once every queued waiter has been told. Nothing
// may Add after Close.
func (g *GroupSync) Close() {
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
	g.cond.Broadcast()
	<-g.done
}
