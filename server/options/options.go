// Package options owns what configures a kvd server: the fields of
// Options, each one's default (stated once, in Defaults…, which the daemon's
// flags, the shipped config file and the README must agree with), and the
// combinations that cannot work (Validate). Package server takes an Options;
// the daemon builds one from its config file without the server's
// internals.
package options

import (
	"cmp"
	"fmt"
	"log/slog"
	"net"
	"runtime"
	"strconv"
	"time"

	"kvd/catalog"
	"kvd/engine"
	"kvd/ingress"
	"kvd/internal/clock"
	"kvd/internal/fdlimit"
	"kvd/netmem"
	"kvd/tenant"
)

// BucketSpec is a bucket the server makes sure exists when it starts.
type BucketSpec struct {
	Name     string
	Settings BucketSettings
}

// The types and values of the packages Options is made of, so that a
// program that starts a server needs no other package.
type (
	BucketSettings = tenant.Settings        // a bucket's throttle and admission settings
	IngressOptions = ingress.Options        // ticketed admission and its prober
	UserSpec       = catalog.UserSpec       // a configured user (in a cluster, etcd's)
	ClusterOptions = catalog.ClusterOptions // membership of a cluster coordinated through etcd
)

const (
	Unlimited = tenant.Unlimited // the "unlimited" value of a reserved or hard limit
	NoQueue   = ingress.NoQueue  // as Ingress.MaxQueueDepth: reject at once when no ticket is free
)

// Options configures server.New. Zero values take the defaults documented on each
// field (EnsureDefaults); Validate reports what cannot work.
type Options struct {
	// Listen is the protocol address. Default DefaultListen.
	Listen string
	// Loops is the number of gnet event loops. Default GOMAXPROCS.
	Loops int
	// DataDir is the Pebble directory. Default DefaultDataDir.
	DataDir string
	// DisableWALSync acknowledges mutations before their WAL write is
	// fsynced: faster, but a crash or power loss can lose the last
	// acknowledged writes. Default false (every ack is durable).
	DisableWALSync bool
	// CacheSize is Pebble's block cache in bytes. Default
	// DefaultBlockCacheSize(): a sixteenth of the memory, at most 512 MiB.
	CacheSize int64
	// ItemCacheSize is the byte budget of the engine's resident item cache
	// (items answered from memory, GETs on the loop). Default
	// DefaultItemCacheSize(): a quarter of the memory; negative disables it.
	ItemCacheSize int64
	// Users are the configured users. Default: none.
	Users []UserSpec
	// Buckets are created at start when the engine does not have them yet.
	// Buckets the engine already has keep their persisted settings.
	Buckets []BucketSpec
	// DefaultSettings apply to buckets created without explicit settings.
	DefaultSettings tenant.Settings
	// AnonymousBucket, when set, is selected for unauthenticated connections.
	AnonymousBucket string
	// DisableText turns memcached's text and meta protocols off: a
	// connection whose first byte is not a binary magic is then closed, as
	// before text support. Default false (config text_protocol: true).
	DisableText bool
	// MaxConnections bounds open connections node-wide. Default
	// DefaultMaxConnections; in force at most OpenFiles.Conns (Limits).
	MaxConnections int
	// SystemConnections is the system band: connections accepted beyond
	// MaxConnections that only a privileged user may log in on (package
	// slots). Zero for the default, a tenth of MaxConnections (so none
	// below 10, memcached's behaviour); negative for none; in force at most
	// half of what OpenFiles.Conns leaves past MaxConnections (Limits).
	SystemConnections int
	// OpenFiles shares the open-file limit out: Pebble's table files, the
	// listen backlog and the most connections. Default fdlimit.Current().
	OpenFiles fdlimit.Plan
	// MaxConnectionsPerBucket bounds connections that select one bucket;
	// privileged users are exempt. Default DefaultMaxConnectionsPerBucket.
	MaxConnectionsPerBucket int
	// IdleTimeout closes a connection that holds an unfinished frame this
	// long. Default DefaultIdleTimeout.
	IdleTimeout time.Duration
	// MaxFrameSize is the largest frame body accepted. Default DefaultMaxFrameSize.
	MaxFrameSize int
	// MaxItemSize is the largest value stored. Default DefaultMaxItemSize.
	MaxItemSize int
	// MaxConnBuffer closes a connection whose unread input or unsent output
	// passes it. Default DefaultMaxConnBuffer.
	MaxConnBuffer int
	// MaxConnOutput stops executing a connection's commands while its
	// unsent replies pass it; they go on once half of it has drained.
	// Default DefaultMaxConnOutput.
	MaxConnOutput int
	// MaxBufferBytes is the node's network memory budget: bytes held in
	// unfinished or unread input and unsent replies across all connections.
	// Past it the connections holding the most stop being read (netmem).
	// Default DefaultMaxBufferBytes(). Reloadable.
	MaxBufferBytes int64
	// NodeCapacity is the node's units per second. Default DefaultNodeCapacity.
	NodeCapacity int64
	// ReadUnitSize and WriteUnitSize are the bytes per read and write unit.
	// Defaults DefaultReadUnitSize and DefaultWriteUnitSize.
	ReadUnitSize, WriteUnitSize int
	// MaxThrottleWait is the longest a throttled command stays parked
	// before it is answered 0x86. Default DefaultMaxThrottleWait.
	MaxThrottleWait time.Duration
	// MetricsBucketLimit: /metrics and STAT bucket_details show every
	// bucket while the node has at most this many, and past it only the
	// most active ones, at most this many (package observe, shown.go). Default
	// DefaultMetricsBucketLimit.
	MetricsBucketLimit int
	// Ingress configures ticketed admission. Defaults: see package ingress.
	Ingress IngressOptions
	// Logger receives admin changes and errors. Default slog.Default().
	Logger *slog.Logger
	// Now is the clock. Default clock.Now (time.Now from one clock read).
	Now func() time.Time
	// Cluster, when set, joins a cluster through etcd: buckets, their
	// settings, node defaults and users live there, and a bucket's limits
	// are cluster-wide totals. Nil (the default): a single node.
	Cluster *ClusterOptions
	// ConfigModTime is the config file's modification time; in a cluster,
	// only a node upgraded from a version before per-node file records
	// uses it (catalog.File.ModTime).
	ConfigModTime time.Time
}

