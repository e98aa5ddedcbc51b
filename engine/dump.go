package engine

import (
	"fmt"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// dumpStride is how many records a Dump reads between letting a flush,
// DELETE_BUCKET or Close that waits for the bucket go first.
const dumpStride = 256

// dumpIdle is how long a listing may go without reading a chunk before
// another may take its place (its client stopped reading, or left).
const dumpIdle = 5 * time.Second

// lister is the key listing the DB serves: one at a time, as memcached
// runs one LRU crawl.
type lister struct {
	mu    sync.Mutex
	owner any
	last  time.Time // its last chunk's start
}

// Dump calls fn with each item of the bucket live at now whose key comes
// after after (nil: from the first), in key order, until fn returns false:
// one chunk of the listing owner (memcached's stats cachedump and
// lru_crawler metadump), off the event loop. The item's Value (and the key)
// are valid only during the call; its fetch state is the resident item's,
// or as read from disk (never read, accessed now). The chunk sees the store
// as it was when it began.
//
// One listing runs at a time in the DB: a chunk of another owner gets
// ErrDumpBusy at once, unless the listing running has read no chunk for
// dumpIdle (then it gets ErrDumpBusy at its next). The owner ends its
// listing with EndDump. A chunk holds the bucket shared a stride of
// records at a time: a flush or DELETE_BUCKET meanwhile waits for one
// stride, not the chunk; a bucket deleted or closed meanwhile ends it with
// that error.
func (b *Bucket) Dump(owner any, now uint32, after []byte, fn func(key []byte, it Item) bool) (err error) {
	if !b.db.lister.take(owner, b.db.opts.Now()) {
		return ErrDumpBusy
	}
	b.db.dumpMu.Lock() // Close waits for it before Pebble closes
	defer b.db.dumpMu.Unlock()
	if err := b.flushDue(now); err != nil {
		return err
	}
	if err := b.enter(); err != nil {
		return err
	}
	o := &pebble.IterOptions{}
	o.LowerBound, o.UpperBound = bucketRange(kindItem, b.id)
	if after != nil {
		o.LowerBound = append(appendItemKey(nil, b.id, after), 0) // the first key after it
	}
	iter, err := b.db.pdb.NewIter(o)
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

// EndDump ends owner's listing, if it is the one running.
func (b *Bucket) EndDump(owner any) {
	l := &b.db.lister
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.owner == owner {
		l.owner = nil
	}
}

// take makes owner the listing running at now, if it is already, or none
// is, or the one running has been idle for dumpIdle.
func (l *lister) take(owner any, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.owner != nil && l.owner != owner && now.Sub(l.last) < dumpIdle {
		return false
	}
	l.owner, l.last = owner, now
	return true
}
