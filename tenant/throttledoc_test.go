package tenant

import (
	"errors"
	"testing"
	"time"
)

func TestParseBucketSettings(t *testing.T) {
	cur := Settings{Reserved: 100, HardLimit: 200, MaxConcurrent: 3, MaxQueued: 9, QueueTimeout: 40 * time.Millisecond,
		Deadline: 15 * time.Millisecond, DeadlinePercentile: 95, ExpectedExecution: 800 * time.Microsecond}
	for _, c := range []struct {
		in   string
		want Settings
	}{
		// reserved and hard_limit: missing means unlimited (SPEC 5);
		// section-7 fields: missing means unchanged.
		{`{}`, func() Settings { s := cur; s.Reserved, s.HardLimit = Unlimited, Unlimited; return s }()},
		{`{"reserved":5,"hard_limit":"unlimited"}`, func() Settings { s := cur; s.Reserved, s.HardLimit = 5, Unlimited; return s }()},
		{`{"reserved":100,"hard_limit":200,"max_concurrent":2,"max_queued":4,"queue_timeout_ms":5}`,
			func() Settings {
				s := cur
				s.MaxConcurrent, s.MaxQueued, s.QueueTimeout = 2, 4, 5*time.Millisecond
				return s
			}()},
		{`{"reserved":100,"hard_limit":200,"deadline_ms":0,"deadline_percentile":50,"expected_execution_us":7}`,
			func() Settings {
				s := cur
				s.Deadline, s.DeadlinePercentile, s.ExpectedExecution = 0, 50, 7*time.Microsecond
				return s
			}()},
	} {
		got, err := ParseBucketSettings([]byte(c.in), cur)
		if err != nil || got != c.want {
			t.Errorf("ParseBucketSettings(%s) = %+v, %v; want %+v", c.in, got, err, c.want)
		}
	}
	for in, reason := range map[string]string{
		`{"max_concurrent":-1}`:                    `max_concurrent must be a non-negative integer, got -1`,
		`{"max_queued":1.5}`:                       `max_queued must be a non-negative integer, got 1.5`,
		`{"queue_timeout_ms":"5"}`:                 `queue_timeout_ms must be a non-negative integer, got "5"`,
		`{"deadline_percentile":20}`:               `deadline_percentile 20, want 50..99 (or 0 for 99)`,
		`{"queue_timeout_ms":9223372036854775807}`: `queue_timeout_ms 9223372036854775807 is too large: at most 86400000`,
		`{"deadline_ms":200000000000}`:             `deadline_ms 200000000000 is too large: at most 86400000`,
		`{"expected_execution_us":86400000001}`:    `expected_execution_us 86400000001 is too large: at most 86400000000`,
		`{"max_concurent":2}`:                      `unknown field "max_concurent"`,
		`{"reserved":300,"hard_limit":200}`:        `reserved 300 exceeds hard_limit 200`,
		`{"max_concurrent":2,"max_concurrent":3,}`: `value is not valid JSON`,
		`[1]`:                              `value must be a JSON object`,
		``:                                 `value is not valid JSON: it is empty (send a JSON object)`,
		`{"max_concurrent":99999999999}`:   `max_concurrent 99999999999 is too large: at most 2147483647`,
		`{"reserved":9223372036854775807}`: `reserved 9223372036854775807, hard_limit unlimited: a limit is at most 1099511627776 (2^40) units/s`,
	} {
		got, err := ParseBucketSettings([]byte(in), cur)
		if err == nil || err.Error() != reason || !errors.Is(err, ErrInvalidSettings) || got != cur {
			t.Errorf("ParseBucketSettings(%s) = %+v, %v; want cur and %q", in, got, err, reason)
		}
	}
}
