package tests

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	mc "kvd/protocol/binary"
)

// shutdownLoad is one connection of TestShutdownAnswersEverything: the
// pipeline it wrote in full before SIGTERM, and what it read until the
// server closed.
type shutdownLoad struct {
	c      *rawConn
	keys   []string
	values []string
	data   []byte
	closed bool
}

// TestShutdownAnswersEverything sends SIGTERM while connections hold
// throttled (parked) commands and commands queued for an ingress ticket,
// and checks that every command each connection wrote before the signal
// got a reply, in order (a success, or 0x86 "shutting down"), that the
// server then closed the connection, that kvd exited 0 within 5 s, and
// that every acknowledged SET is there after a restart.
func TestShutdownAnswersEverything(t *testing.T) {
	slow := bucketConfig("slow", 5, 5)
	busy := map[string]any{"name": "busy", "max_concurrent": 1, "max_queued": 100000, "queue_timeout_ms": 60000}
	k := startKVD(t, throttleConfig(t, map[string]any{"max_throttle_wait_ms": 60000}, slow, busy))
	var loads []*shutdownLoad
	for i := range 8 {
		loads = append(loads, startShutdownLoad(t, k.Addr, "slow", fmt.Sprintf("s%d", i), 50, 10))
	}
	for i := range 32 {
		loads = append(loads, startShutdownLoad(t, k.Addr, "busy", fmt.Sprintf("b%d", i), 20, 32<<10))
	}
	var wg sync.WaitGroup
	for _, l := range loads {
		wg.Go(func() { l.data, l.closed = l.c.drainUntilClosed(15 * time.Second) })
	}
	time.Sleep(700 * time.Millisecond)
	start := time.Now()
	_ = k.cmd.Process.Signal(syscall.SIGTERM)
	waitExit0(t, k)
	took := time.Since(start)
	wg.Wait()
	acked, refused := checkShutdownReplies(t, loads)
	t.Logf("exit %v after SIGTERM; %d SETs acknowledged, %d answered 0x86 shutting down", took, len(acked), refused)
	if refused == 0 {
		t.Errorf("no command was answered 0x86 shutting down: the load did not hold parked or queued commands")
	}
	k.start()
	checkAcked(t, k.Addr, acked)
}

// TestShutdownAnswersBacklog: connections that wrote megabytes of
// pipelined SETs to a throttled bucket and did not read. At SIGTERM most of
// their commands are not in kvd's input buffers but still in the sockets
// (the server's receive queue, the client's send queue); they were sent
// before the signal too, and each must get a reply before the end of file,
// with no reset.
func TestShutdownAnswersBacklog(t *testing.T) {
	k := startKVD(t, throttleConfig(t, map[string]any{"anonymous_bucket": "slow"}, bucketConfig("slow", 50, 100)))
	var loads []*shutdownLoad
	written := make(chan error, 3)
	for i := range 3 {
		l := &shutdownLoad{c: dialRaw(t, k.Addr)}
		var stream []byte
		for j := range 2000 {
			key := fmt.Sprintf("slow-q%d-%d", i, j)
			val := key + strings.Repeat("v", 1000)
			l.keys, l.values = append(l.keys, key), append(l.values, val)
			stream = mc.AppendRequest(stream, reqWith(mc.OpSet, uint32(j+1), mc.AppendSetExtras(nil, 0, 0), key, val))
		}
		loads = append(loads, l)
		go func() {
			_ = l.c.nc.SetWriteDeadline(time.Now().Add(10 * time.Second))
			_, err := l.c.nc.Write(stream)
			written <- err
		}()
	}
	for range loads {
		if err := <-written; err != nil {
			t.Fatalf("writing the pipeline before SIGTERM: %v", err)
		}
	}
	_ = k.cmd.Process.Signal(syscall.SIGTERM)
	var wg sync.WaitGroup
	for _, l := range loads {
		wg.Go(func() { l.data, l.closed = l.c.drainUntilClosed(15 * time.Second) })
	}
	waitExit0(t, k)
	wg.Wait()
	acked, refused := checkShutdownReplies(t, loads)
	t.Logf("%d SETs acknowledged, %d answered 0x86 shutting down", len(acked), refused)
	k.start()
	checkAcked(t, k.Addr, acked)
}

