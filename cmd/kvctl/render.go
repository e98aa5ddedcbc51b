package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"

	"kvd/client"
)

// render prints a command's result.
func render(stdout, stderr io.Writer, asJSON bool, res *result) int {
	if asJSON {
		out, err := json.MarshalIndent(res.json, "", "  ")
		if err != nil {
			fmt.Fprintf(stderr, "kvctl: encoding the output: %v\n", err)
			return exitFailed
		}
		stdout.Write(append(out, '\n'))
		return exitOK
	}
	if res.text != "" {
		fmt.Fprintln(stdout, res.text)
	}
	return exitOK
}

// failure reports a command that failed: the reason on stderr and, with
// --json, {"ok":false,…} on stdout. A usage error exits with exitUsage.
func failure(stdout, stderr io.Writer, asJSON bool, what string, err error) int {
	var ue *usageError
	if errors.As(err, &ue) {
		return usageFailure(stdout, stderr, fmt.Errorf("%s: %w", what, err))
	}
	reason := err.Error()
	out := object{{"ok", false}, {"error", reason}}
	if se, ok := err.(*client.StatusError); ok { // the command itself was refused
		reason = se.Reason()
		out = object{{"ok", false}, {"status", int(se.Status)}, {"error", reason}}
	}
	fmt.Fprintf(stderr, "kvctl: %s: %s\n", what, reason)
	if asJSON {
		b, _ := json.MarshalIndent(out, "", "  ")
		stdout.Write(append(b, '\n'))
	}
	return exitFailed
}

// statsResult renders a STAT group: "name value" lines, and for --json one
// object {name: value} in the server's order, where a value that is a JSON
// object or array (bucket_details) is embedded as JSON, a number is a
// number (but the names namedStats hold, which may look like one), and
// anything else stays a string, as memcached sends it.
func statsResult(stats []client.Stat) *result {
	lines := make([]string, len(stats))
	obj := make(object, len(stats))
	for i, st := range stats {
		lines[i] = st.Name + " " + st.Value
		obj[i] = member{st.Name, statValue(st.Name, st.Value)}
	}
	return &result{text: strings.Join(lines, "\n"), json: obj}
}

// namedStats are the statistics whose value is a name.
var namedStats = map[string]bool{"bucket": true, "anonymous_bucket": true, "version": true, "inter": true}

// jsonNumber is JSON's number grammar.
var jsonNumber = regexp.MustCompile(`^-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?$`)

func statValue(name, v string) any {
	t := bytes.TrimSpace([]byte(v))
	switch {
	case len(t) > 0 && (t[0] == '{' || t[0] == '[') && json.Valid(t):
		return json.RawMessage(t)
	case !namedStats[name] && jsonNumber.Match(t):
		return json.Number(t)
	}
	return v
}

// clusterDoc is the part of STAT cluster's document that kvctl cluster
// prints as text.
type clusterDoc struct {
	Node    string `json:"node"`
	Etcd    string `json:"etcd"`
	Members []struct {
		Name      string `json:"name"`
		Address   string `json:"address"`
		Heartbeat string `json:"heartbeat"`
	} `json:"members"`
	Shares []clusterShare `json:"shares"`
}

// clusterShare is one bucket's line of STAT cluster.
type clusterShare struct {
	Bucket         string          `json:"bucket"`
	Reserved       json.RawMessage `json:"reserved"`
	HardLimit      json.RawMessage `json:"hard_limit"`
	TotalReserved  json.RawMessage `json:"total_reserved"`
	TotalHardLimit json.RawMessage `json:"total_hard_limit"`
	ClusterUsage   int64           `json:"cluster_usage"`
}

// clusterResult renders STAT cluster: a few lines for people, the
// document itself with --json.
func clusterResult(doc []byte) (*result, error) {
	var d clusterDoc
	if err := json.Unmarshal(doc, &d); err != nil {
		return nil, fmt.Errorf("STAT cluster: %w", err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "node %s, etcd %s, %d live nodes\n", d.Node, d.Etcd, len(d.Members))
	for _, m := range d.Members {
		fmt.Fprintf(&b, "  %-16s %-22s heartbeat %s\n", m.Name, m.Address, m.Heartbeat)
	}
	fmt.Fprintf(&b, "%-16s %12s %12s %14s %16s %13s", "bucket", "reserved", "hard_limit",
		"total_reserved", "total_hard_limit", "cluster_usage")
	limit := func(raw json.RawMessage) string { return strings.Trim(string(raw), `"`) }
	// The node lists its buckets in no set order: by name, for people.
	slices.SortFunc(d.Shares, func(a, b clusterShare) int { return strings.Compare(a.Bucket, b.Bucket) })
	for _, s := range d.Shares {
		fmt.Fprintf(&b, "\n%-16s %12s %12s %14s %16s %13d", s.Bucket, limit(s.Reserved), limit(s.HardLimit),
			limit(s.TotalReserved), limit(s.TotalHardLimit), s.ClusterUsage)
	}
	return &result{text: b.String(), json: json.RawMessage(doc)}, nil
}
