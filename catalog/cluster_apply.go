package catalog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"

	"kvd/engine"
	"kvd/tenant"
)

// This file is the Catalog's side of cluster mode: joining (catch-up, and
// seeding etcd with the local buckets at the first join), the applier that
// the watch calls with etcd's changes, the config file in a cluster, and
// the limits a bucket's gauge enforces on this node.

// memberMetaKey marks, in the engine's metadata, that this node has joined
// the named cluster before: from then on etcd wins over the local buckets.
// Its value is the cluster's name, then "#" and the life of the etcd it
// followed in hex (the token under the key life, see keyspace). Markers
// written before lives have "@" and etcd's cluster ID instead, or the name
// alone.
const memberMetaKey = "cluster_member"

// memberMarker is memberMetaKey's value for cluster on the etcd life.
func memberMarker(cluster string, life uint64) []byte {
	return []byte(cluster + "#" + strconv.FormatUint(life, 16))
}

// parseMemberMarker splits a memberMetaKey value: the etcd life it
// records, or (legacy) the etcd cluster ID; both 0 when it has neither.
func parseMemberMarker(raw []byte) (cluster string, life, legacyID uint64) {
	if name, hex, ok := strings.Cut(string(raw), "#"); ok {
		life, _ = strconv.ParseUint(hex, 16, 64)
		return name, life, 0
	}
	name, hex, _ := strings.Cut(string(raw), "@")
	legacyID, _ = strconv.ParseUint(hex, 16, 64)
	return name, 0, legacyID
}

// followEtcd implements applier. A node that was a member of the cluster
// in another life of etcd (etcd lost its data and was rebuilt, was
// replaced, or was restored from a backup) is treated as joining for the
// first time: its buckets are seeded into this etcd instead of being
// deleted because it lacks them.
func (c *Catalog) followEtcd(life, clusterID uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	same := life == c.life || (c.life == 0 && (c.legacyID == 0 || c.legacyID == clusterID))
	if c.member && !same {
		c.log.Warn("cluster: etcd is not the etcd this node followed (its data was lost, or it was replaced or restored): this node's buckets are seeded into it, not deleted",
			"etcd_life", strconv.FormatUint(life, 16), "followed", strconv.FormatUint(c.life, 16))
		c.member = false
	}
	if life != c.life {
		clear(c.incs) // incarnations are revisions of the etcd life they were read from
		c.life, c.marked = life, false
	}
}

// seedCluster implements applier: after a catch-up, a node that is not
// (or no longer) a member of this etcd life seeds etcd with the buckets
// only it has, then records itself a member.
func (c *Catalog) seedCluster(cl *Cluster) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.member && c.marked {
		return nil
	}
	for _, name := range c.toSeed {
		if b, ok := c.Get(name); ok {
			if err := cl.createBucket(context.Background(), name, b.Settings()); err != nil &&
				!errors.Is(err, ErrClusterBucketExists) {
				return err
			}
			c.log.Info("bucket seeded into the cluster", "bucket", name)
		}
	}
	c.toSeed = nil
	if err := c.db.PutMeta(memberMetaKey, memberMarker(cl.opts.Cluster, c.life)); err != nil {
		return err
	}
	c.member, c.marked = true, true
	if c.cl.Load() == nil {
		return nil // the join: it applies the limits once the link is stored, and the server the file
	}
	c.reapplyLimitsLocked()
	// A new etcd life lacks the node defaults, capacities, users and the
	// files' records: this node's file seeds what it names (the changes
	// come back through the watch, which is the caller: no waiting here).
	if f := c.file.Load(); f != nil {
		if err := cl.ReconcileFile(c.clusterFile(f)); err != nil {
			c.fileOwed.Store(true)
			return fmt.Errorf("the config file into the new etcd (tried again at every tick): %w", err)
		}
	}
	return nil
}

// reseedFile is TickCluster's retry of what seedCluster owes: the config
// file written into a new etcd life. It runs on its own goroutine, one at a
// time; a file applied meanwhile (applyFileToCluster) pays the debt too.
func (c *Catalog) reseedFile(cl *Cluster) {
	defer c.reseeding.Store(false)
	f := c.file.Load()
	if f == nil || !c.fileOwed.Load() {
		return
	}
	if err := cl.ReconcileFile(c.clusterFile(f)); err != nil {
		c.log.Error("cluster: the config file into the new etcd, tried again", "err", err)
		return
	}
	c.fileOwed.Store(false)
	c.log.Info("cluster: the config file is written into the new etcd")
}

// clusterWho names changes that came from etcd in the log.
const clusterWho = "cluster"

