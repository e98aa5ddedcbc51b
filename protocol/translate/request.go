package translate

import (
	"bytes"
	mc "kvd/protocol/binary"
	"kvd/protocol/text"
)

// Expiry rules of the binary protocol that a text command's translation
// must respect (the server's executor applies them).
const (
	// relativeExpiryLimit: expiries up to 30 days are relative to now,
	// larger ones absolute Unix times (memcached's rule).
	relativeExpiryLimit = 30 * 24 * 3600
	// noCreate is INCR/DECR's expiry meaning "fail instead of creating".
	noCreate = 0xffffffff
	// neverCAS is a CAS no item ever has: memcached compares an explicit
	// CAS of 0 like any other, where binary reads 0 as "no compare".
	neverCAS = 1<<64 - 1
)

// build fills the Session's request for op on key from the decoded command
// (extras, value, CAS).
func (s *Session) build(op mc.Opcode, key []byte) {
	cmd := &s.cmd
	s.req = mc.Request{Magic: mc.MagicRequest, Opcode: op, Key: key}
	switch op {
	case mc.OpSet, mc.OpAdd, mc.OpReplace:
		s.req.Extras = mc.AppendSetExtras(s.extras[:0], flagsOf(cmd), Expiry(exptimeOf(cmd)))
	case mc.OpIncrement, mc.OpDecrement:
		s.req.Extras = appendArithExtras(s.extras[:0], cmd)
	case mc.OpTouch, mc.OpGAT:
		s.req.Extras = mc.AppendUint32(s.extras[:0], Expiry(exptimeOf(cmd)))
	}
	if cmd.Kind.Storage() {
		s.req.Value = cmd.Value
	}
	s.req.CAS, s.cur.hasCAS = casOf(cmd, op)
}

// appendArithExtras appends INCR/DECR's extras for incr, decr or ma: ma's
// N flag creates a missing item (with that TTL), the others never create.
func appendArithExtras(dst []byte, cmd *text.Command) []byte {
	delta, initial, exp := cmd.Delta, uint64(0), uint32(noCreate)
	if cmd.Kind == text.KindMetaArithmetic {
		delta, initial = cmd.Meta.Delta, cmd.Meta.Initial
		if cmd.Meta.HasViv {
			exp = Expiry(cmd.Meta.Vivify)
		}
	}
	return mc.AppendArithExtras(dst, delta, initial, exp)
}

// casOf is the CAS binary compares for cmd run as op, and whether the
// command compares one: classic cas and meta C, except under ms's add mode
// and in mg, which ignore C as memcached does. An explicit 0 never matches,
// except in ma and ms's append and prepend modes, where memcached does not
// compare it.
func casOf(cmd *text.Command, op mc.Opcode) (cas uint64, has bool) {
	cas, has = cmd.CAS, cmd.Kind == text.KindCas
	if cmd.Kind.Meta() {
		cas, has = cmd.Meta.CAS, cmd.Meta.HasCAS && op != mc.OpAdd && op != mc.OpGet && op != mc.OpGAT
	}
	switch {
	case !has:
		return 0, false
	case cas == 0 && (op == mc.OpIncrement || op == mc.OpDecrement || op == mc.OpAppend || op == mc.OpPrepend):
		return 0, false // ma and ms's append and prepend modes compare a non-zero CAS only, as memcached's
	case cas == 0:
		return neverCAS, true
	}
	return cas, true
}

// opOf is the binary opcode a non-retrieval text data command runs as;
// false for a command that is not one.
func opOf(cmd *text.Command) (mc.Opcode, bool) {
	switch cmd.Kind {
	case text.KindSet, text.KindCas:
		return mc.OpSet, true
	case text.KindAdd:
		return mc.OpAdd, true
	case text.KindReplace:
		return mc.OpReplace, true
	case text.KindAppend:
		return mc.OpAppend, true
	case text.KindPrepend:
		return mc.OpPrepend, true
	case text.KindDelete, text.KindMetaDelete:
		return mc.OpDelete, true
	case text.KindIncr:
		return mc.OpIncrement, true
	case text.KindDecr:
		return mc.OpDecrement, true
	case text.KindTouch:
		return mc.OpTouch, true
	case text.KindMetaGet:
		if cmd.Meta.HasTTL {
			return mc.OpGAT, true
		}
		return mc.OpGet, true
	case text.KindMetaDebug:
		return mc.OpGet, true
	case text.KindMetaSet:
		return metaSetOp(cmd.Meta.Mode), true
	case text.KindMetaArithmetic:
		if cmd.Meta.Mode == text.ModeDecrement {
			return mc.OpDecrement, true
		}
		return mc.OpIncrement, true
	}
	return 0, false
}

// metaSetOp is the opcode of ms's mode (M flag).
func metaSetOp(mode byte) mc.Opcode {
	switch mode {
	case text.ModeAdd:
		return mc.OpAdd
	case text.ModeReplace:
		return mc.OpReplace
	case text.ModeAppend:
		return mc.OpAppend
	case text.ModePrepend:
		return mc.OpPrepend
	}
	return mc.OpSet
}

func flagsOf(cmd *text.Command) uint32 {
	if cmd.Kind == text.KindMetaSet {
		return cmd.Meta.Flags
	}
	return cmd.Flags
}

func exptimeOf(cmd *text.Command) int64 {
	if cmd.Kind.Meta() {
		return cmd.Meta.TTL
	}
	return cmd.Exptime
}

// Expiry is a text exptime as the binary protocol states it: a negative one
// means "already expired", which memcached implements as an absolute time
// in the past.
func Expiry(exptime int64) uint32 {
	if exptime < 0 {
		return relativeExpiryLimit + 1
	}
	return uint32(exptime)
}

// FlushDelay is flush_all's delay argument as binary FLUSH's extras carry
// it; a negative one (memcached takes it as "now") is 0.
func FlushDelay(cmd *text.Command) uint32 {
	if !cmd.HasArg || cmd.Exptime <= 0 {
		return 0
	}
	return uint32(cmd.Exptime)
}

// StatsArgs are a stats command's group and argument as binary STAT's key
// carries them ("" when absent): the argument is the tokens after the
// group, joined by single spaces.
func StatsArgs(cmd *text.Command) (group, arg string) {
	if len(cmd.Keys) > 0 {
		group = string(cmd.Keys[0])
	}
	if len(cmd.Keys) > 1 {
		arg = string(bytes.Join(cmd.Keys[1:], []byte{' '}))
	}
	return group, arg
}

// LoginTokens are the user and password of a memcached -Y login's data
// block, split at spaces as memcached splits it (tokens past the second
// are ignored); both nil when there are fewer than two.
func LoginTokens(block []byte) (user, password []byte) {
	if tok := bytes.FieldsFunc(block, func(r rune) bool { return r == ' ' }); len(tok) >= 2 {
		return tok[0], tok[1]
	}
	return nil, nil
}
