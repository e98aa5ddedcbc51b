package observe

import (
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"kvd/catalog"
	"kvd/engine"
	"kvd/ingress"
	"kvd/latency"
)

// The Prometheus figures. Almost everything is read at scrape time from the
// counters the node keeps anyway (the collector below); per-bucket series
// cover every bucket up to metrics_bucket_limit, the most active ones past
// it (shown.go).

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(name, help, labels, nil)
}

var (
	descRU        = desc("kvd_bucket_read_units_total", "Read units charged to the bucket.", "bucket")
	descWU        = desc("kvd_bucket_write_units_total", "Write units charged to the bucket.", "bucket")
	descCommands  = desc("kvd_bucket_commands_total", "Data commands executed for the bucket.", "bucket")
	descTextCmds  = desc("kvd_bucket_text_commands_total", "Data commands of the bucket that came over memcached's text or meta protocol (the rest of kvd_bucket_commands_total came over binary).", "bucket")
	descThrottled = desc("kvd_bucket_throttled_total", "Throttle decisions against the bucket's commands.", "bucket")
	descWait      = desc("kvd_bucket_throttle_wait_seconds_total", "Time the bucket's commands spent parked by throttling.", "bucket")
	descRejected  = desc("kvd_bucket_rejected_total", "Commands of the bucket rejected by throttling or admission.", "bucket")
	descClients   = desc("kvd_bucket_clients", "Connections that have the bucket selected.", "bucket")
	descItems     = desc("kvd_bucket_items", "Items stored in the bucket.", "bucket")
	descReserved  = desc("kvd_bucket_throttle_effective_reserved_units", "Units per second reserved for the bucket this second (slow start applied).", "bucket")
	descCapacity  = desc("kvd_node_capacity_units", "Node capacity in units per second.")
	descFreePool  = desc("kvd_node_free_pool_units", "Units per second of the node's free pool this second.")
	descNodeLast  = desc("kvd_node_units_last_second", "Units used on the node in the last full second.")
	descConns     = desc("kvd_connections", "Open client connections.")
	descConnsTot  = desc("kvd_connections_total", "Client connections accepted.")
	descConnsSys  = desc("kvd_system_connections", "Open client connections in the system band (beyond max_connections, privileged users only).")
	descConnsRej  = desc("kvd_connections_rejected_total", "Client connections refused: max_connections and the system band were full.")
	descL0        = desc("kvd_pebble_l0_sublevels", "Pebble L0 sublevels (read amplification of L0).")
	descDebt      = desc("kvd_pebble_compaction_debt_bytes", "Pebble's estimate of bytes to compact to reach a stable LSM.")
	descFsync     = desc("kvd_pebble_wal_fsync_latency_seconds", "Pebble WAL fsync latency.")
	descCacheHit  = desc("kvd_pebble_block_cache_hits_total", "Pebble block cache hits.")
	descCacheMiss = desc("kvd_pebble_block_cache_misses_total", "Pebble block cache misses.")
	descCacheSize = desc("kvd_pebble_block_cache_bytes", "Pebble block cache: bytes held (used) and its capacity, block_cache_bytes (capacity).", "state")
	descItemBytes = desc("kvd_item_cache_bytes", "Resident item cache: bytes charged by resident items (resident) and the budget, item_cache_bytes (capacity).", "state")
	descItemItems = desc("kvd_item_cache_items", "Items resident in the item cache.")
	descItemLook  = desc("kvd_item_cache_lookups_total", "Item cache look-ups (GETs on the loop and on workers) by result (hit, miss).", "result")
	descBufBytes  = desc("kvd_buffer_bytes", "Network memory: bytes held in connections' unread input and unsent replies (held) and the max_buffer_bytes budget (limit).", "state")
	descPaused    = desc("kvd_connections_paused", "Connections paused now: not read or served because of max_buffer_bytes or max_conn_output.")
	descPauses    = desc("kvd_connection_pauses_total", "Times connections were paused, by reason (memory: the node over max_buffer_bytes; output: unsent replies over the per-connection cap; input: not read while its commands waited behind a running batch or an output stop, or past 4 MiB for a ticket or the throttle).", "reason")
	descMemClosed = desc("kvd_connections_closed_memory_total", "Connections closed for memory: the last resort over max_buffer_bytes, or one connection past its hard buffer limit.")
	descRefused   = desc("kvd_frames_refused_memory_total", "Frames refused at their header (0x82, SERVER_ERROR out of memory) because the connections' buffers had no room for all of them within max_buffer_bytes; their bodies are discarded as they arrive.")
	descItemEvict = desc("kvd_item_cache_evictions_total", "Items evicted from the item cache to stay within its budget.")
)

