package tests

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	mc "kvd/protocol/binary"
)

// Issue 12 item 8: behaviours where kvd differed from Debian's memcached
// 1.6.18. Each test sends the same frames to memcached and to kvd (the
// anonymous "default" bucket) and compares the replies.

// diffPair is one memcached and one kvd connection.
type diffPair struct {
	t        *testing.T
	mcd, kvd *rawConn
}

func newDiffPair(t *testing.T) *diffPair {
	t.Helper()
	mAddr := startMemcached(t)
	k := startKVD(t, testConfig)
	return &diffPair{t: t, mcd: dialRaw(t, mAddr), kvd: dialRaw(t, k.Addr)}
}

// both sends r to both servers and returns their replies.
func (p *diffPair) both(r *mc.Request) (m, k *mc.Response) {
	p.t.Helper()
	return p.mcd.call(r), p.kvd.call(r)
}

// same sends r to both and fails unless the replies agree on opcode,
// status, extras and key, and (for successes) value; CAS values differ by
// design and error texts are each server's own.
func (p *diffPair) same(what string, r *mc.Request) *mc.Response {
	p.t.Helper()
	m, k := p.both(r)
	p.agree(what, m, k)
	return m
}

// agree fails unless memcached's reply m and kvd's k agree, as same says.
func (p *diffPair) agree(what string, m, k *mc.Response) {
	p.t.Helper()
	if d := replyDiff(m, k); d != "" {
		p.t.Errorf("%s: %s\n memcached: %s\n kvd:       %s", what, d, showReply(m), showReply(k))
	}
}

func replyDiff(m, k *mc.Response) string {
	switch {
	case m.Opcode != k.Opcode:
		return "opcodes differ"
	case m.Status != k.Status:
		return "statuses differ"
	case !bytes.Equal(m.Extras, k.Extras):
		return "extras differ"
	case !bytes.Equal(m.Key, k.Key):
		return "keys differ"
	case m.Status == mc.StatusOK && !bytes.Equal(m.Value, k.Value):
		return "values differ"
	}
	return ""
}

func showReply(r *mc.Response) string {
	return fmt.Sprintf("%v status 0x%02x extras %x key %q value %q", r.Opcode, uint16(r.Status), r.Extras, r.Key, r.Value)
}

func setReq(key, value string) *mc.Request {
	return reqWith(mc.OpSet, 1, make([]byte, 8), key, value)
}

func flushReq(delay uint32) *mc.Request {
	return reqWith(mc.OpFlush, 2, binary.BigEndian.AppendUint32(nil, delay), "", "")
}

// TestMemcachedDiffFlushDelay: FLUSH with a delay keeps serving items until
// the deadline, then invalidates everything written before it (also after
// the FLUSH); an absolute time before the server started is ignored, one
// that has passed since flushes at once; 0 flushes at once.
// Needs the server wiring of Bucket.FlushAt (kvd flushes at once without it).
func TestMemcachedDiffFlushDelay(t *testing.T) {
	p := newDiffPair(t)
	p.same("SET a", setReq("a", "1"))
	p.same("FLUSH delay 2 s", flushReq(2))
	start := time.Now()
	p.same("GET a right after the delayed FLUSH", get("a"))
	p.same("SET b before the deadline", setReq("b", "2"))
	p.same("GET b before the deadline", get("b"))
	time.Sleep(time.Until(start.Add(3200 * time.Millisecond)))
	p.same("GET a after the deadline", get("a"))
	p.same("GET b after the deadline", get("b"))
	p.same("SET c after the deadline", setReq("c", "3"))
	p.same("GET c", get("c"))

	past := uint32(time.Now().Unix()) - 100
	p.same("FLUSH at an absolute time in the past", flushReq(past))
	p.same("GET c after a FLUSH in the past", get("c"))
	p.same("FLUSH at an absolute time just passed", flushReq(uint32(time.Now().Unix())-1))
	p.same("GET c after a FLUSH just passed", get("c"))
	p.same("SET c again", setReq("c", "3"))
	p.same("FLUSH delay 30 days (relative)", flushReq(30*24*3600))
	p.same("GET c after a FLUSH in 30 days", get("c"))
	p.same("FLUSH delay 0", flushReq(0))
	p.same("GET c after FLUSH 0", get("c"))
	p.same("SET d", setReq("d", "4"))
	p.same("FLUSH delay 1 (memcached: realtime(1) - 1, now)", flushReq(1))
	p.same("GET d right after FLUSH 1", get("d"))
}

