package engine

import (
	"encoding/binary"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
)

// Flush deletes every item of this bucket (other buckets are untouched),
// waiting for operations in flight, and cancels a pending FlushAt. Not
// synced, like other mutations.
func (b *Bucket) Flush() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.flushLocked()
}

// FlushAt schedules a delayed flush, as memcached's FLUSH with an
// expiration: the items that exist when now first reaches deadline (Unix
// seconds) are deleted then, and are served until then; items written at
// or after the deadline survive. It replaces any pending delayed flush. A
// deadline ≤ now does nothing (the server decides what a time that has
// passed means: see command.FlushAt).
// The deadline is persisted with the bucket, so it survives a restart, and
// it is committed like other mutations (durable after DB.SyncWAL).
//
// The flush happens when the first operation on the bucket (Get, any
// mutation; Peek misses meanwhile) or the sweeper sees now ≥ deadline.
// Errors: ErrBucketDeleted, ErrClosed, ErrNoSpace.
func (b *Bucket) FlushAt(deadline, now uint32) error {
	if deadline <= now {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.liveLocked(); err != nil {
		return err
	}
	if err := b.db.space.admit(walRecordOverhead, false); err != nil {
		return err
	}
	batch := b.db.pdb.NewBatch()
	defer batch.Close()
	_ = batch.Set(flushKey(b.id), binary.BigEndian.AppendUint32(nil, deadline), nil)
	if err := b.db.commit(batch, b.db.writeO); err != nil {
		return fmt.Errorf("engine: flush bucket %q at %d: %w", b.name, deadline, err)
	}
	b.flushAt.Store(deadline)
	return nil
}

// FlushPending returns the pending FlushAt deadline, 0 if none.
func (b *Bucket) FlushPending() uint32 { return b.flushAt.Load() }

// flushPending reports whether a delayed flush is due at now but not done.
func (b *Bucket) flushPending(now uint32) bool {
	d := b.flushAt.Load()
	return d != 0 && now >= d
}

// flushDue performs a delayed flush that is due at now. Every operation
// calls it before entering the bucket, so nothing written at or after the
// deadline can be flushed.
func (b *Bucket) flushDue(now uint32) error {
	if !b.flushPending(now) {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.flushPending(now) { // another operation flushed meanwhile
		return nil
	}
	return b.flushLocked()
}

// flushLocked deletes the bucket's items and its pending flush record in
// one batch. The caller holds b.mu exclusively.
func (b *Bucket) flushLocked() error {
	if err := b.liveLocked(); err != nil {
		return err
	}
	if err := b.db.space.admit(walRecordOverhead, true); err != nil {
		return err
	}
	batch := b.db.pdb.NewBatch()
	defer batch.Close()
	for _, kind := range []byte{kindItem, kindExpiry} {
		start, end := bucketRange(kind, b.id)
		_ = batch.DeleteRange(start, end, nil)
	}
	_ = batch.Delete(flushKey(b.id), nil)
	err := b.db.commit(batch, b.db.writeO)
	if b.db.cache != nil {
		// b.mu is held exclusively: nothing refills the cache meanwhile.
		b.db.cache.dropBucket(b.id)
	}
	if err != nil {
		return fmt.Errorf("engine: flush bucket %q: %w", b.name, err)
	}
	b.count.Store(0)
	b.flushAt.Store(0)
	return nil
}

// liveLocked maps the bucket's state to an error; b.mu is held.
func (b *Bucket) liveLocked() error {
	switch b.state {
	case stateDeleted:
		return ErrBucketDeleted
	case stateClosed:
		return ErrClosed
	}
	return nil
}

// flushKey is the record of bucket id's pending delayed flush.
func flushKey(id uint32) []byte {
	return appendBucketPrefix(nil, kindFlush, id)
}

// loadFlushes restores the pending delayed flushes at Open. Records of
// unknown buckets are ignored.
func (db *DB) loadFlushes() error {
	byID := make(map[uint32]*Bucket, len(db.buckets))
	for _, e := range db.buckets {
		byID[e.b.id] = e.b
	}
	it, err := db.pdb.NewIter(&pebble.IterOptions{
		LowerBound: []byte{kindFlush},
		UpperBound: []byte{kindFlush + 1},
	})
	if err != nil {
		return fmt.Errorf("engine: load flushes: %w", err)
	}
	for it.First(); it.Valid(); it.Next() {
		k, v := it.Key(), it.Value()
		if len(k) != bucketPrefixLen || len(v) != 4 {
			_ = it.Close()
			return fmt.Errorf("engine: corrupt flush record %q", k)
		}
		if b := byID[binary.BigEndian.Uint32(k[1:5])]; b != nil {
			b.flushAt.Store(binary.BigEndian.Uint32(v))
		}
	}
	return closeIter(it, "load flushes")
}
