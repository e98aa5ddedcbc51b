package catalog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"kvd/engine"
	"kvd/tenant"
)

// nodeMetaKey is where run-time node throttle settings persist.
const nodeMetaKey = "node_throttle"

// Errors of package catalog. Mutators also return engine's and tenant's
// errors (engine.ErrBucketExists, engine.ErrBucketNotFound, invalid
// settings) as they are; in a cluster, the etcd answers "exists" and "no
// such bucket" are mapped to engine's errors, so callers see one set.
var (
	// ErrClusterBucketExists: a create found the bucket in etcd.
	ErrClusterBucketExists = errors.New("catalog: bucket already exists in the cluster")
	// ErrClusterNoBucket: etcd has no such bucket.
	ErrClusterNoBucket = errors.New("catalog: no such bucket in the cluster")
	// ErrClusterContended: the config file could not be applied because
	// other nodes kept changing the file record.
	ErrClusterContended = errors.New("catalog: config file contended in etcd")
	// ErrClusterOptions: ClusterOptions.Validate failed.
	ErrClusterOptions = errors.New("catalog: invalid cluster options")
	// ErrNodeNameInUse: another live member holds this node's --node-name.
	ErrNodeNameInUse = errors.New("catalog: node name in use")

	// errCompacted ends a watch whose start revision etcd compacted away.
	errCompacted = errors.New("catalog: watch revision compacted")
	// errWatchClosed ends a watch etcd closed while the node still runs.
	errWatchClosed = errors.New("catalog: etcd closed the watch")
	// errNewLife ends a watch on an etcd whose life token changed.
	errNewLife = errors.New("catalog: etcd's life token changed")
)

// Options configure Open.
type Options struct {
	// DB is the engine holding the buckets and the catalog's metadata.
	DB *engine.DB
	// Throttle is the node's throttle: the catalog adds a gauge for every
	// bucket and applies capacity and limits to it.
	Throttle *tenant.Throttle
	// Defaults are the settings of buckets created without any, until a
	// persisted node setting (0x2c) says otherwise.
	Defaults tenant.Settings
	// Logger receives one line per change. Default slog.Default().
	Logger *slog.Logger
	// Observer, when set, is told of every bucket added, changed or
	// removed, so that state the catalog does not own (admission queues)
	// follows the buckets.
	Observer Observer
	// Cluster, when set, makes the node a member of a cluster: the
	// catalog follows etcd (see the package comment). Nil: a single node
	// that needs no etcd.
	Cluster *ClusterOptions
	// Now is the caller's clock at Open; required in cluster mode, where
	// the link to etcd counts as up from then.
	Now time.Time
}

// Observer is told of bucket lifecycle events, in order, with the catalog's
// mutation lock held: it must not call back into the catalog's mutators.
type Observer interface {
	// BucketAdded runs before b is visible to Get; it may call b.SetExt.
	BucketAdded(b *Bucket)
	// SettingsChanged runs after b's settings changed.
	SettingsChanged(b *Bucket)
	// BucketRemoved runs after b was unregistered and marked deleted.
	BucketRemoved(b *Bucket)
	// UsersChanged runs when etcd's users document changed (cluster mode
	// only): users replace the node's users. An invalid user makes it
	// return an error; the catalog logs it and the old users stay.
	UsersChanged(users []UserSpec) error
}

// nopObserver is the Observer of a catalog opened without one.
type nopObserver struct{}

func (nopObserver) BucketAdded(*Bucket)           {}
func (nopObserver) SettingsChanged(*Bucket)       {}
func (nopObserver) BucketRemoved(*Bucket)         {}
func (nopObserver) UsersChanged([]UserSpec) error { return nil }

// Catalog is the node's set of buckets and its durable node settings.
type Catalog struct {
	db       *engine.DB
	throttle *tenant.Throttle
	log      *slog.Logger
	obs      Observer
	defaults atomic.Pointer[tenant.Settings] // settings of buckets created without any

	regMu sync.RWMutex
	reg   map[string]*Bucket // guarded by regMu

	parked    parkedBuckets // the buckets with parked connections
	wakeMu    sync.Mutex    // serializes WakeParked
	wakeSpare []*Bucket     // guarded by wakeMu: the list before last, reused

	mu sync.Mutex // serializes mutations (create, delete, settings, reload, etcd's changes)

	cl       atomic.Pointer[Cluster] // nil on a single node
	member   bool                    // guarded by mu: this node had joined its cluster before
	life     uint64                  // guarded by mu: the etcd life it follows (followEtcd); 0 unknown
	legacyID uint64                  // guarded by mu: the etcd cluster ID an older member marker recorded
	marked   bool                    // guarded by mu: the member marker names life
	// legacyMember: the node was a member before per-node file records
	// (ClusterFile.Legacy); file: the config file last applied, for a new
	// etcd life (seedCluster).
	legacyMember atomic.Bool
	file         atomic.Pointer[File]
	toSeed       []string         // guarded by mu: local buckets etcd lacked at the first join
	incs         map[string]int64 // guarded by mu: cluster incarnations read or recorded (applyIncarnationLocked)
	ticker       clusterTicker    // owned by TickCluster's goroutine

	// fileOwed: seeding a new etcd life could not write the config file
	// into it; TickCluster tries again (reseedFile), one try at a time
	// (reseeding).
	fileOwed, reseeding atomic.Bool
}

