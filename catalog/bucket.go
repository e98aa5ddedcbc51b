package catalog

import (
	"sync"
	"sync/atomic"

	"kvd/engine"
	"kvd/tenant"
)

// Bucket is one tenant: its keyspace, settings, throttle gauge, counters and
// parked connections. All methods are safe for concurrent use.
type Bucket struct {
	name     string
	store    *engine.Bucket
	thr      *tenant.BucketThrottle
	settings atomic.Pointer[tenant.Settings]
	deleted  atomic.Bool
	parked   parkedSet
	ext      any // set by Observer.BucketAdded before the bucket is visible

	// Counters are memcached's per-bucket command figures (STAT).
	Counters Counters
}

// Counters are the memcached figures STAT reports for a bucket, under
// memcached's names and in its meaning: a hit found the item, a miss did
// not; CAS figures are those of stores that carried a CAS (badval: the
// item's CAS differed).
type Counters struct {
	CmdGet, CmdSet, GetHits, GetMisses atomic.Int64
	CmdTouch, TouchHits, TouchMisses   atomic.Int64
	CmdFlush                           atomic.Int64
	DeleteHits, DeleteMisses           atomic.Int64
	IncrHits, IncrMisses               atomic.Int64
	DecrHits, DecrMisses               atomic.Int64
	CasHits, CasMisses, CasBadval      atomic.Int64
	// TextBase and CommandsBase are the bucket's text and all data
	// commands at its last "stats reset", where STAT's text_commands and
	// binary_commands start (the totals feed /metrics, which only go up).
	TextBase, CommandsBase atomic.Int64
}

// Name is the bucket's name.
func (b *Bucket) Name() string { return b.name }

// Store is the bucket's keyspace.
func (b *Bucket) Store() *engine.Bucket { return b.store }

// Throttle is the bucket's throttle gauge.
func (b *Bucket) Throttle() *tenant.BucketThrottle { return b.thr }

// Settings are the bucket's current settings.
func (b *Bucket) Settings() tenant.Settings { return *b.settings.Load() }

// Ext is what the Observer attached to the bucket when it was added (the
// server's per-bucket admission state); nil without an Observer.
func (b *Bucket) Ext() any { return b.ext }

// SetExt attaches v to the bucket. Call it only from Observer.BucketAdded,
// before the bucket is visible to other goroutines.
func (b *Bucket) SetExt(v any) { b.ext = v }

// Deleted reports whether the bucket was deleted; a connection that still
// holds it must deselect it.
func (b *Bucket) Deleted() bool { return b.deleted.Load() }

// A Waker is a connection parked until its bucket's next throttle tick.
// Wake must not block.
type Waker interface{ Wake() }

// Park registers w to be woken by the next WakeParked. The caller makes sure
// a Waker is parked at most once at a time.
func (b *Bucket) Park(w Waker) {
	b.parked.mu.Lock()
	b.parked.list = append(b.parked.list, w)
	if !b.parked.listed && b.parked.node != nil {
		b.parked.listed = true
		b.parked.node.add(b) // under b's lock: see parkedBuckets
	}
	b.parked.mu.Unlock()
}

// WakeParked wakes every parked Waker once and forgets them.
func (b *Bucket) WakeParked() {
	b.parked.mu.Lock()
	list := b.parked.list
	b.parked.list = nil
	b.parked.listed = false
	b.parked.mu.Unlock()
	for _, w := range list {
		w.Wake()
	}
}

// parkedSet is the set of connections waiting for the bucket's next tick.
type parkedSet struct {
	mu     sync.Mutex
	list   []Waker        // guarded by mu
	listed bool           // guarded by mu: the bucket is in node's list
	node   *parkedBuckets // the catalog's; nil for a bucket not registered
}

// parkedBuckets is the catalog's list of the buckets that have parked
// connections, so that a tick wakes them without walking every bucket.
// Bucket.Park adds its bucket while holding the bucket's lock, the first
// time a Waker parks after a wake; Catalog.WakeParked takes the list, then
// wakes each bucket under its lock. So a Waker parked before the list was
// taken is woken by this tick, and one parked after it put its bucket in
// the next list. A bucket may be listed twice (woken directly, by a
// delete, in between): its second wake finds nothing.
type parkedBuckets struct {
	mu   sync.Mutex
	list []*Bucket // guarded by mu
}

func (p *parkedBuckets) add(b *Bucket) {
	p.mu.Lock()
	p.list = append(p.list, b)
	p.mu.Unlock()
}

// take returns the listed buckets and empties the list, keeping its
// memory for the next tick's list (spare, which the caller hands back).
func (p *parkedBuckets) take(spare []*Bucket) []*Bucket {
	p.mu.Lock()
	list := p.list
	p.list = spare[:0]
	p.mu.Unlock()
	return list
}
