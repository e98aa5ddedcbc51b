package server

import (
	"fmt"
	"sort"
	"sync"
	"sync/atomic"

	"kvd/engine"
	"kvd/tenant"
)

// bucket is one tenant as the server sees it: its keyspace, its settings and
// its counters. All fields are safe for concurrent use.
type bucket struct {
	name     string
	store    *engine.Bucket
	settings atomic.Pointer[tenant.Settings]
	deleted  atomic.Bool
	thr      *tenant.BucketThrottle
	parked   parked

	cmdGet, cmdSet, getHits, getMisses atomic.Int64
	cmdTouch, touchHits, touchMisses   atomic.Int64
}

func (s *Server) newBucket(store *engine.Bucket, set tenant.Settings) *bucket {
	b := &bucket{name: store.Name(), store: store}
	b.settings.Store(&set)
	b.thr = s.throttle.Add(b.name, set.Reserved, set.HardLimit)
	return b
}

// registry maps bucket names to buckets. The lock is held only to read or
// swap map entries, never across engine calls.
type registry struct {
	mu sync.RWMutex
	m  map[string]*bucket // guarded by mu
}

func (r *registry) get(name string) (*bucket, bool) {
	r.mu.RLock()
	b, ok := r.m[name]
	r.mu.RUnlock()
	return b, ok
}

func (r *registry) put(b *bucket) {
	r.mu.Lock()
	if r.m == nil {
		r.m = make(map[string]*bucket)
	}
	r.m[b.name] = b
	r.mu.Unlock()
}

func (r *registry) remove(name string) (*bucket, bool) {
	r.mu.Lock()
	b, ok := r.m[name]
	delete(r.m, name)
	r.mu.Unlock()
	return b, ok
}

// all returns the registered buckets.
func (r *registry) all() []*bucket {
	r.mu.RLock()
	out := make([]*bucket, 0, len(r.m))
	for _, b := range r.m {
		out = append(out, b)
	}
	r.mu.RUnlock()
	return out
}

// names returns the sorted bucket names for which keep returns true.
func (r *registry) names(keep func(string) bool) []string {
	r.mu.RLock()
	out := make([]string, 0, len(r.m))
	for name := range r.m {
		if keep(name) {
			out = append(out, name)
		}
	}
	r.mu.RUnlock()
	sort.Strings(out)
	return out
}

// loadBuckets registers the buckets the engine has and creates the
// configured ones it does not have yet.
func (s *Server) loadBuckets() error {
	for _, info := range s.db.Buckets() {
		set, err := tenant.ParseSettings(info.Settings, s.defaultSettings())
		if err != nil {
			return fmt.Errorf("server: persisted settings of bucket %q: %w", info.Name, err)
		}
		store, err := s.db.Bucket(info.Name)
		if err != nil {
			return err
		}
		s.buckets.put(s.newBucket(store, set))
	}
	for _, spec := range s.opts.Buckets {
		if _, ok := s.buckets.get(spec.Name); ok {
			continue
		}
		if _, err := s.createBucket(spec.Name, spec.Settings, "config"); err != nil {
			return fmt.Errorf("server: configured bucket %q: %w", spec.Name, err)
		}
	}
	return nil
}

// createBucket persists a new bucket, registers it and logs it as created
// by who. It does engine I/O: never call it on an event loop.
func (s *Server) createBucket(name string, set tenant.Settings, who string) (*bucket, error) {
	raw, err := set.MarshalJSON()
	if err != nil {
		return nil, err
	}
	store, err := s.db.CreateBucket(name, raw)
	if err != nil {
		return nil, err
	}
	b := s.newBucket(store, set)
	s.buckets.put(b)
	s.log.Info("bucket created", "by", who, "bucket", name, "limits", limitsText(set.Reserved, set.HardLimit))
	return b, nil
}

// deleteBucket unregisters a bucket and removes its data. Connections that
// have it selected see it as deleted on their next command. It does engine
// I/O: never call it on an event loop.
func (s *Server) deleteBucket(name string) error {
	b, ok := s.buckets.remove(name)
	if ok {
		b.deleted.Store(true)
		s.throttle.Remove(b.thr)
		b.wakeParked()
	}
	return s.db.DeleteBucket(name)
}
