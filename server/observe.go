package server

import (
	"net/http"

	"kvd/catalog"
	"kvd/command"
	"kvd/observe"
	mc "kvd/protocol/binary"
)

// The operator's view of the node (STAT groups, /metrics, node totals) is
// package observe's; this is what it reads of the server (observe.Node) and
// the forwarders the connections' STAT commands call.

// node is the server as package observe reads it.
type node struct{ s *Server }

func (n node) Parts() observe.Parts {
	s := n.s
	return observe.Parts{Catalog: s.cat, Throttle: s.throttle, Ingress: s.ingress, DB: s.db}
}

func (n node) Front() observe.Front {
	s, lim, f := n.s, n.s.limits(), n.s.flow.Stats()
	return observe.Front{
		Now: s.opts.Now(), Started: s.started, PID: s.pid, Version: Version, Threads: s.opts.Loops,
		Conns: s.currConns.Load(), TotalConns: s.totalConns.Load(), MaxConns: lim.MaxConnections,
		BucketLimit: lim.MetricsBucketLimit,
		Buffers: observe.Buffers{Held: f.Held, Limit: lim.MaxBufferBytes, Paused: int64(f.Paused),
			MemoryPauses: f.MemPauses, OutputPauses: f.OutPauses, Closed: f.Closed},
	}
}

func (n node) State(b *catalog.Bucket) observe.BucketState {
	st := stateOf(b)
	return observe.BucketState{TextCommands: st.textCommands.Load(), Latency: st.lat.Load(), Admission: st.adm, Deadline: st.dl}
}

// MetricsHandler serves the Prometheus metrics.
func (s *Server) MetricsHandler() http.Handler { return s.view.Handler() }

// generalStats is the general STAT group of a connection that has b
// selected (b may be nil).
func (s *Server) generalStats(b *catalog.Bucket, emit observe.Emit) { s.view.General(b, emit) }

// bucketDetails is STAT "bucket_details [name]": the statistic's name and
// JSON document, or the status and reason of a refusal.
func (s *Server) bucketDetails(name string, canSee func(string) bool) (string, []byte, mc.Status, string) {
	key, doc, err := s.view.BucketDetails(name, canSee)
	if err != nil {
		st, reason := command.StatusOf(err)
		return "", nil, st, reason
	}
	return key, doc, mc.StatusOK, ""
}

// clusterStats is STAT "cluster"; a single node answers 0x01.
func (s *Server) clusterStats(canSee func(string) bool) ([]byte, mc.Status, string) {
	doc, err := s.view.Cluster(canSee)
	if err != nil {
		st, reason := command.StatusOf(err)
		return nil, st, reason
	}
	return doc, mc.StatusOK, ""
}

func (s *Server) throttleStats(emit observe.Emit) { s.view.Throttle(emit) }
func (s *Server) ingressStats(emit observe.Emit)  { s.view.Ingress(emit) }
