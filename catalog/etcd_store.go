package catalog

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"kvd/tenant"
)

// This file writes the catalog to etcd: the key layout, the writes a
// run-time change makes (create, delete, settings, node, users), and the
// reconciliation of the config file with what etcd holds.

// keyspace is the key layout of one cluster, under /kvd/<cluster>/:
//
//	buckets/<name>    tenant.Settings JSON (Settings.MarshalJSON)
//	node              node defaults: nodeSettings JSON, capacity 0
//	capacity/<node>   one node's capacity, a decimal number
//	users             the users document, opaque to this package
//	file              fileRecord: the config-file values last applied
//	members/<node>    memberInfo JSON, under the node's lease
//	usage/<node>      usageReport JSON, under the node's lease
type keyspace struct{ root string }

func newKeyspace(cluster string) keyspace { return keyspace{root: "/kvd/" + cluster + "/"} }

func (k keyspace) bucketPrefix() string        { return k.root + "buckets/" }
func (k keyspace) bucket(name string) string   { return k.bucketPrefix() + name }
func (k keyspace) node() string                { return k.root + "node" }
func (k keyspace) capacityPrefix() string      { return k.root + "capacity/" }
func (k keyspace) capacity(node string) string { return k.capacityPrefix() + node }
func (k keyspace) users() string               { return k.root + "users" }
func (k keyspace) file() string                { return k.root + "file" }
func (k keyspace) memberPrefix() string        { return k.root + "members/" }
func (k keyspace) member(node string) string   { return k.memberPrefix() + node }
func (k keyspace) usagePrefix() string         { return k.root + "usage/" }
func (k keyspace) usage(node string) string    { return k.usagePrefix() + node }

// nodeSettings are capacity and the defaults of new buckets; in etcd the
// key node holds the defaults (capacity 0) and capacity/<node> each node's
// capacity.
type nodeSettings = tenant.NodeSettings

// ClusterFile is what the config file says about the cluster's catalog,
// with the file's modification time: reconcileFile lets the newer of a
// file edit and the cluster's state win.
type ClusterFile struct {
	Node    nodeSettings               // Capacity is this node's
	Buckets map[string]tenant.Settings // by name
	Users   json.RawMessage            // the users document; nil = none
	ModTime time.Time
}

// fileRecord is what the config files said, last time one was applied to
// the cluster (key "file"): by item, the value then applied.
type fileRecord struct {
	ModTime    time.Time                  `json:"mod_time"`
	Defaults   *nodeSettings              `json:"defaults,omitempty"`
	Capacities map[string]int64           `json:"capacities,omitempty"`
	Buckets    map[string]json.RawMessage `json:"buckets,omitempty"`
	Users      json.RawMessage            `json:"users,omitempty"`
}

// createBucket writes a new bucket; ErrClusterBucketExists if etcd has it.
func (c *Cluster) createBucket(ctx context.Context, name string, set tenant.Settings) error {
	raw, err := set.MarshalJSON()
	if err != nil {
		return err
	}
	key := c.keys.bucket(name)
	resp, err := c.txn(ctx, []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(key), "=", 0)},
		clientv3.OpPut(key, string(raw)))
	if err != nil {
		return fmt.Errorf("catalog: create bucket %q in etcd: %w", name, err)
	}
	if !resp.Succeeded {
		return fmt.Errorf("%w: %q", ErrClusterBucketExists, name)
	}
	return nil
}

// deleteBucket removes a bucket; ErrClusterNoBucket if etcd has none.
func (c *Cluster) deleteBucket(ctx context.Context, name string) error {
	ctx, cancel := context.WithTimeout(ctx, c.opts.RequestTimeout)
	defer cancel()
	resp, err := c.cli.Delete(ctx, c.keys.bucket(name))
	if err != nil {
		return fmt.Errorf("catalog: delete bucket %q in etcd: %w", name, err)
	}
	if resp.Deleted == 0 {
		return fmt.Errorf("%w: %q", ErrClusterNoBucket, name)
	}
	return nil
}