// collector reads the node's counters at scrape time.
type collector struct{ v *View }

func (collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descRU, descWU, descCommands, descTextCmds, descThrottled, descWait, descRejected,
		descClients, descItems, descReserved, descCapacity, descFreePool, descNodeLast, descConns, descConnsTot, descConnsSys, descConnsRej,
		descL0, descDebt, descFsync, descCacheHit, descCacheMiss, descCacheSize, descItemBytes, descItemItems, descItemLook, descItemEvict,
		descBufBytes, descPaused, descPauses, descMemClosed, descRefused} {
		ch <- d
	}
	describeIngress(ch)
	describeTotals(ch)
	describeLatency(ch)
	describeDeadline(ch)
	describeCluster(ch)
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	v := c.v
	parts, front := v.node.Parts(), v.node.Front()
	all := parts.Catalog.All()
	shown := v.shown(all, front)
	for _, b := range shown {
		v.collectBucket(ch, b)
	}
	node := parts.Throttle.Stats()
	emitGauge(ch, descCapacity, float64(node.Capacity))
	emitGauge(ch, descFreePool, float64(node.FreePool))
	emitGauge(ch, descNodeLast, float64(node.LastSecond))
	emitGauge(ch, descConns, float64(front.Conns))
	emitCounter(ch, descConnsTot, float64(front.TotalConns))
	emitGauge(ch, descConnsSys, float64(front.SystemConns))
	emitCounter(ch, descConnsRej, float64(front.RefusedConns))
	v.collectTotals(ch, all, len(shown))
	collectBuffers(ch, front.Buffers)
	collectPebble(ch, parts.DB)
	v.collectIngress(ch, parts.Ingress, shown)
	v.collectDeadline(ch, shown)
	collectCluster(ch, parts.Catalog)
}

// collectBucket sends one shown bucket's series.
func (v *View) collectBucket(ch chan<- prometheus.Metric, b *catalog.Bucket) {
	st, bs, name := b.Throttle().Stats(), v.node.State(b), b.Name()
	emitCounter(ch, descRU, float64(st.RU), name)
	emitCounter(ch, descWU, float64(st.WU), name)
	emitCounter(ch, descCommands, float64(st.Commands), name)
	emitCounter(ch, descTextCmds, float64(bs.TextCommands), name)
	emitCounter(ch, descThrottled, float64(st.Throttled), name)
	emitCounter(ch, descWait, float64(st.WaitUS)/1e6, name)
	emitCounter(ch, descRejected, float64(st.Rejected), name)
	emitGauge(ch, descClients, float64(st.Clients), name)
	emitGauge(ch, descItems, float64(b.Store().ItemCount()), name)
	emitGauge(ch, descReserved, float64(st.EffectiveReserved), name)
	if bs.Latency != nil {
		collectLatency(ch, bs.Latency, name)
	}
}

// collectBuffers sends the network memory figures STAT shows.
func collectBuffers(ch chan<- prometheus.Metric, f Buffers) {
	emitGauge(ch, descBufBytes, float64(f.Held), "held")
	emitGauge(ch, descBufBytes, float64(f.Limit), "limit")
	emitGauge(ch, descPaused, float64(f.Paused))
	emitCounter(ch, descPauses, float64(f.MemoryPauses), "memory")
	emitCounter(ch, descPauses, float64(f.OutputPauses), "output")
	emitCounter(ch, descPauses, float64(f.InputPauses), "input")
	emitCounter(ch, descMemClosed, float64(f.Closed))
	emitCounter(ch, descRefused, float64(f.Refused))
}

