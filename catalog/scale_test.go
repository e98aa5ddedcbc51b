package catalog

import (
	"fmt"
	"os"
	"strconv"
	"sync/atomic"
	"testing"
)

// TestApplyFileManyBuckets creates buckets from a file in one ApplyFile,
// applies the same file again after a reopen (nothing to do), and finds
// every bucket with its settings. CATALOG_SCALE=100000 makes it the
// profile of a 100k start: go test ./catalog -run ManyBuckets -cpuprofile.
func TestApplyFileManyBuckets(t *testing.T) {
	n := 3000
	if v, err := strconv.Atoi(os.Getenv("CATALOG_SCALE")); err == nil {
		n = v
	}
	f := open(t, t.TempDir(), defaults)
	file := File{Node: f.cat.Node()}
	for i := range n {
		set := defaults
		set.Reserved = int64(i % 7)
		file.Buckets = append(file.Buckets, Spec{Name: fmt.Sprintf("b%07d", i), Settings: set})
	}
	if err := f.cat.ApplyFile(file, "config"); err != nil {
		t.Fatal(err)
	}
	f = f.reopen(t, defaults)
	defer f.db.Close()
	if err := f.cat.ApplyFile(file, "config"); err != nil {
		t.Fatal(err)
	}
	if got := len(f.cat.All()); got != n {
		t.Fatalf("%d buckets after reopen, want %d", got, n)
	}
	for i := 0; i < n; i += max(n/100, 1) {
		b, ok := f.cat.Get(file.Buckets[i].Name)
		if !ok || b.Settings() != file.Buckets[i].Settings {
			t.Fatalf("bucket %s: found %v, settings %+v, want %+v", file.Buckets[i].Name, ok, b.Settings(), file.Buckets[i].Settings)
		}
	}
}

// countWaker counts its wakes.
type countWaker struct{ n atomic.Int64 }

func (w *countWaker) Wake() { w.n.Add(1) }

// TestWakeParkedOnlyParked: a tick wakes each parked connection once, the
// buckets without any are not visited, and a connection parked after a
// tick is woken by the next one.
func TestWakeParkedOnlyParked(t *testing.T) {
	f := open(t, t.TempDir(), defaults)
	defer f.db.Close()
	var bs []*Bucket
	for i := range 50 {
		b, err := f.cat.Create(fmt.Sprintf("p%d", i), defaults, "test")
		if err != nil {
			t.Fatal(err)
		}
		bs = append(bs, b)
	}
	var w1, w2, w3 countWaker
	bs[3].Park(&w1)
	bs[3].Park(&w2)
	bs[40].Park(&w3)
	if got := len(f.cat.parked.list); got != 2 {
		t.Fatalf("%d buckets listed as parked, want 2", got)
	}
	f.cat.WakeParked()
	if w1.n.Load() != 1 || w2.n.Load() != 1 || w3.n.Load() != 1 {
		t.Fatalf("wakes %d %d %d, want 1 each", w1.n.Load(), w2.n.Load(), w3.n.Load())
	}
	f.cat.WakeParked() // nothing parked: nobody woken again
	bs[3].Park(&w1)
	bs[3].WakeParked() // woken directly (a delete): still listed, woken once
	f.cat.WakeParked()
	bs[40].Park(&w3)
	f.cat.WakeParked()
	if w1.n.Load() != 2 || w2.n.Load() != 1 || w3.n.Load() != 2 {
		t.Fatalf("wakes %d %d %d, want 2 1 2", w1.n.Load(), w2.n.Load(), w3.n.Load())
	}
	if got := len(f.cat.parked.list); got != 0 {
		t.Fatalf("%d buckets listed after the ticks, want 0", got)
	}
}
