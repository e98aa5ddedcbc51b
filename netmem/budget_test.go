package netmem

import (
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/panjf2000/gnet/v2"
)

// fakeConn records what the budget does to a connection.
type fakeConn struct {
	wakes, closes int
	reading       []string // each SetReading, as "on", "off", "off+w", "off+hup"...
}

func (f *fakeConn) Wake(gnet.AsyncCallback) error { f.wakes++; return nil }
func (f *fakeConn) Close() error                  { f.closes++; return nil }
func (f *fakeConn) SetReading(on, writing, hangup bool) error {
	s := "off"
	if on {
		s = "on"
	}
	if writing {
		s += "+w"
	}
	if hangup {
		s += "+hup"
	}
	f.reading = append(f.reading, s)
	return nil
}

var testLimits = Limits{Budget: 1 << 20, ConnOutput: 256 << 10, ConnWaiting: 256 << 10, ConnBuffer: 8 << 20}

func newTestBudget() *Budget { return New(slog.New(slog.NewTextHandler(io.Discard, nil))) }

func newHolder(remote string) (*Holder, *fakeConn) {
	f := &fakeConn{}
	h := &Holder{}
	h.Init(f, remote)
	return h, f
}

// all lists holders as Tick wants them.
func all(hs ...*Holder) func(func(*Holder) bool) { return slices.Values(hs) }

