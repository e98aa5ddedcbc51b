package tests

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	mc "kvd/protocol/binary"
)

// storedItem is a value with its flags, as GET returns it.
type storedItem struct {
	value string
	flags uint32
}

// pipelineChunk is how many commands the bulk helpers write at once.
const pipelineChunk = 500

// storeQuiet stores items with pipelined SETQ (a NOOP after each chunk) and
// fails on any error reply.
func storeQuiet(t testing.TB, c *rawConn, items map[string]storedItem) {
	t.Helper()
	var reqs []*mc.Request
	flush := func() {
		reqs = append(reqs, &mc.Request{Magic: mc.MagicRequest, Opcode: mc.OpNoop, Opaque: 0xffffffff})
		c.send(reqs...)
		for res := c.recv(); res.Opcode != mc.OpNoop; res = c.recv() {
			t.Fatalf("SETQ opaque %d: status %v %q", res.Opaque, res.Status, res.Value)
		}
		reqs = reqs[:0]
	}
	for key, it := range items {
		reqs = append(reqs, &mc.Request{Magic: mc.MagicRequest, Opcode: mc.OpSetQ, Key: []byte(key),
			Extras: mc.AppendSetExtras(nil, it.flags, 0), Value: []byte(it.value)})
		if len(reqs) == pipelineChunk {
			flush()
		}
	}
	flush()
}

// fetchAll GETs keys with pipelined GETK and returns the hits.
func fetchAll(t testing.TB, c *rawConn, keys []string) map[string]storedItem {
	t.Helper()
	out := make(map[string]storedItem, len(keys))
	for start := 0; start < len(keys); start += pipelineChunk {
		chunk := keys[start:min(start+pipelineChunk, len(keys))]
		reqs := make([]*mc.Request, 0, len(chunk)+1)
		for i, key := range chunk {
			reqs = append(reqs, &mc.Request{Magic: mc.MagicRequest, Opcode: mc.OpGetK, Key: []byte(key), Opaque: uint32(i)})
		}
		reqs = append(reqs, &mc.Request{Magic: mc.MagicRequest, Opcode: mc.OpNoop, Opaque: 0xffffffff})
		c.send(reqs...)
		for i := range chunk {
			res := c.recv()
			if res.Opcode != mc.OpGetK || res.Opaque != uint32(i) {
				t.Fatalf("GETK %d of the chunk: reply %v opaque %d", i, res.Opcode, res.Opaque)
			}
			switch res.Status {
			case mc.StatusOK:
				if string(res.Key) != chunk[i] || len(res.Extras) != 4 {
					t.Fatalf("GETK %q: reply key %q, %d bytes of extras", chunk[i], res.Key, len(res.Extras))
				}
				out[chunk[i]] = storedItem{value: string(res.Value), flags: binary.BigEndian.Uint32(res.Extras)}
			case mc.StatusKeyNotFound:
			default:
				t.Fatalf("GETK %q: status %v %q", chunk[i], res.Status, res.Value)
			}
		}
		if res := c.recv(); res.Opcode != mc.OpNoop {
			t.Fatalf("expected the NOOP reply, got %v opaque %d", res.Opcode, res.Opaque)
		}
	}
	return out
}

// randomValue returns n bytes of printable, key-specific data.
func randomValue(rng *rand.Rand, prefix string, n int) string {
	var b strings.Builder
	b.WriteString(prefix)
	for b.Len() < n {
		b.WriteByte(byte('!' + rng.IntN(94)))
	}
	return b.String()[:max(n, len(prefix))]
}

// TestDurabilitySIGTERMRestart writes keys to two buckets (SETQ, DELETEQ,
// APPEND, INCR), restarts kvd with SIGTERM and checks every key, value,
// flag and deletion.
func TestDurabilitySIGTERMRestart(t *testing.T) {
	t.Parallel()
	k := startKVD(t, testConfig)
	rng := rand.New(rand.NewPCG(3, 3))
	anon := dialRaw(t, k.Addr)
	alice := dialRaw(t, k.Addr)
	alice.auth("alice", "alice-pw")
	if st := alice.selectBucket("app"); st != mc.StatusOK {
		t.Fatalf("alice selects app: %v", st)
	}

	def, app := map[string]storedItem{}, map[string]storedItem{}
	for i := range 3000 {
		n := 10 + rng.IntN(2000)
		if i%500 == 0 {
			n = 300 << 10
		}
		key := fmt.Sprintf("term-%05d", i)
		def[key] = storedItem{value: randomValue(rng, key, n), flags: uint32(i) * 2654435761}
	}
	for i := range 500 {
		key := fmt.Sprintf("term-%05d", i) // same names as in default, other values
		app[key] = storedItem{value: randomValue(rng, "app:"+key, 10+rng.IntN(500)), flags: uint32(i)}
	}
	storeQuiet(t, anon, def)
	storeQuiet(t, alice, app)

	deleted := mutate(t, anon, def)

	k.Restart(false)

	anon = dialRaw(t, k.Addr)
	alice = dialRaw(t, k.Addr)
	alice.auth("alice", "alice-pw")
	if st := alice.selectBucket("app"); st != mc.StatusOK {
		t.Fatalf("alice selects app after restart: %v", st)
	}
	compareItems(t, "default", def, fetchAll(t, anon, append(storedKeys(def), deleted...)))
	compareItems(t, "app", app, fetchAll(t, alice, storedKeys(app)))
}