// TestShutdownAnswersConnectionsAcceptedLate: clients that connect and send
// before SIGTERM may be accepted by kvd only after it (the kernel completes
// the handshake and buffers their bytes). kvd is stopped (SIGSTOP) while
// they connect and write, then gets SIGTERM and SIGCONT: every command gets
// its reply in its protocol, 0x86 or SERVER_ERROR "shutting down" or an
// earlier success, and no connection is refused. (Such a connection used to
// get memcached's text line "ERROR Too many open connections", even a
// binary one: a CI run saw it as a bad magic 0x45.)
func TestShutdownAnswersConnectionsAcceptedLate(t *testing.T) {
	k := startKVD(t, throttleConfig(t, map[string]any{"anonymous_bucket": "late"}, bucketConfig("late", "unlimited", nil)))
	if err := k.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	var loads []*shutdownLoad
	for i := range 8 {
		l := &shutdownLoad{c: dialRaw(t, k.Addr)}
		var stream []byte
		for j := range 20 {
			key := fmt.Sprintf("late-%d-%d", i, j)
			l.keys, l.values = append(l.keys, key), append(l.values, key)
			stream = mc.AppendRequest(stream, reqWith(mc.OpSet, uint32(j+1), mc.AppendSetExtras(nil, 0, 0), key, key))
		}
		l.c.write(stream)
		loads = append(loads, l)
	}
	text := dialRaw(t, k.Addr)
	text.write([]byte("set late-text 0 0 1\r\nx\r\n"))
	_ = k.cmd.Process.Signal(syscall.SIGTERM)
	_ = k.cmd.Process.Signal(syscall.SIGCONT)
	var wg sync.WaitGroup
	for _, l := range loads {
		wg.Go(func() { l.data, l.closed = l.c.drainUntilClosed(15 * time.Second) })
	}
	textReply, _ := text.drainUntilClosed(15 * time.Second)
	waitExit0(t, k)
	wg.Wait()
	acked, refused := checkShutdownReplies(t, loads)
	if r := string(textReply); r != "STORED\r\n" && r != "SERVER_ERROR shutting down\r\n" {
		t.Errorf("text connection: %q, want STORED or SERVER_ERROR shutting down", r)
	}
	t.Logf("%d SETs acknowledged, %d answered 0x86 shutting down; text %q", len(acked), refused, textReply)
	k.start()
	checkAcked(t, k.Addr, acked)
}

// startShutdownLoad logs in as tenant on bucket and writes a pipeline of n
// SETs of size-byte values, opaques 1..n, in full.
func startShutdownLoad(t *testing.T, addr, bucket, prefix string, n, size int) *shutdownLoad {
	l := &shutdownLoad{c: login(t, addr, "tenant", "tenant-pw", bucket)}
	var stream []byte
	for i := range n {
		key := fmt.Sprintf("%s-%s-%d", bucket, prefix, i)
		val := key + strings.Repeat("v", size)
		l.keys, l.values = append(l.keys, key), append(l.values, val)
		stream = mc.AppendRequest(stream, reqWith(mc.OpSet, uint32(i+1), mc.AppendSetExtras(nil, 0, 0), key, val))
	}
	l.c.write(stream)
	return l
}

// checkShutdownReplies checks every connection's replies and returns the
// acknowledged SETs (key → value) and the count of 0x86 "shutting down".
func checkShutdownReplies(t *testing.T, loads []*shutdownLoad) (acked map[string]string, refused int) {
	t.Helper()
	acked = map[string]string{}
	for li, l := range loads {
		got, err := parseResponses(l.data)
		if err != nil {
			t.Errorf("connection %d: %v", li, err)
		}
		if !l.closed {
			t.Errorf("connection %d: not closed by the server", li)
		}
		if len(got) != len(l.keys) {
			t.Errorf("connection %d: %d replies to %d commands written before SIGTERM", li, len(got), len(l.keys))
		}
		for i, res := range got {
			switch {
			case res.Opaque != uint32(i+1):
				t.Fatalf("connection %d: reply %d has opaque %d: out of order", li, i, res.Opaque)
			case res.Status == mc.StatusOK:
				acked[l.keys[i]] = l.values[i]
			case res.Status == mc.StatusTemporaryFailure && strings.Contains(string(res.Value), "shutting down"):
				refused++
			default:
				t.Errorf("connection %d: reply %d: status 0x%02x %q", li, i, uint16(res.Status), res.Value)
			}
		}
	}
	return acked, refused
}

// checkAcked reads every acknowledged key back.
func checkAcked(t *testing.T, addr string, acked map[string]string) {
	t.Helper()
	conns := map[string]*rawConn{}
	for key, want := range acked {
		bucket, _, _ := strings.Cut(key, "-")
		c := conns[bucket]
		if c == nil {
			c = login(t, addr, "tenant", "tenant-pw", bucket)
			conns[bucket] = c
		}
		if res := c.call(get(key)); res.Status != mc.StatusOK || string(res.Value) != want {
			t.Fatalf("acknowledged SET %s lost after shutdown: status 0x%02x, %d bytes", key, uint16(res.Status), len(res.Value))
		}
	}
}

