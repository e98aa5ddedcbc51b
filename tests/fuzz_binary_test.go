package tests

// The binary side of the multi-connection fuzzer: commands a binary
// connection sends, each with the check its reply must pass.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	mc "kvd/protocol/binary"
)

// binItem is one request of a pipeline and the check of its reply.
type binItem struct {
	req   *mc.Request
	quiet bool // may go unanswered (check gets nil)
	multi bool // STAT: frames with the same opaque until an empty key
	// xerror is whether the connection had XERROR when this was sent:
	// every error reply must then carry a JSON reason.
	xerror bool
	units  bool // ReportUnitUsage was on: replies may come in 0x18 framing
	check  func(res *mc.Response) error
	op     *fuzzOp // a data command on a private key: forgotten if unanswered
}

// fuzzPasswords are testConfig's users, as fuzzConfig repeats them.
var fuzzPasswords = map[string]string{"admin": "admin-pw", "alice": "alice-pw", "bob": "bob-pw"}

// fuzzCanSelect is who may select which bucket in fuzzConfig.
func fuzzCanSelect(user, bucket string) bool {
	switch user {
	case "":
		return bucket == "default"
	case "admin":
		return true
	case "alice":
		return bucket == "app"
	default:
		return bucket == "other" || bucket == "scratch"
	}
}

// next assigns the connection's next opaque (and the alt magic, now and
// then, once negotiated) and returns the request.
func (w *fuzzWorker) next(req *mc.Request) *mc.Request {
	w.c.opaque++
	req.Opaque = w.c.opaque
	req.Magic = mc.MagicRequest
	if w.c.alt && w.rng.IntN(3) == 0 && len(req.Key) <= 0xff { // alt framing: a one-byte key length
		req.Magic = mc.MagicAltRequest
	}
	return req
}

// want builds an item whose reply must have status st (and pass more, if
// not nil).
func (w *fuzzWorker) want(req *mc.Request, st mc.Status, more func(*mc.Response) error) binItem {
	return binItem{req: w.next(req), xerror: w.c.xerror, units: w.c.units, check: func(res *mc.Response) error {
		if res.Status != st {
			return fmt.Errorf("status 0x%02x %q, want 0x%02x", uint16(res.Status), short(string(res.Value)), uint16(st))
		}
		if more != nil {
			return more(res)
		}
		return nil
	}}
}

// genItem adds one random command to a pipeline. touched holds the keys
// already used in it (a valid CAS is only known for the others).
func (w *fuzzWorker) genItem(touched map[string]bool) binItem {
	switch d := w.rng.IntN(100); {
	case d < 72:
		return w.genData(touched)
	case d < 80:
		return w.genInvalid()
	case d < 87:
		return w.genControl()
	case d < 93:
		return w.genSession()
	default:
		return w.genAdmin()
	}
}

// fuzzKeys and fuzzCounters are how many private string and counter keys a
// worker uses per bucket.
const (
	fuzzKeys     = 24
	fuzzCounters = 6
)

