package observe

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"kvd/catalog"
	"kvd/engine"
	"kvd/ingress"
	"kvd/latency"
	"kvd/tenant"
)

var t0 = time.Unix(1_700_000_000, 0)

var unlimited = tenant.Settings{Reserved: tenant.Unlimited, HardLimit: tenant.Unlimited}

// fakeNode is a node of real parts (engine, catalog, throttle, ingress) and
// a front end whose figures the test sets. Each bucket carries a
// *fakeState in its Ext, as server's buckets carry their bucketState.
type fakeNode struct {
	parts Parts
	front Front
	gate  ingress.DeadlineGate
}

type fakeState struct {
	text atomic.Int64
	lat  *latency.Bucket
	adm  *ingress.Bucket
	dl   *ingress.BucketDeadline
}

func (n *fakeNode) Parts() Parts { return n.parts }
func (n *fakeNode) Front() Front { return n.front }
func (n *fakeNode) State(b *catalog.Bucket) BucketState {
	st := b.Ext().(*fakeState)
	return BucketState{TextCommands: st.text.Load(), Latency: st.lat, Admission: st.adm, Deadline: st.dl}
}

// hooks keep the fake state in step with the catalog, and retire deleted
// buckets into the view, as server's bucketHooks do.
type hooks struct {
	n *fakeNode
	v **View
}

func (h hooks) BucketAdded(b *catalog.Bucket) {
	dl, _ := ingress.NewBucketDeadline(&h.n.gate, ingress.DeadlineSettings{})
	b.SetExt(&fakeState{lat: new(latency.Bucket), adm: h.n.parts.Ingress.AddBucket(b.Name(), ingress.BucketLimits{}), dl: dl})
}
func (h hooks) SettingsChanged(*catalog.Bucket)       {}
func (h hooks) BucketRemoved(b *catalog.Bucket)       { (*h.v).Retire(b) }
func (h hooks) UsersChanged([]catalog.UserSpec) error { return nil }

// newView opens a node with the named buckets and its view.
func newView(t *testing.T, buckets ...string) (*View, *fakeNode) {
	t.Helper()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	db, err := engine.Open(engine.Options{Dir: t.TempDir(), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	ing, err := ingress.New(ingress.Options{})
	if err != nil {
		t.Fatal(err)
	}
	n := &fakeNode{parts: Parts{Throttle: tenant.NewThrottle(25000, t0), Ingress: ing, DB: db},
		front: Front{Now: t0.Add(90 * time.Second), Started: t0, PID: 42, Version: "kvd-test", Threads: 2,
			Conns: 3, SystemConns: 1, TotalConns: 7, RefusedConns: 8, MaxConns: 100, BucketLimit: 1000,
			Buffers: Buffers{Held: 10, Limit: 20, Paused: 1, MemoryPauses: 2, OutputPauses: 3, InputPauses: 5, Closed: 4, Refused: 6}}}
	v := New(n)
	cat, err := catalog.Open(catalog.Options{DB: db, Throttle: n.parts.Throttle, Defaults: unlimited,
		Logger: quiet, Observer: hooks{n, &v}, Now: t0})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cat.Close() })
	n.parts.Catalog = cat
	for _, name := range buckets {
		if _, err := cat.Create(name, unlimited, "test"); err != nil {
			t.Fatal(err)
		}
	}
	return v, n
}

func (n *fakeNode) bucket(t *testing.T, name string) *catalog.Bucket {
	t.Helper()
	b, ok := n.parts.Catalog.Get(name)
	if !ok {
		t.Fatalf("bucket %s missing", name)
	}
	return b
}

