package work

import (
	"testing"

	"kvd/protocol/binary"
)

// TestMailbox: a finished batch waits for its owner, who is woken unless it is
// yielding for it; after Close a batch is released, never kept.
func TestMailbox(t *testing.T) {
	p := &Pool{}
	var m Mailbox
	if m.Take() != nil {
		t.Fatal("an empty mailbox gave a batch")
	}
	b := p.NewBatch(nil, nil, nil)
	if !m.Put(b) {
		t.Fatal("Put did not ask for a wake")
	}
	if m.Take() != b || m.Take() != nil {
		t.Fatal("Take did not give the batch exactly once")
	}

	m.inline = true // what Yield sets while the worker runs
	b = p.NewBatch(nil, nil, nil)
	if m.Put(b) {
		t.Fatal("Put asked for a wake while the owner yields for the batch")
	}
	m.inline = false
	if m.Take() != b {
		t.Fatal("the batch put during the yield is not there")
	}

	// A worker finishing around a yield: whether it ran during the yield is
	// the scheduler's business, but the batch comes back exactly once: from
	// Yield (without a wake when it was put during the yield; a wake from a
	// Put just before it finds nothing to take), or later with a wake.
	b = p.NewBatch(nil, nil, nil)
	wake := make(chan bool, 1)
	go func() { wake <- m.Put(b) }()
	got := m.Yield()
	woken := <-wake
	switch {
	case got == b && m.Take() == nil:
	case got == nil && woken && m.Take() == b:
	default:
		t.Fatalf("Yield gave %p (batch %p), wake %v", got, b, woken)
	}

	m.Close()
	if m.Take() != nil || !m.Gone() {
		t.Fatal("Close kept a batch or the owner is not gone")
	}
	b = p.NewBatch(&countOwner{}, nil, nil)
	if m.Put(b) || b.Owner != nil {
		t.Fatal("a batch put after Close was kept or asked for a wake")
	}
}

type countOwner struct{ n int }

func (o *countOwner) Finish(*Batch) { o.n++ }

// TestYieldable: only a batch that can be done before the loop resumes is
// worth a yield: a few small data commands, no read, no job, and no WAL sync
// to wait for.
func TestYieldable(t *testing.T) {
	set := &binary.Request{Opcode: binary.OpSet, Key: []byte("k"), Value: []byte("v"), Extras: make([]byte, 8)}
	get := &binary.Request{Opcode: binary.OpGet, Key: []byte("k")}
	batch := func(p *Pool, reqs ...*binary.Request) *Batch {
		b := p.NewBatch(nil, nil, nil)
		for _, r := range reqs {
			b.Add(r)
		}
		return b
	}
	off, on := &Pool{}, &Pool{opts: Options{WALSync: true}}
	nine := []*binary.Request{set, set, set, set, set, set, set, set, set}
	large := &binary.Request{Opcode: binary.OpSet, Key: []byte("k"), Value: make([]byte, maxShortBytes+1), Extras: make([]byte, 8)}
	job := off.NewBatch(nil, nil, nil)
	job.Job = func(*Batch) {}
	for _, c := range []struct {
		name string
		p    *Pool
		b    *Batch
		want bool
	}{
		{"one SET", off, batch(off, set), true},
		{"eight SETs", off, batch(off, nine[:8]...), true},
		{"nine SETs", off, batch(off, nine...), false},
		{"a SET and a GET", off, batch(off, set, get), false},
		{"a large SET", off, batch(off, large), false},
		{"a job", off, job, false},
		{"one SET with WALSync", on, batch(on, set), false},
	} {
		if got := c.p.Yieldable(c.b); got != c.want {
			t.Errorf("%s: Yieldable = %v, want %v", c.name, got, c.want)
		}
	}
}
