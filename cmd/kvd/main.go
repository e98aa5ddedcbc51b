// Command kvd is the kvd daemon: a multi-tenant memcached-binary-protocol
// server on Pebble. With no flags it serves 127.0.0.1:11211 from ./data with
// config/serverless.json (or the copy embedded in the binary).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"golang.org/x/net/netutil"

	"kvd/config"
	"kvd/server"
	"kvd/server/options"
)

const defaultConfig = "config/serverless.json"

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "kvd:", err)
		os.Exit(1)
	}
}

func run() error {
	listen := flag.String("listen", options.DefaultListen, "protocol address")
	dataDir := flag.String("data-dir", options.DefaultDataDir, "data directory")
	cfgPath := flag.String("config", "", "config file (default "+defaultConfig+", else the embedded copy)")
	metrics := flag.String("metrics-listen", "127.0.0.1:11280", "Prometheus address; empty disables")
	level := flag.String("log-level", "info", "debug, info, warn or error")
	clusterEndpoints := flag.String("cluster", "", "join a cluster through these etcd endpoints (comma-separated); empty: a single node")
	nodeName := flag.String("node-name", "", "this node's name in the cluster (required with --cluster)")
	flag.Parse()
	// From the start: a signal while the store opens (100,000 buckets take
	// a while) stops kvd cleanly once it is up, not with the default exit.
	// SIGUSR1 is memcached's graceful stop. SIGHUP, whose default would
	// end kvd at once, checks the config file now (operators' habit).
	sig, hup := make(chan os.Signal, 1), make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT, syscall.SIGUSR1)
	signal.Notify(hup, syscall.SIGHUP)
	// A log line written after the reader of kvd's stdout or stderr went
	// (a pipe's) would end kvd with SIGPIPE; noticed, the write fails and
	// kvd serves on, as memcached, which ignores SIGPIPE.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)

	log, err := newLogger(*level)
	if err != nil {
		return err
	}
	cfg, source, loaded, err := loadConfig(*cfgPath)
	if err != nil {
		return err
	}
	log.Info("config loaded", "source", source)
	setGoMemoryLimit(log)
	opts := serverOptions(cfg, *listen, *dataDir, log)
	if opts.Cluster, err = clusterOptions(*clusterEndpoints, *nodeName, *listen, log); err != nil {
		return err
	}
	warnOpenFiles(log, &opts)
	if fi, err := os.Stat(source); err == nil {
		opts.ConfigModTime = fi.ModTime()
	}
	srv, err := server.New(opts)
	if err != nil {
		return err
	}
	if *metrics != "" { // listening before the protocol port: whoever reaches kvd can scrape it
		stop, err := serveMetrics(*metrics, srv.MetricsHandler(), log)
		if err != nil {
			_ = srv.Close()
			return err
		}
		defer stop()
	}
	if err := srv.Start(); err != nil {
		_ = srv.Close()
		return err
	}
	log.Info("kvd serving", "listen", *listen, "data_dir", *dataDir, "wal_sync", !opts.DisableWALSync)

	if source != "embedded default" {
		defer startWatcher(source, loaded, *listen, *dataDir, srv, hup, log).Stop()
	} else {
		go func() {
			for range hup {
				log.Info("SIGHUP: no config file to check (the embedded default runs)")
			}
		}()
	}

	var stopped error
	select {
	case got := <-sig:
		log.Info("shutting down", "signal", got.String())
	case <-srv.Done(): // gnet stopped its engine: exit, for a supervisor to start kvd again
		stopped = errors.New("the protocol listener stopped on its own (see the log)")
		log.Error("shutting down", "reason", stopped)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = srv.Shutdown(ctx)
	if stopped == nil {
		return err
	}
	if err != nil {
		log.Error("shutdown after the listener stopped", "err", err)
	}
	return stopped
}

// setGoMemoryLimit sets the Go runtime's soft memory limit to
// options.GoMemoryLimit, unless the GOMEMLIMIT environment variable has set
// one (the runtime applies it; "off" keeps none).
func setGoMemoryLimit(log *slog.Logger) {
	if env := os.Getenv("GOMEMLIMIT"); env != "" {
		log.Info("go memory limit", "from", "GOMEMLIMIT", "value", env)
		return
	}
	if lim := options.GoMemoryLimit(); lim > 0 {
		debug.SetMemoryLimit(lim)
		log.Info("go memory limit", "bytes", lim, "of", "nine tenths of the memory (MemTotal, or the cgroup's memory.max if lower)")
	}
}

