package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/tidwall/gjson"

	"kvd/engine"
	mc "kvd/protocol/binary"
	"kvd/tenant"
)

// maxThrottleJSON bounds the value of 0x2a and 0x2c.
const maxThrottleJSON = 1024

// nodeMetaKey is where run-time node throttle settings persist.
const nodeMetaKey = "node_throttle"

// nodeSettings are the node throttle settings 0x2c changes.
type nodeSettings struct {
	Capacity         int64 `json:"capacity"`
	DefaultReserved  int64 `json:"default_throttle_reserved_units"`
	DefaultHardLimit int64 `json:"default_throttle_hard_limit"`
}

// setBucketThrottle handles SetBucketThrottleProperties (0x2a): key = bucket,
// value = {"reserved":…, "hard_limit":…}; a missing field means "unlimited".
func (c *conn) setBucketThrottle(req *mc.Request) {
	if !c.privileged(tenant.PrivBucketThrottleManagement) {
		c.replyError(req, mc.StatusAccessDenied, "SetBucketThrottleProperties needs the BucketThrottleManagement privilege")
		return
	}
	doc, err := throttleDoc(req.Value, "reserved", "hard_limit")
	var reserved, hard int64
	if err == nil {
		reserved, err = limitField(doc, "reserved")
	}
	if err == nil {
		hard, err = limitField(doc, "hard_limit")
	}
	if err != nil {
		c.replyError(req, mc.StatusInvalidArguments, err.Error())
		return
	}
	b, ok := c.srv.buckets.get(string(req.Key))
	if !ok {
		c.replyError(req, mc.StatusKeyNotFound, "no such bucket: "+string(req.Key))
		return
	}
	set := *b.settings.Load()
	set.Reserved, set.HardLimit = reserved, hard
	if err := set.Validate(); err != nil {
		c.replyError(req, mc.StatusInvalidArguments, err.Error())
		return
	}
	who := c.who()
	c.startControl(req, func(bt *batch) {
		bt.out = c.appendOutcome(bt.out, bt.reqs[0].hdr, c.srv.applyBucketSettings(b, set, who))
	})
}

// applyBucketSettings persists a bucket's settings, applies them, and logs
// the change as made by who. It does engine I/O: never call it on an event
// loop.
func (s *Server) applyBucketSettings(b *bucket, set tenant.Settings, who string) error {
	raw, err := set.MarshalJSON()
	if err == nil {
		err = s.db.SetBucketSettings(b.name, raw)
	}
	if err != nil {
		return err
	}
	old := b.settings.Swap(&set)
	s.throttle.SetLimits(b.thr, set.Reserved, set.HardLimit)
	s.log.Info("bucket throttle changed", "by", who, "bucket", b.name,
		"old", limitsText(old.Reserved, old.HardLimit), "new", limitsText(set.Reserved, set.HardLimit))
	return nil
}

// setNodeThrottle handles SetNodeThrottleProperties (0x2c): no key, value =
// {"capacity":N, "default_throttle_reserved_units":…,
// "default_throttle_hard_limit":…}, every field optional, the two defaults
// together.
func (c *conn) setNodeThrottle(req *mc.Request) {
	if !c.privileged(tenant.PrivBucketThrottleManagement) {
		c.replyError(req, mc.StatusAccessDenied, "SetNodeThrottleProperties needs the BucketThrottleManagement privilege")
		return
	}
	next, err := parseNodeSettings(req.Value, c.srv.nodeSettings())
	if err != nil {
		c.replyError(req, mc.StatusInvalidArguments, err.Error())
		return
	}
	who := c.who()
	c.startControl(req, func(bt *batch) {
		bt.out = c.appendOutcome(bt.out, bt.reqs[0].hdr, c.srv.applyNodeSettings(next, who))
	})
}

func parseNodeSettings(value []byte, cur nodeSettings) (nodeSettings, error) {
	doc, err := throttleDoc(value, "capacity", "default_throttle_reserved_units", "default_throttle_hard_limit")
	if err != nil {
		return cur, err
	}
	next := cur
	if f := doc.Get("capacity"); f.Exists() {
		if next.Capacity, err = countField(f, "capacity"); err != nil {
			return cur, err
		}
	}
	r, h := doc.Get("default_throttle_reserved_units"), doc.Get("default_throttle_hard_limit")
	if r.Exists() != h.Exists() {
		return cur, errors.New("default_throttle_reserved_units and default_throttle_hard_limit must be set together")
	}
	if r.Exists() {
		if next.DefaultReserved, err = limitField(doc, "default_throttle_reserved_units"); err != nil {
			return cur, err
		}
		if next.DefaultHardLimit, err = limitField(doc, "default_throttle_hard_limit"); err != nil {
			return cur, err
		}
		if r, h := next.DefaultReserved, next.DefaultHardLimit; h >= 0 && (r < 0 || r > h) {
			return cur, fmt.Errorf("default_throttle_reserved_units %s exceeds default_throttle_hard_limit %s",
				limitText(r), limitText(h))
		}
	}
	return next, nil
}

