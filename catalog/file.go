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
	// ModTime is the file's modification time: in a cluster, the newer of
	// a file edit and the cluster's state wins.
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

// ApplyFile makes the catalog follow the config file where the file changed
// since it was last applied (or everywhere, the first time): node throttle,
// bucket settings, new buckets, field by field. Values the file did not
// change keep their run-time settings; buckets missing from the file keep
// their data. who names the change in the log. On error nothing after the
// failing step is applied. In a cluster the file meets etcd instead (see the package
// comment), and ApplyFile returns once this node has applied the result.
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
	node := want.Node
	if havePrev {
		node = fileEdits(c.Node(), prev.Node, want.Node)
	}
	if node != c.Node() {
		if err := c.setNodeLocked(node, who); err != nil {
			return err
		}
	}
	var fresh []Spec
	for _, spec := range f.Buckets {
		if _, ok := c.Get(spec.Name); !ok {
			fresh = append(fresh, spec)
			continue
		}
		if err := c.applySpecLocked(spec, prev.Buckets[spec.Name], who); err != nil {
			return fmt.Errorf("bucket %q: %w", spec.Name, err)
		}
	}
	if err := c.createManyLocked(fresh, who); err != nil {
		return err
	}
	raw, err := json.Marshal(want)
	if err != nil {
		return err
	}
	return c.db.PutMeta(appliedMetaKey, raw)
}

// applySpecLocked makes bucket spec.Name follow the fields of its settings
// that changed in the file since prev (the file's settings when last
// applied; nil: never, and the file's settings apply whole).
func (c *Catalog) applySpecLocked(spec Spec, prev json.RawMessage, who string) error {
	b, ok := c.Get(spec.Name)
	if !ok {
		_, err := c.createLocked(spec.Name, spec.Settings, who)
		return err
	}
	set, err := mergeFileSettings(b.Settings(), prev, spec.Settings)
	if err != nil || set == b.Settings() {
		return err
	}
	return c.setBucketLocked(b, set, who)
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
		return cur, fmt.Errorf("the file's changes with the settings changed at run time: %w", err)
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
