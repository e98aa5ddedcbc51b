package server

import (
	"kvd/command"
	"kvd/protocol/binary"
)

// reply answers req on the loop.
func (c *conn) reply(req *binary.Request, st binary.Status, cas uint64, extras, key, value []byte) {
	c.out = c.enc.Reply(c.out, command.HeaderOf(req), st, cas, extras, key, value)
}

// replyError answers req with an error on the loop. Quiet commands get
// their errors too.
func (c *conn) replyError(req *binary.Request, st binary.Status, reason string) {
	if c.txt != nil {
		c.out = c.txt.Refuse(c.out, reason)
		return
	}
	c.out = c.enc.Error(c.out, command.HeaderOf(req), st, reason, nil)
}

// replyErr answers req with err's status and reason (command.StatusOf).
func (c *conn) replyErr(req *binary.Request, err error) {
	st, reason := command.StatusOf(err)
	c.replyError(req, st, reason)
}
