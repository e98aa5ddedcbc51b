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
// every SET is acknowledged (durability itself is TestDurability's).
func TestGroupCommit(t *testing.T) {
	metrics := freeAddr(t)
	k := startKVD(t, ingressConfig(t, map[string]any{"probe": map[string]any{"min": 32, "max": 32}}, nil),
		"--metrics-listen", metrics)
	acked, synced := syncedSETs(t, metrics, dialConns(t, k.Addr, 32, ""))
	if perSync := acked / max(synced, 1); synced == 0 || perSync < 4 {
		t.Errorf("%.0f SETs over %.0f fsyncs (%.1f per fsync): want fsyncs shared, at least 4 commands each",
			acked, synced, perSync)
	}
}

// TestGroupCommitBeyondWritePool: a synced SET returns its write ticket at
// commit, before the fsync it shares, so a group is not capped at the write
// pool's size: with the pool fixed at 2 tickets, 32 connections still share
// each fsync several to one. A bucket with max_concurrent 2 keeps its
// tickets until its commands are durable, so its fsyncs carry at most 2.
func TestGroupCommitBeyondWritePool(t *testing.T) {
	metrics := freeAddr(t)
	capped := bucketConfig("capped", "unlimited", nil)
	capped["max_concurrent"] = 2
	cfg := throttleConfig(t, map[string]any{"wal_sync": true, "anonymous_bucket": "default",
		"ingress": map[string]any{"probe": map[string]any{"min": 2, "max": 2}}},
		bucketConfig("default", "unlimited", nil), capped)
	k := startKVD(t, cfg, "--metrics-listen", metrics)

	acked, synced := syncedSETs(t, metrics, dialConns(t, k.Addr, 32, ""))
	if perSync := acked / max(synced, 1); synced == 0 || perSync < 4 {
		t.Errorf("write pool of 2: %.0f SETs over %.0f fsyncs (%.1f per fsync): want tickets back at commit, at least 4 commands per fsync",
			acked, synced, perSync)
	}
	acked, synced = syncedSETs(t, metrics, dialConns(t, k.Addr, 32, "capped"))
	if perSync := acked / max(synced, 1); synced == 0 || perSync > 2.2 {
		t.Errorf("max_concurrent 2: %.0f SETs over %.0f fsyncs (%.1f per fsync): want at most 2 per fsync (tickets kept until durable)",
			acked, synced, perSync)
	}
}

// dialConns opens n connections: anonymous (the default bucket) when bucket
// is empty, else logged in as tenant with bucket selected.
func dialConns(t *testing.T, addr string, n int, bucket string) []*rawConn {
	cs := make([]*rawConn, n)
	for i := range cs {
		if bucket == "" {
			cs[i] = dialRaw(t, addr)
		} else {
			cs[i] = login(t, addr, "tenant", "tenant-pw", bucket)
		}
	}
	return cs
}

// syncedSETs has each connection send one SET at a time for 2 s and returns
// how many were acknowledged and how many WAL fsyncs kvd made meanwhile.
func syncedSETs(t *testing.T, metrics string, cs []*rawConn) (acked, synced float64) {
	t.Helper()
	fsyncs := func() float64 {
		v, err := scrapeMetric(metrics, "kvd_pebble_wal_fsync_latency_seconds_count")
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	before := fsyncs()
	var n atomic.Int64
	var wg sync.WaitGroup
	stop := time.Now().Add(2 * time.Second)
	for i, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; time.Now().Before(stop); j++ {
				c.send(set(fmt.Sprintf("gc-%d-%d", i, j%100), "value"))
				if res, err := c.tryRecv(5 * time.Second); err != nil || res.Status != mc.StatusOK {
					t.Errorf("conn %d SET %d: %v %v", i, j, err, res)
					return
				}
				n.Add(1)
			}
		}()
	}
	wg.Wait()
	acked, synced = float64(n.Load()), fsyncs()-before
	t.Logf("%.0f SETs acknowledged, %.0f WAL fsyncs: %.1f commands per fsync", acked, synced, acked/max(synced, 1))
	return acked, synced
}
