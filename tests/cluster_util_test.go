package tests

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"kvd/catalog/etcdtest"
	mc "kvd/protocol/binary"
)

// This file holds the cluster tests' helpers: a cluster of real kvd
// processes joined through a real etcd, and load generators that count,
// at the client, the GETs each node served.

// clusterNode is one kvd of a test cluster.
type clusterNode struct {
	*kvd
	name    string
	metrics string // its Prometheus address
}

// testCluster is etcd and the kvd nodes started with the same config.
type testCluster struct {
	t     *testing.T
	etcd  *etcdtest.Server
	nodes []*clusterNode
}

// startCluster starts etcd and n kvd nodes (n1…), all with configJSON.
func startCluster(t *testing.T, n int, configJSON string) *testCluster {
	t.Helper()
	tc := &testCluster{t: t, etcd: etcdtest.Start(t)}
	for i := range n {
		n := &clusterNode{name: fmt.Sprintf("n%d", i+1), metrics: freeAddr(t)}
		n.kvd = startKVD(t, configJSON, tc.args(n)...)
		tc.nodes = append(tc.nodes, n)
	}
	return tc
}

// args are the cluster and metrics flags of node n.
func (tc *testCluster) args(n *clusterNode) []string {
	return []string{"--cluster", strings.Join(tc.etcd.Endpoints(), ","), "--node-name", n.name,
		"--metrics-listen", n.metrics}
}

// restart starts a killed node again on the same data dir.
func (tc *testCluster) restart(n *clusterNode) { n.start(tc.args(n)...) }