// Open loads the persisted node settings and every bucket the engine has.
func Open(o Options) (*Catalog, error) {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Observer == nil {
		o.Observer = nopObserver{}
	}
	c := &Catalog{db: o.DB, throttle: o.Throttle, log: o.Logger, obs: o.Observer, reg: map[string]*Bucket{},
		incs: map[string]int64{}}
	def := o.Defaults
	c.defaults.Store(&def)
	if err := c.loadNode(); err != nil {
		return nil, err
	}
	if err := c.loadBuckets(); err != nil {
		return nil, err
	}
	if o.Cluster != nil {
		if err := c.join(o.Now, *o.Cluster); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// Cluster is the node's link to its cluster; nil on a single node.
func (c *Catalog) Cluster() *Cluster { return c.cl.Load() }

// Close leaves the cluster (a single node has nothing to close). The
// engine stays open: it is the caller's.
func (c *Catalog) Close() error {
	if cl := c.cl.Load(); cl != nil {
		return cl.Close()
	}
	return nil
}

// loadBuckets registers every bucket the engine has, their throttles all
// at once (tenant.Throttle.AddMany: linear in the number of buckets).
func (c *Catalog) loadBuckets() error {
	infos := c.db.Buckets()
	sets := make([]tenant.Settings, len(infos))
	limits := make([]tenant.BucketLimits, len(infos))
	parsed := map[string]tenant.Settings{} // most buckets share a few settings: parse each once
	for i, info := range infos {
		set, ok := parsed[string(info.Settings)]
		if !ok {
			var err error
			if set, err = tenant.ParseSettings(info.Settings, c.Defaults()); err != nil {
				return fmt.Errorf("catalog: persisted settings of bucket %q: %w", info.Name, err)
			}
			parsed[string(info.Settings)] = set
		}
		r, h := c.localLimits(set)
		sets[i], limits[i] = set, tenant.BucketLimits{Name: info.Name, Reserved: r, HardLimit: h}
	}
	thrs := c.throttle.AddMany(limits)
	for i, info := range infos {
		store, err := c.db.Bucket(info.Name)
		if err != nil {
			return err
		}
		c.registerWith(store, sets[i], thrs[i])
	}
	return nil
}

// Get returns the named bucket.
func (c *Catalog) Get(name string) (*Bucket, bool) {
	c.regMu.RLock()
	b, ok := c.reg[name]
	c.regMu.RUnlock()
	return b, ok
}

// All returns every bucket, in no particular order.
func (c *Catalog) All() []*Bucket {
	c.regMu.RLock()
	out := make([]*Bucket, 0, len(c.reg))
	for _, b := range c.reg {
		out = append(out, b)
	}
	c.regMu.RUnlock()
	return out
}

// Names returns the sorted names of the buckets for which keep is true.
func (c *Catalog) Names(keep func(name string) bool) []string {
	c.regMu.RLock()
	out := make([]string, 0, len(c.reg))
	for name := range c.reg {
		if keep(name) {
			out = append(out, name)
		}
	}
	c.regMu.RUnlock()
	sort.Strings(out)
	return out
}

// WakeParked wakes the parked connections of every bucket (at a tick). It
// visits only the buckets that have some: O(parked), not O(buckets).
func (c *Catalog) WakeParked() {
	c.wakeMu.Lock()
	defer c.wakeMu.Unlock()
	list := c.parked.take(c.wakeSpare)
	for i, b := range list {
		b.WakeParked()
		list[i] = nil
	}
	c.wakeSpare = list
}

// Defaults are the settings a bucket created without any gets.
func (c *Catalog) Defaults() tenant.Settings { return *c.defaults.Load() }

// Create persists a new bucket with set, registers it and logs it as
// created by who. A bucket of that name already existing is
// engine.ErrBucketExists.
func (c *Catalog) Create(name string, set tenant.Settings, who string) (*Bucket, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cl := c.cl.Load(); cl != nil {
		if err := validNew(name, set); err != nil {
			return nil, err
		}
		if err := cl.createBucket(context.Background(), name, set); err != nil {
			return nil, engineErr(err)
		}
		return c.applyBucketLocked(name, set, who)
	}
	return c.createLocked(name, set, who)
}

func validNew(name string, set tenant.Settings) error {
	if err := tenant.ValidBucketName(name); err != nil {
		return err
	}
	return set.Validate()
}

func (c *Catalog) createLocked(name string, set tenant.Settings, who string) (*Bucket, error) {
	if err := validNew(name, set); err != nil {
		return nil, err
	}
	raw, err := set.MarshalJSON()
	if err != nil {
		return nil, err
	}
	store, err := c.db.CreateBucket(name, raw)
	if err != nil {
		return nil, err
	}
	b := c.register(store, set)
	c.log.Info("bucket created", "by", who, "bucket", name, "limits", tenant.LimitsText(set.Reserved, set.HardLimit))
	return b, nil
}

// createManyLocked creates the buckets of specs as createLocked would, in
// a few engine batches (engine.CreateBuckets) and with one throttle
// registration (tenant.Throttle.AddMany): linear in len(specs), with one
// fsync per few thousand buckets. Every spec is checked before anything is
// written. If a batch fails, the buckets written before it are registered.
func (c *Catalog) createManyLocked(specs []Spec, who string) error {
	list := make([]engine.NewBucket, len(specs))
	for i, spec := range specs {
		if err := validNew(spec.Name, spec.Settings); err != nil {
			return fmt.Errorf("bucket %q: %w", spec.Name, err)
		}
		raw, err := spec.Settings.MarshalJSON()
		if err != nil {
			return fmt.Errorf("bucket %q: %w", spec.Name, err)
		}
		list[i] = engine.NewBucket{Name: spec.Name, Settings: raw}
	}
	stores, err := c.db.CreateBuckets(list)
	limits := make([]tenant.BucketLimits, len(stores))
	for i, store := range stores {
		r, h := c.localLimits(specs[i].Settings)
		limits[i] = tenant.BucketLimits{Name: store.Name(), Reserved: r, HardLimit: h}
	}
	thrs := c.throttle.AddMany(limits)
	for i, store := range stores {
		set := specs[i].Settings
		c.registerWith(store, set, thrs[i])
		c.log.Info("bucket created", "by", who, "bucket", store.Name(), "limits", tenant.LimitsText(set.Reserved, set.HardLimit))
	}
	return err
}

func (c *Catalog) register(store *engine.Bucket, set tenant.Settings) *Bucket {
	r, h := c.localLimits(set)
	return c.registerWith(store, set, c.throttle.Add(store.Name(), r, h))
}

// registerWith registers a bucket whose throttle is already added.
func (c *Catalog) registerWith(store *engine.Bucket, set tenant.Settings, thr *tenant.BucketThrottle) *Bucket {
	b := &Bucket{name: store.Name(), store: store, thr: thr}
	b.parked.node = &c.parked
	b.settings.Store(&set)
	c.obs.BucketAdded(b)
	c.regMu.Lock()
	c.reg[b.name] = b
	c.regMu.Unlock()
	return b
}

// Delete unregisters the named bucket, wakes its parked connections (they
// find it deleted) and removes its data. An unknown name is
// engine.ErrBucketNotFound.
func (c *Catalog) Delete(name, who string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cl := c.cl.Load(); cl != nil {
		if err := cl.deleteBucket(context.Background(), name); err != nil {
			return engineErr(err)
		}
		return c.removeLocked(name, who)
	}
	return c.deleteLocked(name, who)
}

func (c *Catalog) deleteLocked(name, who string) error {
	c.regMu.Lock()
	b, ok := c.reg[name]
	delete(c.reg, name)
	c.regMu.Unlock()
	if ok {
		b.deleted.Store(true)
		c.throttle.Remove(b.thr)
		c.obs.BucketRemoved(b)
		b.WakeParked()
	}
	if err := c.db.DeleteBucket(name); err != nil {
		return err
	}
	c.log.Info("bucket deleted", "by", who, "bucket", name)
	return nil
}

// SetBucketSettings persists and applies a bucket's settings and logs the
// change as made by who.
func (c *Catalog) SetBucketSettings(b *Bucket, set tenant.Settings, who string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cl := c.cl.Load(); cl != nil {
		if err := set.Validate(); err != nil {
			return err
		}
		if err := cl.setBucketSettings(context.Background(), b.name, set); err != nil {
			return engineErr(err)
		}
		if b.Deleted() {
			_, err := c.applyBucketLocked(b.name, set, who) // deleted here, alive in etcd
			return err
		}
	}
	return c.setBucketLocked(b, set, who)
}

func (c *Catalog) setBucketLocked(b *Bucket, set tenant.Settings, who string) error {
	if err := set.Validate(); err != nil {
		return err
	}
	raw, err := set.MarshalJSON()
	if err == nil {
		err = c.db.SetBucketSettings(b.name, raw)
	}
	if err != nil {
		return err
	}
	old := b.settings.Swap(&set)
	r, h := c.localLimits(set)
	c.throttle.SetLimits(b.thr, r, h)
	c.obs.SettingsChanged(b)
	c.log.Info("bucket throttle changed", "by", who, "bucket", b.name,
		"old", tenant.LimitsText(old.Reserved, old.HardLimit), "new", tenant.LimitsText(set.Reserved, set.HardLimit),
		"queue", section7Diff(old, &set))
	return nil
}

// section7Diff describes the SPEC section 7 settings that differ between
// old and set, "max_concurrent=0->2 queue_timeout_ms=0->5", or "unchanged".
func section7Diff(old, set *tenant.Settings) string {
	var parts []string
	for _, f := range []struct {
		name     string
		old, new int64
	}{
		{"max_concurrent", int64(old.MaxConcurrent), int64(set.MaxConcurrent)},
		{"max_queued", int64(old.MaxQueued), int64(set.MaxQueued)},
		{"queue_timeout_ms", old.QueueTimeout.Milliseconds(), set.QueueTimeout.Milliseconds()},
		{"deadline_ms", old.Deadline.Milliseconds(), set.Deadline.Milliseconds()},
		{"deadline_percentile", int64(old.DeadlinePercentile), int64(set.DeadlinePercentile)},
		{"expected_execution_us", old.ExpectedExecution.Microseconds(), set.ExpectedExecution.Microseconds()},
	} {
		if f.old != f.new {
			parts = append(parts, fmt.Sprintf("%s=%d->%d", f.name, f.old, f.new))
		}
	}
	if len(parts) == 0 {
		return "unchanged"
	}
	return strings.Join(parts, " ")
}

// Node returns the node throttle settings in force.
func (c *Catalog) Node() tenant.NodeSettings {
	def := c.defaults.Load()
	return tenant.NodeSettings{Capacity: c.throttle.Capacity(), DefaultReserved: def.Reserved, DefaultHardLimit: def.HardLimit}
}

// SetNode persists the node settings, applies them (capacity at once, the
// defaults to buckets created afterwards) and logs the change as made by who.
func (c *Catalog) SetNode(n tenant.NodeSettings, who string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cl := c.cl.Load(); cl != nil {
		if err := cl.setNode(context.Background(), n); err != nil {
			return engineErr(err)
		}
	}
	return c.setNodeLocked(n, who)
}

func (c *Catalog) setNodeLocked(n tenant.NodeSettings, who string) error {
	raw, err := json.Marshal(n)
	if err == nil {
		err = c.db.PutMeta(nodeMetaKey, raw)
	}
	if err != nil {
		return err
	}
	old := c.Node()
	c.applyNode(n)
	if old == n {
		return nil // nothing changed: nothing to log
	}
	c.log.Info("node throttle changed", "by", who,
		"old_capacity", old.Capacity, "new_capacity", n.Capacity,
		"old_defaults", tenant.LimitsText(old.DefaultReserved, old.DefaultHardLimit),
		"new_defaults", tenant.LimitsText(n.DefaultReserved, n.DefaultHardLimit))
	return nil
}

func (c *Catalog) applyNode(n tenant.NodeSettings) {
	def := c.Defaults()
	def.Reserved, def.HardLimit = n.DefaultReserved, n.DefaultHardLimit
	c.defaults.Store(&def)
	c.throttle.SetCapacity(n.Capacity)
}

// loadNode applies node settings persisted by an earlier SetNode, or else
// those the config file gave when last applied; either wins over the
// options' values.
func (c *Catalog) loadNode() error {
	raw, err := c.db.Meta(nodeMetaKey)
	if errors.Is(err, engine.ErrNotFound) {
		// Never set at run time: in force is what the config file said
		// when it was last applied. The options may carry a newer edit of
		// the file, which is ApplyFile's to judge (and may refuse).
		prev, havePrev, err := c.loadApplied()
		if err != nil {
			return fmt.Errorf("catalog: %s: %w", appliedMetaKey, err)
		}
		if havePrev {
			c.applyNode(prev.Node)
		}
		return nil
	}
	if err != nil {
		return err
	}
	var n tenant.NodeSettings
	if err := json.Unmarshal(raw, &n); err != nil {
		return fmt.Errorf("catalog: persisted node settings: %w", err)
	}
	c.applyNode(n)
	return nil
}
