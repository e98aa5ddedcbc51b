package server

import (
	"bytes"
	"errors"
	"fmt"
	"strings"

	"kvd/catalog"
	"kvd/command"
	"kvd/ingress"
	"kvd/internal/version"
	"kvd/observe"
	mc "kvd/protocol/binary"
	"kvd/protocol/text"
	"kvd/protocol/translate"
	"kvd/tenant"
	"kvd/work"
)

// noBucketName deselects the current bucket in SELECT_BUCKET (Couchbase's convention).
const noBucketName = "@no bucket@"

// handleControl answers a command that is not a data command. Those that do
// I/O or slow work become a one-command job on a worker.
func (c *conn) handleControl(req *mc.Request) {
	// Control commands are exempt from ingress admission, and counted.
	now := c.srv.opts.Now()
	c.srv.ingress.Release(c.srv.ingress.StartExempt(ingress.Read, nil, now), now)
	switch req.Opcode {
	case mc.OpNoop, mc.OpVerbosity:
		c.reply(req, mc.StatusOK, 0, nil, nil, nil)
	case mc.OpVersion:
		c.reply(req, mc.StatusOK, 0, nil, nil, []byte(version.Reply))
	case mc.OpQuit:
		c.reply(req, mc.StatusOK, 0, nil, nil, nil)
		c.quitting = true
	case mc.OpQuitQ:
		c.quitting = true
	case mc.OpHello: // the features become the supported subset of those asked for
		var reply []byte
		c.enc.Features, reply = command.Hello(req.Value)
		c.reply(req, mc.StatusOK, 0, nil, nil, reply)
	case mc.OpSASLListMechs:
		c.reply(req, mc.StatusOK, 0, nil, nil, []byte("PLAIN"))
	case mc.OpSASLAuth:
		c.saslAuth(req)
	case mc.OpSelectBucket:
		c.selectByName(req)
	case mc.OpListBuckets:
		names := c.srv.cat.Names(c.canSelect)
		c.reply(req, mc.StatusOK, 0, nil, nil, []byte(strings.Join(names, " ")))
	case mc.OpCreateBucket:
		c.admin(req, catalog.AdminCreate, "CREATE_BUCKET")
	case mc.OpDeleteBucket:
		c.admin(req, catalog.AdminDelete, "DELETE_BUCKET")
	case mc.OpFlush, mc.OpFlushQ:
		c.flush(req)
	case mc.OpStat:
		c.stats(req)
	case mc.OpSetBucketThrottle:
		c.admin(req, catalog.AdminSetBucket, "SetBucketThrottleProperties")
	case mc.OpSetNodeThrottle:
		c.admin(req, catalog.AdminSetNode, "SetNodeThrottleProperties")
	default:
		c.replyError(req, mc.StatusUnknownCommand, "Unknown command")
	}
}

// saslAuth checks PLAIN credentials' form on the loop and starts the login.
func (c *conn) saslAuth(req *mc.Request) {
	name, password, err := tenant.ParsePlain(string(req.Key), req.Value)
	if err != nil {
		c.anonymous() // a refused login ends the identity the connection had
		c.replyError(req, mc.StatusAuthError, err.Error())
		return
	}
	b, hdr := c.srv.work.NewBatch(c, &c.enc, c.bucket), command.HeaderOf(req)
	c.startLogin(b, name, bytes.Clone(password), false, func(err error) {
		if err != nil {
			st, reason := command.StatusOf(err)
			b.Out = c.enc.Error(b.Out, hdr, st, reason, nil)
			return
		}
		b.Out = c.enc.Reply(b.Out, hdr, mc.StatusOK, 0, nil, nil, []byte("Authenticated"))
	})
}

// startLogin hands name's password to the login gate (tenant.LoginGate: paced
// per remote address, verified on its own pool); b, the connection's batch in
// flight meanwhile, comes back with answer's reply, and the login (or on
// failure anonymous) applies on the loop when b is collected. On a system-band
// connection (slots.Settle) it must be a privileged user's, or the connection closes.
func (c *conn) startLogin(b *work.Batch, name string, password []byte, anyBucket bool, answer func(err error)) {
	c.inflight, c.loginTurn = b, true
	c.srv.slots.Settle(c.slot)
	// A login that waits its turn is read on (stall): its client's leaving is seen.
	c.queued = c.srv.logins.Submit(c.remote, c.box.Gone, func() bool {
		gen := c.srv.usersGen.Load() // the users this login is checked against
		user, err := c.srv.users.Authenticate(name, password)
		if err == nil && c.slot.Band() && user.Privileges == 0 { // the system band (package slots) is the privileged users'
			err = fmt.Errorf("%w: too many open connections (max_connections): this one is in the system band, where only a privileged user may log in", tenant.ErrNotPrivileged)
		}
		if err != nil {
			c.srv.log.Warn("login refused", "user", name, "remote", c.remote, "system_band", c.slot.Band())
			b.After = func() { c.anonymous(); c.quitting = c.quitting || c.slot.Band() } // ends the identity it had
		} else {
			b.After = func() { c.login(user, anyBucket); c.usersGen = gen }
		}
		answer(err)
		return err == nil
	}, func() { c.Finish(b) })
}

