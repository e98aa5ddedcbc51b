package catalog

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
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
//	users             the users document: []UserSpec JSON
//	files/<node>      fileRecord: what the node's config file said when it last applied it
//	file_last         lastWrites: the value each item was last written with from a file
//	file              legacyFileRecord: the one record of every node's file, before files/
//	life              a random token (hex), created with the first catalog in
//	                  this etcd: a node that finds another, or none, knows
//	                  etcd lost its data, or was replaced or restored
//	members/<node>    memberInfo JSON, under the node's lease
//	usage/<node>      usageReport JSON, under the node's lease
type keyspace struct{ root string }

func newKeyspace(cluster string) keyspace { return keyspace{root: "/kvd/" + cluster + "/"} }

func (k keyspace) bucketPrefix() string          { return k.root + "buckets/" }
func (k keyspace) bucket(name string) string     { return k.bucketPrefix() + name }
func (k keyspace) node() string                  { return k.root + "node" }
func (k keyspace) capacityPrefix() string        { return k.root + "capacity/" }
func (k keyspace) capacity(node string) string   { return k.capacityPrefix() + node }
func (k keyspace) users() string                 { return k.root + "users" }
func (k keyspace) life() string                  { return k.root + "life" }
func (k keyspace) legacyFile() string            { return k.root + "file" }
func (k keyspace) fileRecordPrefix() string      { return k.root + "files/" }
func (k keyspace) fileRecord(node string) string { return k.fileRecordPrefix() + node }
func (k keyspace) fileLast() string              { return k.root + "file_last" }
func (k keyspace) memberPrefix() string          { return k.root + "members/" }
func (k keyspace) member(node string) string     { return k.memberPrefix() + node }
func (k keyspace) usagePrefix() string           { return k.root + "usage/" }
func (k keyspace) usage(node string) string      { return k.usagePrefix() + node }

// nodeSettings are capacity and the defaults of new buckets; in etcd the
// key node holds the defaults (capacity 0) and capacity/<node> each node's
// capacity.
type nodeSettings = tenant.NodeSettings

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

// reconcileAttempts bounds reconcileFile's retries when other nodes
// reconcile at the same moment (every node does after an etcd wipe); a
// retry waits a random 10–50 ms times the attempts so far.
const reconcileAttempts = 8

// reconcileFile meets this node's config file with etcd, item by item
// (each bucket, the node defaults, this node's capacity, each user): an
// item whose value differs from what this node's file said when it last
// applied it is an edit and overwrites etcd (the fields it changed only);
// an item the node's file never named is seeded if etcd lacks it; a value
// that did not change, or the one the item was last written with from any
// node's file (file_last), leaves etcd as it is (fileWrites). The node's record and the writes go in one
// transaction that fails if any key it decided on changed meanwhile; then
// it starts again.
func (c *Cluster) reconcileFile(ctx context.Context, f ClusterFile) error {
	for i := range reconcileAttempts {
		if i > 0 {
			sleep(ctx, time.Duration(i)*(10*time.Millisecond+rand.N(40*time.Millisecond)))
		}
		done, err := c.reconcileOnce(ctx, f)
		if err != nil || done {
			return err
		}
	}
	return fmt.Errorf("%w after %d attempts", ErrClusterContended, reconcileAttempts)
}

// bucketName returns the bucket a buckets/ key names.
func (k keyspace) bucketName(key string) (string, bool) {
	return strings.CutPrefix(key, k.bucketPrefix())
}
