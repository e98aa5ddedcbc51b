package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"kvd/protocol/binary"
	"kvd/tenant"
)

// command is one kvctl command: its help and how to run it.
type command struct {
	name     string
	synopsis string // what follows the name in the usage line
	summary  string // what it does, in a sentence or two
	example  string // a command line, without "kvctl "
	nargs    [2]int // fewest and most positional arguments
	offline  bool   // runs without contacting the server

	// bind registers the command's flags on fs and returns the function
	// that runs the command once they are parsed.
	bind func(fs *flag.FlagSet) runFunc
}

// runFunc runs a command with its positional arguments.
type runFunc func(s *session, args []string) (*result, error)

// result is what a command prints on success.
type result struct {
	text string // for people; one or more lines, "" prints nothing
	json any    // printed with --json
}

// stdin is where hash-password reads a password it was not given; tests
// replace it.
var stdin io.Reader = os.Stdin

// commands is the command table, in the order usage lists them.
var commands = []*command{
	{
		name:     "node-throttle",
		synopsis: "[--capacity N] [--default-reserved N|unlimited --default-hard-limit N|unlimited]",
		summary: "Set node throttle properties (SetNodeThrottleProperties 0x2c): the node's capacity\n" +
			"in units per second, and the limits of buckets created from now on (both or neither).",
		example: "--user admin node-throttle --capacity 30000 --default-reserved 1000 --default-hard-limit unlimited",
		bind:    bindNodeThrottle,
	},
	{
		name: "bucket-throttle",
		synopsis: "NAME [--reserved N|unlimited] [--hard-limit N|unlimited] [--max-concurrent N] [--max-queued N]\n" +
			"      [--queue-timeout-ms N] [--deadline-ms N] [--deadline-percentile N] [--expected-execution-us N]",
		summary: "Set a bucket's throttle limits and queue/deadline settings (SetBucketThrottleProperties\n" +
			"0x2a). Give at least one flag. A queue/deadline setting left out stays as it is. With\n" +
			"--reserved or --hard-limit, a limit left out becomes unlimited; with neither, both stay\n" +
			"(kvctl reads them with STAT bucket_details NAME and sends them back).",
		example: "--addr 127.0.0.1:11211 --user admin bucket-throttle app --reserved 100 --hard-limit unlimited",
		nargs:   [2]int{1, 1},
		bind:    bindBucketThrottle,
	},
	{
		name:     "create-bucket",
		synopsis: "NAME [--reserved N|unlimited] [--hard-limit N|unlimited] [--settings JSON]",
		summary: "Create a bucket (CREATE_BUCKET 0x85). Settings left out take the node's defaults;\n" +
			"--settings is a JSON object of further settings (max_concurrent, deadline_ms, …).",
		example: `--user admin create-bucket reports --reserved 500 --settings '{"max_concurrent":16}'`,
		nargs:   [2]int{1, 1},
		bind:    bindCreateBucket,
	},
	{
		name:     "delete-bucket",
		synopsis: "NAME",
		summary:  "Delete a bucket and all its data (DELETE_BUCKET 0x86).",
		example:  "--user admin delete-bucket reports",
		nargs:    [2]int{1, 1},
		bind:     bindDeleteBucket,
	},
	{
		name:     "list-buckets",
		synopsis: "",
		summary:  "List the buckets the user may select (LIST_BUCKETS 0x87), one per line.",
		example:  "--user admin --json list-buckets",
		bind:     bindListBuckets,
	},
	{
		name:     "stats",
		synopsis: "[GROUP [ARG]]",
		summary: "Print a STAT group as \"name value\" lines: none for the general statistics,\n" +
			"\"throttle\", \"ingress\", \"bucket_details\", \"bucket_details NAME\", \"cluster\",\n" +
			"or memcached's \"settings\" (also \"items\", \"slabs\", \"sizes\": kvd has no slab classes).\n" +
			"\"reset\" sets the selected bucket's counters back to 0 (and the node's connection\n" +
			"counters, for a user with the Stats privilege) and prints nothing.\n" +
			"With --json, one object: numbers as JSON numbers, names and words as strings.",
		example: "--user admin stats bucket_details app",
		nargs:   [2]int{0, 2},
		bind:    bindStats,
	},
	{
		name:     "cluster",
		synopsis: "",
		summary: "Show the node's view of its cluster (STAT cluster): etcd's link, the live nodes\n" +
			"with their last heartbeat, and per bucket this node's share of the cluster-wide\n" +
			"reserved and hard limit and the cluster's usage in the last second.",
		example: "--addr 127.0.0.1:11211 --user admin cluster",
		bind:    bindCluster,
	},
	{
		name:     "hash-password",
		synopsis: "[PASSWORD]",
		summary: "Print the argon2id hash of PASSWORD for a user's \"password_hash\" in the config\n" +
			"file; without PASSWORD, read one line from standard input. No server contact.",
		example: "hash-password < password.txt",
		nargs:   [2]int{0, 1},
		offline: true,
		bind:    bindHashPassword,
	},
}

func lookup(name string) *command {
	for _, c := range commands {
		if c.name == name {
			return c
		}
	}
	return nil
}

