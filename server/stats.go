package server

import (
	"encoding/json"
	"strconv"
	"strings"

	mc "kvd/protocol/binary"
	"kvd/tenant"
)

// stats answers STAT: one reply per statistic, then an empty terminator.
// Groups: "" (general), "bucket_details [name]", "throttle", "ingress". An unknown
// group gets 0x01.
func (c *conn) stats(req *mc.Request) {
	group, arg, _ := strings.Cut(string(req.Key), " ")
	var st mc.Status
	var reason string
	switch group {
	case "":
		c.generalStats(req)
	case "bucket_details":
		st, reason = c.bucketDetails(req, arg)
	case "throttle":
		c.throttleStats(req)
	case "ingress":
		c.ingressStats(req)
	default:
		st, reason = mc.StatusKeyNotFound, "unknown stat group "+strconv.Quote(group)
	}
	if st != mc.StatusOK {
		c.replyError(req, st, reason)
		return
	}
	c.reply(req, mc.StatusOK, 0, nil, nil, nil)
}

func (c *conn) stat(req *mc.Request, name string, value []byte) {
	c.reply(req, mc.StatusOK, 0, nil, []byte(name), value)
}

// statJSON sends a stat whose value is a JSON document, marked as JSON
// when the client negotiated the JSON feature.
func (c *conn) statJSON(req *mc.Request, name string, doc []byte) {
	res := mc.Response{Opcode: req.Opcode, Opaque: req.Opaque, Key: []byte(name), Value: doc}
	if c.features&featJSON != 0 {
		res.Datatype = mc.DatatypeJSON
	}
	c.out = mc.AppendResponse(c.out, req.Alt(), &res)
}

func (c *conn) statInt(req *mc.Request, name string, v int64) {
	var b [20]byte
	c.stat(req, name, strconv.AppendInt(b[:0], v, 10))
}

// generalStats are memcached's node figures plus those of the selected
// bucket (a tenant sees only its own bucket's counters).
func (c *conn) generalStats(req *mc.Request) {
	s := c.srv
	now := s.opts.Now()
	c.statInt(req, "pid", int64(s.pid))
	c.statInt(req, "uptime", int64(now.Sub(s.started).Seconds()))
	c.statInt(req, "time", now.Unix())
	c.stat(req, "version", []byte(Version))
	c.statInt(req, "threads", int64(s.opts.Loops))
	c.statInt(req, "curr_connections", s.currConns.Load())
	c.statInt(req, "total_connections", s.totalConns.Load())
	c.statInt(req, "max_connections", int64(s.limits().MaxConnections))
	b := c.bucket
	if b == nil || b.deleted.Load() {
		return
	}
	c.stat(req, "bucket", []byte(b.name))
	c.statInt(req, "cmd_get", b.cmdGet.Load())
	c.statInt(req, "cmd_set", b.cmdSet.Load())
	c.statInt(req, "get_hits", b.getHits.Load())
	c.statInt(req, "get_misses", b.getMisses.Load())
	c.statInt(req, "cmd_touch", b.cmdTouch.Load())
	c.statInt(req, "touch_hits", b.touchHits.Load())
	c.statInt(req, "touch_misses", b.touchMisses.Load())
	c.statInt(req, "curr_items", b.store.ItemCount())
}

// bucketDetail is the JSON document of STAT bucket_details.
type bucketDetail struct {
	Name              string `json:"name"`
	Clients           int64  `json:"clients"`
	RU                int64  `json:"ru"`
	WU                int64  `json:"wu"`
	NumCommands       int64  `json:"num_commands"`
	NumThrottled      int64  `json:"num_throttled"`
	NumRejected       int64  `json:"num_rejected"`
	ThrottleWaitTime  int64  `json:"throttle_wait_time"`
	ThrottleReserved  any    `json:"throttle_reserved"`
	ThrottleHardLimit any    `json:"throttle_hard_limit"`
	EffectiveReserved int64  `json:"throttle_effective_reserved"`
	FreePoolShare     int64  `json:"throttle_free_pool_share"`
	UnitsThisSecond   int64  `json:"units_this_second"`
	Items             int64  `json:"curr_items"`
}

func detailOf(b *bucket) bucketDetail {
	st := b.thr.Stats()
	return bucketDetail{
		Name: b.name, Clients: st.Clients, RU: st.RU, WU: st.WU, NumCommands: st.Commands,
		NumThrottled: st.Throttled, NumRejected: st.Rejected, ThrottleWaitTime: st.WaitUS,
		ThrottleReserved: limitJSON(st.Reserved), ThrottleHardLimit: limitJSON(st.HardLimit),
		EffectiveReserved: st.EffectiveReserved, FreePoolShare: st.Share, UnitsThisSecond: st.Used,
		Items: b.store.ItemCount(),
	}
}

func limitJSON(v int64) any {
	if v < 0 {
		return "unlimited"
	}
	return v
}

// canSee reports whether the connection may read a bucket's details: with
// the Stats privilege every bucket, otherwise those it may select.
func (c *conn) canSee(name string) bool {
	return c.privileged(tenant.PrivStats) || c.canSelect(name)
}

// bucketDetails answers STAT "bucket_details NAME" with that bucket's JSON
// document under its name, or "bucket_details" with
// {"buckets":[…]} of every bucket the caller may see.
func (c *conn) bucketDetails(req *mc.Request, name string) (mc.Status, string) {
	if name != "" {
		b, ok := c.srv.buckets.get(name)
		switch {
		case !c.canSee(name):
			return mc.StatusAccessDenied, "no access to bucket " + name
		case !ok:
			return mc.StatusKeyNotFound, "no such bucket: " + name
		}
		doc, _ := json.Marshal(detailOf(b))
		c.statJSON(req, name, doc)
		return mc.StatusOK, ""
	}
	var all struct {
		Buckets []bucketDetail `json:"buckets"`
	}
	all.Buckets = []bucketDetail{}
	for _, n := range c.srv.buckets.names(c.canSee) {
		if b, ok := c.srv.buckets.get(n); ok {
			all.Buckets = append(all.Buckets, detailOf(b))
		}
	}
	doc, _ := json.Marshal(all)
	c.statJSON(req, "bucket_details", doc)
	return mc.StatusOK, ""
}

// throttleStats answers STAT "throttle": the node's capacity, free pool and
// tick.
func (c *conn) throttleStats(req *mc.Request) {
	st := c.srv.throttle.Stats()
	def := c.srv.defaultSettings()
	c.statInt(req, "capacity", st.Capacity)
	c.statInt(req, "free_pool", st.FreePool)
	c.statInt(req, "free_pool_used", st.FreeUsed)
	c.statInt(req, "free_pool_spare", st.Spare)
	c.statInt(req, "free_pool_spare_used", st.SpareUsed)
	c.statInt(req, "node_units_this_second", st.NodeUsed)
	c.statInt(req, "node_units_last_second", st.LastSecond)
	c.statInt(req, "ticks", st.Ticks)
	c.statInt(req, "tick_start_us", st.TickStart.UnixMicro())
	c.stat(req, "default_throttle_reserved_units", []byte(limitText(def.Reserved)))
	c.stat(req, "default_throttle_hard_limit", []byte(limitText(def.HardLimit)))
}
