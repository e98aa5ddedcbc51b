package ingress

import "kvd/probe"

// PoolStats are one pool's ticket figures (SPEC section 6), or the node cap's, which
// add up both pools. Counters only grow; Out, Available, Total and QueueLength are
// current values.
type PoolStats struct {
	// Out is the number of normal tickets in use; Total the pool's size (the node cap
	// for the node); Available = max(Total − Out, 0). Out exceeds Total only while a
	// shrink converges.
	Out, Available, Total int64
	// QueueLength is the number of waiters queued now.
	QueueLength int64
	// AddedToQueue counts waiters queued; RemovedFromQueue those that left the queue,
	// granted, expired or canceled. AddedToQueue = RemovedFromQueue + QueueLength.
	AddedToQueue, RemovedFromQueue int64
	// Started counts normal tickets taken (admitted at once or granted from the queue);
	// Finished those released. Started = Finished + Out. Finished is the prober's
	// throughput input.
	Started, Finished int64
	// TotalTimeProcessingUS sums, over released normal tickets, the time from
	// acquisition (or grant) to release; TotalTimeQueuedUS sums, over waiters that left
	// the queue, the time they waited. Microseconds; sub-microsecond parts carry over.
	TotalTimeProcessingUS, TotalTimeQueuedUS int64
	// Canceled, Rejected and Expired count waiters removed by Cancel, commands refused
	// by Acquire, and waiters expired by Tick.
	Canceled, Rejected, Expired int64
	// ExemptStarted and ExemptFinished count exempt tickets (StartExempt) taken and
	// released.
	ExemptStarted, ExemptFinished int64
	// StaleReleases counts Releases that changed nothing: a ticket released twice, a
	// zero Ticket, or more exempt releases than exempt starts. Nonzero means a bug in
	// the caller.
	StaleReleases int64
}

// Stats are a Controller's figures: both pools, the node cap, the memory budget and the
// prober. Per-bucket figures come from Bucket.Stats.
type Stats struct {
	Read, Write, Node PoolStats
	Memory            MemoryStats
	Probe             probe.Stats
}

// Stats returns a consistent snapshot of every figure.
func (c *Controller) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := Stats{
		Read:   c.pools[Read].statsLocked(),
		Write:  c.pools[Write].statsLocked(),
		Memory: c.mem.stats(),
		Probe:  c.prober.Stats(),
	}
	s.Node = sumStats(s.Read, s.Write)
	s.Node.Total = c.nodeTotal
	s.Node.Available = max(c.nodeTotal-s.Node.Out, 0)
	return s
}

func (p *pool) statsLocked() PoolStats {
	s := p.st
	s.Out, s.Total, s.QueueLength = int64(p.out), int64(p.size), int64(p.queued)
	s.Available = max(s.Total-s.Out, 0)
	return s
}

// MemoryStats are the memory budget's figures (STAT ingress memory_…).
type MemoryStats struct {
	// InflightBytes are the bytes charged to normal tickets in use; LimitBytes the
	// budget (0: none); PeakBytes the highest InflightBytes since start.
	InflightBytes, LimitBytes, PeakBytes int64
	// Waiting counts queued commands that found their bytes short of the budget (now);
	// Waited counts every command that ever did.
	Waiting, Waited int64
	// Rejected counts commands refused as TooLarge.
	Rejected int64
}

func (m *memory) stats() MemoryStats {
	return MemoryStats{
		InflightBytes: m.inflight, LimitBytes: m.limit, PeakBytes: m.peak,
		Waiting: m.waiting, Waited: m.waited, Rejected: m.rejected,
	}
}

// sumStats adds two pools' figures field by field.
func sumStats(a, b PoolStats) PoolStats {
	av, bv := a.values(), b.values()
	for i := range av {
		av[i] += bv[i]
	}
	return statsFromValues(av)
}

// poolFigures are the per-pool figure names, in Figures order, without the prefix.
// values and statsFromValues follow the same order.
var poolFigures = [...]string{
	"out", "available", "total", "queue_length", "added_to_queue", "removed_from_queue",
	"started", "finished", "total_time_processing_us", "total_time_queued_us",
	"canceled", "rejected", "expired", "exempt_started", "exempt_finished",
	"stale_releases",
}