// genData adds a data command on one of the worker's private keys.
func (w *fuzzWorker) genData(touched map[string]bool) binItem {
	op := &fuzzOp{bucket: w.c.bucket, key: w.key('k', w.rng.IntN(fuzzKeys))}
	ctr := w.key('c', w.rng.IntN(fuzzCounters))
	var req mc.Request
	quietOK := w.rng.IntN(3) == 0
	switch d := w.rng.IntN(100); {
	case d < 22:
		op.kind, req.Opcode = fkGet, pick(w.rng.IntN(4), mc.OpGet, mc.OpGetK, mc.OpGetQ, mc.OpGetKQ)
		if w.rng.IntN(4) == 0 {
			op.key = ctr
		}
	case d < 28:
		op.kind, op.expiry = fkGet, pick[uint32](w.rng.IntN(2), fuzzExpiryNone, fuzzExpiryHour)
		req.Opcode, req.Extras = pick(w.rng.IntN(2), mc.OpGAT, mc.OpGATQ), mc.AppendUint32(nil, op.expiry)
	case d < 50:
		w.genStore(op, &req, touched, ctr)
	case d < 58:
		op.kind, req.Opcode = fkDelete, pick(w.rng.IntN(2), mc.OpDelete, mc.OpDeleteQ)
	case d < 74:
		w.genArith(op, &req, ctr)
	case d < 88:
		op.kind, op.value = pick(w.rng.IntN(2), fkAppend, fkPrepend), w.value()
		req.Opcode, req.Value = pick(int(op.kind-fkAppend)*2+w.rng.IntN(2), mc.OpAppend, mc.OpAppendQ, mc.OpPrepend, mc.OpPrependQ), []byte(op.value)
	default:
		op.kind, op.expiry = fkTouch, pick[uint32](w.rng.IntN(4), fuzzExpiryNone, fuzzExpiryHour, fuzzExpiryHour, fuzzExpiryPast)
		req.Opcode, req.Extras = mc.OpTouch, mc.AppendUint32(nil, op.expiry)
	}
	if req.Opcode.IsQuiet() && !quietOK {
		req.Opcode = req.Opcode.NonQuiet()
	}
	op.quiet = req.Opcode.IsQuiet()
	req.Key = []byte(op.key)
	touched[op.key] = true
	return w.dataItem(op, &req)
}

// genStore fills a SET/ADD/REPLACE: a string or, for counter keys, a
// number (now and then near 2^64 so that INCR wraps); a SET now and then
// carries the CAS last seen, or one that cannot match, or an expiry.
func (w *fuzzWorker) genStore(op *fuzzOp, req *mc.Request, touched map[string]bool, ctr string) {
	op.kind = pick(w.rng.IntN(6), fkSet, fkSet, fkSet, fkSet, fkAdd, fkReplace)
	op.value = w.value()
	if w.rng.IntN(3) == 0 {
		op.key = ctr
		op.value = strconv.FormatUint(uint64(w.rng.IntN(100000)), 10)
		if w.rng.IntN(4) == 0 {
			op.value = strconv.FormatUint(1<<64-1-uint64(w.rng.IntN(50)), 10)
		}
	}
	if op.kind == fkSet {
		it := w.model.item(op.bucket, op.key)
		switch w.rng.IntN(10) {
		case 0:
			op.cas = 0x0bad0bad0bad0bad
		case 1, 2:
			if it.cas != 0 && !it.unknown && !touched[op.key] && op.bucket != "scratch" {
				op.cas = it.cas
			}
		case 3:
			op.expiry = pick[uint32](w.rng.IntN(2), fuzzExpiryHour, fuzzExpiryPast)
		}
	}
	quiet := []mc.Opcode{mc.OpSetQ, mc.OpAddQ, mc.OpReplaceQ}[min(int(op.kind-fkSet), 2)]
	loud := quiet.NonQuiet()
	req.Opcode, req.CAS = pick(w.rng.IntN(2), loud, quiet), op.cas
	req.Extras, req.Value = mc.AppendSetExtras(nil, uint32(w.rng.IntN(3)), op.expiry), []byte(op.value)
}

// genArith fills an INCR/DECR, mostly of a counter, now and then of a
// string key (non-numeric) or with no-create.
func (w *fuzzWorker) genArith(op *fuzzOp, req *mc.Request, ctr string) {
	op.kind = pick(w.rng.IntN(2), fkIncr, fkDecr)
	if w.rng.IntN(6) != 0 {
		op.key = ctr
	}
	op.delta, op.initial = uint64(w.rng.IntN(1000)), uint64(w.rng.IntN(100))
	expiry := uint32(0)
	if w.rng.IntN(8) == 0 {
		op.noCreate, expiry = true, 0xffffffff
	}
	req.Opcode = pick(int(op.kind-fkIncr)*2+w.rng.IntN(2), mc.OpIncrement, mc.OpIncrementQ, mc.OpDecrement, mc.OpDecrementQ)
	req.Extras = mc.AppendArithExtras(nil, op.delta, op.initial, expiry)
}

