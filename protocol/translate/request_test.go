package translate

import (
	"testing"

	mc "kvd/protocol/binary"
	"kvd/protocol/text"
)

// decoded returns a Session that has decoded in.
func decoded(t *testing.T, in string) *Session {
	t.Helper()
	s := NewSession(64)
	if _, ok := s.Decode([]byte(in)); !ok {
		t.Fatalf("%q: incomplete", in)
	}
	return s
}

// TestRequests: each text data command becomes the binary request it
// means: opcode, key, extras, value and the CAS compared.
func TestRequests(t *testing.T) {
	const past = relativeExpiryLimit + 1
	set := func(flags, exp uint32) []byte { return mc.AppendSetExtras(nil, flags, exp) }
	arith := func(d, i uint64, exp uint32) []byte { return mc.AppendArithExtras(nil, d, i, exp) }
	touch := func(exp uint32) []byte { return mc.AppendUint32(nil, exp) }
	for _, tc := range []struct {
		in     string
		op     mc.Opcode
		extras []byte
		value  string
		cas    uint64
		hasCAS bool
	}{
		{"set k 5 10 2\r\nhi\r\n", mc.OpSet, set(5, 10), "hi", 0, false},
		{"set k 5 -1 2\r\nhi\r\n", mc.OpSet, set(5, past), "hi", 0, false},
		{"add k 0 0 1\r\nx\r\n", mc.OpAdd, set(0, 0), "x", 0, false},
		{"replace k 1 2 1\r\nx\r\n", mc.OpReplace, set(1, 2), "x", 0, false},
		{"append k 1 2 1\r\nx\r\n", mc.OpAppend, nil, "x", 0, false},
		{"prepend k 1 2 1\r\nx\r\n", mc.OpPrepend, nil, "x", 0, false},
		{"cas k 0 0 1 77\r\nz\r\n", mc.OpSet, set(0, 0), "z", 77, true},
		{"cas k 0 0 1 0\r\nz\r\n", mc.OpSet, set(0, 0), "z", neverCAS, true},
		{"delete k\r\n", mc.OpDelete, nil, "", 0, false},
		{"incr k 5\r\n", mc.OpIncrement, arith(5, 0, noCreate), "", 0, false},
		{"decr k 7\r\n", mc.OpDecrement, arith(7, 0, noCreate), "", 0, false},
		{"touch k 10\r\n", mc.OpTouch, touch(10), "", 0, false},
		{"touch k -5\r\n", mc.OpTouch, touch(past), "", 0, false},
		{"mg k v\r\n", mc.OpGet, nil, "", 0, false},
		{"mg k T30 v\r\n", mc.OpGAT, touch(30), "", 0, false},
		{"mg k C5\r\n", mc.OpGet, nil, "", 0, false}, // mg ignores C
		{"me k\r\n", mc.OpGet, nil, "", 0, false},
		{"ms k 2\r\nhi\r\n", mc.OpSet, set(0, 0), "hi", 0, false},
		{"ms k 2 F7 T9\r\nhi\r\n", mc.OpSet, set(7, 9), "hi", 0, false},
		{"ms k 2 T-1\r\nhi\r\n", mc.OpSet, set(0, past), "hi", 0, false},
		{"ms k 2 ME C5\r\nhi\r\n", mc.OpAdd, set(0, 0), "hi", 0, false}, // add mode ignores C
		{"ms k 2 MR\r\nhi\r\n", mc.OpReplace, set(0, 0), "hi", 0, false},
		{"ms k 2 MA\r\nhi\r\n", mc.OpAppend, nil, "hi", 0, false},
		{"ms k 2 MP\r\nhi\r\n", mc.OpPrepend, nil, "hi", 0, false},
		{"ms k 2 MS C9\r\nhi\r\n", mc.OpSet, set(0, 0), "hi", 9, true},
		{"ms k 2 C0\r\nhi\r\n", mc.OpSet, set(0, 0), "hi", neverCAS, true},
		{"ms k 2 MA C0\r\nhi\r\n", mc.OpAppend, nil, "hi", 0, false}, // memcached compares a non-zero CAS only here
		{"ms k 2 MP C0\r\nhi\r\n", mc.OpPrepend, nil, "hi", 0, false},
		{"ma k C0\r\n", mc.OpIncrement, arith(1, 0, noCreate), "", 0, false},
		{"md k C0\r\n", mc.OpDelete, nil, "", neverCAS, true},
		{"ma k\r\n", mc.OpIncrement, arith(1, 0, noCreate), "", 0, false},
		{"ma k MD D3 J10 N60\r\n", mc.OpDecrement, arith(3, 10, 60), "", 0, false},
		{"ma k N-1 C4\r\n", mc.OpIncrement, arith(1, 0, past), "", 4, true},
		{"md k C9\r\n", mc.OpDelete, nil, "", 9, true},
	} {
		s := decoded(t, tc.in)
		if st := s.Next(); st != Run {
			t.Errorf("%q: step %d, want Run", tc.in, st)
			continue
		}
		r := s.Request()
		if r.Magic != mc.MagicRequest || r.Opcode != tc.op || string(r.Key) != "k" {
			t.Errorf("%q: request %#x %v %q, want %v on k", tc.in, r.Magic, r.Opcode, r.Key, tc.op)
		}
		if string(r.Extras) != string(tc.extras) || string(r.Value) != tc.value {
			t.Errorf("%q: extras %x value %q, want %x %q", tc.in, r.Extras, r.Value, tc.extras, tc.value)
		}
		if r.CAS != tc.cas || s.cur.hasCAS != tc.hasCAS {
			t.Errorf("%q: CAS %d compared %v, want %d %v", tc.in, r.CAS, s.cur.hasCAS, tc.cas, tc.hasCAS)
		}
		if err := mc.CheckShape(r); err != nil {
			t.Errorf("%q: the request is not a valid binary one: %v", tc.in, err)
		}
	}
}

