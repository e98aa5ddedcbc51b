package catalog

import (
	"sort"
	"time"

	"kvd/tenant"
)

// This file holds the pure parts of cluster-wide limits: how a bucket's
// cluster totals split among nodes by demand (splitShares, nodeShare), and
// the etcd link's state machine (link). Neither does I/O or reads a clock.

// DefaultFloorPermille is the part of a bucket's total, in thousandths,
// set aside so that every live node holds a share even with no demand.
const DefaultFloorPermille = 20

// Share is one node's part of one bucket's cluster-wide limits, in units
// per second: what the node's throttle enforces. Reserved ≤ HardLimit
// unless HardLimit is tenant.Unlimited; either may be tenant.Unlimited.
type Share struct {
	Bucket    string
	Reserved  int64
	HardLimit int64
}

// Load is one bucket as the local node saw it during the last second: its
// cluster-wide totals (the bucket's settings) and the node's own demand
// (units it wants: see demandOf in cluster_apply.go) and usage (units it
// charged).
type Load struct {
	Bucket    string
	Reserved  int64 // cluster total, or tenant.Unlimited
	HardLimit int64 // cluster total, or tenant.Unlimited
	Demand    int64
	Usage     int64
}

// splitShares divides total units among len(demands) nodes, max-min fairly
// by demand (Doorman's FAIR_SHARE), after setting aside a floor: total ×
// floorPermille / 1000, split evenly, which every node gets whatever its
// demand. The rest goes by water-filling: no node gets more than its
// demand while another wants more, and what nobody wants is spread evenly,
// so an idle cluster leaves every node headroom. Units left by integer
// division go one each to the first nodes. The result sums to exactly
// total (never more); one node alone gets all of it. demands[i] < 0 counts
// as 0. It is a pure function.
func splitShares(total int64, demands []int64, floorPermille int64) []int64 {
	n := int64(len(demands))
	out := make([]int64, n)
	if n == 0 || total <= 0 {
		return out
	}
	floor := total * floorPermille / 1000 / n
	for i := range out {
		out[i] = floor
	}
	rest := total - floor*n
	wants := make([]int64, n)
	for i, d := range demands {
		wants[i] = max(0, d-floor)
	}
	rest = waterFill(out, wants, rest)
	spreadEvenly(out, rest)
	return out
}

// waterFill raises out[i] by at most wants[i], max-min fairly, spending at
// most budget; it returns what is left.
func waterFill(out, wants []int64, budget int64) int64 {
	order := make([]int, len(wants))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return wants[order[a]] < wants[order[b]] })
	for k, i := range order {
		left := int64(len(order) - k)
		fair := budget / left
		if wants[i] > fair {
			// Every node from here on wants more than fair: spread the
			// budget evenly among them, remainder to the first.
			return fillLevel(out, order[k:], budget)
		}
		out[i] += wants[i]
		budget -= wants[i]
	}
	return budget
}

// fillLevel gives budget evenly to the nodes idx (all wanting more than
// the even part), the division's remainder one unit each to the lowest
// indexes.
func fillLevel(out []int64, idx []int, budget int64) int64 {
	n := int64(len(idx))
	each, extra := budget/n, budget%n
	sorted := append([]int(nil), idx...)
	sort.Ints(sorted)
	for k, i := range sorted {
		out[i] += each
		if int64(k) < extra {
			out[i]++
		}
	}
	return 0
}

// spreadEvenly gives rest to every node evenly, remainder to the first.
func spreadEvenly(out []int64, rest int64) {
	if rest <= 0 || len(out) == 0 {
		return
	}
	n := int64(len(out))
	for i := range out {
		out[i] += rest / n
		if int64(i) < rest%n {
			out[i]++
		}
	}
}

// nodeShare is node self's share of a bucket whose cluster totals are
// reserved and hard, given every live node's demand (self included): the
// hard limit by splitShares (with the floor: a node without a hard share
// would refuse everything), the reservation by splitReserved. An
// unlimited total stays unlimited; a reservation share never exceeds the
// hard-limit share. It is a pure function.
func nodeShare(reserved, hard int64, demands []int64, self int, floorPermille int64) (r, h int64) {
	h, r = tenant.Unlimited, tenant.Unlimited
	if hard != tenant.Unlimited {
		h = splitShares(hard, demands, floorPermille)[self]
	}
	if reserved != tenant.Unlimited {
		r = splitReserved(reserved, demands)[self]
		if h != tenant.Unlimited {
			r = min(r, h)
		}
	}
	return r, h
}

// splitReserved divides a reservation among nodes: max-min fairly by
// demand like splitShares, but without a floor, and what the demands leave
// goes evenly to the nodes that have demand (to all when none has). A node
// without a reserved share still serves the bucket from its free pool, so
// a reservation is worth something only where the bucket is used: the
// node that carries the whole demand gets the whole reservation even in a
// second its clients lagged. It is a pure function.
func splitReserved(total int64, demands []int64) []int64 {
	out := make([]int64, len(demands))
	if len(demands) == 0 || total <= 0 {
		return out
	}
	wants := make([]int64, len(demands))
	var busy []int
	for i, d := range demands {
		wants[i] = max(0, d)
		if d > 0 {
			busy = append(busy, i)
		}
	}
	rest := waterFill(out, wants, total)
	if len(busy) == 0 {
		spreadEvenly(out, rest)
	} else if rest > 0 {
		fillLevel(out, busy, rest)
	}
	return out
}

// staticShare is the fallback share without etcd: the total divided by
// the last known node count (at least 1), rounded down.
func staticShare(total int64, nodes int) int64 {
	if total == tenant.Unlimited {
		return tenant.Unlimited
	}
	return total / int64(max(nodes, 1))
}

// LinkState is the node's view of its link to etcd.
type LinkState int

// The link states. Up: shares follow the cluster's demand. Holding: etcd
// has not answered since a moment less than one lease TTL ago; the node
// keeps its last shares. Fallback: longer than that; the node enforces the
// static share (total ÷ last known node count) until etcd answers again.
const (
	LinkUp LinkState = iota
	LinkHolding
	LinkFallback
)

// MarshalText writes the state's name ("up", "holding", "fallback").
func (s LinkState) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

func (s LinkState) String() string {
	switch s {
	case LinkUp:
		return "up"
	case LinkHolding:
		return "holding"
	case LinkFallback:
		return "fallback"
	}
	return "unknown"
}

// link is the etcd link's state machine. Time is an argument: observe is
// told, once per tick, when etcd last answered this node.
type link struct {
	grace time.Duration // quiet longer than this is an outage
	ttl   time.Duration // the lease TTL: how long an outage holds shares
	state LinkState
}

// observe moves the machine to the state that now and the time of etcd's
// last answer give, and returns the states before and after; the caller
// logs when they differ, so each transition is logged once. Up while etcd
// answered within grace; holding until one TTL after the last answer (when
// etcd expires this node's lease and the other nodes stop counting it);
// fallback after that, until etcd answers again. A zero lastAnswer (never
// answered) is fallback.
func (l *link) observe(now, lastAnswer time.Time) (from, to LinkState) {
	from = l.state
	switch quiet := now.Sub(lastAnswer); {
	case lastAnswer.IsZero():
		l.state = LinkFallback
	case quiet <= l.grace:
		l.state = LinkUp
	case quiet < l.ttl:
		l.state = LinkHolding
	default:
		l.state = LinkFallback
	}
	return from, l.state
}