const numPoolFigures = len(poolFigures)

// values returns the figures in poolFigures order.
func (s *PoolStats) values() [numPoolFigures]int64 {
	return [numPoolFigures]int64{
		s.Out, s.Available, s.Total, s.QueueLength, s.AddedToQueue, s.RemovedFromQueue,
		s.Started, s.Finished, s.TotalTimeProcessingUS, s.TotalTimeQueuedUS,
		s.Canceled, s.Rejected, s.Expired, s.ExemptStarted, s.ExemptFinished,
		s.StaleReleases,
	}
}

// statsFromValues is the inverse of values.
func statsFromValues(v [numPoolFigures]int64) PoolStats {
	return PoolStats{
		Out: v[0], Available: v[1], Total: v[2], QueueLength: v[3], AddedToQueue: v[4],
		RemovedFromQueue: v[5], Started: v[6], Finished: v[7], TotalTimeProcessingUS: v[8],
		TotalTimeQueuedUS: v[9], Canceled: v[10], Rejected: v[11], Expired: v[12],
		ExemptStarted: v[13], ExemptFinished: v[14], StaleReleases: v[15],
	}
}

// figurePrefixes name the three sets of pool figures, in Figures order.
var figurePrefixes = [...]string{"read_", "write_", "ingress_"}

// figureNames are the full names of the pool figures, built once.
var figureNames = func() (names [len(figurePrefixes)][numPoolFigures]string) {
	for i, prefix := range figurePrefixes {
		for j, f := range poolFigures {
			names[i][j] = prefix + f
		}
	}
	return names
}()

// probeFigures are the prober's figure names, in Figures order.
var probeFigures = [...]string{
	"probe_times_probed_stable", "probe_times_probed_up", "probe_times_probed_down",
	"probe_times_increased", "probe_times_decreased",
	"probe_total_amount_increased", "probe_total_amount_decreased",
	"probe_read_total", "probe_write_total",
}

// memoryFigures are the memory budget's figure names, in Figures order.
var memoryFigures = [...]string{
	"memory_inflight_bytes", "memory_limit_bytes", "memory_peak_bytes",
	"memory_waiting", "memory_waited", "memory_rejected",
}

// Figures calls fn once per figure, named as SPEC section 6 wants them for STAT
// `ingress` and Prometheus, in a fixed order: the read pool's figures ("read_out",
// "read_available", "read_total", "read_queue_length", "read_added_to_queue",
// "read_removed_from_queue", "read_started", "read_finished",
// "read_total_time_processing_us", "read_total_time_queued_us", "read_canceled",
// "read_rejected", "read_expired", "read_exempt_started", "read_exempt_finished",
// "read_stale_releases"), the same for "write_" and for "ingress_" (the node cap), then
// the prober's ("probe_times_probed_stable", "probe_times_probed_up",
// "probe_times_probed_down", "probe_times_increased", "probe_times_decreased",
// "probe_total_amount_increased", "probe_total_amount_decreased", "probe_read_total",
// "probe_write_total"), then the memory budget's ("memory_inflight_bytes",
// "memory_limit_bytes", "memory_peak_bytes", "memory_waiting", "memory_waited",
// "memory_rejected"). It does not allocate.
func (s Stats) Figures(fn func(name string, value int64)) {
	for i, ps := range [...]*PoolStats{&s.Read, &s.Write, &s.Node} {
		v := ps.values()
		for j, name := range figureNames[i] {
			fn(name, v[j])
		}
	}
	p := s.Probe
	v := [len(probeFigures)]int64{
		p.TimesProbedStable, p.TimesProbedUp, p.TimesProbedDown,
		p.TimesIncreased, p.TimesDecreased,
		p.TotalAmountIncreased, p.TotalAmountDecreased,
		int64(p.ReadTotal), int64(p.WriteTotal),
	}
	for i, name := range probeFigures {
		fn(name, v[i])
	}
	m := s.Memory
	mv := [len(memoryFigures)]int64{m.InflightBytes, m.LimitBytes, m.PeakBytes, m.Waiting, m.Waited, m.Rejected}
	for i, name := range memoryFigures {
		fn(name, mv[i])
	}
}
