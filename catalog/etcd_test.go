package catalog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	clientv3 "go.etcd.io/etcd/client/v3"
	"io"
	"log/slog"
	"net"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"kvd/catalog/etcdtest"
	"kvd/tenant"
)

// fakeApplier records what a Cluster applies, as a Catalog would.
type fakeApplier struct {
	mu      sync.Mutex
	buckets map[string]tenant.Settings
	node    nodeSettings
	haveCap bool
	nodeSet bool
	users   string
	syncs   int
}

func newFakeApplier() *fakeApplier { return &fakeApplier{buckets: map[string]tenant.Settings{}} }

func (f *fakeApplier) applyClusterBucket(name string, cb clusterBucket) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.buckets[name] = cb.set
	return nil
}

func (f *fakeApplier) removeClusterBucket(name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.buckets, name)
	return nil
}

func (f *fakeApplier) followEtcd(uint64, uint64) {}

func (f *fakeApplier) seedCluster(*Cluster) error { return nil }

func (f *fakeApplier) syncClusterBuckets(all map[string]clusterBucket) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.buckets = make(map[string]tenant.Settings, len(all))
	for name, cb := range all {
		f.buckets[name] = cb.set
	}
	f.syncs++
	return nil
}

func (f *fakeApplier) applyClusterNode(n nodeSettings, haveCapacity bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.node, f.haveCap, f.nodeSet = n, haveCapacity, true
	return nil
}

func (f *fakeApplier) applyClusterUsers(doc []byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.users = string(doc)
	return nil
}

func (f *fakeApplier) bucket(name string) (tenant.Settings, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s, ok := f.buckets[name]
	return s, ok
}

// testNode is one in-process node: a Cluster and its fake catalog.
type testNode struct {
	*Cluster
	fake      *fakeApplier
	abandoned bool
}

