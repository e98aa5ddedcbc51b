package catalog

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"kvd/tenant"
)

func sum(xs []int64) int64 {
	var s int64
	for _, x := range xs {
		s += x
	}
	return s
}

func TestSplitSharesTable(t *testing.T) {
	for _, tc := range []struct {
		name    string
		total   int64
		demands []int64
		floor   int64
		want    []int64
	}{
		{"alone gets everything", 3000, []int64{0}, 20, []int64{3000}},
		{"alone with demand", 3000, []int64{9999}, 20, []int64{3000}},
		{"no nodes", 3000, nil, 20, []int64{}},
		{"idle cluster splits evenly", 3000, []int64{0, 0, 0}, 20, []int64{1000, 1000, 1000}},
		{"all saturated split evenly", 3000, []int64{5000, 9000, 4000}, 0, []int64{1000, 1000, 1000}},
		{"small demand satisfied, rest to the hungry", 3000, []int64{500, 9000, 9000}, 0, []int64{500, 1250, 1250}},
		// floor 60 → 20 each; wants 480, 8980, 8980 of 2940: 480, 1230, 1230.
		{"floor then max-min", 3000, []int64{500, 9000, 9000}, 20, []int64{500, 1250, 1250}},
		// one node wants everything, two idle: they keep the floor (10 each).
		{"idle nodes keep the floor", 1500, []int64{0, 5000, 0}, 20, []int64{10, 1480, 10}},
		// under-subscribed: demand met, leftover spread evenly.
		{"leftover spread", 1000, []int64{100, 200, 0}, 0, []int64{334, 433, 233}},
		{"remainder to the first", 10, []int64{100, 100, 100}, 0, []int64{4, 3, 3}},
		{"zero total", 0, []int64{5, 5}, 20, []int64{0, 0}},
		{"negative demand is zero", 100, []int64{-5, 100}, 0, []int64{0, 100}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := splitShares(tc.total, tc.demands, tc.floor)
			if !slices.Equal(got, tc.want) {
				t.Fatalf("splitShares(%d, %v, %d) = %v, want %v", tc.total, tc.demands, tc.floor, got, tc.want)
			}
		})
	}
}

// TestSplitSharesProperties checks, on random demands, the invariants the
// cluster relies on.
func TestSplitSharesProperties(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for iter := range 20000 {
		n := 1 + rng.IntN(7)
		total := rng.Int64N(100000)
		floor := int64(rng.IntN(100))
		demands := make([]int64, n)
		for i := range demands {
			if rng.IntN(4) > 0 {
				demands[i] = rng.Int64N(2*total/int64(n+1) + 1)
			}
		}
		got := splitShares(total, demands, floor)
		if s := sum(got); s > total || (n > 0 && s != total) {
			t.Fatalf("#%d: Σ%v = %d, total %d (demands %v)", iter, got, s, total, demands)
		}
		minFloor := total * floor / 1000 / int64(n)
		for i, g := range got {
			if g < minFloor {
				t.Fatalf("#%d: node %d got %d < floor %d (demands %v)", iter, i, g, minFloor, demands)
			}
			for j := range got {
				// Shares follow demand (±1 unit of integer remainder).
				if demands[i] > demands[j] && g+1 < got[j] {
					t.Fatalf("#%d: demand %d > %d but share %d < %d", iter, demands[i], demands[j], g, got[j])
				}
			}
		}
		var need int64 // what all demands take, the floors counted
		for _, d := range demands {
			need += max(d, minFloor)
		}
		if need <= total {
			for i, g := range got {
				if g < demands[i] {
					t.Fatalf("#%d: enough for all, yet node %d got %d < demand %d", iter, i, g, demands[i])
				}
			}
		}
		if n > 1 {
			// A departed node's share goes to the survivors.
			gone := rng.IntN(n)
			rest := slices.Delete(slices.Clone(demands), gone, gone+1)
			after := splitShares(total, rest, floor)
			if sum(after) != total {
				t.Fatalf("#%d: survivors hold %d of %d", iter, sum(after), total)
			}
		}
	}
}

func TestNodeShare(t *testing.T) {
	U := tenant.Unlimited
	for _, tc := range []struct {
		name           string
		reserved, hard int64
		demands        []int64
		self           int
		wantR, wantH   int64
	}{
		{"unlimited stays unlimited", U, U, []int64{10, 10}, 0, U, U},
		{"reserved split, hard unlimited", 1500, U, []int64{5000, 0, 0}, 0, 1500, U},
		{"both split", 1000, 3000, []int64{100, 9000, 9000}, 1, 450, 1450},
		{"reserved never above hard", 3000, 3000, []int64{0, 9000}, 0, 0, 30},
		{"reserved leftover to the busy node", 1500, U, []int64{1375, 0, 0}, 0, 1500, U},
		{"reserved leftover among the busy", 1500, U, []int64{300, 600, 0}, 1, 900, U},
		{"reserved idle cluster: even", 1500, U, []int64{0, 0, 0}, 2, 500, U},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, h := nodeShare(tc.reserved, tc.hard, tc.demands, tc.self, DefaultFloorPermille)
			if r != tc.wantR || h != tc.wantH {
				t.Fatalf("nodeShare = %d, %d; want %d, %d", r, h, tc.wantR, tc.wantH)
			}
			if h != U && r > h {
				t.Fatalf("reserved share %d > hard share %d", r, h)
			}
		})
	}
}

func TestStaticShare(t *testing.T) {
	for _, tc := range []struct {
		total int64
		nodes int
		want  int64
	}{{3000, 3, 1000}, {3000, 0, 3000}, {10, 3, 3}, {tenant.Unlimited, 3, tenant.Unlimited}} {
		if got := staticShare(tc.total, tc.nodes); got != tc.want {
			t.Errorf("staticShare(%d, %d) = %d, want %d", tc.total, tc.nodes, got, tc.want)
		}
	}
}