// warnOpenFiles logs when the open-file limit holds max_connections or
// the system band below its setting (options.LimitsOf, package fdlimit).
func warnOpenFiles(log *slog.Logger, o *options.Options) {
	o.EnsureDefaults()
	l, p := options.LimitsOf(o), o.OpenFiles
	unbound := *o
	unbound.OpenFiles.Limit = 0 // LimitsOf then applies no open-file limit
	want := options.LimitsOf(&unbound)
	if (l.MaxConnections < want.MaxConnections || l.SystemConnections < want.SystemConnections) && p.Err() == nil {
		log.Warn("max_connections lowered to what the open-file limit allows", "max_connections", want.MaxConnections,
			"in_force", l.MaxConnections, "system_connections", want.SystemConnections,
			"system_in_force", l.SystemConnections, "open_file_limit", p.Limit, "store_files", p.Store,
			"listen_backlog", p.Backlog, "raise_with", "ulimit -n, or LimitNOFILE= under systemd")
	}
}

// clusterOptions are the options of --cluster and --node-name; nil
// without --cluster.
func clusterOptions(endpoints, node, listen string, log *slog.Logger) (*options.ClusterOptions, error) {
	if endpoints == "" {
		if node != "" {
			return nil, errors.New("--node-name needs --cluster")
		}
		return nil, nil
	}
	if node == "" {
		return nil, errors.New("--cluster needs --node-name")
	}
	return &options.ClusterOptions{Endpoints: strings.Split(endpoints, ","), NodeName: node,
		Address: listen, Logger: log}, nil
}

// loadConfig reads and checks the config (readConfig, then checkConfig).
func loadConfig(path string) (*config.File, string, []byte, error) {
	cfg, source, data, err := readConfig(path)
	if err == nil {
		if err = checkConfig(cfg); err != nil {
			err = fmt.Errorf("%s: %w", source, err)
		}
	}
	return cfg, source, data, err
}

// readConfig reads the named file, or the default file when it exists, or
// the embedded default. It returns the bytes it parsed, which the watcher
// compares the file with: an edit made while kvd starts is then seen.
func readConfig(path string) (*config.File, string, []byte, error) {
	source := path
	if source == "" {
		source = defaultConfig
	}
	cfg, data, err := config.Load(source)
	if path == "" && errors.Is(err, fs.ErrNotExist) {
		cfg, err := config.Parse(config.Embedded)
		return cfg, "embedded default", config.Embedded, err
	}
	return cfg, source, data, err
}

// checkConfig checks what config.Validate cannot, because it needs the
// server's defaults for the fields the file leaves out: that the frame cap
// leaves room for a maximal item.
func checkConfig(cfg *config.File) error {
	return config.CheckFrameHeadroom(orDefault(cfg.MaxItemSize, options.DefaultMaxItemSize),
		orDefault(cfg.MaxFrameSize, options.DefaultMaxFrameSize))
}

// orDefault returns *p, or def when the file left the field out.
func orDefault[T any](p *T, def T) T {
	if p == nil {
		return def
	}
	return *p
}

// orZero returns *p, or the zero value (the server's default) when the
// file left the field out.
func orZero[T any](p *T) T {
	var zero T
	return orDefault(p, zero)
}

// noneIfZero is an int field whose 0 means none (the server's negative)
// and whose absence the server's default.
func noneIfZero(p *int) int {
	if p != nil && *p == 0 {
		return -1
	}
	return orZero(p)
}

// millis converts a field in milliseconds; 0 (left out) stays 0, the
// server's default.
func millis(p *int) time.Duration { return time.Duration(orZero(p)) * time.Millisecond }

