package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"kvd/tenant"
)

// usageError is a mistake on the command line: kvctl prints it and exits
// with exitUsage, without contacting the server.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return &usageError{fmt.Sprintf(format, args...)}
}

// limit is a flag value: a non-negative integer, or "unlimited" unless
// countOnly. It remembers whether the flag was given, and marshals to JSON
// the way kvd reads it (tenant.Limit: a number or the string "unlimited").
type limit struct {
	given     bool
	v         tenant.Limit
	countOnly bool
}

func (l *limit) Set(s string) error {
	v, err := tenant.ParseLimit(s)
	if l.countOnly && (err != nil || v == tenant.Unlimited) {
		return fmt.Errorf("want a non-negative integer, got %q", s)
	}
	if err != nil {
		return err
	}
	l.given, l.v = true, tenant.Limit(v)
	return nil
}

// String is the value as typed; "" when not given.
func (l *limit) String() string {
	if l == nil || !l.given {
		return ""
	}
	return l.v.String()
}

func (l *limit) MarshalJSON() ([]byte, error) { return l.v.MarshalJSON() }

// member is one name/value pair of an object.
type member struct {
	name  string
	value any
}

// object is a JSON object that keeps its members in order (requests and
// output read better that way than in map order). A json.RawMessage value
// is embedded as it is.
type object []member

func (o object) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, m := range o {
		if i > 0 {
			b.WriteByte(',')
		}
		name, _ := json.Marshal(m.name)
		v, err := json.Marshal(m.value)
		if err != nil {
			return nil, fmt.Errorf("member %q: %w", m.name, err)
		}
		b.Write(name)
		b.WriteByte(':')
		b.Write(v)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// limitsText renders members as "name=value name=value".
func limitsText(o object) string {
	parts := make([]string, len(o))
	for i, m := range o {
		parts[i] = fmt.Sprintf("%s=%v", m.name, m.value)
	}
	return strings.Join(parts, " ")
}

// parseArgs parses fs's flags wherever they appear among args ("app
// --reserved 5" and "--reserved 5 app" alike) and returns the positional
// arguments in order. Everything after "--" is positional.
func parseArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if used := len(args) - len(rest); used > 0 && args[used-1] == "--" {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// newFlagSet returns a flag set that reports errors to its caller instead of
// printing them.
func newFlagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return fs
}

// flagError turns a flag package error into a usage error naming where it
// happened.
func flagError(where string, err error) error {
	if errors.Is(err, flag.ErrHelp) {
		return err
	}
	return usagef("%s: %v", where, err)
}

// printFlags writes one line per flag of fs, "--name PLACEHOLDER  usage",
// aligned. By this package's convention a usage ends with its placeholder
// in backquotes ("hard limit of new buckets `N|unlimited`"); a bool flag's
// has none.
func printFlags(w io.Writer, fs *flag.FlagSet, indent string) {
	var lefts, usages []string
	width := 0
	fs.VisitAll(func(f *flag.Flag) {
		left, usage := "--"+f.Name, f.Usage
		if i := strings.Index(usage, "`"); i >= 0 && strings.HasSuffix(usage, "`") {
			left += " " + usage[i+1:len(usage)-1]
			usage = strings.TrimSpace(usage[:i])
		}
		if d := f.DefValue; d != "" && d != "false" && d != "0" {
			usage += " (default " + d + ")"
		}
		lefts, usages = append(lefts, left), append(usages, usage)
		width = max(width, len(left))
	})
	for i := range lefts {
		fmt.Fprintf(w, "%s%-*s  %s\n", indent, width, lefts[i], usages[i])
	}
}
