package catalog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"kvd/tenant"
)

// This file follows etcd: the catch-up read of the whole prefix, the watch
// from the revision read, and the translation of keys into applier calls
// and into the view of members and their usage reports.

// watchRetry is the pause before a failed watch or read is tried again.
const watchRetry = 500 * time.Millisecond

// clusterView is what the other nodes published: live members and their
// last usage reports. Keys vanish with the publisher's lease.
type clusterView struct {
	members map[string]memberInfo
	usage   map[string]usageReport
	// carried are members a catch-up found missing from etcd that the
	// view before it had, kept in members until the deadline (zero: one
	// lease TTL from the next snapshot) unless their key comes back: a
	// wiped etcd has none of the running nodes' keys until each writes
	// its own again, and a node that saw only itself would take a
	// bucket's whole limit (a cluster audit: 900 units/s against 300).
	carried map[string]time.Time
}

func newClusterView() clusterView {
	return clusterView{members: map[string]memberInfo{}, usage: map[string]usageReport{}, carried: map[string]time.Time{}}
}

// prefixState is the whole prefix at one revision.
type prefixState struct {
	rev int64
	id  uint64 // etcd's cluster ID
	kvs map[string]*mvccpb.KeyValue
}

// readPrefix reads every key of the cluster.
func (c *Cluster) readPrefix(ctx context.Context) (prefixState, error) {
	ctx, cancel := context.WithTimeout(ctx, c.opts.RequestTimeout)
	defer cancel()
	resp, err := c.cli.Get(ctx, c.keys.root, clientv3.WithPrefix())
	if err != nil {
		return prefixState{}, err
	}
	st := prefixState{rev: resp.Header.Revision, id: resp.Header.ClusterId, kvs: make(map[string]*mvccpb.KeyValue, len(resp.Kvs))}
	for _, kv := range resp.Kvs {
		st.kvs[string(kv.Key)] = kv
	}
	return st, nil
}

// catchUp reads the whole prefix, hands every bucket to
// syncClusterBuckets and the node settings and users to the applier, and
// rebuilds the view. It returns the revision it read.
func (c *Cluster) catchUp(ctx context.Context) (int64, error) {
	st, err := c.readPrefix(ctx)
	if err != nil {
		return 0, err
	}
	life, err := c.ensureLife(ctx, st)
	if err != nil {
		return 0, err
	}
	buckets := map[string]clusterBucket{}
	c.viewMu.Lock()
	old := c.view
	c.view = newClusterView()
	c.viewMu.Unlock()
	defer c.carryMembers(old)
	var errs []error
	for key, kv := range st.kvs {
		if name, ok := c.keys.bucketName(key); ok {
			set, err := parseBucket(name, kv.Value)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			buckets[name] = clusterBucket{set, kv.CreateRevision}
			continue
		}
		if key == c.keys.node() || key == c.keys.capacity(c.opts.NodeName) {
			continue // applied once below
		}
		errs = append(errs, c.applyKey(key, kv, false))
	}
	c.apply.followEtcd(life, st.id)
	errs = append(errs, c.apply.syncClusterBuckets(buckets), c.applyNodeFrom(st.kvs))
	c.applied.Store(st.rev)
	return st.rev, errors.Join(errs...)
}

// carryMembers keeps in the view the members of old that the catch-up did
// not find (see clusterView.carried), their reports left out: a member
// whose demand is unknown counts as wanting all it may have.
func (c *Cluster) carryMembers(old clusterView) {
	c.viewMu.Lock()
	defer c.viewMu.Unlock()
	for name, m := range old.members {
		if _, ok := c.view.members[name]; ok || name == c.opts.NodeName {
			continue
		}
		c.view.members[name] = m
		c.view.carried[name] = old.carried[name] // zero for a member not carried before
	}
}

