package text

import (
	"bytes"
	"errors"
	"strconv"
)

// model is a tiny memcached built on Decode and AppendReply: enough of the
// item semantics (no expiry clock, no LRU) to compare whole transcripts
// with the real memcached for inputs that avoid time.
type model struct {
	items map[string]*modelItem
	cas   uint64
	opts  DecodeOptions
}

type modelItem struct {
	value   []byte
	flags   uint32
	cas     uint64
	ttl     int64
	fetched bool
	binary  bool // stored with a base64 key (b)
}

func newModel(maxValue int) *model {
	return &model{items: map[string]*modelItem{}, opts: DecodeOptions{MaxValue: maxValue}}
}

// run feeds in as one read and returns the replies and whether the
// connection was closed.
func (m *model) run(in []byte) (out []byte, closed bool) {
	out, closed, _ = m.runRest(in)
	return out, closed
}

// runRest is run that also reports whether input was left waiting for
// more (an incomplete command or a swallow not done).
func (m *model) runRest(in []byte) (out []byte, closed, pending bool) {
	var cmd Command
	for len(in) > 0 {
		n, err := Decode(in, m.opts, &cmd)
		var e *Error
		if errors.As(err, &e) {
			in = in[n:]
			if e.Swallow > len(in) {
				return out, false, true // memcached sends the reply once the swallow is done
			}
			if e.Unlink {
				delete(m.items, string(cmd.Key))
			}
			out = append(out, e.Reply...)
			if e.Close {
				return out, true, false
			}
			in = in[e.Swallow:]
			continue
		}
		if n == 0 {
			return out, false, true
		}
		in = in[n:]
		if cmd.Kind == KindQuit {
			return out, true, false
		}
		out = m.exec(out, &cmd)
	}
	return out, false, false
}

func (m *model) store(key []byte, value []byte, flags uint32, ttl int64) *modelItem {
	m.cas++
	it := &modelItem{value: append([]byte(nil), value...), flags: flags, cas: m.cas, ttl: ttl}
	m.items[string(key)] = it
	return it
}

func ttlOf(exptime int64) int64 {
	if exptime == 0 {
		return -1
	}
	return exptime
}

func (m *model) exec(out []byte, c *Command) []byte {
	var o Outcome
	switch {
	case c.Kind.Retrieval():
		for i, off := 0, FirstKey(c.Line, c.Kind); i < c.NKeys; i++ {
			var k []byte
			k, off = Token(c.Line, off)
			o = m.read(k, c.Kind == KindGat || c.Kind == KindGats, c.Exptime)
			out = AppendReply(out, c, k, &o)
		}
		return AppendEnd(out)
	case c.Kind == KindVersion:
		return AppendVersion(out, "1.6.18")
	case c.Kind == KindStats && len(c.Keys) == 0:
		return AppendEnd(out)
	case c.Kind == KindStats:
		return AppendError(out) // the model knows no stats groups
	case c.Kind == KindFlushAll:
		clear(m.items)
		o.Status = StatusOK
	case c.Kind == KindVerbosity:
		o.Status = StatusOK
	case c.Kind == KindMetaGet:
		o = m.read(c.Key, c.Meta.HasTTL, c.Meta.TTL)
	case c.Kind.Storage():
		o = m.update(c)
	case c.Kind == KindDelete || c.Kind == KindMetaDelete:
		o.Status = StatusNotFound
		if it := m.items[string(c.Key)]; it != nil && (!c.Meta.HasCAS || c.Meta.CAS == it.cas) {
			delete(m.items, string(c.Key))
			o.Status = StatusDeleted
		} else if it != nil {
			o.Status = StatusExists
		}
	case c.Kind == KindTouch:
		o = m.read(c.Key, true, c.Exptime)
	case c.Kind == KindIncr || c.Kind == KindDecr || c.Kind == KindMetaArithmetic:
		o = m.arith(c)
	case c.Kind == KindMetaDebug:
		o = m.read(c.Key, false, 0)
	}
	return AppendReply(out, c, c.Key, &o)
}