// step is one step of a session as a test expects it: for Run the key,
// for Answer the bytes.
type step struct {
	st  Step
	arg string
}

// steps carries out every step of the command in s, calling refuse on the
// Run steps whose key it names.
func steps(s *Session, refuse string) []step {
	var got []step
	for st := s.Next(); st != Done && len(got) < 20; st = s.Next() {
		e := step{st: st}
		switch st {
		case Run:
			e.arg = s.Request().Opcode.String() + " " + string(s.Request().Key)
			if string(s.Request().Key) == refuse {
				s.Refuse(nil, "no")
			}
		case Answer:
			e.arg = string(s.Answer())
		}
		got = append(got, e)
		s.Ran()
	}
	return got
}

// TestSteps: what the server does for each kind of command: a multi-get
// is one request per key (a refused key drops the rest), loop-only
// commands are Control, refusals are answered, a too-large set unlinks its
// key, and an error that closes ends in Close.
func TestSteps(t *testing.T) {
	get, gat, del := mc.OpGet.String()+" ", mc.OpGAT.String()+" ", mc.OpDelete.String()+" "
	long := "set " + string(make([]byte, 3000))
	for _, tc := range []struct {
		in, refuse string
		want       []step
	}{
		{"get a b c\r\n", "", []step{{Run, get + "a"}, {Run, get + "b"}, {Run, get + "c"}}},
		{"gets a b c\r\n", "b", []step{{Run, get + "a"}, {Run, get + "b"}}},
		{"gat 10 a b\r\n", "", []step{{Run, gat + "a"}, {Run, gat + "b"}}},
		{"delete a\r\n", "a", []step{{Run, del + "a"}}},
		{"version\r\n", "", []step{{Control, ""}}},
		{"stats throttle\r\n", "", []step{{Control, ""}}},
		{"flush_all 10\r\n", "", []step{{Control, ""}}},
		{"mn\r\n", "", []step{{Control, ""}}},
		{"quit\r\n", "", []step{{Control, ""}}},
		{"bogus\r\n", "", []step{{Answer, "ERROR\r\n"}}},
		{"set k 0 0 2\r\nhello\r\n", "", []step{{Answer, "CLIENT_ERROR bad data chunk\r\n"}}},
		{"set k 0 0 100\r\n", "", []step{{Run, del + "k"}}},
		{"set k 0 0 100 noreply\r\n", "", []step{{Run, del + "k"}}},
		{"add k 0 0 100\r\n", "", []step{{Answer, "SERVER_ERROR object too large for cache\r\n"}}},
		{long, "", []step{{Answer, ""}, {Close, ""}}},
	} {
		s := NewSession(64)
		if _, ok := s.Decode([]byte(tc.in)); !ok {
			t.Fatalf("%.20q: incomplete", tc.in)
		}
		got := steps(s, tc.refuse)
		if !equalSteps(got, tc.want) {
			t.Errorf("%.20q: steps %v, want %v", tc.in, got, tc.want)
		}
		if s.Held() || s.step != 0 || s.abort {
			t.Errorf("%.20q: state left after Done: held %v step %d abort %v", tc.in, s.Held(), s.step, s.abort)
		}
	}
}

func equalSteps(a, b []step) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestStepWait: a step the server could not carry out (no Ran) comes
// again; after the line is decoded again the keys already run are skipped.
func TestStepWait(t *testing.T) {
	s := decoded(t, "get a b c\r\n")
	s.Next()
	s.Ran()
	if s.Next(); string(s.Request().Key) != "b" {
		t.Fatalf("second step runs %q", s.Request().Key)
	}
	s = reDecode(t, s, "get a b c\r\n")
	if st := s.Next(); st != Run || string(s.Request().Key) != "b" {
		t.Fatalf("after a wait: step %d on %q, want b again", st, s.Request().Key)
	}
	if got := steps(s, ""); len(got) != 2 || got[1].arg != mc.OpGet.String()+" c" {
		t.Errorf("rest of the multi-get: %v", got)
	}
	if st := reDecode(t, s, "delete x\r\n").Next(); st != Run || string(s.Request().Key) != "x" {
		t.Errorf("next command: step %d on %q", st, s.Request().Key)
	}
}

