package server

import (
	"encoding/json"
	"slices"
	"strconv"
	"strings"

	"kvd/catalog"
	mc "kvd/protocol/binary"
	"kvd/tenant"
)

// The STAT groups are gathered here, by the Server, and encoded by the
// connection that asked (control.go): emit receives one statistic.
type emitFunc func(name string, value []byte)

func emitInt(emit emitFunc, name string, v int64) {
	var b [20]byte
	emit(name, strconv.AppendInt(b[:0], v, 10))
}

// generalStats are memcached's node figures plus those of the bucket b the
// asking connection has selected (a tenant sees only its own bucket's
// counters); b may be nil.
func (s *Server) generalStats(b *catalog.Bucket, emit emitFunc) {
	now := s.opts.Now()
	emitInt(emit, "pid", int64(s.pid))
	emitInt(emit, "uptime", int64(now.Sub(s.started).Seconds()))
	emitInt(emit, "time", now.Unix())
	emit("version", []byte(Version))
	emitInt(emit, "threads", int64(s.opts.Loops))
	emitInt(emit, "curr_connections", s.currConns.Load())
	emitInt(emit, "total_connections", s.totalConns.Load())
	emitInt(emit, "max_connections", int64(s.limits().MaxConnections))
	s.bufferStats(emit)
	if b == nil || b.Deleted() {
		return
	}
	n := &b.Counters
	emit("bucket", []byte(b.Name()))
	emitInt(emit, "cmd_get", n.CmdGet.Load())
	emitInt(emit, "cmd_set", n.CmdSet.Load())
	emitInt(emit, "get_hits", n.GetHits.Load())
	emitInt(emit, "get_misses", n.GetMisses.Load())
	emitInt(emit, "cmd_touch", n.CmdTouch.Load())
	emitInt(emit, "touch_hits", n.TouchHits.Load())
	emitInt(emit, "touch_misses", n.TouchMisses.Load())
	emitInt(emit, "curr_items", b.Store().ItemCount())
	txt := stateOf(b).textCommands.Load()
	emitInt(emit, "text_commands", txt)
	emitInt(emit, "binary_commands", b.Throttle().Stats().Commands-txt)
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
	DeadlinePercentile  int   `json:"deadline_percentile"`
	NumDeadlineRejected int64 `json:"num_deadline_rejected"`
	NumDeadlineExpired  int64 `json:"num_deadline_expired"`
	NumDeadlineMissed   int64 `json:"num_deadline_missed"`
	WindowReadPXXUS     int64 `json:"window_read_pXX_us"`
	WindowWritePXXUS    int64 `json:"window_write_pXX_us"`
}

func detailOf(b *catalog.Bucket) bucketDetail {
	st, ad, dl := b.Throttle().Stats(), stateOf(b).adm.Stats(), stateOf(b).dl.Stats()
	txt := stateOf(b).textCommands.Load()
	return bucketDetail{
		InFlight: ad.InFlight, QueueLength: ad.QueueLength, NumQueued: ad.NumQueued,
		NumQueueFull: ad.NumQueueFull, NumTimedOut: ad.NumTimedOut, QueueWaitTime: ad.QueueWaitTimeUS,
		PeakInFlight: ad.PeakInFlight, MaxConcurrent: ad.MaxConcurrent, MaxQueued: ad.MaxQueued,
		QueueTimeoutMS: ad.QueueTimeoutMS,
		Name:           b.Name(), Clients: st.Clients, RU: st.RU, WU: st.WU, NumCommands: st.Commands,
		NumThrottled: st.Throttled, NumRejected: st.Rejected, ThrottleWaitTime: st.WaitUS,
		ThrottleReserved: tenant.Limit(st.Reserved), ThrottleHardLimit: tenant.Limit(st.HardLimit),
		EffectiveReserved: st.EffectiveReserved, FreePoolShare: st.Share, UnitsThisSecond: st.Used,
		Items: b.Store().ItemCount(), TextCommands: txt, BinaryCommands: st.Commands - txt,

		DeadlineMS: dl.Deadline.Milliseconds(), DeadlinePercentile: dl.Percentile,
		NumDeadlineRejected: dl.Rejected, NumDeadlineExpired: dl.Expired, NumDeadlineMissed: dl.Missed,
		WindowReadPXXUS: dl.ReadPXX.Microseconds(), WindowWritePXXUS: dl.WritePXX.Microseconds(),
	}
}