// login makes user the connection's identity. Like Couchbase, it selects the
// bucket named after the user when there is one the user may use, and with
// anyBucket (text's login) otherwise the user's first bucket in name order.
func (c *conn) login(user *tenant.User, anyBucket bool) {
	c.user, c.unthrottled = user, user.Privileges.Has(tenant.PrivUnthrottled)
	c.deselect()
	b, ok := c.srv.cat.Get(user.Name)
	if (!ok || !user.CanSelect(b.Name())) && anyBucket {
		if names := c.srv.cat.Names(user.CanSelect); len(names) > 0 {
			b, ok = c.srv.cat.Get(names[0])
		}
	}
	if ok && user.CanSelect(b.Name()) {
		c.autoSelect(b)
	}
}

// anonymous makes a new connection, or one whose login was refused (Couchbase
// restarts authentication at each SASL_AUTH), unauthenticated, on the
// anonymous bucket if there is one and it is not in the system band.
func (c *conn) anonymous() {
	c.user, c.unthrottled = nil, false
	c.deselect()
	if b, ok := c.srv.cat.Get(c.srv.limits().AnonymousBucket); ok && !c.slot.Band() {
		c.autoSelect(b)
	}
}

// autoSelect selects b for a connection that did not ask for it (the
// bucket a login lands on, the anonymous bucket) if b has room for it
// (bucketFull). Otherwise the connection is without a bucket until a data
// command finds room (precheck), and their 0x08 says why (noBucketReason).
func (c *conn) autoSelect(b *catalog.Bucket) {
	if c.bucketFull(b) {
		c.noBucket, c.wantBucket = fmt.Sprintf("no bucket selected: bucket %s has max_connections_per_bucket=%d connections", b.Name(), c.srv.limits().MaxConnectionsPerBucket), b.Name()
		return
	}
	c.selectBucket(b)
}

// bucketFull reports whether b has no room for c: it holds
// max_connections_per_bucket connections besides c, and c's user is not
// exempt (Unthrottled, BucketThrottleManagement).
func (c *conn) bucketFull(b *catalog.Bucket) bool {
	exempt := c.privileged(tenant.PrivUnthrottled) || c.privileged(tenant.PrivBucketThrottleManagement)
	limit := int64(c.srv.limits().MaxConnectionsPerBucket)
	return !exempt && c.bucket != b && b.Throttle().Clients() >= limit
}

// noBucketReason is why a connection without a bucket gets 0x08.
func (c *conn) noBucketReason() string {
	if c.noBucket != "" {
		return c.noBucket
	}
	return "no bucket selected"
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
	b, ok := c.srv.cat.Get(name)
	if !ok {
		c.replyError(req, mc.StatusKeyNotFound, "no such bucket: "+name)
		return
	}
	if c.bucketFull(b) {
		c.replyError(req, mc.StatusBusy, fmt.Sprintf("too many connections to bucket %s (max_connections_per_bucket=%d)", name, c.srv.limits().MaxConnectionsPerBucket))
		return
	}
	c.selectBucket(b)
	c.reply(req, mc.StatusOK, 0, nil, nil, nil)
}

// startControl runs job on a worker as a one-command batch for req.
func (c *conn) startControl(req *mc.Request, job func(b *work.Batch)) {
	b := c.srv.work.NewBatch(c, &c.enc, c.bucket)
	b.Add(req)
	b.Job = job
	c.startJob(b)
}

// admin handles CREATE_BUCKET, DELETE_BUCKET, SetBucketThrottleProperties
// (0x2a) and SetNodeThrottleProperties (0x2c), whose keys and JSON bodies
// catalog.Prepare decodes and checks on the loop; the change, which writes
// the catalog, runs on a worker.
func (c *conn) admin(req *mc.Request, cmd catalog.Admin, what string) {
	if !c.privileged(tenant.PrivBucketThrottleManagement) {
		c.replyError(req, mc.StatusAccessDenied, what+" needs the BucketThrottleManagement privilege")
		return
	}
	apply, err := c.srv.cat.Prepare(cmd, string(req.Key), req.Value)
	if err != nil {
		c.replyErr(req, err)
		return
	}
	who := c.user.Name // privileged: logged in
	c.startControl(req, func(b *work.Batch) { b.Out = c.enc.Outcome(b.Out, b.Reqs[0].Hdr, apply(who)) })
}

