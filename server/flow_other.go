//go:build !linux

package server

import "github.com/panjf2000/gnet/v2"

// epollReading does nothing where kvd does not know gnet's poller: pausing
// is off; the output stop, the refusal at the header and the close limits
// remain.
func (c *conn) epollReading(gnet.Conn, bool, bool, bool) {}
