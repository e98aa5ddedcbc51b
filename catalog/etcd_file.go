package catalog

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"kvd/tenant"
)

// This file meets one node's config file with what etcd holds. Nodes may
// run with different files: each node's file is compared with what that
// node's file said when it last applied it (its record, files/<node>), as
// a single node compares its file with "config_applied". So a node applies
// only its own file's edits, and never the ways in which its file differs
// from another node's. Beside the records, file_last holds the value each
// item was last written to etcd with from any node's file: an edit already
// written from another file (one pushed to every node) applies once.

// ClusterFile is what one node's config file says about the cluster's
// catalog.
type ClusterFile struct {
	Node    nodeSettings               // Capacity is this node's
	Buckets map[string]tenant.Settings // by name
	Users   []UserSpec                 // nil: the file names no users
	// Legacy: the node ran before records were per node, so until it
	// has a record of its own the one record all nodes shared (key file)
	// stands for it if the file is newer (ModTime) than the last file that
	// record took: an edit made while the node was down is still an edit,
	// and an older file does not undo what other nodes' files did since.
	Legacy  bool
	ModTime time.Time
}

// fileRecord is what one node's config file said when that node last
// applied it (key files/<node>), item by item. Users is by name; nil: the
// file never named users. Dropped are the buckets and users it named once
// and no longer does: naming one again is an edit, whole.
type fileRecord struct {
	Defaults       *nodeSettings              `json:"defaults,omitempty"`
	Capacity       *int64                     `json:"capacity,omitempty"`
	Buckets        map[string]json.RawMessage `json:"buckets,omitempty"`
	Users          map[string]json.RawMessage `json:"users"`
	DroppedBuckets map[string]bool            `json:"dropped_buckets,omitempty"`
	DroppedUsers   map[string]bool            `json:"dropped_users,omitempty"`
}

// lastWrites is the value each item was last written to etcd with from a
// config file, whichever node's (key file_last); a user a file removed is
// absent.
type lastWrites struct {
	Defaults *nodeSettings              `json:"defaults,omitempty"`
	Buckets  map[string]json.RawMessage `json:"buckets,omitempty"`
	Users    map[string]json.RawMessage `json:"users,omitempty"`
}

