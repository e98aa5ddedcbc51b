// Package observe is the operator's view of a kvd node: the STAT groups
// (general, bucket_details, throttle, ingress, cluster) and the Prometheus
// collector behind /metrics, the choice of the buckets whose figures they
// list on a node with many (shown.go), and the node totals that count every
// bucket the node has had.
//
// It owns no figures of the data path. Everything is read at request or
// scrape time from the counters the node keeps anyway (the catalog's
// buckets and their throttles, the node throttle, ingress, the engine, and
// what package server keeps of its own, reached through Node), so the data
// path pays nothing for it. The exceptions are kvd_command_duration_seconds,
// observed by Executed with handles resolved once, and the figures of
// deleted buckets, which Retire keeps so that the node totals never go
// backwards. Latency histograms are package latency's; observe exports them.
//
// Invariants: metric names, labels, help texts, STAT keys and value formats
// are part of kvd's interface (README, SPEC, the shipped board and alert
// rules) and change only deliberately. observe never reads the clock: the
// time of a STAT reply comes from Node.Front. A View is safe for concurrent
// use; its methods may run on event loops, workers and the scrape handler
// at once.
package observe

import (
	"errors"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"kvd/catalog"
	"kvd/engine"
	"kvd/ingress"
	"kvd/latency"
	"kvd/tenant"
)

// Errors of the STAT groups that can refuse. Their text after "observe: "
// is the reason a client sees.
var (
	// ErrNoAccess: the asking connection may not read the bucket's details.
	ErrNoAccess = errors.New("observe: no access to bucket")
	// ErrNoBucket: bucket_details names a bucket the node does not have.
	ErrNoBucket = errors.New("observe: no such bucket")
	// ErrNotCluster: STAT cluster on a node started without --cluster.
	ErrNotCluster = errors.New("observe: not in a cluster")
	// ErrUnknownGroup: a STAT group this node does not have.
	ErrUnknownGroup = errors.New("observe: unknown stat group")
)

// Node is the running node as observe reads it; package server implements
// it. Its methods are called at request and scrape time, concurrently.
type Node interface {
	// Parts are the node's components whose figures observe reads.
	Parts() Parts
	// Front is the front end's own figures at this moment.
	Front() Front
	// State is the front end's per-bucket state of b.
	State(b *catalog.Bucket) BucketState
}

// Parts are a node's components.
type Parts struct {
	Catalog  *catalog.Catalog
	Throttle *tenant.Throttle
	Ingress  *ingress.Controller
	DB       *engine.DB
}

// Front is what only the front end knows: its process, its connections, its
// network memory and the limits that shape the figures.
type Front struct {
	Now          time.Time // the node's clock: STAT time and uptime
	Started      time.Time
	PID          int
	Version      string
	Threads      int   // event loops
	Conns        int64 // open client connections, the system band's included
	SystemConns  int64 // of them, in the system band (package slots)
	TotalConns   int64 // client connections accepted
	RefusedConns int64 // client connections refused: max_connections and the system band full
	MaxConns     int   // max_connections

	// BucketLimit is metrics_bucket_limit: past it the per-bucket figures
	// list only the most active buckets (shown.go).
	BucketLimit int
	Buffers     Buffers
	// Settings makes STAT settings: name and value, in order. Only that
	// group calls it, so that other readers of Front do not build them.
	Settings func() [][2]string
}

// Buffers are the network memory figures: bytes held in the connections'
// buffers and the budget, connections paused now, pauses by reason since
// start, connections closed for memory, and frames refused at their
// header for want of room.
type Buffers struct {
	Held, Limit                             int64 // bytes; Limit is max_buffer_bytes
	Paused                                  int64 // connections paused now
	MemoryPauses, OutputPauses, InputPauses int64
	Closed                                  int64
	Refused                                 int64
}

// BucketState is the front end's state of one bucket.
type BucketState struct {
	TextCommands int64                   // data commands over the text/meta protocol
	Latency      *latency.Bucket         // nil until the bucket's first command
	Admission    *ingress.Bucket         // admission limits, queues and figures
	Deadline     *ingress.BucketDeadline // deadline gate and figures
}

// View is a node's STAT groups and Prometheus metrics. Create it with New;
// it is safe for concurrent use.
type View struct {
	node     Node
	reg      *prometheus.Registry
	duration [2]prometheus.Observer // by latency.Class
	retired  retired                // figures of deleted buckets, for the node totals
	// connBase: total and refused connections at the last node-wide
	// "stats reset", where STAT's figures start (Reset).
	connBase struct{ total, refused atomic.Int64 }
}

// New is the view of node. It reads nothing of node until it is asked: the
// node may finish opening after New.
func New(node Node) *View {
	v := &View{node: node, reg: prometheus.NewRegistry()}
	hist := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "kvd_command_duration_seconds",
		Help:    "Execution time of data commands on a worker, by class (read or write), excluding queueing and WAL sync.",
		Buckets: prometheus.ExponentialBuckets(1e-6, 2, 22),
	}, []string{"class"})
	for class, name := range latency.ClassNames {
		v.duration[class] = hist.WithLabelValues(name)
	}
	v.reg.MustRegister(hist, collector{v},
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return v
}

// Handler serves the Prometheus metrics.
func (v *View) Handler() http.Handler {
	return promhttp.HandlerFor(v.reg, promhttp.HandlerOpts{})
}

// Executed records one data command's execution time on a worker.
func (v *View) Executed(write bool, d time.Duration) {
	class := latency.Read
	if write {
		class = latency.Write
	}
	v.duration[class].Observe(d.Seconds())
}

// Retire keeps a deleted bucket's figures in the node totals. The node
// calls it once, when the bucket is removed.
func (v *View) Retire(b *catalog.Bucket) {
	v.retired.add(b.Throttle().Stats(), v.node.State(b).Latency)
}

// retired are the figures of deleted buckets.
type retired struct {
	mu sync.Mutex
	n  totals // guarded by mu
}

func (r *retired) add(st tenant.BucketStats, lat *latency.Bucket) {
	r.mu.Lock()
	r.n.add(st, lat)
	r.mu.Unlock()
}

// addTo adds the deleted buckets' figures to n.
func (r *retired) addTo(n *totals) {
	r.mu.Lock()
	defer r.mu.Unlock()
	n.merge(&r.n)
}
