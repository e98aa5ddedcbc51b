package server

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/panjf2000/gnet/v2"

	"kvd/catalog"
	"kvd/engine"
	"kvd/ingress"
	"kvd/internal/clock"
	"kvd/internal/fdlimit"
	"kvd/internal/gnetlog"
	"kvd/internal/lograte"
	"kvd/internal/version"
	"kvd/netmem"
	"kvd/observe"
	"kvd/server/options"
	"kvd/slots"
	"kvd/tenant"
	"kvd/work"
)

// Server is a running kvd front end. Create it with New, start it with
// Start, stop it with Shutdown. Its methods are safe for concurrent use.
type Server struct {
	gnet.BuiltinEventEngine

	opts     Options
	log      *slog.Logger
	db       *engine.DB
	users    *tenant.Users
	cat      *catalog.Catalog // the buckets and the node's durable settings
	flow     *netmem.Budget   // network memory: bytes held, pauses
	throttle *tenant.Throttle
	lim      atomic.Pointer[Limits] // reloadable limits
	reloadMu sync.Mutex             // serializes Reconfigure
	ingress  *ingress.Controller
	deadline ingress.DeadlineGate // the node's ledger of accepted deadline demand, per pool
	started  time.Time
	pid      int
	// fileRefused: the config file's edit the catalog refused at start.
	fileRefused error
	// At most a line a second for what clients can repeat at will.
	closedLog, idleLog lograte.Limiter

	eng      gnet.Engine
	booted   chan struct{}
	runErr   chan error
	ran      chan struct{} // closed when gnet.Run returned: Shutdown stopped it, or an error (Done)
	stopping atomic.Bool
	lastOpen atomic.Int64  // UnixNano of the last OnOpen: drain waits for the accept queue
	usersGen atomic.Uint64 // bumped by each reload; see Server.revoke in reload.go

	conns      sync.Map    // the open connections: *conn → struct{}
	slots      slots.Slots // max_connections and the system band
	totalConns atomic.Int64
	connSeq    atomic.Uint64     // connections opened, numbering them (latency.Shards)
	scratches  netmem.Scratches  // each event loop's pass buffers (conn.go)
	work       *work.Pool        // runs the batches off the loops
	logins     *tenant.LoginGate // paces and verifies SASL attempts
	view       *observe.View     // STAT groups, /metrics and the node totals (node, below)

	stopHouse chan struct{}
	houseDone chan struct{}
}

// New validates opts, opens the engine and the catalog, applies the config
// file's catalog settings and returns a server ready to Start.
func New(opts Options) (*Server, error) {
	opts.EnsureDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	list, err := catalog.BuildUsers(opts.Users, opts.Logger)
	if err != nil {
		return nil, err
	}
	users, err := tenant.NewUsers(list)
	if err != nil {
		return nil, err
	}
	db, err := engine.Open(engine.Options{
		Dir:           opts.DataDir,
		WALSync:       !opts.DisableWALSync,
		CacheSize:     opts.CacheSize,
		ItemCacheSize: opts.ItemCacheSize,
		MaxValueSize:  opts.MaxItemSize,
		MaxOpenFiles:  opts.OpenFiles.Store,
		Logger:        opts.Logger,
	})
	if err != nil {
		return nil, err
	}
	s := &Server{
		opts:      opts,
		log:       opts.Logger,
		db:        db,
		users:     users,
		pid:       os.Getpid(),
		started:   opts.Now(), // Start sets it again; a scrape before it sees an uptime of 0
		booted:    make(chan struct{}),
		runErr:    make(chan error, 1),
		ran:       make(chan struct{}),
		stopHouse: make(chan struct{}),
		houseDone: make(chan struct{}),
		throttle:  tenant.NewThrottle(opts.NodeCapacity, clock.WholeSecond(opts.Now())), // a cluster's nodes tick together
		logins:    tenant.NewLoginGate(tenant.LoginOptions{Now: opts.Now}),
		flow:      netmem.New(opts.Logger),
		slots:     slots.Slots{Log: opts.Logger},
	}
	if err := s.open(); err != nil {
		_ = db.Close()
		return nil, err
	}
	return s, nil
}

