package tenant

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"strings"
	"time"
)

// Node throttle defaults (SPEC section 5): what a node given no setting
// uses, and what the config file's fields default to.
const (
	// DefaultCapacity is the node's units per second.
	DefaultCapacity int64 = 25000
	// DefaultReserved is the reserved units per second of a bucket created
	// without settings.
	DefaultReserved int64 = 1666
	// DefaultHardLimit is the hard limit of a bucket created without
	// settings.
	DefaultHardLimit = Unlimited
	// DefaultReadUnitSize is the bytes per read unit (RU).
	DefaultReadUnitSize = 4096
	// DefaultWriteUnitSize is the bytes per write unit (WU).
	DefaultWriteUnitSize = 1024
)

// DefaultDeadlinePercentile is the percentile the deadline gate uses when
// a bucket sets a deadline but DeadlinePercentile is 0.
const DefaultDeadlinePercentile = 99

// Bounds of the admission settings: counts fit an int32, and durations
// (queue_timeout_ms, deadline_ms, expected_execution_us) are at most a day,
// so that no arithmetic on them can overflow.
const (
	MaxCount    = math.MaxInt32
	MaxDuration = 24 * time.Hour
)

// Settings are one bucket's throttle, queue and deadline settings. The zero
// value (apart from Reserved and HardLimit, which callers usually take from
// the node defaults) means "no per-bucket limit". Settings is a plain value.
type Settings struct {
	// Reserved units per second guaranteed to the bucket, or Unlimited
	// (throttling off).
	Reserved int64
	// HardLimit on units per second, or Unlimited.
	HardLimit int64
	// MaxConcurrent bounds the bucket's commands in flight; 0 = no limit.
	MaxConcurrent int
	// MaxQueued bounds the bucket's commands waiting for admission;
	// 0 = no per-bucket limit (the node's queue depth still applies).
	MaxQueued int
	// QueueTimeout bounds a command's wait in the bucket's queue; 0 = the
	// node's ingress queue timeout.
	QueueTimeout time.Duration
	// Deadline is the latency target of deadline admission; 0 = no
	// deadline gate for the bucket.
	Deadline time.Duration
	// DeadlinePercentile is the execution-time percentile the gate
	// predicts with: 50..99, or 0 for DefaultDeadlinePercentile.
	DeadlinePercentile int
	// ExpectedExecution is the gate's prediction before the bucket has an
	// execution-time sample; 0 = admit until it has one.
	ExpectedExecution time.Duration
}

// Validate reports the first problem with s as an ErrInvalidSettings error
// whose text gives the reason in the JSON field names.
func (s Settings) Validate() error {
	if err := s.validateLimits(); err != nil {
		return err
	}
	for _, f := range []struct {
		name    string
		v, unit int64
		max     int64
	}{
		{"max_concurrent", int64(s.MaxConcurrent), 1, MaxCount},
		{"max_queued", int64(s.MaxQueued), 1, MaxCount},
		{"queue_timeout_ms", int64(s.QueueTimeout), int64(time.Millisecond), int64(MaxDuration)},
		{"deadline_ms", int64(s.Deadline), int64(time.Millisecond), int64(MaxDuration)},
		{"expected_execution_us", int64(s.ExpectedExecution), int64(time.Microsecond), int64(MaxDuration)},
	} {
		if f.v < 0 {
			return invalidf("%s must not be negative", f.name)
		}
		if f.v > f.max {
			return invalidf("%s %d is too large: at most %d", f.name, f.v/f.unit, f.max/f.unit)
		}
	}
	if p := s.DeadlinePercentile; p != 0 && (p < 50 || p > 99) {
		return invalidf("deadline_percentile %d, want 50..99 (or 0 for %d)", p, DefaultDeadlinePercentile)
	}
	return nil
}