// TestAccount drives one connection through passes, another holding a
// fixed share of the node, and checks each pass's pauses, read interest and
// counters.
func TestAccount(t *testing.T) {
	type pass struct {
		in, out        int
		frame          int   // an admitted frame not all arrived yet
		stall          Stall // why the input cannot be decoded now
		other          int   // what the second connection holds (its input)
		resume         bool  // housekeeping let the connection go on before this pass
		wrote          bool  // the pass gave gnet replies (Wrote)
		close          bool
		paused         bool   // paused for memory or output: decodes nothing
		inPaused       bool   // paused for input only: not read, still decoding, not in Stats.Paused
		reading        string // the SetReading of this pass, "" for none (also when the interest set last stands)
		mem, outp, inp int64  // pauses counted so far
	}
	for _, tc := range []struct {
		name   string
		passes []pass
	}{
		{"under the budget nothing pauses", []pass{
			{in: 500 << 10, paused: false},
			{in: 0, out: 100 << 10, inPaused: true, reading: "off+w"}, // not read while gnet holds replies
			{in: 0, out: 0, reading: "on"},
		}},
		{"over the budget a small holder goes on", []pass{
			{in: PauseFloor - 1, other: 2 << 20},
		}},
		{"over the budget a large holder pauses, until resumed", []pass{
			{in: PauseFloor, other: 2 << 20, paused: true, reading: "off+hup", mem: 1},
			{in: PauseFloor, out: 10, other: 0, paused: true, inPaused: true, reading: "off+w+hup", mem: 1, inp: 1}, // node under budget: still paused
			{in: PauseFloor, other: 0, resume: true, reading: "on", mem: 1, inp: 1},
			{in: PauseFloor, other: 2 << 20, paused: true, reading: "off+hup", mem: 2, inp: 1},
		}},
		{"an admitted frame is held whole, and not paused for memory", []pass{
			{in: PauseFloor, frame: 1 << 20, other: 2 << 20},
			{in: 1 << 20, frame: 1 << 20, other: 2 << 20},
		}},
		{"what a connection holds beside its admitted frame may pause it", []pass{
			{in: 100 << 10, frame: 1 << 20, out: PauseFloor, other: 2 << 20, paused: true, inPaused: true, reading: "off+w+hup", mem: 1, inp: 1},
		}},
		{"output pauses past the cap, until half of it", []pass{
			{out: 256<<10 + 1, paused: true, inPaused: true, reading: "off+w", outp: 1},
			{out: 200 << 10, paused: true, inPaused: true, outp: 1}, // the same interest: no epoll_ctl
			{out: 128 << 10, inPaused: true, outp: 1},               // decodes again, still not read
			{out: 0, reading: "on", outp: 1},
		}},
		{"resume ends a memory pause, not an output pause", []pass{
			{in: PauseFloor, out: 300 << 10, other: 2 << 20, paused: true, inPaused: true, reading: "off+w+hup", mem: 1, outp: 1, inp: 1},
			{in: PauseFloor, out: 300 << 10, other: 2 << 20, resume: true, paused: true, inPaused: true, reading: "off+w", mem: 1, outp: 1, inp: 1},
		}},
		{"a busy connection is not read until it is not busy", []pass{
			{in: 256<<10 + 1, stall: Busy, inPaused: true, reading: "off", inp: 1},
			{in: 200 << 10, out: 10, stall: Busy, inPaused: true, reading: "off+w", inp: 1},
			{in: 128 << 10, reading: "on", inp: 1},
			{in: 0, stall: Busy, inPaused: true, reading: "off", inp: 1}, // nothing waited: not counted
			{in: 0, reading: "on", inp: 1},
		}},
		{"a waiting connection is read up to ConnWaiting, then until half of it is left", []pass{
			{in: 256 << 10, stall: Waiting},
			{in: 256<<10 + 1, stall: Waiting, inPaused: true, reading: "off", inp: 1},
			{in: 128<<10 + 1, stall: Waiting, inPaused: true, inp: 1},
			{in: 128 << 10, stall: Waiting, reading: "on", inp: 1},
			{in: 1, stall: Busy, inPaused: true, reading: "off", inp: 2},
		}},
		{"input that is not stalled is read, whatever it holds", []pass{
			{in: 512 << 10},
			{out: 300 << 10, stall: Busy, paused: true, inPaused: true, reading: "off+w", outp: 1},
		}},
		{"the interest is set again only when gnet may have changed it", []pass{
			{out: 300 << 10, stall: Busy, paused: true, inPaused: true, reading: "off+w", outp: 1},
			{out: 300 << 10, stall: Busy, paused: true, inPaused: true, outp: 1},
			{out: 300 << 10, stall: Busy, wrote: true, paused: true, inPaused: true, reading: "off+w", outp: 1}, // a write may have turned reading on
			{out: 200 << 10, stall: Busy, paused: true, inPaused: true, outp: 1},                                // part of it sent: gnet left it alone
			{in: PauseFloor, other: 2 << 20, paused: true, reading: "off+hup", mem: 1, outp: 1},                 // drained to 0: gnet turned reading on
			{in: PauseFloor, other: 2 << 20, paused: true, mem: 1, outp: 1},
			{in: PauseFloor, other: 2 << 20, wrote: true, paused: true, reading: "off+hup", mem: 1, outp: 1},
		}},
		{"past the per-connection limit it closes", []pass{
			{in: 8<<20 + 1, close: true},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newTestBudget()
			h, f := newHolder("a")
			other, _ := newHolder("b")
			for i, p := range tc.passes {
				b.Account(other, p.other, 0, 0, NotStalled, noPause)
				if p.resume {
					h.resume.Store(true)
				}
				if p.wrote {
					h.Wrote()
				}
				before := len(f.reading)
				if got := b.Account(h, p.in, p.out, p.frame, p.stall, testLimits); got != p.close {
					t.Fatalf("pass %d: close %v, want %v", i, got, p.close)
				}
				reading := ""
				if len(f.reading) > before {
					reading = f.reading[len(f.reading)-1]
				}
				st := b.Stats()
				inPaused := h.paused&pausedInput != 0
				if h.Paused() != p.paused || inPaused != p.inPaused || reading != p.reading || st.MemPauses != p.mem ||
					st.OutPauses != p.outp || st.InPauses != p.inp {
					t.Fatalf("pass %d: paused %v/%v reading %q pauses %d/%d/%d, want %v/%v %q %d/%d/%d", i, h.Paused(), inPaused,
						reading, st.MemPauses, st.OutPauses, st.InPauses, p.paused, p.inPaused, p.reading, p.mem, p.outp, p.inp)
				}
				if want := int64(max(p.in, p.frame) + p.out + p.other); !p.close && st.Held != want {
					t.Fatalf("pass %d: held %d, want %d", i, st.Held, want)
				}
				if wantPaused := map[bool]int{true: 1}[p.paused]; !p.close && st.Paused != wantPaused {
					t.Fatalf("pass %d: %d paused, want %d", i, st.Paused, wantPaused)
				}
				if p.close && st.Closed != 1 {
					t.Fatalf("pass %d: closed %d, want 1", i, st.Closed)
				}
			}
		})
	}
}

