package server

import (
	"bytes"
	"encoding/binary"
	"strings"

	"kvd/ingress"
	mc "kvd/protocol/binary"
	"kvd/tenant"
)

// noBucketName deselects the current bucket in SELECT_BUCKET (Couchbase's
// convention).
const noBucketName = "@no bucket@"

// helloFeatures maps HELLO feature codes to what they enable.
var helloFeatures = map[uint16]features{
	0x07: featXError,
	0x08: featSelectBucket,
	0x0b: featJSON,
	0x10: featAltRequest,
	0x1a: featReportUnits,
	0x1b: featNonBlocking,
}

// handleControl answers a command that is not a data command. Those that do
// I/O or slow work become a one-command job on a worker.
func (c *conn) handleControl(req *mc.Request) {
	// Control commands are exempt from ingress admission, and counted.
	now := c.srv.opts.Now()
	c.srv.ingress.Release(c.srv.ingress.StartExempt(ingress.Read, now), now)
	switch req.Opcode {
	case mc.OpNoop, mc.OpVerbosity:
		c.reply(req, mc.StatusOK, 0, nil, nil, nil)
	case mc.OpVersion:
		c.reply(req, mc.StatusOK, 0, nil, nil, []byte(Version))
	case mc.OpQuit:
		c.reply(req, mc.StatusOK, 0, nil, nil, nil)
		c.quitting = true
	case mc.OpQuitQ:
		c.quitting = true
	case mc.OpHello:
		c.hello(req)
	case mc.OpSASLListMechs:
		c.reply(req, mc.StatusOK, 0, nil, nil, []byte("PLAIN"))
	case mc.OpSASLAuth:
		c.saslAuth(req)
	case mc.OpSelectBucket:
		c.selectByName(req)
	case mc.OpListBuckets:
		names := c.srv.buckets.names(c.canSelect)
		c.reply(req, mc.StatusOK, 0, nil, nil, []byte(strings.Join(names, " ")))
	case mc.OpCreateBucket:
		c.createBucket(req)
	case mc.OpDeleteBucket:
		c.deleteBucket(req)
	case mc.OpFlush, mc.OpFlushQ:
		c.flush(req)
	case mc.OpStat:
		c.stats(req)
	case mc.OpSetBucketThrottle:
		c.setBucketThrottle(req)
	case mc.OpSetNodeThrottle:
		c.setNodeThrottle(req)
	default:
		c.replyError(req, mc.StatusUnknownCommand, "Unknown command")
	}
}

// hello resets the connection's features to the supported subset of those
// asked for, and answers with that subset.
func (c *conn) hello(req *mc.Request) {
	c.features = 0
	var reply []byte
	for v := req.Value; len(v) >= 2; v = v[2:] {
		code := binary.BigEndian.Uint16(v)
		f, ok := helloFeatures[code]
		if !ok || c.features&f != 0 {
			continue
		}
		c.features |= f
		reply = binary.BigEndian.AppendUint16(reply, code)
	}
	c.reply(req, mc.StatusOK, 0, nil, nil, reply)
}

// saslAuth verifies PLAIN credentials on a worker (password hashing is slow
// by design) and applies the result on the loop.
func (c *conn) saslAuth(req *mc.Request) {
	if string(req.Key) != "PLAIN" {
		c.replyError(req, mc.StatusAuthError, "unsupported mechanism: use PLAIN")
		return
	}
	parts := bytes.SplitN(req.Value, []byte{0}, 3)
	if len(parts) != 3 {
		c.replyError(req, mc.StatusAuthError, "malformed PLAIN credentials")
		return
	}
	name, password := string(parts[1]), bytes.Clone(parts[2])
	c.startControl(req, func(b *batch) {
		user, err := c.srv.users.Authenticate(name, password)
		if err != nil {
			c.srv.log.Warn("login refused", "user", name, "remote", c.remote)
			st, reason := statusOf(err)
			b.out = c.appendError(b.out, b.reqs[0].hdr, st, reason, nil)
			return
		}
		b.out = c.appendReply(b.out, b.reqs[0].hdr, mc.StatusOK, 0, nil, nil, []byte("Authenticated"))
		b.after = func(c *conn) { c.login(user) }
	})
}

// login makes user the connection's identity. Like Couchbase, it selects the
// bucket named after the user when there is one the user may use.
func (c *conn) login(user *tenant.User) {
	c.user = user
	c.unthrottled = user.Privileges.Has(tenant.PrivUnthrottled)
	c.deselect()
	if b, ok := c.srv.buckets.get(user.Name); ok && user.CanSelect(b.name) {
		c.selectBucket(b)
	}
}

// canSelect reports whether the connection may select the bucket name.
func (c *conn) canSelect(name string) bool {
	if c.user == nil {
		return name == c.srv.limits().AnonymousBucket
	}
	return c.user.CanSelect(name)
}

func (c *conn) privileged(p tenant.Privilege) bool {
	return c.user != nil && c.user.Privileges.Has(p)
}

func (c *conn) selectByName(req *mc.Request) {
	name := string(req.Key)
	if name == noBucketName {
		c.deselect()
		c.reply(req, mc.StatusOK, 0, nil, nil, nil)
		return
	}
	if !c.canSelect(name) {
		c.replyError(req, mc.StatusAccessDenied, "no access to bucket "+name)
		return
	}
	b, ok := c.srv.buckets.get(name)
	if !ok {
		c.replyError(req, mc.StatusKeyNotFound, "no such bucket: "+name)
		return
	}
	exempt := c.privileged(tenant.PrivUnthrottled) || c.privileged(tenant.PrivBucketThrottleManagement)
	if limit := int64(c.srv.limits().MaxConnectionsPerBucket); !exempt && c.bucket != b && b.thr.Clients() >= limit {
		c.replyError(req, mc.StatusBusy, "too many connections to bucket "+name)
		return
	}
	c.selectBucket(b)
	c.reply(req, mc.StatusOK, 0, nil, nil, nil)
}

// startControl runs job on a worker as a one-command batch for req.
func (c *conn) startControl(req *mc.Request, job func(b *batch)) {
	b := newBatch(c, c.bucket)
	b.add(req)
	b.job = job
	c.startJob(b)
}
