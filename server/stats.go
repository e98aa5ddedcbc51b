package server

import (
	"strconv"

	mc "kvd/protocol/binary"
)

// stats answers STAT: one reply per statistic, then an empty terminator.
// Groups: "" (general). An unknown group gets 0x01.
func (c *conn) stats(req *mc.Request) {
	group := string(req.Key)
	var ok bool
	switch group {
	case "":
		ok = c.generalStats(req)
	}
	if !ok {
		c.replyError(req, mc.StatusKeyNotFound, "unknown stat group "+strconv.Quote(group))
		return
	}
	c.reply(req, mc.StatusOK, 0, nil, nil, nil)
}

func (c *conn) stat(req *mc.Request, name string, value []byte) {
	c.reply(req, mc.StatusOK, 0, nil, []byte(name), value)
}

func (c *conn) statInt(req *mc.Request, name string, v int64) {
	var b [20]byte
	c.stat(req, name, strconv.AppendInt(b[:0], v, 10))
}

// generalStats are memcached's node figures plus those of the selected
// bucket (a tenant sees only its own bucket's counters).
func (c *conn) generalStats(req *mc.Request) bool {
	s := c.srv
	now := s.opts.Now()
	c.statInt(req, "pid", int64(s.pid))
	c.statInt(req, "uptime", int64(now.Sub(s.started).Seconds()))
	c.statInt(req, "time", now.Unix())
	c.stat(req, "version", []byte(Version))
	c.statInt(req, "threads", int64(s.opts.Loops))
	c.statInt(req, "curr_connections", s.currConns.Load())
	c.statInt(req, "total_connections", s.totalConns.Load())
	c.statInt(req, "max_connections", int64(s.opts.MaxConnections))
	b := c.bucket
	if b == nil || b.deleted.Load() {
		return true
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
	return true
}
