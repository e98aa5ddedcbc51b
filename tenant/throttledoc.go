package tenant

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tidwall/gjson"
)

// MaxThrottleDocLen bounds the JSON value of SetBucketThrottleProperties
// (0x2a), SetNodeThrottleProperties (0x2c) and CREATE_BUCKET.
const MaxThrottleDocLen = 1024

// CheckDocLen refuses a settings value over MaxThrottleDocLen, as 0x2a and
// 0x2c do (an error matching ErrInvalidSettings whose text is the reason).
func CheckDocLen(value []byte) error {
	if len(value) > MaxThrottleDocLen {
		return docErrorf("value is %d bytes, over the %d byte limit", len(value), MaxThrottleDocLen)
	}
	return nil
}

// Field names of the throttle documents.
const (
	fieldReserved         = "reserved"
	fieldHardLimit        = "hard_limit"
	fieldCapacity         = "capacity"
	fieldDefaultReserved  = "default_throttle_reserved_units"
	fieldDefaultHardLimit = "default_throttle_hard_limit"

	fieldMaxConcurrent      = "max_concurrent"
	fieldMaxQueued          = "max_queued"
	fieldQueueTimeoutMS     = "queue_timeout_ms"
	fieldDeadlineMS         = "deadline_ms"
	fieldDeadlinePercentile = "deadline_percentile"
	fieldExpectedExecUS     = "expected_execution_us"
)

// NodeSettings are the node throttle settings 0x2c changes and the node
// persists. The JSON tags are the persisted form: keep them.
type NodeSettings struct {
	// Capacity is the node's units per second.
	Capacity int64 `json:"capacity"`
	// DefaultReserved and DefaultHardLimit (each a number or Unlimited)
	// apply to buckets created afterwards.
	DefaultReserved  int64 `json:"default_throttle_reserved_units"`
	DefaultHardLimit int64 `json:"default_throttle_hard_limit"`
}

// DefaultNodeSettings returns the node settings of a node that was given
// none: DefaultCapacity, DefaultReserved and DefaultHardLimit.
func DefaultNodeSettings() NodeSettings {
	return NodeSettings{Capacity: DefaultCapacity, DefaultReserved: DefaultReserved, DefaultHardLimit: DefaultHardLimit}
}

// docError is a throttle document's problem. Its text is the bare reason
// the server sends back to the client (and black-box tests compare); it
// still matches ErrInvalidSettings with errors.Is.
type docError struct{ reason string }

func (e *docError) Error() string { return e.reason }
func (e *docError) Unwrap() error { return ErrInvalidSettings }

func docErrorf(format string, args ...any) error {
	return &docError{fmt.Sprintf(format, args...)}
}

// ParseBucketThrottle parses a SetBucketThrottleProperties (0x2a) value,
// {"reserved":…, "hard_limit":…}, each a non-negative integer or
// "unlimited"; a missing field means "unlimited".
// Errors match ErrInvalidSettings and their text is the reason for the
// client. It does not check reserved ≤ hard_limit: Settings.Validate does,
// on the bucket's whole settings.
func ParseBucketThrottle(value []byte) (reserved, hard int64, err error) {
	doc, err := throttleDoc(value, fieldReserved, fieldHardLimit)
	if err != nil {
		return 0, 0, err
	}
	if reserved, err = limitField(doc, fieldReserved); err != nil {
		return 0, 0, err
	}
	if hard, err = limitField(doc, fieldHardLimit); err != nil {
		return 0, 0, err
	}
	return reserved, hard, nil
}

// ParseBucketSettings parses an extended SetBucketThrottleProperties (0x2a)
// value over cur, the bucket's settings, and returns its new settings:
//
//	{"reserved":…, "hard_limit":…,                          (SPEC section 5)
//	 "max_concurrent":N, "max_queued":N, "queue_timeout_ms":N, (SPEC section 7)
//	 "deadline_ms":N, "deadline_percentile":N, "expected_execution_us":N}
//
// reserved and hard_limit keep ParseBucketThrottle's meaning: a missing one
// is "unlimited" (so {} lifts both limits). A missing
// section-7 field leaves that setting unchanged; a present one is a
// non-negative integer, 0 meaning "no per-bucket limit" (for
// queue_timeout_ms: the node's ingress.queue_timeout_ms; for
// deadline_percentile: DefaultDeadlinePercentile). The result passes
// Settings.Validate. Errors match ErrInvalidSettings and their text is the
// reason for the client; on error it returns cur.
func ParseBucketSettings(value []byte, cur Settings) (Settings, error) {
	doc, err := throttleDoc(value, fieldReserved, fieldHardLimit, fieldMaxConcurrent, fieldMaxQueued,
		fieldQueueTimeoutMS, fieldDeadlineMS, fieldDeadlinePercentile, fieldExpectedExecUS)
	if err != nil {
		return cur, err
	}
	next := cur
	if next.Reserved, err = limitField(doc, fieldReserved); err != nil {
		return cur, err
	}
	if next.HardLimit, err = limitField(doc, fieldHardLimit); err != nil {
		return cur, err
	}
	if err := patchSection7(doc, &next); err != nil {
		return cur, err
	}
	if err := next.Validate(); err != nil {
		return cur, &docError{strings.TrimPrefix(err.Error(), ErrInvalidSettings.Error()+": ")}
	}
	return next, nil
}

