package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"kvd/bench"
)

func TestParseDeadlineFlags(t *testing.T) {
	var stderr bytes.Buffer
	o, c, err := parseDeadlineFlags([]string{
		"--addr", "127.0.0.1:9", "--user", "admin", "--password", "pw", "--conns", "64",
		"--arrivals", "fixed", "--loads", "0.5, 1.5", "--percentiles", "90", "--deadline", "20ms",
		"--capacity", "1234", "--settings", `{"reserved":"unlimited","max_queued":10}`,
		"--csv", "d.csv", "--png", "d.png", "--duration", "3s", "--rounds", "3",
	}, &stderr)
	if err != nil {
		t.Fatal(err)
	}
	p := o.Point
	if p.Addr != "127.0.0.1:9" || p.User != "admin" || p.Conns != 64 || p.Arrivals != bench.Fixed ||
		p.Duration != 3*time.Second || o.Deadline != 20*time.Millisecond || o.Capacity != 1234 ||
		len(o.Loads) != 2 || o.Loads[1] != 1.5 || len(o.Percentiles) != 1 || o.Percentiles[0] != 90 ||
		o.Settings["max_queued"] != float64(10) || c.csv != "d.csv" || c.png != "d.png" || o.Rounds != 3 {
		t.Errorf("parsed %+v %+v", o, c)
	}
	for _, bad := range [][]string{
		{"--arrivals", "bursty"}, {"--loads", "a"}, {"--percentiles", "9x"}, {"--settings", "{"}, {"stray"},
	} {
		if _, _, err := parseDeadlineFlags(bad, &stderr); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
}

func TestDeadlineHelpAndExitCodes(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run([]string{"deadline", "--help"}, &out, &errOut); code != 0 {
		t.Errorf("deadline --help exits %d", code)
	}
	for _, want := range []string{"seed 004", "--percentiles list", "--capacity ops/s"} {
		if !strings.Contains(errOut.String(), want) {
			t.Errorf("help lacks %q", want)
		}
	}
	if code := run([]string{"deadline", "--addr", "127.0.0.1:1", "--capacity", "100"}, &out, &errOut); code != 1 {
		t.Errorf("a sweep against a closed port exits %d, want 1", code)
	}
	if code := run([]string{"deadline", "--loads", "-1"}, &out, &errOut); code != 1 {
		t.Errorf("a negative load exits %d, want 1 (Validate)", code)
	}
}