// flush handles FLUSH/FLUSHQ: every item of the selected bucket goes, and
// nothing of any other bucket. With a delay in the extras (memcached's
// semantics) the items that exist when the delay ends go then, and are
// served until then (see command.Flush for a time that has passed).
func (c *conn) flush(req *mc.Request) {
	if c.bucket == nil {
		c.replyError(req, mc.StatusNoBucket, c.noBucketReason())
		return
	}
	quiet := req.Opcode.IsQuiet()
	delay, _ := mc.FlushExtras(req.Extras)
	c.startControl(req, func(b *work.Batch) {
		switch err := command.Flush(c.srv.cat, b.Bucket, delay, c.srv.opts.Now(), c.srv.started); {
		case err != nil:
			st, reason := command.StatusOf(err)
			b.Out = c.enc.Error(b.Out, b.Reqs[0].Hdr, st, reason, nil)
		case !quiet:
			b.Out = c.enc.Reply(b.Out, b.Reqs[0].Hdr, mc.StatusOK, 0, nil, nil, nil)
		}
	})
}

// stats answers STAT: one reply per statistic, then an empty terminator.
// The groups are package observe's (observe.View.Stats); an unknown one
// gets 0x01. Without an anonymous bucket an unauthenticated connection gets
// 0x24 for every group.
func (c *conn) stats(req *mc.Request) {
	if c.user == nil && c.srv.limits().AnonymousBucket == "" {
		c.replyError(req, mc.StatusAccessDenied, "authenticate first: no anonymous access")
		return
	}
	group, arg, _ := strings.Cut(string(req.Key), " ")
	emit := func(name string, value []byte) { c.reply(req, mc.StatusOK, 0, nil, []byte(name), value) }
	emitJSON := func(name string, doc []byte) { c.statJSON(req, name, doc) }
	if err := c.srv.view.Stats(group, arg, c.bucket, c.canSee, emit, emitJSON); err != nil {
		c.replyErr(req, err)
		return
	}
	c.reply(req, mc.StatusOK, 0, nil, nil, nil)
}

// statJSON sends a stat whose value is a JSON document, marked as JSON
// when the client negotiated the JSON feature.
func (c *conn) statJSON(req *mc.Request, name string, doc []byte) {
	res := mc.Response{Opcode: req.Opcode, Opaque: req.Opaque, Key: []byte(name), Value: doc, Datatype: c.enc.JSONType()}
	c.out = mc.AppendResponse(c.out, req.Alt(), &res)
}

// canSee reports whether the connection may read a bucket's details: with
// the Stats privilege every bucket, otherwise those it may select.
func (c *conn) canSee(name string) bool {
	return c.privileged(tenant.PrivStats) || c.canSelect(name)
}

// textControl answers the text commands that run on the loop, and on a
// worker flush_all (as FLUSH does) and the key listings. Like binary's
// control commands they are exempt from ingress admission, and counted.
func (c *conn) textControl(cmd *text.Command) {
	now := c.srv.opts.Now()
	c.srv.ingress.Release(c.srv.ingress.StartExempt(ingress.Read, nil, now), now)
	switch cmd.Kind {
	case text.KindVersion:
		c.out = text.AppendVersion(c.out, version.Reply)
	case text.KindVerbosity:
		c.out = text.AppendReply(c.out, cmd, nil, &text.Outcome{Status: text.StatusOK})
	case text.KindQuit:
		c.quitting = true
	case text.KindMetaNoop:
		c.out = text.AppendNoop(c.out)
	case text.KindStats:
		c.textStats(translate.StatsArgs(cmd))
	case text.KindDump: // stats cachedump, lru_crawler metadump: the store's keys, on a worker a chunk at a time
		d := c.txt.Dump()
		if !c.textJob(func(bk *catalog.Bucket, out []byte) []byte {
			return command.Dump(bk, d, uint32(c.srv.opts.Now().Unix()), out)
		}) {
			d.Finish() // no bucket: answered
		}
	case text.KindFlushAll:
		c.textFlush(translate.FlushDelay(cmd), cmd.NoReply)
	}
}

