package bench

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	mc "kvd/protocol/binary"
)

// HELLO features kvbench asks for.
const (
	featXError      = uint16(mc.FeatureXError)
	featSelect      = uint16(mc.FeatureSelectBucket)
	featAltRequest  = uint16(mc.FeatureAltRequest)
	featUnitUsage   = uint16(mc.FeatureReportUnits)
	featNonBlocking = uint16(mc.FeatureNonBlocking)
)

var featureNames = map[uint16]string{
	featXError: "xerror", featSelect: "select_bucket", featAltRequest: "alt_request",
	featUnitUsage: "unit_usage", featNonBlocking: "nonblocking_throttle",
}

// maxReplyBody caps the body of a reply kvbench accepts.
const maxReplyBody = 64 << 20

// setExtras are the extras of every SET: flags 0, expiry 0.
var setExtras = mc.AppendSetExtras(nil, 0, 0)

// client is one connection. Its goroutine owns every field except stats,
// which the sampler drains every second.
type client struct {
	nc     net.Conn
	bucket *bucketRun
	work   *workload
	pacer  Pacer

	alt         bool   // send alternative requests (0x08), so replies carry frame infos
	nonBlocking bool   // the server granted NonBlockingThrottlingMode
	features    string // granted features, for the report

	opaque uint32
	batch  []op
	key    []byte // scratch for the key being encoded
	wbuf   []byte
	rbuf   []byte
	r, w   int       // unread input is rbuf[r:w]
	rtime  time.Time // when the last read returned
	tally  tally

	stats cell
}

// op is one operation of a batch.
type op struct {
	get    bool
	key    uint64
	opaque uint32
	sent   time.Time // first send; a retried op keeps it
}

// dialClient connects connection i of bucket b and runs the handshake within
// o.DialTimeout.
func dialClient(ctx context.Context, o *Options, b *bucketRun, i int) (*client, error) {
	d := net.Dialer{Timeout: o.DialTimeout}
	nc, err := d.DialContext(ctx, "tcp", o.Addr)
	if err != nil {
		return nil, fmt.Errorf("bucket %q conn %d: %w", b.spec.Name, i, err)
	}
	c := &client{
		nc:     nc,
		bucket: b,
		work:   newWorkload(&b.spec, o.Seed, b.index, i),
		rbuf:   make([]byte, 64<<10),
	}
	_ = nc.SetDeadline(time.Now().Add(o.DialTimeout))
	if err := c.handshake(o); err != nil {
		nc.Close()
		return nil, fmt.Errorf("bucket %q conn %d: %w", b.spec.Name, i, err)
	}
	_ = nc.SetDeadline(time.Time{})
	return c, nil
}

// handshake sends HELLO, then SASL_AUTH if the bucket has a user, then
// SELECT_BUCKET unless the run is anonymous.
func (c *client) handshake(o *Options) error {
	if err := c.hello(o.NonBlocking); err != nil {
		return err
	}
	spec := &c.bucket.spec
	if spec.User != "" {
		plain := "\x00" + spec.User + "\x00" + spec.Password
		if err := c.expectOK(mc.OpSASLAuth, []byte("PLAIN"), []byte(plain)); err != nil {
			return err
		}
	}
	if o.Anonymous {
		return nil
	}
	err := c.expectOK(mc.OpSelectBucket, []byte(spec.Name), nil)
	if errors.Is(err, errUnsupported) {
		return fmt.Errorf("%w: the server does not support SELECT_BUCKET (use anonymous mode)", ErrHandshake)
	}
	return err
}

// errUnsupported marks a command the server does not know.
var errUnsupported = errors.New("unsupported command")

// hello negotiates features; a server without HELLO (memcached) grants none.
// It first sends an empty HELLO: memcached 1.6 answers an unknown command
// but then skips as many bytes as the key is long after its body, losing the
// stream, so the agent name goes only to a server that knows HELLO.
func (c *client) hello(nonBlocking bool) error {
	res, err := c.call(mc.OpHello, nil, nil)
	if err != nil {
		return err
	}
	if res.Status == mc.StatusUnknownCommand || res.Status == mc.StatusNotSupported {
		return nil
	}
	want := []uint16{featXError, featSelect, featAltRequest, featUnitUsage}
	if nonBlocking {
		want = append(want, featNonBlocking)
	}
	var val []byte
	for _, f := range want {
		val = binary.BigEndian.AppendUint16(val, f)
	}
	if res, err = c.call(mc.OpHello, []byte("kvbench"), val); err != nil {
		return err
	}
	if res.Status != mc.StatusOK {
		return fmt.Errorf("%w: HELLO: %s", ErrHandshake, describe(&res))
	}
	var names []string
	for v := res.Value; len(v) >= 2; v = v[2:] {
		f := binary.BigEndian.Uint16(v)
		c.alt = c.alt || f == featAltRequest
		c.nonBlocking = c.nonBlocking || f == featNonBlocking
		if n, ok := featureNames[f]; ok {
			names = append(names, n)
		}
	}
	c.features = strings.Join(names, ",")
	return nil
}

// expectOK sends one command and fails unless it succeeds.
func (c *client) expectOK(opc mc.Opcode, key, value []byte) error {
	res, err := c.call(opc, key, value)
	switch {
	case err != nil:
		return err
	case res.Status == mc.StatusUnknownCommand:
		return fmt.Errorf("%w: %s: %w", ErrHandshake, opc, errUnsupported)
	case res.Status != mc.StatusOK:
		return fmt.Errorf("%w: %s: %s", ErrHandshake, opc, describe(&res))
	}
	return nil
}

