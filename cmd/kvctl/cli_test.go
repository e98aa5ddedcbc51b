package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"net"
	"reflect"
	"strings"
	"testing"

	"kvd/client/clienttest"
	"kvd/protocol/binary"
)

// kvctl runs the CLI in process and returns its stdout, stderr and exit
// status.
func kvctl(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = run(args, &out, &errOut)
	return out.String(), errOut.String(), code
}

// fakeKvd is a fake server that knows the admin user and answers the admin
// commands with success; tests override what they need.
func fakeKvd(t *testing.T) *clienttest.Server {
	s := clienttest.NewServer(t)
	s.SetCredentials("admin", "change-me")
	ok := func(w *clienttest.Writer, _ *binary.Request) { w.OK(nil, nil) }
	for _, op := range []binary.Opcode{binary.OpSetNodeThrottle, binary.OpSetBucketThrottle,
		binary.OpCreateBucket, binary.OpDeleteBucket} {
		s.Handle(op, ok)
	}
	s.Handle(binary.OpListBuckets, func(w *clienttest.Writer, _ *binary.Request) {
		w.OK(nil, []byte("app default reports"))
	})
	s.Handle(binary.OpStat, func(w *clienttest.Writer, req *binary.Request) {
		switch string(req.Key) {
		case "":
			w.Stat("pid", "42")
			w.Stat("version", "kvd-0.1.0")
			w.Stat("rusage_user", "1.500000")
			w.Stat("bucket", "2024") // a name that looks like a number
			w.Stat("evictions", "off")
		case "bucket_details app":
			w.Stat("app", `{"name":"app","ru":3,"throttle_hard_limit":"unlimited"}`)
		case "cluster":
			w.Stat("cluster", clusterDocJSON)
		default:
			w.Error(binary.StatusKeyNotFound, "unknown stat group "+string(req.Key))
			return
		}
		w.OK(nil, nil)
	})
	return s
}

func admin(s *clienttest.Server, args ...string) []string {
	return append([]string{"--addr", s.Addr, "--user", "admin", "--password", "change-me"}, args...)
}

