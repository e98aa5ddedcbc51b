package server

import mc "kvd/protocol/binary"

// admit is the one place where a decoded data command asks whether it may
// run now. It is called on the loop, before the command is copied into a
// batch. Returning false leaves the command in the input: the connection
// then waits until whoever said no wakes it.
//
// Throttling (per-bucket units per second) and ingress tickets plug in
// here; until they land every command is admitted.
func (s *Server) admit(c *conn, req *mc.Request) bool {
	return true
}