// collectPebble sends the storage figures: Pebble's and the item cache's.
func collectPebble(ch chan<- prometheus.Metric, db *engine.DB) {
	m := db.Pebble().Metrics()
	emitGauge(ch, descL0, float64(m.Levels[0].Sublevels))
	emitGauge(ch, descDebt, float64(m.Compact.EstimatedDebt))
	emitCounter(ch, descCacheHit, float64(m.BlockCache.Hits))
	emitCounter(ch, descCacheMiss, float64(m.BlockCache.Misses))
	emitGauge(ch, descCacheSize, float64(m.BlockCache.Size), "used")
	emitGauge(ch, descCacheSize, float64(db.BlockCacheSize()), "capacity")
	ic := db.CacheStats()
	emitGauge(ch, descItemBytes, float64(ic.Bytes), "resident")
	emitGauge(ch, descItemBytes, float64(max(ic.Capacity, 0)), "capacity")
	emitGauge(ch, descItemItems, float64(ic.Items))
	emitCounter(ch, descItemLook, float64(ic.Hits), "hit")
	emitCounter(ch, descItemLook, float64(ic.Misses), "miss")
	emitCounter(ch, descItemEvict, float64(ic.Evictions))
	if h := m.LogWriter.FsyncLatency; h != nil {
		var pb dto.Metric
		if h.Write(&pb) == nil && pb.Histogram != nil {
			ch <- fsyncHistogram(pb.Histogram)
		}
	}
}

func emitCounter(ch chan<- prometheus.Metric, d *prometheus.Desc, v float64, labels ...string) {
	ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
}

func emitGauge(ch chan<- prometheus.Metric, d *prometheus.Desc, v float64, labels ...string) {
	ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
}

// fsyncHistogram re-emits Pebble's fsync histogram (observed in
// nanoseconds, unnamed) in seconds under a kvd name.
func fsyncHistogram(h *dto.Histogram) prometheus.Metric {
	buckets := make(map[float64]uint64, len(h.Bucket))
	for _, b := range h.Bucket {
		buckets[b.GetUpperBound()/1e9] = b.GetCumulativeCount()
	}
	return prometheus.MustNewConstHistogram(descFsync, h.GetSampleCount(), h.GetSampleSum()/1e9, buckets)
}

var (
	descLatency   = desc("kvd_bucket_command_latency_seconds", "End-to-end latency of the bucket's data commands, from the frame complete to the reply written (throttle parking, ticket queueing, execution and WAL sync included), by class (read or write).", "bucket", "class")
	descParked    = desc("kvd_bucket_throttle_park_seconds", "Time the bucket's commands were parked by its throttle, per parked command, by class.", "bucket", "class")
	descQueueWait = desc("kvd_bucket_queue_wait_seconds", "Time the bucket's commands waited for an ingress ticket, per queued command, by class.", "bucket", "class")

	latencyDescs = [latency.NumKinds]*prometheus.Desc{descLatency, descParked, descQueueWait}
)

// describeLatency sends the latency descriptors (for collector.Describe).
func describeLatency(ch chan<- *prometheus.Desc) {
	for _, d := range latencyDescs {
		ch <- d
	}
}

// collectLatency sends a bucket's latency histograms (package latency) as
// const histograms, skipping those that never had an observation (a
// read-only bucket has no write series, a bucket never throttled has no
// parking series).
func collectLatency(ch chan<- prometheus.Metric, l *latency.Bucket, bucket string) {
	for kind := range latency.NumKinds {
		for class := range latency.Class(2) {
			var h latency.Hist
			l.MergeInto(&h, kind, class)
			buckets, count, sum := h.Snapshot()
			if count == 0 {
				continue
			}
			ch <- prometheus.MustNewConstHistogram(latencyDescs[kind], count, sum, buckets,
				bucket, latency.ClassNames[class])
		}
	}
}

