package server

import (
	"net/http"

	"kvd/catalog"
	"kvd/observe"
)

// The operator's view of the node (STAT groups, /metrics, node totals) is
// package observe's; this is what it reads of the server (observe.Node).

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
