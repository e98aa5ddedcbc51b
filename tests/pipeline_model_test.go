package tests

// The pipeline generator and its memcached model, used by pipeline_test.go.

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	mc "kvd/protocol/binary"
)

// pipelineLen is the number of commands in one pipeline, the final NOOP
// included.
const pipelineLen = 1000

// wantReply is one reply a pipelined command must produce.
type wantReply struct {
	op     mc.Opcode
	opaque uint32
	status mc.Status
	key    string // GETK/GETKQ hits: the key echoed
	value  []byte // checked when check is set: GET hits, INCR results
	check  bool
	// counter marks a counter's value: memcached pads a DECR result that got
	// shorter with spaces in place, which the reference comparison forgives.
	counter bool
}

func (w wantReply) String() string {
	return fmt.Sprintf("%v opaque=%d status=0x%02x", w.op, w.opaque, uint16(w.status))
}

// pipelineModel generates a random pipeline and, from memcached's
// semantics, the replies it must produce.
type pipelineModel struct {
	rng   *rand.Rand
	items map[string]string
	reqs  []*mc.Request
	want  []wantReply
	pipelineMix
}

// pipelineMix selects the commands buildPipelineMix generates beyond step's.
type pipelineMix struct {
	more bool // also stepMore's commands
	// wrap lets stepMore set counters near 2^64 so that INCR wraps. Debian's
	// memcached 1.6.18 sometimes answers 0x06 to an INCR right after such a
	// SET under load (a reference-server flake), so the comparison with it
	// runs without.
	wrap bool
}

// buildPipeline returns pipelineLen requests over keys starting with prefix
// (a fresh keyspace is assumed) and their expected replies. The requests
// use magic (MagicRequest or MagicAltRequest) and opaques 1..pipelineLen.
func buildPipeline(seed uint64, prefix string, magic uint8) ([]*mc.Request, []wantReply) {
	return buildPipelineMix(seed, prefix, magic, pipelineMix{})
}

// buildPipelineMix is buildPipeline with the commands mix asks for.
func buildPipelineMix(seed uint64, prefix string, magic uint8, mix pipelineMix) ([]*mc.Request, []wantReply) {
	m := &pipelineModel{rng: rand.New(rand.NewPCG(seed, 7)), items: map[string]string{}, pipelineMix: mix}
	for len(m.reqs) < pipelineLen-1 {
		if m.more && m.rng.IntN(2) == 0 {
			m.stepMore(prefix)
		} else {
			m.step(prefix)
		}
	}
	m.add(&mc.Request{Opcode: mc.OpNoop}, &wantReply{status: mc.StatusOK})
	for _, r := range m.reqs {
		r.Magic = magic
	}
	return m.reqs, m.want
}

// add appends req with the next opaque; reply, when not nil, is the reply
// it must get (op and opaque are filled in here).
func (m *pipelineModel) add(req *mc.Request, reply *wantReply) {
	req.Opaque = uint32(len(m.reqs) + 1)
	m.reqs = append(m.reqs, req)
	if reply != nil {
		reply.op, reply.opaque = req.Opcode, req.Opaque
		m.want = append(m.want, *reply)
	}
}

func (m *pipelineModel) value() string {
	n := 1 + m.rng.IntN(60)
	if m.rng.IntN(20) == 0 {
		n = 1000 + m.rng.IntN(5000) // a few values that span several reads
	}
	v := make([]byte, n)
	v[0] = 'v' // never numeric
	for i := 1; i < n; i++ {
		v[i] = byte('a' + m.rng.IntN(26))
	}
	return string(v)
}

