package tenant

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func TestLimitJSON(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Limit
		ok   bool
	}{
		{`0`, 0, true}, {`7`, 7, true}, {`"unlimited"`, Limit(Unlimited), true},
		{`-1`, 0, false}, {`1.5`, 0, false}, {`1e3`, 0, false}, {`"7"`, 0, false},
		{`"Unlimited"`, 0, false}, {`true`, 0, false}, {`{}`, 0, false},
	} {
		var got struct {
			L Limit `json:"l"`
		}
		err := json.Unmarshal([]byte(`{"l":`+tc.in+`}`), &got)
		if (err == nil) != tc.ok || tc.ok && got.L != tc.want {
			t.Errorf("%s: got %d, %v; want %d ok=%v", tc.in, got.L, err, tc.want, tc.ok)
			continue
		}
		if !tc.ok {
			var te *json.UnmarshalTypeError
			if !errors.As(err, &te) || te.Field != "l" || LimitTypeWant(te.Type) == "" {
				t.Errorf("%s: error %v (%T), want an UnmarshalTypeError naming field l", tc.in, err, err)
			}
			continue
		}
		out, err := json.Marshal(got.L)
		if err != nil || string(out) != tc.in {
			t.Errorf("%s: marshals back to %s, %v", tc.in, out, err)
		}
	}
	if _, err := json.Marshal(Limit(-2)); err == nil {
		t.Error("Limit(-2) marshals, want an error")
	}
	l := Limit(5)
	if err := json.Unmarshal([]byte(`null`), &l); err != nil || l != 5 {
		t.Errorf("null: got %d, %v; want 5 unchanged", l, err)
	}
}

func TestParseFormatLimit(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
		ok   bool
	}{
		{"0", 0, true}, {"25000", 25000, true}, {"unlimited", Unlimited, true},
		{"-1", 0, false}, {"", 0, false}, {"1.5", 0, false}, {"UNLIMITED", 0, false}, {" 1", 0, false},
	} {
		got, err := ParseLimit(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("ParseLimit(%q) = %d, %v; want %d ok=%v", tc.in, got, err, tc.want, tc.ok)
		}
		if !tc.ok && (err == nil || err.Error() != `want a non-negative integer or "unlimited", got "`+tc.in+`"`) {
			t.Errorf("ParseLimit(%q) error %v", tc.in, err)
		}
		if tc.ok && FormatLimit(got) != tc.in {
			t.Errorf("FormatLimit(%d) = %q, want %q", got, FormatLimit(got), tc.in)
		}
	}
	if got := LimitsText(5000, Unlimited); got != "reserved=5000 hard_limit=unlimited" {
		t.Errorf("LimitsText = %q", got)
	}
	if got := Limit(Unlimited).String() + " " + Limit(3).String(); got != "unlimited 3" {
		t.Errorf("String: %q", got)
	}
}

func TestParseNodeThrottle(t *testing.T) {
	cur := NodeSettings{Capacity: 25000, DefaultReserved: 1666, DefaultHardLimit: Unlimited}
	for _, tc := range []struct {
		in   string
		want NodeSettings
		err  string
	}{
		{`{}`, cur, ""},
		{``, cur, "value is not valid JSON: it is empty (send a JSON object)"},
		{`{"capacity": 100}`, NodeSettings{100, 1666, -1}, ""},
		{`{"capacity": 1099511627777}`, cur, "capacity, default_throttle_reserved_units and default_throttle_hard_limit are at most 1099511627776 (2^40)"},
		{`{"default_throttle_reserved_units": 5, "default_throttle_hard_limit": "unlimited"}`, NodeSettings{25000, 5, -1}, ""},
		{`{"default_throttle_reserved_units": 5, "default_throttle_hard_limit": 5}`, NodeSettings{25000, 5, 5}, ""},
		{`{"default_throttle_reserved_units": 5}`, cur,
			"default_throttle_reserved_units and default_throttle_hard_limit must be set together"},
		{`{"default_throttle_reserved_units": 9, "default_throttle_hard_limit": 5}`, cur,
			"default_throttle_reserved_units 9 exceeds default_throttle_hard_limit 5"},
		{`{"default_throttle_reserved_units": "unlimited", "default_throttle_hard_limit": 5}`, cur,
			"default_throttle_reserved_units unlimited exceeds default_throttle_hard_limit 5"},
		{`{"capacity": "unlimited"}`, cur, `capacity must be a positive integer, got "unlimited"`},
		{`{"capacity": -1}`, cur, "capacity must be a positive integer, got -1"},
		{`{"capacity": 1.5}`, cur, "capacity must be a positive integer, got 1.5"},
		{`{"capacity": 1, "bogus": 2}`, cur, `unknown field "bogus"`},
		{`{"capacity": 0}`, cur, "capacity must be a positive integer, got 0"},
		{`{"capacity": 1, "capacity": 25000}`, cur, `duplicate field "capacity"`},
		{`[1]`, cur, "value must be a JSON object"},
		{`{"capacity":`, cur, "value is not valid JSON"},
		{`{"capacity": 1}` + strings.Repeat(" ", MaxThrottleDocLen), cur, "value is 1039 bytes, over the 1024 byte limit"},
	} {
		got, err := ParseNodeThrottle([]byte(tc.in), cur)
		switch {
		case tc.err == "" && (err != nil || got != tc.want):
			t.Errorf("%q: got %+v, %v; want %+v", tc.in, got, err, tc.want)
		case tc.err != "" && (err == nil || err.Error() != tc.err || got != cur):
			t.Errorf("%q: got %+v, error %v; want cur and error %q", tc.in, got, err, tc.err)
		case tc.err != "" && !errors.Is(err, ErrInvalidSettings):
			t.Errorf("%q: error %v does not match ErrInvalidSettings", tc.in, err)
		}
	}
}

