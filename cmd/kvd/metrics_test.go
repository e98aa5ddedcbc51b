package main

import (
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
)

// TestMetricsListenerServes: the metrics listener serves /metrics, the
// profile index and an execution trace (go tool trace reads it).
func TestMetricsListenerServes(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	metrics := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "kvd_up 1\n") })
	stop, err := serveMetrics(addr, metrics, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	for _, c := range []struct{ path, want string }{
		{"/metrics", "kvd_up 1"},
		{"/debug/pprof/", "goroutine"},
		{"/debug/pprof/trace?seconds=0.05", "go 1."},
	} {
		resp, err := http.Get("http://" + addr + c.path)
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK || !strings.Contains(string(body[:min(len(body), 4096)]), c.want) {
			t.Errorf("GET %s: %d, %d bytes (%v); want 200 with %q", c.path, resp.StatusCode, len(body), err, c.want)
		}
	}
}
