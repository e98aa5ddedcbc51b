package translate

import (
	"testing"

	mc "kvd/protocol/binary"
)

const now = 1_700_000_000

// replyOf runs in's first step and returns the Reply the server would store
// with its request, and the request's opcode.
func replyOf(t *testing.T, in string) (Reply, mc.Opcode) {
	t.Helper()
	s := decoded(t, in)
	if st := s.Next(); st != Run {
		t.Fatalf("%q: step %d, want Run", in, st)
	}
	var r Reply
	var aux []byte
	s.Reply(&r, &aux)
	return r, s.Request().Opcode
}

// TestAppend: a binary result becomes the text reply memcached gives for
// the command: hits, misses, each store outcome, arithmetic, meta flags
// (with the TTL counted from now), and refusals with binary's reason.
func TestAppend(t *testing.T) {
	ok, miss, exists := mc.StatusOK, mc.StatusKeyNotFound, mc.StatusKeyExists
	for _, tc := range []struct {
		in   string
		res  Result
		want string
	}{
		{"get k\r\n", Result{Status: ok, Value: []byte("v"), Flags: 3, CAS: 9}, "VALUE k 3 1\r\nv\r\nEND\r\n"},
		{"gets k\r\n", Result{Status: ok, Value: []byte("v"), Flags: 3, CAS: 9}, "VALUE k 3 1 9\r\nv\r\nEND\r\n"},
		{"get k\r\n", Result{Status: miss}, "END\r\n"},
		{"get k j\r\n", Result{Status: miss}, ""}, // not the last key: no END yet
		{"set k 0 0 1\r\nx\r\n", Result{Status: ok}, "STORED\r\n"},
		{"set k 0 0 1 noreply\r\nx\r\n", Result{Status: ok}, ""},
		{"add k 0 0 1\r\nx\r\n", Result{Status: exists}, "NOT_STORED\r\n"},
		{"replace k 0 0 1\r\nx\r\n", Result{Status: miss}, "NOT_STORED\r\n"},
		{"append k 0 0 1\r\nx\r\n", Result{Status: mc.StatusNotStored}, "NOT_STORED\r\n"},
		{"cas k 0 0 1 5\r\nx\r\n", Result{Status: exists}, "EXISTS\r\n"},
		{"cas k 0 0 1 5\r\nx\r\n", Result{Status: miss}, "NOT_FOUND\r\n"},
		{"delete k\r\n", Result{Status: ok}, "DELETED\r\n"},
		{"delete k\r\n", Result{Status: miss}, "NOT_FOUND\r\n"},
		{"incr k 1\r\n", Result{Status: ok, Number: 6}, "6\r\n"},
		{"decr k 1\r\n", Result{Status: miss}, "NOT_FOUND\r\n"},
		{"incr k 1\r\n", Result{Status: mc.StatusNonNumeric},
			"CLIENT_ERROR cannot increment or decrement non-numeric value\r\n"},
		{"touch k 5\r\n", Result{Status: ok}, "TOUCHED\r\n"},
		{"touch k 5\r\n", Result{Status: miss}, "NOT_FOUND\r\n"},
		{"mg k v t f\r\n", Result{Status: ok, Value: []byte("v"), Flags: 2, Expiry: now + 30}, "VA 1 t30 f2\r\nv\r\n"},
		{"mg k v t\r\n", Result{Status: ok, Value: []byte("v")}, "VA 1 t-1\r\nv\r\n"},
		{"mg k t\r\n", Result{Status: ok, Expiry: now - 5}, "HD t0\r\n"},
		{"mg k v\r\n", Result{Status: miss}, "EN\r\n"},
		{"mg k k v Oab\r\n", Result{Status: miss}, "EN kk Oab\r\n"},
		{"ms k 1 c\r\nx\r\n", Result{Status: ok, CAS: 4}, "HD c4\r\n"},
		{"ms k 1 C3\r\nx\r\n", Result{Status: miss}, "NF\r\n"},
		{"ms k 1 MR\r\nx\r\n", Result{Status: miss}, "NS\r\n"},
		{"ms k 1 ME\r\nx\r\n", Result{Status: exists}, "NS\r\n"},
		{"ma k v\r\n", Result{Status: ok, Number: 11}, "VA 2\r\n11\r\n"},
		{"ma k q N0\r\n", Result{Status: ok, Number: 0, Created: true}, "HD\r\n"},
		{"md k q\r\n", Result{Status: ok}, ""},
		{"get k\r\n", Result{Status: mc.StatusTemporaryFailure, Reason: "throttled"}, "SERVER_ERROR throttled\r\n"},
		{"set k 0 0 1\r\nx\r\n", Result{Status: mc.StatusTooBig, Reason: "Too large."},
			"SERVER_ERROR out of memory storing object\r\n"},
		{"ms k 1 q\r\nx\r\n", Result{Status: mc.StatusInternal, Reason: "disk"}, "SERVER_ERROR disk\r\n"},
	} {
		r, op := replyOf(t, tc.in)
		tc.res.Op, tc.res.Key = op, []byte("k")
		if got := string(r.Append(nil, &tc.res, now)); got != tc.want {
			t.Errorf("%q status %v: %q, want %q", tc.in, tc.res.Status, got, tc.want)
		}
	}
}

