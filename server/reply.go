package server

import (
	"strconv"

	"kvd/protocol/binary"
)

// appendReply encodes a reply to h in the framing the request used.
func (c *conn) appendReply(dst []byte, h header, st binary.Status, cas uint64, extras, key, value []byte) []byte {
	return binary.AppendResponse(dst, h.alt, &binary.Response{
		Opcode: h.op,
		Status: st,
		Opaque: h.opaque,
		CAS:    cas,
		Extras: extras,
		Key:    key,
		Value:  value,
	})
}

// appendError encodes an error reply: with XERROR the body is
// {"error":{"context":reason}} as JSON, otherwise the reason as plain text.
func (c *conn) appendError(dst []byte, h header, st binary.Status, reason string, key []byte) []byte {
	if reason == "" {
		reason = st.String()
	}
	res := binary.Response{Opcode: h.op, Status: st, Opaque: h.opaque, Key: key}
	if c.features&featXError != 0 {
		res.Datatype = binary.DatatypeJSON
		res.Value = appendErrorJSON(nil, reason, -1)
	} else {
		res.Value = []byte(reason)
	}
	return binary.AppendResponse(dst, h.alt, &res)
}

// appendErrorJSON appends {"error":{"context":reason[,"retry_after_us":N]}};
// retryAfter < 0 leaves the field out.
func appendErrorJSON(dst []byte, reason string, retryAfterUS int64) []byte {
	dst = append(dst, `{"error":{"context":`...)
	dst = strconv.AppendQuote(dst, reason)
	if retryAfterUS >= 0 {
		dst = append(dst, `,"retry_after_us":`...)
		dst = strconv.AppendInt(dst, retryAfterUS, 10)
	}
	return append(dst, "}}"...)
}

// reply answers req on the loop.
func (c *conn) reply(req *binary.Request, st binary.Status, cas uint64, extras, key, value []byte) {
	c.out = c.appendReply(c.out, headerOf(req), st, cas, extras, key, value)
}

// replyError answers req with an error on the loop. Quiet commands get
// their errors too.
func (c *conn) replyError(req *binary.Request, st binary.Status, reason string) {
	c.out = c.appendError(c.out, headerOf(req), st, reason, nil)
}