func TestCommandsSendAndRender(t *testing.T) {
	for _, tc := range []struct {
		args      []string
		op        binary.Opcode
		key, json string // the request sent; json "" means an empty value
		stdout    string
	}{
		{[]string{"node-throttle", "--capacity", "30000"}, binary.OpSetNodeThrottle,
			"", `{"capacity":30000}`, "node throttle: capacity=30000\n"},
		{[]string{"node-throttle", "--default-hard-limit", "unlimited", "--default-reserved", "10"}, binary.OpSetNodeThrottle,
			"", `{"default_throttle_reserved_units":10,"default_throttle_hard_limit":"unlimited"}`,
			"node throttle: default_throttle_reserved_units=10 default_throttle_hard_limit=unlimited\n"},
		{[]string{"bucket-throttle", "app", "--reserved", "100", "--hard-limit", "unlimited"}, binary.OpSetBucketThrottle,
			"app", `{"reserved":100,"hard_limit":"unlimited"}`, "bucket app: reserved=100 hard_limit=unlimited\n"},
		{[]string{"bucket-throttle", "--hard-limit", "500", "app"}, binary.OpSetBucketThrottle,
			"app", `{"hard_limit":500}`, "bucket app: reserved=unlimited hard_limit=500\n"},
		{[]string{"bucket-throttle", "app", "--reserved", "5", "--queue-timeout-ms", "7", "--max-concurrent", "2", "--deadline-percentile", "90"},
			binary.OpSetBucketThrottle, "app", `{"reserved":5,"max_concurrent":2,"queue_timeout_ms":7,"deadline_percentile":90}`,
			"bucket app: reserved=5 hard_limit=unlimited max_concurrent=2 queue_timeout_ms=7 deadline_percentile=90\n"},
		{[]string{"create-bucket", "reports"}, binary.OpCreateBucket,
			"reports", "", "bucket reports created with the node's default settings\n"},
		{[]string{"create-bucket", "reports", "--hard-limit", "9", "--settings", ` {"max_queued":5,"deadline_ms":20} `},
			binary.OpCreateBucket, "reports", `{"hard_limit":9,"deadline_ms":20,"max_queued":5}`,
			`bucket reports created with {"hard_limit":9,"deadline_ms":20,"max_queued":5}` + "\n"},
		{[]string{"delete-bucket", "reports"}, binary.OpDeleteBucket, "reports", "", "bucket reports deleted\n"},
		{[]string{"list-buckets"}, binary.OpListBuckets, "", "", "app\ndefault\nreports\n"},
		{[]string{"stats"}, binary.OpStat, "", "", "pid 42\nversion kvd-0.1.0\nrusage_user 1.500000\nbucket 2024\nevictions off\n"},
		{[]string{"stats", "bucket_details", "app"}, binary.OpStat, "bucket_details app", "",
			`app {"name":"app","ru":3,"throttle_hard_limit":"unlimited"}` + "\n"},
		{[]string{"cluster"}, binary.OpStat, "cluster", "", "node n1, etcd up, 1 live nodes\n" +
			"  n1               127.0.0.1:11211        heartbeat 2026-01-01T00:00:00Z\n" +
			"bucket               reserved   hard_limit total_reserved total_hard_limit cluster_usage\n" +
			"app                       500    unlimited            500        unlimited            12\n"},
	} {
		s := fakeKvd(t)
		stdout, stderr, code := kvctl(t, admin(s, tc.args...)...)
		if code != exitOK || stderr != "" || stdout != tc.stdout {
			t.Errorf("kvctl %v = %d, stdout %q, stderr %q; want 0, %q", tc.args, code, stdout, stderr, tc.stdout)
			continue
		}
		req, ok := s.Last(tc.op)
		switch {
		case !ok:
			t.Errorf("kvctl %v sent no %s", tc.args, tc.op)
		case string(req.Key) != tc.key || string(req.Value) != tc.json:
			t.Errorf("kvctl %v sent key %q value %s; want %q %s", tc.args, req.Key, req.Value, tc.key, tc.json)
		case tc.json != "" && req.Datatype != binary.DatatypeJSON:
			t.Errorf("kvctl %v sent a JSON value with datatype %#x", tc.args, req.Datatype)
		}
	}
}

func TestJSONOutput(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"bucket-throttle", "app", "--reserved", "100"},
			`{"ok":true,"bucket":"app","reserved":100,"hard_limit":"unlimited"}`},
		{[]string{"node-throttle", "--capacity", "7"}, `{"ok":true,"capacity":7}`},
		{[]string{"create-bucket", "r"}, `{"ok":true,"bucket":"r","settings":{}}`},
		{[]string{"create-bucket", "r", "--reserved", "unlimited"},
			`{"ok":true,"bucket":"r","settings":{"reserved":"unlimited"}}`},
		{[]string{"delete-bucket", "r"}, `{"ok":true,"bucket":"r"}`},
		{[]string{"list-buckets"}, `["app","default","reports"]`},
		{[]string{"stats"}, `{"pid":42,"version":"kvd-0.1.0","rusage_user":1.500000,"bucket":"2024","evictions":"off"}`},
		{[]string{"stats", "bucket_details", "app"},
			`{"app":{"name":"app","ru":3,"throttle_hard_limit":"unlimited"}}`},
	} {
		s := fakeKvd(t)
		stdout, stderr, code := kvctl(t, append([]string{"--json"}, admin(s, tc.args...)...)...)
		var compact bytes.Buffer
		if err := json.Compact(&compact, []byte(stdout)); err != nil || code != exitOK || stderr != "" {
			t.Errorf("kvctl --json %v = %d, stdout %q (%v), stderr %q", tc.args, code, stdout, err, stderr)
			continue
		}
		if compact.String() != tc.want {
			t.Errorf("kvctl --json %v printed %s, want %s", tc.args, compact.String(), tc.want)
		}
		// The same with --json after the command, as users also write it.
		stdout, _, code = kvctl(t, append(admin(s, tc.args...), "--json")...)
		compact.Reset()
		if err := json.Compact(&compact, []byte(stdout)); err != nil || code != exitOK || compact.String() != tc.want {
			t.Errorf("kvctl %v --json = %d, printed %q (%v), want %s", tc.args, code, stdout, err, tc.want)
		}
	}
}

