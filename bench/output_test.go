package bench

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// sampleResult is a two-bucket, three-second result built by hand.
func sampleResult() *Result {
	r := &Result{Addr: "127.0.0.1:1", Warmup: time.Second, Elapsed: 2500 * time.Millisecond,
		ReadUnitSize: 4096, WriteUnitSize: 1024}
	for sec := 1; sec <= 3; sec++ {
		interval := time.Second
		if sec == 3 {
			interval = 500 * time.Millisecond
		}
		var total SeriesPoint
		for i, name := range []string{"app", "default"} {
			p := SeriesPoint{Second: sec, Bucket: name, Interval: interval,
				Counts: Counts{Ops: int64(1000 * (i + 1) * sec), RU: 900, WU: 100, Throttled: int64(i), ComputedUnitOps: 10},
				P50:    80 * time.Microsecond, P99: 1200 * time.Microsecond, P999: 3 * time.Millisecond}
			r.Series = append(r.Series, p)
			total.Counts.add(&p.Counts)
		}
		total.Second, total.Bucket, total.Interval = sec, TotalName, interval
		r.Series = append(r.Series, total)
	}
	for i, name := range []string{"app", "default"} {
		s := Summary{Bucket: name, Conns: 2, Elapsed: r.Elapsed, Counts: Counts{Ops: 5000 * int64(i+1), RU: 2700, WU: 300, ComputedUnitOps: 30}}
		s.Latency.Record(100 * time.Microsecond)
		if i == 1 {
			s.Errors, s.ErrorSamples = 1, []string{"SET: status 0x84 Internal error: disk on fire"}
		}
		r.Buckets = append(r.Buckets, s)
		r.Total.Counts.add(&s.Counts)
		r.Total.Conns += s.Conns
	}
	r.Total.Bucket, r.Total.Elapsed = TotalName, r.Elapsed
	return r
}

func TestWriteCSV(t *testing.T) {
	path := filepath.Join(t.TempDir(), "series.csv")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := sampleResult().WriteCSV(f); err != nil {
		t.Fatal(err)
	}
	f.Close()
	data, _ := os.ReadFile(path)
	rows, err := csv.NewReader(bytes.NewReader(data)).ReadAll()
	if err != nil {
		t.Fatalf("CSV does not parse: %v\n%s", err, data)
	}
	wantHead := "second,bucket,ops,ru,wu,throttled,rejected,errors,p50_us,p99_us"
	if got := strings.Join(rows[0][:10], ","); got != wantHead {
		t.Errorf("header = %s, want it to start with %s", got, wantHead)
	}
	if len(rows) != 1+3*3 {
		t.Fatalf("%d rows, want header + 3 seconds × (2 buckets + total)", len(rows))
	}
	// Second 2 of "default": ops 4000, throttled 1, p50 80µs, p99 1200µs.
	if got := strings.Join(rows[5][:10], ","); got != "2,default,4000,900,100,1,0,0,80.0,1200.0" {
		t.Errorf("row 5 = %s", got)
	}
	if got := rows[9]; got[1] != TotalName || got[2] != "9000" || got[len(got)-1] != "0.500" {
		t.Errorf("last total row = %v, want bucket *, ops 9000, interval 0.500", got)
	}
}

func TestWritePNG(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ops.png")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := sampleResult().WritePNG(f); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if fi, err := os.Stat(path); err != nil || fi.Size() == 0 {
		t.Fatalf("PNG file is missing or empty: %v", err)
	}
	data, _ := os.ReadFile(path)
	img, err := png.Decode(bytes.NewReader(data))
	if err != nil {
		t.Fatalf("PNG does not decode: %v", err)
	}
	if b := img.Bounds(); b.Dx() < 300 || b.Dy() < 200 {
		t.Errorf("PNG is %v, want a readable size", b)
	}
	// An empty result (interrupted during the warmup) still draws.
	var buf bytes.Buffer
	if err := (&Result{Addr: "x", Buckets: []Summary{{Bucket: "a"}}}).WritePNG(&buf); err != nil || buf.Len() == 0 {
		t.Errorf("empty result: %v, %d bytes", err, buf.Len())
	}
}

func TestWriteTable(t *testing.T) {
	var buf bytes.Buffer
	if err := sampleResult().WriteTable(&buf); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, want := range []string{
		"units: computed (read unit 4096 B, write unit 1024 B)",
		"ops/s", "p99.9", "throttled", "rejected",
		"app", "default", "total", "2000", // default: 5000·2 ops / 2.5 s = 4000; app 2000
		"error sample [default]: SET: status 0x84 Internal error: disk on fire",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}

func TestWriteJSON(t *testing.T) {
	var buf bytes.Buffer
	if err := sampleResult().WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	var got struct {
		Units   string
		Buckets []struct {
			Bucket    string
			OpsPerSec float64 `json:"ops_per_s"`
			P50       float64 `json:"p50_us"`
		}
		Total struct{ Ops int64 }
	}
	if err := json.Unmarshal(buf.Bytes(), &got); err != nil {
		t.Fatalf("JSON does not decode: %v\n%s", err, buf.String())
	}
	if len(got.Buckets) != 2 || got.Buckets[1].OpsPerSec != 4000 || got.Total.Ops != 15000 {
		t.Errorf("JSON = %+v", got)
	}
	if p := got.Buckets[0].P50; p < 99 || p > 101 {
		t.Errorf("p50_us = %v, want about 100", p)
	}
}

func TestFmtDur(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0: "0s", 999: "999ns", 87 * time.Microsecond: "87µs",
		1250 * time.Microsecond: "1.25ms", 2500 * time.Millisecond: "2.5s",
	} {
		if got := fmtDur(d); got != want {
			t.Errorf("fmtDur(%v) = %q, want %q", int64(d), got, want)
		}
	}
}