// step adds one random command. String keys hold non-numeric values;
// counter keys are touched by INCR and (rarely) SET with a number. (Long
// because it is a table: one short case per command kind.)
func (m *pipelineModel) step(prefix string) {
	key := fmt.Sprintf("%sk%d", prefix, m.rng.IntN(60))
	ctr := fmt.Sprintf("%sc%d", prefix, m.rng.IntN(8))
	old, exists := m.items[key]
	switch d := m.rng.IntN(100); {
	case d < 14: // GETQ: reply only on a hit
		isCtr := m.rng.IntN(4) == 0
		if isCtr {
			key, old, exists = ctr, m.items[ctr], m.has(ctr)
		}
		reply := m.hit(exists, "", old)
		if reply != nil {
			reply.counter = isCtr
		}
		m.add(&mc.Request{Opcode: mc.OpGetQ, Key: []byte(key)}, reply)
	case d < 26: // GETKQ: reply only on a hit, with the key
		m.add(&mc.Request{Opcode: mc.OpGetKQ, Key: []byte(key)}, m.hit(exists, key, old))
	case d < 40: // SETQ: silent
		v := m.value()
		m.add(&mc.Request{Opcode: mc.OpSetQ, Key: []byte(key), Extras: mc.AppendSetExtras(nil, 0, 0), Value: []byte(v)}, nil)
		m.items[key] = v
	case d < 48: // SET: always answered
		v := m.value()
		if m.rng.IntN(5) == 0 {
			key, v = ctr, strconv.Itoa(m.rng.IntN(1000))
		}
		m.add(&mc.Request{Opcode: mc.OpSet, Key: []byte(key), Extras: mc.AppendSetExtras(nil, 0, 0), Value: []byte(v)},
			&wantReply{status: mc.StatusOK})
		m.items[key] = v
	case d < 58: // ADDQ: answered only when the key exists
		v := m.value()
		var reply *wantReply
		if exists {
			reply = &wantReply{status: mc.StatusKeyExists}
		} else {
			m.items[key] = v
		}
		m.add(&mc.Request{Opcode: mc.OpAddQ, Key: []byte(key), Extras: mc.AppendSetExtras(nil, 0, 0), Value: []byte(v)}, reply)
	case d < 68: // DELETEQ: answered only when the key is missing
		var reply *wantReply
		if !exists {
			reply = &wantReply{status: mc.StatusKeyNotFound}
		}
		delete(m.items, key)
		m.add(&mc.Request{Opcode: mc.OpDeleteQ, Key: []byte(key)}, reply)
	case d < 80: // INCR: counters, sometimes a string key (non-numeric) or no-create
		m.incr(key, ctr, fmt.Sprintf("%sn%d", prefix, m.rng.IntN(1000)))
	case d < 87: // APPENDQ: answered only when the key is missing
		v := m.value()
		var reply *wantReply
		if exists {
			m.items[key] = old + v
		} else {
			reply = &wantReply{status: mc.StatusNotStored}
		}
		m.add(&mc.Request{Opcode: mc.OpAppendQ, Key: []byte(key), Value: []byte(v)}, reply)
	case d < 90: // control commands between data commands: always answered, in order
		op := mc.OpNoop
		if m.rng.IntN(2) == 0 {
			op = mc.OpVersion
		}
		m.add(&mc.Request{Opcode: op}, &wantReply{status: mc.StatusOK})
	default: // GET: always answered
		isCtr := m.rng.IntN(3) == 0
		if isCtr {
			key, old, exists = ctr, m.items[ctr], m.has(ctr)
		}
		reply := &wantReply{status: mc.StatusKeyNotFound}
		if exists {
			reply = &wantReply{status: mc.StatusOK, value: []byte(old), check: true, counter: isCtr}
		}
		m.add(&mc.Request{Opcode: mc.OpGet, Key: []byte(key)}, reply)
	}
}

func (m *pipelineModel) has(key string) bool { _, ok := m.items[key]; return ok }

// hit is the reply of a quiet read: none on a miss.
func (m *pipelineModel) hit(exists bool, key, value string) *wantReply {
	if !exists {
		return nil
	}
	return &wantReply{status: mc.StatusOK, key: key, value: []byte(value), check: true}
}

// Expiry values for stepMore: over 30 days they are absolute Unix times.
const (
	expiryAbsolutePast = 30*24*3600 + 1 // 1970: the item is born expired
	expiryRelative     = 3600           // an hour from now: alive for the test
)

