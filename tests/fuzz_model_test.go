package tests

// The shadow model of the multi-connection fuzzer (fuzz_test.go): what each
// worker's private keys must hold, judged reply by reply.

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"strconv"

	mc "kvd/protocol/binary"
)

// fuzzKind is a data command in protocol-neutral form: binary and text
// commands on the same keys are judged by the same rules.
type fuzzKind uint8

const (
	fkGet fuzzKind = iota // GET, GETK, GAT (with a touch) and text get/gat/mg
	fkSet
	fkAdd
	fkReplace
	fkAppend
	fkPrepend
	fkDelete
	fkIncr
	fkDecr
	fkTouch
)

var fuzzKindNames = [...]string{"get", "set", "add", "replace", "append", "prepend", "delete", "incr", "decr", "touch"}

func (k fuzzKind) String() string { return fuzzKindNames[k] }

// Expiry times the fuzzer uses: none, an hour (alive for any run) and an
// absolute time in 1970 (the item is born expired, or a touch expires it).
const (
	fuzzExpiryNone = 0
	fuzzExpiryHour = 3600
	fuzzExpiryPast = 30*24*3600 + 1
)

// fuzzOp is one data command on a private key.
type fuzzOp struct {
	kind     fuzzKind
	bucket   string
	key      string
	value    string
	cas      uint64 // SET with a CAS: the one last seen, or one that cannot match
	delta    uint64
	initial  uint64
	noCreate bool   // INCR/DECR expiry 0xffffffff
	expiry   uint32 // SET, TOUCH, GAT
	quiet    bool   // binary quiet variant: silent on success, GETQ also on a miss
}

// fuzzResult is what the server answered to a fuzzOp, in binary terms.
type fuzzResult struct {
	replied bool
	status  mc.Status
	value   []byte
	number  *uint64 // INCR/DECR: the value it answered
	cas     uint64
}

// fuzzItem is the shadow of one private key.
type fuzzItem struct {
	exists  bool
	value   string
	cas     uint64 // 0: not known
	unknown bool   // a command on it went unanswered; the next read learns its state
}

// fuzzModel holds a worker's private keys per bucket. Only the worker
// touches them, so every read must return what its own acknowledged writes
// left there, whatever other connections send.
type fuzzModel struct {
	buckets  map[string]map[string]*fuzzItem
	checks   int64 // replies judged against a known state
	refusals int64 // data commands refused (throttled, queue full or timed out)
}

func newFuzzModel() *fuzzModel { return &fuzzModel{buckets: map[string]map[string]*fuzzItem{}} }

func (m *fuzzModel) item(bucket, key string) *fuzzItem {
	b := m.buckets[bucket]
	if b == nil {
		b = map[string]*fuzzItem{}
		m.buckets[bucket] = b
	}
	it := b[key]
	if it == nil {
		it = &fuzzItem{}
		b[key] = it
	}
	return it
}

// forget marks a key unknown: a command on it was sent but never answered.
func (m *fuzzModel) forget(bucket, key string) {
	it := m.item(bucket, key)
	*it = fuzzItem{unknown: true}
}

// dropBucket forgets a deleted bucket's keys.
func (m *fuzzModel) dropBucket(bucket string) { delete(m.buckets, bucket) }

// fuzzTraceKey (KVD_FUZZ_TRACE) names a private key whose every judged
// command the fuzzer prints, to replay a failure's history.
var fuzzTraceKey = os.Getenv("KVD_FUZZ_TRACE")

// fuzzRefusal reports statuses that mean "not executed": throttling,
// admission and memory refusals. The model does not change.
func fuzzRefusal(st mc.Status) bool {
	switch st {
	case mc.StatusWouldThrottle, mc.StatusBusy, mc.StatusTemporaryFailure, mc.StatusOutOfMemory:
		return true
	}
	return false
}

// judge checks the server's answer r to op against the model and applies
// op's effect. A command that got no reply counts as a success for a quiet
// mutation and as a miss for a quiet read.
func (m *fuzzModel) judge(op *fuzzOp, r *fuzzResult) error {
	if op.key == fuzzTraceKey {
		it := m.item(op.bucket, op.key)
		fmt.Fprintf(os.Stderr, "trace %s %q: %v value=%q cas=%d expiry=%d delta=%d quiet=%v -> replied=%v status=0x%02x value=%q; model exists=%v value=%q unknown=%v\n",
			op.bucket, op.key, op.kind, short(op.value), op.cas, op.expiry, op.delta, op.quiet, r.replied, uint16(r.status), short(string(r.value)), it.exists, short(it.value), it.unknown)
	}
	if r.replied && fuzzRefusal(r.status) {
		m.refusals++
		return nil
	}
	got := r.status
	if !r.replied {
		got = mc.StatusOK
		if op.kind == fkGet {
			got = mc.StatusKeyNotFound
		}
	}
	it := m.item(op.bucket, op.key)
	if it.unknown {
		m.learn(it, op, got, r)
		return nil
	}
	m.checks++
	want, next := expectFuzz(it, op)
	if got != want {
		return fmt.Errorf("%v %q in %s: status 0x%02x, model says 0x%02x (item exists=%v value=%q)",
			op.kind, op.key, op.bucket, uint16(got), uint16(want), it.exists, short(it.value))
	}
	if got == mc.StatusOK && op.kind == fkGet && r.replied && !sameValue(r.value, it.value) {
		return fmt.Errorf("%v %q in %s: value %q, model says %q", op.kind, op.key, op.bucket, short(string(r.value)), short(it.value))
	}
	if got == mc.StatusOK && (op.kind == fkIncr || op.kind == fkDecr) && r.number != nil {
		if want := strconv.FormatUint(*r.number, 10); want != next.value {
			return fmt.Errorf("%v %q in %s: answered %s, model says %s", op.kind, op.key, op.bucket, want, next.value)
		}
	}
	*it = next
	m.noteCAS(it, op, got, r)
	return nil
}

