package tests

import (
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	mc "kvd/protocol/binary"
)

// clusterConfig is the config every node of TestCluster starts with: node
// capacity 3000 units/s each; "hl", a bucket with a cluster-wide hard
// limit of 3000; "res", with 1500 reserved cluster-wide; "flood", the
// neighbour with neither; one user per bucket and the admin.
func clusterConfig(t *testing.T, extraUsers ...map[string]any) string {
	return throttleConfig(t, map[string]any{
		"node_capacity": 3000,
		"users": append([]map[string]any{
			{"name": "admin", "password": "admin-pw", "buckets": []string{"*"},
				"privileges": []string{"BucketThrottleManagement", "Unthrottled", "Stats"}},
			{"name": "tenant", "password": "tenant-pw", "buckets": []string{"*"}},
		}, extraUsers...),
	}, bucketConfig("hl", 0, 3000), bucketConfig("res", 1500, "unlimited"), bucketConfig("flood", 0, "unlimited"))
}

// hardLimit is hl's cluster-wide hard limit, and tolerance the accuracy
// SPEC section 9 asks of it.
const (
	hardLimit = 3000.0
	tolerance = 0.05
	leaseTTL  = 5 * time.Second // catalog.DefaultLeaseTTL: kvd's default
)

// TestCluster runs three kvd nodes and one etcd on loopback and checks
// issue 11's figures, measured at the clients, in one cluster (about 100 s
// on an idle 2-core machine): the catalog replicates within 2 s; a
// cluster-wide hard limit holds under uneven load on three and on two
// nodes; a reservation is honoured on the one node that carries it beside a
// flooding neighbour; the survivors of a kill -9 take the whole limit
// within the lease TTL + 2 s; and an etcd outage keeps every node serving
// within the limit, the split recovering within 5 s of etcd's return.
func TestCluster(t *testing.T) {
	tc := startCluster(t, 3, clusterConfig(t))
	t.Run("catalog", tc.testCatalog)
	tc.seedKey("hl", "k")
	tc.seedKey("res", "k")
	tc.seedKey("flood", "k")
	t.Run("hard_limit", tc.testHardLimit)
	t.Run("reserved", tc.testReserved)
	t.Run("kill", tc.testKill)
	t.Run("etcd_outage", tc.testEtcdOutage)
}

