package tenant

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
)

// Unlimited is the Reserved or HardLimit value for "no limit", written
// "unlimited" in JSON and on the command line. An unlimited reservation
// turns throttling off for the bucket.
const Unlimited int64 = -1

// MaxLimit is the largest finite limit or capacity, in units per second:
// far above any node's, and small enough that the sums the throttle keeps
// (the reservations of every bucket) cannot overflow.
const MaxLimit int64 = 1 << 40

// unlimitedText is how Unlimited is written.
const unlimitedText = "unlimited"

// limitWant says in words what a limit accepts; error texts use it.
const limitWant = `a non-negative integer or "unlimited"`

// Limit is a units-per-second limit as JSON: a non-negative integer, or
// Unlimited written as the string "unlimited". It is the one codec of that
// value: the config file, bucket settings, persisted settings and kvctl's
// flags all go through it, and the throttle commands' documents (parsed
// with gjson, see ParseBucketThrottle) accept exactly the same values.
type Limit int64

// IsUnlimited reports whether l is Unlimited.
func (l Limit) IsUnlimited() bool { return int64(l) == Unlimited }

// String returns "unlimited" or the decimal number.
func (l Limit) String() string { return FormatLimit(int64(l)) }

// MarshalJSON writes a number or "unlimited". A negative value other than
// Unlimited is an error: it could not be read back.
func (l Limit) MarshalJSON() ([]byte, error) {
	switch {
	case l.IsUnlimited():
		return []byte(`"` + unlimitedText + `"`), nil
	case l < 0:
		return nil, fmt.Errorf("%w: limit %d is negative", ErrInvalidSettings, int64(l))
	}
	return strconv.AppendInt(nil, int64(l), 10), nil
}

// UnmarshalJSON accepts a non-negative integer or "unlimited"; null leaves
// l as it is (like encoding/json for other types). Anything else is a
// *json.UnmarshalTypeError, so that encoding/json adds the field's name;
// LimitTypeWant describes its Type in words.
func (l *Limit) UnmarshalJSON(b []byte) error {
	switch string(b) {
	case "null":
		return nil
	case `"` + unlimitedText + `"`:
		*l = Limit(Unlimited)
		return nil
	}
	n, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil || n < 0 {
		return &json.UnmarshalTypeError{Value: DescribeJSON(b), Type: limitType}
	}
	*l = Limit(n)
	return nil
}

// limitType is Limit's reflect.Type, the Type of UnmarshalJSON's errors.
var limitType = reflect.TypeFor[Limit]()

// LimitTypeWant returns what a field of type t accepts in words if t is
// Limit (`a non-negative integer or "unlimited"`), else "". Decoders that
// turn a *json.UnmarshalTypeError into a message use it.
func LimitTypeWant(t reflect.Type) string {
	if t == limitType {
		return limitWant
	}
	return ""
}

// ParseLimit reads a limit written as text (a command-line flag): a
// non-negative decimal integer or "unlimited".
func ParseLimit(s string) (int64, error) {
	if s == unlimitedText {
		return Unlimited, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("want %s, got %q", limitWant, s)
	}
	return n, nil
}

// FormatLimit writes a limit as text: "unlimited" for any negative value,
// else the decimal number.
func FormatLimit(v int64) string {
	if v < 0 {
		return unlimitedText
	}
	return strconv.FormatInt(v, 10)
}

// LimitsText writes a reserved / hard-limit pair as
// "reserved=X hard_limit=Y", the form logs use.
func LimitsText(reserved, hard int64) string {
	return "reserved=" + FormatLimit(reserved) + " hard_limit=" + FormatLimit(hard)
}

// DescribeJSON names a JSON value the way encoding/json's errors do
// ("number -5", `string "lots"`, "bool"), cut to a readable length.
func DescribeJSON(b []byte) string {
	const maxLen = 40
	s := string(b)
	if len(s) > maxLen {
		s = s[:maxLen] + "…"
	}
	switch {
	case len(b) == 0:
		return "nothing"
	case b[0] == '"':
		return "string " + s
	case b[0] == '-' || (b[0] >= '0' && b[0] <= '9'):
		return "number " + s
	case b[0] == 't' || b[0] == 'f':
		return "bool"
	case b[0] == 'n':
		return "null"
	case b[0] == '{':
		return "object"
	case b[0] == '[':
		return "array"
	}
	return s
}
