package engine

import (
	"sync"
	"testing"
)

type countWaiter struct {
	mu   sync.Mutex
	told int
	errs int
}

func (c *countWaiter) Synced(err error) {
	c.mu.Lock()
	c.told++
	if err != nil {
		c.errs++
	}
	c.mu.Unlock()
}

// TestGroupSync: every waiter added is told once, without error, before
// Close returns; the early budget refuses what does not fit and is given
// back when the fsync that covers a reservation begins.
func TestGroupSync(t *testing.T) {
	db := openTest(t, nil)
	g := db.StartGroupSync(100)
	if !g.Reserve(60) || g.Reserve(60) || !g.Reserve(40) {
		t.Fatal("reservations of 60, 60, 40 against 100: want yes, no, yes")
	}
	w := &countWaiter{}
	g.Add(w, 60)
	g.Add(w, 40)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 50 {
				g.Add(w, 0)
			}
		}()
	}
	wg.Wait()
	g.Close()
	if w.told != 402 || w.errs != 0 {
		t.Fatalf("told %d (%d errors), want 402 without errors", w.told, w.errs)
	}
	if !g.Reserve(100) {
		t.Fatal("the budget was not given back after the syncs")
	}
}