// stepMore adds one command from the rest of the protocol: DECR (floor at
// 0), INCR wrapping at 2^64, INCRQ, REPLACEQ, PREPENDQ, loud DELETE and
// GETK, TOUCH, GAT, GATQ, SET with a wrong CAS, and expiry handling. (Long
// because it is a table, like step.)
func (m *pipelineModel) stepMore(prefix string) {
	key := fmt.Sprintf("%sk%d", prefix, m.rng.IntN(60))
	ctr := fmt.Sprintf("%sc%d", prefix, m.rng.IntN(8))
	old, exists := m.items[key]
	ext := mc.AppendSetExtras(nil, 0, 0)
	switch d := m.rng.IntN(12); d {
	case 0: // DECR: stops at 0; creates with the initial value
		delta, initial := uint64(m.rng.IntN(300)), uint64(m.rng.IntN(50))
		m.arith(&mc.Request{Opcode: mc.OpDecrement, Key: []byte(ctr), Extras: mc.AppendArithExtras(nil, delta, initial, 0)},
			func(n uint64) uint64 { return n - min(n, delta) }, initial)
	case 1: // INCRQ, sometimes after a SETQ near 2^64 so that it wraps
		if m.rng.IntN(3) == 0 {
			base := uint64(1<<64 - 1)
			if !m.wrap {
				base = 1000
			}
			v := strconv.FormatUint(base-uint64(m.rng.IntN(5)), 10)
			m.add(&mc.Request{Opcode: mc.OpSetQ, Key: []byte(ctr), Extras: ext, Value: []byte(v)}, nil)
			m.items[ctr] = v
		}
		delta := uint64(1 + m.rng.IntN(10))
		m.arith(&mc.Request{Opcode: mc.OpIncrementQ, Key: []byte(ctr), Extras: mc.AppendArithExtras(nil, delta, 3, 0)},
			func(n uint64) uint64 { return n + delta }, 3)
	case 2: // REPLACEQ: answered only when missing
		v := m.value()
		m.add(&mc.Request{Opcode: mc.OpReplaceQ, Key: []byte(key), Extras: ext, Value: []byte(v)}, m.unless(exists, mc.StatusKeyNotFound))
		if exists {
			m.items[key] = v
		}
	case 3: // PREPENDQ: answered only when missing
		v := m.value()
		m.add(&mc.Request{Opcode: mc.OpPrependQ, Key: []byte(key), Value: []byte(v)}, m.unless(exists, mc.StatusNotStored))
		if exists {
			m.items[key] = v + old
		}
	case 4: // DELETE: always answered
		m.add(&mc.Request{Opcode: mc.OpDelete, Key: []byte(key)}, &wantReply{status: m.found(exists)})
		delete(m.items, key)
	case 5: // GETK: always answered, with the key even on a miss
		reply := &wantReply{status: m.found(exists), key: key}
		if exists {
			reply.value, reply.check = []byte(old), true
		}
		m.add(&mc.Request{Opcode: mc.OpGetK, Key: []byte(key)}, reply)
	case 6: // TOUCH: answered; an absolute time in the past expires the item
		exp := uint32(expiryRelative)
		if m.rng.IntN(3) == 0 {
			exp = expiryAbsolutePast
		}
		m.add(&mc.Request{Opcode: mc.OpTouch, Key: []byte(key), Extras: mc.AppendUint32(nil, exp)}, &wantReply{status: m.found(exists)})
		if exists && exp == expiryAbsolutePast {
			delete(m.items, key)
		}
	case 7: // GAT: answered with the value
		reply := &wantReply{status: m.found(exists)}
		if exists {
			reply.value, reply.check = []byte(old), true
		}
		m.add(&mc.Request{Opcode: mc.OpGAT, Key: []byte(key), Extras: mc.AppendUint32(nil, expiryRelative)}, reply)
	case 8: // GATQ: answered only on a hit
		m.add(&mc.Request{Opcode: mc.OpGATQ, Key: []byte(key), Extras: mc.AppendUint32(nil, 0)}, m.hit(exists, "", old))
	case 9: // SET with a CAS that cannot match: exists on a hit, not found on a miss
		st := mc.StatusKeyNotFound
		if exists {
			st = mc.StatusKeyExists
		}
		m.add(&mc.Request{Opcode: mc.OpSet, Key: []byte(key), Extras: ext, Value: []byte(m.value()), CAS: 0x0bad0bad0bad0bad},
			&wantReply{status: st})
	case 10: // SETQ with an absolute expiry in the past: stored already expired
		m.add(&mc.Request{Opcode: mc.OpSetQ, Key: []byte(key), Extras: mc.AppendSetExtras(nil, 0, expiryAbsolutePast),
			Value: []byte(m.value())}, nil)
		delete(m.items, key)
	default: // SETQ with an absolute expiry a day ahead, and flags
		v := m.value()
		exp := uint32(time.Now().Add(24 * time.Hour).Unix())
		m.add(&mc.Request{Opcode: mc.OpSetQ, Key: []byte(key), Extras: mc.AppendSetExtras(nil, 0, exp), Value: []byte(v)}, nil)
		m.items[key] = v
	}
}

// found is the status of a command on an existing or missing key.
func (m *pipelineModel) found(exists bool) mc.Status {
	if exists {
		return mc.StatusOK
	}
	return mc.StatusKeyNotFound
}

// unless is the reply of a quiet mutation: none when ok, else status st.
func (m *pipelineModel) unless(ok bool, st mc.Status) *wantReply {
	if ok {
		return nil
	}
	return &wantReply{status: st}
}

// arith adds an INCR/DECR (quiet or not) of a counter key: created with
// initial when missing, next(n) otherwise, 0x06 when not a number.
func (m *pipelineModel) arith(req *mc.Request, next func(uint64) uint64, initial uint64) {
	target := string(req.Key)
	quiet := req.Opcode.IsQuiet()
	old, exists := m.items[target]
	n := initial
	if exists {
		v, err := strconv.ParseUint(old, 10, 64)
		if err != nil {
			m.add(req, &wantReply{status: mc.StatusNonNumeric})
			return
		}
		n = next(v)
	}
	m.items[target] = strconv.FormatUint(n, 10)
	if quiet {
		m.add(req, nil)
		return
	}
	m.add(req, &wantReply{status: mc.StatusOK, value: binary.BigEndian.AppendUint64(nil, n), check: true})
}

