package catalog

import (
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"kvd/engine"
	"kvd/tenant"
)

var t0 = time.Unix(1_700_000_000, 0)

type fixture struct {
	dir string
	db  *engine.DB
	cat *Catalog
}

func open(t *testing.T, dir string, defaults tenant.Settings) *fixture {
	t.Helper()
	db, err := engine.Open(engine.Options{Dir: dir, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	cat, err := Open(Options{DB: db, Throttle: tenant.NewThrottle(25000, t0), Defaults: defaults,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		_ = db.Close()
		t.Fatal(err)
	}
	return &fixture{dir: dir, db: db, cat: cat}
}

func (f *fixture) reopen(t *testing.T, defaults tenant.Settings) *fixture {
	t.Helper()
	if err := f.db.Close(); err != nil {
		t.Fatal(err)
	}
	return open(t, f.dir, defaults)
}

var defaults = tenant.Settings{Reserved: 1666, HardLimit: tenant.Unlimited}

func TestCreateDeletePersist(t *testing.T) {
	f := open(t, t.TempDir(), defaults)
	set := tenant.Settings{Reserved: 100, HardLimit: 200, MaxConcurrent: 3}
	b, err := f.cat.Create("app", set, "test")
	if err != nil {
		t.Fatal(err)
	}
	if b.Name() != "app" || b.Settings() != set || b.Throttle() == nil || b.Store() == nil {
		t.Fatalf("bucket = %q %+v", b.Name(), b.Settings())
	}
	if _, err := f.cat.Create("app", set, "test"); !errors.Is(err, engine.ErrBucketExists) {
		t.Fatalf("second create: %v, want ErrBucketExists", err)
	}
	if _, err := f.cat.Create("bad name!", set, "test"); !errors.Is(err, tenant.ErrInvalidBucketName) {
		t.Fatalf("bad name: %v", err)
	}
	if _, err := f.cat.Create("x", tenant.Settings{Reserved: 5, HardLimit: 1}, "test"); !errors.Is(err, tenant.ErrInvalidSettings) {
		t.Fatalf("bad settings: %v", err)
	}
	if _, err := f.cat.Create("other", defaults, "test"); err != nil {
		t.Fatal(err)
	}
	f = f.reopen(t, defaults)
	b, ok := f.cat.Get("app")
	if !ok || b.Settings() != set {
		t.Fatalf("after reopen: %v %+v", ok, b)
	}
	if got := f.cat.Names(func(string) bool { return true }); len(got) != 2 || got[0] != "app" || got[1] != "other" {
		t.Fatalf("names = %v", got)
	}
	if err := f.cat.Delete("app", "test"); err != nil {
		t.Fatal(err)
	}
	if !b.Deleted() {
		t.Fatal("deleted bucket not marked")
	}
	if err := f.cat.Delete("app", "test"); !errors.Is(err, engine.ErrBucketNotFound) {
		t.Fatalf("second delete: %v", err)
	}
	f = f.reopen(t, defaults)
	if _, ok := f.cat.Get("app"); ok {
		t.Fatal("deleted bucket came back")
	}
	_ = f.db.Close()
}

func TestNodeSettingsPersist(t *testing.T) {
	f := open(t, t.TempDir(), defaults)
	n := tenant.NodeSettings{Capacity: 900, DefaultReserved: 10, DefaultHardLimit: 20}
	if err := f.cat.SetNode(n, "test"); err != nil {
		t.Fatal(err)
	}
	if got := f.cat.Node(); got != n {
		t.Fatalf("node = %+v", got)
	}
	f = f.reopen(t, defaults)
	if got := f.cat.Node(); got != n {
		t.Fatalf("after reopen node = %+v, want %+v", got, n)
	}
	if d := f.cat.Defaults(); d.Reserved != 10 || d.HardLimit != 20 {
		t.Fatalf("defaults = %+v", d)
	}
	_ = f.db.Close()
}

// TestApplyFileNewerWins: the file wins only where it changed since it was
// last applied; run-time changes stand otherwise, across restarts.
func TestApplyFileNewerWins(t *testing.T) {
	f := open(t, t.TempDir(), defaults)
	file := File{Node: tenant.NodeSettings{Capacity: 25000, DefaultReserved: 1666, DefaultHardLimit: -1},
		Buckets: []Spec{{"a", tenant.Settings{Reserved: 10, HardLimit: 100}}, {"b", defaults}}}
	if err := f.cat.ApplyFile(file, "config"); err != nil {
		t.Fatal(err)
	}
	a, ok := f.cat.Get("a")
	if !ok || a.Settings().HardLimit != 100 {
		t.Fatal("file bucket not created")
	}
	// A run-time change to a, then the same file again: the change stands.
	if err := f.cat.SetBucketSettings(a, tenant.Settings{Reserved: 10, HardLimit: 50}, "admin"); err != nil {
		t.Fatal(err)
	}
	if err := f.cat.SetNode(tenant.NodeSettings{Capacity: 500, DefaultReserved: 1, DefaultHardLimit: -1}, "admin"); err != nil {
		t.Fatal(err)
	}
	f = f.reopen(t, defaults)
	if err := f.cat.ApplyFile(file, "config"); err != nil {
		t.Fatal(err)
	}
	a, _ = f.cat.Get("a")
	if a.Settings().HardLimit != 50 || f.cat.Node().Capacity != 500 {
		t.Fatalf("unchanged file overrode run-time changes: %+v %+v", a.Settings(), f.cat.Node())
	}
	// The file changes a's limit and the capacity: now the file wins.
	file.Buckets[0].Settings.HardLimit = 70
	file.Node.Capacity = 700
	if err := f.cat.ApplyFile(file, "config"); err != nil {
		t.Fatal(err)
	}
	if a.Settings().HardLimit != 70 || f.cat.Node().Capacity != 700 {
		t.Fatalf("changed file did not win: %+v %+v", a.Settings(), f.cat.Node())
	}
	// Run-time changes to other fields, then a file edit of one field: the
	// edit overrides that field only.
	rt := tenant.Settings{Reserved: 40, HardLimit: 70, MaxConcurrent: 3, Deadline: 50 * time.Millisecond}
	if err := f.cat.SetBucketSettings(a, rt, "admin"); err != nil {
		t.Fatal(err)
	}
	if err := f.cat.SetNode(tenant.NodeSettings{Capacity: 700, DefaultReserved: 100, DefaultHardLimit: 500}, "admin"); err != nil {
		t.Fatal(err)
	}
	file.Buckets[0].Settings.HardLimit = 90
	file.Node.Capacity = 900
	if err := f.cat.ApplyFile(file, "config"); err != nil {
		t.Fatal(err)
	}
	rt.HardLimit = 90
	if got := a.Settings(); got != rt {
		t.Fatalf("a file edit of hard_limit made the bucket %+v, want %+v", got, rt)
	}
	if got, want := f.cat.Node(), (tenant.NodeSettings{Capacity: 900, DefaultReserved: 100, DefaultHardLimit: 500}); got != want {
		t.Fatalf("a file edit of the capacity made the node %+v, want %+v", got, want)
	}
	// An edit that the run-time settings make invalid is refused whole.
	file.Buckets[0].Settings.Reserved = 95 // > 90 is fine in the file, but with run-time hard_limit...
	file.Buckets[0].Settings.HardLimit = 100
	if err := f.cat.SetBucketSettings(a, tenant.Settings{Reserved: 40, HardLimit: 60}, "admin"); err != nil {
		t.Fatal(err)
	}
	file.Buckets[0].Settings.HardLimit = 90 // ...only reserved changed in the file: 95 > run-time 60
	if err := f.cat.ApplyFile(file, "config"); err == nil || a.Settings().Reserved != 40 {
		t.Fatalf("reserved above the run-time hard limit: err %v, settings %+v", err, a.Settings())
	}
	// Removing a bucket from the file keeps it.
	file.Buckets = file.Buckets[1:]
	if err := f.cat.ApplyFile(file, "config"); err != nil {
		t.Fatal(err)
	}
	if _, ok := f.cat.Get("a"); !ok {
		t.Fatal("bucket dropped from the file was deleted")
	}
	_ = f.db.Close()
}

// TestApplyFileAllOrNothing: an edit that conflicts with run-time settings
// applies nothing — neither the node's changes nor other buckets' before
// it in the file — and stays an edit (the record of what was last applied
// is not advanced), so that once the conflict is gone the same file
// applies. A bucket the file listed and that was deleted at run time stays
// deleted until its entry in the file changes.
func TestApplyFileAllOrNothing(t *testing.T) {
	f := open(t, t.TempDir(), defaults)
	file := File{Node: tenant.NodeSettings{Capacity: 25000, DefaultReserved: 1666, DefaultHardLimit: -1},
		Buckets: []Spec{{"a", defaults}, {"b", defaults}, {"c", defaults}}}
	if err := f.cat.ApplyFile(file, "config"); err != nil {
		t.Fatal(err)
	}
	b, _ := f.cat.Get("b")
	if err := f.cat.SetBucketSettings(b, tenant.Settings{Reserved: 100, HardLimit: 1000}, "admin"); err != nil {
		t.Fatal(err)
	}
	file.Node.Capacity = 12345
	file.Buckets[0].Settings.Reserved = 42   // a: fine
	file.Buckets[1].Settings.Reserved = 5000 // b: above its run-time hard limit
	file.Buckets = append(file.Buckets, Spec{"d", defaults})
	err := f.cat.ApplyFile(file, "config")
	if !errors.Is(err, ErrFileConflict) {
		t.Fatalf("conflicting edit: %v, want ErrFileConflict", err)
	}
	a, _ := f.cat.Get("a")
	_, dOK := f.cat.Get("d")
	if f.cat.Node().Capacity != 25000 || a.Settings().Reserved != 1666 || b.Settings().Reserved != 100 || dOK {
		t.Fatalf("a refused edit applied part of the file: capacity %d, a %+v, b %+v, d created %v",
			f.cat.Node().Capacity, a.Settings(), b.Settings(), dOK)
	}
	// Across a restart the file is still refused, still whole.
	f = f.reopen(t, defaults)
	if err := f.cat.ApplyFile(file, "config"); !errors.Is(err, ErrFileConflict) || f.cat.Node().Capacity != 25000 {
		t.Fatalf("after reopen: %v, capacity %d", err, f.cat.Node().Capacity)
	}
	// The conflict goes (a run-time hard limit that allows it): the same
	// file, unchanged, now applies as the edit it is.
	b, _ = f.cat.Get("b")
	if err := f.cat.SetBucketSettings(b, tenant.Settings{Reserved: 100, HardLimit: tenant.Unlimited}, "admin"); err != nil {
		t.Fatal(err)
	}
	if err := f.cat.ApplyFile(file, "config"); err != nil {
		t.Fatal(err)
	}
	a, _ = f.cat.Get("a")
	_, dOK = f.cat.Get("d")
	if f.cat.Node().Capacity != 12345 || a.Settings().Reserved != 42 || b.Settings().Reserved != 5000 || !dOK {
		t.Fatalf("the edit after the conflict went: capacity %d, a %+v, b %+v, d created %v",
			f.cat.Node().Capacity, a.Settings(), b.Settings(), dOK)
	}
	// A file-listed bucket deleted at run time stays deleted, across a
	// restart and other edits.
	if err := f.cat.Delete("c", "admin"); err != nil {
		t.Fatal(err)
	}
	file.Node.Capacity = 20000
	if err := f.cat.ApplyFile(file, "config"); err != nil {
		t.Fatal(err)
	}
	f = f.reopen(t, defaults)
	if err := f.cat.ApplyFile(file, "config"); err != nil {
		t.Fatal(err)
	}
	if _, ok := f.cat.Get("c"); ok || f.cat.Node().Capacity != 20000 {
		t.Fatalf("deleted bucket c came back (%v) or the edit beside it was lost (capacity %d)", ok, f.cat.Node().Capacity)
	}
	// An edit of its entry brings it back, with the file's settings.
	file.Buckets[2].Settings = tenant.Settings{Reserved: 7, HardLimit: 70}
	if err := f.cat.ApplyFile(file, "config"); err != nil {
		t.Fatal(err)
	}
	if c, ok := f.cat.Get("c"); !ok || c.Settings() != file.Buckets[2].Settings {
		t.Fatalf("edited entry of a deleted bucket: exists %v", ok)
	}
	_ = f.db.Close()
}

type waker struct{ n int }

func (w *waker) Wake() { w.n++ }

func TestParkedWakeOnceAndOnDelete(t *testing.T) {
	f := open(t, t.TempDir(), defaults)
	b, _ := f.cat.Create("p", defaults, "test")
	w1, w2 := &waker{}, &waker{}
	b.Park(w1)
	b.Park(w2)
	f.cat.WakeParked()
	f.cat.WakeParked()
	if w1.n != 1 || w2.n != 1 {
		t.Fatalf("wakes = %d %d, want 1 1", w1.n, w2.n)
	}
	b.Park(w1)
	if err := f.cat.Delete("p", "test"); err != nil {
		t.Fatal(err)
	}
	if w1.n != 2 {
		t.Fatalf("delete did not wake the parked connection: %d", w1.n)
	}
	_ = f.db.Close()
}

func TestSection7Diff(t *testing.T) {
	old := tenant.Settings{MaxConcurrent: 4, MaxQueued: 2, QueueTimeout: 5 * time.Millisecond}
	set := old
	if got := section7Diff(&old, &set); got != "unchanged" {
		t.Errorf("same settings: %q", got)
	}
	set.MaxConcurrent, set.QueueTimeout, set.ExpectedExecution = 1, 0, 500*time.Microsecond
	set.Reserved = 7 // not a section-7 field
	if got, want := section7Diff(&old, &set), "max_concurrent=4->1 queue_timeout_ms=5->0 expected_execution_us=0->500"; got != want {
		t.Errorf("section7Diff = %q, want %q", got, want)
	}
}