// open builds what New needs beyond the engine: ingress, limits, metrics
// and the catalog, following the config file.
func (s *Server) open() (err error) {
	if s.ingress, err = ingress.New(s.opts.Ingress); err != nil {
		return err
	}
	s.lim.Store(options.LimitsOf(&s.opts))
	s.view = observe.New(node{s})
	s.cat, err = catalog.Open(catalog.Options{DB: s.db, Throttle: s.throttle,
		Defaults: s.opts.DefaultSettings, Logger: s.log, Observer: bucketHooks{s},
		Cluster: s.opts.Cluster, Now: s.opts.Now()})
	if err != nil {
		return err
	}
	if err := s.cat.ApplyFile(options.CatalogFile(&s.opts), "config"); err != nil {
		if !errors.Is(err, catalog.ErrFileConflict) {
			_ = s.cat.Close()
			return err
		}
		// As at a reload: the edit is refused and the settings in force (here,
		// those stored in the data directory) stay. A file that is invalid on
		// its own never gets here (Options.Validate).
		s.fileRefused = err
		s.log.Error("config edit rejected, stored settings kept", "err", err)
	}
	return nil
}

// Start begins serving and returns once the listener is bound.
func (s *Server) Start() error {
	s.started = s.opts.Now()
	s.startWorkers()
	go func() {
		s.runErr <- gnet.Run(s, "tcp://"+s.opts.Listen, gnet.WithMulticore(true),
			gnet.WithNumEventLoop(s.opts.Loops), gnet.WithTCPNoDelay(gnet.TCPNoDelay),
			gnet.WithReuseAddr(true), gnet.WithLogger(gnetlog.Logger{L: s.log}))
		close(s.ran)
	}()
	select {
	case <-s.booted:
	case err := <-s.runErr:
		return fmt.Errorf("server: listen %s: %w", s.opts.Listen, err)
	}
	go s.housekeeping()
	return nil
}

// Done is closed once gnet stops serving: at Shutdown, or on its own (a failed accept; Shutdown says why).
func (s *Server) Done() <-chan struct{} { return s.ran }

// startWorkers starts the pool that runs batches off the loops.
func (s *Server) startWorkers() {
	s.work = work.Start(work.Options{Ingress: s.ingress, DB: s.db, WALSync: !s.opts.DisableWALSync,
		Meter: s.meter, Executed: s.view.Executed, WriteUnitSize: func() int { return s.limits().WriteUnitSize },
		Now: s.opts.Now, Logger: s.log})
}

// FileRefused is the config file's edit refused at start (a conflict with
// run-time settings), nil if it applied: to be tried again as a reload's.
func (s *Server) FileRefused() error { return s.fileRefused }

// Addr is the protocol address the server listens on.
func (s *Server) Addr() string { return s.opts.Listen }

// Close releases the engine (and leaves the cluster) of a server that was never started.
func (s *Server) Close() error {
	cerr := s.cat.Close()
	if err := s.db.Close(); err != nil {
		return err
	}
	return cerr
}

// OnBoot records the engine handle and sets the listen backlog.
func (s *Server) OnBoot(eng gnet.Engine) gnet.Action {
	s.eng = eng
	if err := fdlimit.SetBacklog(eng.Dup, s.opts.OpenFiles.Backlog); err != nil {
		s.log.Warn("cannot set the listen backlog", "backlog", s.opts.OpenFiles.Backlog, "err", err)
	}
	close(s.booted)
	return gnet.None
}

// OnOpen admits a connection within max_connections or the system band
// (package slots) and selects the anonymous bucket for it.
func (s *Server) OnOpen(gc gnet.Conn) ([]byte, gnet.Action) {
	remote := ""
	if a := gc.RemoteAddr(); a != nil {
		remote = a.String()
	}
	lim := s.limits()
	slot := s.slots.Open(s.opts.Now(), lim.MaxConnections, lim.SystemConnections, tooMany{gc}, remote)
	if !slot.Held() { // while stopping too: onShutdown answers it
		return tooManyConns, gnet.Close
	}
	s.totalConns.Add(1)
	s.lastOpen.Store(time.Now().UnixNano())
	c := newConn(s, gc, remote)
	c.slot = slot
	gc.SetContext(c)
	s.conns.Store(c, struct{}{})
	c.anonymous()
	return nil, gnet.None
}

// tooMany closes a system-band connection for package slots (recycled, or
// past the login grace) with memcached's answer past max_connections.
type tooMany struct{ gnet.Conn }

var tooManyConns = []byte("ERROR Too many open connections\r\n")

func (t tooMany) Close() error {
	return t.AsyncWrite(tooManyConns, func(c gnet.Conn, _ error) error { return c.Close() })
}