func TestLinkStateMachine(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	l := link{grace: 2 * time.Second, ttl: 5 * time.Second}
	steps := []struct {
		now, answer float64
		want        LinkState
		changed     bool
	}{
		{0, 0, LinkUp, false},
		{1, 1, LinkUp, false},
		{2, 1, LinkUp, false}, // one slow tick is not an outage
		{3.5, 1, LinkHolding, true},
		{4, 1, LinkHolding, false},
		{5.9, 1, LinkHolding, false},
		{6, 1, LinkFallback, true}, // one TTL after the last answer
		{30, 1, LinkFallback, false},
		{31, 31, LinkUp, true}, // recovers at once
		{32, 32, LinkUp, false},
		{40, 32, LinkFallback, true}, // a tick that comes late skips holding
	}
	for i, s := range steps {
		from, to := l.observe(at(s.now), at(s.answer))
		if to != s.want || (from != to) != s.changed {
			t.Fatalf("step %d (now %v, answer %v): %v → %v, want → %v (changed %v)",
				i, s.now, s.answer, from, to, s.want, s.changed)
		}
	}
	var never link
	never.ttl, never.grace = 5*time.Second, 2*time.Second
	if _, to := never.observe(t0, time.Time{}); to != LinkFallback {
		t.Fatalf("never answered: %v, want fallback", to)
	}
}

func TestClusterOptionsValidate(t *testing.T) {
	good := func() ClusterOptions {
		o := ClusterOptions{Endpoints: []string{"http://127.0.0.1:2379"}, NodeName: "n1"}
		o.EnsureDefaults()
		return o
	}
	if o := good(); o.Validate() != nil || o.LeaseTTL != DefaultLeaseTTL || o.Cluster != "kvd" {
		t.Fatalf("defaults: %+v, %v", o, o.Validate())
	}
	for name, mut := range map[string]func(*ClusterOptions){
		"no endpoints":    func(o *ClusterOptions) { o.Endpoints = nil },
		"no node":         func(o *ClusterOptions) { o.NodeName = "" },
		"bad node":        func(o *ClusterOptions) { o.NodeName = "a/b" },
		"short ttl":       func(o *ClusterOptions) { o.LeaseTTL = time.Second },
		"fractional ttl":  func(o *ClusterOptions) { o.LeaseTTL = 2500 * time.Millisecond },
		"period too long": func(o *ClusterOptions) { o.PublishPeriod = 3 * time.Second },
		"floor too big":   func(o *ClusterOptions) { o.FloorPermille = 1001 },
	} {
		o := good()
		mut(&o)
		if o.Validate() == nil {
			t.Errorf("%s: Validate accepted %+v", name, o)
		}
	}
}

// TestLightNodeRoomKeepsHardLimit: one node held below its share by its own
// clients, beside two nodes the limit refuses, leaves little of the hard
// limit unused: the cluster delivers within SPEC's 5% of it (the audit's
// case: a quarter's room delivered 2,812 of 3,000).
func TestLightNodeRoomKeepsHardLimit(t *testing.T) {
	const hard = 3000
	for _, light := range []int64{100, 400, 750, 950} { // below the fair 1000
		// the refused nodes used what they were given: (hard - light) / 2
		used := (hard - light) / 2
		demands := []int64{demandOf(light, false, hard, 3), demandOf(used, true, hard, 3), demandOf(used, true, hard, 3)}
		shares := splitShares(hard, demands, DefaultFloorPermille)
		delivered := min(light, shares[0]) + shares[1] + shares[2]
		if delivered < hard*95/100 || delivered > hard {
			t.Errorf("light node at %d: shares %v deliver %d of %d", light, shares, delivered, hard)
		}
		if shares[0] <= light {
			t.Errorf("light node at %d: share %d leaves it no room to grow", light, shares[0])
		}
	}
	if d := demandOf(1000, false, tenant.Unlimited, 3); d != 1250 {
		t.Errorf("no hard limit: demand %d, want usage plus a quarter", d)
	}
}

// TestRefusedLightNodeAsksForRoom: a light node refused for a moment (its
// clients' jitter) beside a node the limit refuses all the time: the light
// node gets room to grow, and the busy node keeps most of the limit (when
// a refused node wanted everything, the split went even for 3 ticks and the
// cluster delivered 1,800 of 3,000). Two nodes both held down still split
// evenly, and an idle node whose clients wake up claims a quarter of its
// even share at once, then doubles.
func TestRefusedLightNodeAsksForRoom(t *testing.T) {
	const hard = 3000
	shares := splitShares(hard, []int64{demandOf(300, true, hard, 2), demandOf(2650, true, hard, 2)}, DefaultFloorPermille)
	if delivered := min(300, shares[0]) + shares[1]; shares[0] < 600 || delivered < hard*85/100 {
		t.Errorf("light node refused once: shares %v deliver %d of %d", shares, delivered, hard)
	}
	shares = splitShares(hard, []int64{demandOf(1000, true, hard, 2), demandOf(2000, true, hard, 2)}, DefaultFloorPermille)
	if shares[0] != 1500 || shares[1] != 1500 {
		t.Errorf("both held down: shares %v, want an even split", shares)
	}
	if d := demandOf(0, true, hard, 2); d != 375 {
		t.Errorf("idle node refused: demand %d, want a quarter of its even share (375)", d)
	}
	if d := demandOf(10, true, tenant.Unlimited, 2); d != wantAll {
		t.Errorf("no hard limit, refused: demand %d, want all", d)
	}
}
