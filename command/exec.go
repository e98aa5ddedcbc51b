package command

import (
	"errors"
	"strconv"
	"sync/atomic"
	"time"

	"kvd/catalog"
	"kvd/engine"
	"kvd/ingress"
	"kvd/latency"
	"kvd/protocol/binary"
	"kvd/protocol/translate"
)

// relativeExpiryLimit is memcached's rule: expiry values up to 30 days are
// relative to now, larger ones are absolute Unix times.
const relativeExpiryLimit = 30 * 24 * 3600

// NoCreate is INCR/DECR's expiry meaning "fail instead of creating".
const NoCreate = 0xffffffff

// ExpiryAt converts a protocol expiry into an absolute Unix time (0 = never).
// An absolute time in the past stays in the past: the item is born expired.
func ExpiryAt(exp, now uint32) uint32 {
	switch {
	case exp == 0:
		return 0
	case exp <= relativeExpiryLimit:
		return now + exp
	default:
		return exp
	}
}

// FlushAt converts FLUSH's and flush_all's delay into the time the flush
// takes effect (0 = now), in memcached's meaning: a delay takes effect a
// second before it ends (memcached's oldest_live is realtime(delay) - 1, so
// a delay of 1 flushes at once); an absolute time that has passed flushes
// at once if it is after the server started (started, Unix seconds), and
// flushes nothing (ok false) if it is before, as memcached's realtime() has
// it (it dates its start memcachedStartSlack earlier).
func FlushAt(delay, now uint32, started int64) (at uint32, ok bool) {
	at = ExpiryAt(delay, now)
	if at != 0 && at <= now {
		return 0, int64(at) > started-memcachedStartSlack
	}
	if at == 0 || at-1 <= now {
		return 0, true
	}
	return at - 1, true
}

// Flush flushes bk (catalog.Catalog.Flush) after delay, in memcached's
// meaning (FlushAt) for a server started at started: FLUSH and flush_all,
// on a worker.
func Flush(cat *catalog.Catalog, bk *catalog.Bucket, delay uint32, now, started time.Time) error {
	at, ok := FlushAt(delay, uint32(now.Unix()), started.Unix())
	if !ok {
		return nil
	}
	return cat.Flush(bk, at, uint32(now.Unix()))
}

// memcachedStartSlack: memcached dates its start ITEM_UPDATE_INTERVAL + 2
// seconds before it (process_started in memcached.c).
const memcachedStartSlack = 62