// mutate deletes every tenth of the term-NNNNN keys, APPENDs to every 97th
// and INCRs ten counters, updating def; it returns the deleted keys.
func mutate(t *testing.T, c *rawConn, def map[string]storedItem) (deleted []string) {
	t.Helper()
	for i := 0; i < 3000; i += 10 {
		key := fmt.Sprintf("term-%05d", i)
		c.expectStatus("DELETE "+key, reqWith(mc.OpDelete, uint32(i), nil, key, ""), mc.StatusOK)
		delete(def, key)
		deleted = append(deleted, key)
	}
	for i := 1; i < 3000; i += 97 {
		key := fmt.Sprintf("term-%05d", i)
		if _, ok := def[key]; !ok {
			c.expectStatus("APPEND to deleted "+key, reqWith(mc.OpAppend, uint32(i), nil, key, "+tail"), mc.StatusNotStored)
			continue
		}
		c.expectStatus("APPEND "+key, reqWith(mc.OpAppend, uint32(i), nil, key, "+tail"), mc.StatusOK)
		def[key] = storedItem{value: def[key].value + "+tail", flags: def[key].flags}
	}
	for i := range 10 {
		key := fmt.Sprintf("term-ctr-%d", i)
		for range i + 1 {
			c.expectStatus("INCR "+key, reqWith(mc.OpIncrement, 1, mc.AppendArithExtras(nil, 5, 0, 0), key, ""), mc.StatusOK)
		}
		def[key] = storedItem{value: strconv.Itoa(5 * i)} // created at 0, then +5 per further INCR
	}
	return deleted
}

func storedKeys(m map[string]storedItem) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	return keys
}

// compareItems fails unless got holds exactly want (reporting at most ten
// differences).
func compareItems(t *testing.T, bucket string, want, got map[string]storedItem) {
	t.Helper()
	bad := 0
	report := func(f string, a ...any) {
		if bad++; bad <= 10 {
			t.Errorf("bucket %s: "+f, append([]any{bucket}, a...)...)
		}
	}
	for key, w := range want {
		switch g, ok := got[key]; {
		case !ok:
			report("%s is missing after restart", key)
		case g.value != w.value:
			report("%s = %.40q… (%d bytes), want %.40q… (%d bytes)", key, g.value, len(g.value), w.value, len(w.value))
		case g.flags != w.flags:
			report("%s flags %#x, want %#x", key, g.flags, w.flags)
		}
	}
	for key := range got {
		if _, ok := want[key]; !ok {
			report("%s is present after restart but was deleted", key)
		}
	}
	if bad > 10 {
		t.Errorf("bucket %s: %d differences in all", bucket, bad)
	}
}

// writerLog is what one load goroutine saw acknowledged.
type writerLog struct {
	acked    map[string]string // SET acknowledged with OK: key → value
	counter  string            // INCR writers: the counter key
	lastAck  uint64            // INCR writers: the last value acknowledged
	incrAcks int
	err      error  // how the goroutine ended
	problem  string // a wrong reply, which fails the test
}

// TestDurabilityKill9DuringWrites kills kvd with SIGKILL while 16
// connections write distinct keys and 4 increment counters, with wal_sync
// on (the default): after a restart every acknowledged SET must be there
// with its exact value, and every counter must be at least its last
// acknowledged value (and at most one more: one INCR can be in flight).
func TestDurabilityKill9DuringWrites(t *testing.T) {
	t.Parallel()
	restartDuringWrites(t, true)
}

// TestDurabilitySIGTERMDuringWrites is the same load stopped with SIGTERM:
// kvd must exit 0 (the harness checks) and keep every acknowledged write.
func TestDurabilitySIGTERMDuringWrites(t *testing.T) {
	t.Parallel()
	restartDuringWrites(t, false)
}

// restartDuringWrites runs the write load, restarts kvd after 1.5 s (with
// SIGKILL when kill, else SIGTERM) and checks what was acknowledged.
func restartDuringWrites(t *testing.T, kill bool) {
	k := startKVD(t, testConfig)
	const setters, counters = 16, 4
	logs := make([]*writerLog, setters+counters)
	var wg sync.WaitGroup
	for g := range logs {
		logs[g] = &writerLog{acked: map[string]string{}}
		c := dialRaw(t, k.Addr)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if g < setters {
				runSetter(c, g, logs[g])
			} else {
				runIncrementer(c, g, logs[g])
			}
		}()
	}
	time.Sleep(1500 * time.Millisecond)
	k.Restart(kill) // with writes in flight, then start again
	wg.Wait()

	c := dialRaw(t, k.Addr)
	total := 0
	for g, l := range logs {
		if l.problem != "" {
			t.Errorf("writer %d: %s", g, l.problem)
		}
		if !isConnGone(l.err) {
			t.Errorf("writer %d ended with %v, want the connection cut by the stop", g, l.err)
		}
		if g < setters {
			total += len(l.acked)
			checkSetter(t, c, g, l)
		} else {
			checkCounter(t, c, g, l)
		}
	}
	t.Logf("%d SETs acknowledged before the stop", total)
}