func serverOptions(cfg *config.File, listen, dataDir string, log *slog.Logger) server.Options {
	opts := server.Options{
		Listen:                  listen,
		DataDir:                 dataDir,
		DisableWALSync:          !orDefault(cfg.WALSync, options.DefaultWALSync),
		AnonymousBucket:         cfg.AnonymousBucket,
		DisableText:             !orDefault(cfg.TextProtocol, options.DefaultTextProtocol),
		MaxConnections:          orZero(cfg.MaxConnections),
		SystemConnections:       noneIfZero(cfg.SystemConnections),
		MaxConnectionsPerBucket: orZero(cfg.MaxConnectionsPerBucket),
		IdleTimeout:             millis(cfg.IdleTimeoutMS),
		MaxFrameSize:            orZero(cfg.MaxFrameSize),
		MaxItemSize:             orZero(cfg.MaxItemSize),
		MaxBufferBytes:          orZero(cfg.MaxBufferBytes),
		ItemCacheSize:           cfg.ItemCacheBytes,
		CacheSize:               cfg.BlockCacheBytes,
		NodeCapacity:            cfg.NodeCapacity,
		ReadUnitSize:            cfg.ReadUnitSize,
		WriteUnitSize:           cfg.WriteUnitSize,
		MaxThrottleWait:         millis(cfg.MaxThrottleWaitMS),
		MetricsBucketLimit:      orZero(cfg.MetricsBucketLimit),
		Ingress:                 ingressOptions(cfg.Ingress),
		Logger:                  log,
		DefaultSettings: options.BucketSettings{
			Reserved:  int64(cfg.DefaultThrottleReservedUnits),
			HardLimit: int64(cfg.DefaultThrottleHardLimit),
		},
	}
	opts.Ingress.MaxInflightBytes = inflightBytes(cfg.MaxInflightBytes, options.DefaultMaxInflightBytes())
	for _, b := range cfg.Buckets {
		opts.Buckets = append(opts.Buckets, server.BucketSpec{Name: b.Name, Settings: bucketSettings(b, opts.DefaultSettings)})
	}
	for _, u := range cfg.Users {
		opts.Users = append(opts.Users, options.UserSpec{
			Name: u.Name, Password: u.Password, PasswordHash: u.PasswordHash,
			Buckets: u.Buckets, Privileges: u.Privileges,
		})
	}
	return opts
}

func bucketSettings(b config.Bucket, def options.BucketSettings) options.BucketSettings {
	s := def
	if b.Reserved != nil {
		s.Reserved = int64(*b.Reserved)
	}
	if b.HardLimit != nil {
		s.HardLimit = int64(*b.HardLimit)
	}
	s.MaxConcurrent, s.MaxQueued = b.MaxConcurrent, b.MaxQueued
	s.QueueTimeout = time.Duration(b.QueueTimeoutMS) * time.Millisecond
	s.Deadline = time.Duration(b.DeadlineMS) * time.Millisecond
	s.DeadlinePercentile = b.DeadlinePercentile
	s.ExpectedExecution = time.Duration(b.ExpectedExecutionUS) * time.Microsecond
	return s
}

func ingressOptions(in config.Ingress) options.IngressOptions {
	o := options.IngressOptions{
		NodeTickets:   in.Tickets,
		MaxQueueDepth: in.MaxQueueDepth,
		QueueTimeout:  time.Duration(in.QueueTimeoutMS) * time.Millisecond,
		FIFO:          !in.FairDequeue,
	}
	if in.MaxQueueDepth == 0 {
		o.MaxQueueDepth = options.NoQueue // the config's 0 means: no queue at all
	}
	p := in.Probe
	o.Probe.Interval = time.Duration(p.IntervalMS) * time.Millisecond
	o.Probe.Min, o.Probe.Max, o.Probe.Initial = p.Min, p.Max, p.Initial
	o.Probe.ReadWriteRatio, o.Probe.EMAWeight, o.Probe.Step = p.ReadWriteRatio, p.EMAWeight, p.Step
	return o
}

func newLogger(level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: l})), nil
}

// metricsConns bounds the metrics port's open connections (within
// fdlimit's share for kvd's own descriptors); more wait in the backlog.
// An idle one is closed after metricsIdle, a stalled request's headers
// after 10 s, so that clients that hold connections cannot keep the port.
const (
	metricsConns = 32
	metricsIdle  = time.Minute
)

// serveMetrics serves /metrics (and /debug/pprof) on addr until stop.
func serveMetrics(addr string, metrics http.Handler, log *slog.Logger) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-listen: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", metrics)
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace) // the scheduler's view: go tool trace
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: metricsIdle}
	go func() {
		if err := hs.Serve(netutil.LimitListener(ln, metricsConns)); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics listener failed", "addr", addr, "err", err)
		}
	}()
	log.Info("metrics serving", "addr", addr)
	return func() { _ = hs.Close() }, nil
}
