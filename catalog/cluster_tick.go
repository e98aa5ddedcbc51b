package catalog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"sort"
	"strconv"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// This file is the per-tick side of a Cluster: Tick publishes the node's
// demand (through the publisher goroutine) and returns its shares; Status
// reports what STAT cluster shows.

// memberInfo is the value of members/<node>.
type memberInfo struct {
	Address   string    `json:"address"`
	Heartbeat time.Time `json:"heartbeat"`
}

// bucketLoad is one bucket's demand and usage in usage/<node>, and the
// demand the node published the round before (usageReport.PrevRound).
type bucketLoad struct {
	Demand int64 `json:"demand"`
	Usage  int64 `json:"usage"`
	Prev   int64 `json:"prev,omitempty"`
}

// usageReport is the value of usage/<node>: the round it was published in
// (the PublishPeriod since the epoch its tick fell in), the round of the
// node's publication before (0: none), and the buckets' figures.
type usageReport struct {
	Round     int64                 `json:"round"`
	PrevRound int64                 `json:"prev_round,omitempty"`
	Buckets   map[string]bucketLoad `json:"buckets"`
}

// demandIn is the demand the report's node published for bucket in round,
// if the report holds that round.
func (r usageReport) demandIn(round int64, bucket string) (int64, bool) {
	switch round {
	case r.Round:
		return r.Buckets[bucket].Demand, true
	case r.PrevRound:
		return r.Buckets[bucket].Prev, true
	}
	return 0, false
}

// roundState is what the node itself published in its last round and the
// round before (prev is nil when it published nothing then): its demands,
// as the others read them for it.
type roundState struct {
	round        int64
	demand, prev map[string]int64
}

// demandIn is the node's own demand for bucket in round (0 if it published
// none then: the others count it as wanting everything, it counts itself as
// wanting nothing, and both only shrink what they take).
func (r *roundState) demandIn(round int64, bucket string) int64 {
	switch round {
	case r.round:
		return r.demand[bucket]
	case r.round - 1:
		return r.prev[bucket]
	}
	return 0
}

// report is one tick's publication.
type report struct {
	now    time.Time
	member []byte
	usage  []byte
}

// ClusterStatus is what STAT cluster and kvctl cluster show.
type ClusterStatus struct {
	Node    string    `json:"node"`
	State   LinkState `json:"etcd"`
	Members []Member  `json:"members"`
	// Shares are this node's shares as of the last Tick.
	Shares []Share `json:"shares"`
	// Usage is, by bucket, the units the whole cluster charged in the
	// last second (as published); NodeUsage the same by bucket and node.
	Usage     map[string]int64            `json:"usage"`
	NodeUsage map[string]map[string]int64 `json:"node_usage"`
}

// Tick is called once per throttle tick with every local bucket's cluster
// totals and last-second demand and usage. It publishes them (at most once
// per PublishPeriod, without waiting for etcd), moves the link's state
// machine, logging a transition once, and returns this node's share of
// every bucket in loads, in the same order. It never blocks on etcd.
func (c *Cluster) Tick(now time.Time, loads []Load) []Share {
	c.tickMu.Lock()
	defer c.tickMu.Unlock()
	// A tick a little early (the caller's timer jitters) still publishes:
	// skipping it would halve the heartbeat rate. A node publishes once per
	// round, so that every node reads the same demands for it.
	round := now.UnixNano() / int64(c.opts.PublishPeriod)
	if now.Sub(c.lastPub) >= c.opts.PublishPeriod*9/10 && round != c.rounds.round {
		c.lastPub = now
		c.enqueue(now, round, loads)
	}
	from, to := c.link.observe(now, time.Unix(0, c.lastAnswer.Load()))
	if from != to {
		c.logTransitionLocked(from, to)
	}
	members, demands := c.snapshot(now)
	shares := make([]Share, len(loads))
	for i, l := range loads {
		shares[i] = c.shareLocked(to, round, l, members, demands)
	}
	if len(c.lastShares) > len(loads) { // buckets deleted since
		live := make(map[string]bool, len(loads))
		for _, l := range loads {
			live[l.Bucket] = true
		}
		maps.DeleteFunc(c.lastShares, func(b string, _ Share) bool { return !live[b] })
	}
	switch to {
	case LinkUp:
		c.knownNodes = len(members)
	case LinkFallback:
		// Shares held from before the outage are stale by now: on the
		// way back (etcd answering again, but a report older than the
		// grace still in flight) the node passes through holding, which
		// must not revive them.
		clear(c.lastShares)
	}
	usage, byNode := clusterUsage(demands)
	c.status = ClusterStatus{Node: c.opts.NodeName, State: to, Members: members, Shares: shares,
		Usage: usage, NodeUsage: byNode}
	return shares
}

