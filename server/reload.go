package server

import (
	"errors"

	"kvd/catalog"
	"kvd/server/options"
)

// ErrFileConflict is Reconfigure's error when the file's buckets were refused (catalog's).
var ErrFileConflict = catalog.ErrFileConflict

// Reconfigure applies a reloaded config file: node throttle, bucket
// settings and new buckets (where the file changed: see package catalog),
// users, limits and ingress settings. Settings that need a restart (listen
// address, data directory, wal_sync, frame and item size, probe bounds) are
// reported in the returned list and left as they are. On error nothing
// after the failing step is applied, and the catalog's step applies whole
// or not at all (unless its engine writes fail part of the way); but when
// it is refused for a conflict with a run-time setting
// (ErrFileConflict), its error is returned after the users, limits
// and ingress settings are applied all the same, as at a start, so that no
// bucket conflict holds a revocation back.
func (s *Server) Reconfigure(next Options) (needRestart []string, err error) {
	next.EnsureDefaults()
	if err := next.Validate(); err != nil {
		return nil, err
	}
	users, err := catalog.BuildUsers(next.Users, s.log)
	if err != nil {
		return nil, err
	}
	s.reloadMu.Lock()
	defer s.reloadMu.Unlock()
	catErr := s.cat.ApplyFile(options.CatalogFile(&next), "config")
	if catErr != nil && !errors.Is(catErr, catalog.ErrFileConflict) {
		return nil, catErr
	}
	if s.cat.Cluster() == nil { // in a cluster, users arrive from etcd (UsersChanged)
		if err := s.users.Replace(users); err != nil {
			return nil, err
		}
	}
	s.lim.Store(options.LimitsOf(&next))
	s.revoke()
	if err := s.ingress.Reconfigure(&next.Ingress, s.opts.Now()); err != nil || catErr != nil {
		return nil, errors.Join(catErr, err)
	}
	return options.RestartNeeded(&s.opts, &next), nil
}

// UsersChanged implements catalog.Observer: in a cluster, users that
// arrive from etcd replace the node's users (an invalid list is refused
// whole; the old users stay).
func (h bucketHooks) UsersChanged(specs []catalog.UserSpec) error {
	list, err := catalog.BuildUsers(specs, h.s.log)
	if err != nil {
		return err
	}
	if err := h.s.users.Replace(list); err != nil {
		return err
	}
	h.s.revoke() // open connections too, as after a reload of this node's own file
	return nil
}

// revoke makes a reload that removed a user, a bucket grant or a
// privilege (or changed the anonymous bucket) reach every open connection
// before its next command: it bumps the users generation, which each
// connection compares with its own at the top of every command (one atomic
// load) and, when they differ, checks its identity again on its own loop
// (revalidate); the wake makes that prompt, so the admin log names the
// connections affected at reload time. Reconfigure calls it after the
// users and limits are replaced.
func (s *Server) revoke() {
	s.usersGen.Add(1)
	s.eachConn(func(c *conn) bool { _ = c.gc.Wake(nil); return true })
}