// setBucketSettings replaces an existing bucket's settings;
// ErrClusterNoBucket if etcd has no such bucket.
func (c *Cluster) setBucketSettings(ctx context.Context, name string, set tenant.Settings) error {
	raw, err := set.MarshalJSON()
	if err != nil {
		return err
	}
	key := c.keys.bucket(name)
	resp, err := c.txn(ctx, []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(key), ">", 0)},
		clientv3.OpPut(key, string(raw)))
	if err != nil {
		return fmt.Errorf("catalog: settings of bucket %q in etcd: %w", name, err)
	}
	if !resp.Succeeded {
		return fmt.Errorf("%w: %q", ErrClusterNoBucket, name)
	}
	return nil
}

// setNode writes the cluster's defaults of new buckets and this node's
// capacity, in one transaction.
func (c *Cluster) setNode(ctx context.Context, n nodeSettings) error {
	_, err := c.txn(ctx, nil, c.nodeOps(n)...)
	if err != nil {
		return fmt.Errorf("catalog: node settings in etcd: %w", err)
	}
	return nil
}

func (c *Cluster) nodeOps(n nodeSettings) []clientv3.Op {
	def := n
	def.Capacity = 0
	raw, _ := json.Marshal(def) // plain integers: cannot fail
	return []clientv3.Op{
		clientv3.OpPut(c.keys.node(), string(raw)),
		clientv3.OpPut(c.keys.capacity(c.opts.NodeName), fmt.Sprint(n.Capacity)),
	}
}

// txn runs If(cmps).Then(ops) within the request timeout.
func (c *Cluster) txn(ctx context.Context, cmps []clientv3.Cmp, ops ...clientv3.Op) (*clientv3.TxnResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, c.opts.RequestTimeout)
	defer cancel()
	return c.cli.Txn(ctx).If(cmps...).Then(ops...).Commit()
}

// reconcileAttempts bounds reconcileFile's retries when another node
// reconciles at the same moment.
const reconcileAttempts = 5

// reconcileFile meets the config file with etcd, item by item (each
// bucket, the node defaults, this node's capacity, the users document):
//
//   - an item no file ever applied is seeded if etcd lacks it, and left as
//     etcd has it otherwise (a cluster that already runs keeps its state);
//   - an item whose file value differs from the value last applied from a
//     file, in a file newer (ModTime) than that one, overwrites etcd: the
//     newer file edit wins over older run-time changes, and an old file on
//     a node that restarts does not revert the cluster;
//   - otherwise etcd keeps its value, so a run-time change wins over a
//     file value that did not change since. A bucket deleted at run time
//     stays deleted until its file entry changes.
//
// The file record and the writes go in one transaction that fails if
// another node changed the record meanwhile; then it starts again.
func (c *Cluster) reconcileFile(ctx context.Context, f ClusterFile) error {
	for range reconcileAttempts {
		done, err := c.reconcileOnce(ctx, f)
		if err != nil || done {
			return err
		}
	}
	return fmt.Errorf("%w after %d attempts", ErrClusterContended, reconcileAttempts)
}

func (c *Cluster) reconcileOnce(ctx context.Context, f ClusterFile) (bool, error) {
	state, err := c.readPrefix(ctx)
	if err != nil {
		return false, fmt.Errorf("catalog: read etcd for the config file: %w", err)
	}
	rec, rev := fileRecord{}, int64(0)
	if kv, ok := state.kvs[c.keys.file()]; ok {
		rev = kv.ModRevision
		if err := json.Unmarshal(kv.Value, &rec); err != nil {
			return false, fmt.Errorf("catalog: etcd key %s: %w", c.keys.file(), err)
		}
	}
	ops, next, err := c.fileOps(f, rec, state)
	if err != nil {
		return false, err
	}
	raw, err := json.Marshal(next)
	if err != nil {
		return false, err
	}
	if old, _ := json.Marshal(rec); len(ops) == 0 && rev != 0 && string(old) == string(raw) {
		return true, nil // nothing to write
	}
	ops = append(ops, clientv3.OpPut(c.keys.file(), string(raw)))
	resp, err := c.txn(ctx, []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(c.keys.file()), "=", rev)}, ops...)
	if err != nil {
		return false, fmt.Errorf("catalog: apply the config file to etcd: %w", err)
	}
	return resp.Succeeded, nil
}