// patchSection7 sets the section-7 fields present in doc on s.
func patchSection7(doc gjson.Result, s *Settings) error {
	for _, f := range []struct {
		name string
		n    *int
	}{
		{fieldMaxConcurrent, &s.MaxConcurrent},
		{fieldMaxQueued, &s.MaxQueued},
		{fieldDeadlinePercentile, &s.DeadlinePercentile},
	} {
		if v := doc.Get(f.name); v.Exists() {
			n, err := countField(v, f.name)
			if err != nil {
				return err
			}
			if n > MaxCount {
				return docErrorf("%s %d is too large: at most %d", f.name, n, MaxCount)
			}
			*f.n = int(n)
		}
	}
	for _, f := range []struct {
		name string
		unit time.Duration
		d    *time.Duration
	}{
		{fieldQueueTimeoutMS, time.Millisecond, &s.QueueTimeout},
		{fieldDeadlineMS, time.Millisecond, &s.Deadline},
		{fieldExpectedExecUS, time.Microsecond, &s.ExpectedExecution},
	} {
		if v := doc.Get(f.name); v.Exists() {
			n, err := countField(v, f.name)
			if err != nil {
				return err
			}
			if n > int64(MaxDuration/f.unit) {
				return docErrorf("%s %d is too large: at most %d", f.name, n, MaxDuration/f.unit)
			}
			*f.d = time.Duration(n) * f.unit
		}
	}
	return nil
}

// ParseNodeThrottle parses a SetNodeThrottleProperties (0x2c) value over
// cur: {"capacity":N, "default_throttle_reserved_units":…,
// "default_throttle_hard_limit":…}, every field optional, the two defaults
// together and with reserved ≤ hard limit. On error it returns cur and an
// error that matches ErrInvalidSettings, whose text is the reason for the
// client.
func ParseNodeThrottle(value []byte, cur NodeSettings) (NodeSettings, error) {
	doc, err := throttleDoc(value, fieldCapacity, fieldDefaultReserved, fieldDefaultHardLimit)
	if err != nil {
		return cur, err
	}
	next := cur
	if f := doc.Get(fieldCapacity); f.Exists() {
		if next.Capacity, err = countField(f, fieldCapacity); err != nil || next.Capacity == 0 {
			return cur, docErrorf("%s must be a positive integer, got %s", fieldCapacity, f.Raw)
		}
	}
	r, h := doc.Get(fieldDefaultReserved), doc.Get(fieldDefaultHardLimit)
	if r.Exists() != h.Exists() {
		return cur, docErrorf("%s and %s must be set together", fieldDefaultReserved, fieldDefaultHardLimit)
	}
	if r.Exists() {
		if next.DefaultReserved, err = limitField(doc, fieldDefaultReserved); err != nil {
			return cur, err
		}
		if next.DefaultHardLimit, err = limitField(doc, fieldDefaultHardLimit); err != nil {
			return cur, err
		}
	}
	if err := next.Validate(); err != nil {
		return cur, err
	}
	return next, nil
}

// Validate checks node settings as a whole: a positive capacity (as
// node_capacity in the config file) and default reserved ≤ default hard
// limit. Errors match ErrInvalidSettings.
func (n NodeSettings) Validate() error {
	if n.Capacity <= 0 {
		return docErrorf("%s must be positive, got %d", fieldCapacity, n.Capacity)
	}
	if n.Capacity > MaxLimit || n.DefaultReserved > MaxLimit || n.DefaultHardLimit > MaxLimit {
		return docErrorf("%s, %s and %s are at most %d (2^40)", fieldCapacity, fieldDefaultReserved, fieldDefaultHardLimit, MaxLimit)
	}
	if r, h := n.DefaultReserved, n.DefaultHardLimit; h >= 0 && (r < 0 || r > h) {
		return docErrorf("%s %s exceeds %s %s", fieldDefaultReserved, FormatLimit(r), fieldDefaultHardLimit, FormatLimit(h))
	}
	return nil
}

// throttleDoc checks a throttle command's value: at most MaxThrottleDocLen
// bytes of a JSON object whose keys are among allowed. An empty value is
// not JSON: refused, so that a client that lost its body does not lift a
// bucket's limits (kv_engine's JSON parse refuses it too).
func throttleDoc(value []byte, allowed ...string) (gjson.Result, error) {
	if err := CheckDocLen(value); err != nil {
		return gjson.Result{}, err
	}
	if len(value) == 0 {
		return gjson.Result{}, &docError{"value is not valid JSON: it is empty (send a JSON object)"}
	}
	if !gjson.ValidBytes(value) {
		return gjson.Result{}, &docError{"value is not valid JSON"}
	}
	doc := gjson.ParseBytes(value)
	if !doc.IsObject() {
		return gjson.Result{}, &docError{"value must be a JSON object"}
	}
	var err error
	seen := make([]bool, len(allowed))
	doc.ForEach(func(k, _ gjson.Result) bool {
		i := slices.Index(allowed, k.Str)
		switch {
		case i < 0:
			err = docErrorf("unknown field %q", k.Str)
		case seen[i]: // gjson would read the first: refuse, as the config file does
			err = docErrorf("duplicate field %q", k.Str)
		default:
			seen[i] = true
		}
		return err == nil
	})
	return doc, err
}

// limitField reads a limit, the gjson twin of Limit.UnmarshalJSON: a
// non-negative integer or "unlimited"; a missing field is unlimited.
func limitField(doc gjson.Result, name string) (int64, error) {
	f := doc.Get(name)
	switch {
	case !f.Exists():
		return Unlimited, nil
	case f.Type == gjson.String && f.Str == unlimitedText:
		return Unlimited, nil
	case f.Type == gjson.Number:
		return countField(f, name)
	}
	return 0, docErrorf("%s must be %s, got %s", name, limitWant, f.Raw)
}

// countField reads a non-negative integer.
func countField(f gjson.Result, name string) (int64, error) {
	n, err := strconv.ParseInt(f.Raw, 10, 64)
	if f.Type != gjson.Number || err != nil || n < 0 {
		return 0, docErrorf("%s must be a non-negative integer, got %s", name, f.Raw)
	}
	return n, nil
}
