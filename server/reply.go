package server

import (
	"encoding/json"
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

// appendMetered encodes a successful data reply. With ReportUnitUsage it
// goes in 0x18 framing carrying the read units, write units and throttle
// duration frame infos (those that are not zero).
func (c *conn) appendMetered(dst []byte, r *request, cas uint64, extras, key, value []byte) []byte {
	h := r.hdr
	res := binary.Response{Opcode: h.op, Status: binary.StatusOK, Opaque: h.opaque, CAS: cas,
		Extras: extras, Key: key, Value: value}
	alt := h.alt
	var fi [16]byte
	if c.features&featReportUnits != 0 {
		res.FrameInfo = appendUnitFrames(fi[:0], r)
		alt = alt || len(res.FrameInfo) > 0
	}
	return binary.AppendResponse(dst, alt, &res)
}

func appendUnitFrames(dst []byte, r *request) []byte {
	var v [2]byte
	if r.ru > 0 {
		dst = binary.AppendFrameInfo(dst, binary.FrameReadUnits, u16(v[:], r.ru))
	}
	if r.wu > 0 {
		dst = binary.AppendFrameInfo(dst, binary.FrameWriteUnits, u16(v[:], r.wu))
	}
	if r.throttled > 0 {
		dst = binary.AppendFrameInfo(dst, binary.FrameThrottleDuration,
			u16(v[:], int64(binary.EncodeDuration(r.throttled))))
	}
	return dst
}

// u16 writes v, saturated at 65535, big-endian into b.
func u16(b []byte, v int64) []byte {
	v = min(v, 0xffff)
	b[0], b[1] = byte(v>>8), byte(v)
	return b[:2]
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
// retryAfter < 0 leaves the field out. The reason is JSON-escaped (invalid
// UTF-8 from a client's key becomes U+FFFD).
func appendErrorJSON(dst []byte, reason string, retryAfterUS int64) []byte {
	dst = append(dst, `{"error":{"context":`...)
	quoted, _ := json.Marshal(reason)
	dst = append(dst, quoted...)
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