// bucketDetails is STAT "bucket_details NAME": that bucket's JSON document
// under its name; for "bucket_details", {"buckets":[…], "buckets_total":
// N, "buckets_omitted": M} of the buckets for which canSee is true, sorted
// by name: all of them while there are at most metrics_bucket_limit, the
// most active ones past it (shown.go), M being those left out; for
// "bucket_details *", all of them whatever their number.
func (s *Server) bucketDetails(name string, canSee func(string) bool) (string, []byte, mc.Status, string) {
	if name != "" && name != "*" {
		b, ok := s.cat.Get(name)
		switch {
		case !canSee(name):
			return "", nil, mc.StatusAccessDenied, "no access to bucket " + name
		case !ok:
			return "", nil, mc.StatusKeyNotFound, "no such bucket: " + name
		}
		doc, _ := json.Marshal(detailOf(b))
		return name, doc, mc.StatusOK, ""
	}
	var visible []*catalog.Bucket
	for _, b := range s.cat.All() {
		if canSee(b.Name()) {
			visible = append(visible, b)
		}
	}
	shown := visible
	if name != "*" {
		shown = s.shownBuckets(visible, s.limits().MetricsBucketLimit)
	}
	slices.SortFunc(shown, func(x, y *catalog.Bucket) int { return strings.Compare(x.Name(), y.Name()) })
	all := struct {
		Buckets []bucketDetail `json:"buckets"`
		Total   int            `json:"buckets_total"`
		Omitted int            `json:"buckets_omitted"`
	}{Buckets: make([]bucketDetail, 0, len(shown)), Total: len(visible), Omitted: len(visible) - len(shown)}
	for _, b := range shown {
		all.Buckets = append(all.Buckets, detailOf(b))
	}
	doc, _ := json.Marshal(all)
	return "bucket_details", doc, mc.StatusOK, ""
}

// throttleStats is STAT "throttle": the node's capacity, free pool and tick.
func (s *Server) throttleStats(emit emitFunc) {
	st := s.throttle.Stats()
	def := s.cat.Defaults()
	emitInt(emit, "capacity", st.Capacity)
	emitInt(emit, "free_pool", st.FreePool)
	emitInt(emit, "free_pool_used", st.FreeUsed)
	emitInt(emit, "free_pool_spare", st.Spare)
	emitInt(emit, "free_pool_spare_used", st.SpareUsed)
	emitInt(emit, "node_units_this_second", st.NodeUsed)
	emitInt(emit, "node_units_last_second", st.LastSecond)
	emitInt(emit, "ticks", st.Ticks)
	emitInt(emit, "tick_start_us", st.TickStart.UnixMicro())
	emit("default_throttle_reserved_units", []byte(tenant.FormatLimit(def.Reserved)))
	emit("default_throttle_hard_limit", []byte(tenant.FormatLimit(def.HardLimit)))
}

// ingressStats is STAT "ingress": one stat per figure, named <pool>_<figure>
// and probe_<figure> as SPEC section 6 lists them.
func (s *Server) ingressStats(emit emitFunc) {
	s.ingress.Stats().Figures(func(name string, v int64) { emitInt(emit, name, v) })
}

// bufferStats are the network memory figures (package netmem): bytes held
// in the connections' buffers and the budget, connections paused now,
// pauses by reason since start, and connections closed for memory.
func (s *Server) bufferStats(emit emitFunc) {
	f := s.flow.Stats()
	emitInt(emit, "buffer_bytes", f.Held)
	emitInt(emit, "max_buffer_bytes", s.limits().MaxBufferBytes)
	emitInt(emit, "conns_paused", int64(f.Paused))
	emitInt(emit, "conn_pauses_memory", f.MemPauses)
	emitInt(emit, "conn_pauses_output", f.OutPauses)
	emitInt(emit, "conns_closed_memory", f.Closed)
}
