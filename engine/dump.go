package engine

import (
	"fmt"

	"github.com/cockroachdb/pebble/v2"
)

// Dump calls fn with each item of the bucket live at now, in key order:
// its key (valid only during the call), value size and expiry (Unix
// seconds, 0 = never), until fn returns false. It reads Pebble through an
// iterator, which sees the store as it was when the dump began; it is for
// listing keys (memcached's stats cachedump), off the event loop.
func (b *Bucket) Dump(now uint32, fn func(key []byte, size int, expiry uint32) bool) error {
	if err := b.flushDue(now); err != nil {
		return err
	}
	if err := b.enter(); err != nil {
		return err
	}
	defer b.leave()
	start, end := bucketRange(kindItem, b.id)
	it, err := b.db.pdb.NewIter(&pebble.IterOptions{LowerBound: start, UpperBound: end})
	if err != nil {
		return fmt.Errorf("engine: dump %q: %w", b.name, err)
	}
	for it.First(); it.Valid(); it.Next() {
		h, v, ok := decodeRecord(it.Value())
		if !ok {
			_ = it.Close()
			return errCorrupt(b, it.Key()[bucketPrefixLen:])
		}
		if h.live(now) && !fn(it.Key()[bucketPrefixLen:], len(v), h.expiry) {
			break
		}
	}
	return closeIter(it, "dump "+b.name)
}