var (
	descTickets    = desc("kvd_ingress_tickets", "Ingress tickets by pool (read, write, ingress = node cap) and state (out, available, total).", "pool", "state")
	descQueueLen   = desc("kvd_ingress_queue_length", "Commands waiting for an ingress ticket.", "pool")
	descIngressCnt = desc("kvd_ingress_commands_total", "Ingress events by pool and kind (started, finished, queued, dequeued, canceled, rejected, expired, exempt_started, exempt_finished).", "pool", "kind")
	descIngressSec = desc("kvd_ingress_time_seconds_total", "Time commands held tickets (processing) or waited for one (queued).", "pool", "phase")
	descProbeConc  = desc("kvd_probe_concurrency", "Pool sizes set by the throughput prober.", "pool")
	descProbeEvt   = desc("kvd_probe_events_total", "Prober steps and adjustments (probed_stable, probed_up, probed_down, increased, decreased).", "event")
	descMemory     = desc("kvd_memory_bytes", "Value bytes held by admitted commands (inflight), the max_inflight_bytes budget (limit, 0 = none) and the highest inflight since start (peak).", "state")
	descMemWaiting = desc("kvd_memory_waiting", "Queued commands whose value bytes do not fit the memory budget now.")
	descMemEvents  = desc("kvd_memory_commands_total", "Commands that waited for memory (waited) or were refused with 0x82 (rejected).", "kind")
	descBktInFl    = desc("kvd_bucket_in_flight", "Data commands of the bucket holding an ingress ticket.", "bucket")
	descBktQueue   = desc("kvd_bucket_queue_length", "Data commands of the bucket waiting for an ingress ticket.", "bucket")
	descBktQWait   = desc("kvd_bucket_queue_wait_seconds_total", "Time the bucket's commands waited for an ingress ticket.", "bucket")
	descBktTimeout = desc("kvd_bucket_timed_out_total", "Commands of the bucket answered 0x86 after waiting past the queue timeout.", "bucket")
	descBktFull    = desc("kvd_bucket_queue_full_total", "Commands of the bucket answered 0x85 because a queue was full.", "bucket")
	descProbeAmt   = desc("kvd_probe_amount_total", "Tickets the prober added (increased) or removed (decreased) from the stable concurrency.", "direction")
)

func describeIngress(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descTickets, descQueueLen, descIngressCnt, descIngressSec,
		descProbeConc, descProbeEvt, descProbeAmt, descMemory, descMemWaiting, descMemEvents,
		descBktInFl, descBktQueue, descBktQWait, descBktTimeout, descBktFull} {
		ch <- d
	}
}

// collectIngress exports the same figures STAT ingress shows, and the
// admission figures of the buckets shown.
func (v *View) collectIngress(ch chan<- prometheus.Metric, ing *ingress.Controller, shown []*catalog.Bucket) {
	st := ing.Stats()
	for _, p := range []struct {
		name string
		ps   ingress.PoolStats
	}{{"read", st.Read}, {"write", st.Write}, {"ingress", st.Node}} {
		collectPool(ch, p.name, p.ps)
	}
	g := func(d *prometheus.Desc, v float64, l ...string) { emitGauge(ch, d, v, l...) }
	c := func(d *prometheus.Desc, v float64, l ...string) { emitCounter(ch, d, v, l...) }
	g(descProbeConc, float64(st.Probe.ReadTotal), "read")
	g(descProbeConc, float64(st.Probe.WriteTotal), "write")
	c(descProbeEvt, float64(st.Probe.TimesProbedStable), "probed_stable")
	c(descProbeEvt, float64(st.Probe.TimesProbedUp), "probed_up")
	c(descProbeEvt, float64(st.Probe.TimesProbedDown), "probed_down")
	c(descProbeEvt, float64(st.Probe.TimesIncreased), "increased")
	c(descProbeEvt, float64(st.Probe.TimesDecreased), "decreased")
	c(descProbeAmt, float64(st.Probe.TotalAmountIncreased), "increased")
	c(descProbeAmt, float64(st.Probe.TotalAmountDecreased), "decreased")
	mem := st.Memory
	g(descMemory, float64(mem.InflightBytes), "inflight")
	g(descMemory, float64(mem.LimitBytes), "limit")
	g(descMemory, float64(mem.PeakBytes), "peak")
	g(descMemWaiting, float64(mem.Waiting))
	c(descMemEvents, float64(mem.Waited), "waited")
	c(descMemEvents, float64(mem.Rejected), "rejected")
	for _, b := range shown {
		bs, name := v.node.State(b).Admission.Stats(), b.Name()
		g(descBktInFl, float64(bs.InFlight), name)
		g(descBktQueue, float64(bs.QueueLength), name)
		c(descBktQWait, float64(bs.QueueWaitTimeUS)/1e6, name)
		c(descBktTimeout, float64(bs.NumTimedOut), name)
		c(descBktFull, float64(bs.NumQueueFull), name)
	}
}