// TestAppendTooLarge: the unlink that follows a too-large set answers the
// refusal whatever the DELETE found, or nothing under noreply.
func TestAppendTooLarge(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"set k 0 0 100\r\n", "SERVER_ERROR object too large for cache\r\n"},
		{"set k 0 0 100 noreply\r\n", ""},
	} {
		r, op := replyOf(t, tc.in)
		for _, st := range []mc.Status{mc.StatusOK, mc.StatusKeyNotFound} {
			if got := string(r.Append(nil, &Result{Op: op, Status: st, Key: []byte("k")}, now)); got != tc.want {
				t.Errorf("%q, DELETE %v: %q, want %q", tc.in, st, got, tc.want)
			}
		}
	}
}

// TestReplyCopiesOpaque: a Reply outlives the input it was decoded from:
// the opaque and the raw key of me are copied into aux.
func TestReplyCopiesOpaque(t *testing.T) {
	in := []byte("mg k Oxy v\r\n")
	s := NewSession(0)
	s.Decode(in)
	s.Next()
	var r Reply
	var aux []byte
	s.Reply(&r, &aux)
	copy(in, "zzzzzzzzzz")
	if string(r.meta.Opaque) != "xy" || len(r.meta.RawKey) != 0 || string(aux) != "xy" {
		t.Errorf("mg: opaque %q raw key %q aux %q after the input changed, want xy, none (only me prints it)",
			r.meta.Opaque, r.meta.RawKey, aux)
	}
	in = []byte("me k\r\n")
	s.Decode(in)
	s.Next()
	s.Reply(&r, &aux)
	copy(in, "zzzz")
	if string(r.meta.RawKey) != "k" {
		t.Errorf("me: raw key %q after the input changed, want k", r.meta.RawKey)
	}
	if (&Reply{}).Text() || !r.Text() {
		t.Error("Text: the zero Reply is binary's, a translated one text")
	}
}

// TestTTL: remaining seconds from an absolute expiry, never negative, -1
// for none.
func TestTTL(t *testing.T) {
	for _, tc := range []struct {
		exp  uint32
		want int64
	}{{0, -1}, {now + 30, 30}, {now, 0}, {now - 10, 0}} {
		if got := TTL(tc.exp, now); got != tc.want {
			t.Errorf("TTL(%d) = %d, want %d", tc.exp, got, tc.want)
		}
	}
}

// TestAppendAllocs: encoding a worker's text reply allocates nothing.
func TestAppendAllocs(t *testing.T) {
	r, op := replyOf(t, "gets key\r\n")
	res := &Result{Op: op, Status: mc.StatusOK, Key: []byte("key"), Value: []byte("value"), Flags: 3, CAS: 99}
	dst := make([]byte, 0, 256)
	if n := testing.AllocsPerRun(1000, func() { dst = r.Append(dst[:0], res, now) }); n != 0 {
		t.Errorf("Append: %v allocations, want 0", n)
	}
	if got := string(r.Append(nil, res, now)); got != "VALUE key 3 5 99\r\nvalue\r\nEND\r\n" {
		t.Errorf("Append: %q", got)
	}
}

