package tests

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	mc "kvd/protocol/binary"
)

// TestGroupCommit: with wal_sync on, synced writes of many connections
// share fsyncs (group commit across connections): 32 connections each
// sending one SET at a time need far fewer WAL fsyncs than commands, and
// every SET is acknowledged (durability itself is TestDurability's). The
// write pool is fixed at 32 tickets: a synced batch keeps its ticket until
// it is acknowledged, so the pool bounds a group's size.
func TestGroupCommit(t *testing.T) {
	metrics := freeAddr(t)
	k := startKVD(t, ingressConfig(t, map[string]any{"probe": map[string]any{"min": 32, "max": 32}}, nil),
		"--metrics-listen", metrics)
	const conns, runFor = 32, 2 * time.Second
	fsyncs := func() float64 {
		v, err := scrapeMetric(metrics, "kvd_pebble_wal_fsync_latency_seconds_count")
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	cs := make([]*rawConn, conns)
	for i := range cs {
		cs[i] = dialRaw(t, k.Addr)
	}
	before := fsyncs()
	var acked atomic.Int64
	var wg sync.WaitGroup
	stop := time.Now().Add(runFor)
	for i, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; time.Now().Before(stop); n++ {
				c.send(set(fmt.Sprintf("gc-%d-%d", i, n%100), "value"))
				if res, err := c.tryRecv(5 * time.Second); err != nil || res.Status != mc.StatusOK {
					t.Errorf("conn %d SET %d: %v %v", i, n, err, res)
					return
				}
				acked.Add(1)
			}
		}()
	}
	wg.Wait()
	synced := fsyncs() - before
	perSync := float64(acked.Load()) / max(synced, 1)
	t.Logf("%d SETs acknowledged, %.0f WAL fsyncs: %.1f commands per fsync", acked.Load(), synced, perSync)
	if synced == 0 || perSync < 4 {
		t.Errorf("%d SETs over %.0f fsyncs (%.1f per fsync): want fsyncs shared, at least 4 commands each",
			acked.Load(), synced, perSync)
	}
}