// noteCAS remembers the CAS a loud SET or read answered; any other change
// makes it unknown (the model never guesses a CAS).
func (m *fuzzModel) noteCAS(it *fuzzItem, op *fuzzOp, got mc.Status, r *fuzzResult) {
	if got != mc.StatusOK {
		return
	}
	switch {
	case r.replied && (op.kind == fkGet || op.kind == fkSet):
		it.cas = r.cas
	case op.kind != fkGet:
		it.cas = 0
	}
}

// learn is judge for an unknown key: any answer is plausible, and a read
// or a SET tells the model the key's state again.
func (m *fuzzModel) learn(it *fuzzItem, op *fuzzOp, got mc.Status, r *fuzzResult) {
	switch {
	case op.kind == fkGet && got == mc.StatusOK && r.replied:
		*it = fuzzItem{exists: true, value: string(r.value), cas: r.cas}
	case op.kind == fkGet && got == mc.StatusKeyNotFound:
		*it = fuzzItem{}
	case op.kind == fkSet && op.cas == 0 && got == mc.StatusOK:
		*it = fuzzItem{exists: op.expiry != fuzzExpiryPast, value: op.value}
	case op.kind == fkDelete && (got == mc.StatusOK || got == mc.StatusKeyNotFound):
		*it = fuzzItem{}
	}
}

// expectFuzz is memcached's semantics: the status op must get on item it,
// and the item afterwards.
func expectFuzz(it *fuzzItem, op *fuzzOp) (mc.Status, fuzzItem) {
	next, missing := *it, !it.exists
	store := func(v string) (mc.Status, fuzzItem) {
		return mc.StatusOK, fuzzItem{exists: op.expiry != fuzzExpiryPast, value: v}
	}
	switch op.kind {
	case fkGet:
		if missing {
			return mc.StatusKeyNotFound, next
		}
		return mc.StatusOK, next
	case fkSet:
		switch {
		case op.cas != 0 && missing:
			return mc.StatusKeyNotFound, next
		case op.cas != 0 && op.cas != it.cas:
			return mc.StatusKeyExists, next
		}
		return store(op.value)
	case fkAdd:
		if !missing {
			return mc.StatusKeyExists, next
		}
		return store(op.value)
	case fkReplace:
		if missing {
			return mc.StatusKeyNotFound, next
		}
		return store(op.value)
	case fkAppend, fkPrepend:
		if missing {
			return mc.StatusNotStored, next
		}
		if op.kind == fkAppend {
			next.value = it.value + op.value
		} else {
			next.value = op.value + it.value
		}
		return mc.StatusOK, next
	case fkDelete:
		if missing {
			return mc.StatusKeyNotFound, next
		}
		return mc.StatusOK, fuzzItem{}
	case fkIncr, fkDecr:
		return expectArith(it, op)
	default: // fkTouch
		if missing {
			return mc.StatusKeyNotFound, next
		}
		if op.expiry == fuzzExpiryPast {
			next = fuzzItem{}
		}
		return mc.StatusOK, next
	}
}

func expectArith(it *fuzzItem, op *fuzzOp) (mc.Status, fuzzItem) {
	if !it.exists {
		if op.noCreate {
			return mc.StatusKeyNotFound, *it
		}
		return mc.StatusOK, fuzzItem{exists: true, value: strconv.FormatUint(op.initial, 10)}
	}
	n, ok := fuzzNumber(it.value)
	if !ok {
		return mc.StatusNonNumeric, *it
	}
	if op.kind == fkIncr {
		n += op.delta
	} else {
		n -= min(n, op.delta)
	}
	return mc.StatusOK, fuzzItem{exists: true, value: strconv.FormatUint(n, 10)}
}

// fuzzNumber parses a counter as memcached does (trailing spaces allowed:
// memcached pads a DECR result that got shorter).
func fuzzNumber(v string) (uint64, bool) {
	n, err := strconv.ParseUint(string(bytes.TrimRight([]byte(v), " ")), 10, 64)
	return n, err == nil && v != ""
}

// sameValue compares a value read back with the model's, forgiving the
// padding of a counter that a DECR shortened.
func sameValue(got []byte, want string) bool {
	if string(got) == want {
		return true
	}
	_, isNum := fuzzNumber(want)
	return isNum && string(bytes.TrimRight(got, " ")) == want
}

// binaryNumber decodes an INCR/DECR reply's 8-byte value.
func binaryNumber(v []byte) *uint64 {
	if len(v) != 8 {
		return nil
	}
	n := binary.BigEndian.Uint64(v)
	return &n
}

func short(s string) string {
	if len(s) > 40 {
		return fmt.Sprintf("%s…(%d bytes)", s[:40], len(s))
	}
	return s
}