// TestSessionAllocs: decoding and translating a command allocates nothing
// once the Session is warm.
func TestSessionAllocs(t *testing.T) {
	s := NewSession(0)
	in := []byte("get a b c\r\nms k 2 T5 F3 Oab c\r\nhi\r\n")
	var r Reply
	run := func() {
		for buf := in; len(buf) > 0; {
			n, _ := s.Decode(buf)
			for st := s.Next(); st != Done; st = s.Next() {
				s.Reply(&r, nil)
				s.Ran()
			}
			buf = buf[n:]
		}
	}
	run()
	if n := testing.AllocsPerRun(200, run); n != 0 {
		t.Errorf("decode and translate: %v allocations, want 0", n)
	}
}

// BenchmarkTranslate: decoding a command, translating it and encoding its
// reply, per command (a get and an ms with return flags).
func BenchmarkTranslate(b *testing.B) {
	s := NewSession(0)
	in := []byte("get key\r\nms key 5 T60 F3 c\r\nvalue\r\n")
	res := Result{Status: mc.StatusOK, Key: []byte("key"), Value: []byte("value"), Flags: 3, CAS: 99}
	var r Reply
	dst := make([]byte, 0, 256)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		dst = dst[:0]
		for buf := in; len(buf) > 0; {
			n, _ := s.Decode(buf)
			for st := s.Next(); st != Done; st = s.Next() {
				s.Reply(&r, nil)
				res.Op = s.Request().Opcode
				dst = r.Append(dst, &res, now)
				s.Ran()
			}
			buf = buf[n:]
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(2*b.N), "ns/command")
}

// TestLeaseAndInvalidate: the meta flags binary cannot carry, as the
// executor reads them: mg's N and R (every mg has a lease, so that a stale
// item's token goes to a plain mg too), and I where memcached honours it.
func TestLeaseAndInvalidate(t *testing.T) {
	for _, tc := range []struct {
		in         string
		lease      Lease
		leased     bool
		invalidate bool
		ttl        uint32
		hasTTL     bool
	}{
		{in: "mg k v\r\n", leased: true},
		{in: "mg k N30 R10 v\r\n", lease: Lease{Vivify: true, Expiry: 30, Recache: 10}, leased: true},
		{in: "mg k N0 R0\r\n", lease: Lease{Vivify: true}, leased: true},
		{in: "mg k N-1 R-5\r\n", lease: Lease{Vivify: true, Expiry: relativeExpiryLimit + 1}, leased: true},
		{in: "get k\r\n"},
		{in: "ma k N30\r\n"},
		{in: "md k I\r\n", invalidate: true},
		{in: "md k I T30\r\n", invalidate: true, ttl: 30, hasTTL: true},
		{in: "md k\r\n"},
		{in: "ms k 1 I\r\nx\r\n"},                      // no CAS: a plain set
		{in: "ms k 1 C5 I\r\nx\r\n", invalidate: true}, // memcached's CAS store
		{in: "ms k 1 C5 I MR\r\nx\r\n", invalidate: true},
		{in: "ms k 1 C5 I MA\r\nx\r\n"}, // append ignores I
		{in: "ms k 1 C5 I ME\r\nx\r\n"},
	} {
		s := NewSession(0)
		s.Decode([]byte(tc.in))
		s.Next()
		var r Reply
		s.Reply(&r, nil)
		l, ok := r.Lease()
		ttl, hasTTL := r.MetaTTL()
		if l != tc.lease || ok != tc.leased || r.Invalidate() != tc.invalidate || ttl != tc.ttl || hasTTL != tc.hasTTL {
			t.Errorf("%q: lease %+v %v, invalidate %v, md T %d %v; want %+v %v, %v, %d %v", tc.in, l, ok,
				r.Invalidate(), ttl, hasTTL, tc.lease, tc.leased, tc.invalidate, tc.ttl, tc.hasTTL)
		}
	}
}
