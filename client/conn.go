package client

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"kvd/protocol/binary"
)

// Defaults of Options.
const (
	DefaultTimeout = 10 * time.Second
	DefaultAgent   = "kvd-client"
)

// HELLO feature codes this package knows by name. Others may be asked for
// by number in Options.Features.
const (
	FeatureXError       = uint16(binary.FeatureXError)       // error bodies are {"error":{"context":"…"}}
	FeatureSelectBucket = uint16(binary.FeatureSelectBucket) // SELECT_BUCKET
	FeatureJSON         = uint16(binary.FeatureJSON)         // values may carry datatype JSON
)

// maxReplyBody caps the body of a reply Conn accepts (kvd's own frame cap
// is 20 MiB).
const maxReplyBody = 64 << 20

// DefaultFeatures returns the HELLO features Dial asks for when
// Options.Features is nil: XERROR, SELECT_BUCKET and JSON.
func DefaultFeatures() []uint16 {
	return []uint16{FeatureXError, FeatureSelectBucket, FeatureJSON}
}

// Options configure Dial. The zero value connects anonymously with the
// defaults below.
type Options struct {
	// Timeout bounds the TCP dial and then each round trip: every handshake
	// step, every Do, every Stats. Default DefaultTimeout.
	Timeout time.Duration

	// User, when set, authenticates with SASL PLAIN and Password.
	User     string
	Password string

	// Bucket, when set, is selected (SELECT_BUCKET) after authentication.
	Bucket string

	// Agent is the agent name sent as HELLO's key. Default DefaultAgent.
	Agent string

	// Features are the HELLO features to ask for. nil means
	// DefaultFeatures(); an empty non-nil slice asks for none.
	Features []uint16
}

// EnsureDefaults fills the fields left zero with their defaults.
func (o *Options) EnsureDefaults() {
	if o.Timeout == 0 {
		o.Timeout = DefaultTimeout
	}
	if o.Agent == "" {
		o.Agent = DefaultAgent
	}
	if o.Features == nil {
		o.Features = DefaultFeatures()
	}
}

// Validate reports options Dial cannot use, naming the field. Call it after
// EnsureDefaults.
func (o *Options) Validate() error {
	switch {
	case o.Timeout <= 0:
		return fmt.Errorf("%w: Timeout must be positive, got %v", ErrInvalidOptions, o.Timeout)
	case o.User == "" && o.Password != "":
		return fmt.Errorf("%w: Password given without User", ErrInvalidOptions)
	case len(o.Agent) > binary.MaxKeyLen:
		return fmt.Errorf("%w: Agent is %d bytes, over %d", ErrInvalidOptions, len(o.Agent), binary.MaxKeyLen)
	case len(o.Bucket) > binary.MaxKeyLen:
		return fmt.Errorf("%w: Bucket is %d bytes, over %d", ErrInvalidOptions, len(o.Bucket), binary.MaxKeyLen)
	}
	return nil
}

// Conn is one connection to a server. It is not safe for concurrent use;
// see the package comment.
type Conn struct {
	nc      net.Conn
	r       *bufio.Reader
	timeout time.Duration
	opaque  uint32   // opaque of the last request sent
	wbuf    []byte   // encoding scratch
	granted []uint16 // HELLO features the server granted
	err     error    // why the Conn is unusable; nil while it is usable
}

// Stat is one statistic of a STAT reply.
type Stat struct {
	Name  string
	Value string
}

