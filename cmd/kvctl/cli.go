package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"kvd/client"
	"kvd/protocol/binary"
)

// Exit statuses.
const (
	exitOK      = 0
	exitFailed  = 1 // the server refused, or could not be reached
	exitUsage   = 2 // a mistake on the command line; the server was not contacted
	defaultAddr = "127.0.0.1:11211"
)

// globals are the flags before the command.
type globals struct {
	addr     string
	user     string
	password string
	bucket   string
	json     bool
	timeout  time.Duration
}

func globalFlags(g *globals) *flag.FlagSet {
	fs := newFlagSet("kvctl")
	fs.StringVar(&g.addr, "addr", defaultAddr, "kvd's protocol address `HOST:PORT`")
	fs.StringVar(&g.user, "user", "", "authenticate with SASL PLAIN as this user `USER`")
	fs.StringVar(&g.password, "password", "", "password of --user; default $KVD_PASSWORD `PASSWORD`")
	fs.StringVar(&g.bucket, "bucket", "", "bucket to select after logging in, for the general stats `BUCKET`")
	fs.BoolVar(&g.json, "json", false, "print JSON instead of text")
	fs.DurationVar(&g.timeout, "timeout", 10*time.Second, "limit on connecting and on each request `DURATION`")
	return fs
}

// run is kvctl: it parses args (without the program name), runs the
// command and returns the exit status.
func run(args []string, stdout, stderr io.Writer) int {
	var g globals
	fs := globalFlags(&g)
	if err := fs.Parse(args); err != nil {
		return usageFailure(stdout, stderr, flagError("global flags", err))
	}
	rest := fs.Args()
	if len(rest) == 0 {
		printUsage(stderr)
		return exitUsage
	}
	if rest[0] == "help" {
		return help(rest[1:], stdout, stderr)
	}
	cmd := lookup(rest[0])
	if cmd == nil {
		return usageFailure(stdout, stderr, usagef("unknown command %q", rest[0]))
	}
	return runCommand(cmd, &g, rest[1:], stdout, stderr)
}

func runCommand(cmd *command, g *globals, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet(cmd.name)
	runner := cmd.bind(fs)
	// --json is global, and also taken after the command (kvctl cluster --json).
	fs.BoolVar(&g.json, "json", g.json, "print JSON instead of text")
	pos, err := parseArgs(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		printCommand(stdout, cmd)
		return exitOK
	}
	if err == nil {
		err = checkArgs(cmd, pos)
	}
	if err == nil && !cmd.offline {
		err = g.complete()
	}
	if err != nil {
		return usageFailure(stdout, stderr, flagError(cmd.name, err))
	}
	s := &session{g: g, stderr: stderr}
	defer s.close()
	res, err := runner(s, pos)
	if err != nil {
		return failure(stdout, stderr, g.json, describe(cmd, pos), err)
	}
	return render(stdout, stderr, g.json, res)
}

// describe names a command line in messages: "bucket-throttle app".
func describe(cmd *command, pos []string) string {
	what := cmd.name
	if cmd.name == "hash-password" {
		return what // never echo a password
	}
	for _, p := range pos {
		if q := strconv.Quote(p); p == "" || q[1:len(q)-1] != p || strings.ContainsAny(p, " '") {
			p = q // empty, spaced or unprintable: show it unambiguously
		}
		what += " " + p
	}
	return what
}

func checkArgs(cmd *command, pos []string) error {
	switch {
	case len(pos) < cmd.nargs[0]:
		return usagef("missing argument: usage: kvctl %s %s", cmd.name, cmd.synopsis)
	case len(pos) > cmd.nargs[1]:
		return usagef("unexpected argument %q: usage: kvctl %s %s", pos[cmd.nargs[1]], cmd.name, cmd.synopsis)
	}
	return nil
}

