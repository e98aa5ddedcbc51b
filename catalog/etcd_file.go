package catalog

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"kvd/tenant"
)

// This file meets one node's config file with what etcd holds. Nodes may
// run with different files: each node's file is compared with what that
// node's file said when it last applied it (its record, files/<node>), as
// a single node compares its file with "config_applied". So a node applies
// only its own file's edits, and never the ways in which its file differs
// from another node's.

// ClusterFile is what one node's config file says about the cluster's
// catalog.
type ClusterFile struct {
	Node    nodeSettings               // Capacity is this node's
	Buckets map[string]tenant.Settings // by name
	Users   []UserSpec                 // nil: the file names no users
}

// fileRecord is what one node's config file said when that node last
// applied it (key files/<node>), item by item. Users is by name; nil: the
// file never named users.
type fileRecord struct {
	Defaults *nodeSettings              `json:"defaults,omitempty"`
	Capacity *int64                     `json:"capacity,omitempty"`
	Buckets  map[string]json.RawMessage `json:"buckets,omitempty"`
	Users    map[string]json.RawMessage `json:"users"`
}

// legacyFileRecord is the one record all nodes shared before records were
// per node (key file). It is read as another node's record: what it says
// was applied by some file, and it is never written again.
type legacyFileRecord struct {
	Defaults *nodeSettings              `json:"defaults"`
	Buckets  map[string]json.RawMessage `json:"buckets"`
	Users    []UserSpec                 `json:"users"`
}

// recordOf is the record of f as it says things now.
func recordOf(f ClusterFile) (fileRecord, error) {
	def, capacity := f.Node, f.Node.Capacity
	def.Capacity = 0
	r := fileRecord{Defaults: &def, Capacity: &capacity, Buckets: make(map[string]json.RawMessage, len(f.Buckets))}
	for name, set := range f.Buckets {
		raw, err := set.MarshalJSON()
		if err != nil {
			return r, err
		}
		r.Buckets[name] = raw
	}
	if f.Users != nil {
		var err error
		if r.Users, err = usersByName(f.Users); err != nil {
			return r, err
		}
	}
	return r, nil
}

func usersByName(users []UserSpec) (map[string]json.RawMessage, error) {
	m := make(map[string]json.RawMessage, len(users))
	for _, u := range users {
		raw, err := json.Marshal(u)
		if err != nil {
			return nil, err
		}
		m[u.Name] = raw
	}
	return m, nil
}

// fileWrites decides whether the file's value of one item goes to etcd.
// had: this node's file named the item when last applied; same: with the
// value it has now; exists: etcd holds the item; elsewhere: another
// node's file applied this very value already.
//
//   - No edit (had, same): etcd keeps its value, which may be a run-time
//     change made since, or a deletion.
//   - The value came through another node's file: what the cluster did
//     with it since (a run-time change, a deletion) stays. Files pushed to
//     every node apply once, and a node that joins with the file the
//     others run reverts nothing.
//   - An edit of this node's file: it goes to etcd, over run-time changes
//     of the fields it changed (and brings back a bucket deleted at run
//     time, as a changed entry does on a single node).
//   - An item this node's file never named: seeded if etcd lacks it, so
//     that a node joining with an older or different file leaves the
//     cluster as it is.
func fileWrites(had, same, exists, elsewhere bool) bool {
	switch {
	case had && same, elsewhere:
		return false
	case had:
		return true
	default:
		return !exists
	}
}

// fileReconcile is one attempt at reconcileFile: etcd's state as read,
// this node's record and the others', and the writes decided so far with
// the revisions they were decided on.
type fileReconcile struct {
	c      *Cluster
	st     prefixState
	mine   fileRecord
	others []fileRecord
	ops    []clientv3.Op
	guards []clientv3.Cmp
}

// put writes key, on condition that it has not changed since it was read
// (kv nil: did not exist).
func (r *fileReconcile) put(key string, value []byte, kv *mvccpb.KeyValue) {
	var rev int64
	if kv != nil {
		rev = kv.ModRevision
	}
	r.ops = append(r.ops, clientv3.OpPut(key, string(value)))
	r.guards = append(r.guards, clientv3.Compare(clientv3.ModRevision(key), "=", rev))
}

func (r *fileReconcile) elsewhere(has func(o fileRecord) bool) bool {
	for _, o := range r.others {
		if has(o) {
			return true
		}
	}
	return false
}

// records reads this node's record and every other one from st.
func (c *Cluster) records(st prefixState) (mine fileRecord, others []fileRecord, err error) {
	for key, kv := range st.kvs {
		if key == c.keys.legacyFile() {
			var l legacyFileRecord
			if err := json.Unmarshal(kv.Value, &l); err != nil {
				return mine, nil, fmt.Errorf("catalog: etcd key %s: %w", key, err)
			}
			o := fileRecord{Defaults: l.Defaults, Buckets: l.Buckets}
			if o.Users, err = usersByName(l.Users); err != nil {
				return mine, nil, err
			}
			others = append(others, o)
			continue
		}
		node, ok := strings.CutPrefix(key, c.keys.fileRecordPrefix())
		if !ok {
			continue
		}
		var rec fileRecord
		if err := json.Unmarshal(kv.Value, &rec); err != nil {
			return mine, nil, fmt.Errorf("catalog: etcd key %s: %w", key, err)
		}
		if node == c.opts.NodeName {
			mine = rec
		} else {
			others = append(others, rec)
		}
	}
	return mine, others, nil
}