// shareLocked is one bucket's share in state st, in round.
//
// Up, every node computes the split of round from the demands all nodes
// published in the round before, so that the nodes' shares of one round
// come from the same figures and sum to at most the totals. A node whose
// demand for that round is not in sight (not published, or not arrived)
// counts as wanting all it can get, which only shrinks the share computed
// here. The nodes' rounds are their throttles' seconds, which start when the
// wall clock's second turns (clock.WholeSecond): every node moves to the
// next round's split at the same moment, give or take their clocks'
// difference.
func (c *Cluster) shareLocked(st LinkState, round int64, l Load, members []Member, reports map[string]usageReport) Share {
	switch st {
	case LinkHolding:
		if s, ok := c.lastShares[l.Bucket]; ok {
			return s
		}
		fallthrough
	case LinkFallback:
		return Share{Bucket: l.Bucket, Reserved: staticShare(l.Reserved, c.knownNodes),
			HardLimit: staticShare(l.HardLimit, c.knownNodes)}
	}
	self, demands := 0, make([]int64, len(members))
	for i, m := range members {
		if m.Name == c.opts.NodeName {
			self, demands[i] = i, c.rounds.demandIn(round-1, l.Bucket)
			continue
		}
		d, known := reports[m.Name].demandIn(round-1, l.Bucket)
		if !known {
			d = wantAll
		}
		demands[i] = d
	}
	r, h := nodeShare(l.Reserved, l.HardLimit, demands, self, c.opts.FloorPermille)
	s := Share{Bucket: l.Bucket, Reserved: r, HardLimit: h}
	c.lastShares[l.Bucket] = s
	return s
}

// snapshot returns the live members (this node always among them), sorted
// by name, and every node's last report. Carried members whose time is up
// at now leave the view.
func (c *Cluster) snapshot(now time.Time) ([]Member, map[string]usageReport) {
	c.viewMu.Lock()
	defer c.viewMu.Unlock()
	for name, until := range c.view.carried {
		switch {
		case until.IsZero():
			c.view.carried[name] = now.Add(c.opts.LeaseTTL)
		case !now.Before(until):
			delete(c.view.carried, name)
			delete(c.view.members, name)
		}
	}
	members := make([]Member, 0, len(c.view.members)+1)
	for name, m := range c.view.members {
		members = append(members, Member{Name: name, Address: m.Address, Heartbeat: m.Heartbeat})
	}
	if _, ok := c.view.members[c.opts.NodeName]; !ok {
		members = append(members, Member{Name: c.opts.NodeName, Address: c.opts.Address})
	}
	sort.Slice(members, func(i, j int) bool { return members[i].Name < members[j].Name })
	reports := make(map[string]usageReport, len(c.view.usage))
	for name, u := range c.view.usage {
		if _, live := c.view.members[name]; live {
			reports[name] = u
		}
	}
	return members, reports
}

// clusterUsage sums the live nodes' last reports by bucket, and returns
// them by bucket and node too.
func clusterUsage(reports map[string]usageReport) (total map[string]int64, byNode map[string]map[string]int64) {
	total, byNode = map[string]int64{}, map[string]map[string]int64{}
	for node, u := range reports {
		for b, l := range u.Buckets {
			total[b] += l.Usage
			if byNode[b] == nil {
				byNode[b] = map[string]int64{}
			}
			byNode[b][node] = l.Usage
		}
	}
	return total, byNode
}

func (c *Cluster) logTransitionLocked(from, to LinkState) {
	switch to {
	case LinkUp:
		c.log.Info("cluster: etcd answers again; shares follow the cluster's demand", "from", from.String())
	case LinkHolding:
		c.log.Warn("cluster: etcd does not answer; keeping the last shares for one lease TTL",
			"ttl", c.opts.LeaseTTL)
	case LinkFallback:
		c.log.Warn("cluster: etcd unreachable for a lease TTL; enforcing limit ÷ known nodes",
			"nodes", max(c.knownNodes, 1))
	}
}

