package config

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func limit(n int64) *Limit { l := Limit(n); return &l }

func ptr[T any](v T) *T { return &v }

func TestDefaults(t *testing.T) {
	for _, in := range []string{`{}`, " {\n} \n"} {
		f, err := Parse([]byte(in))
		if err != nil {
			t.Fatalf("Parse(%q): %v", in, err)
		}
		want := &File{
			NodeCapacity: 25000, DefaultThrottleReservedUnits: 1666, DefaultThrottleHardLimit: Limit(Unlimited),
			ReadUnitSize: 4096, WriteUnitSize: 1024, // the server's fields nil: its defaults
			Ingress: Ingress{Tickets: 1000000, MaxQueueDepth: 100000, QueueTimeoutMS: 10000, FairDequeue: true,
				Probe: Probe{IntervalMS: 100, Min: 4, Max: 128, Initial: 0, ReadWriteRatio: 0.5, EMAWeight: 0.2, Step: 0.1}},
		}
		if !reflect.DeepEqual(f, want) {
			t.Errorf("Parse(%q) =\n%+v\nwant\n%+v", in, f, want)
		}
		if !reflect.DeepEqual(Default(), want) {
			t.Errorf("Default() = %+v", Default())
		}
	}
}

// max_inflight_bytes: left out is nil (the daemon's default, a quarter of
// physical memory), an explicit 0 is "no limit" and stays expressible.
func TestMaxInflightBytesAbsentVsZero(t *testing.T) {
	f, err := Parse([]byte(`{"max_inflight_bytes": 0}`))
	if err != nil || f.MaxInflightBytes == nil || *f.MaxInflightBytes != 0 {
		t.Fatalf("Parse(0) = %v, %v; want a pointer to 0", f, err)
	}
	if f, err := Parse([]byte(`{}`)); err != nil || f.MaxInflightBytes != nil {
		t.Fatalf("Parse({}) = %v, %v; want nil", f, err)
	}
	if _, err := Parse([]byte(`{"max_inflight_bytes": -1}`)); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Parse(-1) = %v, want ErrInvalid", err)
	}
}

func TestEveryField(t *testing.T) {
	const in = `{
	  "node_capacity": 1000, "default_throttle_reserved_units": 10, "default_throttle_hard_limit": 20,
	  "read_unit_size": 100, "write_unit_size": 50, "max_connections_per_bucket": 7, "max_connections": 70,
	  "max_throttle_wait_ms": 900, "max_item_size": 2048, "max_frame_size": 4096, "idle_timeout_ms": 5000,
	  "max_inflight_bytes": 1073741824, "wal_sync": false, "anonymous_bucket": "b1",
	  "ingress": {"tickets": 64, "max_queue_depth": 0, "queue_timeout_ms": 250, "fair_dequeue": false,
	    "probe": {"interval_ms": 50, "min": 2, "max": 16, "initial": 8,
	      "read_write_ratio": 0.75, "ema_weight": 1, "step": 0.25}},
	  "buckets": [
	    {"name": "b1"},
	    {"name": "b2", "reserved": "unlimited", "hard_limit": "unlimited", "max_concurrent": 3, "max_queued": 9,
	     "queue_timeout_ms": 40, "deadline_ms": 15, "deadline_percentile": 95, "expected_execution_us": 800}
	  ],
	  "users": [
	    {"name": "u1", "password": "pw", "buckets": ["*"], "privileges": ["Stats"]},
	    {"name": "u2", "password_hash": "$2b$04$abc", "buckets": ["b1", "b2"]}
	  ]
	}`
	f, err := Parse([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	want := &File{
		NodeCapacity: 1000, DefaultThrottleReservedUnits: 10, DefaultThrottleHardLimit: 20,
		ReadUnitSize: 100, WriteUnitSize: 50, MaxConnectionsPerBucket: ptr(7), MaxConnections: ptr(70),
		MaxThrottleWaitMS: ptr(900), MaxItemSize: ptr(2048), MaxFrameSize: ptr(4096), IdleTimeoutMS: ptr(5000),
		MaxInflightBytes: ptr(int64(1 << 30)), WALSync: ptr(false), AnonymousBucket: "b1",
		Ingress: Ingress{Tickets: 64, MaxQueueDepth: 0, QueueTimeoutMS: 250,
			Probe: Probe{IntervalMS: 50, Min: 2, Max: 16, Initial: 8, ReadWriteRatio: 0.75, EMAWeight: 1, Step: 0.25}},
		Buckets: []Bucket{
			{Name: "b1"},
			{Name: "b2", Reserved: limit(Unlimited), HardLimit: limit(Unlimited), MaxConcurrent: 3, MaxQueued: 9,
				QueueTimeoutMS: 40, DeadlineMS: 15, DeadlinePercentile: 95, ExpectedExecutionUS: 800},
		},
		Users: []User{
			{Name: "u1", Password: "pw", Buckets: []string{"*"}, Privileges: []string{"Stats"}},
			{Name: "u2", PasswordHash: "$2b$04$abc", Buckets: []string{"b1", "b2"}},
		},
	}
	if !reflect.DeepEqual(f, want) {
		t.Errorf("Parse =\n%+v\nwant\n%+v", f, want)
	}
}

// Fields present in a nested object leave its other fields at their
// defaults.
func TestPartialNested(t *testing.T) {
	f, err := Parse([]byte(`{"ingress": {"probe": {"max": 64}}, "max_connections": 5}`))
	if err != nil {
		t.Fatal(err)
	}
	want := Default()
	want.Ingress.Probe.Max = 64
	want.MaxConnections = ptr(5)
	if !reflect.DeepEqual(f, want) {
		t.Errorf("Parse = %+v, want %+v", f, want)
	}
}

func TestUnknownFields(t *testing.T) {
	tests := []struct{ name, in, path string }{
		{"top level", `{"node_capacity": 1, "node_capacty": 2}`, "node_capacty"},
		{"ingress", `{"ingress": {"tickets": 5, "tickets_max": 1}}`, "ingress.tickets_max"},
		{"ingress.probe", `{"ingress": {"probe": {"min": 4, "foo": 1}}}`, "ingress.probe.foo"},
		{"bucket", `{"buckets": [{"name": "a"}, {"name": "b", "reserve": 5}]}`, "buckets[1].reserve"},
		{"user", `{"users": [{"name": "u", "password": "p", "role": "admin"}]}`, "users[0].role"},
		{"case matters", `{"Node_Capacity": 1}`, "Node_Capacity"},
		{"case matters nested", `{"ingress": {"probe": {"MIN": 1}}}`, "ingress.probe.MIN"},
		{"first in document order", `{"zzz": 1, "aaa": 2}`, "zzz"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.in))
			if !errors.Is(err, ErrUnknownField) {
				t.Fatalf("error = %v, want ErrUnknownField", err)
			}
			if want := `config: unknown field "` + tt.path + `"`; err.Error() != want {
				t.Errorf("error = %q, want %q", err, want)
			}
		})
	}
}

