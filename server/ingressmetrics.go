package server

import (
	"github.com/prometheus/client_golang/prometheus"

	"kvd/ingress"
	mc "kvd/protocol/binary"
)

var (
	descTickets    = desc("kvd_ingress_tickets", "Ingress tickets by pool (read, write, ingress = node cap) and state (out, available, total).", "pool", "state")
	descQueueLen   = desc("kvd_ingress_queue_length", "Commands waiting for an ingress ticket.", "pool")
	descIngressCnt = desc("kvd_ingress_commands_total", "Ingress events by pool and kind (started, finished, queued, dequeued, canceled, rejected, expired, exempt_started, exempt_finished).", "pool", "kind")
	descIngressSec = desc("kvd_ingress_time_seconds_total", "Time commands held tickets (processing) or waited for one (queued).", "pool", "phase")
	descProbeConc  = desc("kvd_probe_concurrency", "Pool sizes set by the throughput prober.", "pool")
	descProbeEvt   = desc("kvd_probe_events_total", "Prober steps and adjustments (probed_stable, probed_up, probed_down, increased, decreased).", "event")
	descProbeAmt   = desc("kvd_probe_amount_total", "Tickets the prober added (increased) or removed (decreased) from the stable concurrency.", "direction")
)

func describeIngress(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descTickets, descQueueLen, descIngressCnt, descIngressSec,
		descProbeConc, descProbeEvt, descProbeAmt} {
		ch <- d
	}
}

// collectIngress exports the same figures STAT ingress shows.
func (s *Server) collectIngress(ch chan<- prometheus.Metric) {
	st := s.ingress.Stats()
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

// ingressStats answers STAT "ingress": one stat per figure, named
// <pool>_<figure> and probe_<figure> as SPEC section 6 lists them.
func (c *conn) ingressStats(req *mc.Request) {
	c.srv.ingress.Stats().Figures(func(name string, v int64) { c.statInt(req, name, v) })
}