// Dial connects to addr (host:port) and runs the handshake of the package
// comment. A refusal during the handshake is a *StatusError naming the step
// (SASL_AUTH, SELECT_BUCKET). A server that does not know HELLO is
// accepted, with no features granted.
func Dial(addr string, opts Options) (*Conn, error) {
	opts.EnsureDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	nc, err := net.DialTimeout("tcp", addr, opts.Timeout)
	if err != nil {
		return nil, err
	}
	c := &Conn{nc: nc, r: bufio.NewReader(nc), timeout: opts.Timeout}
	if err := c.handshake(&opts); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

func (c *Conn) handshake(o *Options) error {
	if err := c.hello(o.Agent, o.Features); err != nil {
		return err
	}
	if o.User != "" {
		plain := make([]byte, 0, 2+len(o.User)+len(o.Password))
		plain = append(append(append(append(plain, 0), o.User...), 0), o.Password...)
		auth := binary.Request{Opcode: binary.OpSASLAuth, Key: []byte("PLAIN"), Value: plain}
		if _, err := c.Do(&auth); err != nil {
			return err
		}
	}
	if o.Bucket != "" {
		sel := binary.Request{Opcode: binary.OpSelectBucket, Key: []byte(o.Bucket)}
		if _, err := c.Do(&sel); err != nil {
			return err
		}
	}
	return nil
}

// hello negotiates features and records those granted.
func (c *Conn) hello(agent string, features []uint16) error {
	var value []byte
	for _, f := range features {
		value = binary.AppendUint16(value, f)
	}
	res, err := c.Do(&binary.Request{Opcode: binary.OpHello, Key: []byte(agent), Value: value})
	var se *StatusError
	if errors.As(err, &se) && se.Status == binary.StatusUnknownCommand {
		return nil // an old server: no features
	}
	if err != nil {
		return err
	}
	if len(res.Value)%2 != 0 {
		return c.fail(fmt.Errorf("%w: HELLO reply of %d bytes is not a list of u16", ErrUnexpectedReply, len(res.Value)))
	}
	for v := res.Value; len(v) >= 2; v = v[2:] {
		c.granted = append(c.granted, uint16(v[0])<<8|uint16(v[1]))
	}
	return nil
}

// Features returns the HELLO features the server granted.
func (c *Conn) Features() []uint16 {
	return append([]uint16(nil), c.granted...)
}

// HasFeature reports whether the server granted HELLO feature f.
func (c *Conn) HasFeature(f uint16) bool {
	for _, g := range c.granted {
		if g == f {
			return true
		}
	}
	return false
}

// Do sends req and returns its reply. It sets the opaque itself (req is not
// modified) and checks that the reply echoes it. The reply owns its memory.
//
// When the reply's status is not StatusOK, Do returns the reply and a
// *StatusError with the server's reason; the Conn stays usable. Quiet
// opcodes and STAT, which do not answer with exactly one reply, are
// refused with ErrUnsupportedRequest.
func (c *Conn) Do(req *binary.Request) (*binary.Response, error) {
	if req.Opcode.IsQuiet() || req.Opcode == binary.OpStat {
		return nil, fmt.Errorf("%w: %s: Do needs exactly one reply per request", ErrUnsupportedRequest, req.Opcode)
	}
	r := *req
	if err := c.send(&r); err != nil {
		return nil, err
	}
	res, err := c.recv(&r)
	if err != nil {
		return nil, err
	}
	return res, statusError(res)
}

// Stats sends STAT with key group ("" for the general statistics,
// "bucket_details app", "throttle") and returns the statistics in the order
// the server sent them, up to the empty terminator. A refusal is a
// *StatusError and ends the group.
func (c *Conn) Stats(group string) ([]Stat, error) {
	r := binary.Request{Opcode: binary.OpStat, Key: []byte(group)}
	if err := c.send(&r); err != nil {
		return nil, err
	}
	stats := []Stat{}
	for {
		res, err := c.recv(&r)
		if err != nil {
			return nil, err
		}
		if err := statusError(res); err != nil {
			return nil, err
		}
		if len(res.Key) == 0 {
			return stats, nil
		}
		stats = append(stats, Stat{Name: string(res.Key), Value: string(res.Value)})
	}
}

// Close closes the connection. Later calls return ErrClosed; Close itself
// may be called again, and then does nothing.
func (c *Conn) Close() error {
	if c.err != nil {
		return nil
	}
	c.err = ErrClosed
	return c.nc.Close()
}

// send gives r the next opaque, arms the round trip's deadline and writes
// r.
func (c *Conn) send(r *binary.Request) error {
	if c.err != nil {
		if c.err == ErrClosed {
			return ErrClosed
		}
		return fmt.Errorf("%w: %w", ErrClosed, c.err)
	}
	c.opaque++
	r.Opaque = c.opaque
	if err := c.nc.SetDeadline(time.Now().Add(c.timeout)); err != nil {
		return c.fail(err)
	}
	c.wbuf = binary.AppendRequest(c.wbuf[:0], r)
	if _, err := c.nc.Write(c.wbuf); err != nil {
		return c.fail(err)
	}
	return nil
}

// recv reads one reply and checks that it answers r.
func (c *Conn) recv(r *binary.Request) (*binary.Response, error) {
	res, err := c.readFrame()
	if err != nil {
		return nil, c.fail(err)
	}
	if res.Opaque != r.Opaque || res.Opcode != r.Opcode {
		return nil, c.fail(fmt.Errorf("%w: got %s opaque %d, want %s opaque %d",
			ErrUnexpectedReply, res.Opcode, res.Opaque, r.Opcode, r.Opaque))
	}
	return res, nil
}

// readFrame reads one whole response frame into its own buffer.
func (c *Conn) readFrame() (*binary.Response, error) {
	var hdr [binary.HeaderLen]byte
	if _, err := io.ReadFull(c.r, hdr[:]); err != nil {
		return nil, err
	}
	res := new(binary.Response)
	// With the header alone DecodeResponse checks magic and body size.
	if _, err := binary.DecodeResponse(hdr[:], maxReplyBody, res); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnexpectedReply, err)
	}
	buf := make([]byte, binary.FrameLen(hdr[:]))
	copy(buf, hdr[:])
	if _, err := io.ReadFull(c.r, buf[binary.HeaderLen:]); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	if _, err := binary.DecodeResponse(buf, maxReplyBody, res); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnexpectedReply, err)
	}
	return res, nil
}

// fail makes the Conn unusable because of err, closes the socket and
// returns err.
func (c *Conn) fail(err error) error {
	if c.err == nil {
		c.err = err
		c.nc.Close()
	}
	return err
}
