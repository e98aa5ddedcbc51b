package main

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestParseFlags(t *testing.T) {
	var stderr bytes.Buffer
	o, c, err := parseFlags([]string{
		"--addr", "127.0.0.1:9", "--bucket", "a:2:100", "--bucket", "b,mix=50:50",
		"--duration", "3s", "--warmup", "0s", "--nonblocking", "--csv", "s.csv", "--json",
	}, &stderr)
	if err != nil {
		t.Fatal(err)
	}
	if o.Addr != "127.0.0.1:9" || len(o.Buckets) != 2 || o.Buckets[0].Rate != 100 || o.Buckets[1].SetWeight != 50 ||
		o.Duration != 3*time.Second || o.Warmup != 0 || !o.NonBlocking || c.csv != "s.csv" || !c.json {
		t.Errorf("parsed %+v %+v", o, c)
	}
	if _, _, err := parseFlags([]string{"--bucket", "a:zero"}, &stderr); err == nil {
		t.Error("a bad bucket spec was accepted")
	}
	if _, _, err := parseFlags([]string{"stray"}, &stderr); err == nil {
		t.Error("a positional argument was accepted")
	}
}

func TestHelpAndExitCodes(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run([]string{"--help"}, &out, &errOut); code != 0 {
		t.Errorf("--help exits %d", code)
	}
	for _, want := range []string{"--bucket SPEC", "name[:conns[:rate]]", "--nonblocking", "--png FILE"} {
		if !strings.Contains(errOut.String(), want) {
			t.Errorf("help lacks %q", want)
		}
	}
	if code := run([]string{"--duration", "1s", "--addr", "127.0.0.1:1", "--warmup", "0s"}, &out, &errOut); code != 1 {
		t.Errorf("run against a closed port exits %d, want 1", code)
	}
	if code := run([]string{"--bucket", ""}, &out, &errOut); code != 2 {
		t.Errorf("bad flags exit %d, want 2", code)
	}
}
