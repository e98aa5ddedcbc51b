package engine

import (
	"fmt"

	"github.com/cockroachdb/pebble/v2"
)

// dumpStride is how many records a Dump reads between letting a flush,
// DELETE_BUCKET or Close that waits for the bucket go first.
const dumpStride = 256

// Dump calls fn with each item of the bucket live at now, in key order,
// until fn returns false. The item's Value (and the key) are valid only
// during the call; its fetch state is the resident item's, or as read from
// disk (never read, accessed now). Dump reads Pebble through an iterator,
// which sees the store as it was when the dump began; it is for listing
// keys (memcached's stats cachedump and lru_crawler metadump), off the
// event loop. A listing can read the whole store, so one runs at a time
// in the DB: another gets ErrDumpBusy at once. It holds the bucket shared
// a stride of records at a time: a flush or DELETE_BUCKET meanwhile waits
// for one stride, not the whole listing (nor do the bucket's commands
// behind it); a bucket deleted or closed meanwhile ends the listing with
// that error.
func (b *Bucket) Dump(now uint32, fn func(key []byte, it Item) bool) (err error) {
	if !b.db.dumpMu.TryLock() {
		return ErrDumpBusy
	}
	defer b.db.dumpMu.Unlock()
	if err := b.flushDue(now); err != nil {
		return err
	}
	if err := b.enter(); err != nil {
		return err
	}
	start, end := bucketRange(kindItem, b.id)
	iter, err := b.db.pdb.NewIter(&pebble.IterOptions{LowerBound: start, UpperBound: end})
	if err != nil {
		b.leave()
		return fmt.Errorf("engine: dump %q: %w", b.name, err)
	}
	held := true // the bucket, shared
	defer func() {
		if held {
			b.leave()
		}
		if cerr := closeIter(iter, "dump "+b.name); err == nil {
			err = cerr
		}
	}()
	n := 0
	for iter.First(); iter.Valid(); iter.Next() {
		if n++; n%dumpStride == 0 {
			b.leave()
			if err := b.enter(); err != nil { // deleted or closed meanwhile
				held = false
				return err
			}
		}
		key := iter.Key()[bucketPrefixLen:]
		h, v, ok := decodeRecord(iter.Value())
		if !ok {
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
			return nil
		}
	}
	return nil
}