// dataItem wraps a data command: judged by the model on a bucket the
// worker owns keys in, loosely in "scratch" (which others FLUSH), and
// refused with 0x08 when no bucket is selected.
func (w *fuzzWorker) dataItem(op *fuzzOp, req *mc.Request) binItem {
	it := binItem{req: w.next(req), quiet: op.quiet, xerror: w.c.xerror, units: w.c.units, op: op}
	switch op.bucket {
	case "":
		it.op = nil
		it.check = func(res *mc.Response) error {
			if res == nil || res.Status != mc.StatusNoBucket {
				return fmt.Errorf("no bucket selected: got %s, want status 0x08", describeMaybe(res))
			}
			return nil
		}
	case "scratch":
		it.check = func(res *mc.Response) error { return looseData(op, res) }
	default:
		it.check = func(res *mc.Response) error { return w.judgeBinary(op, res) }
	}
	return it
}

func (w *fuzzWorker) judgeBinary(op *fuzzOp, res *mc.Response) error {
	r := fuzzResult{}
	if res != nil {
		r = fuzzResult{replied: true, status: res.Status, value: res.Value, cas: res.CAS}
		arith := op.kind == fkIncr || op.kind == fkDecr
		if arith && res.Status == mc.StatusOK {
			if r.number = binaryNumber(res.Value); r.number == nil {
				return fmt.Errorf("%v answered %d value bytes, want 8", res.Opcode, len(res.Value))
			}
		}
		getk := res.Opcode == mc.OpGetK || res.Opcode == mc.OpGetKQ
		if getk && (res.Status == mc.StatusOK || res.Status == mc.StatusKeyNotFound) && string(res.Key) != op.key {
			return fmt.Errorf("%v echoed key %q, want %q: %s", res.Opcode, res.Key, op.key, describeMaybe(res))
		}
	}
	return w.model.judge(op, &r)
}

// looseData checks a reply in a bucket other workers FLUSH: any status a
// data command can have.
func looseData(op *fuzzOp, res *mc.Response) error {
	if res == nil {
		return nil
	}
	switch res.Status {
	case mc.StatusOK, mc.StatusKeyNotFound, mc.StatusKeyExists, mc.StatusNotStored, mc.StatusNonNumeric:
		return nil
	}
	if fuzzRefusal(res.Status) {
		return nil
	}
	return fmt.Errorf("%v %q in scratch: status 0x%02x", op.kind, op.key, uint16(res.Status))
}

// genInvalid adds a well-framed command the server must refuse and go on:
// unknown opcodes, wrong extras, keys too long or empty, a value over the
// item size, an odd HELLO, an unknown frame info.
func (w *fuzzWorker) genInvalid() binItem {
	w.f.invalid.Add(1)
	key := w.key('k', w.rng.IntN(fuzzKeys))
	inval := func(req *mc.Request) binItem {
		st := mc.StatusInvalidArguments
		if w.c.bucket == "" && req.Opcode != mc.OpNoop && req.Opcode != mc.OpHello {
			return w.oneOf(req, mc.StatusInvalidArguments, mc.StatusNoBucket)
		}
		return w.want(req, st, nil)
	}
	switch w.rng.IntN(9) {
	case 0:
		op := pick(w.rng.IntN(5), 0x5f, 0x22, 0x40, 0xfe, 0x8f)
		return w.want(&mc.Request{Opcode: mc.Opcode(op), Key: []byte(key), Value: w.garbage(20)}, mc.StatusUnknownCommand, nil)
	case 1:
		return inval(&mc.Request{Opcode: mc.OpGet, Key: []byte(key), Extras: []byte{1, 2, 3, 4}})
	case 2:
		return inval(&mc.Request{Opcode: mc.OpNoop, Extras: w.garbage(4)})
	case 3:
		return inval(&mc.Request{Opcode: mc.OpSet, Key: []byte(key), Extras: []byte{0, 0, 0}, Value: []byte("v")})
	case 4:
		return inval(&mc.Request{Opcode: mc.OpIncrement, Key: []byte(key), Extras: make([]byte, 8)})
	case 5:
		return inval(&mc.Request{Opcode: mc.OpGet, Key: bytes.Repeat([]byte("k"), 251+w.rng.IntN(100))})
	case 6:
		return inval(&mc.Request{Opcode: mc.OpGet})
	case 7:
		return inval(&mc.Request{Opcode: mc.OpHello, Key: []byte("fuzz"), Value: []byte{0, 7, 0}})
	default:
		if w.c.alt {
			req := w.next(&mc.Request{Opcode: mc.OpGet, Key: []byte(key), FrameInfo: []byte{0x91, 0x00}})
			req.Magic = mc.MagicAltRequest
			return binItem{req: req, xerror: w.c.xerror, units: w.c.units, check: statusIs(mc.StatusUnknownFrameInfo)}
		}
		return w.tooBig(key)
	}
}