// TestAdmit: a small frame is always read; a larger one while the node's
// total and all of it fit the budget, and once admitted it is held whole;
// a refused one is counted and logged, at most a line a second.
func TestAdmit(t *testing.T) {
	const budget = 4 << 20
	var log strings.Builder
	b := New(slog.New(slog.NewTextHandler(&log, nil)))
	b.release = func() {}
	h, _ := newHolder("a")
	other, _ := newHolder("b")
	b.Account(other, 3<<20, 0, 0, NotStalled, noPause)
	if !b.Admit(h, SmallFrame, budget, nil) || !b.Admit(h, 1<<20, budget, nil) {
		t.Fatal("a frame that fits refused")
	}
	b.Account(h, 10<<10, 0, 1<<20, NotStalled, testLimits) // its first 10 KiB came with its header
	if st := b.Stats(); st.Held != 4<<20 || h.Paused() {
		t.Fatalf("held %d paused %v, want 4 MiB, not paused", st.Held, h.Paused())
	}
	now := time.Unix(100, 0)
	if b.Admit(h, SmallFrame+1, budget, nil) || b.Admit(h, 1<<20, budget, nil) {
		t.Fatal("a frame past the budget admitted")
	}
	if !b.Admit(h, SmallFrame, budget, nil) {
		t.Fatal("a small frame refused")
	}
	b.Tick(now, budget, all(h, other))
	b.Admit(h, 1<<20, budget, nil)
	b.Tick(now.Add(time.Second/2), budget, all(h, other))
	if st := b.Stats(); st.Refused != 3 || strings.Count(log.String(), "refusing frames") != 1 ||
		!strings.Contains(log.String(), "frames=2") {
		t.Fatalf("refused %d, log %q: want 3 counted, one line for the first 2", st.Refused, log.String())
	}
	b.Tick(now.Add(time.Second), budget, all(h, other))
	if !strings.Contains(log.String(), "frames=1") {
		t.Fatalf("log %q: want a second line for the third", log.String())
	}
	b.Account(h, 0, 0, 0, NotStalled, testLimits) // it arrived and was decoded
	if !b.Admit(h, 1<<20, budget, nil) {
		t.Fatal("a frame that fits again refused")
	}
}

// TestAdmitShare: one group's admitted frames take at most half of what
// the other groups' leave of the budget, whatever room the node has, so
// that no number of groups fills it; a frame that arrived (FrameDone) or a
// connection that closed (Forget) gives its share back.
func TestAdmitShare(t *testing.T) {
	const budget = 8 << 20
	b := newTestBudget()
	var mine, theirs, third Share
	h1, _ := newHolder("a")
	h2, _ := newHolder("b")
	h3, _ := newHolder("c")
	h4, _ := newHolder("d")
	if !b.Admit(h1, 3<<20, budget, &mine) {
		t.Fatal("the group's first frame refused")
	}
	if b.Admit(h2, 2<<20, budget, &mine) {
		t.Fatal("the group admitted past half the budget")
	}
	if r := h2.Refusal(); !strings.Contains(r, "this bucket's connections hold 3145728 bytes of unfinished frames and the others 0") {
		t.Fatalf("refusal %q", r)
	}
	// Another group has half of what the first leaves: 2.5 MiB.
	if b.Admit(h3, 3<<20, budget, &theirs) {
		t.Fatal("a second group admitted past half of what the first leaves")
	}
	if r := h3.Refusal(); !strings.Contains(r, "hold 0 bytes of unfinished frames and the others 3145728: at most half of what the others leave") {
		t.Fatalf("refusal %q", r)
	}
	if !b.Admit(h3, 2<<20, budget, &theirs) {
		t.Fatal("another group's frame refused")
	}
	// Two groups together leave room for a third: (8 - 3 - 2) / 2 MiB.
	if b.Admit(h4, 2<<20, budget, &third) || !b.Admit(h4, 1<<20, budget, &third) {
		t.Fatal("a third group: want 2 MiB refused, 1 MiB admitted")
	}
	b.FrameDone(h4)
	b.FrameDone(h1)
	if b.Admit(h2, 4<<20, budget, &mine) || !b.Admit(h2, 3<<20, budget, &mine) {
		t.Fatal("after FrameDone the group has half of what the other leaves: want 4 MiB refused, 3 MiB admitted")
	}
	b.Forget(h2)
	if mine.n.Load() != 0 || theirs.n.Load() != 2<<20 || b.frames.Load() != 2<<20 {
		t.Fatalf("shares %d and %d, total %d after Forget, want 0, 2 MiB, 2 MiB", mine.n.Load(), theirs.n.Load(), b.frames.Load())
	}
	b.FrameDone(h3)
	// Connections in no group (nil) count together.
	if !b.Admit(h1, 3<<20, budget, nil) || b.Admit(h4, 2<<20, budget, nil) {
		t.Fatal("connections in no group: want the first 3 MiB frame admitted, the next 2 MiB refused")
	}
	if r := h4.Refusal(); !strings.Contains(r, "the connections without a bucket hold 3145728 bytes") {
		t.Fatalf("refusal %q", r)
	}
}

