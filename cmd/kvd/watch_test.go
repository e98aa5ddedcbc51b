package main

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestWatcherStartsFromTheLoadedConfig: the watcher compares the file with
// the bytes the running config was parsed from, so an edit made after kvd
// read its config but before the watcher started is applied, not taken for
// the running config (TestConfigReload failed that way once, under load).
func TestWatcherStartsFromTheLoadedConfig(t *testing.T) {
	path := filepath.Join(t.TempDir(), "serverless.json")
	if err := os.WriteFile(path, []byte(`{"node_capacity": 25000}`), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, source, loaded, err := readConfig(path)
	if err != nil || source != path || cfg.NodeCapacity != 25000 {
		t.Fatalf("readConfig: %+v, %q, %v", cfg, source, err)
	}
	edit := []byte(`{"node_capacity": 12345}`)
	if err := os.WriteFile(path, edit, 0o644); err != nil { // while kvd starts
		t.Fatal(err)
	}
	w := newWatcher(path, loaded, "", "", nil, nil)
	if data, ok := w.changed(); !ok || !bytes.Equal(data, edit) {
		t.Fatalf("first check: %q, %v; want the edit", data, ok)
	}
	if data, ok := w.changed(); ok {
		t.Fatalf("second check of an unchanged file: %q", data)
	}
}

// TestWatcherReportsAnUnreadableFile: a config file that stays missing is
// logged once (not at the first check: a replaced file may be briefly
// missing), the running config is kept, and its return is logged too.
func TestWatcherReportsAnUnreadableFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "serverless.json")
	loaded := []byte(`{"node_capacity": 25000}`)
	var logs bytes.Buffer
	w := newWatcher(path, loaded, "", "", nil, slog.New(slog.NewTextHandler(&logs, nil)))
	for i := range 4 {
		if _, ok := w.changed(); ok {
			t.Fatal("a missing file reported as changed")
		}
		if n := strings.Count(logs.String(), "config file unreadable"); n != min(i, 1) {
			t.Fatalf("after %d checks of a missing file, %d warnings: %s", i+1, n, logs.String())
		}
	}
	if err := os.WriteFile(path, loaded, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, ok := w.changed(); ok || !strings.Contains(logs.String(), "config file readable again") {
		t.Fatalf("the file back as it was: changed %v, log %s", ok, logs.String())
	}
}
