package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"time"

	"kvd/engine"
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
}

func limitsOf(o *Options) *Limits {
	return &Limits{
		MaxConnections: o.MaxConnections, MaxConnectionsPerBucket: o.MaxConnectionsPerBucket,
		IdleTimeout: o.IdleTimeout, ReadUnitSize: o.ReadUnitSize, WriteUnitSize: o.WriteUnitSize,
		MaxThrottleWait: o.MaxThrottleWait, AnonymousBucket: o.AnonymousBucket,
	}
}

func (s *Server) limits() *Limits { return s.lim.Load() }

// appliedMetaKey records the config-file values last applied, so that a
// file edit made while kvd was stopped is told apart from a run-time change
// (0x2a, 0x2c) made since: the newer one wins.
const appliedMetaKey = "config_applied"

// applied is what the config file said, last time it was applied.
type applied struct {
	Node    nodeSettings               `json:"node"`
	Buckets map[string]json.RawMessage `json:"buckets"`
}

func (o *Options) fileNode() nodeSettings {
	return nodeSettings{Capacity: o.NodeCapacity, DefaultReserved: o.DefaultSettings.Reserved,
		DefaultHardLimit: o.DefaultSettings.HardLimit}
}

func fileApplied(o *Options) (applied, error) {
	a := applied{Node: o.fileNode(), Buckets: map[string]json.RawMessage{}}
	for _, b := range o.Buckets {
		raw, err := b.Settings.MarshalJSON()
		if err != nil {
			return a, err
		}
		a.Buckets[b.Name] = raw
	}
	return a, nil
}

func (s *Server) loadApplied() (applied, bool, error) {
	var a applied
	raw, err := s.db.Meta(appliedMetaKey)
	if errors.Is(err, engine.ErrNotFound) {
		return a, false, nil
	}
	if err == nil {
		err = json.Unmarshal(raw, &a)
	}
	return a, err == nil, err
}

// applyFile makes the server follow the config file next where the file
// changed since prev (or everywhere, when there is no prev): node throttle,
// bucket settings, new buckets. Values the file did not change keep their
// run-time settings. Buckets missing from the file keep their data. It does
// engine I/O: never call it on a loop.
func (s *Server) applyFile(next *Options, prev applied, havePrev bool, who string) error {
	want, err := fileApplied(next)
	if err != nil {
		return err
	}
	if (!havePrev || want.Node != prev.Node) && want.Node != s.nodeSettings() {
		if err := s.applyNodeSettings(want.Node, who); err != nil {
			return err
		}
	}
	for _, spec := range next.Buckets {
		if err := s.applyBucketSpec(spec, prev.Buckets[spec.Name], want.Buckets[spec.Name], who); err != nil {
			return fmt.Errorf("bucket %q: %w", spec.Name, err)
		}
	}
	raw, err := json.Marshal(want)
	if err != nil {
		return err
	}
	return s.db.PutMeta(appliedMetaKey, raw)
}

func (s *Server) applyBucketSpec(spec BucketSpec, prev, want json.RawMessage, who string) error {
	b, ok := s.buckets.get(spec.Name)
	if !ok {
		_, err := s.createBucket(spec.Name, spec.Settings, who)
		return err
	}
	if prev != nil && string(prev) == string(want) || reflect.DeepEqual(*b.settings.Load(), spec.Settings) {
		return nil // unchanged in the file, or already so: run-time changes stand
	}
	return s.applyBucketSettings(b, spec.Settings, who)
}

// followFile applies at start what the config file changed while kvd was
// stopped.
func (s *Server) followFile() error {
	prev, have, err := s.loadApplied()
	if err != nil {
		return fmt.Errorf("server: %s: %w", appliedMetaKey, err)
	}
	return s.applyFile(&s.opts, prev, have, "config")
}

// Reconfigure applies a reloaded config file: node throttle, bucket
// settings and new buckets (where the file changed), users, limits and
// ingress settings. Settings that need a restart (listen address, data
// directory, wal_sync, frame and item size, probe bounds) are reported in
// the returned list and left as they are. On error nothing after the
// failing step is applied.
func (s *Server) Reconfigure(next Options) (needRestart []string, err error) {
	next.EnsureDefaults()
	if err := next.Validate(); err != nil {
		return nil, err
	}
	users, err := buildUsers(next.Users, s.log)
	if err != nil {
		return nil, err
	}
	s.reloadMu.Lock()
	defer s.reloadMu.Unlock()
	prev, have, err := s.loadApplied()
	if err != nil {
		return nil, err
	}
	if err := s.applyFile(&next, prev, have, "config"); err != nil {
		return nil, err
	}
	if err := s.users.Replace(users); err != nil {
		return nil, err
	}
	s.lim.Store(limitsOf(&next))
	if err := s.reconfigureIngress(&next.Ingress); err != nil {
		return nil, err
	}
	return s.restartNeeded(&next), nil
}

func (s *Server) reconfigureIngress(in *IngressOptions) error {
	now := s.opts.Now()
	if err := s.ingress.SetNodeTickets(in.NodeTickets, now); err != nil {
		return err
	}
	if err := s.ingress.SetQueueLimits(in.MaxQueueDepth, in.QueueTimeout); err != nil {
		return err
	}
	s.ingress.SetReadWriteRatio(in.Probe.ReadWriteRatio)
	return nil
}

// restartNeeded lists the settings that differ from the running ones but
// only take effect at start.
func (s *Server) restartNeeded(next *Options) []string {
	var out []string
	check := func(name string, changed bool) {
		if changed {
			out = append(out, name)
		}
	}
	o := &s.opts
	check("listen", next.Listen != o.Listen)
	check("data dir", next.DataDir != o.DataDir)
	check("wal_sync", next.DisableWALSync != o.DisableWALSync)
	check("max_frame_size", next.MaxFrameSize != o.MaxFrameSize)
	check("max_item_size", next.MaxItemSize != o.MaxItemSize)
	p, q := next.Ingress.Probe, o.Ingress.Probe
	check("ingress.probe (other than read_write_ratio)", p.Min != q.Min || p.Max != q.Max || p.Initial != q.Initial ||
		p.Interval != q.Interval || p.EMAWeight != q.EMAWeight || p.Step != q.Step)
	return out
}
