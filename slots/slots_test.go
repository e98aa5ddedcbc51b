package slots

import (
	"log/slog"
	"testing"
	"time"
)

func newSlots() *Slots { return &Slots{Log: slog.New(slog.DiscardHandler)} }

type fakeConn struct{ closed int }

func (f *fakeConn) Close() error { f.closed++; return nil }

func open(t *testing.T, s *Slots, now time.Time, max, sys int) (Slot, *fakeConn) {
	t.Helper()
	c := new(fakeConn)
	slot := s.Open(now, max, sys, c, "127.0.0.1:1")
	return slot, c
}

func counts(t *testing.T, s *Slots, wantOrdinary, wantBand int) {
	t.Helper()
	if st := s.Stats(); st.Ordinary != wantOrdinary || st.Band != wantBand {
		t.Fatalf("counts = %d ordinary, %d band; want %d, %d", st.Ordinary, st.Band, wantOrdinary, wantBand)
	}
}

func TestOrdinaryThenBandThenRefused(t *testing.T) {
	s := newSlots()
	now := time.Unix(1000, 0)
	var held []Slot
	for i := range 3 {
		slot, _ := open(t, s, now, 3, 2)
		if !slot.Held() || slot.Band() {
			t.Fatalf("connection %d: held=%v band=%v, want an ordinary slot", i, slot.Held(), slot.Band())
		}
		held = append(held, slot)
	}
	for i := range 2 {
		slot, _ := open(t, s, now, 3, 2)
		if !slot.Band() {
			t.Fatalf("band connection %d: not in the band", i)
		}
		s.Settle(slot) // logged in: never recycled
		held = append(held, slot)
	}
	counts(t, s, 3, 2)
	if slot, _ := open(t, s, now, 3, 2); slot.Held() {
		t.Fatal("a connection past both bands was granted a slot")
	}
	s.Close(held[0])
	if slot, _ := open(t, s, now, 3, 2); !slot.Held() || slot.Band() {
		t.Fatal("a freed ordinary slot was not granted again")
	}
	s.Close(held[3])
	counts(t, s, 3, 1)
}

func TestBandOff(t *testing.T) {
	s := newSlots()
	now := time.Unix(1000, 0)
	open(t, s, now, 1, 0)
	if slot, _ := open(t, s, now, 1, 0); slot.Held() {
		t.Fatal("with system_connections 0 a connection past max was granted a slot")
	}
}

// TestRecycle: with the band full, a new connection takes the place of the
// one that has waited longest without starting a login; settled ones stay.
func TestRecycle(t *testing.T) {
	s := newSlots()
	t0 := time.Unix(1000, 0)
	open(t, s, t0, 1, 0) // the ordinary slot
	settled, sc := open(t, s, t0, 1, 3)
	s.Settle(settled)
	oldest, oc := open(t, s, t0.Add(time.Second), 1, 3)
	_, nc := open(t, s, t0.Add(2*time.Second), 1, 3)
	newest, _ := open(t, s, t0.Add(3*time.Second), 1, 3)
	if !newest.Band() {
		t.Fatal("the connection past a full band was refused while one waited in line")
	}
	if oc.closed != 1 || sc.closed != 0 || nc.closed != 0 {
		t.Fatalf("closed: oldest %d, settled %d, next %d; want 1, 0, 0", oc.closed, sc.closed, nc.closed)
	}
	counts(t, s, 1, 3)
	s.Close(oldest) // its OnClose comes later: the slot was freed already
	counts(t, s, 1, 3)
	if st := s.Stats(); st.Recycled != 1 || st.Refused != 0 {
		t.Fatalf("recycled %d, refused %d; want 1, 0", st.Recycled, st.Refused)
	}
}

func TestRecycleNeedsSomeoneWaiting(t *testing.T) {
	s := newSlots()
	now := time.Unix(1000, 0)
	a, _ := open(t, s, now, 0, 2)
	b, _ := open(t, s, now, 0, 2)
	s.Settle(a)
	s.Settle(b)
	if slot, _ := open(t, s, now, 0, 2); slot.Held() {
		t.Fatal("a settled band connection was recycled")
	}
	if st := s.Stats(); st.Refused != 1 {
		t.Fatalf("Stats().Refused = %d, want 1", st.Refused)
	}
}

func TestExpire(t *testing.T) {
	s := newSlots()
	t0 := time.Unix(1000, 0)
	old, oc := open(t, s, t0, 0, 4)
	settled, sc := open(t, s, t0, 0, 4)
	s.Settle(settled)
	_, yc := open(t, s, t0.Add(LoginGrace), 0, 4)
	if n := s.Expire(t0.Add(LoginGrace + LoginGrace/2)); n != 1 {
		t.Fatalf("Expire closed %d, want 1", n)
	}
	if oc.closed != 1 || sc.closed != 0 || yc.closed != 0 {
		t.Fatalf("closed: old %d, settled %d, young %d; want 1, 0, 0", oc.closed, sc.closed, yc.closed)
	}
	counts(t, s, 0, 2)
	s.Close(old)
	s.Close(settled)
	counts(t, s, 0, 1)
	if n := s.Expire(t0.Add(time.Hour)); n != 1 {
		t.Fatalf("second Expire closed %d, want 1", n)
	}
	counts(t, s, 0, 0)
	if st := s.Stats(); st.Expired != 2 {
		t.Fatalf("Stats().Expired = %d, want 2", st.Expired)
	}
}

// TestLine: removing from the middle and the ends keeps the line's order.
func TestLine(t *testing.T) {
	s := newSlots()
	t0 := time.Unix(1000, 0)
	var sl [5]Slot
	var cs [5]*fakeConn
	for i := range sl {
		sl[i], cs[i] = open(t, s, t0.Add(time.Duration(i)*time.Second), 0, 5)
	}
	s.Settle(sl[2])
	s.Settle(sl[0])
	s.Close(sl[4])
	if n := s.Expire(t0.Add(time.Hour)); n != 2 {
		t.Fatalf("Expire closed %d, want 2 (1 and 3)", n)
	}
	for i, want := range []int{0, 1, 0, 1, 0} {
		if cs[i].closed != want {
			t.Fatalf("connection %d closed %d times, want %d", i, cs[i].closed, want)
		}
	}
	counts(t, s, 0, 2)
}

// TestClosingBound: at most sys recycled or expired connections may be
// closing (their descriptors not yet closed) at once; past that a new
// connection is refused, not given a place, until one of them closes.
func TestClosingBound(t *testing.T) {
	s := newSlots()
	now := time.Unix(1000, 0)
	a, _ := open(t, s, now, 0, 2)
	open(t, s, now, 0, 2)
	open(t, s, now, 0, 2) // recycles a
	open(t, s, now, 0, 2) // recycles b
	if st := s.Stats(); st.Band != 2 || st.Closing != 2 || st.Recycled != 2 {
		t.Fatalf("band %d, closing %d, recycled %d; want 2, 2, 2", st.Band, st.Closing, st.Recycled)
	}
	if e, _ := open(t, s, now, 0, 2); e.Held() {
		t.Fatal("a connection was given a place while 2 (sys) recycled ones were still closing")
	}
	s.Close(a) // its event loop closed it: its descriptor is free
	if f, _ := open(t, s, now, 0, 2); !f.Band() {
		t.Fatal("no place once a recycled connection closed")
	}
	if st := s.Stats(); st.Band != 2 || st.Closing != 2 || st.Refused != 1 {
		t.Fatalf("band %d, closing %d, refused %d; want 2, 2, 1", st.Band, st.Closing, st.Refused)
	}
}
