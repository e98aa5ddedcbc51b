package observe

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"

	"kvd/catalog"
	"kvd/tenant"
)

// The STAT groups are gathered here and encoded by the connection that
// asked, in the protocol it speaks: Emit receives one statistic.
type Emit func(name string, value []byte)

func emitInt(emit Emit, name string, v int64) {
	var b [20]byte
	emit(name, strconv.AppendInt(b[:0], v, 10))
}

// Stats emits the STAT group named group, with its argument arg, for a
// connection that has bucket b selected (nil for none) and may read the
// details of the buckets canSee accepts: "" (General), "bucket_details
// [name]" (BucketDetails), "throttle", "ingress", "cluster" (Cluster), and
// memcached's "settings" (Front.Settings), "reset" (Reset), "items",
// "slabs" and "sizes" (noSlabs).
// A JSON document goes to emitJSON, every other statistic to emit. A group
// that refuses returns its error; an unknown one ErrUnknownGroup.
func (v *View) Stats(group, arg string, b *catalog.Bucket, canSee func(string) bool, emit, emitJSON Emit) error {
	switch group {
	case "":
		v.General(b, emit)
	case "bucket_details":
		name, doc, err := v.BucketDetails(arg, canSee)
		if err != nil {
			return err
		}
		emitJSON(name, doc)
	case "settings":
		for _, kv := range v.node.Front().Settings() {
			emit(kv[0], []byte(kv[1]))
		}
	case "reset":
		v.Reset(b, canSee)
	case "items", "slabs", "sizes":
		noSlabs(group, emit)
	case "throttle":
		v.Throttle(emit)
	case "ingress":
		v.Ingress(emit)
	case "cluster":
		doc, err := v.Cluster(canSee)
		if err != nil {
			return err
		}
		emitJSON("cluster", doc)
	default:
		return fmt.Errorf("%w %s", ErrUnknownGroup, strconv.Quote(group))
	}
	return nil
}

// General is the general STAT group: memcached's node figures plus those
// of the bucket b the asking connection has selected (a tenant sees only
// its own bucket's counters); b may be nil.
func (v *View) General(b *catalog.Bucket, emit Emit) {
	f := v.node.Front()
	emitInt(emit, "pid", int64(f.PID))
	emitInt(emit, "uptime", int64(f.Now.Sub(f.Started).Seconds()))
	emitInt(emit, "time", f.Now.Unix())
	emit("version", []byte(f.Version))
	emitInt(emit, "pointer_size", strconv.IntSize)
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		emit("rusage_user", fmt.Appendf(nil, "%d.%06d", ru.Utime.Sec, ru.Utime.Usec))
		emit("rusage_system", fmt.Appendf(nil, "%d.%06d", ru.Stime.Sec, ru.Stime.Usec))
	}
	emitInt(emit, "threads", int64(f.Threads))
	emitInt(emit, "curr_connections", f.Conns)
	emitInt(emit, "total_connections", f.TotalConns-v.connBase.total.Load())
	emitInt(emit, "max_connections", int64(f.MaxConns))
	emitInt(emit, "system_connections", f.SystemConns)
	emitInt(emit, "rejected_connections", f.RefusedConns-v.connBase.refused.Load())
	bufferStats(emit, f.Buffers)
	if b == nil || b.Deleted() {
		return
	}
	n := &b.Counters
	emit("bucket", []byte(b.Name()))
	for _, c := range memcachedCounters(n) {
		emitInt(emit, c.name, c.n.Load())
	}
	emitInt(emit, "curr_items", b.Store().ItemCount())
	txt := v.node.State(b).TextCommands - n.TextBase.Load()
	emitInt(emit, "text_commands", txt)
	emitInt(emit, "binary_commands", b.Throttle().Stats().Commands-n.CommandsBase.Load()-txt)
}

// counter is one of a bucket's memcached counters.
type counter struct {
	name string
	n    *atomic.Int64
}

// memcachedCounters are a bucket's memcached counters under memcached's
// names, in its order.
func memcachedCounters(n *catalog.Counters) []counter {
	return []counter{
		{"cmd_get", &n.CmdGet}, {"cmd_set", &n.CmdSet}, {"cmd_flush", &n.CmdFlush}, {"cmd_touch", &n.CmdTouch},
		{"get_hits", &n.GetHits}, {"get_misses", &n.GetMisses},
		{"delete_misses", &n.DeleteMisses}, {"delete_hits", &n.DeleteHits},
		{"incr_misses", &n.IncrMisses}, {"incr_hits", &n.IncrHits},
		{"decr_misses", &n.DecrMisses}, {"decr_hits", &n.DecrHits},
		{"cas_misses", &n.CasMisses}, {"cas_hits", &n.CasHits}, {"cas_badval", &n.CasBadval},
		{"touch_hits", &n.TouchHits}, {"touch_misses", &n.TouchMisses},
	}
}