// TestForgetAndUnpause: a closing connection leaves the figures; at
// shutdown a paused connection is read again whatever it holds.
func TestForgetAndUnpause(t *testing.T) {
	b := newTestBudget()
	h, f := newHolder("a")
	b.Account(h, 2<<20, 0, 0, NotStalled, testLimits)
	if !h.Paused() || b.Stats().Paused != 1 {
		t.Fatal("want a memory pause")
	}
	b.Unpause(h, true)
	if h.Paused() || b.Stats().Paused != 0 || f.reading[len(f.reading)-1] != "on+w" {
		t.Fatalf("after Unpause: paused %v, stats %+v, reading %v", h.Paused(), b.Stats(), f.reading)
	}
	b.Account(h, 2<<20, 0, 0, NotStalled, testLimits)
	b.Forget(h)
	if st := b.Stats(); st.Held != 0 || st.Paused != 0 || h.Paused() {
		t.Fatalf("after Forget: %+v, paused %v", st, h.Paused())
	}
	// The rest of a pass after its connection closed (gnet closes one
	// inside a failed write) accounts and admits nothing.
	reads := len(f.reading)
	if b.Account(h, 2<<20, 0, 64<<10, Busy, testLimits) || b.Admit(h, 64<<10, 1<<20, nil) {
		t.Fatal("a forgotten holder was closed or admitted a frame")
	}
	if st := b.Stats(); st.Held != 0 || st.Paused != 0 || h.Paused() || len(f.reading) != reads {
		t.Fatalf("after a late pass: %+v, paused %v, read interest set %v", st, h.Paused(), f.reading[reads:])
	}
}

// noPause are limits under which a connection never pauses: the test's
// other connections hold their share of the node with them.
var noPause = Limits{Budget: 1 << 40, ConnOutput: 1 << 40, ConnWaiting: 1 << 40, ConnBuffer: 1 << 40}

// TestTickResumesSmallestFirst: paused connections go on, the least
// holding first, while there is room under 3/4 of the budget (each one
// taking PauseFloor more than it holds from the room); all are woken.
func TestTickResumesSmallestFirst(t *testing.T) {
	lim := Limits{Budget: 4 << 20, ConnOutput: 1 << 30, ConnBuffer: 1 << 30} // 3/4: 3072 KiB
	sizes := []int{900 << 10, 100 << 10, 500 << 10, 300 << 10}               // 1800 KiB
	for _, tc := range []struct {
		extra   int    // held by a connection that is not paused
		resumed []bool // per size
	}{
		{0, []bool{true, true, true, true}},              // room 1272: 100 → 1108, 300 → 744, 500 → 180, 900
		{700 << 10, []bool{false, true, true, true}},     // room 572: 100 → 408, 300 → 44, 500
		{1100 << 10, []bool{false, true, false, true}},   // room 172: 100 → 8, 300
		{1300 << 10, []bool{false, false, false, false}}, // room -28
	} {
		b := newTestBudget()
		big, _ := newHolder("big") // puts the node over its budget, then leaves
		b.Account(big, 5<<20, 0, 0, NotStalled, noPause)
		var hs []*Holder
		var fs []*fakeConn
		for _, n := range sizes {
			h, f := newHolder("c")
			if b.Account(h, n, 0, 0, NotStalled, lim); !h.Paused() {
				t.Fatalf("holder of %d not paused", n)
			}
			hs, fs = append(hs, h), append(fs, f)
		}
		b.Forget(big)
		extra, _ := newHolder("extra")
		b.Account(extra, tc.extra, 0, 0, NotStalled, noPause)
		b.Tick(time.Unix(0, 0), lim.Budget, all(append(hs, extra)...))
		for i, h := range hs {
			if h.resume.Load() != tc.resumed[i] || fs[i].wakes != 1 {
				t.Errorf("extra %d KiB: holder of %d KiB: resume %v, wakes %d; want %v, 1",
					tc.extra>>10, sizes[i]>>10, h.resume.Load(), fs[i].wakes, tc.resumed[i])
			}
		}
		b.Account(hs[1], sizes[1], 0, 0, NotStalled, lim) // the pass after: a resumed connection goes on
		if hs[1].Paused() == tc.resumed[1] {
			t.Errorf("extra %d KiB: after the pass, paused %v", tc.extra>>10, hs[1].Paused())
		}
	}
}