func collectPool(ch chan<- prometheus.Metric, pool string, ps ingress.PoolStats) {
	g := func(d *prometheus.Desc, v int64, l ...string) { emitGauge(ch, d, float64(v), l...) }
	c := func(d *prometheus.Desc, v int64, l ...string) { emitCounter(ch, d, float64(v), l...) }
	g(descTickets, ps.Out, pool, "out")
	g(descTickets, ps.Available, pool, "available")
	g(descTickets, ps.Total, pool, "total")
	g(descQueueLen, ps.QueueLength, pool)
	for _, k := range []struct {
		kind string
		v    int64
	}{{"started", ps.Started}, {"finished", ps.Finished}, {"queued", ps.AddedToQueue},
		{"dequeued", ps.RemovedFromQueue}, {"canceled", ps.Canceled}, {"rejected", ps.Rejected},
		{"expired", ps.Expired}, {"exempt_started", ps.ExemptStarted}, {"exempt_finished", ps.ExemptFinished}} {
		c(descIngressCnt, k.v, pool, k.kind)
	}
	emitCounter(ch, descIngressSec, float64(ps.TotalTimeProcessingUS)/1e6, pool, "processing")
	emitCounter(ch, descIngressSec, float64(ps.TotalTimeQueuedUS)/1e6, pool, "queued")
}

var (
	descDlRejected = desc("kvd_bucket_deadline_rejected_total", "Commands of the bucket answered 0x86 because their deadline could not be met (deadline admission).", "bucket")
	descDlExpired  = desc("kvd_bucket_deadline_expired_total", "Commands of the bucket answered 0x86 because their deadline passed while they waited for a ticket.", "bucket")
	descDlMissed   = desc("kvd_bucket_deadline_missed_total", "Commands of the bucket whose reply was ready after their deadline.", "bucket")
	descDlWindow   = desc("kvd_bucket_deadline_window_seconds", "The execution-time percentile (deadline_percentile) of the bucket's window that its deadline demand uses, by command class.", "bucket", "class")
)

func describeDeadline(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descDlRejected, descDlExpired, descDlMissed, descDlWindow} {
		ch <- d
	}
}

// collectDeadline exports the deadline figures STAT bucket_details shows,
// for the buckets shown.
func (v *View) collectDeadline(ch chan<- prometheus.Metric, shown []*catalog.Bucket) {
	for _, b := range shown {
		st, name := v.node.State(b).Deadline.Stats(), b.Name()
		emitCounter(ch, descDlRejected, float64(st.Rejected), name)
		emitCounter(ch, descDlExpired, float64(st.Expired), name)
		emitCounter(ch, descDlMissed, float64(st.Missed), name)
		emitGauge(ch, descDlWindow, st.ReadPXX.Seconds(), name, "read")
		emitGauge(ch, descDlWindow, st.WritePXX.Seconds(), name, "write")
	}
}