// tooBig is a SET over max_item_size: 0x03, the connection stays, and the
// key's state is unknown (memcached drops the old item on such a SET).
func (w *fuzzWorker) tooBig(key string) binItem {
	op := &fuzzOp{kind: fkSet, bucket: w.c.bucket, key: key}
	if w.rng.IntN(10) != 0 || op.bucket == "" { // 1 MiB each: rare
		return w.want(&mc.Request{Opcode: mc.OpNoop}, mc.StatusOK, nil)
	}
	req := &mc.Request{Opcode: mc.OpSet, Key: []byte(key), Extras: mc.AppendSetExtras(nil, 0, 0),
		Value: bytes.Repeat([]byte("B"), defaultMaxItemSize+1)}
	it := w.want(req, mc.StatusTooBig, nil)
	it.op = op
	check := it.check
	it.check = func(res *mc.Response) error {
		w.model.forget(op.bucket, op.key)
		return check(res)
	}
	return it
}

// oneOf is an item whose reply may have any of the statuses.
func (w *fuzzWorker) oneOf(req *mc.Request, sts ...mc.Status) binItem {
	return binItem{req: w.next(req), xerror: w.c.xerror, units: w.c.units, check: func(res *mc.Response) error {
		for _, st := range sts {
			if res.Status == st {
				return nil
			}
		}
		return fmt.Errorf("status 0x%02x %q, want one of %x", uint16(res.Status), short(string(res.Value)), sts)
	}}
}

func statusIs(st mc.Status) func(*mc.Response) error {
	return func(res *mc.Response) error {
		if res.Status != st {
			return fmt.Errorf("status 0x%02x, want 0x%02x", uint16(res.Status), uint16(st))
		}
		return nil
	}
}

// checkErrorBody is SPEC's rule for error replies: a reason, as JSON
// {"error":{"context":…}} when the client negotiated XERROR (a GETK/GATK
// miss without it carries the key and no body, as memcached's).
func checkErrorBody(res *mc.Response, xerror bool) error {
	if res.Status == mc.StatusOK {
		return nil
	}
	keyedMiss := res.Status == mc.StatusKeyNotFound && len(res.Key) > 0 // GETK/GATK: key and no body, as memcached
	if len(res.Value) == 0 && !(keyedMiss && !xerror) {
		return fmt.Errorf("%v error 0x%02x with an empty body", res.Opcode, uint16(res.Status))
	}
	if !xerror || res.Status == mc.StatusWouldThrottle {
		return nil
	}
	var doc struct {
		Error struct {
			Context string `json:"context"`
		} `json:"error"`
	}
	if err := json.Unmarshal(res.Value, &doc); err != nil || strings.TrimSpace(doc.Error.Context) == "" {
		return fmt.Errorf("%v error 0x%02x under XERROR: body %q is not {\"error\":{\"context\":…}}", res.Opcode, uint16(res.Status), short(string(res.Value)))
	}
	return nil
}

func describeMaybe(res *mc.Response) string {
	if res == nil {
		return "no reply"
	}
	return describeReplies([]*mc.Response{res})
}

func pick[T any](i int, xs ...T) T { return xs[i] }