// abandon drops the node without leaving: its lease expires on its own,
// as if the process were killed.
func (n *testNode) abandon() {
	n.cancel()
	n.wg.Wait()
	_ = n.cli.Close()
	n.abandoned = true
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func startNode(t *testing.T, srv *etcdtest.Server, name string) *testNode {
	t.Helper()
	fake := newFakeApplier()
	c, err := openCluster(time.Now(), ClusterOptions{
		Endpoints: srv.Endpoints(), NodeName: name, Address: "127.0.0.1:0", Cluster: t.Name()[:min(len(t.Name()), 40)],
		LeaseTTL: 2 * time.Second, PublishPeriod: 200 * time.Millisecond, RequestTimeout: 500 * time.Millisecond,
		Logger: quietLogger(),
	}, fake)
	if err != nil {
		t.Fatalf("openCluster %s: %v\netcd log:\n%s", name, err, srv.Log())
	}
	n := &testNode{Cluster: c, fake: fake}
	t.Cleanup(func() {
		if !n.abandoned {
			_ = n.Close()
		}
	})
	return n
}

// eventually polls cond every 20 ms until it holds or within passes.
func eventually(t *testing.T, within time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for time.Since(start) < within {
		if cond() {
			return time.Since(start)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("%s: not within %v", what, within)
	return 0
}

var bg = context.Background()

func TestClusterCatalogReplicates(t *testing.T) {
	srv := etcdtest.Start(t)
	nodes := []*testNode{startNode(t, srv, "n1"), startNode(t, srv, "n2"), startNode(t, srv, "n3")}
	set := tenant.Settings{Reserved: 500, HardLimit: 3000}
	if err := nodes[0].createBucket(bg, "app", set); err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes[1:] {
		d := eventually(t, 2*time.Second, n.opts.NodeName+" sees app", func() bool {
			got, ok := n.fake.bucket("app")
			return ok && got == set
		})
		t.Logf("%s applied the new bucket after %v", n.opts.NodeName, d)
	}
	if err := nodes[1].createBucket(bg, "app", set); !errors.Is(err, ErrClusterBucketExists) {
		t.Fatalf("second create: %v, want ErrClusterBucketExists", err)
	}
	set2 := tenant.Settings{Reserved: 100, HardLimit: tenant.Unlimited, MaxQueued: 7}
	if err := nodes[1].setBucketSettings(bg, "app", set2); err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		eventually(t, 2*time.Second, n.opts.NodeName+" sees new settings", func() bool {
			got, _ := n.fake.bucket("app")
			return got == set2
		})
	}
	if err := nodes[2].setBucketSettings(bg, "nope", set); !errors.Is(err, ErrClusterNoBucket) {
		t.Fatalf("settings of a missing bucket: %v", err)
	}
	if err := nodes[2].deleteBucket(bg, "app"); err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		eventually(t, 2*time.Second, n.opts.NodeName+" drops app", func() bool {
			_, ok := n.fake.bucket("app")
			return !ok
		})
	}
	if err := nodes[0].deleteBucket(bg, "app"); !errors.Is(err, ErrClusterNoBucket) {
		t.Fatalf("second delete: %v", err)
	}
}

func TestClusterNodeSettingsAndUsers(t *testing.T) {
	srv := etcdtest.Start(t)
	n1, n2 := startNode(t, srv, "n1"), startNode(t, srv, "n2")
	want := nodeSettings{Capacity: 3000, DefaultReserved: 100, DefaultHardLimit: tenant.Unlimited}
	if err := n1.setNode(bg, want); err != nil {
		t.Fatal(err)
	}
	eventually(t, 2*time.Second, "n1 node settings", func() bool {
		n1.fake.mu.Lock()
		defer n1.fake.mu.Unlock()
		return n1.fake.node == want && n1.fake.haveCap
	})
	eventually(t, 2*time.Second, "n2 gets the defaults but not n1's capacity", func() bool {
		n2.fake.mu.Lock()
		defer n2.fake.mu.Unlock()
		return n2.fake.nodeSet && !n2.fake.haveCap && n2.fake.node.DefaultReserved == 100 &&
			n2.fake.node.DefaultHardLimit == tenant.Unlimited
	})
	if err := n2.setUsers(bg, []byte(`[{"name":"admin"}]`)); err != nil {
		t.Fatal(err)
	}
	eventually(t, 2*time.Second, "n1 users", func() bool {
		n1.fake.mu.Lock()
		defer n1.fake.mu.Unlock()
		return n1.fake.users == `[{"name":"admin"}]`
	})
}

func TestClusterCatchUpAtOpen(t *testing.T) {
	srv := etcdtest.Start(t)
	n1 := startNode(t, srv, "n1")
	for i := range 3 {
		if err := n1.createBucket(bg, fmt.Sprintf("b%d", i), tenant.Settings{Reserved: int64(i), HardLimit: 10}); err != nil {
			t.Fatal(err)
		}
	}
	n2 := startNode(t, srv, "n2") // joins later: reads everything at open
	n2.fake.mu.Lock()
	defer n2.fake.mu.Unlock()
	if n2.fake.syncs != 1 || len(n2.fake.buckets) != 3 || n2.fake.buckets["b2"].Reserved != 2 {
		t.Fatalf("catch-up: syncs %d, buckets %v", n2.fake.syncs, n2.fake.buckets)
	}
}

// TestClusterWatchCompacted: a watch whose revision was compacted away
// reads the whole catalog again.
func TestClusterWatchCompacted(t *testing.T) {
	srv := etcdtest.Start(t)
	n1 := startNode(t, srv, "n1")
	for i := range 5 {
		if err := n1.createBucket(bg, fmt.Sprintf("b%d", i), tenant.Settings{HardLimit: tenant.Unlimited, Reserved: tenant.Unlimited}); err != nil {
			t.Fatal(err)
		}
	}
	resp, err := n1.cli.Get(bg, "x")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n1.cli.Compact(bg, resp.Header.Revision); err != nil {
		t.Fatal(err)
	}
	if _, err := n1.watchFrom(bg, 2); !errors.Is(err, errCompacted) {
		t.Fatalf("watch from a compacted revision: %v, want errCompacted", err)
	}
	// The loop, started from that stale revision, catches up.
	n1.cancel() // stop the node's own watch and publisher first
	n1.wg.Wait()
	fake := newFakeApplier()
	n1.apply = fake
	ctx, cancel := context.WithCancel(bg)
	n1.wg.Add(1)
	go n1.watchLoop(ctx, 1)
	defer func() { cancel(); n1.wg.Wait() }()
	eventually(t, 3*time.Second, "catch-up after compaction", func() bool {
		fake.mu.Lock()
		defer fake.mu.Unlock()
		return fake.syncs == 1 && len(fake.buckets) == 5
	})
}

// TestClusterReconcileFile: one node's file against etcd, edit by edit.
func TestClusterReconcileFile(t *testing.T) {
	srv := etcdtest.Start(t)
	n1, n2, n3 := startNode(t, srv, "n1"), startNode(t, srv, "n2"), startNode(t, srv, "n3")
	file := func(reserved int64) ClusterFile {
		return ClusterFile{
			Node:    nodeSettings{Capacity: 25000, DefaultReserved: 1666, DefaultHardLimit: tenant.Unlimited},
			Buckets: map[string]tenant.Settings{"app": {Reserved: reserved, HardLimit: 8000}, "default": {Reserved: 1666, HardLimit: tenant.Unlimited}},
			Users:   []UserSpec{},
		}
	}
	appRes := func(n *testNode) int64 { s, _ := n.fake.bucket("app"); return s.Reserved }
	check := func(what string, want int64) {
		t.Helper()
		for _, n := range []*testNode{n1, n2} {
			eventually(t, 2*time.Second, fmt.Sprintf("%s: %s app reserved %d", what, n.opts.NodeName, want),
				func() bool { return appRes(n) == want })
		}
	}
	reconcile := func(n *testNode, f ClusterFile) {
		t.Helper()
		if err := n.ReconcileFile(f); err != nil {
			t.Fatal(err)
		}
	}
	reconcile(n1, file(5000))
	check("seeded", 5000)
	if err := n1.setBucketSettings(bg, "app", tenant.Settings{Reserved: 100, HardLimit: 8000}); err != nil {
		t.Fatal(err)
	}
	check("run-time change", 100)
	// n2 starts with the same file, n3 with another value: neither is an
	// edit of their own file, so the run-time change stays; nor is a
	// restart with the file unchanged.
	reconcile(n2, file(5000))
	reconcile(n3, file(7000))
	reconcile(n1, file(5000))
	time.Sleep(300 * time.Millisecond)
	check("same or different file, not edited", 100)
	// An edit of n3's file wins.
	reconcile(n3, file(6000))
	check("an edit of n3's file", 6000)
	// The same edit pushed to n1 and n2 as well applies no more: a
	// run-time change made between the pushes stays.
	reconcile(n1, file(6000))
	if err := n1.setBucketSettings(bg, "app", tenant.Settings{Reserved: 6000, HardLimit: 9000, MaxConcurrent: 4}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 2*time.Second, "run-time hard limit", func() bool { s, _ := n2.fake.bucket("app"); return s.HardLimit == 9000 })
	reconcile(n2, file(6000))
	time.Sleep(300 * time.Millisecond)
	if s, _ := n2.fake.bucket("app"); s.HardLimit != 9000 {
		t.Fatalf("an edit another node's file had applied, applied again: %+v", s)
	}
	// An edit of reserved alone takes reserved only.
	reconcile(n2, file(6500))
	check("an edit of reserved", 6500)
	if s, _ := n1.fake.bucket("app"); s.HardLimit != 9000 || s.MaxConcurrent != 4 {
		t.Fatalf("an edit of reserved reverted the run-time hard limit and queue: %+v", s)
	}
	// A bucket deleted at run time stays deleted while its entry is
	// unchanged, and a node joining with the file the others run does not
	// bring it back.
	if err := n1.deleteBucket(bg, "default"); err != nil {
		t.Fatal(err)
	}
	reconcile(n1, file(6000))
	reconcile(startNode(t, srv, "n4"), file(6500))
	time.Sleep(300 * time.Millisecond)
	if _, ok := n2.fake.bucket("default"); ok {
		t.Fatal("bucket deleted at run time came back from an unchanged file entry")
	}
	n1.fake.mu.Lock()
	defer n1.fake.mu.Unlock()
	if !n1.fake.haveCap || n1.fake.node.Capacity != 25000 || n1.fake.users != "[]" {
		t.Fatalf("node/users seeded: %+v cap %v users %q", n1.fake.node, n1.fake.haveCap, n1.fake.users)
	}
}

// TestClusterDifferentFiles: nodes whose files differ apply only their own
// files' edits. Before records were per node, saving either file re-applied
// every item in which it differed from the other: run-time limits reverted,
// the other file's users deleted.
func TestClusterDifferentFiles(t *testing.T) {
	srv := etcdtest.Start(t)
	n1, n2 := startNode(t, srv, "n1"), startNode(t, srv, "n2")
	node := nodeSettings{Capacity: 25000, DefaultReserved: 100, DefaultHardLimit: tenant.Unlimited}
	alice := UserSpec{Name: "alice", Password: "a1", Buckets: []string{"x"}}
	bob := UserSpec{Name: "bob", Password: "b1"}
	f1 := ClusterFile{Node: node, Buckets: map[string]tenant.Settings{"x": {Reserved: 100, HardLimit: 1000}}, Users: []UserSpec{alice}}
	f2 := ClusterFile{Node: node, Buckets: map[string]tenant.Settings{"x": {Reserved: 200, HardLimit: 2000}}, Users: []UserSpec{bob}}
	reconcile := func(n *testNode, f ClusterFile) {
		t.Helper()
		if err := n.ReconcileFile(f); err != nil {
			t.Fatal(err)
		}
	}
	users := func(want string) {
		t.Helper()
		eventually(t, 2*time.Second, "users "+want, func() bool {
			n2.fake.mu.Lock()
			defer n2.fake.mu.Unlock()
			return n2.fake.users == want
		})
	}
	x := func(want tenant.Settings) {
		t.Helper()
		eventually(t, 2*time.Second, fmt.Sprintf("x %+v", want), func() bool { s, _ := n2.fake.bucket("x"); return s == want })
	}
	reconcile(n1, f1)
	reconcile(n2, f2)
	x(tenant.Settings{Reserved: 100, HardLimit: 1000})
	users(`[{"name":"alice","password":"a1","buckets":["x"]},{"name":"bob","password":"b1"}]`)
	if err := n1.setBucketSettings(bg, "x", tenant.Settings{Reserved: 100, HardLimit: 9000}); err != nil {
		t.Fatal(err)
	}
	x(tenant.Settings{Reserved: 100, HardLimit: 9000})
	// n1's file gains a bucket; n2's file is saved unchanged: nothing else moves.
	f1.Buckets["y"] = tenant.Settings{Reserved: 10, HardLimit: 20}
	reconcile(n1, f1)
	reconcile(n2, f2)
	eventually(t, 2*time.Second, "y", func() bool { _, ok := n2.fake.bucket("y"); return ok })
	time.Sleep(300 * time.Millisecond)
	x(tenant.Settings{Reserved: 100, HardLimit: 9000})
	users(`[{"name":"alice","password":"a1","buckets":["x"]},{"name":"bob","password":"b1"}]`)
	// n2's file drops bob and edits x's reserved; n1's rotates alice's password.
	f2.Users = []UserSpec{}
	f2.Buckets["x"] = tenant.Settings{Reserved: 300, HardLimit: 2000}
	reconcile(n2, f2)
	f1.Users = []UserSpec{{Name: "alice", Password: "a2", Buckets: []string{"x"}}}
	reconcile(n1, f1)
	x(tenant.Settings{Reserved: 300, HardLimit: 9000})
	users(`[{"name":"alice","password":"a2","buckets":["x"]}]`)
}

// tickAll ticks every node once with its demand for bucket "app" (cluster
// totals reserved 1500, hard limit 3000) and returns their shares.
func tickAll(nodes []*testNode, demand map[string]int64) map[string]Share {
	out := map[string]Share{}
	now := time.Now()
	for _, n := range nodes {
		d := demand[n.opts.NodeName]
		s := n.Tick(now, []Load{{Bucket: "app", Reserved: 1500, HardLimit: 3000, Demand: d, Usage: min(d, 1000)}})
		out[n.opts.NodeName] = s[0]
	}
	return out
}

// tickUntil ticks every 100 ms until cond holds on the shares, or fails
// after within.
func tickUntil(t *testing.T, nodes []*testNode, demand map[string]int64, within time.Duration, what string,
	cond func(map[string]Share) bool) (map[string]Share, time.Duration) {
	t.Helper()
	start := time.Now()
	var last map[string]Share
	for time.Since(start) < within {
		if last = tickAll(nodes, demand); cond(last) {
			return last, time.Since(start)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s: not within %v; last shares %+v", what, within, last)
	return nil, 0
}

func hardSum(s map[string]Share) (sum int64) {
	for _, v := range s {
		sum += v.HardLimit
	}
	return sum
}

func TestClusterSharesFollowDemand(t *testing.T) {
	srv := etcdtest.Start(t)
	nodes := []*testNode{startNode(t, srv, "a"), startNode(t, srv, "b"), startNode(t, srv, "c")}
	demand := map[string]int64{"a": 200, "b": 2000, "c": 9000}
	// floor 60 (20 each); a wants 180 more, b and c split the rest:
	// a 200, b 1400, c 1400.
	want := map[string]int64{"a": 200, "b": 1400, "c": 1400}
	shares, d := tickUntil(t, nodes, demand, 5*time.Second, "shares converge", func(s map[string]Share) bool {
		for n, w := range want {
			if s[n].HardLimit != w {
				return false
			}
		}
		return true
	})
	t.Logf("converged after %v: %+v", d, shares)
	for i := range 20 { // keep ticking: the sum never exceeds the total
		s := tickAll(nodes, demand)
		var res int64
		for _, v := range s {
			res += v.Reserved
			if v.Reserved > v.HardLimit {
				t.Fatalf("reserved share above hard share: %+v", v)
			}
		}
		if hardSum(s) > 3000 || res > 1500 {
			t.Fatalf("tick %d: hard Σ %d > 3000 or reserved Σ %d > 1500: %+v", i, hardSum(s), res, s)
		}
		time.Sleep(50 * time.Millisecond)
	}
	st := nodes[0].Status()
	if len(st.Members) != 3 || st.State != LinkUp || st.Usage["app"] != 200+1000+1000 {
		t.Fatalf("status: %+v", st)
	}
	if by := st.NodeUsage["app"]; len(by) != 3 || by[st.Members[0].Name]+by[st.Members[1].Name]+by[st.Members[2].Name] != st.Usage["app"] {
		t.Fatalf("status: app's usage by node %v, want the three members' adding up to %d", by, st.Usage["app"])
	}
	if raw, err := json.Marshal(st); err != nil || !strings.Contains(string(raw), `"etcd":"up"`) {
		t.Fatalf("status JSON: %s, %v", raw, err)
	}
}

// threeEvenNodes starts nodes a, b and c, all wanting more than the hard
// limit of 3000, and ticks them until each holds a third.
func threeEvenNodes(t *testing.T) (*etcdtest.Server, []*testNode, map[string]int64) {
	t.Helper()
	srv := etcdtest.Start(t)
	nodes := []*testNode{startNode(t, srv, "a"), startNode(t, srv, "b"), startNode(t, srv, "c")}
	demand := map[string]int64{"a": 5000, "b": 5000, "c": 5000}
	tickUntil(t, nodes, demand, 5*time.Second, "even split", func(s map[string]Share) bool {
		return s["a"].HardLimit == 1000 && s["b"].HardLimit == 1000 && s["c"].HardLimit == 1000
	})
	return srv, nodes, demand
}

func TestClusterDepartedNodeShareGoesToSurvivors(t *testing.T) {
	_, nodes, demand := threeEvenNodes(t)
	nodes[2].abandon() // killed: its lease (TTL 2 s) expires on its own
	ttl := nodes[0].opts.LeaseTTL
	_, d := tickUntil(t, nodes[:2], demand, ttl+2*time.Second, "survivors take the share", func(s map[string]Share) bool {
		return s["a"].HardLimit == 1500 && s["b"].HardLimit == 1500
	})
	t.Logf("survivors hold the whole limit %v after the kill (TTL %v)", d, ttl)
	if m := nodes[0].Status().Members; len(m) != 2 {
		t.Fatalf("members after the kill: %+v", m)
	}
}

// TestClusterRestartAfterKillStartsUp: a node restarted under its name
// after kill -9 waits for its old lease, then ticks in state up with a
// share, not in fallback with the whole limit (it once took the whole
// limit for its first tick: the wait counted as etcd's silence, and no
// node count was known yet).
func TestClusterRestartAfterKillStartsUp(t *testing.T) {
	srv, nodes, demand := threeEvenNodes(t)
	nodes[2].abandon()
	start := time.Now()
	c := startNode(t, srv, "c") // waits out the old lease
	t.Logf("restarted after %v", time.Since(start))
	first := tickAll([]*testNode{c}, demand)["c"]
	if st := c.Status().State; st != LinkUp || first.HardLimit > 1500 {
		t.Fatalf("first tick after the restart: state %v, share %+v; want up and at most half the limit", st, first)
	}
}

func TestClusterEtcdOutage(t *testing.T) {
	srv := etcdtest.Start(t)
	nodes := []*testNode{startNode(t, srv, "a"), startNode(t, srv, "b")}
	demand := map[string]int64{"a": 100, "b": 9000}
	up, _ := tickUntil(t, nodes, demand, 5*time.Second, "shares by demand", func(s map[string]Share) bool {
		return s["a"].HardLimit == 100 && s["b"].HardLimit == 2900
	})
	srv.Stop()
	// Until a node sees etcd's silence it computes on (its peers' demands
	// stop arriving: it counts them as wanting all they can get, which only
	// shrinks its share); then it holds the shares it computed last.
	lastUp := map[string]Share{}
	held, _ := tickUntil(t, nodes, demand, 2*time.Second, "holding", func(s map[string]Share) bool {
		for _, n := range nodes {
			if n.Status().State == LinkUp {
				lastUp[n.opts.NodeName] = s[n.opts.NodeName]
			}
		}
		return nodes[0].Status().State == LinkHolding && nodes[1].Status().State == LinkHolding
	})
	if held["a"] != lastUp["a"] || held["b"] != lastUp["b"] || held["b"].HardLimit > up["b"].HardLimit {
		t.Fatalf("holding changed the shares: %+v (up) → %+v (last while up) → %+v", up, lastUp, held)
	}
	fb, d := tickUntil(t, nodes, demand, 4*time.Second, "fallback", func(s map[string]Share) bool {
		return nodes[0].Status().State == LinkFallback && nodes[1].Status().State == LinkFallback
	})
	t.Logf("fallback %v after holding: %+v", d, fb)
	if fb["a"].HardLimit != 1500 || fb["b"].HardLimit != 1500 || fb["a"].Reserved != 750 {
		t.Fatalf("fallback shares: %+v, want total ÷ 2", fb)
	}
	time.Sleep(time.Second)
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	_, d = tickUntil(t, nodes, demand, 10*time.Second, "recovery", func(s map[string]Share) bool {
		return nodes[0].Status().State == LinkUp && nodes[1].Status().State == LinkUp &&
			s["a"].HardLimit == 100 && s["b"].HardLimit == 2900
	})
	t.Logf("recovered %v after etcd restarted", d)
	// The watch resumed: a change made now still reaches the other node.
	if err := nodes[0].createBucket(bg, "after", tenant.Settings{Reserved: 1, HardLimit: 2}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 2*time.Second, "watch after the outage", func() bool {
		_, ok := nodes[1].fake.bucket("after")
		return ok
	})
}

// TestClusterCloseLeavesAndStops: Close revokes the lease (the others stop
// counting the node at once) and leaves no goroutine behind.
func TestClusterCloseLeavesAndStops(t *testing.T) {
	srv := etcdtest.Start(t)
	before := runtime.NumGoroutine()
	a, b := startNode(t, srv, "a"), startNode(t, srv, "b")
	demand := map[string]int64{"a": 10, "b": 10}
	tickUntil(t, []*testNode{a, b}, demand, 5*time.Second, "two members", func(map[string]Share) bool {
		return len(a.Status().Members) == 2
	})
	for _, n := range []*testNode{b, a} {
		if err := n.Close(); err != nil {
			t.Fatal(err)
		}
		n.abandoned = true // closed already
		if n == b {
			_, d := tickUntil(t, []*testNode{a}, demand, time.Second, "a alone", func(s map[string]Share) bool {
				return len(a.Status().Members) == 1 && s["a"].HardLimit == 3000
			})
			t.Logf("a holds the whole limit %v after b left", d)
		}
	}
	eventually(t, 5*time.Second, "goroutines end", func() bool { return runtime.NumGoroutine() <= before })
}

// setUsers writes the users document straight to etcd, as another node
// reconciling its config file would (ReconcileFile is the production path).
func (c *Cluster) setUsers(ctx context.Context, doc []byte) error {
	if _, err := c.txn(ctx, nil, clientv3.OpPut(c.keys.users(), string(doc))); err != nil {
		return fmt.Errorf("catalog: users in etcd: %w", err)
	}
	return nil
}

// TestClusterFileEditsUndoneAndReAdded: the cases an audit found with the
// first per-node records, which skipped any value another node's record
// held: undoing an edit is an edit (a limit, a password); a node that left
// long ago does not block an edit; a bucket removed from a file and named
// again with other settings takes them, as on a single node; and a node
// that ran before per-node records treats the shared record as its own,
// so that an edit made while it was down still applies.
func TestClusterFileEditsUndoneAndReAdded(t *testing.T) {
	srv := etcdtest.Start(t)
	n1, n2 := startNode(t, srv, "n1"), startNode(t, srv, "n2")
	node := nodeSettings{Capacity: 25000, DefaultReserved: 100, DefaultHardLimit: tenant.Unlimited}
	file := func(hard int64, pw string) ClusterFile {
		return ClusterFile{Node: node, Buckets: map[string]tenant.Settings{"app": {Reserved: 100, HardLimit: hard}},
			Users: []UserSpec{{Name: "app", Password: pw}}}
	}
	reconcile := func(n *testNode, f ClusterFile) {
		t.Helper()
		if err := n.ReconcileFile(f); err != nil {
			t.Fatal(err)
		}
	}
	app := func(what string, hard int64) {
		t.Helper()
		eventually(t, 2*time.Second, fmt.Sprintf("%s: app hard limit %d", what, hard), func() bool {
			s, _ := n2.fake.bucket("app")
			return s.HardLimit == hard
		})
	}
	users := func(what, want string) {
		t.Helper()
		eventually(t, 2*time.Second, what+": users "+want, func() bool {
			n2.fake.mu.Lock()
			defer n2.fake.mu.Unlock()
			return n2.fake.users == want
		})
	}
	reconcile(n1, file(1000, "pw1"))
	reconcile(n2, file(1000, "pw1"))
	reconcile(n1, file(2000, "pw2"))
	app("n1's edit", 2000)
	users("n1's rotation", `[{"name":"app","password":"pw2"}]`)
	reconcile(n1, file(1000, "pw1"))
	app("n1's edit undone", 1000)
	users("n1's rotation undone", `[{"name":"app","password":"pw1"}]`)
	// A node that joined with other values and left does not block an
	// edit to them.
	reconcile(startNode(t, srv, "n3"), file(3000, "pw1"))
	if err := n1.setBucketSettings(bg, "app", tenant.Settings{Reserved: 0, HardLimit: 2500}); err != nil {
		t.Fatal(err)
	}
	app("run-time change", 2500)
	reconcile(n2, file(3000, "pw1"))
	app("n2's edit to n3's value", 3000)
	// Removed from n1's file, then named again with other settings.
	f := file(1000, "pw1")
	delete(f.Buckets, "app")
	reconcile(n1, f)
	f.Buckets["app"] = tenant.Settings{Reserved: 0, HardLimit: 5000}
	reconcile(n1, f)
	app("a bucket named again", 5000)
	// Legacy: the shared record of the version before says hard limit
	// 5000 was applied (by a file of 2026-01-01); n4's file says 6000.
	legacy := `{"mod_time":"2026-01-01T00:00:00Z","buckets":{"app":{"reserved":0,"hard_limit":5000}},"capacities":{"n4":25000}}`
	if _, err := n1.txn(bg, nil, clientv3.OpPut(n1.keys.legacyFile(), legacy)); err != nil {
		t.Fatal(err)
	}
	n4 := startNode(t, srv, "n4")
	f4 := ClusterFile{Node: node, Buckets: map[string]tenant.Settings{"app": {Reserved: 0, HardLimit: 6000}}}
	reconcile(n4, f4) // a new node: its file is not an edit
	time.Sleep(300 * time.Millisecond)
	app("a new node's different file", 5000)
	forget := func() {
		t.Helper()
		if _, err := n1.txn(bg, nil, clientv3.OpDelete(n1.keys.fileRecord("n4"))); err != nil {
			t.Fatal(err)
		}
	}
	// A legacy node's file older than the shared record's: other nodes'
	// files changed things since, and this one undoes none of them.
	forget()
	f4.Legacy, f4.ModTime = true, time.Date(2025, 12, 1, 0, 0, 0, 0, time.UTC)
	reconcile(n4, f4)
	time.Sleep(300 * time.Millisecond)
	app("a legacy node's file older than the shared record", 5000)
	// Newer: edited while the node was down, it applies.
	forget()
	f4.ModTime = time.Now()
	reconcile(n4, f4)
	app("a legacy node's edit made while it was down", 6000)
}

// TestJoinWaitsDialTimeout: a node that starts while etcd does not answer
// (here a listener that accepts and says nothing) keeps trying for
// DialTimeout, past each request's RequestTimeout, then fails naming the
// cluster.
func TestJoinWaitsDialTimeout(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		var held []net.Conn // open, never answered
		defer func() {
			for _, c := range held {
				_ = c.Close()
			}
		}()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	start := time.Now()
	_, err = openCluster(start, ClusterOptions{
		Endpoints: []string{"http://" + ln.Addr().String()}, NodeName: "n", Address: "127.0.0.1:0", Cluster: "silent",
		DialTimeout: 2500 * time.Millisecond, RequestTimeout: 500 * time.Millisecond, Logger: quietLogger(),
	}, newFakeApplier())
	took := time.Since(start)
	if err == nil || !strings.Contains(err.Error(), `join cluster "silent"`) {
		t.Fatalf("openCluster against a silent etcd: %v, want a join error", err)
	}
	if took < 2400*time.Millisecond || took > 5*time.Second {
		t.Errorf("gave up after %v, want about DialTimeout (2.5 s), not RequestTimeout (0.5 s)", took)
	}
}

// TestClusterSharesNeverSumPastTotals: three nodes tick at different
// moments of each round while their demands swing: idle, then each held
// down and claiming twice its share, then the load moving from node to
// node. In every round the nodes' shares sum to at most the totals.
// (Each node once computed its split from whatever demands had arrived when
// it ticked, at its own moment of the second: the three splits came from
// different figures, and in an audit they summed to 4,523 of a hard limit
// of 3,000 while load ramped up.)
func TestClusterSharesNeverSumPastTotals(t *testing.T) {
	srv := etcdtest.Start(t)
	nodes := []*testNode{startNode(t, srv, "a"), startNode(t, srv, "b"), startNode(t, srv, "c")}
	// Until every node has published (each alone and silent at first: it
	// holds the static share of the one node it knew at its start).
	tickUntil(t, nodes, map[string]int64{}, 5*time.Second, "every node up", func(s map[string]Share) bool {
		return hardSum(s) <= 3000 && nodes[0].Status().State == LinkUp && nodes[2].Status().State == LinkUp
	})
	for try := 1; ; try++ {
		late := sharesRun(t, nodes)
		if late == 0 {
			return
		}
		if try == 3 {
			t.Fatalf("%d ticks of the third run came more than a quarter round late: the machine could not keep the phases", late)
		}
		t.Logf("run %d: %d ticks more than a quarter round late (a busy machine); again", try, late)
	}
}

// sharesRun is one run of TestClusterSharesNeverSumPastTotals. It returns
// how many ticks came more than a quarter round after their moment (the
// run then proves nothing about phases and is not judged).
func sharesRun(t *testing.T, nodes []*testNode) (late int) {
	period := nodes[0].opts.PublishPeriod
	// Each node's moment in a round: real nodes tick together as the wall
	// clock's second turns, give or take their clocks' difference; spread
	// here, the split of each round must not depend on when a node ticks.
	offsets := []time.Duration{period / 20, period * 9 / 20, period * 17 / 20}
	enforced := map[string]Share{}
	worst := map[string]int64{}
	var over []string
	start := time.Now().Truncate(period).Add(period)
	for r := range 40 {
		for i, n := range nodes {
			at := start.Add(time.Duration(r)*period + offsets[i])
			time.Sleep(time.Until(at))
			if time.Since(at) > period/5 {
				late++
			}
			name := n.opts.NodeName
			var demand int64
			switch {
			case r < 5: // idle
			case r < 20: // held down: twice what it may use
				demand = 2 * max(enforced[name].HardLimit, 1)
			default: // the load moves: one node at a time wants everything
				if (r/5)%3 == i {
					demand = wantAll
				} else {
					demand = enforced[name].HardLimit / 4
				}
			}
			s := n.Tick(time.Now(), []Load{{Bucket: "app", Reserved: 1500, HardLimit: 3000, Demand: demand,
				Usage: min(demand, enforced[name].HardLimit)}})
			enforced[name] = s[0]
		}
		var hard, reserved int64 // this round's shares, every node's
		for _, e := range enforced {
			hard, reserved = hard+e.HardLimit, reserved+e.Reserved
		}
		worst["hard"], worst["reserved"] = max(worst["hard"], hard), max(worst["reserved"], reserved)
		if hard > 3000 || reserved > 1500 {
			over = append(over, fmt.Sprintf("round %d: %+v sum to hard %d, reserved %d", r, enforced, hard, reserved))
		}
	}
	if late > 0 {
		return late
	}
	for _, o := range over {
		t.Errorf("%s; want at most 3000 and 1500", o)
	}
	t.Logf("largest sums: hard %d of 3000, reserved %d of 1500; last shares %+v", worst["hard"], worst["reserved"], enforced)
	return 0
}
