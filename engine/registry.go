package engine

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/cockroachdb/pebble/v2"
)

// BucketInfo describes a bucket in the registry.
type BucketInfo struct {
	Name string
	// ID is the bucket's keyspace ID, unique for the life of the store.
	ID uint32
	// Settings is the caller's opaque settings blob (JSON in kvd), a copy.
	Settings []byte
}

// CreateBucket registers a new empty bucket with the given settings blob
// (copied) and returns it. The registry change is durable before it returns.
// Errors: ErrBadBucketName, ErrBucketExists, ErrClosed.
func (db *DB) CreateBucket(name string, settings []byte) (*Bucket, error) {
	out, err := db.CreateBuckets([]NewBucket{{Name: name, Settings: settings}})
	if err != nil {
		return nil, err
	}
	return out[0], nil
}

// NewBucket names a bucket to create and its settings blob, for
// CreateBuckets.
type NewBucket struct {
	Name     string
	Settings []byte
}

// createChunk is how many buckets CreateBuckets writes per batch: one
// fsync per chunk, and a batch of a few MiB at most.
const createChunk = 4096

// CreateBuckets registers new empty buckets as CreateBucket does, several
// per batch and fsync (a config file naming 100,000 buckets costs 25
// fsyncs, not 100,000), and returns them in order. Every name is checked
// before anything is written; a failed write leaves the chunks written
// before it created (the error says how many). Errors: ErrBadBucketName,
// ErrBucketExists (also for a name given twice), ErrClosed.
func (db *DB) CreateBuckets(list []NewBucket) ([]*Bucket, error) {
	db.adminMu.Lock()
	defer db.adminMu.Unlock()
	if err := db.checkNewLocked(list); err != nil {
		return nil, err
	}
	out := make([]*Bucket, 0, len(list))
	for len(list) > 0 {
		chunk := list[:min(len(list), createChunk)]
		list = list[len(chunk):]
		made, err := db.createChunkLocked(chunk)
		if err != nil && len(chunk) == 1 && len(out) == 0 {
			return nil, fmt.Errorf("engine: create bucket %q: %w", chunk[0].Name, err)
		}
		if err != nil {
			return out, fmt.Errorf("engine: create buckets (%d of %d created): %w", len(out), len(out)+len(chunk)+len(list), err)
		}
		out = append(out, made...)
	}
	return out, nil
}

// checkNewLocked refuses a list with a bad or taken name, or too many.
func (db *DB) checkNewLocked(list []NewBucket) error {
	seen := make(map[string]struct{}, len(list))
	for _, nb := range list {
		if !validBucketName(nb.Name) {
			return fmt.Errorf("%w: %q", ErrBadBucketName, nb.Name)
		}
		if _, err := db.lookup(nb.Name); err == nil {
			return fmt.Errorf("%w: %q", ErrBucketExists, nb.Name)
		} else if err != ErrBucketNotFound {
			return err
		}
		if _, dup := seen[nb.Name]; dup {
			return fmt.Errorf("%w: %q named twice", ErrBucketExists, nb.Name)
		}
		seen[nb.Name] = struct{}{}
	}
	if uint64(db.nextID)+uint64(len(list)) > math.MaxUint32 {
		return fmt.Errorf("engine: create %d buckets: bucket IDs exhausted", len(list))
	}
	return nil
}

// createChunkLocked writes one batch of registry records and the next ID,
// syncs it, and registers the buckets.
func (db *DB) createChunkLocked(list []NewBucket) ([]*Bucket, error) {
	size := int64(walRecordOverhead)
	for _, nb := range list {
		size += int64(2*len(nb.Name) + len(nb.Settings) + walRecordOverhead)
	}
	if err := db.space.admit(size, true); err != nil {
		return nil, err
	}
	batch := db.pdb.NewBatch()
	defer batch.Close()
	id := db.nextID
	for i, nb := range list {
		_ = batch.Set(bucketKey(nb.Name), registryValue(id+uint32(i), nb.Settings), nil)
	}
	_ = batch.Set(keyNextBucketID, binary.BigEndian.AppendUint32(nil, id+uint32(len(list))), nil)
	if err := db.commit(batch, pebble.Sync); err != nil {
		return nil, err
	}
	db.nextID = id + uint32(len(list))
	out := make([]*Bucket, len(list))
	db.mu.Lock()
	for i, nb := range list {
		e := &bucketEntry{b: newBucket(db, nb.Name, id+uint32(i)), settings: slices.Clone(nb.Settings)}
		db.buckets[nb.Name] = e
		out[i] = e.b
	}
	db.mu.Unlock()
	return out, nil
}

