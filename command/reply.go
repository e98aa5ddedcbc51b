package command

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

// Features are the HELLO features a connection enabled.
type Features uint16

// HELLO features a connection can enable.
const (
	FeatXError Features = 1 << iota
	FeatSelectBucket
	FeatJSON
	FeatAltRequest
	FeatReportUnits
	FeatNonBlocking
)

// helloFeatures maps HELLO feature codes to what they enable.
var helloFeatures = map[binary.Feature]Features{
	binary.FeatureXError:       FeatXError,
	binary.FeatureSelectBucket: FeatSelectBucket,
	binary.FeatureJSON:         FeatJSON,
	binary.FeatureAltRequest:   FeatAltRequest,
	binary.FeatureReportUnits:  FeatReportUnits,
	binary.FeatureNonBlocking:  FeatNonBlocking,
}

// Hello negotiates HELLO: the supported features among the codes asked
// (two bytes each), and the reply's body, which lists them once each in
// the order asked.
func Hello(asked []byte) (f Features, reply []byte) {
	for v := asked; len(v) >= 2; v = v[2:] {
		code := binary.Feature(uint16(v[0])<<8 | uint16(v[1]))
		if bit, ok := helloFeatures[code]; ok && f&bit == 0 {
			f |= bit
			reply = append(reply, v[0], v[1])
		}
	}
	return f, reply
}

// Encoder encodes the replies of one connection: in the framing each
// request used, with the HELLO features the connection enabled. A worker
// encodes a batch's replies with it while the connection's loop waits for
// the batch; only the loop changes Features, between batches.
type Encoder struct {
	Features Features
	Now      func() time.Time // read only for a text reply that may show a TTL
	scratch  []byte           // the reused body of deadline refusals (loop only)
}

// JSONType is the datatype of a reply whose body is JSON: JSON when the
// connection negotiated the JSON feature, else 0 (raw), as Couchbase's KV
// engine marks it: a client is never sent a datatype bit it did not ask for.
func (e *Encoder) JSONType() uint8 {
	if e.Features&FeatJSON != 0 {
		return binary.DatatypeJSON
	}
	return 0
}

// Result encodes r's reply, or nothing for a quiet command that
// succeeded (or missed, for the quiet reads).
func (e *Encoder) Result(dst []byte, r *Request) []byte {
	if r.Txt.Text() {
		return e.text(dst, r)
	}
	h, op := r.Hdr, r.Hdr.Op.NonQuiet()
	quiet := h.Op.IsQuiet()
	isRead := op == binary.OpGet || op == binary.OpGetK || op == binary.OpGAT || op == binary.OpGATK
	withKey := op == binary.OpGetK || op == binary.OpGATK
	if r.Status != binary.StatusOK {
		if quiet && isRead && r.Status == binary.StatusKeyNotFound {
			return dst
		}
		var key []byte
		if withKey {
			key = r.Key
		}
		if key != nil && r.Status == binary.StatusKeyNotFound && e.Features&FeatXError == 0 {
			// memcached answers a GETK/GATK miss with the key and no body
			return binary.AppendResponse(dst, h.Alt, &binary.Response{Opcode: h.Op, Status: r.Status, Opaque: h.Opaque, Key: key})
		}
		return e.Error(dst, h, r.Status, r.Reason, key)
	}
	switch {
	case op == binary.OpTouch && !quiet:
		var ex [4]byte // memcached answers TOUCH with the item's flags
		return e.Metered(dst, r, r.CAS, binary.AppendUint32(ex[:0], r.Flags), nil, nil)
	case isRead:
		var key []byte
		if withKey {
			key = r.Key
		}
		var ex [4]byte
		return e.Metered(dst, r, r.CAS, binary.AppendUint32(ex[:0], r.Flags), key, r.Res)
	case quiet:
		return dst
	case op == binary.OpIncrement || op == binary.OpDecrement:
		var v [8]byte
		return e.Metered(dst, r, r.CAS, nil, nil, binary.AppendUint64(v[:0], r.Num))
	default:
		return e.Metered(dst, r, r.CAS, nil, nil, nil)
	}
}

// text encodes the reply to a text request (package translate); the
// clock is read only when the reply may show a remaining TTL or the time
// since the item's last access.
func (e *Encoder) text(dst []byte, r *Request) []byte {
	var now int64
	if r.Exp != 0 || r.Accessed != 0 && r.Txt.ShowsLastAccess() {
		now = e.Now().Unix()
	}
	return r.Txt.Append(dst, &translate.Result{Op: r.Hdr.Op, Status: r.Status, Reason: r.Reason,
		Key: r.Key, Value: r.Res, Flags: r.Flags, CAS: r.CAS, Number: r.Num, Created: r.Made,
		Expiry: r.Exp, Stale: r.StaleItem, TokenSent: r.TokenSent, Won: r.Won,
		Fetched: r.Fetched, Accessed: r.Accessed}, now)
}

// Reply encodes a reply to h in the framing the request used.
func (e *Encoder) Reply(dst []byte, h Header, st binary.Status, cas uint64, extras, key, value []byte) []byte {
	return binary.AppendResponse(dst, h.Alt, &binary.Response{
		Opcode: h.Op,
		Status: st,
		Opaque: h.Opaque,
		CAS:    cas,
		Extras: extras,
		Key:    key,
		Value:  value,
	})
}