// UserSpec is one user as the config file states it, and as the users
// document in etcd holds it (a JSON array of these).
type UserSpec struct {
	Name         string   `json:"name"`
	Password     string   `json:"password,omitempty"` // plain, for development
	PasswordHash string   `json:"password_hash,omitempty"`
	Buckets      []string `json:"buckets,omitempty"`
	Privileges   []string `json:"privileges,omitempty"`
}

// join opens the link to the cluster: catch-up (through the applier), then
// the first join's seeding of etcd with the buckets only this node has,
// then the limits of every bucket as this node's static share.
func (c *Catalog) join(now time.Time, o ClusterOptions) error {
	if now.IsZero() {
		return fmt.Errorf("%w: Options.Now is required", ErrClusterOptions)
	}
	raw, err := c.db.Meta(memberMetaKey)
	if err != nil && !errors.Is(err, engine.ErrNotFound) {
		return err
	}
	o.EnsureDefaults()
	c.mu.Lock()
	name, life, legacyID := parseMemberMarker(raw)
	c.member = err == nil && name == o.Cluster
	c.life, c.legacyID, c.marked = life, legacyID, life != 0
	c.legacyMember.Store(c.member && life == 0) // joined before life tokens and per-node file records
	c.mu.Unlock()
	cl, err := openCluster(now, o, c) // its catch-up seeds etcd (seedCluster)
	if err != nil {
		return err
	}
	c.cl.Store(cl)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reapplyLimitsLocked()
	return nil
}

// engineErr maps etcd's answers to the engine's errors, which the server
// already turns into statuses.
func engineErr(err error) error {
	switch {
	case errors.Is(err, ErrClusterBucketExists):
		return fmt.Errorf("%w: %w", engine.ErrBucketExists, err)
	case errors.Is(err, ErrClusterNoBucket):
		return fmt.Errorf("%w: %w", engine.ErrBucketNotFound, err)
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%w (etcd did not answer in time: while it is unreachable the cluster's catalog cannot change)", err)
	}
	return err
}

// applyBucketLocked makes the local bucket name exist with set: created,
// changed, or left as it is when it already has set (a change this node
// made, coming back through the watch).
func (c *Catalog) applyBucketLocked(name string, set tenant.Settings, who string) (*Bucket, error) {
	b, ok := c.Get(name)
	if !ok {
		return c.createLocked(name, set, who)
	}
	if reflect.DeepEqual(b.Settings(), set) {
		return b, nil
	}
	return b, c.setBucketLocked(b, set, who)
}

// removeLocked deletes the local bucket; one already gone is no error.
func (c *Catalog) removeLocked(name, who string) error {
	if err := c.deleteLocked(name, who); err != nil && !errors.Is(err, engine.ErrBucketNotFound) {
		return err
	}
	return c.forgetIncarnationLocked(name)
}

// applyClusterBucket implements applier.
func (c *Catalog) applyClusterBucket(name string, cb clusterBucket) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.applyIncarnationLocked(name, cb)
}

// applyIncarnationLocked makes bucket name follow cb. If the local bucket
// is an earlier incarnation (the bucket was deleted and created again in
// the cluster while this node was not watching), its data goes first: the
// name now means a new, empty bucket. The incarnation this node follows is
// persisted per bucket; a bucket without one (created before it was
// recorded) takes cb's and keeps its data.
func (c *Catalog) applyIncarnationLocked(name string, cb clusterBucket) error {
	have, err := c.incarnationLocked(name)
	if err != nil {
		return err
	}
	if _, ok := c.Get(name); ok && have != 0 && cb.inc != 0 && have != cb.inc {
		c.log.Info("bucket re-created in the cluster while this node was away: its old data goes",
			"bucket", name, "old_incarnation", have, "incarnation", cb.inc)
		if err := c.removeLocked(name, clusterWho); err != nil {
			return err
		}
	}
	if _, err := c.applyBucketLocked(name, cb.set, clusterWho); err != nil {
		return err
	}
	if cb.inc == 0 || cb.inc == have {
		return nil
	}
	if err := c.db.PutMeta(incMetaPrefix+name, fmt.Appendf(nil, "%x:%d", c.life, cb.inc)); err != nil {
		return err
	}
	c.incs[name] = cb.inc
	return nil
}

// incMetaPrefix + a bucket's name is the engine meta key of the cluster
// incarnation this node follows for it (applyIncarnationLocked), stored as
// "<etcd life in hex>:<revision>".
const incMetaPrefix = "cluster_incarnation/"

