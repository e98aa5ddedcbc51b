package config

import (
	"errors"
	"strings"
	"testing"
)

func TestValidateFailures(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{"zero capacity", `{"node_capacity": 0}`, `"node_capacity": must be positive, got 0`},
		{"capacity over 2^40", `{"node_capacity": 1099511627777}`, `"node_capacity": must be at most 1099511627776 (2^40), got 1099511627777`},
		{"zero read unit", `{"read_unit_size": 0}`, `"read_unit_size": must be positive`},
		{"negative write unit", `{"write_unit_size": -1}`, `"write_unit_size": must be positive, got -1`},
		{"zero per-bucket connections", `{"max_connections_per_bucket": 0}`, `"max_connections_per_bucket"`},
		{"zero connections", `{"max_connections": 0}`, `"max_connections": must be positive`},
		{"zero throttle wait", `{"max_throttle_wait_ms": 0}`, `"max_throttle_wait_ms"`},
		{"zero item size", `{"max_item_size": 0}`, `"max_item_size": must be positive`},
		{"zero frame size", `{"max_frame_size": 0}`, `"max_frame_size": must be positive`},
		{"frame too small for item", `{"max_item_size": 4096, "max_frame_size": 4096}`,
			`"max_frame_size": 4096 leaves no room for a max_item_size (4096) value: want at least 5120`},
		{"zero idle timeout", `{"idle_timeout_ms": 0}`, `"idle_timeout_ms": must be positive`},
		{"negative inflight", `{"max_inflight_bytes": -1}`, `"max_inflight_bytes": must not be negative`},
		{"negative block cache", `{"block_cache_bytes": -1}`, `"block_cache_bytes": must not be negative`},
		{"default reserved over hard", `{"default_throttle_reserved_units": 10, "default_throttle_hard_limit": 5}`,
			`"default_throttle_reserved_units": 10 exceeds default_throttle_hard_limit 5`},
		{"default reserved unlimited, hard finite",
			`{"default_throttle_reserved_units": "unlimited", "default_throttle_hard_limit": 5}`,
			`unlimited exceeds default_throttle_hard_limit 5`},
		{"zero tickets", `{"ingress": {"tickets": 0}}`, `"ingress.tickets": must be positive`},
		{"negative queue depth", `{"ingress": {"max_queue_depth": -1}}`, `"ingress.max_queue_depth"`},
		{"zero queue timeout", `{"ingress": {"queue_timeout_ms": 0}}`, `"ingress.queue_timeout_ms"`},
		{"queue timeout over a day", `{"ingress": {"queue_timeout_ms": 9223372036854775807}}`,
			`"ingress.queue_timeout_ms": must be at most 86400000, got 9223372036854775807`},
		{"bucket deadline over a day", `{"buckets": [{"name": "b", "deadline_ms": 200000000000}]}`,
			`"buckets[0].deadline_ms": must be at most 86400000, got 200000000000`},
		{"bucket queue timeout overflowing", `{"buckets": [{"name": "b", "queue_timeout_ms": 9223372036854775807}]}`,
			`"buckets[0].queue_timeout_ms": must be at most 86400000, got 9223372036854775807`},
		{"bucket concurrency over an int32", `{"buckets": [{"name": "b", "max_concurrent": 9223372036854775807}]}`,
			`"buckets[0].max_concurrent": must be at most 2147483647, got 9223372036854775807`},
		{"zero probe interval", `{"ingress": {"probe": {"interval_ms": 0}}}`, `"ingress.probe.interval_ms"`},
		{"zero probe min", `{"ingress": {"probe": {"min": 0}}}`, `"ingress.probe.min": must be positive`},
		{"probe max below min", `{"ingress": {"probe": {"min": 8, "max": 4}}}`, `"ingress.probe.max": 4 is below min 8`},
		{"probe initial too small", `{"ingress": {"probe": {"initial": 7}}}`, `"ingress.probe.initial": 7 outside [2·min, 2·max] = [8, 256]`},
		{"probe initial too large", `{"ingress": {"probe": {"initial": 257}}}`, `"ingress.probe.initial": 257`},
		{"probe ratio 0", `{"ingress": {"probe": {"read_write_ratio": 0}}}`, `"ingress.probe.read_write_ratio": 0 outside (0, 1)`},
		{"probe ratio 1", `{"ingress": {"probe": {"read_write_ratio": 1}}}`, `"ingress.probe.read_write_ratio": 1 outside`},
		{"probe ema 0", `{"ingress": {"probe": {"ema_weight": 0}}}`, `"ingress.probe.ema_weight": 0 outside (0, 1]`},
		{"probe step 2", `{"ingress": {"probe": {"step": 2}}}`, `"ingress.probe.step": 2 outside (0, 1]`},
		{"bucket without name", `{"buckets": [{"reserved": 1}]}`, `"buckets[0].name": "": must be 1..100 bytes`},
		{"bucket bad name", `{"buckets": [{"name": "my bucket"}]}`, `"buckets[0].name": "my bucket": byte 2 (' ')`},
		{"bucket long name", `{"buckets": [{"name": "` + strings.Repeat("x", 101) + `"}]}`, `got 101`},
		{"duplicate bucket", `{"buckets": [{"name": "a"}, {"name": "b"}, {"name": "a"}]}`, `"buckets[2].name": duplicate bucket "a"`},
		{"bucket reserved over hard", `{"buckets": [{"name": "a", "reserved": 9, "hard_limit": 8}]}`,
			`"buckets[0].reserved": 9 exceeds buckets[0].hard_limit 8`},
		{"bucket reserved unlimited, hard finite", `{"buckets": [{"name": "a", "reserved": "unlimited", "hard_limit": 8}]}`,
			`"buckets[0].reserved": unlimited exceeds buckets[0].hard_limit 8`},
		{"bucket hard below default reserved", `{"buckets": [{"name": "a", "hard_limit": 1000}]}`,
			`"buckets[0].reserved": 1666 exceeds buckets[0].hard_limit 1000 (reserved taken from the node default)`},
		{"bucket reserved above default hard", `{"default_throttle_hard_limit": 100, "default_throttle_reserved_units": 50,
			"buckets": [{"name": "a", "reserved": 200}]}`,
			`"buckets[0].reserved": 200 exceeds buckets[0].hard_limit 100 (hard_limit taken from the node default)`},
		{"bucket negative max_concurrent", `{"buckets": [{"name": "a", "max_concurrent": -1}]}`, `"buckets[0].max_concurrent"`},
		{"bucket negative max_queued", `{"buckets": [{"name": "a", "max_queued": -1}]}`, `"buckets[0].max_queued"`},
		{"bucket negative queue timeout", `{"buckets": [{"name": "a", "queue_timeout_ms": -1}]}`, `"buckets[0].queue_timeout_ms"`},
		{"bucket negative deadline", `{"buckets": [{"name": "a", "deadline_ms": -1}]}`, `"buckets[0].deadline_ms"`},
		{"bucket negative expected", `{"buckets": [{"name": "a", "expected_execution_us": -1}]}`, `"buckets[0].expected_execution_us"`},
		{"percentile 49", `{"buckets": [{"name": "a", "deadline_percentile": 49}]}`, `"buckets[0].deadline_percentile": 49 outside 50..99`},
		{"percentile 100", `{"buckets": [{"name": "a", "deadline_percentile": 100}]}`, `"buckets[0].deadline_percentile": 100`},
		{"user without name", `{"users": [{"password": "p"}]}`, `"users[0].name": must not be empty`},
		{"duplicate user", `{"users": [{"name": "u", "password": "p"}, {"name": "u", "password": "q"}]}`,
			`"users[1].name": duplicate user "u"`},
		{"user without password", `{"users": [{"name": "u"}]}`, `"users[0]": user "u" needs exactly one of password and password_hash`},
		{"user with both", `{"users": [{"name": "u", "password": "p", "password_hash": "$2b$x"}]}`, `needs exactly one`},
		{"user bad bucket", `{"users": [{"name": "u", "password": "p", "buckets": ["*", "a/b"]}]}`, `"users[0].buckets[1]": "a/b"`},
		{"anonymous bucket missing", `{"anonymous_bucket": "default", "buckets": [{"name": "app"}]}`,
			`"anonymous_bucket": "default" is not a bucket in the file`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.in))
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("Parse(%s) error = %v, want ErrInvalid", tt.in, err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not contain %q", err, tt.want)
			}
		})
	}
}