// EnsureDefaults fills zero (or negative) fields with their defaults.
func (o *Options) EnsureDefaults() {
	orDefault(&o.Listen, DefaultListen)
	orDefault(&o.Loops, runtime.GOMAXPROCS(0))
	orDefault(&o.DataDir, DefaultDataDir)
	orDefault(&o.MaxConnections, DefaultMaxConnections)
	orDefault(&o.MaxConnectionsPerBucket, DefaultMaxConnectionsPerBucket)
	if o.OpenFiles.Limit == 0 {
		o.OpenFiles = fdlimit.Current()
	}
	orDefault(&o.IdleTimeout, DefaultIdleTimeout)
	orDefault(&o.MaxFrameSize, DefaultMaxFrameSize)
	orDefault(&o.MaxItemSize, DefaultMaxItemSize)
	orDefault(&o.MaxConnBuffer, DefaultMaxConnBuffer)
	orDefault(&o.MaxConnOutput, DefaultMaxConnOutput)
	if o.MaxBufferBytes <= 0 {
		o.MaxBufferBytes = DefaultMaxBufferBytes()
	}
	orDefault(&o.NodeCapacity, DefaultNodeCapacity)
	orDefault(&o.ReadUnitSize, DefaultReadUnitSize)
	orDefault(&o.WriteUnitSize, DefaultWriteUnitSize)
	orDefault(&o.MaxThrottleWait, DefaultMaxThrottleWait)
	orDefault(&o.MetricsBucketLimit, DefaultMetricsBucketLimit)
	if o.ItemCacheSize == 0 {
		o.ItemCacheSize = DefaultItemCacheSize()
	}
	if o.CacheSize <= 0 {
		o.CacheSize = DefaultBlockCacheSize()
	}
	if o.Ingress.Probe.GOMAXPROCS == 0 {
		o.Ingress.Probe.GOMAXPROCS = runtime.GOMAXPROCS(0)
	}
	o.Ingress.EnsureDefaults()
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Now == nil {
		o.Now = clock.Now
	}
}

// Validate reports options that cannot work.
func (o *Options) Validate() error {
	if o.MaxItemSize > o.MaxFrameSize {
		return fmt.Errorf("server: max item size %d exceeds max frame size %d", o.MaxItemSize, o.MaxFrameSize)
	}
	if err := o.Ingress.Validate(); err != nil {
		return err
	}
	if err := o.OpenFiles.Err(); err != nil {
		return fmt.Errorf("server: %w", err)
	}
	if o.AnonymousBucket != "" {
		if err := tenant.ValidBucketName(o.AnonymousBucket); err != nil {
			return fmt.Errorf("server: anonymous bucket: %w", err)
		}
	}
	return nil
}

// orDefault sets *v to def when it is zero or negative ("" for strings).
func orDefault[T cmp.Ordered](v *T, def T) {
	var zero T
	if *v <= zero {
		*v = def
	}
}