// TestLastResort: the connection holding the most is closed after
// CloseGrace over the budget, then at most one per CloseEvery; past twice
// the budget at once; never under the budget.
func TestLastResort(t *testing.T) {
	lim := Limits{Budget: 1 << 20, ConnOutput: 1 << 30, ConnBuffer: 1 << 30}
	t0 := time.Unix(1000, 0)
	for _, tc := range []struct {
		name   string
		held   []int           // what each connection holds
		ticks  []time.Duration // since t0
		closes [][2]int        // closes of the largest holder and of the other after each tick
	}{
		{"under the budget", []int{512 << 10, 256 << 10}, []time.Duration{0, 10 * time.Second}, [][2]int{{0, 0}, {0, 0}}},
		// The fake connections stay open when closed: what the one being
		// closed holds no longer counts, so it is enough.
		{"over: grace, then the largest", []int{700 << 10, 500 << 10},
			[]time.Duration{0, 4900 * time.Millisecond, 5 * time.Second, 6 * time.Second},
			[][2]int{{0, 0}, {0, 0}, {1, 0}, {1, 0}}},
		{"over twice the budget: at once", []int{1500 << 10, 700 << 10},
			[]time.Duration{0, 10 * time.Millisecond}, [][2]int{{1, 0}, {1, 0}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newTestBudget()
			var hs []*Holder
			var fs []*fakeConn
			for _, n := range tc.held {
				h, f := newHolder("c")
				b.Account(h, 0, n, 0, NotStalled, lim) // output: not paused, still held
				hs, fs = append(hs, h), append(fs, f)
			}
			for i, d := range tc.ticks {
				b.Tick(t0.Add(d), lim.Budget, all(hs...))
				if got := [2]int{fs[0].closes, fs[1].closes}; got != tc.closes[i] {
					t.Fatalf("tick %d (+%v): closes %v, want %v", i, d, got, tc.closes[i])
				}
			}
			if last := tc.closes[len(tc.closes)-1]; b.Stats().Closed != int64(last[0]+last[1]) {
				t.Fatalf("closed %d", b.Stats().Closed)
			}
		})
	}
	// Back under the budget, the grace starts over.
	b := newTestBudget()
	h, f := newHolder("c")
	b.Account(h, 0, 2<<20-1, 0, NotStalled, lim)
	b.Tick(t0, lim.Budget, all(h))
	b.Account(h, 0, 0, 0, NotStalled, lim)
	b.Tick(t0.Add(3*time.Second), lim.Budget, all(h))
	b.Account(h, 0, 2<<20-1, 0, NotStalled, lim)
	b.Tick(t0.Add(6*time.Second), lim.Budget, all(h))
	if f.closes != 0 {
		t.Fatal("closed before a fresh grace")
	}
	b.Tick(t0.Add(11*time.Second), lim.Budget, all(h))
	if f.closes != 1 {
		t.Fatal("not closed after a fresh grace")
	}
}

// TestFreeOS: freed memory goes back to the OS once the node holds a
// quarter of a peak of at least FreeOSMin, at most every FreeOSEvery.
func TestFreeOS(t *testing.T) {
	lim := Limits{Budget: 1 << 40, ConnOutput: 1 << 40, ConnBuffer: 1 << 40}
	t0 := time.Unix(1000, 0)
	b := newTestBudget()
	released := 0
	b.release = func() { released++ }
	h, _ := newHolder("c")
	for _, step := range []struct {
		held   int
		at     time.Duration
		wanted int
	}{
		{FreeOSMin - 1, 0, 0},            // peak under FreeOSMin
		{0, time.Second, 0},              // still: the peak was small
		{64 << 20, 20 * time.Second, 0},  // a peak, still held
		{17 << 20, 21 * time.Second, 0},  // more than a quarter
		{16 << 20, 22 * time.Second, 1},  // a quarter: released, peak now 16 MiB
		{0, 30 * time.Second, 1},         // only 8 s since the last
		{0, 32 * time.Second, 2},         // what was held at the last release is gone: released
		{128 << 20, 41 * time.Second, 2}, // a new peak
		{0, 42 * time.Second, 3},         // 10 s since the last: released
		{128 << 20, 43 * time.Second, 3}, //
		{0, 44 * time.Second, 3},         // only 2 s since the last
		{0, 52 * time.Second, 4},         // 10 s since the last
		{FreeOSMin - 1, 53 * time.Second, 4},
		{0, 70 * time.Second, 4}, // the new peak is under FreeOSMin
	} {
		b.Account(h, step.held, 0, 0, NotStalled, lim)
		b.Tick(t0.Add(step.at), lim.Budget, all(h))
		if released != step.wanted {
			t.Fatalf("at +%v holding %d: released %d times, want %d", step.at, step.held, released, step.wanted)
		}
	}
}

