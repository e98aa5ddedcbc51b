//go:build !linux

package netmem

import (
	"log/slog"

	"github.com/panjf2000/gnet/v2"
)

// epollReading does nothing where kvd does not know gnet's poller: pausing
// is off; the output stop, the refusal at the header and the close limits
// remain.
func (h *Holder) epollReading(*slog.Logger, gnet.Conn, bool, bool, bool) {}

// unread cannot tell here: a socket counts as having no unread input.
func unread(int) int { return 0 }