// Validate reports every problem, not just the first.
func TestValidateJoinsAll(t *testing.T) {
	f := Default()
	f.NodeCapacity = 0
	f.Ingress.Probe.Step = 0
	f.Buckets = []Bucket{{Name: ""}}
	err := f.Validate()
	if err == nil {
		t.Fatal("Validate succeeded")
	}
	for _, want := range []string{`"node_capacity"`, `"ingress.probe.step"`, `"buckets[0].name"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %s", err, want)
		}
	}
	if n := strings.Count(err.Error(), "\n") + 1; n != 3 {
		t.Errorf("got %d problems, want 3:\n%v", n, err)
	}
}

func TestValidateAccepts(t *testing.T) {
	for _, in := range []string{
		`{"anonymous_bucket": "a", "buckets": [{"name": "a"}]}`,
		`{"buckets": [{"name": "x", "reserved": 0, "hard_limit": 0}]}`,
		`{"buckets": [{"name": "x", "reserved": 10, "hard_limit": 10}]}`,
		`{"buckets": [{"name": "x", "reserved": "unlimited"}]}`,
		`{"default_throttle_reserved_units": "unlimited"}`,
		`{"buckets": [{"name": "a.b_c-%1", "deadline_percentile": 50}, {"name": "z", "deadline_percentile": 99}]}`,
		`{"ingress": {"probe": {"initial": 8}}}`,
		`{"ingress": {"probe": {"initial": 256, "ema_weight": 1, "step": 1}}}`,
		`{"max_item_size": 1024, "max_frame_size": 2048}`,
		`{"users": [{"name": "u", "password_hash": "anything: tenant checks it", "buckets": []}]}`,
	} {
		if _, err := Parse([]byte(in)); err != nil {
			t.Errorf("Parse(%s): %v", in, err)
		}
	}
}