// Exec runs one data command against bk, recording its result in r. It
// does I/O: it runs on a worker, never on an event loop.
func Exec(bk *catalog.Bucket, r *Request, now uint32) {
	op := r.Hdr.Op.NonQuiet()
	var err error
	switch op {
	case binary.OpGet, binary.OpGetK:
		err = execRead(bk, r, now, false)
	case binary.OpSet, binary.OpAdd, binary.OpReplace:
		bk.Counters.CmdSet.Add(1)
		flags, exp, _ := binary.SetExtras(r.Extras)
		mode := storeMode(op, r.Hdr.CAS)
		if r.Txt.Invalidate() {
			mode = engine.ModeInvalidate
		}
		r.CAS, err = bk.Store().Store(mode, r.Key, r.Value, flags, ExpiryAt(exp, now), r.Hdr.CAS, now)
		if r.Hdr.CAS != 0 { // memcached's NREAD_CAS: text cas, a binary store with a CAS
			count(err, &bk.Counters.CasHits, &bk.Counters.CasMisses, &bk.Counters.CasBadval)
		}
	case binary.OpAppend, binary.OpPrepend:
		bk.Counters.CmdSet.Add(1)
		r.CAS, r.Size, err = bk.Store().StoreN(storeMode(op, r.Hdr.CAS), r.Key, r.Value, 0, 0, r.Hdr.CAS, now)
	case binary.OpDelete:
		if r.Txt.Invalidate() { // md I marks the item stale: memcached counts no delete hit
			ttl, touch := r.Txt.MetaTTL()
			if r.CAS, err = bk.Store().Invalidate(r.Key, r.Hdr.CAS, touch, ExpiryAt(ttl, now), now); err != nil {
				count(err, nil, &bk.Counters.DeleteMisses, &bk.Counters.DeleteMisses)
			}
			break
		}
		err = bk.Store().Delete(r.Key, r.Hdr.CAS, now)
		var badval *atomic.Int64 // a CAS that differs: memcached counts md's as a miss
		if r.Txt.MetaDelete() {
			badval = &bk.Counters.DeleteMisses
		}
		count(err, &bk.Counters.DeleteHits, &bk.Counters.DeleteMisses, badval)
	case binary.OpIncrement, binary.OpDecrement:
		delta, initial, exp, _ := binary.ArithExtras(r.Extras)
		var res engine.ArithResult
		ttl, touch := r.Txt.MetaTTL()
		res, err = bk.Store().ArithItem(r.Key, engine.ArithArgs{Incr: op == binary.OpIncrement,
			Delta: delta, Initial: initial, Expiry: ExpiryAt(exp, now), Create: exp != NoCreate,
			CAS: r.Hdr.CAS, Touch: touch, NewExpiry: ExpiryAt(ttl, now)}, now)
		r.Num, r.CAS, r.Exp, r.Made, r.Size = res.Value, res.CAS, res.Expiry, res.Created, res.Read
		hits, misses := &bk.Counters.IncrHits, &bk.Counters.IncrMisses
		if op == binary.OpDecrement {
			hits, misses = &bk.Counters.DecrHits, &bk.Counters.DecrMisses
		}
		if !res.Created { // memcached counts neither when it creates the item
			count(err, hits, misses, nil)
		}
	case binary.OpTouch, binary.OpGAT, binary.OpGATK:
		err = execRead(bk, r, now, true)
	}
	if err != nil {
		r.Status, r.Reason = StatusOf(err)
		return
	}
	r.Mut = op != binary.OpGet && op != binary.OpGetK || r.Won
}

// count adds a command's outcome to memcached's figures: nil to hits,
// engine.ErrNotFound to misses, engine.ErrExists to badval (a nil counter:
// not counted); any other error counts nowhere, as memcached's do not.
func count(err error, hits, misses, badval *atomic.Int64) {
	switch {
	case err == nil && hits != nil:
		hits.Add(1)
	case errors.Is(err, engine.ErrNotFound):
		misses.Add(1)
	case badval != nil && errors.Is(err, engine.ErrExists):
		badval.Add(1)
	}
}

// execRead runs a GET, or with touch a TOUCH or GAT: it counts the command
// and its hit or miss in the bucket's figures and records the item read.
func execRead(bk *catalog.Bucket, r *Request, now uint32, touch bool) error {
	cnt := &bk.Counters
	calls, hits, misses := &cnt.CmdGet, &cnt.GetHits, &cnt.GetMisses
	var it engine.Item
	var err error
	var exp uint32
	st, bump := bk.Store(), r.Txt.Bumps()
	if touch {
		calls, hits, misses = &cnt.CmdTouch, &cnt.TouchHits, &cnt.TouchMisses
		exp, _ = binary.TouchExtras(r.Extras)
	}
	// An mg whose R comes before its T judges the TTL the touch has not
	// changed yet, as memcached applies the flags in request order: it
	// reads first and touches below.
	l, _ := r.Txt.Lease()
	late := touch && l.BeforeTouch
	switch {
	case touch && !late && bump:
		it, err = st.Touch(r.Key, ExpiryAt(exp, now), now, r.Res[:0])
	case touch && !late:
		it, err = st.TouchNoBump(r.Key, ExpiryAt(exp, now), now, r.Res[:0])
	case bump:
		it, err = st.Get(r.Key, now, r.Res[:0])
	default:
		it, err = st.GetNoBump(r.Key, now, r.Res[:0])
	}
	if a, ok := LeaseOf(&r.Txt, now); ok { // an mg: memcached counts a created item as a hit
		a.Touch, a.NewExpiry = touch, ExpiryAt(exp, now)
		read, found := it, err == nil
		var created bool
		switch {
		case errors.Is(err, engine.ErrNotFound) && a.Vivify || found && a.Wins(it):
			it, r.Won, created, err = st.Lease(r.Key, a, now, r.Res[:0]) // touches too
		case late && found: // no token to hand out: the touch alone
			it, err = st.TouchNoBump(r.Key, a.NewExpiry, now, r.Res[:0])
		}
		if found && !created && err == nil { // the read counted once, above: report the item as it found it
			it.Fetched, it.Accessed = read.Fetched, read.Accessed
		}
	}
	if r.Txt.Inspects() { // me: in no get figure, as memcached's
		if err == nil {
			r.SetItem(r.Key, it)
		}
		return err
	}
	calls.Add(1)
	switch {
	case errors.Is(err, engine.ErrNotFound):
		misses.Add(1)
		return err
	case err != nil:
		return err
	}
	hits.Add(1)
	r.SetItem(r.Key, it)
	return nil
}

