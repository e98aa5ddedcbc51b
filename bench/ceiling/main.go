// Command ceiling is the bare gnet server kvd is measured against: the
// memcached binary GET/SET family answered from a Go map on the event loop,
// with kvd's gnet options (server.Start), and nothing else: no throttle, no
// admission, no engine, no workers. Its throughput is the framework's
// ceiling on this machine; bench/compare.sh runs it beside kvd and memcached.
//
// It answers GET, GETQ, GETK, GETKQ, SET, SETQ, NOOP (what memcaslap -B
// sends: GET and SET) and 0x81 "unknown command" to anything else. Items
// keep flags and a CAS; expiry is ignored.
package main

import (
	"encoding/binary"
	"flag"
	"log"
	"sync"

	"github.com/panjf2000/gnet/v2"
)

type item struct {
	flags uint32
	cas   uint64
	value []byte
}

// server holds one map for all loops (memcaslap's connections land on
// every loop), behind one mutex held for a pass over a connection's input:
// no I/O under it, like kvd's item cache shard lock.
type server struct {
	gnet.BuiltinEventEngine
	items map[string]*item
	cas   uint64
	mu    sync.Mutex
}

func (s *server) OnTraffic(c gnet.Conn) gnet.Action {
	in, _ := c.Peek(-1)
	out := c.Context().(*[]byte)
	o, used := (*out)[:0], 0
	s.mu.Lock()
	for len(in)-used >= 24 {
		h := in[used : used+24]
		body := int(binary.BigEndian.Uint32(h[8:12]))
		if len(in)-used < 24+body {
			break
		}
		o = s.serve(o, h, in[used+24:used+24+body])
		used += 24 + body
	}
	s.mu.Unlock()
	*out = o
	if len(o) > 0 {
		_, _ = c.Write(o)
	}
	_, _ = c.Discard(used)
	return gnet.None
}

// serve answers one frame with header h and body b, appending to o.
func (s *server) serve(o, h, b []byte) []byte {
	op, el, kl := h[1], int(h[4]), int(binary.BigEndian.Uint16(h[2:4]))
	key := b[el : el+kl]
	switch op {
	case 0x00, 0x09, 0x0c, 0x0d: // GET, GETQ, GETK, GETKQ
		it := s.items[string(key)]
		if it == nil {
			if op == 0x09 || op == 0x0d {
				return o
			}
			return reply(o, h, 0x01, 0, nil, nil, nil)
		}
		var ex [4]byte
		binary.BigEndian.PutUint32(ex[:], it.flags)
		if op == 0x0c || op == 0x0d {
			return reply(o, h, 0, it.cas, ex[:], key, it.value)
		}
		return reply(o, h, 0, it.cas, ex[:], nil, it.value)
	case 0x01, 0x11: // SET, SETQ
		s.cas++
		it := s.items[string(key)]
		if it == nil {
			it = &item{}
			s.items[string(key)] = it
		}
		it.flags, it.cas = binary.BigEndian.Uint32(b[0:4]), s.cas
		it.value = append(it.value[:0], b[el+kl:]...)
		if op == 0x11 {
			return o
		}
		return reply(o, h, 0, it.cas, nil, nil, nil)
	case 0x0a: // NOOP
		return reply(o, h, 0, 0, nil, nil, nil)
	}
	return reply(o, h, 0x81, 0, nil, nil, nil)
}

func reply(o, h []byte, status uint16, cas uint64, ex, key, val []byte) []byte {
	var r [24]byte
	r[0], r[1], r[4] = 0x81, h[1], byte(len(ex))
	binary.BigEndian.PutUint16(r[2:4], uint16(len(key)))
	binary.BigEndian.PutUint16(r[6:8], status)
	binary.BigEndian.PutUint32(r[8:12], uint32(len(ex)+len(key)+len(val)))
	copy(r[12:16], h[12:16])
	binary.BigEndian.PutUint64(r[16:24], cas)
	o = append(append(append(o, r[:]...), ex...), key...)
	return append(o, val...)
}

func (s *server) OnOpen(c gnet.Conn) ([]byte, gnet.Action) {
	c.SetContext(new([]byte))
	return nil, gnet.None
}

func main() {
	addr := flag.String("listen", "127.0.0.1:11311", "address")
	loops := flag.Int("loops", 0, "event loops (0: GOMAXPROCS, as kvd)")
	lock := flag.Bool("lock-os-thread", false, "gnet LockOSThread")
	et := flag.Bool("edge-triggered", false, "gnet edge-triggered I/O")
	rcap := flag.Int("read-buffer-cap", 0, "gnet read buffer cap (0: gnet default)")
	wcap := flag.Int("write-buffer-cap", 0, "gnet write buffer cap (0: gnet default)")
	flag.Parse()
	s := &server{items: make(map[string]*item)}
	opts := []gnet.Option{gnet.WithMulticore(true), gnet.WithNumEventLoop(*loops),
		gnet.WithTCPNoDelay(gnet.TCPNoDelay), gnet.WithReuseAddr(true),
		gnet.WithLockOSThread(*lock), gnet.WithEdgeTriggeredIO(*et)}
	if *rcap > 0 {
		opts = append(opts, gnet.WithReadBufferCap(*rcap))
	}
	if *wcap > 0 {
		opts = append(opts, gnet.WithWriteBufferCap(*wcap))
	}
	log.Fatal(gnet.Run(s, "tcp://"+*addr, opts...))
}