// fileOps returns the writes that reconcile f with etcd's state and the
// file record that follows; no ops when nothing changes.
func (c *Cluster) fileOps(f ClusterFile, rec fileRecord, st prefixState) ([]clientv3.Op, fileRecord, error) {
	newer := f.ModTime.After(rec.ModTime)
	next := rec
	next.Buckets = maps.Clone(rec.Buckets)
	next.Capacities = maps.Clone(rec.Capacities)
	if next.Buckets == nil {
		next.Buckets = map[string]json.RawMessage{}
	}
	if next.Capacities == nil {
		next.Capacities = map[string]int64{}
	}
	take := func(applied, exists bool, same bool) bool {
		return (!applied && !exists) || (applied && !same && newer)
	}
	ops, err := c.fileBucketOps(f, rec, &next, st, newer, take)
	if err != nil {
		return nil, rec, err
	}
	def := f.Node
	def.Capacity = 0
	kv, exists := st.kvs[c.keys.node()]
	if take(rec.Defaults != nil, exists, rec.Defaults != nil && *rec.Defaults == def) {
		n := f.Node
		if rec.Defaults != nil && exists { // the file's edits over the cluster's defaults
			var cur nodeSettings
			if err := json.Unmarshal(kv.Value, &cur); err != nil {
				return nil, rec, fmt.Errorf("catalog: etcd key %s: %w", kv.Key, err)
			}
			n = fileEdits(cur, *rec.Defaults, def) // nodeOps(n)[0] writes the defaults alone
		}
		ops = append(ops, c.nodeOps(n)[0])
	}
	if rec.Defaults == nil || newer {
		next.Defaults = &def
	}
	ops = c.capacityOp(ops, f, rec, &next, st, newer, take)
	if f.Users != nil {
		_, exists := st.kvs[c.keys.users()]
		if take(rec.Users != nil, exists, string(rec.Users) == string(f.Users)) {
			ops = append(ops, clientv3.OpPut(c.keys.users(), string(f.Users)))
		}
		if rec.Users == nil || newer {
			next.Users = f.Users
		}
	}
	if newer {
		next.ModTime = f.ModTime
	}
	return ops, next, nil
}

func (c *Cluster) fileBucketOps(f ClusterFile, rec fileRecord, next *fileRecord, st prefixState, newer bool,
	take func(applied, exists, same bool) bool) ([]clientv3.Op, error) {
	var ops []clientv3.Op
	for name, set := range f.Buckets {
		raw, err := set.MarshalJSON()
		if err != nil {
			return nil, err
		}
		prev, applied := rec.Buckets[name]
		kv, exists := st.kvs[c.keys.bucket(name)]
		if take(applied, exists, string(prev) == string(raw)) {
			put := raw
			if applied && exists { // the file's edits over the cluster's settings
				cur, err := tenant.ParseSettings(kv.Value, tenant.Settings{})
				if err != nil {
					return nil, fmt.Errorf("catalog: etcd key %s: %w", kv.Key, err)
				}
				merged, err := mergeFileSettings(cur, prev, set)
				if err != nil {
					return nil, fmt.Errorf("bucket %q: %w", name, err)
				}
				if put, err = merged.MarshalJSON(); err != nil {
					return nil, err
				}
			}
			ops = append(ops, clientv3.OpPut(c.keys.bucket(name), string(put)))
		}
		if !applied || newer {
			next.Buckets[name] = raw
		}
	}
	return ops, nil
}

func (c *Cluster) capacityOp(ops []clientv3.Op, f ClusterFile, rec fileRecord, next *fileRecord,
	st prefixState, newer bool, take func(applied, exists, same bool) bool) []clientv3.Op {
	self := c.opts.NodeName
	prev, applied := rec.Capacities[self]
	_, exists := st.kvs[c.keys.capacity(self)]
	if take(applied, exists, prev == f.Node.Capacity) {
		ops = append(ops, c.nodeOps(f.Node)[1])
	}
	if !applied || newer {
		next.Capacities[self] = f.Node.Capacity
	}
	return ops
}

// bucketName returns the bucket a buckets/ key names.
func (k keyspace) bucketName(key string) (string, bool) {
	return strings.CutPrefix(key, k.bucketPrefix())
}