// checkSetter requires every SET writer g saw acknowledged.
func checkSetter(t *testing.T, c *rawConn, g int, l *writerLog) {
	t.Helper()
	if len(l.acked) == 0 {
		t.Errorf("writer %d got no SET acknowledged in 1.5 s", g)
	}
	keys := make([]string, 0, len(l.acked))
	want := make(map[string]storedItem, len(l.acked))
	for key, v := range l.acked {
		keys = append(keys, key)
		want[key] = storedItem{value: v}
	}
	compareItems(t, fmt.Sprintf("default (writer %d)", g), want, fetchAll(t, c, keys))
}

// checkCounter requires the counter of writer g to be at its last
// acknowledged value, or one more (one INCR may have been in flight).
func checkCounter(t *testing.T, c *rawConn, g int, l *writerLog) {
	t.Helper()
	if l.incrAcks == 0 {
		t.Errorf("counter writer %d got no INCR acknowledged", g)
		return
	}
	res := c.call(get(l.counter))
	v, err := strconv.ParseUint(string(res.Value), 10, 64)
	if res.Status != mc.StatusOK || err != nil {
		t.Errorf("counter %s after restart: status %v value %q", l.counter, res.Status, res.Value)
		return
	}
	if v < l.lastAck || v > l.lastAck+1 {
		t.Errorf("counter %s = %d after restart; last acknowledged %d (at most one more may have been in flight)",
			l.counter, v, l.lastAck)
	}
}

// runSetter SETs distinct keys one at a time until the connection breaks
// (or 20 s pass), recording each acknowledged one.
func runSetter(c *rawConn, g int, l *writerLog) {
	rng := rand.New(rand.NewPCG(uint64(g), 11))
	deadline := time.Now().Add(20 * time.Second)
	for i := uint32(0); time.Now().Before(deadline); i++ {
		key := fmt.Sprintf("kill-w%02d-%07d", g, i)
		val := randomValue(rng, key+"=", 16+rng.IntN(4000))
		res, err := rawRoundTrip(c, &mc.Request{Magic: mc.MagicRequest, Opcode: mc.OpSet, Key: []byte(key),
			Extras: mc.AppendSetExtras(nil, 0, 0), Value: []byte(val), Opaque: i})
		if err != nil {
			l.err = err
			return
		}
		if shuttingDown(res) {
			continue // not acknowledged; the next read finds the connection closed
		}
		if res.Opcode != mc.OpSet || res.Opaque != i || res.Status != mc.StatusOK {
			l.problem = fmt.Sprintf("SET %s: reply %v opaque %d status %v %q", key, res.Opcode, res.Opaque, res.Status, res.Value)
			return
		}
		l.acked[key] = val
	}
	l.problem = "the stop did not cut the connection within 20 s"
}

// shuttingDown reports whether res is the 0x86 "shutting down" a command
// gets, without running, when it arrives during a SIGTERM drain.
func shuttingDown(res *mc.Response) bool {
	return res.Status == mc.StatusTemporaryFailure && strings.Contains(string(res.Value), "shutting down")
}

// runIncrementer INCRs one counter (created at 1) until the connection
// breaks, checking that each acknowledged value is the previous plus one.
func runIncrementer(c *rawConn, g int, l *writerLog) {
	l.counter = fmt.Sprintf("kill-ctr-%02d", g)
	deadline := time.Now().Add(20 * time.Second)
	for i := uint32(0); time.Now().Before(deadline); i++ {
		res, err := rawRoundTrip(c, &mc.Request{Magic: mc.MagicRequest, Opcode: mc.OpIncrement, Key: []byte(l.counter),
			Extras: mc.AppendArithExtras(nil, 1, 1, 0), Opaque: i})
		if err != nil {
			l.err = err
			return
		}
		if shuttingDown(res) {
			continue // not applied; the next read finds the connection closed
		}
		if res.Opcode != mc.OpIncrement || res.Opaque != i || res.Status != mc.StatusOK || len(res.Value) != 8 {
			l.problem = fmt.Sprintf("INCR %s: reply %v opaque %d status %v %q", l.counter, res.Opcode, res.Opaque, res.Status, res.Value)
			return
		}
		v := binary.BigEndian.Uint64(res.Value)
		if l.incrAcks > 0 && v != l.lastAck+1 {
			l.problem = fmt.Sprintf("INCR %s answered %d after %d", l.counter, v, l.lastAck)
			return
		}
		l.lastAck, l.incrAcks = v, l.incrAcks+1
	}
	l.problem = "the stop did not cut the connection within 20 s"
}

// rawRoundTrip sends one request and reads its reply without touching the
// test (safe in goroutines).
func rawRoundTrip(c *rawConn, r *mc.Request) (*mc.Response, error) {
	return c.tryRecvAfter(r, 10*time.Second)
}