func reDecode(t *testing.T, s *Session, in string) *Session {
	t.Helper()
	if _, ok := s.Decode([]byte(in)); !ok {
		t.Fatalf("%q: incomplete", in)
	}
	return s
}

// TestDecodeRefusal: a too-large value is refused from its line: the line
// is consumed, the block swallowed, and the refusal held until answered.
func TestDecodeRefusal(t *testing.T) {
	s := NewSession(64)
	line := "set k 0 0 100\r\n"
	n, ok := s.Decode([]byte(line))
	if !ok || n != len(line) || !s.Held() || s.Swallow() != 102 {
		t.Fatalf("Decode: n %d ok %v held %v swallow %d, want %d true true 102", n, ok, s.Held(), s.Swallow(), len(line))
	}
	steps(s, "")
	if s.Held() {
		t.Error("the refusal is still held after its steps")
	}
}

// TestNeed: a storage line whose block has not all arrived tells its full
// length; an unfinished line tells nothing.
func TestNeed(t *testing.T) {
	for _, tc := range []struct {
		in   string
		need int
	}{
		{"set k 0 0 10\r\nhel", 14 + 10 + 2},
		{"ms k 3 T1\r\n", 11 + 3 + 2},
		{"set k 0 0", 0},
		{"get a b", 0},
		{"set k 0 0 1\r\nx\r\n", 0}, // complete
	} {
		s := NewSession(0)
		if _, ok := s.Decode([]byte(tc.in)); ok != (tc.need == 0 && tc.in[len(tc.in)-1] == '\n') {
			t.Errorf("%q: decoded %v", tc.in, ok)
		}
		if got := s.Need(); got != tc.need {
			t.Errorf("%q: Need %d, want %d", tc.in, got, tc.need)
		}
	}
}

// TestExpiryAndFlushDelay: text exptimes and flush_all delays as binary
// states them.
func TestExpiryAndFlushDelay(t *testing.T) {
	for _, tc := range []struct {
		exptime int64
		want    uint32
	}{{0, 0}, {10, 10}, {relativeExpiryLimit + 5, relativeExpiryLimit + 5}, {-1, relativeExpiryLimit + 1}} {
		if got := Expiry(tc.exptime); got != tc.want {
			t.Errorf("Expiry(%d) = %d, want %d", tc.exptime, got, tc.want)
		}
	}
	for _, tc := range []struct {
		in   string
		want uint32
	}{{"flush_all\r\n", 0}, {"flush_all 30\r\n", 30}, {"flush_all -3\r\n", 0}, {"flush_all 0 noreply\r\n", 0}} {
		if got := FlushDelay(decoded(t, tc.in).Command()); got != tc.want {
			t.Errorf("%q: delay %d, want %d", tc.in, got, tc.want)
		}
	}
	if decoded(t, "flush_all 5 noreply\r\n").Command().Kind != text.KindFlushAll {
		t.Error("flush_all did not decode")
	}
}

// TestResumeTakesKeysFromTheLine: a multi-get resumed after a wait takes
// its keys from the input of the pass that resumes it (the previous pass's
// buffer is reused by then), without decoding the line again; a different
// command at the front is decoded as itself.
func TestResumeTakesKeysFromTheLine(t *testing.T) {
	s := decoded(t, "get a  bb c\r\n")
	s.Next()
	s.Ran()
	buf := []byte("get a  bb c\r\nversion\r\n")
	if n, ok := s.Decode(buf); !ok || n != len("get a  bb c\r\n") {
		t.Fatalf("resumed: %d, %v", n, ok)
	}
	copy(buf, "xxxxxxxxxxxx") // the pass is over: the buffer is reused
	if n, ok := s.Decode([]byte("get a  bb c\r\n")); !ok || n != 13 {
		t.Fatalf("resumed again: %d, %v", n, ok)
	}
	if st := s.Next(); st != Run || string(s.Request().Key) != "bb" {
		t.Fatalf("after the buffer was reused: step %d on %q, want bb", st, s.Request().Key)
	}
	s.Ran()
	if st := s.Next(); st != Run || string(s.Request().Key) != "c" || !s.cur.last {
		t.Fatalf("last key: step %d on %q (last %v)", st, s.Request().Key, s.cur.last)
	}
	s.Ran()
	if st := s.Next(); st != Done {
		t.Fatalf("after the last key: step %d", st)
	}
	s = decoded(t, "get a b\r\n")
	s.Next()
	s.Ran()
	if n, ok := s.Decode([]byte("delete x\r\n")); !ok || n != 10 || s.Command().Kind.Retrieval() {
		t.Fatalf("another command at the front: %d, %v, %v", n, ok, s.Command().Kind)
	}
	if st := s.Next(); st != Run || string(s.Request().Key) != "x" {
		t.Errorf("the other command: step %d on %q", st, s.Request().Key)
	}
}