func (m *model) read(key []byte, touch bool, exptime int64) Outcome {
	it := m.items[string(key)]
	if it == nil {
		return Outcome{Status: StatusMiss}
	}
	if touch {
		it.ttl = ttlOf(exptime)
	}
	o := Outcome{Status: StatusHit, Value: it.value, Flags: it.flags, CAS: it.cas, TTL: it.ttl, Fetched: it.fetched, KeyBinary: it.binary}
	it.fetched = true
	return o
}

func (m *model) update(c *Command) Outcome {
	it := m.items[string(c.Key)]
	mode, flags, exp, cas := c.Meta.Mode, c.Flags, c.Exptime, c.CAS
	if c.Kind == KindMetaSet {
		flags, exp, cas = c.Meta.Flags, c.Meta.TTL, c.Meta.CAS
	} else {
		mode = map[Kind]byte{KindSet: ModeSet, KindCas: ModeSet, KindAdd: ModeAdd, KindReplace: ModeReplace,
			KindAppend: ModeAppend, KindPrepend: ModePrepend}[c.Kind]
	}
	// ms's append and prepend modes compare a non-zero C only
	hasCAS := c.Kind == KindCas || c.Meta.HasCAS && (cas != 0 || mode != ModeAppend && mode != ModePrepend)
	if st, done := storeVerdict(it, mode, hasCAS, cas); done {
		return Outcome{Status: st}
	}
	value := c.Value
	switch mode {
	case ModeAppend:
		value, flags, exp = append(append([]byte(nil), it.value...), value...), it.flags, it.ttl
	case ModePrepend:
		value, flags, exp = append(append([]byte(nil), value...), it.value...), it.flags, it.ttl
	default:
		exp = ttlOf(exp)
	}
	binary := c.Meta.Base64
	if mode == ModeAppend || mode == ModePrepend {
		binary = it.binary // the new item copies the old one's key
	}
	n := m.store(c.Key, value, flags, exp)
	n.binary = binary
	return Outcome{Status: StatusStored, CAS: n.cas, KeyBinary: binary}
}

// storeVerdict is memcached 1.6.18's do_store_item decision, as observed:
// a CAS given on a missing key is NOT_FOUND for set and replace, stores for
// add, and NOT_STORED for append and prepend; add never replaces.
func storeVerdict(it *modelItem, mode byte, hasCAS bool, cas uint64) (Status, bool) {
	switch {
	case it == nil && mode == ModeAdd:
		return 0, false
	case it == nil && hasCAS && (mode == ModeSet || mode == ModeReplace):
		return StatusNotFound, true
	case it == nil && mode != ModeSet:
		return StatusNotStored, true
	case it != nil && mode == ModeAdd:
		return StatusNotStored, true
	case it != nil && hasCAS && it.cas != cas:
		return StatusExists, true
	}
	return 0, false
}

func (m *model) arith(c *Command) Outcome {
	it := m.items[string(c.Key)]
	delta, decr := c.Delta, c.Kind == KindDecr
	if c.Kind == KindMetaArithmetic {
		delta, decr = c.Meta.Delta, c.Meta.Mode == ModeDecrement
		if it == nil && c.Meta.HasViv {
			it = m.store(c.Key, strconv.AppendUint(nil, c.Meta.Initial, 10), 0, ttlOf(c.Meta.Vivify))
			return Outcome{Status: StatusNumber, Number: c.Meta.Initial, CAS: it.cas, TTL: it.ttl, Created: true}
		}
	}
	if it == nil {
		return Outcome{Status: StatusNotFound}
	}
	v, err := strconv.ParseUint(string(bytes.TrimSpace(it.value)), 10, 64)
	if err != nil || len(it.value) == 0 {
		return Outcome{Status: StatusNonNumeric}
	}
	switch {
	case decr && delta > v:
		v = 0
	case decr:
		v -= delta
	default:
		v += delta
	}
	digits := strconv.AppendUint(nil, v, 10)
	if pad := len(it.value) - len(digits); pad > 0 {
		digits = append(digits, bytes.Repeat([]byte(" "), pad)...) // memcached rewrites in place
	}
	n := m.store(c.Key, digits, it.flags, it.ttl)
	n.binary = it.binary
	return Outcome{Status: StatusNumber, Number: v, CAS: n.cas, TTL: n.ttl, KeyBinary: n.binary}
}