func TestServerRefusal(t *testing.T) {
	s := fakeKvd(t)
	s.Handle(binary.OpSetBucketThrottle, func(w *clienttest.Writer, _ *binary.Request) {
		w.Error(binary.StatusInvalidArguments, "reserved 900 is above hard_limit 500")
	})
	args := []string{"bucket-throttle", "app", "--reserved", "900", "--hard-limit", "500"}
	stdout, stderr, code := kvctl(t, admin(s, args...)...)
	const want = "kvctl: bucket-throttle app: invalid arguments (0x04): reserved 900 is above hard_limit 500\n"
	if code != exitFailed || stderr != want || stdout != "" {
		t.Errorf("refused bucket-throttle = %d, stdout %q, stderr %q; want 1 and %q", code, stdout, stderr, want)
	}

	stdout, stderr, code = kvctl(t, append([]string{"--json"}, admin(s, args...)...)...)
	var got struct {
		OK     bool
		Status int
		Error  string
	}
	if err := json.Unmarshal([]byte(stdout), &got); err != nil || code != exitFailed || stderr != want {
		t.Fatalf("refused --json bucket-throttle = %d, stdout %q (%v), stderr %q", code, stdout, err, stderr)
	}
	if got.OK || got.Status != 4 || got.Error != "invalid arguments (0x04): reserved 900 is above hard_limit 500" {
		t.Errorf("--json refusal = %+v", got)
	}

	_, stderr, code = kvctl(t, admin(s, "bucket-throttle", "a b\x01", "--reserved", "1")...)
	if code != exitFailed || !strings.HasPrefix(stderr, `kvctl: bucket-throttle "a b\x01": invalid arguments`) {
		t.Errorf("odd bucket name shown as %q", stderr)
	}

	_, stderr, code = kvctl(t, admin(s, "stats", "nope")...)
	if code != exitFailed || stderr != "kvctl: stats nope: not found (0x01): unknown stat group nope\n" {
		t.Errorf("stats nope = %d, %q", code, stderr)
	}
}

func TestLogin(t *testing.T) {
	s := fakeKvd(t)
	_, stderr, code := kvctl(t, "--addr", s.Addr, "--user", "admin", "--password", "wrong", "list-buckets")
	if code != exitFailed || !strings.Contains(stderr, "connecting to "+s.Addr+": SASL_AUTH: authentication failed (0x20)") {
		t.Errorf("wrong password = %d, %q", code, stderr)
	}

	t.Setenv("KVD_PASSWORD", "change-me")
	stdout, stderr, code := kvctl(t, "--addr", s.Addr, "--user", "admin", "--bucket", "app", "list-buckets")
	if code != exitOK || stdout == "" {
		t.Fatalf("password from KVD_PASSWORD = %d, %q, %q", code, stdout, stderr)
	}
	if req, _ := s.Last(binary.OpSASLAuth); string(req.Value) != "\x00admin\x00change-me" {
		t.Errorf("SASL PLAIN sent %q", req.Value)
	}
	if req, _ := s.Last(binary.OpSelectBucket); string(req.Key) != "app" {
		t.Errorf("--bucket app selected %q", req.Key)
	}
	if req, _ := s.Last(binary.OpHello); string(req.Key) != "kvctl" {
		t.Errorf("HELLO agent %q, want kvctl", req.Key)
	}
}

func TestUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	_, stderr, code := kvctl(t, "--addr", addr, "--timeout", "2s", "delete-bucket", "x")
	if code != exitFailed || !strings.HasPrefix(stderr, "kvctl: delete-bucket x: ") || !strings.Contains(stderr, addr) {
		t.Errorf("nothing listening: %d, %q", code, stderr)
	}
}

func TestUsageErrors(t *testing.T) {
	s := fakeKvd(t)
	for _, tc := range []struct {
		args []string
		want string // in stderr
	}{
		{[]string{"frob"}, `unknown command "frob"`},
		{[]string{"--bogus", "list-buckets"}, "flag provided but not defined: -bogus"},
		{[]string{"node-throttle", "--default-reserved", "5"}, "--default-reserved and --default-hard-limit must be given together"},
		{[]string{"node-throttle", "--default-hard-limit", "5"}, "must be given together"},
		{[]string{"node-throttle"}, "nothing to set"},
		{[]string{"node-throttle", "--capacity", "unlimited"}, `want a non-negative integer, got "unlimited"`},
		{[]string{"bucket-throttle", "app"}, "nothing to set"},
		{[]string{"bucket-throttle", "--reserved", "5"}, "missing argument"},
		{[]string{"bucket-throttle", "app", "more", "--reserved", "5"}, `unexpected argument "more"`},
		{[]string{"bucket-throttle", "app", "--reserved", "-1"}, `want a non-negative integer or "unlimited", got "-1"`},
		{[]string{"bucket-throttle", "app", "--reserved", "lots"}, `got "lots"`},
		{[]string{"bucket-throttle", "app", "--max-queued", "unlimited"}, `want a non-negative integer, got "unlimited"`},
		{[]string{"create-bucket", "r", "--settings", "[1]"}, "--settings must be a JSON object"},
		{[]string{"create-bucket", "r", "--settings", "{"}, "--settings must be a JSON object"},
		{[]string{"create-bucket", "r", "--hard-limit", "3", "--settings", `{"hard_limit":4}`}, "hard_limit is given both"},
		{[]string{"delete-bucket"}, "missing argument"},
		{[]string{"list-buckets", "x"}, `unexpected argument "x"`},
		{[]string{"stats", "a", "b", "c"}, `unexpected argument "c"`},
		{[]string{"--timeout", "-1s", "list-buckets"}, "--timeout must be positive"},
	} {
		_, stderr, code := kvctl(t, admin(s, tc.args...)...)
		if code != exitUsage || !strings.Contains(stderr, tc.want) || !strings.HasPrefix(stderr, "kvctl: ") {
			t.Errorf("kvctl %v = %d, stderr %q; want 2 and %q", tc.args, code, stderr, tc.want)
		}
	}
	for _, args := range [][]string{
		{"--addr", s.Addr, "--user", "admin", "list-buckets"},
		{"--addr", s.Addr, "--password", "pw", "list-buckets"},
	} {
		t.Setenv("KVD_PASSWORD", "")
		if _, stderr, code := kvctl(t, args...); code != exitUsage || !strings.Contains(stderr, "--user") {
			t.Errorf("kvctl %v = %d, %q; want a usage error about --user/--password", args, code, stderr)
		}
	}
	if reqs := s.Requests(); len(reqs) != 0 {
		t.Errorf("usage errors reached the server: %d requests, first %s", len(reqs), reqs[0].Opcode)
	}
}

