package tenant

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/tidwall/gjson"
)

// TEMPORARY: replaced by the limits branch's tenant/limit.go at merge.

// NodeSettings are the node throttle settings 0x2c changes and the node persists.
type NodeSettings struct {
	Capacity         int64 `json:"capacity"`
	DefaultReserved  int64 `json:"default_throttle_reserved_units"`
	DefaultHardLimit int64 `json:"default_throttle_hard_limit"`
}

// FormatLimit is "unlimited" or the decimal value.
func FormatLimit(v int64) string {
	if v < 0 {
		return "unlimited"
	}
	return strconv.FormatInt(v, 10)
}

// LimitsText is "reserved=X hard_limit=Y" for log lines.
func LimitsText(reserved, hard int64) string {
	return "reserved=" + FormatLimit(reserved) + " hard_limit=" + FormatLimit(hard)
}

// MaxThrottleDocLen bounds the value of 0x2a and 0x2c.
const MaxThrottleDocLen = 1024

// ParseBucketThrottle parses a 0x2a body; a missing field means "unlimited".
func ParseBucketThrottle(value []byte) (reserved, hard int64, err error) {
	doc, err := throttleDoc(value, "reserved", "hard_limit")
	if err == nil {
		reserved, err = limitField(doc, "reserved")
	}
	if err == nil {
		hard, err = limitField(doc, "hard_limit")
	}
	return reserved, hard, err
}

// ParseNodeThrottle parses a 0x2c body over cur.
func ParseNodeThrottle(value []byte, cur NodeSettings) (NodeSettings, error) {
	doc, err := throttleDoc(value, "capacity", "default_throttle_reserved_units", "default_throttle_hard_limit")
	if err != nil {
		return cur, err
	}
	next := cur
	if f := doc.Get("capacity"); f.Exists() {
		if next.Capacity, err = countField(f, "capacity"); err != nil {
			return cur, err
		}
	}
	r, h := doc.Get("default_throttle_reserved_units"), doc.Get("default_throttle_hard_limit")
	if r.Exists() != h.Exists() {
		return cur, errors.New("default_throttle_reserved_units and default_throttle_hard_limit must be set together")
	}
	if r.Exists() {
		if next.DefaultReserved, err = limitField(doc, "default_throttle_reserved_units"); err != nil {
			return cur, err
		}
		if next.DefaultHardLimit, err = limitField(doc, "default_throttle_hard_limit"); err != nil {
			return cur, err
		}
		if r, h := next.DefaultReserved, next.DefaultHardLimit; h >= 0 && (r < 0 || r > h) {
			return cur, fmt.Errorf("default_throttle_reserved_units %s exceeds default_throttle_hard_limit %s",
				FormatLimit(r), FormatLimit(h))
		}
	}
	return next, nil
}

// throttleDoc checks a throttle command's value: at most 1 KiB of JSON
// object whose keys are among allowed. Empty means {}.
func throttleDoc(value []byte, allowed ...string) (gjson.Result, error) {
	if len(value) > MaxThrottleDocLen {
		return gjson.Result{}, fmt.Errorf("value is %d bytes, over the %d byte limit", len(value), MaxThrottleDocLen)
	}
	if len(value) == 0 {
		value = []byte("{}")
	}
	if !gjson.ValidBytes(value) {
		return gjson.Result{}, errors.New("value is not valid JSON")
	}
	doc := gjson.ParseBytes(value)
	if !doc.IsObject() {
		return gjson.Result{}, errors.New("value must be a JSON object")
	}
	var err error
	doc.ForEach(func(k, _ gjson.Result) bool {
		for _, a := range allowed {
			if k.Str == a {
				return true
			}
		}
		err = fmt.Errorf("unknown field %q", k.Str)
		return false
	})
	return doc, err
}

// limitField reads a limit: a non-negative integer or "unlimited"; a
// missing field is unlimited.
func limitField(doc gjson.Result, name string) (int64, error) {
	f := doc.Get(name)
	switch {
	case !f.Exists():
		return Unlimited, nil
	case f.Type == gjson.String && f.Str == "unlimited":
		return Unlimited, nil
	case f.Type == gjson.Number:
		return countField(f, name)
	}
	return 0, fmt.Errorf("%s must be a non-negative integer or \"unlimited\", got %s", name, f.Raw)
}

// countField reads a non-negative integer.
func countField(f gjson.Result, name string) (int64, error) {
	n, err := strconv.ParseInt(f.Raw, 10, 64)
	if f.Type != gjson.Number || err != nil || n < 0 {
		return 0, fmt.Errorf("%s must be a non-negative integer, got %s", name, f.Raw)
	}
	return n, nil
}

// Limit is a limit as JSON: a number or "unlimited".
type Limit int64

// MarshalJSON writes a number or "unlimited".
func (l Limit) MarshalJSON() ([]byte, error) {
	if l < 0 {
		return []byte(`"unlimited"`), nil
	}
	return strconv.AppendInt(nil, int64(l), 10), nil
}
