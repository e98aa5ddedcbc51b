package server

import (
	"time"

	"kvd/server/options"
)

// Options configures New; BucketSpec is a bucket it makes sure exists.
// Their fields, defaults and checks are package options'.
type (
	Options    = options.Options
	BucketSpec = options.BucketSpec
)

// Limits are the node limits a config reload may change; the loops read
// them through one atomic pointer.
type Limits struct {
	MaxConnections          int
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

func limitsOf(o *Options) *Limits {
	return &Limits{MaxConnections: o.MaxConnections, MaxConnectionsPerBucket: o.MaxConnectionsPerBucket,
		IdleTimeout: o.IdleTimeout, ReadUnitSize: o.ReadUnitSize, WriteUnitSize: o.WriteUnitSize,
		MaxThrottleWait: o.MaxThrottleWait, AnonymousBucket: o.AnonymousBucket,
		MetricsBucketLimit: o.MetricsBucketLimit, MaxBufferBytes: o.MaxBufferBytes, DisableText: o.DisableText}
}

func (s *Server) limits() *Limits { return s.lim.Load() }
