package work

import "testing"

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