// TestMemcachedDiffArithValues: INCR and DECR parse stored values as
// memcached's strtoull does (leading zeros of any length, white space,
// signs, overflow). Needs no server wiring.
func TestMemcachedDiffArithValues(t *testing.T) {
	p := newDiffPair(t)
	values := []string{
		"000000000000000000001", "0000000000000000000000000000000000000000042",
		"18446744073709551615", "00018446744073709551615", "18446744073709551616",
		"99999999999999999999999", "111111111111111111110", "12 ", "12 abc", " 12", "+12",
		"-0", "-1", "12\n", "12\t", "\t\n 7", "12\x00", "1a", "0x10", "-",
		// Not " ": memcached's strtoull skips the blank and the "\r\n" after
		// it and reads on into whatever the slab chunk held before.
	}
	arith := func(op mc.Opcode) *mc.Request {
		ex := binary.BigEndian.AppendUint64(nil, 1)
		ex = binary.BigEndian.AppendUint64(ex, 0)
		ex = binary.BigEndian.AppendUint32(ex, 0)
		return reqWith(op, 3, ex, "n", "")
	}
	for _, v := range values {
		for _, op := range []mc.Opcode{mc.OpIncrement, mc.OpDecrement} {
			p.same(fmt.Sprintf("SET n=%q", v), setReq("n", v))
			p.same(fmt.Sprintf("%v on %q", op, v), arith(op))
		}
	}
}

// TestMemcachedDiffGATK: GATK and GATKQ are GAT that echo the key.
// Needs the server wiring of OpGATK/OpGATKQ (kvd answers 0x81 without it).
func TestMemcachedDiffGATK(t *testing.T) {
	p := newDiffPair(t)
	exp := binary.BigEndian.AppendUint32(nil, 100)
	p.same("SET gk", reqWith(mc.OpSet, 1, []byte{0xde, 0xad, 0xbe, 0xef, 0, 0, 0, 0}, "gk", "v1"))
	p.same("GATK hit", reqWith(mc.OpGATK, 4, exp, "gk", ""))
	p.same("GATKQ hit", reqWith(mc.OpGATKQ, 5, exp, "gk", ""))
	p.same("GATK miss", reqWith(mc.OpGATK, 6, exp, "nokey", ""))
	p.same("GATK with expiry 0", reqWith(mc.OpGATK, 7, make([]byte, 4), "gk", ""))
	// A GATKQ miss sends nothing: the NOOP's reply comes first.
	p.mcd.send(reqWith(mc.OpGATKQ, 8, exp, "nokey", ""))
	p.kvd.send(reqWith(mc.OpGATKQ, 8, exp, "nokey", ""))
	p.same("NOOP after a GATKQ miss", noop())
	p.same("GET gk after GATK", get("gk"))
}

// TestMemcachedDiffAddWithCAS: a binary ADD with a CAS is a CAS store, as
// in memcached (process_bin_update): stored when the CAS matches, 0x02 when
// it is stale, 0x01 on a missing key; without a CAS it adds only.
func TestMemcachedDiffAddWithCAS(t *testing.T) {
	p := newDiffPair(t)
	add := func(op mc.Opcode, key string, cas uint64) *mc.Request {
		r := reqWith(op, 2, mc.AppendSetExtras(nil, 5, 0), key, "v5")
		r.CAS = cas
		return r
	}
	m, k := p.both(setReq("a", "1"))
	p.agree("ADD with the CAS of the SET", p.mcd.call(add(mc.OpAdd, "a", m.CAS)), p.kvd.call(add(mc.OpAdd, "a", k.CAS)))
	p.agree("ADD with the same CAS again (stale)", p.mcd.call(add(mc.OpAdd, "a", m.CAS)), p.kvd.call(add(mc.OpAdd, "a", k.CAS)))
	p.same("GET a after the ADDs", get("a"))
	p.same("ADD without a CAS on a present key", add(mc.OpAdd, "a", 0))
	p.same("ADD with a CAS on a missing key", add(mc.OpAdd, "missing", 12345))
	p.same("ADDQ with a CAS on a missing key", add(mc.OpAddQ, "missing", 12345))
	p.same("GET missing", get("missing"))
}