func bindNodeThrottle(fs *flag.FlagSet) runFunc {
	capacity := &limit{countOnly: true}
	reserved, hard := &limit{}, &limit{}
	fs.Var(capacity, "capacity", "node capacity in units per second `N`")
	fs.Var(reserved, "default-reserved", "reserved units per second of buckets created from now on `N|unlimited`")
	fs.Var(hard, "default-hard-limit", "hard limit of buckets created from now on `N|unlimited`")
	return func(s *session, _ []string) (*result, error) {
		if reserved.given != hard.given {
			return nil, usagef("--default-reserved and --default-hard-limit must be given together")
		}
		var body object
		if capacity.given {
			body = append(body, member{"capacity", capacity})
		}
		if reserved.given {
			body = append(body, member{"default_throttle_reserved_units", reserved},
				member{"default_throttle_hard_limit", hard})
		}
		if len(body) == 0 {
			return nil, usagef("nothing to set: give --capacity and/or --default-reserved with --default-hard-limit (see the current values with: kvctl stats throttle)")
		}
		if err := s.doJSON(binary.OpSetNodeThrottle, "", body); err != nil {
			return nil, err
		}
		return &result{text: "node throttle: " + limitsText(body), json: okJSON(body)}, nil
	}
}

func bindCreateBucket(fs *flag.FlagSet) runFunc {
	reserved, hard := &limit{}, &limit{}
	settings := fs.String("settings", "", "further bucket settings as a JSON object `JSON`")
	fs.Var(reserved, "reserved", "reserved units per second; default the node's `N|unlimited`")
	fs.Var(hard, "hard-limit", "hard limit in units per second; default the node's `N|unlimited`")
	return func(s *session, args []string) (*result, error) {
		body, err := bucketSettings(reserved, hard, *settings)
		if err != nil {
			return nil, err
		}
		if err := s.doJSON(binary.OpCreateBucket, args[0], body); err != nil {
			return nil, err
		}
		text := "bucket " + args[0] + " created with the node's default settings"
		if len(body) > 0 {
			raw, _ := json.Marshal(body)
			text = "bucket " + args[0] + " created with " + string(raw)
		}
		if body == nil {
			body = object{}
		}
		return &result{text: text, json: okJSON(object{{"bucket", args[0]}, {"settings", body}})}, nil
	}
}

// bucketSettings builds CREATE_BUCKET's settings from the limit flags and
// the --settings object; nil when there are none (an empty value).
func bucketSettings(reserved, hard *limit, settings string) (object, error) {
	var body object
	if reserved.given {
		body = append(body, member{"reserved", reserved})
	}
	if hard.given {
		body = append(body, member{"hard_limit", hard})
	}
	if strings.TrimSpace(settings) == "" {
		return body, nil
	}
	var extra map[string]json.RawMessage
	if t := bytes.TrimSpace([]byte(settings)); t[0] != '{' || json.Unmarshal(t, &extra) != nil {
		return nil, usagef("--settings must be a JSON object, got %s", settings)
	}
	names := make([]string, 0, len(extra))
	for name := range extra {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if (name == "reserved" && reserved.given) || (name == "hard_limit" && hard.given) {
			return nil, usagef("%s is given both by a flag and by --settings", name)
		}
		body = append(body, member{name, extra[name]})
	}
	return body, nil
}

func bindDeleteBucket(*flag.FlagSet) runFunc {
	return func(s *session, args []string) (*result, error) {
		if _, err := s.do(&binary.Request{Opcode: binary.OpDeleteBucket, Key: []byte(args[0])}); err != nil {
			return nil, err
		}
		return &result{text: "bucket " + args[0] + " deleted", json: okJSON(object{{"bucket", args[0]}})}, nil
	}
}

func bindListBuckets(*flag.FlagSet) runFunc {
	return func(s *session, _ []string) (*result, error) {
		res, err := s.do(&binary.Request{Opcode: binary.OpListBuckets})
		if err != nil {
			return nil, err
		}
		names := strings.Fields(string(res.Value))
		return &result{text: strings.Join(names, "\n"), json: names}, nil
	}
}

func bindStats(*flag.FlagSet) runFunc {
	return func(s *session, args []string) (*result, error) {
		c, err := s.conn()
		if err != nil {
			return nil, err
		}
		stats, err := c.Stats(strings.Join(args, " "))
		if err != nil {
			return nil, err
		}
		return statsResult(stats), nil
	}
}

func bindCluster(*flag.FlagSet) runFunc {
	return func(s *session, _ []string) (*result, error) {
		c, err := s.conn()
		if err != nil {
			return nil, err
		}
		stats, err := c.Stats("cluster")
		if err != nil {
			return nil, err
		}
		if len(stats) != 1 || stats[0].Name != "cluster" {
			return nil, fmt.Errorf("STAT cluster: unexpected answer %v", stats)
		}
		return clusterResult([]byte(stats[0].Value))
	}
}

func bindHashPassword(*flag.FlagSet) runFunc {
	return func(s *session, args []string) (*result, error) {
		var password string
		if len(args) == 1 {
			password = args[0]
		} else {
			var err error
			if password, err = readPassword(s.stderr); err != nil {
				return nil, err
			}
		}
		if password == "" {
			return nil, usagef("empty password")
		}
		hash, err := tenant.HashPassword(password)
		if err != nil {
			return nil, err
		}
		return &result{text: hash, json: okJSON(object{{"password_hash", hash}})}, nil
	}
}

// readPassword reads one line from stdin, prompting on stderr when stdin
// is a terminal (the password echoes).
func readPassword(stderr io.Writer) (string, error) {
	if f, ok := stdin.(*os.File); ok {
		if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
			fmt.Fprint(stderr, "password: ")
		}
	}
	line, err := bufio.NewReader(stdin).ReadString('\n')
	if err != nil && err != io.EOF {
		return "", fmt.Errorf("reading the password from standard input: %w", err)
	}
	return strings.TrimRight(line, "\r\n"), nil
}

// okJSON is a command's --json output: {"ok":true, …fields}.
func okJSON(fields object) object {
	return append(object{{"ok", true}}, fields...)
}