// Defaults of Options (SPEC sections 3–5), each stated once: EnsureDefaults
// applies them, the daemon's flags show them, and the shipped config file
// and README must agree with them (tests/defaults_test.go checks). The
// Options field of each says what it bounds.
const (
	DefaultListen                  = "127.0.0.1:11211"
	DefaultDataDir                 = "./data"
	DefaultMaxConnections          = 10000
	DefaultMaxConnectionsPerBucket = 600
	DefaultIdleTimeout             = 60 * time.Second
	DefaultMaxFrameSize            = 20 << 20
	DefaultMaxItemSize             = 1 << 20
	DefaultMaxConnBuffer           = 64 << 20
	DefaultMaxConnOutput           = 4 << 20
	DefaultMaxThrottleWait         = 30 * time.Second
	DefaultWALSync                 = true // every acknowledged mutation is fsynced (DisableWALSync false)
	DefaultMetricsBucketLimit      = 1000
	DefaultTextProtocol            = true // text and meta beside binary (DisableText false)

	// The node throttle defaults are package tenant's.
	DefaultNodeCapacity  = tenant.DefaultCapacity
	DefaultReadUnitSize  = tenant.DefaultReadUnitSize
	DefaultWriteUnitSize = tenant.DefaultWriteUnitSize
)

// DefaultItemCacheSize is the resident item cache's default budget: a
// quarter of the memory kvd may use (engine.ItemCacheSizeFor of
// netmem.MemoryLimit).
func DefaultItemCacheSize() int64 { return engine.ItemCacheSizeFor(netmem.MemoryLimit()) }

// DefaultBlockCacheSize is Pebble's block cache by default: a sixteenth of
// the memory kvd may use, between 16 MiB and 512 MiB
// (engine.BlockCacheSizeFor of netmem.MemoryLimit).
func DefaultBlockCacheSize() int64 { return engine.BlockCacheSizeFor(netmem.MemoryLimit()) }

// DefaultMaxBufferBytes is the network memory budget's default: an eighth
// of the memory kvd may use (netmem.DefaultBudget).
func DefaultMaxBufferBytes() int64 { return netmem.DefaultBudget() }

// DefaultMaxInflightBytes is max_inflight_bytes by default: a quarter of
// the memory kvd may use (netmem.MemoryLimit: the machine's, or the
// cgroup's if lower), 0 (no limit) where that cannot be read.
func DefaultMaxInflightBytes() int64 { return netmem.MemoryLimit() / 4 }

// GoMemoryLimit is the Go runtime's soft memory limit kvd sets at start
// unless GOMEMLIMIT says otherwise: nine tenths of the memory kvd may use,
// so that the garbage collector works harder before the machine or the
// cgroup runs out, not after (its default is no limit: the heap may grow to
// twice what is live). 0 where the memory cannot be read.
func GoMemoryLimit() int64 { return netmem.MemoryLimit() / 10 * 9 }

// RestartNeeded lists the settings of next that differ from the running
// ones (o) but take effect only at start.
func RestartNeeded(o, next *Options) []string {
	var out []string
	check := func(name string, changed bool) {
		if changed {
			out = append(out, name)
		}
	}
	check("listen", next.Listen != o.Listen)
	check("data dir", next.DataDir != o.DataDir)
	check("wal_sync", next.DisableWALSync != o.DisableWALSync)
	check("item_cache_bytes", next.ItemCacheSize != 0 && next.ItemCacheSize != o.ItemCacheSize)
	check("block_cache_bytes", next.CacheSize != 0 && next.CacheSize != o.CacheSize)
	check("max_frame_size", next.MaxFrameSize != o.MaxFrameSize)
	check("max_item_size", next.MaxItemSize != o.MaxItemSize)
	p, q := next.Ingress.Probe, o.Ingress.Probe
	check("ingress.probe (other than read_write_ratio)", p.Min != q.Min || p.Max != q.Max || p.Initial != q.Initial ||
		p.Interval != q.Interval || p.EMAWeight != q.EMAWeight || p.Step != q.Step)
	return out
}

// Limits are the node limits a config reload may change; the server's
// loops read them through one atomic pointer.
type Limits struct {
	MaxConnections          int
	SystemConnections       int // 0 for none
	MaxConnectionsPerBucket int
	IdleTimeout             time.Duration
	ReadUnitSize            int
	WriteUnitSize           int
	MaxThrottleWait         time.Duration
	AnonymousBucket         string
	MetricsBucketLimit      int
	MaxBufferBytes          int64
	DisableText             bool // for connections opened from now on
}

