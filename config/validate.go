package config

import (
	"errors"
	"fmt"
	"time"

	"kvd/tenant"
)

// FrameHeadroom is how much larger than max_item_size the frame cap must
// be: a maximal value still needs its 24-byte header, extras, framing
// extras and a key of up to 250 bytes in the same frame, or it would be
// refused as a protocol error (connection closed) instead of E2big.
const FrameHeadroom = 1024

// CheckFrameHeadroom reports, as an ErrInvalid error naming
// max_frame_size, a frame cap that leaves no room for a maximal item.
// Validate calls it when the file gives both sizes; the daemon calls it on
// the effective sizes (the server's defaults filled in) when it gives one.
func CheckFrameHeadroom(maxItemSize, maxFrameSize int) error {
	if maxItemSize > 0 && maxFrameSize > 0 && int64(maxFrameSize) < int64(maxItemSize)+FrameHeadroom {
		return fmt.Errorf("%w for %q: %d leaves no room for a max_item_size (%d) value: want at least %d",
			ErrInvalid, "max_frame_size", maxFrameSize, maxItemSize, int64(maxItemSize)+FrameHeadroom)
	}
	return nil
}

// maxBucketNameLen is the longest bucket name (the rule is tenant's
// ValidBucketName: 1..100 bytes of A-Z a-z 0-9 _ . % -, repeated here
// because config imports only the standard library).
const maxBucketNameLen = 100

// problems collects validation errors, each naming its field.
type problems []error

func (p *problems) addf(field, format string, args ...any) {
	*p = append(*p, fmt.Errorf("%w for %q: %s", ErrInvalid, field, fmt.Sprintf(format, args...)))
}

// positive records a problem unless v > 0.
func (p *problems) positive(field string, v int64) {
	if v <= 0 {
		p.addf(field, "must be positive, got %d", v)
	}
}

func (p *problems) add(err error) { *p = append(*p, err) }

// positiveIfSet records a problem if v is set and not positive (nil: the
// server's default).
func (p *problems) positiveIfSet(field string, v *int) {
	if v != nil {
		p.positive(field, int64(*v))
	}
}

// nonNegative records a problem unless v >= 0.
func (p *problems) nonNegative(field string, v int64) {
	if v < 0 {
		p.addf(field, "must not be negative, got %d", v)
	}
}

// atMost records a problem if v > max.
func (p *problems) atMost(field string, v, max int64) {
	if v > max {
		p.addf(field, "must be at most %d, got %d", max, v)
	}
}

// Validate checks every rule and returns all violations joined (nil if
// none), each an ErrInvalid error naming its field:
//
//   - sizes, counts and timeouts are positive; max_inflight_bytes and
//     ingress.max_queue_depth are ≥ 0 (0: no limit / no queue);
//   - max_frame_size leaves room for a max_item_size value plus header,
//     extras and key;
//   - limits are ≥ 0 or unlimited, and the effective reserved ≤ hard
//     limit, for the node defaults and for every bucket (a bucket's absent
//     limits take the node defaults); "unlimited" reserved needs an
//     unlimited hard limit;
//   - the probe: min ≥ 1, max ≥ min, initial 0 or within [2·min, 2·max],
//     0 < read_write_ratio < 1, 0 < ema_weight ≤ 1, 0 < step ≤ 1;
//   - bucket names follow the bucket naming rule and are unique;
//     deadline_percentile is 0 or 50..99; other bucket numbers are ≥ 0;
//   - user names are non-empty and unique, each user has exactly one of
//     password and password_hash, and its bucket entries are "*" or
//     bucket names;
//   - anonymous_bucket, if set, names a bucket in the file.
//
// Privilege names and password hashes are checked by package tenant when
// the daemon builds users from the file.
func (f *File) Validate() error {
	var p problems
	f.validateNode(&p)
	f.validateIngress(&p)
	names := f.validateBuckets(&p)
	f.validateUsers(&p)
	if f.AnonymousBucket != "" && !names[f.AnonymousBucket] {
		p.addf("anonymous_bucket", "%q is not a bucket in the file", f.AnonymousBucket)
	}
	return errors.Join(p...)
}

