package ingress

import (
	"slices"
	"testing"
	"time"
)

// FuzzDeadlineLedger drives two buckets on one gate with a random program of admits,
// completions, expiries and setting changes, and checks after every step that each
// pool's ledger equals the demand of the grants still held (so it is never negative
// and never above the largest capacity admitted under), that it returns to exactly
// zero once every grant is given back, and that every window equals a sorted copy of
// the last 256 successful execution times of its bucket and class.
func FuzzDeadlineLedger(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10})
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2})
	f.Add(slices.Repeat([]byte{16, 33, 50, 67, 84, 101, 118, 135, 152}, 80))
	f.Fuzz(func(t *testing.T, prog []byte) {
		m := newLedgerModel(t)
		for i := 0; i+1 < len(prog); i += 2 {
			m.step(prog[i], prog[i+1])
			m.check()
		}
		m.drain()
	})
}

// ledgerModel is the fuzz test's reference: the grants held and every window's
// inserts.
type ledgerModel struct {
	t        *testing.T
	gate     DeadlineGate
	buckets  [2]*BucketDeadline
	held     []heldGrant
	inserts  [2][numPools][]time.Duration
	maxLimit [numPools]int64
	now      time.Time
}

type heldGrant struct {
	bucket int
	g      Grant
}

func newLedgerModel(t *testing.T) *ledgerModel {
	m := &ledgerModel{t: t, now: dt0}
	for i := range m.buckets {
		b, err := NewBucketDeadline(&m.gate, DeadlineSettings{Deadline: time.Duration(i+1) * time.Millisecond, Percentile: 90, ExpectedExecution: 300 * time.Microsecond})
		if err != nil {
			t.Fatal(err)
		}
		m.buckets[i] = b
	}
	return m
}

// step runs one instruction: op selects the action, arg its parameters.
func (m *ledgerModel) step(op, arg byte) {
	bi := int(op>>7) & 1
	b := m.buckets[bi]
	m.now = m.now.Add(time.Duration(arg) * 10 * time.Microsecond)
	switch op % 5 {
	case 0, 1: // admit
		class, capacity := Pool(arg&1), int(arg>>1)%5
		g, ok, retry := b.Admit(class, capacity, m.now)
		m.maxLimit[class] = max(m.maxLimit[class], int64(capacity)*Micro)
		if ok {
			m.held = append(m.held, heldGrant{bi, g})
		} else if retry <= 0 {
			m.t.Fatalf("refused without a retry estimate")
		}
	case 2, 3: // complete the arg-th held grant, successful unless arg is odd
		if len(m.held) == 0 {
			return
		}
		k := int(arg) % len(m.held)
		h := m.held[k]
		m.held = slices.Delete(m.held, k, k+1)
		exec := time.Duration(int(op)*37+int(arg)*101) * time.Microsecond
		m.buckets[h.bucket].Done(h.g, exec, arg%2 == 0, m.now)
		if arg%2 == 0 {
			m.inserts[h.bucket][h.g.Pool()] = append(m.inserts[h.bucket][h.g.Pool()], exec)
		}
	case 4: // expire or release the oldest held grant, or change a setting
		if arg%3 != 2 && len(m.held) > 0 {
			h := m.held[0]
			m.held = m.held[1:]
			if arg%3 == 0 {
				m.buckets[h.bucket].Expire(h.g)
			} else {
				m.buckets[h.bucket].Release(h.g)
			}
			return
		}
		s := DeadlineSettings{Deadline: time.Duration(arg%4) * time.Millisecond, Percentile: 50 + int(arg)%50, ExpectedExecution: time.Duration(arg) * time.Microsecond}
		if err := b.SetSettings(s); err != nil {
			m.t.Fatal(err)
		}
	}
}

// check compares the ledgers and windows with the model.
func (m *ledgerModel) check() {
	var want [numPools]int64
	for _, h := range m.held {
		want[h.g.Pool()] += h.g.Demand()
	}
	for p := range numPools {
		got := m.gate.Accepted(p)
		if got != want[p] || got < 0 || got > m.maxLimit[p] {
			m.t.Fatalf("%s ledger %d, held grants %d, largest limit %d", p, got, want[p], m.maxLimit[p])
		}
		for bi, b := range m.buckets {
			ref := slices.Clone(lastSamples(m.inserts[bi][p], WindowSize))
			slices.Sort(ref)
			if got := b.AppendSorted(nil, p); !slices.Equal(got, ref) {
				m.t.Fatalf("bucket %d %s window %v, want %v", bi, p, got, ref)
			}
		}
	}
	if s := m.gate.StaleReleases(); s != 0 {
		m.t.Fatalf("%d stale releases", s)
	}
}

// drain completes every held grant; the ledgers must then be exactly zero.
func (m *ledgerModel) drain() {
	for _, h := range m.held {
		m.buckets[h.bucket].Done(h.g, time.Millisecond, false, m.now)
	}
	m.held = nil
	for p := range numPools {
		if a := m.gate.Accepted(p); a != 0 {
			m.t.Fatalf("%s ledger %d after every grant was given back", p, a)
		}
	}
}