// TestTickWakesBackOff: a paused connection whose figures stand is woken
// after gaps that double up to MaxWakeGap ticks; one whose figures changed
// is woken at the next tick; one given room is woken whatever its gap.
func TestTickWakesBackOff(t *testing.T) {
	lim := Limits{Budget: 1 << 20, ConnOutput: 1 << 30, ConnWaiting: 1 << 30, ConnBuffer: 1 << 30}
	b := newTestBudget()
	h, f := newHolder("stuck")
	other, _ := newHolder("other") // keeps the node over its budget: no room
	b.Account(other, 2<<20, 0, 0, NotStalled, noPause)
	// A reply waits for its client: never let go on without room (TestTickLetsOneGoWhenStuck).
	if b.Account(h, PauseFloor, 1, 0, NotStalled, lim); !h.Paused() {
		t.Fatal("not paused")
	}
	var woken []int
	tick := func(i int) {
		before := f.wakes
		b.Tick(time.Unix(0, 0), lim.Budget, all(h, other))
		if f.wakes > before {
			woken = append(woken, i)
		}
	}
	for i := range 40 {
		tick(i)
	}
	if want := []int{0, 1, 3, 7, 15, 23, 31, 39}; !slices.Equal(woken, want) {
		t.Fatalf("woken at ticks %v, want %v", woken, want)
	}
	woken = nil
	b.Account(h, PauseFloor+1, 1, 0, NotStalled, lim) // a pass saw its figures change
	for i := 40; i < 46; i++ {
		tick(i)
	}
	if want := []int{40, 41, 43}; !slices.Equal(woken, want) {
		t.Fatalf("after a change woken at ticks %v, want %v", woken, want)
	}
	woken = nil
	b.Forget(other) // room: resumed and woken at once (its gap would wake it at 47)
	tick(46)
	if want := []int{46}; !slices.Equal(woken, want) || !h.resume.Load() {
		t.Fatalf("with room woken at %v (resume %v), want [46] and resume", woken, h.resume.Load())
	}
}

