package bench

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Defaults of Options and BucketSpec.
const (
	DefaultAddr          = "127.0.0.1:11211"
	DefaultConns         = 4
	DefaultPipeline      = 1
	DefaultGetWeight     = 90
	DefaultSetWeight     = 10
	DefaultValueSize     = 100
	DefaultKeys          = 10000
	DefaultDuration      = 10 * time.Second
	DefaultWarmup        = time.Second
	DefaultReadUnitSize  = 4096
	DefaultWriteUnitSize = 1024
	DefaultDialTimeout   = 5 * time.Second

	// AnonymousName labels the tenant of a run without bucket specs.
	AnonymousName = "anonymous"
)

// Limits checked by Validate.
const (
	maxConns      = 10000
	maxPipeline   = 4096
	maxValueSize  = 20 << 20
	maxNameLen    = 200 // keys are "kvb:<name>:<index>", at most 250 bytes
	maxKeys       = 1 << 40
	minUnitSize   = 1
	maxSeriesSecs = 24 * 3600
)

// BucketSpec describes one tenant. The zero value of a field means its
// default (see EnsureDefaults), except Rate, where 0 means unlimited.
type BucketSpec struct {
	Name      string  // bucket to select; a label only in anonymous mode
	Conns     int     // connections (default 4)
	Rate      float64 // target ops/s shared by the connections; 0 = unlimited
	User      string  // SASL PLAIN user; empty = no authentication
	Password  string  // SASL PLAIN password
	Pipeline  int     // requests outstanding per connection (default 1)
	GetWeight int     // get share of the mix (default 90 with SetWeight 10)
	SetWeight int     // set share of the mix
	ValueSize int     // bytes per SET value (default 100)
	Keys      int64   // key space size (default 10000)
}

// Options configures Run. Use DefaultOptions for kvbench's defaults; Run
// calls EnsureDefaults and Validate itself.
type Options struct {
	Addr    string       // server address (default 127.0.0.1:11211)
	Buckets []BucketSpec // one per tenant; none = one anonymous tenant

	// Anonymous: never SELECT_BUCKET; bucket names are only labels (and key
	// prefixes), and a connection authenticates only if its spec names a
	// user. Set implicitly when Buckets is empty. Use it against servers
	// without buckets, such as memcached, or for kvd's anonymous bucket.
	Anonymous bool

	Duration time.Duration // measured time (default 10s)
	Warmup   time.Duration // time before the measurement; 0 = none

	// NonBlocking negotiates HELLO NonBlockingThrottlingMode (0x1b); a
	// throttled op then gets 0x0c with {"next_tick_us":N} and is retried
	// after N µs.
	NonBlocking bool
	Preload     bool // SET every key of every key space once before the run

	ReadUnitSize  int // bytes per computed RU (default 4096)
	WriteUnitSize int // bytes per computed WU (default 1024)

	Seed        uint64        // seed of the per-connection key generators
	DialTimeout time.Duration // per connection, handshake included (default 5s)
}

// DefaultOptions returns kvbench's defaults: one anonymous tenant with
// DefaultConns connections, 10 s measured after a 1 s warmup.
func DefaultOptions() Options {
	o := Options{Warmup: DefaultWarmup}
	o.EnsureDefaults()
	return o
}

// EnsureDefaults fills zero fields with their defaults. With no buckets it
// adds the anonymous tenant and sets Anonymous.
func (o *Options) EnsureDefaults() {
	if o.Addr == "" {
		o.Addr = DefaultAddr
	}
	if len(o.Buckets) == 0 {
		o.Buckets = []BucketSpec{{Name: AnonymousName}}
		o.Anonymous = true
	}
	for i := range o.Buckets {
		o.Buckets[i].EnsureDefaults()
	}
	if o.Duration == 0 {
		o.Duration = DefaultDuration
	}
	if o.ReadUnitSize == 0 {
		o.ReadUnitSize = DefaultReadUnitSize
	}
	if o.WriteUnitSize == 0 {
		o.WriteUnitSize = DefaultWriteUnitSize
	}
	if o.DialTimeout == 0 {
		o.DialTimeout = DefaultDialTimeout
	}
}

// Validate reports the first invalid option, wrapping ErrBadSpec.
func (o *Options) Validate() error {
	switch {
	case o.Duration <= 0 || o.Duration > maxSeriesSecs*time.Second:
		return fmt.Errorf("%w: duration %v: want (0, 24h]", ErrBadSpec, o.Duration)
	case o.Warmup < 0:
		return fmt.Errorf("%w: warmup %v is negative", ErrBadSpec, o.Warmup)
	case o.ReadUnitSize < minUnitSize || o.WriteUnitSize < minUnitSize:
		return fmt.Errorf("%w: unit sizes must be positive", ErrBadSpec)
	case o.DialTimeout < 0:
		return fmt.Errorf("%w: dial timeout %v is negative", ErrBadSpec, o.DialTimeout)
	}
	seen := make(map[string]bool, len(o.Buckets))
	for i := range o.Buckets {
		b := &o.Buckets[i]
		if err := b.Validate(); err != nil {
			return err
		}
		if seen[b.Name] {
			return fmt.Errorf("%w: bucket %q given twice", ErrBadSpec, b.Name)
		}
		seen[b.Name] = true
	}
	return nil
}