// TestShownBuckets: up to the limit every bucket is shown; past it the
// active ones, the most active first, at most the limit; a bucket idle for
// longer than activeWindow drops off, one with a connection stays.
func TestShownBuckets(t *testing.T) {
	var names []string
	for i := range 30 {
		names = append(names, fmt.Sprintf("x%02d", i))
	}
	_, n := newView(t, names...)
	thr, all := n.parts.Throttle, n.parts.Catalog.All()
	shown := func(limit int) []*catalog.Bucket { return shownBuckets(all, limit, thr.Stats().Ticks) }
	if got := shown(100); len(got) != 30 {
		t.Fatalf("limit 100: %d shown, want all 30", len(got))
	}
	if got := shown(5); len(got) != 0 {
		t.Fatalf("limit 5, all idle: %d shown, want 0", len(got))
	}
	for i := range 8 { // x00 uses 10 units, x01 20, …, x07 80
		thr.Charge(n.bucket(t, fmt.Sprintf("x%02d", i)).Throttle(), int64(10*(i+1)), 0)
	}
	n.bucket(t, "x20").Throttle().Attach() // a connection, no units
	now := t0.Add(time.Second)
	thr.Tick(now)
	if got, want := bucketNames(shown(5)), "x07 x06 x05 x04 x03"; got != want {
		t.Fatalf("limit 5: shown %q, want %q", got, want)
	}
	if got := len(shown(20)); got != 9 {
		t.Fatalf("limit 20: %d shown, want the 9 active", got)
	}
	for range activeWindow + 1 {
		now = now.Add(time.Second)
		thr.Tick(now)
	}
	if got := bucketNames(shown(20)); got != "x20" {
		t.Fatalf("after %d idle seconds: shown %q, want only x20 (connected)", activeWindow+1, got)
	}
}

func bucketNames(bs []*catalog.Bucket) string {
	var out []string
	for _, b := range bs {
		out = append(out, b.Name())
	}
	return strings.Join(out, " ")
}

// TestNodeTotalsKeepDeleted: a deleted bucket's figures stay in the node
// totals, which therefore never go backwards.
func TestNodeTotalsKeepDeleted(t *testing.T) {
	v, n := newView(t, "kept", "gone")
	b := n.bucket(t, "gone")
	for range 7 {
		b.Throttle().CountCommand()
	}
	n.State(b).Latency.Command(0, latency.Read, time.Millisecond, 0, 0)
	before := v.nodeTotals(n.parts.Catalog.All())
	if err := n.parts.Catalog.Delete("gone", "test"); err != nil {
		t.Fatal(err)
	}
	after := v.nodeTotals(n.parts.Catalog.All())
	_, countAfter, _ := after.lat[latency.Read].Snapshot()
	if after.commands != before.commands || before.commands < 7 || countAfter != 1 {
		t.Fatalf("commands %d → %d after the delete (want ≥ 7, unchanged), read latency count %d (want 1)",
			before.commands, after.commands, countAfter)
	}
}

// stats collects one STAT group's statistics as "name=value" lines.
func stats(group func(Emit)) string {
	var sb strings.Builder
	group(func(name string, value []byte) { fmt.Fprintf(&sb, "%s=%s\n", name, value) })
	return sb.String()
}

// rusage hides the process's CPU times, which change from call to call.
var rusage = regexp.MustCompile(`(rusage_(user|system))=[0-9]+\.[0-9]{6}\n`)

// TestGeneral: the node's figures in memcached's order, then the selected
// bucket's; none of a bucket when none is selected.
func TestGeneral(t *testing.T) {
	v, n := newView(t, "app")
	general := func(b *catalog.Bucket) string {
		return rusage.ReplaceAllString(stats(func(e Emit) { v.General(b, e) }), "$1=T\n")
	}
	node := "pid=42\nuptime=90\ntime=1700000090\nversion=kvd-test\npointer_size=64\nrusage_user=T\n" +
		"rusage_system=T\nthreads=2\ncurr_connections=3\n" +
		"total_connections=7\nmax_connections=100\nsystem_connections=1\nrejected_connections=8\nbuffer_bytes=10\nmax_buffer_bytes=20\nconns_paused=1\n" +
		"conn_pauses_memory=2\nconn_pauses_output=3\nconn_pauses_input=5\nconns_closed_memory=4\nframes_refused_memory=6\n"
	if got := general(nil); got != node {
		t.Errorf("no bucket selected:\n%s\nwant\n%s", got, node)
	}
	b := n.bucket(t, "app")
	for range 5 {
		b.Throttle().CountCommand()
	}
	b.Ext().(*fakeState).text.Store(2)
	b.Counters.CmdGet.Add(4)
	b.Counters.CasBadval.Add(1)
	want := node + "bucket=app\ncmd_get=4\ncmd_set=0\ncmd_flush=0\ncmd_touch=0\nget_hits=0\nget_misses=0\n" +
		"delete_misses=0\ndelete_hits=0\nincr_misses=0\nincr_hits=0\ndecr_misses=0\ndecr_hits=0\n" +
		"cas_misses=0\ncas_hits=0\ncas_badval=1\ntouch_hits=0\ntouch_misses=0\n" +
		"curr_items=0\ntext_commands=2\nbinary_commands=3\n"
	if got := general(b); got != want {
		t.Errorf("app selected:\n%s\nwant\n%s", got, want)
	}
}

