package server

import (
	"errors"

	"kvd/engine"
	mc "kvd/protocol/binary"
	"kvd/tenant"
)

// createBucket handles CREATE_BUCKET: key = name, value = empty or a JSON
// object of bucket settings.
func (c *conn) createBucket(req *mc.Request) {
	if !c.privileged(tenant.PrivBucketThrottleManagement) {
		c.replyError(req, mc.StatusAccessDenied, "CREATE_BUCKET needs the BucketThrottleManagement privilege")
		return
	}
	name := string(req.Key)
	if err := tenant.ValidBucketName(name); err != nil {
		c.replyError(req, mc.StatusInvalidArguments, err.Error())
		return
	}
	set, err := tenant.ParseSettings(req.Value, c.srv.defaultSettings())
	if err != nil {
		c.replyError(req, mc.StatusInvalidArguments, err.Error())
		return
	}
	who := c.who()
	c.startControl(req, func(b *batch) {
		_, err := c.srv.createBucket(name, set, who)
		b.out = c.appendOutcome(b.out, b.reqs[0].hdr, err)
	})
}

// deleteBucket handles DELETE_BUCKET: key = name. Its data is removed; the
// connections that have it selected get "no bucket" from then on.
func (c *conn) deleteBucket(req *mc.Request) {
	if !c.privileged(tenant.PrivBucketThrottleManagement) {
		c.replyError(req, mc.StatusAccessDenied, "DELETE_BUCKET needs the BucketThrottleManagement privilege")
		return
	}
	name, who := string(req.Key), c.who()
	c.startControl(req, func(b *batch) {
		if err := c.srv.deleteBucket(name); err != nil {
			st, reason := statusOf(err)
			if errors.Is(err, engine.ErrBucketNotFound) {
				reason = "no such bucket: " + name
			}
			b.out = c.appendError(b.out, b.reqs[0].hdr, st, reason, nil)
			return
		}
		c.srv.log.Info("bucket deleted", "by", who, "bucket", name)
		b.out = c.appendReply(b.out, b.reqs[0].hdr, mc.StatusOK, 0, nil, nil, nil)
	})
}

// flush handles FLUSH/FLUSHQ: every item of the selected bucket goes, and
// nothing of any other bucket. A delay in the extras is not supported: the
// flush happens at once.
func (c *conn) flush(req *mc.Request) {
	if c.bucket == nil {
		c.replyError(req, mc.StatusNoBucket, "no bucket selected")
		return
	}
	quiet := req.Opcode.IsQuiet()
	c.startControl(req, func(b *batch) {
		err := b.bucket.store.Flush()
		if err == nil {
			err = c.srv.db.SyncWAL()
		}
		switch {
		case err != nil:
			st, reason := statusOf(err)
			b.out = c.appendError(b.out, b.reqs[0].hdr, st, reason, nil)
		case !quiet:
			b.out = c.appendReply(b.out, b.reqs[0].hdr, mc.StatusOK, 0, nil, nil, nil)
		}
	})
}

// who names the connection's user for admin log lines.
func (c *conn) who() string {
	if c.user == nil {
		return "anonymous"
	}
	return c.user.Name
}

// defaultSettings are the settings a bucket created without any gets.
func (s *Server) defaultSettings() tenant.Settings {
	return *s.defaults.Load()
}