// Reset is memcached's "stats reset" from a connection with bucket b
// selected (nil for none): b's counters in the general group start again
// from 0, for every connection that reads them, and the node's connection
// counters (total_connections, rejected_connections) too when the
// connection may read every bucket's figures (the Stats privilege, or a
// node all of whose buckets it may use): a tenant resets its own figures,
// not the operator's. /metrics is not reset: its counters only go up.
func (v *View) Reset(b *catalog.Bucket, canSee func(string) bool) {
	if b != nil && !b.Deleted() {
		n := &b.Counters
		for _, c := range memcachedCounters(n) {
			c.n.Store(0)
		}
		n.TextBase.Store(v.node.State(b).TextCommands)
		n.CommandsBase.Store(b.Throttle().Stats().Commands)
	}
	cat := v.node.Parts().Catalog
	if len(cat.Names(canSee)) == len(cat.Names(func(string) bool { return true })) {
		f := v.node.Front()
		v.connBase.total.Store(f.TotalConns)
		v.connBase.refused.Store(f.RefusedConns)
	}
}

// noSlabs answers memcached's slab allocator groups: kvd has no slab
// classes (items live in Pebble and its resident item cache), so "items"
// lists none, "slabs" none active and no slab memory, and "sizes" is
// disabled, as memcached's is by default. Monitoring agents that ask
// every group (memcached_exporter, OpenTelemetry's memcached receiver)
// then read the others.
func noSlabs(group string, emit Emit) {
	switch group {
	case "slabs":
		emitInt(emit, "active_slabs", 0)
		emitInt(emit, "total_malloced", 0)
	case "sizes":
		emit("sizes_status", []byte("disabled"))
	}
}

// bufferStats are the network memory figures.
func bufferStats(emit Emit, f Buffers) {
	emitInt(emit, "buffer_bytes", f.Held)
	emitInt(emit, "max_buffer_bytes", f.Limit)
	emitInt(emit, "conns_paused", f.Paused)
	emitInt(emit, "conn_pauses_memory", f.MemoryPauses)
	emitInt(emit, "conn_pauses_output", f.OutputPauses)
	emitInt(emit, "conn_pauses_input", f.InputPauses)
	emitInt(emit, "conns_closed_memory", f.Closed)
	emitInt(emit, "frames_refused_memory", f.Refused)
}

// bucketDetail is the JSON document of STAT bucket_details.
type bucketDetail struct {
	Name              string       `json:"name"`
	Clients           int64        `json:"clients"`
	RU                int64        `json:"ru"`
	WU                int64        `json:"wu"`
	NumCommands       int64        `json:"num_commands"`
	NumThrottled      int64        `json:"num_throttled"`
	NumRejected       int64        `json:"num_rejected"`
	ThrottleWaitTime  int64        `json:"throttle_wait_time"`
	ThrottleReserved  tenant.Limit `json:"throttle_reserved"`
	ThrottleHardLimit tenant.Limit `json:"throttle_hard_limit"`
	EffectiveReserved int64        `json:"throttle_effective_reserved"`
	FreePoolShare     int64        `json:"throttle_free_pool_share"`
	UnitsThisSecond   int64        `json:"units_this_second"`
	UnitsHeld         int64        `json:"units_held"` // by admitted commands not charged yet
	Items             int64        `json:"curr_items"`
	TextCommands      int64        `json:"text_commands"`   // data commands over text/meta
	BinaryCommands    int64        `json:"binary_commands"` // num_commands - text_commands

	// Admission (ingress.BucketStats).
	InFlight       int64 `json:"in_flight"`
	QueueLength    int64 `json:"queue_length"`
	NumQueued      int64 `json:"num_queued"`
	NumQueueFull   int64 `json:"num_queue_full"`
	NumTimedOut    int64 `json:"num_timed_out"`
	QueueWaitTime  int64 `json:"queue_wait_time"`
	PeakInFlight   int64 `json:"peak_in_flight"`
	MaxConcurrent  int64 `json:"max_concurrent"`
	MaxQueued      int64 `json:"max_queued"`
	QueueTimeoutMS int64 `json:"queue_timeout_ms"`

	// Deadline admission (ingress.DeadlineStats).
	DeadlineMS          int64 `json:"deadline_ms"`
	DeadlinePercentile  int   `json:"deadline_percentile"`   // in force: 99 when the setting is 0
	ExpectedExecutionUS int64 `json:"expected_execution_us"` // in force: 1000 when unset
	NumDeadlineRejected int64 `json:"num_deadline_rejected"`
	NumDeadlineExpired  int64 `json:"num_deadline_expired"`
	NumDeadlineMissed   int64 `json:"num_deadline_missed"`
	WindowReadPXXUS     int64 `json:"window_read_pXX_us"`
	WindowWritePXXUS    int64 `json:"window_write_pXX_us"`
}

