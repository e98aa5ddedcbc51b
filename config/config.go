package config

import (
	_ "embed" // for Embedded
	"errors"
	"fmt"
	"os"
	"time"

	"kvd/ingress"
	"kvd/probe"
	"kvd/tenant"
)

// Embedded is the shipped config/serverless.json, compiled in. The daemon
// parses it when no config file exists at the default path.
//
//go:embed serverless.json
var Embedded []byte

// Errors returned by Parse, Load and Validate. Each is wrapped with the
// field's full path (e.g. "ingress.probe.min", "buckets[1].hard_limit")
// and the reason; compare with errors.Is. Validate joins every problem it
// finds with errors.Join.
var (
	// ErrSyntax: the input is not one well-formed JSON object.
	ErrSyntax = errors.New("config: invalid JSON")
	// ErrUnknownField: a key the format does not define (typos and
	// wrong case included).
	ErrUnknownField = errors.New("config: unknown field")
	// ErrDuplicateField: a key given twice in one object.
	ErrDuplicateField = errors.New("config: duplicate field")
	// ErrType: a value of the wrong JSON type or range for its field.
	ErrType = errors.New("config: wrong type")
	// ErrInvalid: well-typed values that break a rule (a size of 0,
	// reserved > hard_limit, a duplicate bucket...).
	ErrInvalid = errors.New("config: invalid value")
)

// Unlimited is the Limit value written "unlimited" in the file.
const Unlimited = tenant.Unlimited

// Limit is a units-per-second limit: a non-negative integer, or Unlimited,
// written "unlimited" in JSON. It is package tenant's codec, the one every
// part of kvd reads limits with; anything else (negatives, fractions,
// other strings) fails to decode with an error that names the field.
type Limit = tenant.Limit

// Probe configures the ingress throughput prober (SPEC section 6). Min and
// Max bound each pool; Initial is the starting total of both pools, 0 for
// 2×GOMAXPROCS (the prober clamps that to [2·Min, 2·Max]).
type Probe struct {
	IntervalMS     int     `json:"interval_ms"`      // probe.DefaultInterval
	Min            int     `json:"min"`              // per pool, probe.DefaultMin
	Max            int     `json:"max"`              // per pool, probe.DefaultMax
	Initial        int     `json:"initial"`          // both pools, 0 = 2×GOMAXPROCS
	ReadWriteRatio float64 `json:"read_write_ratio"` // read share, probe.DefaultReadWriteRatio
	EMAWeight      float64 `json:"ema_weight"`       // probe.DefaultEMAWeight
	Step           float64 `json:"step"`             // probe.DefaultStep
}

// Ingress configures ticketed admission (SPEC section 6).
type Ingress struct {
	Tickets        int64 `json:"tickets"`          // node-wide cap on in-flight commands, ingress.DefaultNodeTickets
	MaxQueueDepth  int   `json:"max_queue_depth"`  // ingress.DefaultMaxQueueDepth; 0 = reject when no ticket is free
	QueueTimeoutMS int   `json:"queue_timeout_ms"` // ingress.DefaultQueueTimeout
	// FairDequeue: a freed ticket goes to the waiting bucket that used the
	// least of the pool recently (true, the default); false = one FIFO per
	// pool across buckets (ingress.Options.FIFO), for contrast measurements.
	FairDequeue bool  `json:"fair_dequeue"`
	Probe       Probe `json:"probe"`
}

// Bucket is one bucket created at start-up. Reserved and HardLimit are nil
// when the file leaves them out (the node defaults apply). The other fields
// are SPEC section 7's; 0 means "no per-bucket limit", except that
// QueueTimeoutMS 0 means the node's ingress.queue_timeout_ms and
// DeadlinePercentile 0 the deadline gate's default.
type Bucket struct {
	Name                string `json:"name"`
	Reserved            *Limit `json:"reserved,omitempty"`
	HardLimit           *Limit `json:"hard_limit,omitempty"`
	MaxConcurrent       int    `json:"max_concurrent,omitempty"`
	MaxQueued           int    `json:"max_queued,omitempty"`
	QueueTimeoutMS      int    `json:"queue_timeout_ms,omitempty"`
	DeadlineMS          int    `json:"deadline_ms,omitempty"`
	DeadlinePercentile  int    `json:"deadline_percentile,omitempty"`
	ExpectedExecutionUS int64  `json:"expected_execution_us,omitempty"`
}

// User is one account. Exactly one of Password (plain, for development)
// and PasswordHash (argon2id or bcrypt PHC string) is set. Buckets may hold
// "*" for all buckets. Privilege names and the hash's form are checked by
// package tenant when the daemon builds the user, not here.
type User struct {
	Name         string   `json:"name"`
	Password     string   `json:"password,omitempty"`
	PasswordHash string   `json:"password_hash,omitempty"`
	Buckets      []string `json:"buckets,omitempty"`
	Privileges   []string `json:"privileges,omitempty"`
}