// applyNodeFrom applies the node defaults and this node's capacity as kvs
// hold them.
func (c *Cluster) applyNodeFrom(kvs map[string]*mvccpb.KeyValue) error {
	def, okDef := kvs[c.keys.node()]
	capKV, okCap := kvs[c.keys.capacity(c.opts.NodeName)]
	if !okDef && !okCap {
		return nil
	}
	var n nodeSettings
	if okDef {
		if err := json.Unmarshal(def.Value, &n); err != nil {
			return fmt.Errorf("catalog: etcd key %s: %w", c.keys.node(), err)
		}
	}
	if okCap {
		v, err := strconv.ParseInt(string(capKV.Value), 10, 64)
		if err != nil || v <= 0 {
			return fmt.Errorf("catalog: etcd key %s: capacity %q", c.keys.capacity(c.opts.NodeName), capKV.Value)
		}
		n.Capacity = v
	}
	return c.apply.applyClusterNode(n, okCap)
}

// parseBucket decodes a buckets/<name> value.
func parseBucket(name string, raw []byte) (tenant.Settings, error) {
	if err := tenant.ValidBucketName(name); err != nil {
		return tenant.Settings{}, fmt.Errorf("catalog: etcd bucket key: %w", err)
	}
	set, err := tenant.ParseSettings(raw, tenant.Settings{})
	if err != nil {
		return set, fmt.Errorf("catalog: etcd settings of bucket %q: %w", name, err)
	}
	return set, nil
}

// applyKey applies one key's new value (or its deletion) to the applier
// or to the view. Keys this node does not follow (another node's
// capacity, the file record) are ignored.
func (c *Cluster) applyKey(key string, kv *mvccpb.KeyValue, deleted bool) error {
	value := kv.Value
	if name, ok := c.keys.bucketName(key); ok {
		if deleted {
			return c.apply.removeClusterBucket(name)
		}
		set, err := parseBucket(name, value)
		if err != nil {
			return err
		}
		return c.apply.applyClusterBucket(name, clusterBucket{set, kv.CreateRevision})
	}
	if name, ok := strings.CutPrefix(key, c.keys.memberPrefix()); ok {
		return c.updateView(func(v *clusterView) error {
			delete(v.carried, name) // its own key now says whether it lives
			return setOrDelete(v.members, name, value, deleted)
		})
	}
	if name, ok := strings.CutPrefix(key, c.keys.usagePrefix()); ok {
		return c.updateView(func(v *clusterView) error { return setOrDelete(v.usage, name, value, deleted) })
	}
	if key == c.keys.users() && !deleted {
		return c.apply.applyClusterUsers(value)
	}
	return nil
}

func (c *Cluster) updateView(f func(v *clusterView) error) error {
	c.viewMu.Lock()
	defer c.viewMu.Unlock()
	return f(&c.view)
}

func setOrDelete[V any](m map[string]V, name string, value []byte, deleted bool) error {
	if deleted {
		delete(m, name)
		return nil
	}
	var v V
	if err := json.Unmarshal(value, &v); err != nil {
		return fmt.Errorf("catalog: etcd value of %q: %w", name, err)
	}
	m[name] = v
	return nil
}

// watchLoop follows etcd from rev+1 until ctx ends: it re-watches from the
// next revision after an error, and reads everything again when that
// revision was compacted.
func (c *Cluster) watchLoop(ctx context.Context, rev int64) {
	defer c.wg.Done()
	next := rev + 1
	for ctx.Err() == nil {
		var err error
		next, err = c.watchFrom(ctx, next)
		if errors.Is(err, errCompacted) {
			c.log.Warn("cluster: watch fell behind a compaction; reading the whole catalog again")
			next = c.catchUpUntilDone(ctx) + 1
			continue
		}
		if errors.Is(err, errNewLife) {
			c.log.Warn("cluster: etcd's life token changed or vanished (etcd lost its data, or was replaced or restored); reading the whole catalog again")
			next = c.catchUpUntilDone(ctx) + 1
			continue
		}
		if err != nil && ctx.Err() == nil {
			c.log.Warn("cluster: etcd watch failed; watching again", "err", err)
			sleep(ctx, watchRetry)
		}
	}
}