// TestMemcachedGroups: settings are the front end's, in its order; the
// slab allocator's groups say there are no slab classes.
func TestMemcachedGroups(t *testing.T) {
	v, n := newView(t, "app")
	n.front.Settings = func() [][2]string { return [][2]string{{"maxconns", "100"}, {"evictions", "off"}} }
	for group, want := range map[string]string{"settings": "maxconns=100\nevictions=off\n", "items": "",
		"slabs": "active_slabs=0\ntotal_malloced=0\n", "sizes": "sizes_status=disabled\n"} {
		got := stats(func(e Emit) {
			if err := v.Stats(group, "", nil, nil, e, nil); err != nil {
				t.Errorf("%s: %v", group, err)
			}
		})
		if got != want {
			t.Errorf("%s:\n%s\nwant\n%s", group, got, want)
		}
	}
}

// TestBucketDetails: one bucket's document under its name, the list sorted
// by name with its totals, and the refusals with the reasons a client sees.
func TestBucketDetails(t *testing.T) {
	v, _ := newView(t, "b2", "a1", "secret")
	canSee := func(name string) bool { return name != "secret" }
	name, doc, err := v.BucketDetails("a1", canSee)
	if err != nil || name != "a1" || !strings.HasPrefix(string(doc), `{"name":"a1","clients":0,"ru":0,`) {
		t.Errorf("a1: %q %s %v", name, doc, err)
	}
	name, doc, err = v.BucketDetails("", canSee)
	if err != nil || name != "bucket_details" ||
		!strings.HasPrefix(string(doc), `{"buckets":[{"name":"a1",`) ||
		!strings.Contains(string(doc), `},{"name":"b2",`) ||
		!strings.HasSuffix(string(doc), `}],"buckets_total":2,"buckets_omitted":0}`) {
		t.Errorf("all: %q %s %v", name, doc, err)
	}
	for _, c := range []struct {
		name   string
		target error
		text   string
	}{
		{"secret", ErrNoAccess, "observe: no access to bucket secret"},
		{"nope", ErrNoBucket, "observe: no such bucket: nope"},
	} {
		if _, _, err := v.BucketDetails(c.name, canSee); !errors.Is(err, c.target) || err.Error() != c.text {
			t.Errorf("%s: %v, want %q", c.name, err, c.text)
		}
	}
	if _, err := v.Cluster(canSee); !errors.Is(err, ErrNotCluster) ||
		err.Error() != "observe: not in a cluster: kvd was started without --cluster" {
		t.Errorf("cluster on a single node: %v", err)
	}
}

// TestThrottleAndIngress: the throttle and ingress groups list their
// figures.
func TestThrottleAndIngress(t *testing.T) {
	v, _ := newView(t)
	got := stats(v.Throttle)
	if !strings.HasPrefix(got, "capacity=25000\nfree_pool=25000\n") ||
		!strings.HasSuffix(got, "default_throttle_reserved_units=unlimited\ndefault_throttle_hard_limit=unlimited\n") {
		t.Errorf("throttle:\n%s", got)
	}
	if got := stats(v.Ingress); !strings.Contains(got, "read_queue_length=0\n") {
		t.Errorf("ingress:\n%s", got)
	}
}