func (s Settings) validateLimits() error {
	if s.Reserved < Unlimited {
		return invalidf("reserved %d is negative", s.Reserved)
	}
	if s.HardLimit < Unlimited {
		return invalidf("hard_limit %d is negative", s.HardLimit)
	}
	if s.Reserved > MaxLimit || s.HardLimit > MaxLimit {
		return invalidf("reserved %s, hard_limit %s: a limit is at most %d (2^40) units/s",
			FormatLimit(s.Reserved), FormatLimit(s.HardLimit), MaxLimit)
	}
	if s.HardLimit == Unlimited {
		return nil
	}
	if s.Reserved == Unlimited {
		return invalidf("reserved \"unlimited\" exceeds hard_limit %d", s.HardLimit)
	}
	if s.Reserved > s.HardLimit {
		return invalidf("reserved %d exceeds hard_limit %d", s.Reserved, s.HardLimit)
	}
	return nil
}

func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidSettings, fmt.Sprintf(format, args...))
}

// settingsJSON is the JSON form of Settings: the field names of a config
// file's bucket entry, durations in their unit, limits as Limit.
type settingsJSON struct {
	Reserved            *Limit `json:"reserved,omitempty"`
	HardLimit           *Limit `json:"hard_limit,omitempty"`
	MaxConcurrent       *int   `json:"max_concurrent,omitempty"`
	MaxQueued           *int   `json:"max_queued,omitempty"`
	QueueTimeoutMS      *int64 `json:"queue_timeout_ms,omitempty"`
	DeadlineMS          *int64 `json:"deadline_ms,omitempty"`
	DeadlinePercentile  *int   `json:"deadline_percentile,omitempty"`
	ExpectedExecutionUS *int64 `json:"expected_execution_us,omitempty"`
}

// MarshalJSON writes every field, limits as a number or "unlimited":
//
//	{"reserved":5000,"hard_limit":"unlimited","max_concurrent":0,"max_queued":0,
//	 "queue_timeout_ms":0,"deadline_ms":0,"deadline_percentile":0,"expected_execution_us":0}
//
// ParseSettings reads it back (durations are kept to the ms / µs).
func (s Settings) MarshalJSON() ([]byte, error) {
	r, h := Limit(s.Reserved), Limit(s.HardLimit)
	qt, dl, ee := s.QueueTimeout.Milliseconds(), s.Deadline.Milliseconds(), s.ExpectedExecution.Microseconds()
	return json.Marshal(settingsJSON{
		Reserved: &r, HardLimit: &h,
		MaxConcurrent: &s.MaxConcurrent, MaxQueued: &s.MaxQueued,
		QueueTimeoutMS: &qt, DeadlineMS: &dl,
		DeadlinePercentile: &s.DeadlinePercentile, ExpectedExecutionUS: &ee,
	})
}

// ParseSettings reads a JSON object of bucket settings (reserved,
// hard_limit, max_concurrent, max_queued, queue_timeout_ms, deadline_ms,
// deadline_percentile, expected_execution_us) over defaults: absent fields
// keep their default, and empty input returns defaults. Unknown fields,
// wrong types, anything but one object, and settings that fail Validate
// are ErrInvalidSettings errors that say why. It reads CREATE_BUCKET values
// and persisted settings.
func ParseSettings(data []byte, defaults Settings) (Settings, error) {
	data = bytes.TrimSpace(data)
	if len(data) == 0 {
		if err := defaults.Validate(); err != nil {
			return Settings{}, err
		}
		return defaults, nil
	}
	if data[0] != '{' {
		return Settings{}, invalidf("want a JSON object")
	}
	if err := checkSettingsKeys(data); err != nil {
		return Settings{}, err
	}
	var in settingsJSON
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		return Settings{}, decodeError(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return Settings{}, invalidf("unexpected data after the JSON object")
	}
	s, err := in.apply(defaults)
	if err == nil {
		err = s.Validate()
	}
	if err != nil {
		return Settings{}, err
	}
	return s, nil
}