// complete checks the connection flags and takes the password from
// $KVD_PASSWORD when --password is not given.
func (g *globals) complete() error {
	switch {
	case g.user == "" && g.password != "":
		return usagef("--password needs --user")
	case g.timeout <= 0:
		return usagef("--timeout must be positive, got %v", g.timeout)
	case g.user == "" || g.password != "":
		return nil
	}
	g.password = os.Getenv("KVD_PASSWORD")
	if g.password == "" {
		return usagef("--user %s needs a password: give --password or set KVD_PASSWORD", g.user)
	}
	return nil
}

// session is one command's connection, dialled on first use.
type session struct {
	g      *globals
	stderr io.Writer
	c      *client.Conn
}

func (s *session) conn() (*client.Conn, error) {
	if s.c != nil {
		return s.c, nil
	}
	c, err := client.Dial(s.g.addr, client.Options{
		Timeout: s.g.timeout, User: s.g.user, Password: s.g.password, Bucket: s.g.bucket, Agent: "kvctl",
	})
	var se *client.StatusError
	if errors.As(err, &se) { // refused while logging in or selecting the bucket
		return nil, fmt.Errorf("connecting to %s: %w", s.g.addr, err)
	}
	if err != nil {
		return nil, err
	}
	s.c = c
	return c, nil
}

func (s *session) do(req *binary.Request) (*binary.Response, error) {
	c, err := s.conn()
	if err != nil {
		return nil, err
	}
	return c.Do(req)
}

// doJSON sends op with key and body as a JSON value.
func (s *session) doJSON(op binary.Opcode, key string, body object) error {
	c, err := s.conn()
	if err != nil {
		return err
	}
	req := &binary.Request{Opcode: op, Key: []byte(key)}
	if len(body) > 0 {
		if req.Value, err = json.Marshal(body); err != nil {
			return err
		}
		if c.HasFeature(client.FeatureJSON) {
			req.Datatype = binary.DatatypeJSON
		}
	}
	_, err = c.Do(req)
	return err
}

func (s *session) close() {
	if s.c != nil {
		s.c.Close()
	}
}

func usageFailure(stdout, stderr io.Writer, err error) int {
	if errors.Is(err, flag.ErrHelp) {
		printUsage(stdout)
		return exitOK
	}
	fmt.Fprintf(stderr, "kvctl: %v\nRun 'kvctl help' for usage.\n", err)
	return exitUsage
}

// help prints the usage, or one command's.
func help(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		printUsage(stdout)
		return exitOK
	}
	cmd := lookup(args[0])
	if cmd == nil || len(args) > 1 {
		return usageFailure(stdout, stderr, usagef("help: unknown command %q", strings.Join(args, " ")))
	}
	printCommand(stdout, cmd)
	return exitOK
}

const usageHead = `kvctl administers a kvd node over the memcached binary protocol.

usage: kvctl [global flags] COMMAND [arguments and flags]

global flags (before the command):
`

const usageTail = `
Limits are units per second: a number, or "unlimited" where the flag says so.
Errors print the server's reason. Exit status: 0 done, 1 refused by the server
or not reachable, 2 a usage error (the server was not contacted).

example:
  kvctl --addr 127.0.0.1:11211 --user admin bucket-throttle app --reserved 100 --hard-limit unlimited
`

func printUsage(w io.Writer) {
	var b bytes.Buffer
	b.WriteString(usageHead)
	printFlags(&b, globalFlags(&globals{}), "  ")
	b.WriteString("\ncommands:\n")
	for _, cmd := range commands {
		b.WriteString("\n")
		printCommand(&b, cmd)
	}
	b.WriteString(usageTail)
	w.Write(b.Bytes())
}

func printCommand(w io.Writer, cmd *command) {
	fmt.Fprintf(w, "  %s\n", strings.TrimSpace(cmd.name+" "+cmd.synopsis))
	for _, line := range strings.Split(cmd.summary, "\n") {
		fmt.Fprintf(w, "      %s\n", line)
	}
	fs := newFlagSet(cmd.name)
	cmd.bind(fs)
	printFlags(w, fs, "      ")
	fmt.Fprintf(w, "      example: kvctl %s\n", cmd.example)
}