// catchUpUntilDone retries catchUp until it reads, or ctx ends, then
// seeds etcd if this node is new to its life.
func (c *Cluster) catchUpUntilDone(ctx context.Context) int64 {
	for {
		rev, err := c.catchUp(ctx)
		if rev != 0 || ctx.Err() != nil {
			if rev != 0 {
				err = errors.Join(err, c.apply.seedCluster(c))
			}
			if err != nil {
				c.log.Error("cluster: applying the catalog read from etcd", "err", err)
			}
			return rev
		}
		sleep(ctx, watchRetry)
	}
}

// watchFrom applies events from revision from on, and returns the next
// revision to watch from when the watch ends.
func (c *Cluster) watchFrom(ctx context.Context, from int64) (int64, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wch := c.cli.Watch(clientv3.WithRequireLeader(ctx), c.keys.root, clientv3.WithPrefix(), clientv3.WithRev(from))
	for {
		var resp clientv3.WatchResponse
		var ok bool
		select {
		case resp, ok = <-wch:
		case <-c.newLife: // the watch of a lost etcd would wait for revisions the new one may never reach
			return from, errNewLife
		}
		if !ok {
			break
		}
		if resp.CompactRevision != 0 {
			return from, errCompacted
		}
		if err := resp.Err(); err != nil {
			return from, err
		}
		for _, ev := range resp.Events {
			key := string(ev.Kv.Key)
			if key == c.keys.node() || key == c.keys.capacity(c.opts.NodeName) {
				if err := c.reapplyNode(ctx); err != nil {
					c.log.Error("cluster: node settings from etcd", "err", err)
				}
				continue
			}
			if err := c.applyKey(key, ev.Kv, ev.Type == mvccpb.DELETE); err != nil {
				c.log.Error("cluster: change from etcd", "key", key, "err", err)
			}
		}
		from = resp.Header.Revision + 1
		c.applied.Store(resp.Header.Revision)
	}
	if ctx.Err() == nil {
		return from, errWatchClosed
	}
	return from, ctx.Err()
}

// ensureLife returns the life token of the etcd st was read from, creating
// it if etcd has none (a new cluster, or an etcd that lost its data).
func (c *Cluster) ensureLife(ctx context.Context, st prefixState) (uint64, error) {
	key := c.keys.life()
	var raw string
	if kv := st.kvs[key]; kv != nil {
		raw = string(kv.Value)
	} else {
		raw = strconv.FormatUint(rand.Uint64()|1, 16)
		ctx, cancel := context.WithTimeout(ctx, c.opts.RequestTimeout)
		resp, err := c.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
			Then(clientv3.OpPut(key, raw)).Else(clientv3.OpGet(key)).Commit()
		cancel()
		if err != nil {
			return 0, fmt.Errorf("catalog: create etcd's life token: %w", err)
		}
		if !resp.Succeeded { // another node made it first
			kvs := resp.Responses[0].GetResponseRange().GetKvs()
			if len(kvs) == 0 {
				return 0, fmt.Errorf("catalog: etcd key %s vanished while it was created", key)
			}
			raw = string(kvs[0].Value)
		}
	}
	life, err := strconv.ParseUint(raw, 16, 64)
	if err != nil || life == 0 {
		return 0, fmt.Errorf("catalog: etcd key %s: %q is not a life token", key, raw)
	}
	c.life.Store(life)
	return life, nil
}

// reapplyNode reads the node defaults and this node's capacity together
// and applies them.
func (c *Cluster) reapplyNode(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, c.opts.RequestTimeout)
	defer cancel()
	resp, err := c.cli.Txn(ctx).Then(clientv3.OpGet(c.keys.node()),
		clientv3.OpGet(c.keys.capacity(c.opts.NodeName))).Commit()
	if err != nil {
		return err
	}
	kvs := map[string]*mvccpb.KeyValue{}
	for _, r := range resp.Responses {
		for _, kv := range r.GetResponseRange().Kvs {
			kvs[string(kv.Key)] = kv
		}
	}
	return c.applyNodeFrom(kvs)
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