func TestParseBucketThrottle(t *testing.T) {
	for _, tc := range []struct {
		in        string
		res, hard int64
		err       string
	}{
		{``, 0, 0, "value is not valid JSON: it is empty (send a JSON object)"},
		{`{}`, Unlimited, Unlimited, ""},
		{`{"reserved": "unlimited"}`, Unlimited, Unlimited, ""},
		{`{"reserved": 0}`, 0, Unlimited, ""},
		{`{"reserved": 7, "hard_limit": 9}`, 7, 9, ""},
		{`{"reserved": 9, "hard_limit": 7}`, 9, 7, ""}, // reserved > hard is Settings.Validate's call
		{`{"reserved": "7"}`, 0, 0, `reserved must be a non-negative integer or "unlimited", got "7"`},
		{`{"reserved": null}`, 0, 0, `reserved must be a non-negative integer or "unlimited", got null`},
		{`{"reserved": true}`, 0, 0, `reserved must be a non-negative integer or "unlimited", got true`},
		{`{"reserved": 1e3}`, 0, 0, "reserved must be a non-negative integer, got 1e3"},
		{`{"hard_limit": -5}`, 0, 0, "hard_limit must be a non-negative integer, got -5"},
		{`{"capacity": 5}`, 0, 0, `unknown field "capacity"`},
		{`{"reserved": 100, "reserved": 50}`, 0, 0, `duplicate field "reserved"`},
		{`"x"`, 0, 0, "value must be a JSON object"},
		{`{`, 0, 0, "value is not valid JSON"},
	} {
		r, h, err := ParseBucketThrottle([]byte(tc.in))
		switch {
		case tc.err == "" && (err != nil || r != tc.res || h != tc.hard):
			t.Errorf("%q: got %d, %d, %v; want %d, %d", tc.in, r, h, err, tc.res, tc.hard)
		case tc.err != "" && (err == nil || err.Error() != tc.err || !errors.Is(err, ErrInvalidSettings)):
			t.Errorf("%q: error %v, want %q matching ErrInvalidSettings", tc.in, err, tc.err)
		}
	}
}

// The config file's codec (Limit) and the wire documents' (gjson) accept
// and refuse the same values.
func TestLimitCodecsAgree(t *testing.T) {
	for _, v := range []string{`0`, `12`, `"unlimited"`, `-1`, `1.5`, `1e3`, `"7"`, `null`, `true`, `[]`, `9223372036854775808`} {
		var l Limit = 42
		jerr := json.Unmarshal([]byte(v), &l)
		if v == `null` {
			jerr = errors.New("null is absent for json, refused by the wire")
		}
		r, _, derr := ParseBucketThrottle([]byte(`{"reserved":` + v + `}`))
		if (jerr == nil) != (derr == nil) || jerr == nil && int64(l) != r {
			t.Errorf("%s: Limit gives %d, %v; ParseBucketThrottle gives %d, %v", v, l, jerr, r, derr)
		}
	}
}

func TestCheckObjectKeys(t *testing.T) {
	names := map[string]bool{"reserved": true, "hard_limit": true}
	for _, tc := range []struct {
		in      string
		key     string
		dup, ok bool
	}{
		{`{"reserved": 1, "hard_limit": {"x": 1}}`, "", false, true},
		{`{"Reserved": 1}`, "Reserved", false, false},
		{`{"reserved": 1, "reserved": 2}`, "reserved", true, false},
		{`{"": 1}`, "", false, false},
		{`[1]`, "", false, true},           // not an object: the typed decoding says so
		{`{"reserved": `, "", false, true}, // bad syntax: likewise
	} {
		key, dup, ok := CheckObjectKeys([]byte(tc.in), names)
		if key != tc.key || dup != tc.dup || ok != tc.ok {
			t.Errorf("%s: got %q, %v, %v; want %q, %v, %v", tc.in, key, dup, ok, tc.key, tc.dup, tc.ok)
		}
	}
}
