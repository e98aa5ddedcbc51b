package binary

import (
	"bytes"
	"errors"
	"math"
	"strings"
	"testing"
)

func TestOpcodes(t *testing.T) {
	// Every opcode of SPEC section 3, with its wire name and loud twin.
	spec := []struct {
		op   Opcode
		name string
		loud Opcode
	}{
		{0x00, "GET", 0x00}, {0x01, "SET", 0x01}, {0x02, "ADD", 0x02}, {0x03, "REPLACE", 0x03},
		{0x04, "DELETE", 0x04}, {0x05, "INCR", 0x05}, {0x06, "DECR", 0x06}, {0x07, "QUIT", 0x07},
		{0x08, "FLUSH", 0x08}, {0x09, "GETQ", 0x00}, {0x0a, "NOOP", 0x0a}, {0x0b, "VERSION", 0x0b},
		{0x0c, "GETK", 0x0c}, {0x0d, "GETKQ", 0x0c}, {0x0e, "APPEND", 0x0e}, {0x0f, "PREPEND", 0x0f},
		{0x10, "STAT", 0x10}, {0x11, "SETQ", 0x01}, {0x12, "ADDQ", 0x02}, {0x13, "REPLACEQ", 0x03},
		{0x14, "DELETEQ", 0x04}, {0x15, "INCRQ", 0x05}, {0x16, "DECRQ", 0x06}, {0x17, "QUITQ", 0x07},
		{0x18, "FLUSHQ", 0x08}, {0x19, "APPENDQ", 0x0e}, {0x1a, "PREPENDQ", 0x0f}, {0x1b, "VERBOSITY", 0x1b},
		{0x1c, "TOUCH", 0x1c}, {0x1d, "GAT", 0x1d}, {0x1e, "GATQ", 0x1d}, {0x1f, "HELLO", 0x1f},
		{0x20, "SASL_LIST_MECHS", 0x20}, {0x21, "SASL_AUTH", 0x21}, {0x23, "GATK", 0x23}, {0x24, "GATKQ", 0x23},
		{0x2a, "SET_BUCKET_THROTTLE_PROPERTIES", 0x2a}, {0x2c, "SET_NODE_THROTTLE_PROPERTIES", 0x2c},
		{0x85, "CREATE_BUCKET", 0x85}, {0x86, "DELETE_BUCKET", 0x86}, {0x87, "LIST_BUCKETS", 0x87},
		{0x89, "SELECT_BUCKET", 0x89},
	}
	known := map[Opcode]bool{}
	for _, s := range spec {
		known[s.op] = true
		if s.op.String() != s.name || !s.op.Known() || s.op.NonQuiet() != s.loud || s.op.IsQuiet() != (s.loud != s.op) {
			t.Errorf("%#x: String %q Known %v NonQuiet %v IsQuiet %v; want %q true %v %v",
				uint8(s.op), s.op, s.op.Known(), s.op.NonQuiet(), s.op.IsQuiet(), s.name, s.loud, s.loud != s.op)
		}
	}
	for i := range 256 {
		op := Opcode(i)
		if known[op] {
			continue
		}
		want := "0x" + "0123456789abcdef"[i>>4:i>>4+1] + "0123456789abcdef"[i&15:i&15+1]
		if op.Known() || op.IsQuiet() || op.NonQuiet() != op || op.String() != want || CheckShape(&Request{Opcode: op, Extras: []byte{1}}) != nil {
			t.Errorf("unknown opcode %#x: Known %v IsQuiet %v NonQuiet %v String %q", i, op.Known(), op.IsQuiet(), op.NonQuiet(), op)
		}
	}
}

func TestStatusString(t *testing.T) {
	seen := map[string]Status{}
	for _, s := range []Status{
		StatusOK, StatusKeyNotFound, StatusKeyExists, StatusTooBig, StatusInvalidArguments, StatusNotStored,
		StatusNonNumeric, StatusNoBucket, StatusWouldThrottle, StatusAuthError, StatusAccessDenied,
		StatusUnknownFrameInfo, StatusUnknownCommand, StatusOutOfMemory, StatusNotSupported, StatusInternal,
		StatusBusy, StatusTemporaryFailure,
	} {
		str := s.String()
		if prev, dup := seen[str]; dup || strings.HasPrefix(str, "status ") {
			t.Errorf("status %#x: String %q (also %#x)", uint16(s), str, uint16(prev))
		}
		seen[str] = s
	}
	if got := Status(0xbeef).String(); got != "status 0xbeef" {
		t.Errorf("unknown status: %q", got)
	}
}