// legacyFileRecord is the one record all nodes shared before records were
// per node (key file). It is never written again; it stands for a legacy
// node's own record, and for file_last, until they exist.
type legacyFileRecord struct {
	ModTime    time.Time                  `json:"mod_time"`
	Defaults   *nodeSettings              `json:"defaults"`
	Capacities map[string]int64           `json:"capacities"`
	Buckets    map[string]json.RawMessage `json:"buckets"`
	Users      []UserSpec                 `json:"users"`
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
// value it has now; dropped: it named it once, then not; exists: etcd
// holds the item; already: the last file write of the item was this very
// value.
//
//   - No edit (had, same): etcd keeps its value, which may be a run-time
//     change made since, or a deletion.
//   - The value was written from a file already (another node's, pushed
//     the same edit; or a file that listed a bucket since deleted at run
//     time): what the cluster did with it since stays. Files pushed to
//     every node apply once, and a node that joins with the file the
//     others run brings back nothing.
//   - An edit of this node's file (a changed value, or an item named
//     again): it goes to etcd, over run-time changes of the fields it
//     changed (and brings back a bucket deleted at run time, as a changed
//     entry does on a single node). Undoing an edit is an edit too.
//   - An item this node's file never named: seeded if etcd lacks it, so
//     that a node joining with an older or different file leaves the
//     cluster as it is.
func fileWrites(had, same, dropped, exists, already bool) bool {
	switch {
	case had && same, already:
		return false
	case had, dropped:
		return true
	default:
		return !exists
	}
}

// namedWrites is fileWrites for the item name of a by-name kind (buckets,
// users) whose value in the file is want: mine and dropped are this node's
// record of the kind, last its last file writes, which a write updates.
// It returns the value this node's file had for the item, if any.
func namedWrites(mine map[string]json.RawMessage, dropped map[string]bool, last map[string]json.RawMessage,
	name string, want json.RawMessage, exists bool) (prev json.RawMessage, had, write bool) {
	prev, had = mine[name]
	was, written := last[name]
	write = fileWrites(had, string(prev) == string(want), dropped[name], exists, written && string(was) == string(want))
	if write {
		last[name] = want
	}
	return prev, had, write
}

// fileReconcile is one attempt at reconcileFile: etcd's state as read,
// this node's record, the last file writes, and the writes decided so far
// with the revisions they were decided on.
type fileReconcile struct {
	c      *Cluster
	st     prefixState
	mine   fileRecord
	last   lastWrites
	read   []byte // file_last as read
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

// records reads this node's record and the last file writes from st,
// falling back on the legacy shared record where they are missing.
func (r *fileReconcile) records(f ClusterFile) error {
	keys, self := r.c.keys, r.c.opts.NodeName
	var legacy *legacyFileRecord
	if kv := r.st.kvs[keys.legacyFile()]; kv != nil {
		legacy = &legacyFileRecord{}
		if err := json.Unmarshal(kv.Value, legacy); err != nil {
			return fmt.Errorf("catalog: etcd key %s: %w", kv.Key, err)
		}
	}
	var legacyUsers map[string]json.RawMessage
	if legacy != nil && legacy.Users != nil {
		var err error
		if legacyUsers, err = usersByName(legacy.Users); err != nil {
			return err
		}
	}
	if kv := r.st.kvs[keys.fileRecord(self)]; kv != nil {
		if err := json.Unmarshal(kv.Value, &r.mine); err != nil {
			return fmt.Errorf("catalog: etcd key %s: %w", kv.Key, err)
		}
	} else if legacy != nil && f.Legacy && f.ModTime.After(legacy.ModTime) {
		r.mine = fileRecord{Defaults: legacy.Defaults, Buckets: legacy.Buckets, Users: legacyUsers}
		if v, ok := legacy.Capacities[self]; ok {
			r.mine.Capacity = &v
		}
	}
	if kv := r.st.kvs[keys.fileLast()]; kv != nil {
		r.read = kv.Value
		if err := json.Unmarshal(kv.Value, &r.last); err != nil {
			return fmt.Errorf("catalog: etcd key %s: %w", kv.Key, err)
		}
	} else if legacy != nil {
		r.last = lastWrites{Defaults: legacy.Defaults, Buckets: legacy.Buckets, Users: legacyUsers}
	}
	r.last.Buckets = maps.Clone(r.last.Buckets)
	r.last.Users = maps.Clone(r.last.Users)
	if r.last.Buckets == nil {
		r.last.Buckets = map[string]json.RawMessage{}
	}
	if r.last.Users == nil {
		r.last.Users = map[string]json.RawMessage{}
	}
	return nil
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
	if err := r.records(f); err != nil {
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
		want.Users, want.DroppedUsers = r.mine.Users, r.mine.DroppedUsers // a file naming no users leaves them alone
	} else if err := r.users(f, want); err != nil {
		return false, err
	}
	want.DroppedBuckets = dropped(r.mine.DroppedBuckets, r.mine.Buckets, want.Buckets)
	if f.Users != nil {
		want.DroppedUsers = dropped(r.mine.DroppedUsers, r.mine.Users, want.Users)
	}
	if raw, err := json.Marshal(r.last); err != nil {
		return false, err
	} else if string(raw) != string(r.read) {
		r.put(c.keys.fileLast(), raw, st.kvs[c.keys.fileLast()])
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

// dropped is the names a record drops after this apply: those dropped
// before and still not named, and those named before and not now.
func dropped(before map[string]bool, prev, now map[string]json.RawMessage) map[string]bool {
	out := map[string]bool{}
	for name := range before {
		if _, ok := now[name]; !ok {
			out[name] = true
		}
	}
	for name := range prev {
		if _, ok := now[name]; !ok {
			out[name] = true
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

func (r *fileReconcile) buckets(f ClusterFile, want fileRecord) error {
	for name, set := range f.Buckets {
		raw := want.Buckets[name]
		key := r.c.keys.bucket(name)
		kv := r.st.kvs[key]
		prev, had, write := namedWrites(r.mine.Buckets, r.mine.DroppedBuckets, r.last.Buckets, name, raw, kv != nil)
		if !write {
			if _, written := r.last.Buckets[name]; !written && kv != nil && string(kv.Value) == string(raw) {
				// etcd holds the file's value, seeded from a node's
				// buckets (after an etcd wipe): count it as written.
				r.last.Buckets[name] = raw
			}
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
	if !fileWrites(prev != nil, prev != nil && *prev == def, false, kv != nil,
		r.last.Defaults != nil && *r.last.Defaults == def) {
		return nil
	}
	r.last.Defaults = &def
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
	if fileWrites(prev != nil, prev != nil && *prev == capacity, false, kv != nil, false) {
		r.put(key, []byte(fmt.Sprint(capacity)), kv)
	}
}

// users meets the file's users with the users document, user by user: a
// user this node's file added, changed or removed since it last applied
// it is added, changed or removed (fileWrites); the users other nodes'
// files or earlier edits put there stay.
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
		i, exists := at[u.Name]
		if _, _, write := namedWrites(r.mine.Users, r.mine.DroppedUsers, r.last.Users, u.Name, want.Users[u.Name], exists); !write {
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
			delete(r.last.Users, u.Name)
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