func (c *Cluster) reconcileOnce(ctx context.Context, f ClusterFile) (bool, error) {
	st, err := c.readPrefix(ctx)
	if err != nil {
		return false, fmt.Errorf("catalog: read etcd for the config file: %w", err)
	}
	want, err := recordOf(f)
	if err != nil {
		return false, err
	}
	r := &fileReconcile{c: c, st: st}
	if r.mine, r.others, err = c.records(st); err != nil {
		return false, err
	}
	if err := r.buckets(f, want); err != nil {
		return false, err
	}
	if err := r.defaults(want); err != nil {
		return false, err
	}
	r.capacity(want)
	if f.Users == nil {
		want.Users = r.mine.Users // a file naming no users leaves them alone
	} else if err := r.users(f, want); err != nil {
		return false, err
	}
	raw, err := json.Marshal(want)
	if err != nil {
		return false, err
	}
	key := c.keys.fileRecord(c.opts.NodeName)
	kv := st.kvs[key]
	if len(r.ops) == 0 && kv != nil && string(kv.Value) == string(raw) {
		return true, nil // nothing to write
	}
	r.put(key, raw, kv)
	resp, err := c.txn(ctx, r.guards, r.ops...)
	if err != nil {
		return false, fmt.Errorf("catalog: apply the config file to etcd: %w", err)
	}
	return resp.Succeeded, nil
}

func (r *fileReconcile) buckets(f ClusterFile, want fileRecord) error {
	for name, set := range f.Buckets {
		raw := want.Buckets[name]
		prev, had := r.mine.Buckets[name]
		key := r.c.keys.bucket(name)
		kv := r.st.kvs[key]
		elsewhere := r.elsewhere(func(o fileRecord) bool { return string(o.Buckets[name]) == string(raw) })
		if !fileWrites(had, string(prev) == string(raw), kv != nil, elsewhere) {
			continue
		}
		put := raw
		if had && kv != nil { // the file's edits over the cluster's settings
			cur, err := tenant.ParseSettings(kv.Value, tenant.Settings{})
			if err != nil {
				return fmt.Errorf("catalog: etcd key %s: %w", kv.Key, err)
			}
			merged, err := mergeFileSettings(cur, prev, set)
			if err != nil {
				return fmt.Errorf("bucket %q: %w", name, err)
			}
			if put, err = merged.MarshalJSON(); err != nil {
				return err
			}
		}
		r.put(key, put, kv)
	}
	return nil
}

func (r *fileReconcile) defaults(want fileRecord) error {
	def, prev := *want.Defaults, r.mine.Defaults
	kv := r.st.kvs[r.c.keys.node()]
	elsewhere := r.elsewhere(func(o fileRecord) bool { return o.Defaults != nil && *o.Defaults == def })
	if !fileWrites(prev != nil, prev != nil && *prev == def, kv != nil, elsewhere) {
		return nil
	}
	n := def
	if prev != nil && kv != nil { // the file's edits over the cluster's defaults
		var cur nodeSettings
		if err := json.Unmarshal(kv.Value, &cur); err != nil {
			return fmt.Errorf("catalog: etcd key %s: %w", kv.Key, err)
		}
		n = fileEdits(cur, *prev, def)
	}
	n.Capacity = 0
	raw, _ := json.Marshal(n) // plain integers: cannot fail
	r.put(r.c.keys.node(), raw, kv)
	return nil
}

func (r *fileReconcile) capacity(want fileRecord) {
	key, capacity, prev := r.c.keys.capacity(r.c.opts.NodeName), *want.Capacity, r.mine.Capacity
	kv := r.st.kvs[key]
	if fileWrites(prev != nil, prev != nil && *prev == capacity, kv != nil, false) {
		r.put(key, []byte(fmt.Sprint(capacity)), kv)
	}
}

// users meets the file's users with the users document, user by user: a
// user this node's file added, changed or removed since it last applied
// it is added, changed or removed; the users other nodes' files or
// earlier edits put there stay.
func (r *fileReconcile) users(f ClusterFile, want fileRecord) error {
	kv := r.st.kvs[r.c.keys.users()]
	var cur []UserSpec
	if kv != nil {
		if err := json.Unmarshal(kv.Value, &cur); err != nil {
			return fmt.Errorf("catalog: etcd key %s: %w", kv.Key, err)
		}
	}
	at := make(map[string]int, len(cur))
	for i, u := range cur {
		at[u.Name] = i
	}
	changed := kv == nil // no document yet: seed one
	for _, u := range f.Users {
		raw := want.Users[u.Name]
		prev, had := r.mine.Users[u.Name]
		i, exists := at[u.Name]
		elsewhere := r.elsewhere(func(o fileRecord) bool { return string(o.Users[u.Name]) == string(raw) })
		if !fileWrites(had, string(prev) == string(raw), exists, elsewhere) {
			continue
		}
		changed = true
		if exists {
			cur[i] = u
		} else {
			at[u.Name] = len(cur)
			cur = append(cur, u)
		}
	}
	kept := cur[:0]
	for _, u := range cur {
		_, had := r.mine.Users[u.Name]
		if _, named := want.Users[u.Name]; had && !named {
			changed = true // removed from this node's file since it last applied it
			continue
		}
		kept = append(kept, u)
	}
	if !changed {
		return nil
	}
	if kept == nil {
		kept = []UserSpec{}
	}
	raw, err := json.Marshal(kept)
	if err != nil {
		return err
	}
	r.put(r.c.keys.users(), raw, kv)
	return nil
}
