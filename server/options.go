package server

import "kvd/server/options"

// Options configures New; BucketSpec is a bucket it makes sure exists.
// Their fields, defaults and checks are package options'.
type (
	Options    = options.Options
	BucketSpec = options.BucketSpec
)

// Limits are the node limits a config reload may change (package
// options'); the loops read them through one atomic pointer.
type Limits = options.Limits

func (s *Server) limits() *Limits { return s.lim.Load() }