// apply overlays the fields present in in over s.
func (in settingsJSON) apply(s Settings) (Settings, error) {
	setLimit(&s.Reserved, in.Reserved)
	setLimit(&s.HardLimit, in.HardLimit)
	setInt(&s.MaxConcurrent, in.MaxConcurrent)
	setInt(&s.MaxQueued, in.MaxQueued)
	setInt(&s.DeadlinePercentile, in.DeadlinePercentile)
	for _, d := range []struct {
		name string
		v    *int64
		unit time.Duration
		dst  *time.Duration
	}{
		{"queue_timeout_ms", in.QueueTimeoutMS, time.Millisecond, &s.QueueTimeout},
		{"deadline_ms", in.DeadlineMS, time.Millisecond, &s.Deadline},
		{"expected_execution_us", in.ExpectedExecutionUS, time.Microsecond, &s.ExpectedExecution},
	} {
		if d.v == nil {
			continue
		}
		if *d.v < 0 {
			return Settings{}, invalidf("%s must not be negative", d.name)
		}
		if *d.v > int64(MaxDuration/d.unit) {
			return Settings{}, invalidf("%s %d is too large: at most %d", d.name, *d.v, MaxDuration/d.unit)
		}
		*d.dst = time.Duration(*d.v) * d.unit
	}
	return s, nil
}

func setLimit(dst *int64, v *Limit) {
	if v != nil {
		*dst = int64(*v)
	}
}

func setInt(dst *int, v *int) {
	if v != nil {
		*dst = *v
	}
}

// settingsFields are the JSON names of settingsJSON's fields.
var settingsFields = func() map[string]bool {
	t := reflect.TypeFor[settingsJSON]()
	m := make(map[string]bool, t.NumField())
	for i := 0; i < t.NumField(); i++ {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		m[name] = true
	}
	return m
}()

// checkSettingsKeys rejects keys that are not exactly a settings field
// (encoding/json alone would accept "Reserved") and keys given twice. It
// leaves syntax and type errors to the decoding that follows.
func checkSettingsKeys(data []byte) error {
	key, dup, ok := CheckObjectKeys(data, settingsFields)
	switch {
	case ok:
		return nil
	case dup:
		return invalidf("duplicate field %q", key)
	}
	return invalidf("unknown field %q", key)
}

// CheckObjectKeys returns the first key of the JSON object in data that is
// not exactly one of names (encoding/json matches keys case-insensitively),
// or that appears twice (dup true); ok is true if there is none. It leaves
// everything else (a value that is not an object, bad syntax, wrong types)
// to the typed decoding that follows. The strict decoders of settings and
// of the config file use it.
func CheckObjectKeys(data []byte, names map[string]bool) (key string, dup, ok bool) {
	dec := json.NewDecoder(bytes.NewReader(data))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return "", false, true
	}
	seen := make(map[string]bool, len(names))
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return "", false, true
		}
		key, _ := tok.(string)
		switch {
		case !names[key]:
			return key, false, false
		case seen[key]:
			return key, true, false
		}
		seen[key] = true
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return "", false, true
		}
	}
	return "", false, true
}

// decodeError turns an encoding/json error into an ErrInvalidSettings
// error naming the field.
func decodeError(err error) error {
	var te *json.UnmarshalTypeError
	var se *json.SyntaxError
	switch {
	case errors.As(err, &te):
		return invalidf("field %q: got %s, want %s", te.Field, te.Value, typeWant(te.Type))
	case errors.As(err, &se):
		return invalidf("malformed JSON at offset %d: %v", se.Offset, se)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return invalidf("truncated JSON")
	}
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		return invalidf("unknown field %s", name)
	}
	return invalidf("%v", err)
}

func typeWant(t reflect.Type) string {
	if w := LimitTypeWant(t); w != "" {
		return w
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int64:
		return "an integer"
	}
	return t.String()
}

// maxBucketNameLen is the longest bucket name, as in Couchbase.
const maxBucketNameLen = 100

// ValidBucketName checks the bucket naming rule: 1 to 100 bytes, each a
// letter, digit, '_', '.', '%' or '-'. A violation is an
// ErrInvalidBucketName error that says why.
func ValidBucketName(name string) error {
	if name == "" || len(name) > maxBucketNameLen {
		return fmt.Errorf("%w %q: must be 1..%d bytes, got %d", ErrInvalidBucketName, name, maxBucketNameLen, len(name))
	}
	for i := 0; i < len(name); i++ {
		if !bucketNameByte(name[i]) {
			return fmt.Errorf("%w %q: byte %d (%q) is not one of A-Z a-z 0-9 _ . %% -",
				ErrInvalidBucketName, name, i, name[i])
		}
	}
	return nil
}

func bucketNameByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
		c == '_' || c == '.' || c == '%' || c == '-'
}