// textAuth is memcached's -Y authentication: a connection's first command must be "set <key>
// <flags> <exptime> <len>" whose data is "<user> <password>", verified as SASL's (startLogin);
// STORED selects the bucket named like the user if allowed, else the user's first by name.
// Refusals, after which the client may try again, are memcached 1.6's: "unauthenticated" for
// other commands, "bad authentication token format", "authentication failure".
func (c *conn) textAuth(cmd *text.Command) {
	if cmd.Kind != text.KindSet {
		c.refuseLogin(false)
		return
	}
	name, password := translate.LoginTokens(cmd.Value)
	if name == nil {
		c.out = text.AppendClientError(c.out, "bad authentication token format")
		return
	}
	b := c.srv.work.NewBatch(c, &c.enc, c.bucket)
	c.startLogin(b, string(name), bytes.Clone(password), true, func(err error) {
		if err != nil {
			b.Out = text.AppendClientError(b.Out, "authentication failure")
			return
		}
		b.Out = append(b.Out, "STORED\r\n"...)
	})
}

// textStats answers stats [group [arg]]: the general group as memcached
// formats it and kvd's groups, from the gatherers binary's STAT uses.
func (c *conn) textStats(group, arg string) {
	emit := func(name string, value []byte) { c.out = text.AppendStat(c.out, name, string(value)) }
	switch err := c.srv.view.Stats(group, arg, c.bucket, c.canSee, emit, emit); {
	case errors.Is(err, observe.ErrUnknownGroup):
		c.out = text.AppendError(c.out)
	case err != nil:
		_, reason := command.StatusOf(err)
		c.out = text.AppendClientError(c.out, reason)
	default:
		c.out = text.AppendStatsEnd(c.out, group)
	}
}

// textFlush is flush_all [delay]: on a worker, as binary FLUSH does
// (command.Flush), the delay with memcached's meaning.
func (c *conn) textFlush(delay uint32, noreply bool) {
	c.textJob(func(bk *catalog.Bucket, out []byte) []byte {
		switch err := command.Flush(c.srv.cat, bk, delay, c.srv.opts.Now(), c.srv.started); {
		case err != nil:
			_, reason := command.StatusOf(err)
			return text.AppendServerError(out, reason)
		case !noreply:
			return append(out, "OK\r\n"...)
		}
		return out
	})
}

// textJob runs job for the selected bucket on a worker, what it appends going
// out in order; with none selected it answers why and reports false.
func (c *conn) textJob(job func(bk *catalog.Bucket, out []byte) []byte) bool {
	if c.bucket == nil {
		c.out = text.AppendServerError(c.out, c.noBucketReason())
		return false
	}
	b := c.srv.work.NewBatch(c, &c.enc, c.bucket)
	b.Job = func(b *work.Batch) { b.Out = job(b.Bucket, b.Out) }
	c.startJob(b)
	return true
}

// revalidate applies the current users and limits to the connection: a
// deleted user's connection, or a system-band one left without privileges,
// is closed (after the replies of this pass), a
// bucket the user (or, unauthenticated, the anonymous bucket setting) no
// longer grants is deselected, and the privilege flags are recomputed.
// Each change is logged with the connection's remote address.
func (c *conn) revalidate() {
	if c.user == nil {
		if c.bucket != nil && c.bucket.Name() != c.srv.limits().AnonymousBucket {
			c.srv.log.Info("access revoked", "by", "config", "remote", c.remote, "user", "anonymous",
				"bucket", c.bucket.Name(), "reason", "no longer the anonymous bucket")
			c.deselect()
		}
		return
	}
	name := c.user.Name
	u, ok := c.srv.users.Lookup(name)
	if !ok || !u.SameCredentials(c.user) {
		reason := "user deleted"
		if ok {
			reason = "password changed"
		}
		c.srv.log.Info("access revoked", "by", "config", "remote", c.remote, "user", name,
			"reason", reason+": closing the connection")
		c.quitting = true
		return
	}
	old := c.user.Privileges
	c.user, c.unthrottled = u, u.Privileges.Has(tenant.PrivUnthrottled)
	if old != u.Privileges {
		c.srv.log.Info("privileges changed", "by", "config", "remote", c.remote, "user", name,
			"from", old.String(), "to", u.Privileges.String())
		c.quitting = c.quitting || c.slot.Band() && u.Privileges == 0 // the system band is the privileged users'
	}
	if c.bucket != nil && !u.CanSelect(c.bucket.Name()) {
		c.srv.log.Info("access revoked", "by", "config", "remote", c.remote, "user", name,
			"bucket", c.bucket.Name(), "reason", "bucket no longer granted: deselected")
		c.deselect()
	}
}