// SetItem records the item a read found, read under key.
func (r *Request) SetItem(key []byte, it engine.Item) {
	r.Key, r.Res, r.Flags, r.CAS, r.Exp = key, it.Value, it.Flags, it.CAS, it.Expiry
	r.StaleItem, r.TokenSent = it.Stale, it.TokenSent
	r.Fetched, r.Accessed = it.Fetched, it.Accessed
}

// LeaseOf is the lease a meta get (txt) asks for at now (translate.Lease
// in the engine's terms); ok is false for any other command.
func LeaseOf(txt *translate.Reply, now uint32) (a engine.LeaseArgs, ok bool) {
	l, ok := txt.Lease()
	if !ok {
		return a, false
	}
	a.Vivify, a.VivifyExpiry, a.RecacheBefore = l.Vivify, ExpiryAt(l.Expiry, now), ExpiryAt(l.Recache, now)
	return a, true
}

// Peek looks key up in b's resident item cache for a read the event loop
// may answer (engine.Bucket.Peek) for a binary request (txt nil) or a text
// one. ok is false when the item is not resident, or when a meta get would
// win its token at now: it then writes the item, on a worker. A meta get's
// read counts in the item's fetch state once it is answered here, and not
// with u. A read answered here counts in the bucket's get figures (but a
// me's, as memcached's).
func Peek(b *catalog.Bucket, txt *translate.Reply, key []byte, now uint32, dst []byte) (it engine.Item, ok bool) {
	st := b.Store()
	switch {
	case txt == nil || !txt.MetaGet() && !txt.Inspects():
		it, ok = st.Peek(key, now, dst)
	case txt.Inspects():
		it, ok = st.PeekNoBump(key, now, dst)
	default:
		if it, ok = st.PeekNoBump(key, now, dst); !ok {
			return it, false
		}
		if a, _ := LeaseOf(txt, now); a.Wins(it) {
			return it, false
		}
		if txt.Bumps() {
			st.Bump(key, now)
		}
	}
	if ok && (txt == nil || !txt.Inspects()) {
		b.Counters.CmdGet.Add(1)
		b.Counters.GetHits.Add(1)
	}
	return it, ok
}

// storeMode is the engine's mode for op. A binary ADD with a CAS is a CAS
// store, as memcached's process_bin_update makes it: stored when the CAS
// matches, 0x02 when it does not, 0x01 when the item is missing. (Text's
// meta add mode ignores its C, as memcached's does: translate drops it.)
func storeMode(op binary.Opcode, cas uint64) engine.StoreMode {
	switch op {
	case binary.OpAdd:
		if cas != 0 {
			return engine.ModeSet
		}
		return engine.ModeAdd
	case binary.OpReplace:
		return engine.ModeReplace
	case binary.OpAppend:
		return engine.ModeAppend
	case binary.OpPrepend:
		return engine.ModePrepend
	}
	return engine.ModeSet
}