// TestTickLetsOneGoWhenStuck: without room, the smallest memory-paused
// connection whose client has read every reply goes on (its commands drain only by
// running) once the total has not fallen for ForceEvery, one at a time, at
// most every ForceEvery; one with replies waiting, or holding less than
// PauseFloor (a slow reader's few GETs), is never chosen.
func TestTickLetsOneGoWhenStuck(t *testing.T) {
	lim := Limits{Budget: 4 << 20, ConnOutput: 1 << 30, ConnWaiting: 1 << 30, ConnBuffer: 1 << 30}
	b := newTestBudget()
	big, _ := newHolder("big") // puts the node over its budget
	b.Account(big, 5<<20, 0, 0, NotStalled, noPause)
	reader, _ := newHolder("reader") // small, but a reply waits for its client
	small, _ := newHolder("small")
	large, _ := newHolder("large")
	tiny, _ := newHolder("tiny") // holds little: never chosen
	b.Account(reader, 100<<10, 1, 0, NotStalled, lim)
	b.Account(tiny, 100<<10, 0, 0, NotStalled, lim)
	b.Account(tiny, 10<<10, 0, 0, NotStalled, lim) // still paused, now holding 10 KiB
	b.Account(small, 200<<10, 0, 0, NotStalled, lim)
	b.Account(large, 900<<10, 0, 0, NotStalled, lim)
	b.Account(big, 3<<20, 0, 0, NotStalled, noPause) // still no room: 4.2 MiB held
	hs := all(reader, tiny, small, large, big)
	t0 := time.Unix(100, 0)
	b.Tick(t0, lim.Budget, hs) // the first look: nothing to compare with
	if reader.resume.Load() || small.resume.Load() || large.resume.Load() {
		t.Fatal("let one go at the first tick")
	}
	b.Tick(t0.Add(50*time.Millisecond), lim.Budget, hs)
	if small.resume.Load() {
		t.Fatal("let one go before the total stood still for ForceEvery")
	}
	b.Tick(t0.Add(100*time.Millisecond), lim.Budget, hs)
	if reader.resume.Load() || tiny.resume.Load() || !small.resume.Load() || large.resume.Load() {
		t.Fatalf("stuck: resume reader %v tiny %v small %v large %v; want only small", reader.resume.Load(),
			tiny.resume.Load(), small.resume.Load(), large.resume.Load())
	}
	if !tiny.Paused() {
		t.Fatal("tiny not paused: the test needs it paused")
	}
	b.Tick(t0.Add(150*time.Millisecond), lim.Budget, hs)
	if large.resume.Load() {
		t.Fatal("a second one let go within ForceEvery")
	}
	b.Account(small, 0, 0, 0, NotStalled, lim) // its pass ran what it held: the total falls
	b.Tick(t0.Add(250*time.Millisecond), lim.Budget, hs)
	if large.resume.Load() {
		t.Fatal("let one go while the total falls")
	}
	b.Tick(t0.Add(350*time.Millisecond), lim.Budget, hs)
	if !large.resume.Load() || reader.resume.Load() {
		t.Fatalf("stuck again: resume large %v reader %v; want large only", large.resume.Load(), reader.resume.Load())
	}
}

// TestLastResortFreesRoom: after CloseGrace without room the last resort
// closes the largest holders until the node is under 3/4 of its budget, in
// one round; a node between 3/4 of its budget and all of it is without room
// only while a connection is paused for memory.
func TestLastResortFreesRoom(t *testing.T) {
	lim := Limits{Budget: 1 << 20, ConnOutput: 1 << 30, ConnWaiting: 1 << 30, ConnBuffer: 1 << 30}
	t0 := time.Unix(1000, 0)
	t.Run("many equal holders", func(t *testing.T) {
		b := newTestBudget()
		var hs []*Holder
		var fs []*fakeConn
		for range 20 { // 20 × 64 KiB = 1.25 MiB: paused for memory as the total passes the budget
			h, f := newHolder("c")
			b.Account(h, PauseFloor, 0, 0, NotStalled, lim)
			hs, fs = append(hs, h), append(fs, f)
		}
		b.Tick(t0, lim.Budget, all(hs...))
		b.Tick(t0.Add(CloseGrace), lim.Budget, all(hs...))
		closed := 0
		for _, f := range fs {
			closed += f.closes
		}
		// Under 3/4 of the budget (768 KiB), where paused connections go on:
		// 1.25 MiB - 9 × 64 KiB = 704 KiB.
		if st := b.Stats(); closed != 9 || st.Closed != 9 {
			t.Fatalf("closed %d (Stats %d), want 9", closed, st.Closed)
		}
	})
	t.Run("one round a second", func(t *testing.T) {
		b := newTestBudget()
		a, fa := newHolder("a")
		c, fc := newHolder("c")
		b.Account(a, 0, 700<<10, 0, NotStalled, lim)
		b.Account(c, 0, 500<<10, 0, NotStalled, lim)
		b.Tick(t0, lim.Budget, all(a, c))
		b.Tick(t0.Add(CloseGrace), lim.Budget, all(a, c)) // a closed: 500 KiB left
		b.Account(c, 0, 1100<<10, 0, NotStalled, lim)     // c grows past the budget
		b.Tick(t0.Add(CloseGrace+CloseEvery/2), lim.Budget, all(a, c))
		if fa.closes != 1 || fc.closes != 0 {
			t.Fatalf("within CloseEvery: closes %d/%d, want 1/0", fa.closes, fc.closes)
		}
		b.Tick(t0.Add(CloseGrace+CloseEvery), lim.Budget, all(a, c))
		if fa.closes != 1 || fc.closes != 1 {
			t.Fatalf("after CloseEvery: closes %d/%d, want 1/1", fa.closes, fc.closes)
		}
	})
	for _, tc := range []struct {
		name   string
		paused bool // the large holder was paused for memory
		out    int  // of its 900 KiB, replies its client has not read
		closes int
	}{
		{"between 3/4 and the budget, paused for memory, its client reads nothing: no room", true, 100 << 10, 1},
		{"between 3/4 and the budget, paused for memory holding commands: let go on", true, 0, 0},
		{"between 3/4 and the budget, nobody paused: room enough", false, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newTestBudget()
			h, f := newHolder("large")
			other, _ := newHolder("other")
			if tc.paused {
				b.Account(other, 200<<10, 0, 0, NotStalled, noPause)
			}
			b.Account(h, 900<<10-tc.out, tc.out, 0, NotStalled, lim)
			if h.Paused() != tc.paused {
				t.Fatalf("paused %v, want %v", h.Paused(), tc.paused)
			}
			b.Account(other, 0, 0, 0, NotStalled, noPause) // 900 KiB now: under the budget, over 3/4 of it
			b.Tick(t0, lim.Budget, all(h, other))
			b.Tick(t0.Add(CloseGrace), lim.Budget, all(h, other))
			if f.closes != tc.closes {
				t.Fatalf("closes %d, want %d", f.closes, tc.closes)
			}
			if let := tc.paused && tc.closes == 0; h.resume.Load() != let {
				t.Fatalf("let go on %v, want %v", h.resume.Load(), let)
			}
		})
	}
}