func (f *File) validateNode(p *problems) {
	p.positive("node_capacity", f.NodeCapacity)
	if f.NodeCapacity > tenant.MaxLimit {
		p.addf("node_capacity", "must be at most %d (2^40), got %d", tenant.MaxLimit, f.NodeCapacity)
	}
	p.positive("read_unit_size", int64(f.ReadUnitSize))
	p.positive("write_unit_size", int64(f.WriteUnitSize))
	p.positiveIfSet("max_connections_per_bucket", f.MaxConnectionsPerBucket)
	p.positiveIfSet("max_connections", f.MaxConnections)
	if f.SystemConnections != nil {
		p.nonNegative("system_connections", int64(*f.SystemConnections))
	}
	p.positiveIfSet("max_throttle_wait_ms", f.MaxThrottleWaitMS)
	p.positiveIfSet("max_item_size", f.MaxItemSize)
	p.positiveIfSet("max_frame_size", f.MaxFrameSize)
	p.positiveIfSet("idle_timeout_ms", f.IdleTimeoutMS)
	p.positiveIfSet("metrics_bucket_limit", f.MetricsBucketLimit)
	if f.MaxBufferBytes != nil {
		p.positive("max_buffer_bytes", *f.MaxBufferBytes)
	}
	if f.MaxInflightBytes != nil {
		p.nonNegative("max_inflight_bytes", *f.MaxInflightBytes)
	}
	p.nonNegative("block_cache_bytes", f.BlockCacheBytes)
	if f.MaxItemSize != nil && f.MaxFrameSize != nil {
		if err := CheckFrameHeadroom(*f.MaxItemSize, *f.MaxFrameSize); err != nil {
			p.add(err)
		}
	}
	checkLimits(p, "default_throttle_reserved_units", "default_throttle_hard_limit",
		f.DefaultThrottleReservedUnits, f.DefaultThrottleHardLimit, "")
}

// checkLimits checks one reserved / hard-limit pair. note, if not empty,
// says where the values came from (for a bucket inheriting defaults).
func checkLimits(p *problems, rField, hField string, reserved, hard Limit, note string) {
	ok := true
	for _, l := range []struct {
		field string
		v     Limit
	}{{rField, reserved}, {hField, hard}} {
		if l.v < 0 && !l.v.IsUnlimited() {
			p.addf(l.field, "must be a non-negative integer or \"unlimited\", got %d", int64(l.v))
			ok = false
		}
	}
	if !ok || hard.IsUnlimited() {
		return
	}
	if reserved.IsUnlimited() || reserved > hard {
		p.addf(rField, "%s exceeds %s %s%s", reserved, hField, hard, note)
	}
}

func (f *File) validateIngress(p *problems) {
	in := &f.Ingress
	p.positive("ingress.tickets", in.Tickets)
	p.nonNegative("ingress.max_queue_depth", int64(in.MaxQueueDepth))
	p.positive("ingress.queue_timeout_ms", int64(in.QueueTimeoutMS))
	p.atMost("ingress.queue_timeout_ms", int64(in.QueueTimeoutMS), int64(tenant.MaxDuration/time.Millisecond))
	pr := &in.Probe
	p.positive("ingress.probe.interval_ms", int64(pr.IntervalMS))
	p.positive("ingress.probe.min", int64(pr.Min))
	if pr.Max < pr.Min {
		p.addf("ingress.probe.max", "%d is below min %d", pr.Max, pr.Min)
	}
	if pr.Initial != 0 && (pr.Initial < 2*pr.Min || pr.Initial > 2*pr.Max) {
		p.addf("ingress.probe.initial", "%d outside [2·min, 2·max] = [%d, %d] (it is the total of both pools; 0 = 2×GOMAXPROCS)",
			pr.Initial, 2*pr.Min, 2*pr.Max)
	}
	if !(pr.ReadWriteRatio > 0 && pr.ReadWriteRatio < 1) {
		p.addf("ingress.probe.read_write_ratio", "%v outside (0, 1)", pr.ReadWriteRatio)
	}
	if !(pr.EMAWeight > 0 && pr.EMAWeight <= 1) {
		p.addf("ingress.probe.ema_weight", "%v outside (0, 1]", pr.EMAWeight)
	}
	if !(pr.Step > 0 && pr.Step <= 1) {
		p.addf("ingress.probe.step", "%v outside (0, 1]", pr.Step)
	}
}