// Metered encodes a successful data reply. With ReportUnitUsage it
// goes in 0x18 framing carrying the read units, write units and throttle
// duration frame infos (those that are not zero).
func (e *Encoder) Metered(dst []byte, r *Request, cas uint64, extras, key, value []byte) []byte {
	h := r.Hdr
	res := binary.Response{Opcode: h.Op, Status: binary.StatusOK, Opaque: h.Opaque, CAS: cas,
		Extras: extras, Key: key, Value: value}
	alt := h.Alt
	var fi [16]byte
	if e.Features&FeatReportUnits != 0 {
		res.FrameInfo = appendUnitFrames(fi[:0], r)
		alt = alt || len(res.FrameInfo) > 0
	}
	return binary.AppendResponse(dst, alt, &res)
}

func appendUnitFrames(dst []byte, r *Request) []byte {
	var v [2]byte
	if r.RU > 0 {
		dst = binary.AppendFrameInfo(dst, binary.FrameReadUnits, u16(v[:], r.RU))
	}
	if r.WU > 0 {
		dst = binary.AppendFrameInfo(dst, binary.FrameWriteUnits, u16(v[:], r.WU))
	}
	if r.Throttled > 0 {
		dst = binary.AppendFrameInfo(dst, binary.FrameThrottleDuration,
			u16(v[:], int64(binary.EncodeDuration(r.Throttled))))
	}
	return dst
}

// u16 writes v, saturated at 65535, big-endian into b.
func u16(b []byte, v int64) []byte {
	v = min(v, 0xffff)
	b[0], b[1] = byte(v>>8), byte(v)
	return b[:2]
}

// Error encodes an error reply: with XERROR the body is
// {"error":{"context":reason}} as JSON, otherwise the reason as plain text.
func (e *Encoder) Error(dst []byte, h Header, st binary.Status, reason string, key []byte) []byte {
	if reason == "" {
		reason = st.String()
	}
	res := binary.Response{Opcode: h.Op, Status: st, Opaque: h.Opaque, Key: key}
	if e.Features&FeatXError != 0 {
		res.Datatype = e.JSONType()
		res.Value = appendErrorJSON(nil, reason, -1)
	} else {
		res.Value = []byte(reason)
	}
	return binary.AppendResponse(dst, h.Alt, &res)
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

// Outcome encodes OK, or the error's status and reason.
func (e *Encoder) Outcome(dst []byte, h Header, err error) []byte {
	if err != nil {
		st, reason := StatusOf(err)
		return e.Error(dst, h, st, reason, nil)
	}
	return e.Reply(dst, h, binary.StatusOK, 0, nil, nil, nil)
}

// StatusOf is the one place Go errors from engine and tenant become protocol
// statuses, with the reason a client is told.
func StatusOf(err error) (binary.Status, string) {
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
	case errors.Is(err, engine.ErrBucketNotFound): // "no such bucket[: what was not found]"
		return binary.StatusKeyNotFound, "no such bucket" + strings.TrimPrefix(err.Error(), engine.ErrBucketNotFound.Error())
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
	case errors.Is(err, tenant.ErrNotPrivileged):
		return binary.StatusAccessDenied, reasonOf(err, tenant.ErrNotPrivileged)
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
	case errors.Is(err, observe.ErrUnknownGroup):
		return binary.StatusKeyNotFound, reasonOf(err, observe.ErrUnknownGroup)
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

// DeadlineRefusal encodes the 0x86 of a command of bucket the gate refused,
// without allocating once e's scratch buffer has grown: with XERROR
// {"error":{"context":"deadline 50 ms cannot be met: … in bucket B","retry_after_us":N}},
// otherwise the reason followed by " retry_after_us=N". The reason is plain
// ASCII without quotes or backslashes, so it needs no JSON escaping.
func (e *Encoder) DeadlineRefusal(dst []byte, req *binary.Request, g ingress.Grant, bucket string, capacity int, retry time.Duration) []byte {
	us := ceilMicros(retry)
	body := e.scratch[:0]
	res := binary.Response{Opcode: req.Opcode, Status: binary.StatusTemporaryFailure, Opaque: req.Opaque}
	if e.Features&FeatXError != 0 {
		res.Datatype = e.JSONType()
		body = append(body, `{"error":{"context":"`...)
		body = g.AppendReason(body, bucket, capacity)
		body = append(body, `","retry_after_us":`...)
		body = strconv.AppendInt(body, us, 10)
		body = append(body, "}}"...)
	} else {
		body = appendDeadlineReason(body, g, bucket, capacity, us)
	}
	e.scratch = body
	res.Value = body
	return binary.AppendResponse(dst, req.Alt(), &res)
}

// DeadlineReason is the reason of a deadline refusal without XERROR, for a
// text or meta command's SERVER_ERROR line.
func DeadlineReason(g ingress.Grant, bucket string, capacity int, retry time.Duration) string {
	return string(appendDeadlineReason(nil, g, bucket, capacity, ceilMicros(retry)))
}

// ceilMicros is d in microseconds, rounded up: a retry hint never too early.
func ceilMicros(d time.Duration) int64 { return int64((d + time.Microsecond - 1) / time.Microsecond) }

// appendDeadlineReason appends the gate's reason and " retry_after_us=N".
func appendDeadlineReason(dst []byte, g ingress.Grant, bucket string, capacity int, us int64) []byte {
	dst = g.AppendReason(dst, bucket, capacity)
	dst = append(dst, " retry_after_us="...)
	return strconv.AppendInt(dst, us, 10)
}
