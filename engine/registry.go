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
	if !validBucketName(name) {
		return nil, fmt.Errorf("%w: %q", ErrBadBucketName, name)
	}
	db.adminMu.Lock()
	defer db.adminMu.Unlock()
	if _, err := db.lookup(name); err == nil {
		return nil, fmt.Errorf("%w: %q", ErrBucketExists, name)
	} else if err != ErrBucketNotFound {
		return nil, err
	}
	if db.nextID == math.MaxUint32 {
		return nil, fmt.Errorf("engine: create bucket %q: bucket IDs exhausted", name)
	}
	id := db.nextID
	if err := db.space.admit(int64(2*len(name)+len(settings)+2*walRecordOverhead), true); err != nil {
		return nil, fmt.Errorf("engine: create bucket %q: %w", name, err)
	}
	batch := db.pdb.NewBatch()
	defer batch.Close()
	_ = batch.Set(bucketKey(name), registryValue(id, settings), nil)
	_ = batch.Set(keyNextBucketID, binary.BigEndian.AppendUint32(nil, id+1), nil)
	if err := db.commit(batch, pebble.Sync); err != nil {
		return nil, fmt.Errorf("engine: create bucket %q: %w", name, err)
	}
	db.nextID = id + 1
	e := &bucketEntry{b: newBucket(db, name, id), settings: slices.Clone(settings)}
	db.mu.Lock()
	db.buckets[name] = e
	db.mu.Unlock()
	return e.b, nil
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