func (v *View) detailOf(b *catalog.Bucket) bucketDetail {
	bs := v.node.State(b)
	st, ad, dl := b.Throttle().Stats(), bs.Admission.Stats(), bs.Deadline.Stats()
	txt := bs.TextCommands
	return bucketDetail{
		InFlight: ad.InFlight, QueueLength: ad.QueueLength, NumQueued: ad.NumQueued,
		NumQueueFull: ad.NumQueueFull, NumTimedOut: ad.NumTimedOut, QueueWaitTime: ad.QueueWaitTimeUS,
		PeakInFlight: ad.PeakInFlight, MaxConcurrent: ad.MaxConcurrent, MaxQueued: ad.MaxQueued,
		QueueTimeoutMS: ad.QueueTimeoutMS,
		Name:           b.Name(), Clients: st.Clients, RU: st.RU, WU: st.WU, NumCommands: st.Commands,
		NumThrottled: st.Throttled, NumRejected: st.Rejected, ThrottleWaitTime: st.WaitUS,
		ThrottleReserved: tenant.Limit(st.Reserved), ThrottleHardLimit: tenant.Limit(st.HardLimit),
		EffectiveReserved: st.EffectiveReserved, FreePoolShare: st.Share, UnitsThisSecond: st.Used,
		UnitsHeld: st.Held,
		Items:     b.Store().ItemCount(), TextCommands: txt, BinaryCommands: st.Commands - txt,

		DeadlineMS: dl.Deadline.Milliseconds(), DeadlinePercentile: dl.Percentile,
		ExpectedExecutionUS: dl.ExpectedExecution.Microseconds(),
		NumDeadlineRejected: dl.Rejected, NumDeadlineExpired: dl.Expired, NumDeadlineMissed: dl.Missed,
		WindowReadPXXUS: dl.ReadPXX.Microseconds(), WindowWritePXXUS: dl.WritePXX.Microseconds(),
	}
}

// BucketDetails is STAT "bucket_details NAME": that bucket's JSON document
// under its name (ErrNoAccess unless canSee(NAME), ErrNoBucket for a bucket
// the node does not have); for "bucket_details", {"buckets":[…],
// "buckets_total": N, "buckets_omitted": M} of the buckets for which canSee
// is true, sorted by name: all of them while there are at most
// metrics_bucket_limit, the most active ones past it (shown.go), M being
// those left out; for "bucket_details *", all of them whatever their
// number. It returns the statistic's name and its document.
func (v *View) BucketDetails(name string, canSee func(string) bool) (string, []byte, error) {
	cat := v.node.Parts().Catalog
	if name != "" && name != "*" {
		b, ok := cat.Get(name)
		switch {
		case !canSee(name):
			return "", nil, fmt.Errorf("%w %s", ErrNoAccess, name)
		case !ok:
			return "", nil, fmt.Errorf("%w: %s", ErrNoBucket, name)
		}
		doc, _ := json.Marshal(v.detailOf(b))
		return name, doc, nil
	}
	var visible []*catalog.Bucket
	for _, b := range cat.All() {
		if canSee(b.Name()) {
			visible = append(visible, b)
		}
	}
	shown := visible
	if name != "*" {
		shown = v.shown(visible, v.node.Front())
	}
	slices.SortFunc(shown, func(x, y *catalog.Bucket) int { return strings.Compare(x.Name(), y.Name()) })
	all := struct {
		Buckets []bucketDetail `json:"buckets"`
		Total   int            `json:"buckets_total"`
		Omitted int            `json:"buckets_omitted"`
	}{Buckets: make([]bucketDetail, 0, len(shown)), Total: len(visible), Omitted: len(visible) - len(shown)}
	for _, b := range shown {
		all.Buckets = append(all.Buckets, v.detailOf(b))
	}
	doc, _ := json.Marshal(all)
	return "bucket_details", doc, nil
}

// Throttle is STAT "throttle": the node's capacity, free pool and tick.
func (v *View) Throttle(emit Emit) {
	parts := v.node.Parts()
	st := parts.Throttle.Stats()
	def := parts.Catalog.Defaults()
	emitInt(emit, "capacity", st.Capacity)
	emitInt(emit, "free_pool", st.FreePool)
	emitInt(emit, "free_pool_used", st.FreeUsed)
	emitInt(emit, "free_pool_spare", st.Spare)
	emitInt(emit, "free_pool_spare_used", st.SpareUsed)
	emitInt(emit, "free_pool_held", st.FreeHeld)
	emitInt(emit, "node_units_this_second", st.NodeUsed)
	emitInt(emit, "node_units_last_second", st.LastSecond)
	emitInt(emit, "ticks", st.Ticks)
	emitInt(emit, "tick_start_us", st.TickStart.UnixMicro())
	emit("default_throttle_reserved_units", []byte(tenant.FormatLimit(def.Reserved)))
	emit("default_throttle_hard_limit", []byte(tenant.FormatLimit(def.HardLimit)))
}

// Ingress is STAT "ingress": one stat per figure, named <pool>_<figure>
// and probe_<figure> as SPEC section 6 lists them.
func (v *View) Ingress(emit Emit) {
	v.node.Parts().Ingress.Stats().Figures(func(name string, n int64) { emitInt(emit, name, n) })
}
