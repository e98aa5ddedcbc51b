package engine

import (
	"fmt"

	"github.com/cockroachdb/pebble/v2"
)

// Dump calls fn with each item of the bucket live at now, in key order,
// until fn returns false. The item's Value (and the key) are valid only
// during the call; its fetch state is the resident item's, or as read from
// disk (never read, accessed now). Dump reads Pebble through an iterator,
// which sees the store as it was when the dump began; it is for listing
// keys (memcached's stats cachedump and lru_crawler metadump), off the
// event loop. A listing can read the whole store, so one runs at a time
// in the DB: another gets ErrDumpBusy at once.
func (b *Bucket) Dump(now uint32, fn func(key []byte, it Item) bool) error {
	if !b.db.dumping.CompareAndSwap(false, true) {
		return ErrDumpBusy
	}
	defer b.db.dumping.Store(false)
	if err := b.flushDue(now); err != nil {
		return err
	}
	if err := b.enter(); err != nil {
		return err
	}
	// The iterator sees the store as it is now, so the scan holds no lock:
	// a flush or DELETE_BUCKET meanwhile would otherwise wait for it, and
	// every command of the bucket behind them.
	start, end := bucketRange(kindItem, b.id)
	iter, err := b.db.pdb.NewIter(&pebble.IterOptions{LowerBound: start, UpperBound: end})
	b.leave()
	if err != nil {
		return fmt.Errorf("engine: dump %q: %w", b.name, err)
	}
	for iter.First(); iter.Valid(); iter.Next() {
		key := iter.Key()[bucketPrefixLen:]
		h, v, ok := decodeRecord(iter.Value())
		if !ok {
			_ = iter.Close()
			return errCorrupt(b, key)
		}
		if !h.live(now) {
			continue
		}
		it := h.item(v)
		it.Accessed = now
		if c := b.db.cache; c != nil {
			if f, ok := c.fetchStateOf(b.id, key); ok {
				it.Fetched, it.Accessed = f.fetched, f.atime
			}
		}
		if !fn(key, it) {
			break
		}
	}
	return closeIter(iter, "dump "+b.name)
}