func TestCheckShape(t *testing.T) {
	key := []byte("k")
	long := make([]byte, MaxKeyLen+1)
	tests := []struct {
		req     Request
		wantErr string // "" for valid
	}{
		{Request{Opcode: OpGet, Key: key}, ""},
		{Request{Opcode: OpGetKQ, Key: make([]byte, MaxKeyLen)}, ""},
		{Request{Opcode: OpGet, Key: key, Extras: make([]byte, 4)}, "binary: invalid arguments: GET must not have extras"},
		{Request{Opcode: OpGetQ}, "GETQ needs a key"},
		{Request{Opcode: OpGetK, Key: key, Value: key}, "GETK must not have a value"},
		{Request{Opcode: OpGet, Key: long}, "GET key is 251 bytes, limit 250"},
		{Request{Opcode: OpSet, Key: key, Extras: make([]byte, 8)}, ""},
		{Request{Opcode: OpSetQ, Key: key, Extras: make([]byte, 8), Value: make([]byte, 100)}, ""},
		{Request{Opcode: OpAdd, Key: key, Extras: make([]byte, 4)}, "ADD needs 8 bytes of extras, got 4"},
		{Request{Opcode: OpReplaceQ, Extras: make([]byte, 8)}, "REPLACEQ needs a key"},
		{Request{Opcode: OpAppend, Key: key, Value: key}, ""},
		{Request{Opcode: OpPrependQ, Key: key, Extras: make([]byte, 8)}, "PREPENDQ must not have extras"},
		{Request{Opcode: OpDelete, Key: key}, ""},
		{Request{Opcode: OpDeleteQ, Key: key, Value: key}, "DELETEQ must not have a value"},
		{Request{Opcode: OpIncrement, Key: key, Extras: make([]byte, 20)}, ""},
		{Request{Opcode: OpDecrementQ, Key: key, Extras: make([]byte, 8)}, "DECRQ needs 20 bytes of extras, got 8"},
		{Request{Opcode: OpIncrement, Key: key, Extras: make([]byte, 20), Value: key}, "INCR must not have a value"},
		{Request{Opcode: OpQuit}, ""},
		{Request{Opcode: OpNoop, Key: key}, "NOOP must not have a key"},
		{Request{Opcode: OpVersion, Value: key}, "VERSION must not have a value"},
		{Request{Opcode: OpFlush}, ""},
		{Request{Opcode: OpFlushQ, Extras: make([]byte, 4)}, ""},
		{Request{Opcode: OpFlush, Extras: make([]byte, 8)}, "FLUSH needs 0 or 4 bytes of extras, got 8"},
		{Request{Opcode: OpFlush, Extras: make([]byte, 40)}, "FLUSH needs 0 or 4 bytes of extras, got 40"},
		{Request{Opcode: OpTouch, Key: key, Extras: make([]byte, 4)}, ""},
		{Request{Opcode: OpGATQ, Key: key}, "GATQ needs 4 bytes of extras, got 0"},
		{Request{Opcode: OpGAT, Key: key, Extras: make([]byte, 4), Value: key}, "GAT must not have a value"},
		{Request{Opcode: OpGATK, Key: key, Extras: make([]byte, 4)}, ""},
		{Request{Opcode: OpGATKQ, Key: key, Extras: make([]byte, 8)}, "GATKQ needs 4 bytes of extras, got 8"},
		{Request{Opcode: OpGATK, Extras: make([]byte, 4)}, "GATK needs a key"},
		{Request{Opcode: OpVerbosity, Extras: make([]byte, 4)}, ""},
		{Request{Opcode: OpVerbosity}, "VERBOSITY needs 4 bytes of extras, got 0"},
		{Request{Opcode: OpStat}, ""},
		{Request{Opcode: OpStat, Key: []byte("bucket_details app")}, ""},
		{Request{Opcode: OpStat, Extras: make([]byte, 4)}, "STAT must not have extras"},
		{Request{Opcode: OpHello, Key: []byte("agent"), Value: make([]byte, 6)}, ""},
		{Request{Opcode: OpHello}, ""},
		{Request{Opcode: OpHello, Value: make([]byte, 3)}, "HELLO value length must be even, got 3 bytes"},
		{Request{Opcode: OpSASLListMechs}, ""},
		{Request{Opcode: OpSASLAuth, Key: []byte("PLAIN"), Value: []byte("\x00u\x00p")}, ""},
		{Request{Opcode: OpSASLAuth, Value: []byte("\x00u\x00p")}, "SASL_AUTH needs a key"},
		{Request{Opcode: OpSelectBucket, Key: key}, ""},
		{Request{Opcode: OpSelectBucket}, "SELECT_BUCKET needs a key"},
		{Request{Opcode: OpCreateBucket, Key: key, Value: []byte(`{"reserved":1}`)}, ""},
		{Request{Opcode: OpDeleteBucket, Key: key}, ""},
		{Request{Opcode: OpDeleteBucket, Key: key, Extras: make([]byte, 4)}, "DELETE_BUCKET must not have extras"},
		{Request{Opcode: OpListBuckets}, ""},
		{Request{Opcode: OpListBuckets, Key: key}, "LIST_BUCKETS must not have a key"},
		{Request{Opcode: OpSetBucketThrottle, Key: key, Value: []byte(`{}`)}, ""},
		{Request{Opcode: OpSetBucketThrottle, Value: []byte(`{}`)}, "SET_BUCKET_THROTTLE_PROPERTIES needs a key"},
		{Request{Opcode: OpSetNodeThrottle, Value: []byte(`{}`)}, ""},
		{Request{Opcode: OpSetNodeThrottle, Key: key}, "SET_NODE_THROTTLE_PROPERTIES must not have a key"},
		{Request{Opcode: OpSelectBucket, Key: long}, "SELECT_BUCKET key is 251 bytes, limit 250"},
		{Request{Opcode: 0x5f, Key: long, Extras: make([]byte, 3)}, ""}, // unknown: the server answers 0x81
	}
	for _, tt := range tests {
		err := CheckShape(&tt.req)
		switch {
		case tt.wantErr == "" && err != nil:
			t.Errorf("%v ex=%d key=%d val=%d: unexpected %v", tt.req.Opcode, len(tt.req.Extras), len(tt.req.Key), len(tt.req.Value), err)
		case tt.wantErr != "" && (err == nil || !errors.Is(err, ErrInvalidShape) || !strings.HasSuffix(err.Error(), tt.wantErr)):
			t.Errorf("%v ex=%d key=%d val=%d: error %v, want ErrInvalidShape ending %q", tt.req.Opcode, len(tt.req.Extras), len(tt.req.Key), len(tt.req.Value), err, tt.wantErr)
		}
	}
}

