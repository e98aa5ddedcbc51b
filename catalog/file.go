package catalog

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"time"

	"kvd/engine"
	"kvd/tenant"
)

// appliedMetaKey records the config-file values last applied, so that a file
// edit made while kvd was stopped is told apart from a run-time change
// (0x2a, 0x2c) made since: the newer one wins.
const appliedMetaKey = "config_applied"

// File is what the config file says about the catalog.
type File struct {
	Node    tenant.NodeSettings
	Buckets []Spec
	// Users are the file's users: in a cluster they go to etcd (nil: the
	// file names none); a single node ignores them (the server keeps its
	// users itself).
	Users []UserSpec
	// ModTime is the file's modification time. Only a cluster node that
	// ran a version before per-node file records uses it, once: its file
	// counts as edited since the shared record of that version only if it
	// is newer (ClusterFile.Legacy).
	ModTime time.Time
}

// Spec is a bucket the config file names, with its settings.
type Spec struct {
	Name     string
	Settings tenant.Settings
}

// applied is what the config file said, last time it was applied.
type applied struct {
	Node    tenant.NodeSettings        `json:"node"`
	Buckets map[string]json.RawMessage `json:"buckets"`
}

func appliedOf(f *File) (applied, error) {
	a := applied{Node: f.Node, Buckets: make(map[string]json.RawMessage, len(f.Buckets))}
	done := map[tenant.Settings]json.RawMessage{} // most buckets share a few settings
	for _, b := range f.Buckets {
		raw, ok := done[b.Settings]
		if !ok {
			var err error
			if raw, err = b.Settings.MarshalJSON(); err != nil {
				return a, err
			}
			done[b.Settings] = raw
		}
		a.Buckets[b.Name] = raw
	}
	return a, nil
}

// ErrFileConflict is returned by ApplyFile when the file's edits, merged
// with the settings changed at run time, would give invalid settings (a
// file reserved above a hard limit set with 0x2a). Nothing of the file was
// applied; the catalog keeps the settings it had.
var ErrFileConflict = errors.New("the file's changes conflict with the settings changed at run time")

// ApplyFile makes the catalog follow the config file where the file changed
// since it was last applied (or everywhere, the first time): node throttle,
// bucket settings, new buckets, field by field. Values the file did not
// change keep their run-time settings; buckets missing from the file keep
// their data; a bucket the file listed when last applied and that was
// deleted at run time stays deleted unless the file's entry for it
// changed since (as in a cluster). who names the change in the log.
//
// The whole file is checked before anything is written: an edit that is
// invalid with the run-time settings (ErrFileConflict) applies nothing, and
// the record of what was last applied stays, so that the edit is still an
// edit when the file is next read. Only an engine write failing part of the
// way leaves part applied. In a cluster the file meets etcd instead (see the
// package comment), and ApplyFile returns once this node has applied the
// result.
func (c *Catalog) ApplyFile(f File, who string) error {
	if cl := c.cl.Load(); cl != nil {
		return c.applyFileToCluster(cl, f)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	prev, havePrev, err := c.loadApplied()
	if err != nil {
		return fmt.Errorf("catalog: %s: %w", appliedMetaKey, err)
	}
	want, err := appliedOf(&f)
	if err != nil {
		return err
	}
	p, err := c.planFileLocked(f, prev, havePrev, want)
	if err != nil {
		return err
	}
	if p.node != c.Node() {
		if err := c.setNodeLocked(p.node, who); err != nil {
			return err
		}
	}
	for _, ch := range p.changed {
		if err := c.setBucketLocked(ch.b, ch.set, who); err != nil {
			return fmt.Errorf("bucket %q: %w", ch.b.name, err)
		}
	}
	if err := c.createManyLocked(p.fresh, who); err != nil {
		return err
	}
	if len(p.deleted) > 0 {
		c.log.Info("buckets deleted at run time stay deleted", "by", who, "buckets", len(p.deleted),
			"first", p.deleted[0], "hint", "CREATE_BUCKET, or an edit of their entries in the file, brings them back")
	}
	raw, err := json.Marshal(want)
	if err != nil {
		return err
	}
	return c.db.PutMeta(appliedMetaKey, raw)
}

// filePlan is what ApplyFile writes, decided before any of it is.
type filePlan struct {
	node    tenant.NodeSettings // the node settings that follow
	changed []bucketChange      // existing buckets whose settings change
	fresh   []Spec              // buckets to create
	deleted []string            // buckets the file lists that were deleted at run time and stay so
}

type bucketChange struct {
	b   *Bucket
	set tenant.Settings
}

// planFileLocked decides what applying f writes, given what the file said
// when last applied (prev, if havePrev), and checks all of it.
func (c *Catalog) planFileLocked(f File, prev applied, havePrev bool, want applied) (filePlan, error) {
	p := filePlan{node: want.Node}
	if havePrev {
		p.node = fileEdits(c.Node(), prev.Node, want.Node)
		if err := p.node.Validate(); err != nil {
			return p, fmt.Errorf("node settings: %w: %w", ErrFileConflict, err)
		}
	}
	for _, spec := range f.Buckets {
		last, listed := prev.Buckets[spec.Name]
		b, ok := c.Get(spec.Name)
		switch {
		case ok:
			set, err := mergeFileSettings(b.Settings(), last, spec.Settings)
			if err != nil {
				return p, fmt.Errorf("bucket %q: %w", spec.Name, err)
			}
			if set != b.Settings() {
				p.changed = append(p.changed, bucketChange{b, set})
			}
		case listed && string(last) == string(want.Buckets[spec.Name]):
			p.deleted = append(p.deleted, spec.Name)
		default:
			if err := validNew(spec.Name, spec.Settings); err != nil {
				return p, fmt.Errorf("bucket %q: %w", spec.Name, err)
			}
			p.fresh = append(p.fresh, spec)
		}
	}
	return p, nil
}

// mergeFileSettings returns cur with the fields the file changed since
// prev (the file's settings when last applied, as Settings.MarshalJSON
// wrote them; nil: none, and want applies whole) set to want's.
func mergeFileSettings(cur tenant.Settings, prev json.RawMessage, want tenant.Settings) (tenant.Settings, error) {
	if prev == nil {
		return want, nil
	}
	old, err := tenant.ParseSettings(prev, tenant.Settings{})
	if err != nil {
		return cur, fmt.Errorf("the settings last applied from the file: %w", err)
	}
	set := fileEdits(cur, old, want)
	if err := set.Validate(); err != nil {
		return cur, fmt.Errorf("%w: %w", ErrFileConflict, err)
	}
	return set, nil
}

// fileEdits returns cur, a settings struct of plain fields, with every
// field that differs between prev (what the file said when last applied)
// and want (what it says now) set to want's: an edit to one field of the
// file overrides that field only, and the fields it did not touch keep
// their run-time values.
func fileEdits[T any](cur, prev, want T) T {
	c, p, w := reflect.ValueOf(&cur).Elem(), reflect.ValueOf(prev), reflect.ValueOf(want)
	for i := range c.NumField() {
		if !p.Field(i).Equal(w.Field(i)) {
			c.Field(i).Set(w.Field(i))
		}
	}
	return cur
}

func (c *Catalog) loadApplied() (applied, bool, error) {
	var a applied
	raw, err := c.db.Meta(appliedMetaKey)
	if errors.Is(err, engine.ErrNotFound) {
		return a, false, nil
	}
	if err == nil {
		err = json.Unmarshal(raw, &a)
	}
	return a, err == nil, err
}