// incr adds an INCR of the counter ctr, or now and then of the string key
// (non-numeric when it exists) or, with no-create, of never, a key that is
// never stored.
func (m *pipelineModel) incr(key, ctr, never string) {
	delta, initial := uint64(1+m.rng.IntN(100)), uint64(7)
	expiry := uint32(0)
	target := ctr
	switch m.rng.IntN(10) {
	case 0:
		target = key // a string key: non-numeric when it exists, created otherwise
	case 1:
		target, expiry = never, 0xffffffff // no-create
	}
	req := &mc.Request{Opcode: mc.OpIncrement, Key: []byte(target), Extras: mc.AppendArithExtras(nil, delta, initial, expiry)}
	old, exists := m.items[target]
	switch {
	case !exists && expiry == 0xffffffff:
		m.add(req, &wantReply{status: mc.StatusKeyNotFound})
	case !exists:
		m.items[target] = strconv.FormatUint(initial, 10)
		m.add(req, &wantReply{status: mc.StatusOK, value: binary.BigEndian.AppendUint64(nil, initial), check: true})
	default:
		n, err := strconv.ParseUint(old, 10, 64)
		if err != nil {
			m.add(req, &wantReply{status: mc.StatusNonNumeric})
			return
		}
		n += delta
		m.items[target] = strconv.FormatUint(n, 10)
		m.add(req, &wantReply{status: mc.StatusOK, value: binary.BigEndian.AppendUint64(nil, n), check: true})
	}
}

// replyKind is an (opcode, status) pair the generated pipelines must cover.
type replyKind struct {
	op mc.Opcode
	st mc.Status
}

// baseKinds are the replies buildPipeline's mix must produce; its quiet
// commands must also be silent at least once.
var (
	baseKinds = []replyKind{{mc.OpGetQ, mc.StatusOK}, {mc.OpGetKQ, mc.StatusOK}, {mc.OpSet, mc.StatusOK},
		{mc.OpAddQ, mc.StatusKeyExists}, {mc.OpDeleteQ, mc.StatusKeyNotFound}, {mc.OpIncrement, mc.StatusOK},
		{mc.OpIncrement, mc.StatusNonNumeric}, {mc.OpIncrement, mc.StatusKeyNotFound},
		{mc.OpAppendQ, mc.StatusNotStored}, {mc.OpGet, mc.StatusOK}, {mc.OpGet, mc.StatusKeyNotFound},
		{mc.OpNoop, mc.StatusOK}, {mc.OpVersion, mc.StatusOK}}
	baseQuiet = []mc.Opcode{mc.OpGetQ, mc.OpGetKQ, mc.OpSetQ, mc.OpAddQ, mc.OpDeleteQ, mc.OpAppendQ}

	moreKinds = []replyKind{{mc.OpDecrement, mc.StatusOK}, {mc.OpReplaceQ, mc.StatusKeyNotFound},
		{mc.OpPrependQ, mc.StatusNotStored}, {mc.OpDelete, mc.StatusOK}, {mc.OpDelete, mc.StatusKeyNotFound},
		{mc.OpGetK, mc.StatusOK}, {mc.OpGetK, mc.StatusKeyNotFound}, {mc.OpTouch, mc.StatusOK},
		{mc.OpTouch, mc.StatusKeyNotFound}, {mc.OpGAT, mc.StatusOK}, {mc.OpGAT, mc.StatusKeyNotFound},
		{mc.OpGATQ, mc.StatusOK}, {mc.OpSet, mc.StatusKeyExists}, {mc.OpSet, mc.StatusKeyNotFound}}
	moreQuiet = []mc.Opcode{mc.OpIncrementQ, mc.OpReplaceQ, mc.OpPrependQ, mc.OpGATQ}
)

// checkPipelineMix guards the generator: the pipeline must exercise every
// kind of reply the test is about, and every quiet command's silence.
func checkPipelineMix(t *testing.T, reqs []*mc.Request, want []wantReply, kinds []replyKind, quiet []mc.Opcode) {
	t.Helper()
	answered, answeredOp := map[replyKind]int{}, map[mc.Opcode]int{}
	for _, w := range want {
		answered[replyKind{w.op, w.status}]++
		answeredOp[w.op]++
	}
	sent := map[mc.Opcode]int{}
	for _, r := range reqs {
		sent[r.Opcode]++
	}
	for _, k := range kinds {
		if answered[k] == 0 {
			t.Errorf("the generated pipeline has no %v reply with status 0x%02x", k.op, uint16(k.st))
		}
	}
	for _, op := range quiet {
		if sent[op] <= answeredOp[op] {
			t.Errorf("the generated pipeline has no silent %v (%d sent, %d answered)", op, sent[op], answeredOp[op])
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	t.Logf("pipeline: %d commands, %d replies expected", len(reqs), len(want))
}
