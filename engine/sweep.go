package engine

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// sweepChunk is how many expiry index entries one sweep step reads before
// it releases the bucket and looks at the stop channel again.
const sweepChunk = 256

// sweepLoop is the sweeper goroutine, owned by DB: it sweeps once at start
// and then every SweepInterval, until Close closes sweepStop.
func (db *DB) sweepLoop() {
	defer close(db.sweepDone)
	t := time.NewTicker(db.opts.SweepInterval)
	defer t.Stop()
	for {
		db.sweep(unixSeconds(db.opts.Now()))
		db.reclaim(time.Now())
		select {
		case <-db.sweepStop:
			return
		case <-t.C:
		}
	}
}

// unixSeconds converts t to the uint32 seconds used by items, clamped.
func unixSeconds(t time.Time) uint32 {
	s := t.Unix()
	switch {
	case s < 0:
		return 0
	case s > math.MaxUint32:
		return math.MaxUint32
	}
	return uint32(s)
}

// sweep deletes, in every bucket, the items whose expiry is ≤ now together
// with their index entries, and returns how many items it deleted. It stops
// early when Close is under way.
func (db *DB) sweep(now uint32) int {
	db.mu.RLock()
	bs := make([]*Bucket, 0, len(db.buckets))
	for _, e := range db.buckets {
		bs = append(bs, e.b)
	}
	db.mu.RUnlock()
	total := 0
	for _, b := range bs {
		err := b.flushDue(now)
		n := 0
		if err == nil {
			n, err = b.sweep(now, db.sweepStop)
		}
		total += n
		if err != nil && !errors.Is(err, ErrBucketDeleted) && !errors.Is(err, ErrClosed) &&
			!errors.Is(err, ErrNoSpace) && !errors.Is(err, ErrStorage) { // those log once
			db.log.Error("engine: sweep failed", "bucket", b.name, "err", err)
		}
	}
	return total
}

// sweep sweeps b chunk by chunk until nothing has expired at now or stop is
// closed.
func (b *Bucket) sweep(now uint32, stop <-chan struct{}) (int, error) {
	total := 0
	for {
		n, more, err := b.sweepStep(now)
		total += n
		if err != nil || !more {
			return total, err
		}
		select {
		case <-stop:
			return total, nil
		default:
		}
	}
}

// sweepStep handles up to sweepChunk expired index entries with the bucket
// entered; more reports whether further entries may remain.
func (b *Bucket) sweepStep(now uint32) (deleted int, more bool, err error) {
	if err := b.enter(); err != nil {
		return 0, false, err
	}
	defer b.leave()
	entries, err := b.expiredEntries(now)
	if err != nil {
		return 0, false, err
	}
	for _, ek := range entries {
		ok, err := b.expire(ek, now)
		if err != nil {
			return deleted, false, err
		}
		if ok {
			deleted++
		}
	}
	return deleted, len(entries) == sweepChunk, nil
}

// expiredEntries returns copies of up to sweepChunk index keys of b whose
// expiry is in [1, now].
func (b *Bucket) expiredEntries(now uint32) ([][]byte, error) {
	start, end := expiredRange(b.id, now)
	it, err := b.db.pdb.NewIter(&pebble.IterOptions{LowerBound: start, UpperBound: end})
	if err != nil {
		return nil, fmt.Errorf("engine: sweep %q: %w", b.name, err)
	}
	var out [][]byte
	for it.First(); it.Valid() && len(out) < sweepChunk; it.Next() {
		out = append(out, append([]byte(nil), it.Key()...))
	}
	return out, closeIter(it, "sweep "+b.name)
}

// expire handles one expired index entry ek under its key's stripe lock: it
// deletes the entry, and the item too if the item still carries that expiry
// (a Store or Touch since would have moved the entry), and drops the item
// from the resident cache. It reports whether an item was deleted.
func (b *Bucket) expire(ek []byte, now uint32) (bool, error) {
	expiry, key, ok := decodeExpiryKey(ek)
	if !ok {
		return false, fmt.Errorf("engine: corrupt expiry index key %q", ek)
	}
	kb := getKeyBuf()
	defer putKeyBuf(kb)
	kb.b = appendItemKey(kb.b[:0], b.id, key)
	s := b.db.locks.lock(b.id, key)
	defer s.Unlock()
	if c := b.db.cache; c != nil {
		cs, _, _, _, _ := c.begin(b.id, key)
		defer cs.end()
	}
	cur, err := b.readLocked(kb.b, key, now)
	if err != nil {
		return false, err
	}
	defer cur.release()
	remove := cur.exists && cur.h.expiry == expiry && !cur.live
	if err := b.db.space.admit(int64(len(ek)+len(kb.b)+walRecordOverhead), true); err != nil {
		return false, err
	}
	batch := b.db.pdb.NewBatch()
	defer batch.Close()
	_ = batch.Delete(ek, nil)
	if remove {
		_ = batch.Delete(kb.b, nil)
	}
	err = b.db.commit(batch, b.db.writeO)
	switch {
	case remove && err != nil:
		b.forget(key) // Pebble's state is unknown
	case remove:
		b.uncache(key)
	}
	if err != nil {
		return false, fmt.Errorf("engine: sweep %q: %w", b.name, err)
	}
	if remove {
		b.count.Add(-1)
	}
	return remove, nil
}
