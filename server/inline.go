package server

import (
	"time"

	"kvd/ingress"
	mc "kvd/protocol/binary"
)

// serveResident answers a GET/GETK (or quiet variant) on the loop when the
// item is resident in the engine's cache: no worker hop, no disk. The
// engine's Peek reads memory under a short shard lock that is never held
// across I/O, so the loop stays non-blocking. It returns false, having done
// nothing, when the item is not resident; the command then goes to a worker.
//
// The command is admitted and metered exactly as on a worker: it holds its
// ticket t for its (short) execution, is charged its read units, and counts
// in the bucket's figures. It must be first in line (nothing collected
// before it), so replies stay in request order.
func (c *conn) serveResident(req *mc.Request, t ingress.Ticket, now time.Time) bool {
	s, b := c.srv, c.bucket
	it, ok := b.store.Peek(req.Key, uint32(now.Unix()), c.peek[:0])
	if !ok {
		return false
	}
	c.peek = it.Value
	r := request{hdr: headerOf(req), throttled: c.throttledFor}
	c.throttledFor = 0
	r.ru = unitsOf(len(req.Key)+len(it.Value), s.limits().ReadUnitSize)
	b.thr.CountCommand()
	b.cmdGet.Add(1)
	b.getHits.Add(1)
	s.throttle.Charge(b.thr, r.ru, 0)
	var key []byte
	if req.Opcode.NonQuiet() == mc.OpGetK {
		key = req.Key
	}
	var ex [4]byte
	c.out = c.appendMetered(c.out, &r, it.CAS, mc.AppendUint32(ex[:0], it.Flags), key, it.Value)
	s.ingress.Release(t, now)
	return true
}
