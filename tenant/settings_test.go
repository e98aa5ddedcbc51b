package tenant

import (
	"errors"
	"strings"
	"testing"
	"time"
)

var testDefaults = Settings{Reserved: 1666, HardLimit: Unlimited, QueueTimeout: 3 * time.Second}

func TestParseSettings(t *testing.T) {
	tests := []struct {
		name, in string
		want     Settings
	}{
		{"empty", "", testDefaults},
		{"whitespace", " \n\t", testDefaults},
		{"empty object", "{}", testDefaults},
		{"reserved only", `{"reserved":5000}`, Settings{Reserved: 5000, HardLimit: Unlimited, QueueTimeout: 3 * time.Second}},
		{"both limits", `{"reserved":5000,"hard_limit":8000}`, Settings{Reserved: 5000, HardLimit: 8000, QueueTimeout: 3 * time.Second}},
		{"unlimited both", `{"reserved":"unlimited","hard_limit":"unlimited"}`,
			Settings{Reserved: Unlimited, HardLimit: Unlimited, QueueTimeout: 3 * time.Second}},
		{"zero limits", `{"reserved":0,"hard_limit":0}`, Settings{QueueTimeout: 3 * time.Second}},
		{"null keeps default", `{"reserved":null,"queue_timeout_ms":null}`, testDefaults},
		{"every field", `{"reserved":10,"hard_limit":20,"max_concurrent":3,"max_queued":4,
			"queue_timeout_ms":500,"deadline_ms":25,"deadline_percentile":95,"expected_execution_us":1500}`,
			Settings{Reserved: 10, HardLimit: 20, MaxConcurrent: 3, MaxQueued: 4, QueueTimeout: 500 * time.Millisecond,
				Deadline: 25 * time.Millisecond, DeadlinePercentile: 95, ExpectedExecution: 1500 * time.Microsecond}},
		{"percentile bounds", `{"deadline_percentile":50}`, Settings{Reserved: 1666, HardLimit: Unlimited,
			QueueTimeout: 3 * time.Second, DeadlinePercentile: 50}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseSettings([]byte(tt.in), testDefaults)
			if err != nil {
				t.Fatalf("ParseSettings(%s): %v", tt.in, err)
			}
			if got != tt.want {
				t.Errorf("ParseSettings(%s) = %+v, want %+v", tt.in, got, tt.want)
			}
		})
	}
}

func TestParseSettingsErrors(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{"unknown field", `{"reserved":1,"reservd":2}`, `unknown field "reservd"`},
		{"wrong case", `{"Reserved":1}`, `unknown field "Reserved"`},
		{"duplicate field", `{"reserved":1,"hard_limit":5,"reserved":2}`, `duplicate field "reserved"`},
		{"reserved string", `{"reserved":"lots"}`, `field "reserved": got string "lots", want a non-negative integer or "unlimited"`},
		{"reserved negative", `{"reserved":-5}`, `field "reserved": got number -5`},
		{"hard limit fraction", `{"hard_limit":1.5}`, `field "hard_limit": got number 1.5`},
		{"hard limit bool", `{"hard_limit":true}`, `field "hard_limit": got bool`},
		{"unlimited capitalised", `{"hard_limit":"Unlimited"}`, `field "hard_limit"`},
		{"max_concurrent string", `{"max_concurrent":"3"}`, `field "max_concurrent": got string, want an integer`},
		{"max_queued fraction", `{"max_queued":2.5}`, `field "max_queued": got number 2.5`},
		{"array", `[]`, "want a JSON object"},
		{"null", `null`, "want a JSON object"},
		{"string", `"x"`, "want a JSON object"},
		{"trailing data", `{}{}`, "unexpected data after"},
		{"truncated", `{"reserved":`, "truncated JSON"},
		{"syntax", `{"reserved" 5}`, "malformed JSON"},
		{"reserved above hard limit", `{"reserved":9000,"hard_limit":8000}`, "reserved 9000 exceeds hard_limit 8000"},
		{"reserved unlimited, hard limit finite", `{"reserved":"unlimited","hard_limit":8000}`,
			`reserved "unlimited" exceeds hard_limit 8000`},
		{"default reserved above hard limit", `{"hard_limit":1000}`, "reserved 1666 exceeds hard_limit 1000"},
		{"percentile low", `{"deadline_percentile":49}`, "deadline_percentile 49"},
		{"percentile high", `{"deadline_percentile":100}`, "deadline_percentile 100"},
		{"negative concurrency", `{"max_concurrent":-1}`, "max_concurrent must not be negative"},
		{"negative queued", `{"max_queued":-1}`, "max_queued must not be negative"},
		{"negative timeout", `{"queue_timeout_ms":-1}`, "queue_timeout_ms must not be negative"},
		{"negative deadline", `{"deadline_ms":-9223372036854775808}`, "deadline_ms must not be negative"},
		{"huge expected execution", `{"expected_execution_us":9223372036854775807}`, "expected_execution_us 9223372036854775807 is too large: at most 86400000000"},
		{"deadline over a day", `{"deadline_ms":86400001}`, "deadline_ms 86400001 is too large: at most 86400000"},
		{"queued over an int32", `{"max_queued":2147483648}`, "max_queued 2147483648 is too large: at most 2147483647"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseSettings([]byte(tt.in), testDefaults)
			if !errors.Is(err, ErrInvalidSettings) {
				t.Fatalf("ParseSettings(%s) error = %v, want ErrInvalidSettings", tt.in, err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not contain %q", err, tt.want)
			}
		})
	}
}

