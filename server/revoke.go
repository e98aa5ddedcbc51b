package server

import "kvd/tenant"

// Revocation: a config reload that removes a user, a user's access to a
// bucket or a privilege (or changes the anonymous bucket) reaches every
// open connection before its next command. Reconfigure bumps the server's
// users generation after replacing the users and limits, and wakes every
// connection; each connection compares its own generation with the
// server's at the top of every command (one atomic load) and, when they
// differ, checks its identity again on its own loop (revalidate). Connection
// state thus stays with its loop; the wake only makes the check prompt, so
// that the admin log names the connections affected at reload time.

// revoke publishes a new users generation and wakes every connection to
// check its identity against it. Reconfigure calls it after the users and
// limits are replaced.
func (s *Server) revoke() {
	s.usersGen.Add(1)
	for _, c := range s.conns.snapshot() {
		_ = c.gc.Wake(nil)
	}
}

// checkUsers revalidates the connection when the users generation moved
// since it last looked. It runs on the loop with no batch in flight.
func (c *conn) checkUsers() {
	if gen := c.srv.usersGen.Load(); gen != c.usersGen {
		c.usersGen = gen
		c.revalidate()
	}
}

// revalidate applies the current users and limits to the connection: a
// deleted user's connection is closed (after the replies of this pass), a
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
	if !ok {
		c.srv.log.Info("access revoked", "by", "config", "remote", c.remote, "user", name,
			"reason", "user deleted: closing the connection")
		c.quitting = true
		return
	}
	old := c.user.Privileges
	c.user = u
	c.unthrottled = u.Privileges.Has(tenant.PrivUnthrottled)
	if old != u.Privileges {
		c.srv.log.Info("privileges changed", "by", "config", "remote", c.remote, "user", name,
			"from", old.String(), "to", u.Privileges.String())
	}
	if c.bucket != nil && !u.CanSelect(c.bucket.Name()) {
		c.srv.log.Info("access revoked", "by", "config", "remote", c.remote, "user", name,
			"bucket", c.bucket.Name(), "reason", "bucket no longer granted: deselected")
		c.deselect()
	}
}

// snapshot returns the open connections.
func (cs *connSet) snapshot() []*conn {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	all := make([]*conn, 0, len(cs.m))
	for c := range cs.m {
		all = append(all, c)
	}
	return all
}