// DeleteBucket removes the bucket and all its items. Operations in flight on
// it finish first; afterwards every call on its *Bucket returns
// ErrBucketDeleted. The deletion is durable before it returns.
// Errors: ErrBucketNotFound, ErrClosed.
func (db *DB) DeleteBucket(name string) error {
	db.adminMu.Lock()
	defer db.adminMu.Unlock()
	e, err := db.unregister(name)
	if err != nil {
		return err
	}
	e.b.setState(stateDeleted) // waits for operations in flight
	if db.cache != nil {
		// Nothing can fill the cache for a deleted bucket, so from here on
		// Peek misses and Get fails with ErrBucketDeleted, consistently.
		db.cache.dropBucket(e.b.id)
	}
	batch := db.pdb.NewBatch()
	defer batch.Close()
	_ = batch.Delete(bucketKey(name), nil)
	_ = batch.Delete(flushKey(e.b.id), nil)
	for _, kind := range []byte{kindItem, kindExpiry} {
		start, end := bucketRange(kind, e.b.id)
		_ = batch.DeleteRange(start, end, nil)
	}
	err = db.space.admit(int64(len(name)+walRecordOverhead), true)
	if err == nil {
		err = db.commit(batch, pebble.Sync)
	}
	if err != nil {
		e.b.setState(stateLive)
		db.mu.Lock()
		db.buckets[name] = e
		db.mu.Unlock()
		return fmt.Errorf("engine: delete bucket %q: %w", name, err)
	}
	e.b.count.Store(0)
	return nil
}

// unregister removes name from the bucket map and returns its entry.
func (db *DB) unregister(name string) (*bucketEntry, error) {
	db.mu.Lock()
	defer db.mu.Unlock()
	if db.closed {
		return nil, ErrClosed
	}
	e := db.buckets[name]
	if e == nil {
		return nil, fmt.Errorf("%w: %q", ErrBucketNotFound, name)
	}
	delete(db.buckets, name)
	return e, nil
}

// Bucket returns the named bucket; every call returns the same *Bucket until
// the bucket is deleted. Errors: ErrBucketNotFound, ErrClosed.
func (db *DB) Bucket(name string) (*Bucket, error) {
	e, err := db.lookup(name)
	if err != nil {
		return nil, err
	}
	return e.b, nil
}

// lookup returns name's entry. The error is ErrBucketNotFound or ErrClosed
// unwrapped, so callers can compare with ==.
func (db *DB) lookup(name string) (*bucketEntry, error) {
	db.mu.RLock()
	defer db.mu.RUnlock()
	if db.closed {
		return nil, ErrClosed
	}
	e := db.buckets[name]
	if e == nil {
		return nil, ErrBucketNotFound
	}
	return e, nil
}

// Buckets lists the registered buckets sorted by name (nil after Close).
func (db *DB) Buckets() []BucketInfo {
	db.mu.RLock()
	defer db.mu.RUnlock()
	if db.closed {
		return nil
	}
	out := make([]BucketInfo, 0, len(db.buckets))
	for name, e := range db.buckets {
		out = append(out, BucketInfo{Name: name, ID: e.b.id, Settings: slices.Clone(e.settings)})
	}
	slices.SortFunc(out, func(a, b BucketInfo) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// SetBucketSettings replaces the bucket's settings blob (copied); durable
// before it returns. Errors: ErrBucketNotFound, ErrClosed.
func (db *DB) SetBucketSettings(name string, settings []byte) error {
	db.adminMu.Lock()
	defer db.adminMu.Unlock()
	e, err := db.lookup(name)
	if err != nil {
		return fmt.Errorf("engine: set settings of %q: %w", name, err)
	}
	db.mu.RLock()
	same := bytes.Equal(e.settings, settings)
	db.mu.RUnlock()
	if same {
		return nil // already durable: no write (a full disk need not fail it)
	}
	if err := db.setSync(bucketKey(name), registryValue(e.b.id, settings)); err != nil {
		return fmt.Errorf("engine: set settings of %q: %w", name, err)
	}
	db.mu.Lock()
	e.settings = slices.Clone(settings)
	db.mu.Unlock()
	return nil
}

// PutMeta stores a small node-level record (e.g. node throttle settings);
// durable before it returns. Errors: ErrClosed.
func (db *DB) PutMeta(key string, value []byte) error {
	db.adminMu.Lock()
	defer db.adminMu.Unlock()
	db.mu.RLock()
	closed := db.closed
	db.mu.RUnlock()
	if closed {
		return ErrClosed
	}
	if old, err := db.getCopy(metaKey(key)); err == nil && bytes.Equal(old, value) {
		return nil // already durable: no write (a full disk need not fail it)
	}
	if err := db.setSync(metaKey(key), value); err != nil {
		return fmt.Errorf("engine: put meta %q: %w", key, err)
	}
	return nil
}

// setSync writes one record with pebble.Sync, through the space guard. Such
// records are small and kvd needs them to start, so they may use the
// lower floor, like deletes.
func (db *DB) setSync(key, value []byte) error {
	if err := db.space.admit(int64(len(key)+len(value)+walRecordOverhead), true); err != nil {
		return err
	}
	batch := db.pdb.NewBatch()
	defer batch.Close()
	_ = batch.Set(key, value, nil)
	return db.commit(batch, pebble.Sync)
}

// Meta returns a copy of the record stored by PutMeta. Errors: ErrNotFound,
// ErrClosed.
func (db *DB) Meta(key string) ([]byte, error) {
	db.openMu.RLock()
	defer db.openMu.RUnlock()
	if !db.pebbleOK {
		return nil, ErrClosed
	}
	v, err := db.getCopy(metaKey(key))
	if err != nil && err != ErrNotFound {
		return nil, fmt.Errorf("engine: meta %q: %w", key, err)
	}
	return v, err
}

// registryValue encodes a registry record: id ‖ settings.
func registryValue(id uint32, settings []byte) []byte {
	v := make([]byte, 4, 4+len(settings))
	binary.BigEndian.PutUint32(v, id)
	return append(v, settings...)
}
