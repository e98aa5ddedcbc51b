package tests

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"testing"
	"time"

	mc "kvd/protocol/binary"
)

// TestGoldenReplay replays every conversation of the hand-written transcript
// protocol/binary/testdata/kvd.txt against the real kvd, each on a new
// connection, and compares every reply byte for byte, so the transcript and
// the server cannot drift apart. Each conversation sets up the state it
// assumes with its own requests (HELLO, SASL_AUTH, SET, SELECT_BUCKET), whose
// replies are in the transcript too; the users and buckets come from
// goldenConfig below.
//
// Run-dependent fields, the only ones not compared byte for byte:
//   - CAS: kvd chooses them. A reply's CAS must be 0 where the transcript's
//     is 0; any other transcript CAS maps one to one to the CAS kvd sent the
//     first time it appeared (the first CAS seen stands for the transcript's
//     first CAS, and so on), so "GET answers the CAS its SET returned" is
//     still checked.
//   - next_tick_us in a 0x0c body: the microseconds left in kvd's current
//     throttle second. The body must be exactly {"next_tick_us":N} with
//     0 < N <= 1,000,000; the rest of the reply (everything but N and the
//     body length) is compared byte for byte.
func TestGoldenReplay(t *testing.T) {
	t.Parallel()
	f, err := os.Open("../protocol/binary/testdata/kvd.txt")
	if err != nil {
		t.Fatal(err)
	}
	conns, err := mc.ParseTranscript(f)
	_ = f.Close()
	if err != nil {
		t.Fatalf("kvd.txt: %v", err)
	}
	k := startKVD(t, goldenConfig)
	cas := &casMap{toKVD: map[uint64]uint64{}, fromKVD: map[uint64]uint64{}}
	for _, c := range conns {
		t.Run(c.Title, func(t *testing.T) { replayKVD(t, k.Addr, c, cas) })
	}
}

// goldenConfig is the server state kvd.txt assumes: an anonymous "default"
// bucket; "app"; "throttled" with hard_limit 0, so any data command of a
// throttled user is throttled at once; the user "golden" (password
// "golden-pw") who may select both and has no privilege (so is throttled).
const goldenConfig = `{
  "anonymous_bucket": "default",
  "buckets": [{"name": "default"}, {"name": "app"},
              {"name": "throttled", "reserved": 0, "hard_limit": 0}],
  "users": [
    {"name": "golden", "password": "golden-pw", "buckets": ["app", "throttled"]}
  ]
}`

// replayKVD sends every request of c in one write on a new connection and
// compares the replies with the transcript's.
func replayKVD(t *testing.T, addr string, c mc.TranscriptConn, cas *casMap) {
	conn := dialRaw(t, addr)
	var out []byte
	for _, f := range c.Frames {
		if f.Kind != '<' {
			out = append(out, f.Raw...)
		}
	}
	conn.write(out)
	for _, want := range c.Frames {
		if want.Kind != '<' {
			continue
		}
		got, err := conn.tryRecvFrame(10 * time.Second)
		if err != nil {
			t.Fatalf("%v: reading the reply: %v", want, err)
		}
		if msg := compareGolden(got, want.Raw, cas); msg != "" {
			t.Errorf("%v: %s\nkvd replied\n %x\ntranscript\n %x", want, msg, got, want.Raw)
		}
	}
	if c.Closed {
		if data, closed := conn.drainUntilClosed(5 * time.Second); !closed || len(data) > 0 {
			t.Errorf("kvd should have closed the connection after the last reply; got %x, closed %v", data, closed)
		}
	}
}

// tryRecvFrame reads one response frame's bytes.
func (c *rawConn) tryRecvFrame(timeout time.Duration) ([]byte, error) {
	_ = c.nc.SetReadDeadline(time.Now().Add(timeout))
	hdr, err := c.r.Peek(mc.HeaderLen)
	if err != nil {
		return nil, err
	}
	frame := make([]byte, mc.HeaderLen+int(binary.BigEndian.Uint32(hdr[8:12])))
	if _, err := io.ReadFull(c.r, frame); err != nil {
		return nil, err
	}
	return frame, nil
}

// compareGolden compares a reply with the transcript's, through the
// run-dependent fields TestGoldenReplay documents, and returns what differs
// ("" when nothing does).
func compareGolden(got, want []byte, cas *casMap) string {
	if len(got) < mc.HeaderLen || len(want) < mc.HeaderLen {
		return "short frame"
	}
	got = bytes.Clone(got)
	if msg := cas.match(got[16:24], want[16:24]); msg != "" {
		return msg
	}
	copy(got[16:24], want[16:24])
	if binary.BigEndian.Uint16(want[6:8]) == uint16(mc.StatusWouldThrottle) {
		var msg string
		if got, msg = normalizeNextTick(got, want); msg != "" {
			return msg
		}
	}
	if !bytes.Equal(got, want) {
		return "replies differ"
	}
	return ""
}

// casMap maps the transcript's CAS values to kvd's, one to one.
type casMap struct {
	toKVD   map[uint64]uint64
	fromKVD map[uint64]uint64
}

// match checks the CAS kvd sent against the transcript's and records a new
// pair.
func (m *casMap) match(gotB, wantB []byte) string {
	got, want := binary.BigEndian.Uint64(gotB), binary.BigEndian.Uint64(wantB)
	if want == 0 || got == 0 {
		if got != want {
			return fmt.Sprintf("CAS %#x where the transcript has %#x", got, want)
		}
		return ""
	}
	w, seenWant := m.toKVD[want]
	g, seenGot := m.fromKVD[got]
	switch {
	case seenWant && w != got:
		return fmt.Sprintf("CAS %#x, but the transcript's %#x stood for %#x before", got, want, w)
	case seenGot && g != want:
		return fmt.Sprintf("CAS %#x stood for the transcript's %#x before, here for %#x", got, g, want)
	}
	m.toKVD[want], m.fromKVD[got] = got, want
	return ""
}

var nextTickBody = regexp.MustCompile(`^\{"next_tick_us":([0-9]+)\}$`)

// normalizeNextTick checks the {"next_tick_us":N} body of a 0x0c reply and
// returns got with the transcript's body in its place.
func normalizeNextTick(got, want []byte) ([]byte, string) {
	var res mc.Response
	if n, err := mc.DecodeResponse(got, 1<<30, &res); err != nil || n != len(got) {
		return got, fmt.Sprintf("undecodable reply (%v)", err)
	}
	m := nextTickBody.FindSubmatch(res.Value)
	if m == nil {
		return got, fmt.Sprintf("0x0c body %q is not {\"next_tick_us\":N}", res.Value)
	}
	if n, err := strconv.Atoi(string(m[1])); err != nil || n <= 0 || n > 1_000_000 {
		return got, fmt.Sprintf("next_tick_us %s outside (0, 1000000]", m[1])
	}
	var w mc.Response
	if _, err := mc.DecodeResponse(want, 1<<30, &w); err != nil {
		return got, fmt.Sprintf("the transcript's reply is undecodable (%v)", err)
	}
	out := append(bytes.Clone(got[:len(got)-len(res.Value)]), w.Value...)
	binary.BigEndian.PutUint32(out[8:12], binary.BigEndian.Uint32(got[8:12])-uint32(len(res.Value))+uint32(len(w.Value)))
	return out, ""
}