func TestSettingsValidate(t *testing.T) {
	ok := []Settings{
		{Reserved: Unlimited, HardLimit: Unlimited},
		{Reserved: 0, HardLimit: 0},
		{Reserved: 5, HardLimit: 5},
		{Reserved: 5, HardLimit: Unlimited, DeadlinePercentile: 99},
	}
	for _, s := range ok {
		if err := s.Validate(); err != nil {
			t.Errorf("%+v: %v", s, err)
		}
	}
	bad := []struct {
		s    Settings
		want string
	}{
		{Settings{Reserved: -2, HardLimit: Unlimited}, "reserved -2 is negative"},
		{Settings{Reserved: 1, HardLimit: -7}, "hard_limit -7 is negative"},
		{Settings{Reserved: 6, HardLimit: 5}, "reserved 6 exceeds hard_limit 5"},
		{Settings{Reserved: Unlimited, HardLimit: 5}, `reserved "unlimited" exceeds hard_limit 5`},
		{Settings{HardLimit: Unlimited, MaxConcurrent: -1}, "max_concurrent"},
		{Settings{HardLimit: Unlimited, MaxQueued: -1}, "max_queued"},
		{Settings{HardLimit: Unlimited, QueueTimeout: -time.Millisecond}, "queue_timeout_ms"},
		{Settings{HardLimit: Unlimited, Deadline: -1}, "deadline_ms"},
		{Settings{HardLimit: Unlimited, ExpectedExecution: -1}, "expected_execution_us"},
		{Settings{HardLimit: Unlimited, DeadlinePercentile: 1}, "deadline_percentile 1"},
		{Settings{HardLimit: Unlimited, DeadlinePercentile: -50}, "deadline_percentile -50"},
	}
	for _, tt := range bad {
		err := tt.s.Validate()
		if !errors.Is(err, ErrInvalidSettings) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%+v: error = %v, want ErrInvalidSettings containing %q", tt.s, err, tt.want)
		}
	}
}

func TestSettingsMarshalRoundTrip(t *testing.T) {
	full := Settings{Reserved: 5000, HardLimit: Unlimited, MaxConcurrent: 8, MaxQueued: 100,
		QueueTimeout: 2 * time.Second, Deadline: 40 * time.Millisecond, DeadlinePercentile: 90,
		ExpectedExecution: 250 * time.Microsecond}
	got, err := full.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"reserved":5000,"hard_limit":"unlimited","max_concurrent":8,"max_queued":100,` +
		`"queue_timeout_ms":2000,"deadline_ms":40,"deadline_percentile":90,"expected_execution_us":250}`
	if string(got) != want {
		t.Errorf("MarshalJSON =\n%s\nwant\n%s", got, want)
	}
	for _, s := range []Settings{
		full,
		{Reserved: Unlimited, HardLimit: Unlimited},
		{Reserved: 0, HardLimit: 0},
		{Reserved: 1, HardLimit: 2, MaxConcurrent: 1},
	} {
		data, err := s.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		// Defaults that differ from s in every field: nothing may be left out.
		other := Settings{Reserved: 7, HardLimit: 9, MaxConcurrent: 3, MaxQueued: 3, QueueTimeout: time.Hour,
			Deadline: time.Hour, DeadlinePercentile: 77, ExpectedExecution: time.Hour}
		back, err := ParseSettings(data, other)
		if err != nil {
			t.Fatalf("ParseSettings(%s): %v", data, err)
		}
		if back != s {
			t.Errorf("round trip of %+v via %s = %+v", s, data, back)
		}
	}
}

func TestValidBucketName(t *testing.T) {
	good := []string{"a", "default", "App_1.v2-%x", strings.Repeat("b", 100), "-", "%"}
	for _, n := range good {
		if err := ValidBucketName(n); err != nil {
			t.Errorf("ValidBucketName(%q) = %v", n, err)
		}
	}
	bad := []struct{ name, want string }{
		{"", "1..100 bytes"},
		{strings.Repeat("b", 101), "got 101"},
		{"a b", `byte 1 (' ')`},
		{"app/1", `byte 3 ('/')`},
		{"café", "byte 3"},
		{"*", `byte 0 ('*')`},
		{"a\x00", "byte 1"},
	}
	for _, tt := range bad {
		err := ValidBucketName(tt.name)
		if !errors.Is(err, ErrInvalidBucketName) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("ValidBucketName(%q) = %v, want ErrInvalidBucketName containing %q", tt.name, err, tt.want)
		}
	}
}
