package tests

import (
	"bytes"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	mc "kvd/protocol/binary"
)

// TestFramesPastTheBudgetRefusedAtHeader: a frame is held whole against
// max_buffer_bytes from its header on, so that once the unfinished frames
// fill the budget the next large one is refused at its header (binary 0x82
// with the reason, text "SERVER_ERROR out of memory storing object") and
// its body discarded as it arrives (text answers once it is, as memcached
// does), however many connections start one:
// buffer_bytes never passes the budget. A small frame is still read, the
// refused connections stay usable, the old item stays, the admitted frames
// complete, and once they have there is room again. A long multi-get line
// that has no room is answered as memcached answers a buffer it cannot grow
// ("SERVER_ERROR out of memory reading request") and closed.
func TestFramesPastTheBudgetRefusedAtHeader(t *testing.T) {
	t.Parallel()
	const budget, conns = 16 << 20, 24
	metrics := freeAddr(t)
	k := startKVD(t, configWith(t, `{"anonymous_bucket": "default", "buckets": [{"name": "default"}]}`,
		map[string]any{"max_buffer_bytes": budget}), "--metrics-listen", metrics)
	value := bytes.Repeat([]byte{'v'}, 1<<20-64)
	frame := mc.AppendRequest(nil, reqWith(mc.OpSet, 1, mc.AppendSetExtras(nil, 0, 0), "big", string(value)))
	half := len(frame) / 2

	text := dialText(t, k.Addr)
	text.call("set old", "set tk 0 0 3\r\nold\r\n", "STORED")

	// Every connection sends the first half of a 1 MiB SET at once.
	cs := make([]*rawConn, conns)
	for i := range cs {
		cs[i] = dialRaw(t, k.Addr)
	}
	var wg sync.WaitGroup
	refused := make([]bool, conns)
	for i, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f := append([]byte{}, frame[:half]...)
			f[15] = byte(i) // opaque
			c.write(f)
			res, err := c.tryRecv(3 * time.Second)
			if err != nil {
				return // admitted: it waits for the rest
			}
			if res.Status != mc.StatusOutOfMemory || res.Opaque != uint32(i) ||
				!strings.Contains(string(res.Value), "max_buffer_bytes="+strconv.Itoa(budget)) {
				t.Errorf("connection %d: %v %q, want 0x82 naming max_buffer_bytes", i, res.Status, res.Value)
			}
			refused[i] = true
		}()
	}
	wg.Wait()
	nRefused := 0
	for _, r := range refused {
		if r {
			nRefused++
		}
	}
	if admitted := conns - nRefused; admitted == 0 || admitted > budget/len(frame) {
		t.Fatalf("%d of %d 1 MiB frames admitted with a %d MiB budget, want 1..%d", admitted, conns, budget>>20,
			budget/len(frame))
	}
	if held := generalStat(t, k.Addr, "buffer_bytes"); held > budget {
		t.Errorf("buffer_bytes %d over max_buffer_bytes %d", held, budget)
	}
	if n := generalStat(t, k.Addr, "frames_refused_memory"); n != int64(nRefused) {
		t.Errorf("frames_refused_memory %d, want %d", n, nRefused)
	}
	if got, ok := sample(scrapeAll(t, metrics), "kvd_frames_refused_memory_total"); !ok || got != float64(nRefused) {
		t.Errorf("kvd_frames_refused_memory_total = %v (found %v), want %d", got, ok, nRefused)
	}

	// Text, while the budget is full: a storage command is refused at its
	// line and its block swallowed, the old item kept; a small one goes on.
	text.send("set tk 0 0 " + strconv.Itoa(len(value)) + "\r\n" + string(value[:1000]))
	waitFor(t, 5*time.Second, "the text set refused", func() bool {
		return generalStat(t, k.Addr, "frames_refused_memory") == int64(nRefused)+1
	})
	text.send(string(value[1000:]) + "\r\n") // answered once it is swallowed, as memcached does
	text.expect("set with no room", "SERVER_ERROR out of memory storing object")
	text.call("get after the refusal", "get tk\r\n", "VALUE tk 0 3", "old", "END")
	text.call("small set", "set small 0 0 2\r\nok\r\n", "STORED")
	text.call("small noreply set", "set tk 0 0 3 noreply\r\nnew\r\nget tk\r\n", "VALUE tk 0 3", "new", "END")
	long := dialText(t, k.Addr)
	long.send("get " + strings.Repeat("k ", 6000)) // past netmem.SmallFrame
	long.expect("long get line with no room", "SERVER_ERROR out of memory reading request")
	if !long.closedByPeer(5 * time.Second) {
		t.Error("the multi-get line with no room left its connection open")
	}

	// The refused connections' bodies are discarded and they go on; the
	// admitted frames complete.
	for i, c := range cs {
		c.write(frame[half:])
		if refused[i] {
			wantUsable(t, c)
		} else if res, err := c.tryRecv(10 * time.Second); err != nil || res.Status != mc.StatusOK || res.Opaque != uint32(i) {
			t.Fatalf("admitted connection %d after the rest of its frame: %v %v", i, res, err)
		}
	}
	again := dialRaw(t, k.Addr)
	again.expectStatus("a 1 MiB SET once there is room", reqWith(mc.OpSet, 9, mc.AppendSetExtras(nil, 0, 0), "big", string(value)), mc.StatusOK)
}