// LimitsOf is o's Limits. The connections the open-file limit allows
// (OpenFiles.Conns) go first to max_connections; the system band gets what
// is left past it, two descriptors for each of its connections (one may be
// a recycled connection still closing: package slots). Where the limit
// binds max_connections there is no band: a flood of connections past it
// is refused at once, as memcached does, which keeps the descriptors in
// use within the plan even when the event loops fall behind the accepts
// (measured: with a band under ulimit -n 256 and a loaded machine, accept
// failed with EMFILE).
func LimitsOf(o *Options) *Limits {
	maxConns, sysConns := o.MaxConnections, max(o.SystemConnections, 0)
	if o.SystemConnections == 0 {
		sysConns = o.MaxConnections / 10
	}
	if o.OpenFiles.Limit > 0 { // EnsureDefaults ran
		sysConns = min(sysConns, max(o.OpenFiles.Conns-maxConns, 0)/2)
		maxConns = min(maxConns, o.OpenFiles.Conns)
	}
	return &Limits{MaxConnections: maxConns, SystemConnections: sysConns, MaxConnectionsPerBucket: o.MaxConnectionsPerBucket,
		IdleTimeout: o.IdleTimeout, ReadUnitSize: o.ReadUnitSize, WriteUnitSize: o.WriteUnitSize,
		MaxThrottleWait: o.MaxThrottleWait, AnonymousBucket: o.AnonymousBucket,
		MetricsBucketLimit: o.MetricsBucketLimit, MaxBufferBytes: o.MaxBufferBytes, DisableText: o.DisableText}
}

// CatalogFile is what the options say about the catalog: node throttle
// settings, the configured buckets, and (for a cluster) the users.
func CatalogFile(o *Options) catalog.File {
	f := catalog.File{Node: tenant.NodeSettings{Capacity: o.NodeCapacity,
		DefaultReserved: o.DefaultSettings.Reserved, DefaultHardLimit: o.DefaultSettings.HardLimit},
		Users: o.Users, ModTime: o.ConfigModTime}
	for _, b := range o.Buckets {
		f.Buckets = append(f.Buckets, catalog.Spec{Name: b.Name, Settings: b.Settings})
	}
	return f
}

// DeadlineSettings are the deadline gate's settings of a bucket's settings.
func DeadlineSettings(set tenant.Settings) ingress.DeadlineSettings {
	return ingress.DeadlineSettings{
		Deadline: set.Deadline, Percentile: set.DeadlinePercentile, ExpectedExecution: set.ExpectedExecution,
		MaxConcurrent: set.MaxConcurrent,
	}
}

// AdmissionLimits are the ingress limits of a bucket's settings.
func AdmissionLimits(set tenant.Settings) ingress.BucketLimits {
	return ingress.BucketLimits{MaxConcurrent: set.MaxConcurrent, MaxQueued: set.MaxQueued, QueueTimeout: set.QueueTimeout}
}

// StatSettings is STAT settings for o with the limits l in force: first the
// settings memcached has too, under its names and in its order (memcached's
// NULL for one not set), then kvd's own under their config file names.
// maxbytes is the resident item cache: the memory items are kept in, in
// front of Pebble, which never evicts a stored item for want of memory
// (evictions off, as memcached's -M).
func StatSettings(o *Options, l *Limits) [][2]string {
	host, port, _ := net.SplitHostPort(o.Listen)
	proto := "auto-negotiate"
	if l.DisableText {
		proto = "binary"
	}
	orNull := func(s string) string { return cmp.Or(s, "NULL") }
	itoa, i64 := strconv.Itoa, func(n int64) string { return strconv.FormatInt(n, 10) }
	return [][2]string{
		{"maxbytes", i64(max(o.ItemCacheSize, 0))}, {"maxconns", itoa(l.MaxConnections)},
		{"tcpport", port}, {"udpport", "0"}, {"inter", orNull(host)}, {"evictions", "off"},
		{"num_threads", itoa(o.Loops)}, {"cas_enabled", "yes"}, {"binding_protocol", proto},
		{"auth_enabled_sasl", "yes"}, {"item_size_max", itoa(o.MaxItemSize)}, {"flush_enabled", "yes"},
		{"wal_sync", strconv.FormatBool(!o.DisableWALSync)}, {"anonymous_bucket", orNull(l.AnonymousBucket)},
		{"max_connections_per_bucket", itoa(l.MaxConnectionsPerBucket)}, {"system_connections", itoa(l.SystemConnections)},
		{"max_frame_size", itoa(o.MaxFrameSize)}, {"idle_timeout_ms", i64(l.IdleTimeout.Milliseconds())},
		{"max_buffer_bytes", i64(l.MaxBufferBytes)}, {"item_cache_bytes", i64(o.ItemCacheSize)},
		{"block_cache_bytes", i64(o.CacheSize)},
	}
}