// TestShutdownAnswersWaitingLogins: logins waiting out the delay earlier
// failures from their address earned are answered when kvd shuts down,
// not closed unanswered at the end of the grace period.
func TestShutdownAnswersWaitingLogins(t *testing.T) {
	k := startKVD(t, testConfig)
	sasl := func(user, password string, opaque uint32) *mc.Request {
		return &mc.Request{Magic: mc.MagicRequest, Opcode: mc.OpSASLAuth, Key: []byte("PLAIN"), Opaque: opaque,
			Value: []byte("\x00" + user + "\x00" + password)}
	}
	// Failures from 127.0.0.1 push its next attempts 50 ms, 100 ms, … up to
	// 5 s apart: eight wrong passwords on connections kept open, then two
	// right ones, queued behind them for about 10 s.
	var conns []*rawConn
	for i := range 10 {
		c := dialRaw(t, k.Addr)
		password := "wrong"
		if i >= 8 {
			password = "alice-pw"
		}
		c.write(mc.AppendRequest(nil, sasl("alice", password, uint32(i+1))))
		conns = append(conns, c)
	}
	time.Sleep(500 * time.Millisecond)
	_ = k.cmd.Process.Signal(syscall.SIGTERM)
	for i, c := range conns[8:] {
		res, err := c.tryRecv(2 * time.Second)
		if err != nil {
			t.Fatalf("right login %d: no answer within 2 s of SIGTERM: %v\n%s", i+1, err, k.tail())
		}
		if res.Status != mc.StatusOK {
			t.Errorf("right login %d: %v %q, want it verified", i+1, res.Status, res.Value)
		}
	}
	waitExit0(t, k)
}

// waitExit0 waits for kvd, signalled to stop, to exit 0 within 5 s.
func waitExit0(t *testing.T, k *kvd) {
	t.Helper()
	select {
	case err := <-k.done:
		if err != nil {
			t.Fatalf("kvd exit after SIGTERM: %v\n%s", err, k.tail())
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("kvd did not exit within 5 s of SIGTERM\n%s", k.tail())
	}
	k.cmd = nil
}

// TestShutdownAnswersText: a text connection's commands held by the
// throttle at SIGTERM are answered, one line each ("SERVER_ERROR shutting
// down" for those that did not run), in order, before the close, as a
// binary connection's get 0x86.
func TestShutdownAnswersText(t *testing.T) {
	k := startKVD(t, throttleConfig(t, map[string]any{"anonymous_bucket": "slow", "max_throttle_wait_ms": 60000},
		bucketConfig("slow", 1, 1)))
	c := dialText(t, k.Addr)
	var in strings.Builder
	for i := range 5 {
		fmt.Fprintf(&in, "set k%d 0 0 300\r\n%s\r\n", i, strings.Repeat("v", 300))
	}
	in.WriteString("get k0\r\nversion\r\nset q 0 0 1 noreply\r\nq\r\nmn\r\n")
	c.send(in.String())
	time.Sleep(500 * time.Millisecond)
	_ = k.cmd.Process.Signal(syscall.SIGTERM)
	var lines []string
	for {
		l, err := c.line(5 * time.Second)
		if err != nil {
			break
		}
		lines = append(lines, l)
	}
	waitExit0(t, k)
	refused := 0
	for _, l := range lines {
		if l == "SERVER_ERROR shutting down" {
			refused++
		}
	}
	// Five sets, the get (END or a VALUE, or refused), version, mn: the
	// noreply set answers nothing.
	if len(lines) < 8 || lines[0] != "STORED" || refused < 3 || lines[len(lines)-1] != "SERVER_ERROR shutting down" {
		t.Fatalf("text replies after SIGTERM: %q; want the first set STORED, the rest answered in order, %s last",
			lines, "SERVER_ERROR shutting down")
	}
	t.Logf("text replies: %q", lines)
}

// TestShutdownWhileStarting: SIGTERM while kvd is still opening its store
// (20,000 buckets to create) stops it cleanly once it is up, exit 0,
// instead of the signal's default (exit 143).
func TestShutdownWhileStarting(t *testing.T) {
	t.Parallel()
	buckets := make([]map[string]any, 20000)
	for i := range buckets {
		buckets[i] = map[string]any{"name": fmt.Sprintf("b%d", i)}
	}
	cfg, err := json.Marshal(map[string]any{"buckets": buckets})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "kvd.json")
	if err := os.WriteFile(path, cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(kvdBin, "--listen", freeAddr(t), "--data-dir", filepath.Join(dir, "data"),
		"--config", path, "--metrics-listen", "")
	dieWithTest(cmd)
	out, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout = cmd.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	log := bufio.NewScanner(out)
	var seen []string
	for log.Scan() {
		seen = append(seen, log.Text())
		if strings.Contains(log.Text(), "config loaded") {
			break
		}
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	for log.Scan() {
		seen = append(seen, log.Text())
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("kvd signalled while starting: %v\n%s", err, strings.Join(seen, "\n"))
	}
	if !strings.Contains(strings.Join(seen, "\n"), "shutting down") {
		t.Errorf("no clean shutdown logged:\n%s", strings.Join(seen[max(0, len(seen)-5):], "\n"))
	}
}