// Units sets r's read and write units from what it did, with rus and wus
// bytes per read and write unit (SPEC section 5). A failed command costs
// nothing.
func Units(r *Request, rus, wus int) {
	if r.Status != binary.StatusOK {
		return
	}
	k := len(r.Key)
	switch r.Hdr.Op.NonQuiet() {
	case binary.OpGet, binary.OpGetK:
		r.RU = UnitsOf(k+len(r.Res), rus)
		if r.Won { // a meta get that took the item's token (or made it) wrote it
			r.WU = UnitsOf(k+len(r.Res), wus)
		}
	case binary.OpSet, binary.OpAdd, binary.OpReplace:
		r.WU = UnitsOf(k+len(r.Value), wus)
	case binary.OpAppend, binary.OpPrepend:
		r.RU, r.WU = UnitsOf(k+r.Size-len(r.Value), rus), UnitsOf(k+r.Size, wus)
	case binary.OpDelete:
		r.WU = 1
	case binary.OpIncrement, binary.OpDecrement: // the value read, the digits written
		n := len(strconv.AppendUint(r.Res[:0], r.Num, 10))
		r.RU, r.WU = UnitsOf(k+r.Size, rus), UnitsOf(k+n, wus)
	case binary.OpTouch:
		r.WU = UnitsOf(k+len(r.Res), wus)
	case binary.OpGAT, binary.OpGATK:
		r.RU, r.WU = UnitsOf(k+len(r.Res), rus), UnitsOf(k+len(r.Res), wus)
	}
}

// UnitsOf is ceil(size/unit), at least 1.
func UnitsOf(size, unit int) int64 {
	return max(1, int64((size+unit-1)/unit))
}

// PendingUnits are the units a command is checked with before it runs: the
// write's size for SET-like commands, 1 otherwise (SPEC section 5).
func PendingUnits(req *binary.Request, writeUnit int) int64 {
	if IsStore(req.Opcode) {
		return UnitsOf(len(req.Key)+len(req.Value), writeUnit)
	}
	return 1
}

// IsStore reports whether op stores a value it carries: SET, ADD, REPLACE,
// APPEND, PREPEND and their quiet forms.
func IsStore(op binary.Opcode) bool {
	switch op.NonQuiet() {
	case binary.OpSet, binary.OpAdd, binary.OpReplace, binary.OpAppend, binary.OpPrepend:
		return true
	}
	return false
}

// IsData reports whether op is a data command: one that reads or writes
// items, is metered, throttled and admitted.
func IsData(op binary.Opcode) bool {
	switch op.NonQuiet() {
	case binary.OpGet, binary.OpGetK, binary.OpSet, binary.OpAdd, binary.OpReplace,
		binary.OpDelete, binary.OpIncrement, binary.OpDecrement, binary.OpAppend,
		binary.OpPrepend, binary.OpTouch, binary.OpGAT, binary.OpGATK:
		return true
	}
	return false
}

// IsLogin reports whether op belongs to a login: HELLO and the SASL
// commands, what a connection in the system band may send before it.
func IsLogin(op binary.Opcode) bool {
	return op == binary.OpHello || op == binary.OpSASLListMechs || op == binary.OpSASLAuth
}

// PoolOf is the ticket pool of a data command: reads from the read pool,
// every mutation (TOUCH and GAT included) from the write pool.
func PoolOf(op binary.Opcode) ingress.Pool {
	switch op.NonQuiet() {
	case binary.OpGet, binary.OpGetK:
		return ingress.Read
	}
	return ingress.Write
}

// ClassOf is a data command's latency class: its ticket pool's.
func ClassOf(op binary.Opcode) latency.Class {
	if PoolOf(op) == ingress.Read {
		return latency.Read
	}
	return latency.Write
}

// ChargeOf is what a command is charged against max_inflight_bytes: a write
// its value; a read (GET, GETK, GAT and their quiet forms), whose size is
// unknown yet, its bucket's estimate, settled once it has run.
func ChargeOf(req *binary.Request) int64 {
	if Estimated(req.Opcode) {
		return ingress.Estimate
	}
	return int64(len(req.Value))
}

// Estimated reports whether a command is charged an estimate (see ChargeOf).
func Estimated(op binary.Opcode) bool {
	switch op.NonQuiet() {
	case binary.OpGet, binary.OpGetK, binary.OpGAT, binary.OpGATK:
		return true
	}
	return false
}