func TestExtras(t *testing.T) {
	set := AppendSetExtras(nil, 0xdeadbeef, 300)
	if flags, exp, ok := SetExtras(set); !ok || flags != 0xdeadbeef || exp != 300 || !bytes.Equal(set, hx("deadbeef 0000012c")) {
		t.Errorf("SetExtras(%x) = %#x, %d, %v", set, flags, exp, ok)
	}
	arith := AppendArithExtras(nil, 1, math.MaxUint64, 0xffffffff)
	if d, i, e, ok := ArithExtras(arith); !ok || d != 1 || i != math.MaxUint64 || e != 0xffffffff ||
		!bytes.Equal(arith, hx("0000000000000001 ffffffffffffffff ffffffff")) {
		t.Errorf("ArithExtras(%x) = %d, %d, %d, %v", arith, d, i, e, ok)
	}
	if e, ok := TouchExtras(hx("00000064")); !ok || e != 100 {
		t.Errorf("TouchExtras = %d, %v", e, ok)
	}
	if d, ok := FlushExtras(nil); !ok || d != 0 {
		t.Errorf("FlushExtras(nil) = %d, %v", d, ok)
	}
	if d, ok := FlushExtras(hx("0000000a")); !ok || d != 10 {
		t.Errorf("FlushExtras(10) = %d, %v", d, ok)
	}
	if l, ok := VerbosityExtras(hx("00000002")); !ok || l != 2 {
		t.Errorf("VerbosityExtras = %d, %v", l, ok)
	}
	for _, n := range []int{0, 1, 3, 5, 7, 9, 19, 21} {
		b := make([]byte, n)
		if _, _, ok := SetExtras(b); ok && n != 8 {
			t.Errorf("SetExtras accepted %d bytes", n)
		}
		if _, _, _, ok := ArithExtras(b); ok {
			t.Errorf("ArithExtras accepted %d bytes", n)
		}
		if _, ok := TouchExtras(b); ok {
			t.Errorf("TouchExtras accepted %d bytes", n)
		}
		if _, ok := FlushExtras(b); ok && n != 0 {
			t.Errorf("FlushExtras accepted %d bytes", n)
		}
		if _, ok := VerbosityExtras(b); ok {
			t.Errorf("VerbosityExtras accepted %d bytes", n)
		}
	}
	if got := AppendUint64(AppendUint32(AppendUint16(nil, 1), 2), 3); !bytes.Equal(got, hx("0001 00000002 0000000000000003")) {
		t.Errorf("AppendUint* = %x", got)
	}
}