// validateBuckets checks the buckets and returns the set of their names.
func (f *File) validateBuckets(p *problems) map[string]bool {
	names := make(map[string]bool, len(f.Buckets))
	for i := range f.Buckets {
		b := &f.Buckets[i]
		at := fmt.Sprintf("buckets[%d]", i)
		if reason := bucketNameProblem(b.Name); reason != "" {
			p.addf(at+".name", "%q: %s", b.Name, reason)
		} else if names[b.Name] {
			p.addf(at+".name", "duplicate bucket %q", b.Name)
		}
		names[b.Name] = true
		f.validateBucketLimits(p, at, b)
		for _, f := range []struct {
			name   string
			v, max int64
		}{
			{"max_concurrent", int64(b.MaxConcurrent), tenant.MaxCount},
			{"max_queued", int64(b.MaxQueued), tenant.MaxCount},
			{"queue_timeout_ms", int64(b.QueueTimeoutMS), int64(tenant.MaxDuration / time.Millisecond)},
			{"deadline_ms", int64(b.DeadlineMS), int64(tenant.MaxDuration / time.Millisecond)},
			{"expected_execution_us", b.ExpectedExecutionUS, int64(tenant.MaxDuration / time.Microsecond)},
		} {
			p.nonNegative(at+"."+f.name, f.v)
			p.atMost(at+"."+f.name, f.v, f.max)
		}
		if pc := b.DeadlinePercentile; pc != 0 && (pc < 50 || pc > 99) {
			p.addf(at+".deadline_percentile", "%d outside 50..99 (0 = the gate's default)", pc)
		}
	}
	return names
}

// validateBucketLimits checks a bucket's effective limits: its own, or the
// node defaults where it leaves them out.
func (f *File) validateBucketLimits(p *problems, at string, b *Bucket) {
	reserved, hard := f.DefaultThrottleReservedUnits, f.DefaultThrottleHardLimit
	var inherited []string
	if b.Reserved != nil {
		reserved = *b.Reserved
	} else {
		inherited = append(inherited, "reserved")
	}
	if b.HardLimit != nil {
		hard = *b.HardLimit
	} else {
		inherited = append(inherited, "hard_limit")
	}
	if len(inherited) == 2 {
		return // the node defaults, checked once already
	}
	note := ""
	if len(inherited) == 1 {
		note = fmt.Sprintf(" (%s taken from the node default)", inherited[0])
	}
	checkLimits(p, at+".reserved", at+".hard_limit", reserved, hard, note)
}

func (f *File) validateUsers(p *problems) {
	seen := make(map[string]bool, len(f.Users))
	for i := range f.Users {
		u := &f.Users[i]
		at := fmt.Sprintf("users[%d]", i)
		switch {
		case u.Name == "":
			p.addf(at+".name", "must not be empty")
		case seen[u.Name]:
			p.addf(at+".name", "duplicate user %q", u.Name)
		}
		seen[u.Name] = true
		if (u.Password == "") == (u.PasswordHash == "") {
			p.addf(at, "user %q needs exactly one of password and password_hash", u.Name)
		}
		for j, b := range u.Buckets {
			if b == "*" {
				continue
			}
			if reason := bucketNameProblem(b); reason != "" {
				p.addf(fmt.Sprintf("%s.buckets[%d]", at, j), "%q: %s", b, reason)
			}
		}
	}
}

// bucketNameProblem returns why name breaks the bucket naming rule, or "".
func bucketNameProblem(name string) string {
	if name == "" || len(name) > maxBucketNameLen {
		return fmt.Sprintf("must be 1..%d bytes, got %d", maxBucketNameLen, len(name))
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
			c == '_' || c == '.' || c == '%' || c == '-'
		if !ok {
			return fmt.Sprintf("byte %d (%q) is not one of A-Z a-z 0-9 _ . %% -", i, c)
		}
	}
	return ""
}