// call sends one request followed by a NOOP and reads both replies;
// memcached holds its answer to an unknown command until more input comes,
// and the NOOP is that input. The reply's views alias c.rbuf until the next
// read.
func (c *client) call(opc mc.Opcode, key, value []byte) (mc.Response, error) {
	req := mc.Request{Magic: c.magic(), Opcode: opc, Opaque: c.opaque + 1, Key: key, Value: value}
	noop := mc.Request{Magic: c.magic(), Opcode: mc.OpNoop, Opaque: c.opaque + 2}
	c.opaque += 2
	c.wbuf = mc.AppendRequest(c.wbuf[:0], &req)
	c.wbuf = mc.AppendRequest(c.wbuf, &noop)
	var res, tail mc.Response
	if _, err := c.nc.Write(c.wbuf); err != nil {
		return res, err
	}
	if err := c.readReply(&res); err != nil {
		return res, err
	}
	if res.Opaque != req.Opaque || res.Opcode != opc {
		return res, fmt.Errorf("%w: %s reply has opcode %s opaque %d, want opaque %d",
			ErrProtocol, opc, res.Opcode, res.Opaque, req.Opaque)
	}
	// The NOOP reply follows in the buffer or on the wire; reading it may
	// move rbuf, so copy the reply's views first.
	res = cloneResponse(&res)
	if err := c.readReply(&tail); err != nil {
		return res, err
	}
	if tail.Opaque != noop.Opaque {
		return res, fmt.Errorf("%w: NOOP reply has opaque %d, want %d", ErrProtocol, tail.Opaque, noop.Opaque)
	}
	return res, nil
}

// cloneResponse copies the views of a reply out of the read buffer.
func cloneResponse(r *mc.Response) mc.Response {
	c := *r
	c.FrameInfo = bytes.Clone(r.FrameInfo)
	c.Extras = bytes.Clone(r.Extras)
	c.Key = bytes.Clone(r.Key)
	c.Value = bytes.Clone(r.Value)
	return c
}

func (c *client) magic() uint8 {
	if c.alt {
		return mc.MagicAltRequest
	}
	return mc.MagicRequest
}

// readReply decodes the next reply, reading from the connection as needed.
// The views of *res alias c.rbuf until the next call.
func (c *client) readReply(res *mc.Response) error {
	for {
		n, err := mc.DecodeResponse(c.rbuf[c.r:c.w], maxReplyBody, res)
		if err != nil {
			return fmt.Errorf("%w: %w", ErrProtocol, err)
		}
		if n > 0 {
			c.r += n
			return nil
		}
		if err := c.fill(); err != nil {
			return err
		}
	}
}

// fill moves unread input to the front of rbuf, grows rbuf when a frame does
// not fit, and reads once.
func (c *client) fill() error {
	if c.r > 0 {
		c.w = copy(c.rbuf, c.rbuf[c.r:c.w])
		c.r = 0
	}
	if c.w == len(c.rbuf) {
		c.rbuf = append(c.rbuf, make([]byte, len(c.rbuf))...)
	}
	n, err := c.nc.Read(c.rbuf[c.w:])
	c.rtime = time.Now()
	c.w += n
	if n > 0 {
		return nil
	}
	return err
}

// describe formats a reply's status and body for error messages.
func describe(res *mc.Response) string {
	body := strings.TrimSpace(string(res.Value))
	if len(body) > 200 {
		body = body[:200] + "…"
	}
	if body == "" {
		return fmt.Sprintf("status 0x%02x %s", uint16(res.Status), res.Status)
	}
	return fmt.Sprintf("status 0x%02x %s: %s", uint16(res.Status), res.Status, body)
}

// frameInfo sums what a reply's frame infos report: units and throttle time.
// reported is true when it carried RU or WU.
func frameInfo(res *mc.Response) (ru, wu int64, throttled time.Duration, reported bool) {
	for fi := res.FrameInfo; len(fi) > 0; {
		id, data, rest, err := mc.NextFrameInfo(fi)
		if err != nil {
			break
		}
		fi = rest
		if len(data) != 2 {
			continue
		}
		v := binary.BigEndian.Uint16(data)
		switch id {
		case mc.FrameReadUnits:
			ru, reported = ru+int64(v), true
		case mc.FrameWriteUnits:
			wu, reported = wu+int64(v), true
		case mc.FrameThrottleDuration:
			throttled += mc.DecodeDuration(v)
		}
	}
	return ru, wu, throttled, reported
}

// nextTick reads N from a non-blocking throttle reply's body
// {"next_tick_us":N}; it returns def when the body has no such field.
func nextTick(body []byte, def time.Duration) time.Duration {
	us, ok := numberAfter(body, []byte(`"next_tick_us"`))
	if !ok {
		return def
	}
	return time.Duration(us) * time.Microsecond
}

// numberAfter reads the decimal number that follows field in body (after
// blanks and a colon, as in JSON); ok is false when field or the number is
// missing. Values are capped near 10¹².
func numberAfter(body, field []byte) (n int64, ok bool) {
	i := bytes.Index(body, field)
	if i < 0 {
		return 0, false
	}
	rest := bytes.TrimLeft(body[i+len(field):], " \t\r\n:")
	k := 0
	for ; k < len(rest) && rest[k] >= '0' && rest[k] <= '9' && n < 1e12; k++ {
		n = n*10 + int64(rest[k]-'0')
	}
	return n, k > 0
}
