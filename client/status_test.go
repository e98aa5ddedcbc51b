package client

import (
	"testing"

	"kvd/protocol/binary"
)

func TestErrorContext(t *testing.T) {
	for _, tc := range []struct{ body, want string }{
		{`{"error":{"context":"reserved 900 is above hard_limit 500"}}`, "reserved 900 is above hard_limit 500"},
		{`{"error":{"context":"no such bucket: x","ref":"abc"}}`, "no such bucket: x"},
		{`{"error":{"context":""}}`, ""},
		{`{"next_tick_us":1200}`, `{"next_tick_us":1200}`},
		{`{"error":"flat"}`, `{"error":"flat"}`},
		{"  Not found\r\n", "Not found"},
		{"line one\nline\x00two", "line one line two"},
		{"bad \xff utf8", "bad \uFFFD utf8"},
		{"", ""},
	} {
		if got := errorContext([]byte(tc.body)); got != tc.want {
			t.Errorf("errorContext(%q) = %q, want %q", tc.body, got, tc.want)
		}
	}
}

func TestStatusErrorText(t *testing.T) {
	for _, tc := range []struct {
		err        StatusError
		error, why string
	}{
		{
			StatusError{binary.OpSetBucketThrottle, binary.StatusInvalidArguments, "reserved must be a non-negative integer"},
			"SET_BUCKET_THROTTLE_PROPERTIES: invalid arguments (0x04): reserved must be a non-negative integer",
			"invalid arguments (0x04): reserved must be a non-negative integer",
		},
		{
			StatusError{binary.OpSASLAuth, binary.StatusAuthError, "Authentication failed"},
			"SASL_AUTH: authentication failed (0x20)", "authentication failed (0x20)",
		},
		{
			StatusError{binary.OpDeleteBucket, binary.StatusKeyNotFound, ""},
			"DELETE_BUCKET: not found (0x01)", "not found (0x01)",
		},
		{
			StatusError{binary.OpGet, binary.Status(0x1234), "odd"},
			"GET: status 0x1234: odd", "status 0x1234: odd",
		},
		{
			StatusError{binary.Opcode(0x5f), binary.StatusUnknownCommand, ""},
			"0x5f: unknown command (0x81)", "unknown command (0x81)",
		},
	} {
		if got := tc.err.Error(); got != tc.error {
			t.Errorf("Error() = %q, want %q", got, tc.error)
		}
		if got := tc.err.Reason(); got != tc.why {
			t.Errorf("Reason() = %q, want %q", got, tc.why)
		}
	}
}

func TestOptionsValidate(t *testing.T) {
	long := string(make([]byte, binary.MaxKeyLen+1))
	for _, tc := range []struct {
		name string
		o    Options
		ok   bool
	}{
		{"zero", Options{}, true},
		{"user", Options{User: "admin", Password: "pw", Bucket: "app"}, true},
		{"negative timeout", Options{Timeout: -1}, false},
		{"password without user", Options{Password: "pw"}, false},
		{"long agent", Options{Agent: long}, false},
		{"long bucket", Options{Bucket: long}, false},
	} {
		tc.o.EnsureDefaults()
		if err := tc.o.Validate(); (err == nil) != tc.ok {
			t.Errorf("%s: Validate() = %v, want ok=%v", tc.name, err, tc.ok)
		}
	}
	var o Options
	o.EnsureDefaults()
	if o.Timeout != DefaultTimeout || o.Agent != DefaultAgent || len(o.Features) != 3 {
		t.Errorf("EnsureDefaults() = %+v", o)
	}
	o = Options{Features: []uint16{}}
	o.EnsureDefaults()
	if o.Features == nil || len(o.Features) != 0 {
		t.Errorf("EnsureDefaults replaced an explicit empty feature list: %v", o.Features)
	}
}