// wantMetric fails unless node n exports the sample series (name and
// labels as /metrics prints them) with a value in [lo, hi] within 5 s.
func (tc *testCluster) wantMetric(t *testing.T, n *clusterNode, series string, lo, hi float64) {
	t.Helper()
	// Shares and usage follow the demand once a second: one reading can
	// catch a step on its way (a node starved of CPU for a moment reports
	// less), so the series has 5 s to be in range.
	deadline := time.Now().Add(5 * time.Second)
	for {
		v, err := scrapeMetric(n.metrics, series)
		if err == nil && v >= lo && v <= hi {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("%s: %s = %v (%v) for 5 s, want %v..%v", n.name, series, v, err, lo, hi)
			return
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// admin logs in as the test config's admin on node n.
func (tc *testCluster) admin(n *clusterNode) *rawConn {
	return login(tc.t, n.Addr, "admin", "admin-pw", "")
}

// clusterStatus is STAT cluster's document, as far as the tests read it.
type clusterStatus struct {
	Node    string `json:"node"`
	Etcd    string `json:"etcd"`
	Members []struct {
		Name string `json:"name"`
	} `json:"members"`
	Shares []struct {
		Bucket         string           `json:"bucket"`
		Reserved       json.RawMessage  `json:"reserved"`
		HardLimit      json.RawMessage  `json:"hard_limit"`
		TotalReserved  json.RawMessage  `json:"total_reserved"`
		TotalHardLimit json.RawMessage  `json:"total_hard_limit"`
		ClusterUsage   int64            `json:"cluster_usage"`
		NodeUsage      map[string]int64 `json:"node_usage"`
	} `json:"shares"`
}

// share returns bucket's entry as text: local reserved, local hard limit,
// total reserved, total hard limit ("" when the bucket is absent).
func (s clusterStatus) share(bucket string) (r, h, tr, th string) {
	for _, sh := range s.Shares {
		if sh.Bucket == bucket {
			tx := func(raw json.RawMessage) string { return strings.Trim(string(raw), `"`) }
			return tx(sh.Reserved), tx(sh.HardLimit), tx(sh.TotalReserved), tx(sh.TotalHardLimit)
		}
	}
	return "", "", "", ""
}

// clusterStat reads STAT cluster on c.
func (c *rawConn) clusterStat() clusterStatus {
	c.t.Helper()
	m := c.statGroup("cluster")
	var st clusterStatus
	if err := json.Unmarshal([]byte(m["cluster"]), &st); err != nil {
		c.t.Fatalf("STAT cluster: %v in %v", err, m)
	}
	return st
}

// within polls cond every 50 ms until it holds, and fails the test after
// d with cond's last detail.
func within(t *testing.T, d time.Duration, what string, cond func() (bool, string)) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		ok, detail := cond()
		if ok {
			return time.Since(start)
		}
		if time.Since(start) > d {
			t.Fatalf("%s: not within %v; last seen: %s", what, d, detail)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// loader drives GETs of one key at one node over some connections and
// counts, at the client, the GETs answered with a hit.
type loader struct {
	ok    atomic.Int64
	stop  chan struct{}
	wg    sync.WaitGroup
	phase time.Duration // where in the wall-clock second its node's throttle seconds start
}

// loadOptions say how a loader drives its node.
type loadOptions struct {
	addr, user, password, bucket, key string
	conns                             int
	depth                             int     // GETs in flight per connection
	rate                              float64 // total GETs/s to send; 0 = as fast as answered
}

// startLoad starts conns connections; each logs in, selects the bucket and
// sends GETs until Stop. A connection that fails (its node was killed)
// ends quietly.
func startLoad(t *testing.T, o loadOptions) *loader {
	t.Helper()
	l := &loader{stop: make(chan struct{})}
	for range o.conns {
		nc, r, err := loginRaw(o)
		if err != nil {
			t.Fatalf("loader %s at %s: %v", o.user, o.addr, err)
		}
		l.wg.Add(1)
		go l.run(nc, r, o)
	}
	t.Cleanup(l.Stop)
	return l
}

// Stop ends the load and waits for its connections.
func (l *loader) Stop() {
	select {
	case <-l.stop:
	default:
		close(l.stop)
	}
	l.wg.Wait()
}

func loginRaw(o loadOptions) (net.Conn, *bufio.Reader, error) {
	nc, err := net.DialTimeout("tcp", o.addr, 5*time.Second)
	if err != nil {
		return nil, nil, err
	}
	r := bufio.NewReader(nc)
	for _, req := range []*mc.Request{
		{Magic: mc.MagicRequest, Opcode: mc.OpSASLAuth, Key: []byte("PLAIN"), Value: []byte("\x00" + o.user + "\x00" + o.password)},
		{Magic: mc.MagicRequest, Opcode: mc.OpSelectBucket, Key: []byte(o.bucket)},
	} {
		_ = nc.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := nc.Write(mc.AppendRequest(nil, req)); err != nil {
			nc.Close()
			return nil, nil, err
		}
		if st, err := readStatus(r); err != nil || st != mc.StatusOK {
			nc.Close()
			return nil, nil, fmt.Errorf("%v: status %v, %v", req.Opcode, st, err)
		}
	}
	return nc, r, nil
}

// readStatus reads one response frame and returns its status.
func readStatus(r *bufio.Reader) (mc.Status, error) {
	hdr := make([]byte, mc.HeaderLen)
	if _, err := io.ReadFull(r, hdr); err != nil {
		return 0, err
	}
	body := int(uint32(hdr[8])<<24 | uint32(hdr[9])<<16 | uint32(hdr[10])<<8 | uint32(hdr[11]))
	if _, err := r.Discard(body); err != nil {
		return 0, err
	}
	return mc.Status(uint16(hdr[6])<<8 | uint16(hdr[7])), nil
}

// run is one connection: send up to depth GETs (fewer when paced), read
// their replies, count the hits; until Stop or an error.
func (l *loader) run(nc net.Conn, r *bufio.Reader, o loadOptions) {
	defer l.wg.Done()
	defer nc.Close()
	frame := mc.AppendRequest(nil, &mc.Request{Magic: mc.MagicRequest, Opcode: mc.OpGet, Key: []byte(o.key)})
	var batch []byte
	start, sent := time.Now(), 0.0
	perConn := o.rate / float64(o.conns)
	for {
		select {
		case <-l.stop:
			return
		default:
		}
		n := o.depth
		if o.rate > 0 {
			due := time.Since(start).Seconds()*perConn - sent
			if due < 1 {
				time.Sleep(2 * time.Millisecond)
				continue
			}
			n = min(n, int(due))
			sent += float64(n)
		}
		batch = batch[:0]
		for range n {
			batch = append(batch, frame...)
		}
		_ = nc.SetDeadline(time.Now().Add(40 * time.Second))
		if _, err := nc.Write(batch); err != nil {
			return
		}
		for range n {
			st, err := readStatus(r)
			if err != nil {
				return
			}
			if st == mc.StatusOK {
				l.ok.Add(1)
			}
		}
	}
}

// loads is a set of loaders measured together.
type loads []*loader

func (ls loads) total() int64 {
	var sum int64
	for _, l := range ls {
		sum += l.ok.Load()
	}
	return sum
}

// rate measures the GETs per second the loaders got over d (whole
// seconds), in total and by loader. A node's throttle hands out each
// second's units in a burst right after its tick, so a window that is not
// aligned with the ticks may hold one burst more or less than it has
// seconds (+20% over 5 s). Each loader is therefore measured from the
// middle of one of its node's throttle seconds to the middle of another,
// d later: exactly d seconds' budgets.
func (ls loads) rate(d time.Duration) (float64, []float64) {
	each := make([]float64, len(ls))
	var wg sync.WaitGroup
	for i, l := range ls {
		wg.Go(func() {
			now := time.Now()
			into := time.Duration(now.UnixNano()) - l.phase
			wait := (time.Second + time.Second/2 - into%time.Second) % time.Second
			time.Sleep(wait)
			start, before := time.Now(), l.ok.Load()
			time.Sleep(time.Until(start.Add(d)))
			each[i] = float64(l.ok.Load()-before) / d.Seconds()
		})
	}
	wg.Wait()
	total := 0.0
	for _, r := range each {
		total += r
	}
	return total, each
}

// phaseOf reads where in the wall-clock second node n's throttle seconds
// start (STAT throttle tick_start_us).
func (tc *testCluster) phaseOf(n *clusterNode) time.Duration {
	tc.t.Helper()
	us, err := strconv.ParseInt(tc.admin(n).statGroup("throttle")["tick_start_us"], 10, 64)
	if err != nil {
		tc.t.Fatalf("STAT throttle tick_start_us on %s: %v", n.name, err)
	}
	return time.Duration(us*1000) % time.Second
}

func (ls loads) stop() {
	for _, l := range ls {
		l.Stop()
	}
}

// seedKey stores key (a 1-RU value) in bucket on every node: there is no
// replication, so each node needs its own copy.
func (tc *testCluster) seedKey(bucket, key string) {
	tc.t.Helper()
	for _, n := range tc.nodes {
		c := login(tc.t, n.Addr, "admin", "admin-pw", bucket)
		if res := c.call(set(key, "v")); res.Status != mc.StatusOK {
			tc.t.Fatalf("SET %s on %s: %v", key, n.name, res.Status)
		}
	}
}