// applyNodeSettings persists the node settings, applies them (capacity at
// once, the defaults to buckets created afterwards) and logs the change as
// made by who. It does engine I/O: never call it on an event loop.
func (s *Server) applyNodeSettings(n nodeSettings, who string) error {
	raw, err := json.Marshal(n)
	if err == nil {
		err = s.db.PutMeta(nodeMetaKey, raw)
	}
	if err != nil {
		return err
	}
	old := s.nodeSettings()
	s.setNode(n)
	s.log.Info("node throttle changed", "by", who,
		"old_capacity", old.Capacity, "new_capacity", n.Capacity,
		"old_defaults", limitsText(old.DefaultReserved, old.DefaultHardLimit),
		"new_defaults", limitsText(n.DefaultReserved, n.DefaultHardLimit))
	return nil
}

func (s *Server) setNode(n nodeSettings) {
	def := *s.defaults.Load()
	def.Reserved, def.HardLimit = n.DefaultReserved, n.DefaultHardLimit
	s.defaults.Store(&def)
	s.throttle.SetCapacity(n.Capacity)
}

func (s *Server) nodeSettings() nodeSettings {
	def := s.defaults.Load()
	return nodeSettings{Capacity: s.throttle.Capacity(), DefaultReserved: def.Reserved, DefaultHardLimit: def.HardLimit}
}

// loadNodeSettings applies node settings persisted by an earlier 0x2c; they
// win over the config file's values.
func (s *Server) loadNodeSettings() error {
	raw, err := s.db.Meta(nodeMetaKey)
	if errors.Is(err, engine.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	var n nodeSettings
	if err := json.Unmarshal(raw, &n); err != nil {
		return fmt.Errorf("server: persisted node settings: %w", err)
	}
	s.setNode(n)
	return nil
}

// throttleDoc checks a throttle command's value: at most 1 KiB of JSON
// object whose keys are among allowed. Empty means {}.
func throttleDoc(value []byte, allowed ...string) (gjson.Result, error) {
	if len(value) > maxThrottleJSON {
		return gjson.Result{}, fmt.Errorf("value is %d bytes, over the %d byte limit", len(value), maxThrottleJSON)
	}
	if len(value) == 0 {
		value = []byte("{}")
	}
	if !gjson.ValidBytes(value) {
		return gjson.Result{}, errors.New("value is not valid JSON")
	}
	doc := gjson.ParseBytes(value)
	if !doc.IsObject() {
		return gjson.Result{}, errors.New("value must be a JSON object")
	}
	var err error
	doc.ForEach(func(k, _ gjson.Result) bool {
		for _, a := range allowed {
			if k.Str == a {
				return true
			}
		}
		err = fmt.Errorf("unknown field %q", k.Str)
		return false
	})
	return doc, err
}

// limitField reads a limit: a non-negative integer or "unlimited"; a
// missing field is unlimited.
func limitField(doc gjson.Result, name string) (int64, error) {
	f := doc.Get(name)
	switch {
	case !f.Exists():
		return tenant.Unlimited, nil
	case f.Type == gjson.String && f.Str == "unlimited":
		return tenant.Unlimited, nil
	case f.Type == gjson.Number:
		return countField(f, name)
	}
	return 0, fmt.Errorf("%s must be a non-negative integer or \"unlimited\", got %s", name, f.Raw)
}

// countField reads a non-negative integer.
func countField(f gjson.Result, name string) (int64, error) {
	n, err := strconv.ParseInt(f.Raw, 10, 64)
	if f.Type != gjson.Number || err != nil || n < 0 {
		return 0, fmt.Errorf("%s must be a non-negative integer, got %s", name, f.Raw)
	}
	return n, nil
}

func limitsText(reserved, hard int64) string {
	return "reserved=" + limitText(reserved) + " hard_limit=" + limitText(hard)
}

func limitText(v int64) string {
	if v < 0 {
		return "unlimited"
	}
	return strconv.FormatInt(v, 10)
}

// appendOutcome encodes OK, or the error's status and reason.
func (c *conn) appendOutcome(dst []byte, h header, err error) []byte {
	if err != nil {
		st, reason := statusOf(err)
		return c.appendError(dst, h, st, reason, nil)
	}
	return c.appendReply(dst, h, mc.StatusOK, 0, nil, nil, nil)
}