// File is the whole config file. Field comments name the constant of each
// default, owned by the package that applies it. Default fills in those of
// tenant, ingress and probe; the server's (pointer fields) stay nil when
// the file leaves them out, and the server applies its defaults (config
// cannot import package server). Validate states the rules.
type File struct {
	NodeCapacity                 int64  `json:"node_capacity"`                        // units/s, tenant.DefaultCapacity
	DefaultThrottleReservedUnits Limit  `json:"default_throttle_reserved_units"`      // tenant.DefaultReserved
	DefaultThrottleHardLimit     Limit  `json:"default_throttle_hard_limit"`          // tenant.DefaultHardLimit
	ReadUnitSize                 int    `json:"read_unit_size"`                       // bytes per RU, tenant.DefaultReadUnitSize
	WriteUnitSize                int    `json:"write_unit_size"`                      // bytes per WU, tenant.DefaultWriteUnitSize
	MaxConnectionsPerBucket      *int   `json:"max_connections_per_bucket,omitempty"` // nil: options.DefaultMaxConnectionsPerBucket
	MaxConnections               *int   `json:"max_connections,omitempty"`            // nil: options.DefaultMaxConnections
	SystemConnections            *int   `json:"system_connections,omitempty"`         // nil: a tenth of max_connections; 0 = none
	MaxThrottleWaitMS            *int   `json:"max_throttle_wait_ms,omitempty"`       // nil: options.DefaultMaxThrottleWait
	MaxItemSize                  *int   `json:"max_item_size,omitempty"`              // nil: options.DefaultMaxItemSize
	MaxFrameSize                 *int   `json:"max_frame_size,omitempty"`             // nil: options.DefaultMaxFrameSize
	IdleTimeoutMS                *int   `json:"idle_timeout_ms,omitempty"`            // nil: options.DefaultIdleTimeout
	MaxInflightBytes             *int64 `json:"max_inflight_bytes,omitempty"`         // nil: a quarter of physical memory (the daemon reads it); 0 = no limit
	MaxBufferBytes               *int64 `json:"max_buffer_bytes,omitempty"`           // nil: options.DefaultMaxBufferBytes() (an eighth of memory)
	WALSync                      *bool  `json:"wal_sync,omitempty"`                   // nil: options.DefaultWALSync
	TextProtocol                 *bool  `json:"text_protocol,omitempty"`              // nil: options.DefaultTextProtocol
	MetricsBucketLimit           *int   `json:"metrics_bucket_limit,omitempty"`       // nil: options.DefaultMetricsBucketLimit
	ItemCacheBytes               int64  `json:"item_cache_bytes"`                     // 0 = options.DefaultItemCacheSize(), < 0 = none
	BlockCacheBytes              int64  `json:"block_cache_bytes"`                    // 0 = options.DefaultBlockCacheSize()

	// AnonymousBucket, if set, is the bucket unauthenticated connections
	// start selected on; "" means no anonymous access.
	AnonymousBucket string   `json:"anonymous_bucket,omitempty"`
	Ingress         Ingress  `json:"ingress"`
	Buckets         []Bucket `json:"buckets,omitempty"`
	Users           []User   `json:"users,omitempty"`
}

// Default returns a File with the defaults of tenant, ingress and probe,
// the server's fields nil (the server's defaults), and no buckets or users.
func Default() *File {
	return &File{
		NodeCapacity:                 tenant.DefaultCapacity,
		DefaultThrottleReservedUnits: Limit(tenant.DefaultReserved),
		DefaultThrottleHardLimit:     Limit(tenant.DefaultHardLimit),
		ReadUnitSize:                 tenant.DefaultReadUnitSize,
		WriteUnitSize:                tenant.DefaultWriteUnitSize,
		Ingress: Ingress{
			Tickets:        ingress.DefaultNodeTickets,
			MaxQueueDepth:  ingress.DefaultMaxQueueDepth,
			QueueTimeoutMS: int(ingress.DefaultQueueTimeout / time.Millisecond),
			FairDequeue:    true,
			Probe: Probe{
				IntervalMS:     int(probe.DefaultInterval / time.Millisecond),
				Min:            probe.DefaultMin,
				Max:            probe.DefaultMax,
				ReadWriteRatio: probe.DefaultReadWriteRatio,
				EMAWeight:      probe.DefaultEMAWeight,
				Step:           probe.DefaultStep,
			},
		},
	}
}

// Parse decodes a config file strictly over Default's values and
// validates the result. Errors wrap ErrSyntax, ErrUnknownField, ErrType or
// ErrInvalid and name the field by its full path.
func Parse(data []byte) (*File, error) {
	f := Default()
	if err := decodeFile(data, f); err != nil {
		return nil, err
	}
	if err := f.Validate(); err != nil {
		return nil, err
	}
	return f, nil
}

// Load reads and parses the file at path, and returns the bytes it parsed
// too; errors start with the path.
func Load(path string) (*File, []byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("config: %w", err)
	}
	f, err := Parse(data)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	return f, data, nil
}
