package netmem

import (
	"sync"

	"github.com/panjf2000/gnet/v2"
)

// Scratch is the buffers a pass of an event loop works in: the replies it
// collects (Out) and the values of the GETs it answers from the item cache
// (Peek). They are the loop's, lent to a connection for one pass, so that
// between passes a connection holds only what gnet holds for it, which the
// budget counts (2,000 idle connections that had each read a 1 MiB value
// held 2.6 GB when each kept its own).
type Scratch struct{ Out, Peek []byte }

// keepScratch is the largest buffer a loop keeps from one pass to the next:
// a pass's replies reach the server's flush size plus one reply, up to a
// 1 MiB value.
const keepScratch = 2 << 20

// Keep takes the buffers back after a pass, emptied, dropping one grown
// past keepScratch.
func (s *Scratch) Keep(out, peek []byte) {
	keep := func(b []byte) []byte {
		if cap(b) > keepScratch {
			return nil
		}
		return b[:0]
	}
	s.Out, s.Peek = keep(out), keep(peek)
}

// Scratches hands out each event loop's Scratch. The zero value is ready;
// it is safe for concurrent use.
type Scratches struct {
	mu    sync.Mutex
	loops map[gnet.EventLoop]*Scratch
}

// Of returns the Scratch of conn's event loop; a connection that is not
// gnet's (tests) gets its own.
func (s *Scratches) Of(conn any) *Scratch {
	lc, ok := conn.(interface{ EventLoop() gnet.EventLoop })
	if !ok {
		return new(Scratch)
	}
	loop := lc.EventLoop()
	s.mu.Lock()
	defer s.mu.Unlock()
	sc := s.loops[loop]
	if sc == nil {
		if s.loops == nil {
			s.loops = map[gnet.EventLoop]*Scratch{}
		}
		sc = new(Scratch)
		s.loops[loop] = sc
	}
	return sc
}