func TestHelp(t *testing.T) {
	stdout, stderr, code := kvctl(t, "help")
	if code != exitOK || stderr != "" {
		t.Fatalf("help = %d, %q", code, stderr)
	}
	want := []string{"--addr HOST:PORT", "--user USER", "--password PASSWORD", "KVD_PASSWORD", "--json", "--timeout DURATION",
		"kvctl --addr 127.0.0.1:11211 --user admin bucket-throttle app --reserved 100 --hard-limit unlimited"}
	for _, cmd := range commands {
		want = append(want, "  "+cmd.name, "example: kvctl "+cmd.example)
		fs := newFlagSet(cmd.name)
		cmd.bind(fs)
		fs.VisitAll(func(f *flag.Flag) { want = append(want, "--"+f.Name+" ") })
	}
	for _, w := range want {
		if !strings.Contains(stdout, w) {
			t.Errorf("usage lacks %q", w)
		}
	}
	if _, stderr, code := kvctl(t); code != exitUsage || stderr != stdout {
		t.Errorf("no arguments = %d; want 2 and the usage on stderr", code)
	}
	if out, _, code := kvctl(t, "help", "stats"); code != exitOK || !strings.Contains(out, "stats [GROUP [ARG]]") {
		t.Errorf("help stats = %d, %q", code, out)
	}
	if out, _, code := kvctl(t, "create-bucket", "-h"); code != exitOK || !strings.Contains(out, "--settings JSON") {
		t.Errorf("create-bucket -h = %d, %q", code, out)
	}
	if _, _, code := kvctl(t, "help", "frob"); code != exitUsage {
		t.Errorf("help frob = %d, want 2", code)
	}
}

func TestHashPassword(t *testing.T) {
	const prefix = "$argon2id$v=19$m=65536,t=1,p=2$"
	stdout, _, code := kvctl(t, "hash-password", "s3cret")
	if code != exitOK || !strings.HasPrefix(stdout, prefix) || strings.Count(stdout, "\n") != 1 {
		t.Errorf("hash-password s3cret = %d, %q", code, stdout)
	}
	old := stdin
	t.Cleanup(func() { stdin = old })
	stdin = strings.NewReader("s3cret\r\n")
	// Unreachable --addr: hash-password never dials.
	stdout2, _, code := kvctl(t, "--addr", "127.0.0.1:1", "--user", "x", "hash-password")
	if code != exitOK || !strings.HasPrefix(stdout2, prefix) || stdout2 == stdout {
		t.Errorf("hash-password from stdin = %d, %q (salted hashes must differ)", code, stdout2)
	}
	stdin = strings.NewReader("\n")
	if _, stderr, code := kvctl(t, "hash-password"); code != exitUsage || !strings.Contains(stderr, "empty password") {
		t.Errorf("empty password = %d, %q", code, stderr)
	}
}

func TestParseArgs(t *testing.T) {
	for _, tc := range []struct {
		args []string
		pos  []string
		r    string
	}{
		{[]string{"app", "--reserved", "5"}, []string{"app"}, "5"},
		{[]string{"--reserved", "5", "app"}, []string{"app"}, "5"},
		{[]string{"a", "--reserved=unlimited", "b"}, []string{"a", "b"}, "unlimited"},
		{[]string{"--reserved", "1", "--", "--odd", "-x"}, []string{"--odd", "-x"}, "1"},
		{nil, nil, ""},
	} {
		fs := newFlagSet("t")
		var l limit
		fs.Var(&l, "reserved", "")
		pos, err := parseArgs(fs, tc.args)
		if err != nil || !reflect.DeepEqual(pos, tc.pos) || l.String() != tc.r {
			t.Errorf("parseArgs(%q) = %q, %v, reserved %q; want %q, %q", tc.args, pos, err, l.String(), tc.pos, tc.r)
		}
	}
}

// clusterDocJSON is a STAT cluster document as kvd sends it.
const clusterDocJSON = `{"node":"n1","etcd":"up","members":[{"name":"n1","address":"127.0.0.1:11211",` +
	`"heartbeat":"2026-01-01T00:00:00Z"}],"shares":[{"bucket":"app","reserved":500,"hard_limit":"unlimited",` +
	`"total_reserved":500,"total_hard_limit":"unlimited","cluster_usage":12}]}`
