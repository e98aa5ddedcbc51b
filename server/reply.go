package server

import (
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"time"

	"kvd/engine"
	"kvd/ingress"
	"kvd/observe"
	"kvd/protocol/binary"
	"kvd/protocol/translate"
	"kvd/tenant"
)

// reply answers req on the loop.
func (c *conn) reply(req *binary.Request, st binary.Status, cas uint64, extras, key, value []byte) {
	c.out = c.appendReply(c.out, headerOf(req), st, cas, extras, key, value)
}

// replyError answers req with an error on the loop. Quiet commands get
// their errors too.
func (c *conn) replyError(req *binary.Request, st binary.Status, reason string) {
	if c.txt != nil {
		c.out = c.txt.Refuse(c.out, reason)
		return
	}
	c.out = c.appendError(c.out, headerOf(req), st, reason, nil)
}

// appendResult encodes r's reply, or nothing for a quiet command that
// succeeded (or missed, for the quiet reads).
func (c *conn) appendResult(dst []byte, r *request) []byte {
	if r.txt.Text() {
		return c.appendText(dst, r)
	}
	h, op := r.hdr, r.hdr.op.NonQuiet()
	quiet := h.op.IsQuiet()
	isRead := op == binary.OpGet || op == binary.OpGetK || op == binary.OpGAT || op == binary.OpGATK
	withKey := op == binary.OpGetK || op == binary.OpGATK
	if r.status != binary.StatusOK {
		if quiet && isRead && r.status == binary.StatusKeyNotFound {
			return dst
		}
		var key []byte
		if withKey {
			key = r.key
		}
		return c.appendError(dst, h, r.status, r.reason, key)
	}
	switch {
	case op == binary.OpTouch && !quiet:
		var ex [4]byte // memcached answers TOUCH with the item's flags
		return c.appendMetered(dst, r, r.cas, binary.AppendUint32(ex[:0], r.flags), nil, nil)
	case isRead:
		var key []byte
		if withKey {
			key = r.key
		}
		var ex [4]byte
		return c.appendMetered(dst, r, r.cas, binary.AppendUint32(ex[:0], r.flags), key, r.res)
	case quiet:
		return dst
	case op == binary.OpIncrement || op == binary.OpDecrement:
		var v [8]byte
		return c.appendMetered(dst, r, r.cas, nil, nil, binary.AppendUint64(v[:0], r.num))
	default:
		return c.appendMetered(dst, r, r.cas, nil, nil, nil)
	}
}

// appendText encodes the reply to a text request (package translate); the
// clock is read only when the reply may show a remaining TTL.
func (c *conn) appendText(dst []byte, r *request) []byte {
	var now int64
	if r.exp != 0 {
		now = c.srv.opts.Now().Unix()
	}
	return r.txt.Append(dst, &translate.Result{Op: r.hdr.op, Status: r.status, Reason: r.reason,
		Key: r.key, Value: r.res, Flags: r.flags, CAS: r.cas, Number: r.num, Created: r.made,
		Expiry: r.exp}, now)
}

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

// appendOutcome encodes OK, or the error's status and reason.
func (c *conn) appendOutcome(dst []byte, h header, err error) []byte {
	if err != nil {
		st, reason := statusOf(err)
		return c.appendError(dst, h, st, reason, nil)
	}
	return c.appendReply(dst, h, binary.StatusOK, 0, nil, nil, nil)
}

// statusOf is the one place Go errors from engine and tenant become protocol
// statuses, with the reason a client is told.
func statusOf(err error) (binary.Status, string) {
	switch {
	case errors.Is(err, engine.ErrNotFound):
		return binary.StatusKeyNotFound, "Not found"
	case errors.Is(err, engine.ErrExists):
		return binary.StatusKeyExists, "Data exists for key."
	case errors.Is(err, engine.ErrNotStored):
		return binary.StatusNotStored, "Not stored."
	case errors.Is(err, engine.ErrNonNumeric):
		return binary.StatusNonNumeric, "Non-numeric server-side value for incr or decr"
	case errors.Is(err, engine.ErrTooBig):
		return binary.StatusTooBig, "Too large."
	case errors.Is(err, engine.ErrBucketExists):
		return binary.StatusKeyExists, "bucket already exists"
	case errors.Is(err, engine.ErrBucketNotFound):
		return binary.StatusKeyNotFound, "no such bucket"
	case errors.Is(err, engine.ErrBucketDeleted):
		return binary.StatusNoBucket, "the selected bucket was deleted"
	case errors.Is(err, engine.ErrBadBucketName):
		return binary.StatusInvalidArguments, reasonOf(err, engine.ErrBadBucketName)
	case errors.Is(err, tenant.ErrInvalidBucketName):
		return binary.StatusInvalidArguments, reasonOf(err, tenant.ErrInvalidBucketName)
	case errors.Is(err, tenant.ErrInvalidSettings):
		return binary.StatusInvalidArguments, reasonOf(err, tenant.ErrInvalidSettings)
	case errors.Is(err, tenant.ErrAuthFailed):
		return binary.StatusAuthError, "Auth failure"
	case errors.Is(err, engine.ErrNoSpace):
		return binary.StatusOutOfMemory, reasonOf(err, engine.ErrNoSpace)
	case errors.Is(err, engine.ErrClosed):
		return binary.StatusTemporaryFailure, "server is shutting down"
	case errors.Is(err, observe.ErrNoAccess):
		return binary.StatusAccessDenied, reasonOf(err, observe.ErrNoAccess)
	case errors.Is(err, observe.ErrNoBucket):
		return binary.StatusKeyNotFound, reasonOf(err, observe.ErrNoBucket)
	case errors.Is(err, observe.ErrNotCluster):
		return binary.StatusKeyNotFound, reasonOf(err, observe.ErrNotCluster)
	}
	return binary.StatusInternal, err.Error()
}

// reasonOf is err's text for a client: the detail after the package's
// sentinel ("tenant: invalid settings: reserved 9 exceeds hard_limit 5"
// becomes "invalid settings: reserved 9 exceeds hard_limit 5").
func reasonOf(err, sentinel error) string {
	s := err.Error()
	if _, rest, ok := strings.Cut(s, ": "); ok && strings.HasPrefix(s, sentinel.Error()) {
		return rest
	}
	return s
}

// appendDeadlineRefusal encodes the 0x86 of a command the gate refused,
// without allocating once c's scratch buffer has grown: with XERROR
// {"error":{"context":"deadline 50 ms cannot be met: …","retry_after_us":N}},
// otherwise the reason followed by " retry_after_us=N". The reason is plain
// ASCII without quotes or backslashes, so it needs no JSON escaping.
func (c *conn) appendDeadlineRefusal(dst []byte, req *binary.Request, g ingress.Grant, capacity int, retry time.Duration) []byte {
	us := int64((retry + time.Microsecond - 1) / time.Microsecond)
	body := c.scratch[:0]
	res := binary.Response{Opcode: req.Opcode, Status: binary.StatusTemporaryFailure, Opaque: req.Opaque}
	if c.features&featXError != 0 {
		res.Datatype = binary.DatatypeJSON
		body = append(body, `{"error":{"context":"`...)
		body = g.AppendReason(body, capacity)
		body = append(body, `","retry_after_us":`...)
		body = strconv.AppendInt(body, us, 10)
		body = append(body, "}}"...)
	} else {
		body = g.AppendReason(body, capacity)
		body = append(body, " retry_after_us="...)
		body = strconv.AppendInt(body, us, 10)
	}
	c.scratch = body
	res.Value = body
	return binary.AppendResponse(dst, req.Alt(), &res)
}