// OnClose releases the connection's state. A batch still in flight finishes
// on its worker and is dropped there.
func (s *Server) OnClose(gc gnet.Conn, _ error) gnet.Action {
	c, ok := gc.Context().(*conn)
	if !ok {
		return gnet.None
	}
	s.conns.Delete(c)
	c.close()
	s.slots.Close(c.slot)
	return gnet.None
}

// OnTraffic runs whenever the connection has input or a worker woke it.
func (s *Server) OnTraffic(gc gnet.Conn) gnet.Action {
	c, ok := gc.Context().(*conn)
	if !ok {
		return gnet.Close
	}
	return c.onTraffic()
}

// housekeepingPeriod is how often the housekeeping goroutine runs: the
// throttle's second boundaries are met within this.
const housekeepingPeriod = 10 * time.Millisecond

// housekeeping is the server's one background goroutine: it ends throttle
// seconds (waking the parked connections), then in a cluster publishes the
// node's demand and applies its shares (catalog.TickCluster, which never
// waits for etcd), runs the prober and the queue timeouts, closes
// connections that held an unfinished frame past the idle timeout, and
// keeps network memory within its budget (netmem.Budget.Tick). It touches
// only atomics, short locks and concurrency-safe gnet calls.
func (s *Server) housekeeping() {
	defer close(s.houseDone)
	t := time.NewTicker(housekeepingPeriod)
	defer t.Stop()
	lastSweep, lastProbe, lastTicks := s.opts.Now(), s.opts.Now(), int64(0)
	sweepEvery := min(s.limits().IdleTimeout/4, time.Second)
	probeEvery := s.opts.Ingress.Probe.Interval
	for {
		select {
		case <-s.stopHouse:
			return
		case <-t.C:
		}
		now := s.opts.Now()
		s.tick(now)
		s.flow.Tick(now, s.limits().MaxBufferBytes, s.holders)
		if ticks := s.throttle.Stats().Ticks; ticks != lastTicks {
			lastTicks = ticks // a second ended (here or on a loop): the cluster's share
			s.cat.TickCluster(now)
		}
		if now.Sub(lastProbe) >= probeEvery {
			lastProbe = now
			s.ingress.Tick(now)
		} else {
			s.ingress.Expire(now) // queue timeouts to within housekeepingPeriod
		}
		if now.Sub(lastSweep) >= sweepEvery {
			lastSweep = now
			s.closeIdle(now.Add(-s.limits().IdleTimeout).UnixNano())
			s.slots.Expire(now)
		}
	}
}

// eachConn calls f for every open connection until it returns false.
func (s *Server) eachConn(f func(c *conn) bool) {
	s.conns.Range(func(k, _ any) bool { return f(k.(*conn)) })
}

// holders lists the open connections' shares of the network memory budget.
func (s *Server) holders(yield func(*netmem.Holder) bool) {
	s.eachConn(func(c *conn) bool { return yield(&c.mem) })
}

// closeIdle closes the connections that have held an unfinished frame since before.
func (s *Server) closeIdle(before int64) {
	s.eachConn(func(c *conn) bool {
		if p := c.partialSince.Load(); p != 0 && p < before {
			if ok, more := s.idleLog.Allow(s.opts.Now()); ok {
				s.log.Info("closing connection", "remote", c.remote, "reason", "unfinished frame past idle timeout", "more_not_logged", more)
			}
			_ = c.gc.Close()
		}
		return true
	})
}

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
	held := s.slots.Stats()
	return observe.Front{
		Now: s.opts.Now(), Started: s.started, PID: s.pid, Version: version.Kvd, Threads: s.opts.Loops,
		Conns: int64(held.Ordinary + held.Band), SystemConns: int64(held.Band), TotalConns: s.totalConns.Load(),
		RefusedConns: held.Refused, MaxConns: lim.MaxConnections,
		BucketLimit: lim.MetricsBucketLimit, Settings: func() [][2]string { return options.StatSettings(&s.opts, lim) },
		Buffers: observe.Buffers{Held: f.Held, Limit: lim.MaxBufferBytes, Paused: int64(f.Paused),
			MemoryPauses: f.MemPauses, OutputPauses: f.OutPauses, InputPauses: f.InPauses, Closed: f.Closed,
			Refused: f.Refused},
	}
}

func (n node) State(b *catalog.Bucket) observe.BucketState {
	st := stateOf(b)
	return observe.BucketState{TextCommands: st.textCommands.Load(), Latency: st.lat.Load(), Admission: st.adm, Deadline: st.dl}
}

// MetricsHandler serves the Prometheus metrics.
func (s *Server) MetricsHandler() http.Handler { return s.view.Handler() }
