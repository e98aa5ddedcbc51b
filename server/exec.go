package server

import (
	"errors"

	"kvd/engine"
	"kvd/protocol/binary"
)

// relativeExpiryLimit is memcached's rule: expiry values up to 30 days are
// relative to now, larger ones are absolute Unix times.
const relativeExpiryLimit = 30 * 24 * 3600

// noCreate is INCR/DECR's expiry meaning "fail instead of creating".
const noCreate = 0xffffffff

// expiryAt converts a protocol expiry into an absolute Unix time (0 = never).
// An absolute time in the past stays in the past: the item is born expired.
func expiryAt(exp, now uint32) uint32 {
	switch {
	case exp == 0:
		return 0
	case exp <= relativeExpiryLimit:
		return now + exp
	default:
		return exp
	}
}

// exec runs one data command against bk on a worker goroutine, recording
// its result in r.
func (s *Server) exec(bk *bucket, r *request, now uint32) {
	op := r.hdr.op.NonQuiet()
	var err error
	switch op {
	case binary.OpGet, binary.OpGetK:
		err = s.execGet(bk, r, now)
	case binary.OpSet, binary.OpAdd, binary.OpReplace:
		bk.cmdSet.Add(1)
		flags, exp, _ := binary.SetExtras(r.extras)
		r.cas, err = bk.store.Store(storeMode(op), r.key, r.value, flags, expiryAt(exp, now), r.hdr.cas, now)
	case binary.OpAppend, binary.OpPrepend:
		bk.cmdSet.Add(1)
		r.cas, r.size, err = bk.store.StoreN(storeMode(op), r.key, r.value, 0, 0, r.hdr.cas, now)
	case binary.OpDelete:
		err = bk.store.Delete(r.key, r.hdr.cas, now)
	case binary.OpIncrement, binary.OpDecrement:
		delta, initial, exp, _ := binary.ArithExtras(r.extras)
		r.num, r.cas, err = bk.store.Arith(r.key, op == binary.OpIncrement, delta, initial,
			expiryAt(exp, now), exp != noCreate, r.hdr.cas, now)
	case binary.OpTouch, binary.OpGAT:
		err = s.execTouch(bk, r, now)
	}
	if err != nil {
		r.status, r.reason = statusOf(err)
		return
	}
	r.mut = op != binary.OpGet && op != binary.OpGetK
}

func (s *Server) execGet(bk *bucket, r *request, now uint32) error {
	bk.cmdGet.Add(1)
	it, err := bk.store.Get(r.key, now, r.res[:0])
	if err != nil {
		if errors.Is(err, engine.ErrNotFound) {
			bk.getMisses.Add(1)
		}
		return err
	}
	bk.getHits.Add(1)
	r.res, r.flags, r.cas = it.Value, it.Flags, it.CAS
	return nil
}

func (s *Server) execTouch(bk *bucket, r *request, now uint32) error {
	bk.cmdTouch.Add(1)
	exp, _ := binary.TouchExtras(r.extras)
	it, err := bk.store.Touch(r.key, expiryAt(exp, now), now, r.res[:0])
	if err != nil {
		if errors.Is(err, engine.ErrNotFound) {
			bk.touchMisses.Add(1)
		}
		return err
	}
	bk.touchHits.Add(1)
	r.res, r.flags, r.cas = it.Value, it.Flags, it.CAS
	return nil
}

func storeMode(op binary.Opcode) engine.StoreMode {
	switch op {
	case binary.OpAdd:
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

// appendResult encodes r's reply, or nothing for a quiet command that
// succeeded (or missed, for the quiet reads).
func (c *conn) appendResult(dst []byte, r *request) []byte {
	h, op := r.hdr, r.hdr.op.NonQuiet()
	quiet := h.op.IsQuiet()
	isRead := op == binary.OpGet || op == binary.OpGetK || op == binary.OpGAT
	if r.status != binary.StatusOK {
		if quiet && isRead && r.status == binary.StatusKeyNotFound {
			return dst
		}
		var key []byte
		if op == binary.OpGetK {
			key = r.key
		}
		return c.appendError(dst, h, r.status, r.reason, key)
	}
	switch {
	case op == binary.OpTouch && !quiet:
		var ex [4]byte // memcached answers TOUCH with the item's flags
		return c.appendMetered(dst, r, r.cas, binary.AppendUint32(ex[:0], r.flags), nil, nil)
	case isRead:
		var key []byte
		if op == binary.OpGetK {
			key = r.key
		}
		var ex [4]byte
		return c.appendMetered(dst, r, r.cas, binary.AppendUint32(ex[:0], r.flags), key, r.res)
	case quiet:
		return dst
	case op == binary.OpIncrement || op == binary.OpDecrement:
		var v [8]byte
		return c.appendMetered(dst, r, r.cas, nil, nil, binary.AppendUint64(v[:0], r.num))
	default:
		return c.appendMetered(dst, r, r.cas, nil, nil, nil)
	}
}