// testCatalog: CREATE_BUCKET on n1 is selectable on the others within 2 s;
// 0x2a on n2 applies on all three; DELETE_BUCKET on n3 everywhere.
func (tc *testCluster) testCatalog(t *testing.T) {
	n1, n2, n3 := tc.admin(tc.nodes[0]), tc.admin(tc.nodes[1]), tc.admin(tc.nodes[2])
	n1.expectStatus("CREATE_BUCKET made", reqWith(mc.OpCreateBucket, 1, nil, "made", `{"reserved":10,"hard_limit":600}`), mc.StatusOK)
	for i, c := range []*rawConn{n2, n3} {
		d := within(t, 2*time.Second, "made selectable on "+tc.nodes[i+1].name, func() (bool, string) {
			st := c.selectBucket("made")
			return st == mc.StatusOK, st.String()
		})
		t.Logf("bucket created on n1 selectable on %s after %v", tc.nodes[i+1].name, d)
	}
	n2.expectStatus("CREATE_BUCKET made again", reqWith(mc.OpCreateBucket, 2, nil, "made", ""), mc.StatusKeyExists)
	n2.expectStatus("0x2a made", reqWith(mc.OpSetBucketThrottle, 3, nil, "made", `{"reserved":30,"hard_limit":900}`), mc.StatusOK)
	for i, c := range []*rawConn{n1, n2, n3} {
		d := within(t, 2*time.Second, "0x2a on "+tc.nodes[i].name, func() (bool, string) {
			_, h, tr, th := c.clusterStat().share("made")
			local, _ := strconv.Atoi(h)
			return tr == "30" && th == "900" && local > 0 && local <= 900, "totals " + tr + "/" + th + ", local hard " + h
		})
		t.Logf("0x2a made on n2 in force on %s after %v", tc.nodes[i].name, d)
	}
	// kvctl with a queue flag only sends the bucket's limits back as they
	// are: the cluster's totals, not the node's share that bucket_details
	// shows (which would halve them with every call).
	if out, errs, code := kvctl(t, "--addr", tc.nodes[0].Addr, "--user", "admin", "--password", "admin-pw",
		"bucket-throttle", "made", "--max-concurrent", "5"); code != 0 {
		t.Fatalf("kvctl bucket-throttle made --max-concurrent 5: exit %d, %s%s", code, out, errs)
	}
	time.Sleep(500 * time.Millisecond) // the watch brings it back to each node
	for i, c := range []*rawConn{n1, n2, n3} {
		if _, _, tr, th := c.clusterStat().share("made"); tr != "30" || th != "900" {
			t.Errorf("after kvctl --max-concurrent, %s has totals %s/%s, want 30/900", tc.nodes[i].name, tr, th)
		}
	}
	n3.expectStatus("DELETE_BUCKET made", reqWith(mc.OpDeleteBucket, 4, nil, "made", ""), mc.StatusOK)
	n1.expectStatus("DELETE_BUCKET made again", reqWith(mc.OpDeleteBucket, 5, nil, "made", ""), mc.StatusKeyNotFound)
	within(t, 2*time.Second, "made gone everywhere", func() (bool, string) {
		s1, s2 := n1.selectBucket("made"), n2.selectBucket("made")
		return s1 == mc.StatusKeyNotFound && s2 == mc.StatusKeyNotFound, s1.String() + " " + s2.String()
	})
	// A user removed through one node's file loses its open connections on
	// every node, not only its new logins (users reach the others via etcd).
	writeConfig := func(cfg string) {
		if err := os.WriteFile(tc.nodes[0].Config, []byte(cfg), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	writeConfig(clusterConfig(t, map[string]any{"name": "temp", "password": "temp-pw", "buckets": []string{"*"}}))
	var temp *rawConn
	within(t, 10*time.Second, "temp able to log in on n2", func() (bool, string) {
		c := dialRaw(t, tc.nodes[1].Addr)
		res := c.call(&mc.Request{Magic: mc.MagicRequest, Opcode: mc.OpSASLAuth, Key: []byte("PLAIN"), Value: []byte("\x00temp\x00temp-pw")})
		if res.Status == mc.StatusOK {
			temp = c
		}
		return res.Status == mc.StatusOK, res.Status.String()
	})
	writeConfig(clusterConfig(t))
	within(t, 10*time.Second, "temp's connection on n2 closed", func() (bool, string) {
		return temp.closed(500 * time.Millisecond), "still open"
	})
	within(t, 2*time.Second, "n1 sees three members", func() (bool, string) {
		st := n1.clusterStat()
		return len(st.Members) == 3 && st.Etcd == "up", fmt.Sprintf("%d members, etcd %s", len(st.Members), st.Etcd)
	})
}

// loadHL starts GETs of hl on node i over conns connections.
func (tc *testCluster) loadHL(t *testing.T, i, conns int) *loader {
	l := startLoad(t, loadOptions{addr: tc.nodes[i].Addr, user: "tenant", password: "tenant-pw",
		bucket: "hl", key: "k", conns: conns, depth: 4})
	l.phase = tc.phaseOf(tc.nodes[i])
	return l
}

// measureLimit measures hl's GETs/s through ls over d and fails unless it
// is hardLimit ± tolerance. Delivering more is always a failure. Delivering
// less on this shared 2-core machine can mean that the clients and nodes
// were starved of CPU rather than held back by kvd: then, and only if
// every node's STAT cluster shows hard shares that add up to the limit
// (the limit was there to take), the window is measured once more.
func (tc *testCluster) measureLimit(t *testing.T, what string, ls loads, nodes []*clusterNode, d time.Duration) {
	t.Helper()
	for attempt := 1; ; attempt++ {
		rate, each := ls.rate(d)
		t.Logf("%s: %.0f GETs/s in total (by node %.0f), hard limit %.0f", what, rate, each, hardLimit)
		switch {
		case rate > hardLimit*(1+tolerance):
			t.Errorf("%s: %.0f GETs/s, above %.0f + %.0f%%", what, rate, hardLimit, tolerance*100)
		case rate >= hardLimit*(1-tolerance):
		case attempt == 1 && tc.sharesSum(nodes) >= hardLimit*(1-tolerance):
			t.Logf("%s: under the limit although the shares sum to it: clients starved of CPU; measuring again", what)
			continue
		default:
			t.Errorf("%s: %.0f GETs/s, want %.0f ± %.0f%% (shares sum to %.0f)", what, rate, hardLimit,
				tolerance*100, tc.sharesSum(nodes))
		}
		return
	}
}

// sharesSum adds up hl's hard shares as STAT cluster shows them on nodes.
func (tc *testCluster) sharesSum(nodes []*clusterNode) float64 {
	sum := 0.0
	for _, n := range nodes {
		_, h, _, _ := tc.admin(n).clusterStat().share("hl")
		v, _ := strconv.Atoi(h)
		sum += float64(v)
	}
	return sum
}

// testHardLimit: hl loaded through 1, 4 and 16 connections to the three
// nodes delivers 3000 ± 5% over 10 s; with the load on two nodes, the same.
func (tc *testCluster) testHardLimit(t *testing.T) {
	ls := loads{tc.loadHL(t, 0, 1), tc.loadHL(t, 1, 4), tc.loadHL(t, 2, 16)}
	time.Sleep(3 * time.Second) // the shares follow the demand
	tc.measureLimit(t, "1/4/16 connections on three nodes, 10 s", ls, tc.nodes, 10*time.Second)
	n1 := tc.nodes[0]
	tc.wantMetric(t, n1, "kvd_cluster_nodes", 3, 3)
	tc.wantMetric(t, n1, "kvd_cluster_etcd_up", 1, 1)
	tc.wantMetric(t, n1, `kvd_bucket_share_units{bucket="hl",kind="hard_limit"}`, 900, 1100)
	tc.wantMetric(t, n1, `kvd_bucket_share_units{bucket="res",kind="reserved"}`, 0, 1500)
	tc.wantClusterUsage(t, n1, "hl", 3000)
	ls[2].Stop()
	time.Sleep(3 * time.Second)
	tc.measureLimit(t, "1/4 connections on two nodes, 10 s", ls[:2], tc.nodes, 10*time.Second)
	ls.stop()
}

// wantClusterUsage fails unless STAT cluster on n shows bucket's cluster
// usage near want. Each node publishes its last second's usage once a tick,
// so one reading mixes seconds that end at different moments; the median of
// five readings half a second apart must be within 15%. A node whose
// publication is late (etcd slow to write on a loaded machine) holds an old
// figure for a while, so the readings go on for up to 8 s until the last
// five pass.
func (tc *testCluster) wantClusterUsage(t *testing.T, n *clusterNode, bucket string, want int) {
	var seen []int
	var byNode []map[string]int64
	within := func(v int) bool { return float64(v) >= 0.85*float64(want) && float64(v) <= 1.15*float64(want) }
	for range 16 {
		for _, sh := range tc.admin(n).clusterStat().Shares {
			if sh.Bucket != bucket {
				continue
			}
			seen, byNode = append(seen, int(sh.ClusterUsage)), append(byNode, sh.NodeUsage)
			sum := int64(0)
			for _, u := range sh.NodeUsage {
				sum += u
			}
			if len(sh.NodeUsage) != len(tc.nodes) || sum != sh.ClusterUsage {
				t.Errorf("STAT cluster on %s: %s's node usage %v for %d nodes, want one per node adding up to the cluster usage %d",
					n.name, bucket, sh.NodeUsage, len(tc.nodes), sh.ClusterUsage)
			}
		}
		if len(seen) >= 5 && within(median(seen[len(seen)-5:])) {
			t.Logf("STAT cluster on %s: %s's cluster usage in the last second, readings: %v (the last by node: %v)",
				n.name, bucket, seen, byNode[len(byNode)-1])
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
	if len(seen) == 0 {
		t.Errorf("STAT cluster on %s: no share for %s", n.name, bucket)
		return
	}
	t.Errorf("STAT cluster on %s: %s's cluster usage readings %v (by node: %v): no five in a row with a median within %d ± 15%% units/s",
		n.name, bucket, seen, byNode, want)
}

// testReserved: res (1500 reserved cluster-wide) loaded at 1500/s through
// n1 only, beside flood flooding every node (capacity 3000 each): n1 gives
// res its full 1500/s and never throttles it.
func (tc *testCluster) testReserved(t *testing.T) {
	var ls loads
	for i := range tc.nodes {
		ls = append(ls, startLoad(t, loadOptions{addr: tc.nodes[i].Addr, user: "tenant", password: "tenant-pw",
			bucket: "flood", key: "k", conns: 4, depth: 8}))
		ls[i].phase = tc.phaseOf(tc.nodes[i])
	}
	res := startLoad(t, loadOptions{addr: tc.nodes[0].Addr, user: "tenant", password: "tenant-pw",
		bucket: "res", key: "k", conns: 2, depth: 16, rate: 1500})
	res.phase = ls[0].phase
	admin := tc.admin(tc.nodes[0])
	time.Sleep(3 * time.Second) // the reservation's share moves to n1
	before := admin.bucketStat("res").NumThrottled
	got, _ := loads{res}.rate(8 * time.Second)
	flood, each := ls.rate(2 * time.Second)
	throttled := admin.bucketStat("res").NumThrottled - before
	r, _, _, _ := admin.clusterStat().share("res")
	t.Logf("res through n1: %.0f GETs/s over 8 s, throttled %d times; n1's reserved share %s; flood %.0f/s (by node %.0f)",
		got, throttled, r, flood, each)
	if got < 1500*0.98 || throttled != 0 {
		t.Errorf("res got %.0f GETs/s of its 1500 reserved, throttled %d times: want ≥ 1470/s and never throttled", got, throttled)
	}
	if flood < 3000 {
		t.Errorf("flood got %.0f GETs/s on three nodes of 3000 capacity each: the neighbour did not flood", flood)
	}
	res.Stop()
	ls.stop()
}

// testKill: kill -9 one node under load; within the lease TTL + 2 s the
// other two deliver the whole 3000 ± 5%; restarted, it takes its share
// again.
func (tc *testCluster) testKill(t *testing.T) {
	ls := loads{tc.loadHL(t, 0, 4), tc.loadHL(t, 1, 4), tc.loadHL(t, 2, 4)}
	time.Sleep(2 * time.Second)
	tc.nodes[2].Kill()
	time.Sleep(leaseTTL + 2*time.Second)
	tc.measureLimit(t, "two survivors, from lease TTL + 2 s after kill -9, 5 s", ls[:2], tc.nodes[:2], 5*time.Second)
	tc.restart(tc.nodes[2])
	ls[2] = tc.loadHL(t, 2, 4)
	c := tc.admin(tc.nodes[2])
	admins := []*rawConn{tc.admin(tc.nodes[0]), tc.admin(tc.nodes[1]), c}
	d := within(t, 10*time.Second, "the split converges to thirds", func() (bool, string) {
		ok, seen := true, ""
		for _, a := range admins {
			st := a.clusterStat()
			_, h, _, _ := st.share("hl")
			v, _ := strconv.Atoi(h)
			ok = ok && len(st.Members) == 3 && v >= 900 && v <= 1100
			seen += fmt.Sprintf("%s: %d members, hard share %s; ", st.Node, len(st.Members), h)
		}
		return ok, seen
	})
	t.Logf("restarted n3: every node holds a third of hl after %v", d)
	time.Sleep(time.Second) // the second in which the shares changed is not the converged split
	tc.measureLimit(t, "three nodes after the restart, 5 s", ls, tc.nodes, 5*time.Second)
	ls.stop()
}

// testEtcdOutage: etcd killed for 30 s under load: every node serves, the
// cluster stays within 3000 + 5%; after etcd returns, every node is up
// within 5 s, and when n1's load stops its share goes to the others.
func (tc *testCluster) testEtcdOutage(t *testing.T) {
	ls := loads{tc.loadHL(t, 0, 1), tc.loadHL(t, 1, 4), tc.loadHL(t, 2, 8)}
	time.Sleep(2 * time.Second)
	admins := []*rawConn{tc.admin(tc.nodes[0]), tc.admin(tc.nodes[1]), tc.admin(tc.nodes[2])}
	tc.etcd.Stop()
	rate, each := ls.rate(30 * time.Second)
	t.Logf("etcd down for 30 s: %.0f GETs/s in total (by node %.0f)", rate, each)
	for i, r := range each {
		if r < 100 {
			t.Errorf("%s served %.0f GETs/s while etcd was down: want it to keep serving", tc.nodes[i].name, r)
		}
	}
	if rate > hardLimit*(1+tolerance) {
		t.Errorf("etcd down: %.0f GETs/s, above the limit %.0f + %.0f%%", rate, hardLimit, tolerance*100)
	}
	for i, c := range admins {
		if st := c.clusterStat(); st.Etcd != "fallback" {
			t.Errorf("%s after 30 s without etcd: link %q, want fallback", tc.nodes[i].name, st.Etcd)
		}
		tc.wantMetric(t, tc.nodes[i], "kvd_cluster_etcd_up", 0, 0)
	}
	if err := tc.etcd.Restart(); err != nil {
		t.Fatal(err)
	}
	d := within(t, 5*time.Second, "split recovers", func() (bool, string) {
		sum, seen, up := 0, "", true
		for _, c := range admins {
			st := c.clusterStat()
			_, h, _, _ := st.share("hl")
			v, _ := strconv.Atoi(h)
			seen += fmt.Sprintf("%s: etcd %s, %d members, hard share %s; ", st.Node, st.Etcd, len(st.Members), h)
			up = up && st.Etcd == "up" && len(st.Members) == 3
			sum += v
		}
		return up && sum > 2900 && sum <= 3000, seen
	})
	t.Logf("etcd back: every node up, hard shares summing to the limit, after %v", d)
	tc.wantMetric(t, tc.nodes[0], "kvd_cluster_etcd_up", 1, 1)
	rate, each = ls.rate(3 * time.Second)
	t.Logf("after etcd's return, 3 s: %.0f GETs/s (by node %.0f)", rate, each)
	// The split follows the demand again, not the outage's static thirds
	// (which the sum above would accept): n1's load stops, and its share
	// goes to the two nodes that still ask.
	ls[0].Stop()
	d = within(t, 8*time.Second, "the split follows the demand after etcd's return", func() (bool, string) {
		shares, seen := make([]int, len(admins)), ""
		for i, c := range admins {
			st := c.clusterStat()
			_, h, _, _ := st.share("hl")
			shares[i], _ = strconv.Atoi(h)
			seen += fmt.Sprintf("%s: hard share %s; ", st.Node, h)
		}
		return shares[0] <= 500 && shares[1]+shares[2] >= 2400, seen
	})
	t.Logf("n1 idle after etcd's return: its share went to the others after %v", d)
	ls.stop()
}