// incarnationLocked returns the incarnation recorded for bucket name (0:
// none, or one of another etcd).
func (c *Catalog) incarnationLocked(name string) (int64, error) {
	if v, ok := c.incs[name]; ok {
		return v, nil
	}
	key := incMetaPrefix + name
	raw, err := c.db.Meta(key)
	if errors.Is(err, engine.ErrNotFound) || (err == nil && len(raw) == 0) {
		c.incs[name] = 0
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	etcd, rev, _ := strings.Cut(string(raw), ":")
	v, err := strconv.ParseInt(rev, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("catalog: meta %s: %q", key, raw)
	}
	if etcd != strconv.FormatUint(c.life, 16) {
		v = 0 // a revision of another etcd life says nothing about this one's
	}
	c.incs[name] = v
	return v, nil
}

// removeClusterBucket implements applier.
func (c *Catalog) removeClusterBucket(name string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.Get(name); !ok {
		return nil
	}
	return c.removeLocked(name, clusterWho)
}

// forgetIncarnationLocked drops the incarnation recorded for a bucket that
// is gone here (a later bucket of that name starts afresh).
func (c *Catalog) forgetIncarnationLocked(name string) error {
	if v, ok := c.incs[name]; ok && v == 0 {
		return nil
	}
	c.incs[name] = 0
	return c.db.PutMeta(incMetaPrefix+name, nil)
}

// syncClusterBuckets implements applier: every bucket etcd has exists
// here with its settings; a local bucket etcd lacks is deleted if this
// node was a member already (it was deleted while the node was away), and
// kept to be seeded into etcd at the first join.
func (c *Catalog) syncClusterBuckets(all map[string]clusterBucket) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var errs []error
	for name, cb := range all {
		if err := c.applyIncarnationLocked(name, cb); err != nil {
			errs = append(errs, fmt.Errorf("bucket %q: %w", name, err))
		}
	}
	for _, b := range c.All() {
		if _, ok := all[b.name]; ok {
			continue
		}
		if c.member {
			errs = append(errs, c.removeLocked(b.name, clusterWho))
			continue
		}
		c.toSeed = append(c.toSeed, b.name)
	}
	return errors.Join(errs...)
}

// applyClusterNode implements applier: the defaults of new buckets, and
// this node's capacity when etcd holds one for it.
func (c *Catalog) applyClusterNode(n nodeSettings, haveCapacity bool) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !haveCapacity {
		n.Capacity = c.throttle.Capacity()
	}
	if n == c.Node() {
		return nil
	}
	return c.setNodeLocked(n, clusterWho)
}