// EnsureDefaults fills zero fields with their defaults; a zero mix (both
// weights 0) becomes 90:10.
func (b *BucketSpec) EnsureDefaults() {
	if b.Conns == 0 {
		b.Conns = DefaultConns
	}
	if b.Pipeline == 0 {
		b.Pipeline = DefaultPipeline
	}
	if b.GetWeight == 0 && b.SetWeight == 0 {
		b.GetWeight, b.SetWeight = DefaultGetWeight, DefaultSetWeight
	}
	if b.ValueSize == 0 {
		b.ValueSize = DefaultValueSize
	}
	if b.Keys == 0 {
		b.Keys = DefaultKeys
	}
}

// Validate reports the first invalid field, wrapping ErrBadSpec.
func (b *BucketSpec) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: bucket %q: %s", ErrBadSpec, b.Name, fmt.Sprintf(format, args...))
	}
	switch {
	case b.Name == "" || len(b.Name) > maxNameLen || strings.ContainsAny(b.Name, " \t\r\n"):
		return bad("name must be 1-%d bytes without spaces", maxNameLen)
	case b.Conns < 1 || b.Conns > maxConns:
		return bad("conns %d: want 1-%d", b.Conns, maxConns)
	case !(b.Rate >= 0) || math.IsInf(b.Rate, 1):
		return bad("rate %g: want a finite number >= 0", b.Rate)
	case b.Password != "" && b.User == "":
		return bad("password without user")
	case b.Pipeline < 1 || b.Pipeline > maxPipeline:
		return bad("pipeline %d: want 1-%d", b.Pipeline, maxPipeline)
	case b.GetWeight < 0 || b.SetWeight < 0 || b.GetWeight+b.SetWeight == 0:
		return bad("mix %d:%d: weights must be >= 0, not both 0", b.GetWeight, b.SetWeight)
	case b.ValueSize < 1 || b.ValueSize > maxValueSize:
		return bad("value %d: want 1-%d bytes", b.ValueSize, maxValueSize)
	case b.Keys < 1 || b.Keys > maxKeys:
		return bad("keys %d: want 1-%d", b.Keys, int64(maxKeys))
	}
	return nil
}

// SpecSyntax documents ParseBucketSpec's input, for --help texts.
const SpecSyntax = `name[:conns[:rate]][,option=value...]
  name      bucket to SELECT (a label and key prefix with --anonymous)
  conns     connections (default 4)
  rate      target ops/s shared by the bucket's connections (default 0 = unlimited)
  options   user=U, password=P (SASL PLAIN; no commas in values),
            pipeline=N (requests in flight per connection, default 1),
            mix=G:S (get:set weights, default 90:10),
            value=BYTES (SET value size, default 100),
            keys=N (key space, default 10000)
  example   app:8:5000,user=app,password=app-secret,pipeline=4,mix=50:50`

// ParseBucketSpec parses the command-line form of a BucketSpec (SpecSyntax).
// Fields not given get their defaults; the result is validated.
func ParseBucketSpec(s string) (BucketSpec, error) {
	head, opts, hasOpts := strings.Cut(s, ",")
	var b BucketSpec
	parts := strings.Split(head, ":")
	if len(parts) > 3 {
		return b, fmt.Errorf("%w: %q: want name[:conns[:rate]]", ErrBadSpec, head)
	}
	b.Name = parts[0]
	var err error
	if len(parts) > 1 {
		if b.Conns, err = parseInt(parts[1], "conns", 1); err != nil {
			return b, err
		}
	}
	if len(parts) > 2 {
		if b.Rate, err = strconv.ParseFloat(parts[2], 64); err != nil {
			return b, fmt.Errorf("%w: rate %q is not a number", ErrBadSpec, parts[2])
		}
	}
	if hasOpts {
		for kv := range strings.SplitSeq(opts, ",") {
			if err := b.setOption(kv); err != nil {
				return b, err
			}
		}
	}
	b.EnsureDefaults()
	return b, b.Validate()
}

// setOption applies one "key=value" option of a bucket spec.
func (b *BucketSpec) setOption(kv string) error {
	k, v, ok := strings.Cut(kv, "=")
	if !ok {
		return fmt.Errorf("%w: option %q: want key=value", ErrBadSpec, kv)
	}
	var err error
	switch k {
	case "user":
		b.User = v
	case "password":
		b.Password = v
	case "pipeline":
		b.Pipeline, err = parseInt(v, k, 1)
	case "value":
		b.ValueSize, err = parseInt(v, k, 1)
	case "keys":
		var n int
		n, err = parseInt(v, k, 1)
		b.Keys = int64(n)
	case "mix":
		b.GetWeight, b.SetWeight, err = parseMix(v)
	default:
		return fmt.Errorf("%w: unknown option %q (want user, password, pipeline, mix, value, keys)", ErrBadSpec, k)
	}
	return err
}

// parseInt parses a decimal integer field of at least lo, so that an
// explicit 0 is an error rather than a silent default.
func parseInt(s, what string, lo int) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < lo {
		return 0, fmt.Errorf("%w: %s %q: want an integer >= %d", ErrBadSpec, what, s, lo)
	}
	return n, nil
}

// parseMix parses "G:S".
func parseMix(s string) (get, set int, err error) {
	g, st, ok := strings.Cut(s, ":")
	if !ok {
		return 0, 0, fmt.Errorf("%w: mix %q: want GET:SET weights, e.g. 90:10", ErrBadSpec, s)
	}
	if get, err = parseInt(g, "mix get weight", 0); err != nil {
		return 0, 0, err
	}
	if set, err = parseInt(st, "mix set weight", 0); err != nil {
		return 0, 0, err
	}
	if get+set == 0 {
		return 0, 0, fmt.Errorf("%w: mix %q: weights are both 0", ErrBadSpec, s)
	}
	return get, set, nil
}