func TestDuplicateFields(t *testing.T) {
	tests := []struct{ in, path string }{
		{`{"max_connections": 1, "max_connections": 2}`, "max_connections"},
		{`{"ingress": {"probe": {"min": 4, "max": 8, "min": 5}}}`, "ingress.probe.min"},
		{`{"buckets": [{"name": "a", "name": "b"}]}`, "buckets[0].name"},
		{`{"ingress": {}, "ingress": {}}`, "ingress"},
	}
	for _, tt := range tests {
		_, err := Parse([]byte(tt.in))
		if want := `config: duplicate field "` + tt.path + `"`; !errors.Is(err, ErrDuplicateField) || err.Error() != want {
			t.Errorf("Parse(%s) error = %v, want %q", tt.in, err, want)
		}
	}
}

func TestBadTypes(t *testing.T) {
	const wantLimit = `want a non-negative integer or "unlimited"`
	tests := []struct{ name, in, want string }{
		{"limit negative", `{"buckets": [{"name": "a", "hard_limit": -5}]}`,
			`field "buckets[0].hard_limit": got number -5, ` + wantLimit},
		{"limit fraction", `{"default_throttle_reserved_units": 1.5}`,
			`field "default_throttle_reserved_units": got number 1.5, ` + wantLimit},
		{"limit other string", `{"default_throttle_hard_limit": "infinite"}`,
			`field "default_throttle_hard_limit": got string "infinite", ` + wantLimit},
		{"limit bool", `{"buckets": [{"name": "a", "reserved": true}]}`, `field "buckets[0].reserved": got bool`},
		{"int as string", `{"max_connections": "10"}`, `field "max_connections": got string, want an integer`},
		{"int fraction", `{"max_item_size": 1024.5}`, `field "max_item_size": got number 1024.5, want an integer`},
		{"int overflow", `{"node_capacity": 1e30}`, `field "node_capacity": got number 1e30, want an integer`},
		{"bool as string", `{"wal_sync": "yes"}`, `field "wal_sync": got string, want true or false`},
		{"float as string", `{"ingress": {"probe": {"step": "0.1"}}}`, `field "ingress.probe.step": got string, want a number`},
		{"nested int", `{"ingress": {"probe": {"min": [4]}}}`, `field "ingress.probe.min": got array, want an integer`},
		{"ingress not object", `{"ingress": 5}`, `field "ingress": got number, want an object`},
		{"probe not object", `{"ingress": {"probe": "x"}}`, `field "ingress.probe": got string, want an object`},
		{"buckets not array", `{"buckets": {"name": "a"}}`, `field "buckets": got object, want an array`},
		{"bucket not object", `{"buckets": ["a"]}`, `field "buckets[0]": got string, want an object`},
		{"privileges string", `{"users": [{"name": "u", "password": "p", "privileges": "Stats"}]}`,
			`field "users[0].privileges": got string, want an array of strings`},
		{"bucket entry number", `{"users": [{"name": "u", "password": "p", "buckets": [1]}]}`,
			`field "users[0].buckets": got number, want a string`},
		{"name number", `{"anonymous_bucket": 0}`, `field "anonymous_bucket": got number, want a string`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.in))
			if !errors.Is(err, ErrType) {
				t.Fatalf("error = %v, want ErrType", err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not contain %q", err, tt.want)
			}
		})
	}
}