// pausedPair is a budget of 1 MiB with two connections, x and y, paused for
// memory while other put the node over it, holding first and second bytes
// of commands; other holds nothing now (first must be over 224 KiB).
func pausedPair(t *testing.T, first, second int) (b *Budget, lim Limits, other, x, y *Holder, fx, fy *fakeConn) {
	t.Helper()
	lim = Limits{Budget: 1 << 20, ConnOutput: 1 << 30, ConnWaiting: 1 << 30, ConnBuffer: 1 << 30}
	b = newTestBudget()
	other, _ = newHolder("other")
	x, fx = newHolder("x")
	y, fy = newHolder("y")
	b.Account(other, 800<<10, 0, 0, NotStalled, noPause)
	b.Account(x, first, 0, 0, NotStalled, lim)
	b.Account(y, second, 0, 0, NotStalled, lim)
	b.Account(other, 0, 0, 0, NotStalled, noPause)
	if !x.Paused() || !y.Paused() {
		t.Fatal("the test needs x and y paused")
	}
	return b, lim, other, x, y, fx, fy
}

// passAndPause is the pass of h, let go on, that ends holding held, and the
// next, which pauses it again while other puts the node over the budget.
func passAndPause(t *testing.T, b *Budget, h, other *Holder, held int, stall Stall, lim Limits) {
	t.Helper()
	b.Account(h, held, 0, 0, stall, lim)
	b.Account(other, 800<<10, 0, 0, NotStalled, noPause)
	b.Account(h, held, 0, 0, stall, lim)
	b.Account(other, 0, 0, 0, NotStalled, noPause)
	if !h.Paused() {
		t.Fatalf("%s not paused again", h.remote)
	}
}

// TestTickTakesTurns: without room, the paused connections are let go on
// in turn, the one let go on longest ago first: a small one that refills
// as soon as it runs does not keep a large one waiting, and one whose pass
// ran nothing (its command waited for the throttle) gets its turn again,
// for the throttle may let it run then. (Excluding those until what they
// held changed left readers waiting 5 s for the last resort: an audit's
// readers of 1 MiB SETs on a throttled bucket beside non-readers.)
func TestTickTakesTurns(t *testing.T) {
	b, lim, other, large, small, _, _ := pausedPair(t, 900<<10, 100<<10)
	large.remote, small.remote = "large", "small"
	hs := all(small, large, other)
	t0 := time.Unix(100, 0)
	b.Tick(t0, lim.Budget, hs)
	want := []*Holder{small, large, small, large, small, large}
	for i, w := range want {
		b.Tick(t0.Add(time.Duration(i+1)*ForceEvery), lim.Budget, hs)
		if !w.resume.Load() || small.resume.Load() && large.resume.Load() {
			t.Fatalf("turn %d: resume small %v large %v, want %s", i, small.resume.Load(), large.resume.Load(), w.remote)
		}
		if i < 2 {
			passAndPause(t, b, w, other, int(w.pub.Load())+50<<10, NotStalled, lim) // it ran and read more
		} else {
			passAndPause(t, b, w, other, int(w.pub.Load()), Waiting, lim) // it ran nothing
		}
	}
}