// enqueue hands round's report to the publisher, replacing one not yet
// sent, and keeps the node's demands of this round and the one before.
func (c *Cluster) enqueue(now time.Time, round int64, loads []Load) {
	rs := &c.rounds
	prev := rs.demand
	if rs.round != round-1 { // a round without a report: none to carry
		prev = nil
	}
	*rs = roundState{round: round, demand: make(map[string]int64, len(loads)), prev: prev}
	u := usageReport{Round: round, Buckets: make(map[string]bucketLoad, len(loads))}
	if prev != nil {
		u.PrevRound = round - 1
	}
	for _, l := range loads {
		rs.demand[l.Bucket] = l.Demand
		u.Buckets[l.Bucket] = bucketLoad{Demand: l.Demand, Usage: l.Usage, Prev: rs.prev[l.Bucket]}
	}
	mem, _ := json.Marshal(memberInfo{Address: c.opts.Address, Heartbeat: now})
	use, _ := json.Marshal(u)
	r := report{now: now, member: mem, usage: use}
	select {
	case <-c.pub:
	default:
	}
	c.pub <- r
}

// Status returns what the last Tick saw and computed.
func (c *Cluster) Status() ClusterStatus {
	c.tickMu.Lock()
	defer c.tickMu.Unlock()
	return c.status
}

// publishLoop sends reports to etcd until ctx ends.
func (c *Cluster) publishLoop(ctx context.Context) {
	defer c.wg.Done()
	for {
		select {
		case <-ctx.Done():
			return
		case r := <-c.pub:
			if err := c.publish(ctx, r); err == nil {
				c.lastAnswer.Store(r.now.UnixNano())
			}
		}
	}
}

// publish renews (or grants) the node's lease and writes its member and
// usage keys under it.
func (c *Cluster) publish(ctx context.Context, r report) error {
	ctx, cancel := context.WithTimeout(ctx, c.opts.RequestTimeout)
	defer cancel()
	if err := c.renewLease(ctx); err != nil {
		return err
	}
	lease := clientv3.WithLease(c.lease)
	life := strconv.FormatUint(c.life.Load(), 16)
	resp, err := c.cli.Txn(ctx).If(clientv3.Compare(clientv3.Value(c.keys.life()), "=", life)).Then(
		clientv3.OpPut(c.keys.member(c.opts.NodeName), string(r.member), lease),
		clientv3.OpPut(c.keys.usage(c.opts.NodeName), string(r.usage), lease),
	).Commit()
	if err == nil && !resp.Succeeded { // etcd lost its data, or was replaced: the watch catches up first
		select {
		case c.newLife <- struct{}{}:
		default:
		}
	}
	return err
}

// renewLease keeps the node's lease alive, or grants one when it has none
// or it expired (during an outage, or while claimName waited).
func (c *Cluster) renewLease(ctx context.Context) error {
	if c.lease != 0 {
		_, err := c.cli.KeepAliveOnce(ctx, c.lease)
		if errors.Is(err, rpctypes.ErrLeaseNotFound) {
			c.lease = 0 // expired: take a new one
		} else if err != nil {
			return err
		}
	}
	if c.lease == 0 {
		g, err := c.cli.Grant(ctx, int64(c.opts.LeaseTTL/time.Second))
		if err != nil {
			return err
		}
		c.lease = g.ID
	}
	return nil
}

// quietZap is the etcd client's logger: kvd logs the link's transitions
// itself, once each, instead of the client's retry chatter.
func quietZap() *zap.Logger { return zap.NewNop() }

// liveNodes is the number of live members this node sees, itself included.
func (c *Cluster) liveNodes() int {
	c.viewMu.Lock()
	defer c.viewMu.Unlock()
	n := len(c.view.members)
	if _, ok := c.view.members[c.opts.NodeName]; !ok {
		n++
	}
	return n
}

// waitApplied waits, for at most the request timeout, until the watch has
// applied every change etcd holds under the cluster's prefix now.
func (c *Cluster) waitApplied(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, c.opts.RequestTimeout)
	defer cancel()
	resp, err := c.cli.Get(ctx, c.keys.root, clientv3.WithPrefix(), clientv3.WithKeysOnly(),
		clientv3.WithSort(clientv3.SortByModRevision, clientv3.SortDescend), clientv3.WithLimit(1))
	if err != nil {
		return fmt.Errorf("catalog: read etcd's revision: %w", err)
	}
	if len(resp.Kvs) == 0 {
		return nil
	}
	want := resp.Kvs[0].ModRevision
	for c.applied.Load() < want {
		if ctx.Err() != nil {
			return fmt.Errorf("catalog: the watch did not reach revision %d: %w", want, ctx.Err())
		}
		sleep(ctx, 5*time.Millisecond)
	}
	return nil
}