func TestSyntaxErrors(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{"empty", "", "empty input"},
		{"blank", " \n", "empty input"},
		{"array", `[]`, "want a JSON object, got array"},
		{"null", `null`, "want a JSON object, got null"},
		{"truncated", `{"node_capacity": 1`, "unexpected end of input"},
		{"bad token", "{\n  \"node_capacity\": 1,\n  oops\n}", "line 3, column 3"},
		{"trailing object", `{} {}`, "unexpected data after the top-level object"},
		{"trailing garbage", "{}\nx", "unexpected data after"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.in))
			if !errors.Is(err, ErrSyntax) {
				t.Fatalf("error = %v, want ErrSyntax", err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not contain %q", err, tt.want)
			}
		})
	}
}

func TestLimitJSON(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want Limit
	}{{`0`, 0}, {`8000`, 8000}, {`"unlimited"`, Limit(Unlimited)}, {`9223372036854775807`, 1<<63 - 1}} {
		var l Limit
		if err := json.Unmarshal([]byte(tt.in), &l); err != nil || l != tt.want {
			t.Errorf("Unmarshal(%s) = %v, %v; want %v", tt.in, l, err, tt.want)
		}
		out, err := json.Marshal(l)
		if err != nil || string(out) != tt.in {
			t.Errorf("Marshal(%v) = %s, %v; want %s", l, out, err, tt.in)
		}
	}
	for _, in := range []string{`-1`, `-5`, `1.0`, `1e3`, `"Unlimited"`, `"100"`, `true`, `[]`, `{}`, `9223372036854775808`} {
		var l Limit
		if err := json.Unmarshal([]byte(in), &l); err == nil {
			t.Errorf("Unmarshal(%s) = %v, want an error", in, l)
		}
	}
	if _, err := json.Marshal(Limit(-2)); err == nil {
		t.Error("Marshal(Limit(-2)) succeeded")
	}
}

func TestShippedFile(t *testing.T) {
	f, err := Parse(Embedded)
	if err != nil {
		t.Fatalf("embedded serverless.json: %v", err)
	}
	disk, _, err := Load("serverless.json")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(f, disk) {
		t.Error("Embedded differs from config/serverless.json on disk")
	}
	if f.AnonymousBucket != "default" || len(f.Buckets) != 2 || len(f.Users) != 2 {
		t.Fatalf("shipped file: anonymous %q, %d buckets, %d users", f.AnonymousBucket, len(f.Buckets), len(f.Users))
	}
	app := f.Buckets[1]
	if app.Name != "app" || *app.Reserved != 5000 || *app.HardLimit != 8000 {
		t.Errorf("app bucket = %+v", app)
	}
	admin, appUser := f.Users[0], f.Users[1]
	if admin.Password != "change-me" || admin.PasswordHash != "" || len(admin.Privileges) != 3 {
		t.Errorf("admin user = %+v", admin)
	}
	if !strings.HasPrefix(appUser.PasswordHash, "$argon2id$v=19$m=65536,t=1,p=2$") || appUser.Password != "" {
		t.Errorf("app user = %+v, want an argon2id hash and no plain password", appUser)
	}
}

// A File written with encoding/json reads back as the same File.
func TestMarshalRoundTrip(t *testing.T) {
	f, err := Parse(Embedded)
	if err != nil {
		t.Fatal(err)
	}
	f.MaxInflightBytes = ptr(int64(1 << 20))
	f.Buckets = append(f.Buckets, Bucket{Name: "q", Reserved: limit(Unlimited), MaxQueued: 4, DeadlinePercentile: 60})
	data, err := json.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	back, err := Parse(data)
	if err != nil {
		t.Fatalf("Parse(%s): %v", data, err)
	}
	if !reflect.DeepEqual(f, back) {
		t.Errorf("round trip:\n%+v\n%+v", f, back)
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.json")
	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(good, []byte(`{"max_connections": 3}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bad, []byte(`{"max_conections": 3}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if f, _, err := Load(good); err != nil || *f.MaxConnections != 3 {
		t.Errorf("Load(good) = %+v, %v", f, err)
	}
	_, _, err := Load(bad)
	if !errors.Is(err, ErrUnknownField) || !strings.HasPrefix(err.Error(), bad+": ") {
		t.Errorf("Load(bad) error = %v, want ErrUnknownField prefixed by the path", err)
	}
	missing := filepath.Join(dir, "missing.json")
	if _, _, err := Load(missing); !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), missing) {
		t.Errorf("Load(missing) error = %v, want ErrNotExist naming the file", err)
	}
}