// applyClusterUsers implements applier: the users document replaces the
// node's users (through the Observer).
func (c *Catalog) applyClusterUsers(doc []byte) error {
	var users []UserSpec
	if err := json.Unmarshal(doc, &users); err != nil {
		return fmt.Errorf("catalog: users document in etcd: %w", err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.obs.UsersChanged(users); err != nil {
		return fmt.Errorf("catalog: users from etcd: %w", err)
	}
	c.log.Info("users changed", "by", clusterWho, "users", len(users))
	return nil
}

// applyFileToCluster is ApplyFile in a cluster: the file meets etcd
// (reconcileFile), then the call waits until the watch has applied what
// etcd holds, so that the buckets the file seeded exist here on return.
func (c *Catalog) applyFileToCluster(cl *Cluster, f File) error {
	c.file.Store(&f)
	if err := cl.ReconcileFile(c.clusterFile(&f)); err != nil {
		return err
	}
	c.fileOwed.Store(false)
	return cl.waitApplied(context.Background())
}

// clusterFile is f as reconcileFile takes it.
func (c *Catalog) clusterFile(f *File) ClusterFile {
	cf := ClusterFile{Node: f.Node, Buckets: make(map[string]tenant.Settings, len(f.Buckets)), Users: f.Users,
		Legacy: c.legacyMember.Load(), ModTime: f.ModTime}
	for _, b := range f.Buckets {
		cf.Buckets[b.Name] = b.Settings
	}
	return cf
}

// localLimits are the reserved and hard limit this node's gauge enforces
// for a bucket with settings set: the settings themselves on a single
// node; in a cluster, until TickCluster computes the demand-based share,
// the static share (total ÷ live nodes), so that no change ever lets one
// node admit the whole cluster's limit.
func (c *Catalog) localLimits(set tenant.Settings) (reserved, hard int64) {
	cl := c.cl.Load()
	if cl == nil {
		return set.Reserved, set.HardLimit
	}
	n := cl.liveNodes()
	reserved, hard = staticShare(set.Reserved, n), staticShare(set.HardLimit, n)
	if hard != tenant.Unlimited && reserved != tenant.Unlimited {
		reserved = min(reserved, hard)
	}
	return reserved, hard
}

// reapplyLimitsLocked sets every bucket's gauge to localLimits.
func (c *Catalog) reapplyLimitsLocked() {
	for _, b := range c.All() {
		r, h := c.localLimits(b.Settings())
		c.throttle.SetLimits(b.thr, r, h)
	}
}

// clusterTicker is TickCluster's memory between ticks: each bucket's
// counters at the last tick, to turn them into last-second figures.
type clusterTicker struct {
	last  map[*Bucket]tickCounts
	loads []Load
	bs    []*Bucket
}

type tickCounts struct {
	units, refused int64
	lastRefused    int // ticks since the bucket was last refused units
}

// refusedMemory is how many ticks a bucket refused units keeps wanting all
// it can get: a node whose clients lag for a second does not give its
// share away at once, which would swing the split from tick to tick (and
// nodes tick up to a second apart, so a swinging split overshoots).
const refusedMemory = 3

// wantAll is the demand of a bucket that was refused units: as much as it
// can get (far above any limit, far below overflow).
const wantAll = int64(1) << 50

// demandOf is a bucket's demand on this node from its last second. One
// that was refused units in the last refusedMemory ticks wants at least
// twice what it used, and at least a quarter of its even share more
// (refusals count a parked connection once per tick, so usage plus
// refusals would understate the wish of a throttled node): a node held
// down by the limit doubles its claim each tick until the split is
// max-min fair, an idle node whose clients wake up claims a quarter of its
// even share at once, and a light node refused by a moment's jitter asks
// for room, not for everything. (It once asked for everything for 3 s:
// beside a node refused all the time the split went even, and a light
// node at 300 units/s took 1,500 of 3,000 it did not use: the cluster
// delivered 80% of the limit over 10 s.) With no hard limit a refused
// node wants all it can get of the reservation. Any other wants what it
// used plus room to grow into before it is refused: a quarter more, but
// no more than 1/32 of the hard limit split among the nodes. That room is
// a part of the hard limit that nobody uses while other nodes are refused,
// so it is kept small: with a quarter, one node held to 750 units/s beside
// two refused ones left 2,812 of 3,000 delivered (-6%); now about 2,969.
// Like the free-pool demand of package tenant, but across nodes.
func demandOf(usage int64, refused bool, hard int64, nodes int) int64 {
	n := int64(max(nodes, 1))
	switch {
	case refused && hard == tenant.Unlimited:
		return wantAll
	case refused:
		return max(2*usage, usage+hard/(4*n))
	case hard == tenant.Unlimited:
		return usage + usage/4
	}
	return usage + min(usage/4, hard/(32*n))
}

// TickCluster is the cluster's part of a throttle tick (a no-op on a
// single node): it hands every bucket's cluster totals and its demand and
// usage since the last call to Cluster.Tick, and sets each bucket's gauge
// to the share Tick returns. Call it from one goroutine, about once a
// second (the server's housekeeping, after a throttle tick); it never
// blocks on etcd.
func (c *Catalog) TickCluster(now time.Time) {
	cl := c.cl.Load()
	if cl == nil {
		return
	}
	if c.fileOwed.Load() && c.reseeding.CompareAndSwap(false, true) {
		go c.reseedFile(cl)
	}
	t := &c.ticker
	if t.last == nil {
		t.last = map[*Bucket]tickCounts{}
	}
	t.loads, t.bs = t.loads[:0], t.bs[:0]
	seen := make(map[*Bucket]tickCounts, len(t.last))
	nodes := cl.liveNodes()
	for _, b := range c.All() {
		st := b.thr.Stats()
		cur := tickCounts{units: st.RU + st.WU, refused: st.Refused}
		prev, ok := t.last[b]
		if !ok {
			prev = cur
			prev.lastRefused = refusedMemory
		}
		cur.lastRefused = prev.lastRefused + 1
		if cur.refused > prev.refused {
			cur.lastRefused = 0
		}
		seen[b] = cur
		set := b.Settings()
		usage := cur.units - prev.units
		t.loads = append(t.loads, Load{Bucket: b.name, Reserved: set.Reserved, HardLimit: set.HardLimit,
			Usage: usage, Demand: demandOf(usage, cur.lastRefused < refusedMemory, set.HardLimit, nodes)})
		t.bs = append(t.bs, b)
	}
	t.last = seen
	shares := cl.Tick(now, t.loads)
	for i, s := range shares {
		if b := t.bs[i]; !b.Deleted() {
			c.throttle.SetLimits(b.thr, s.Reserved, s.HardLimit)
		}
	}
}
