package command

import (
	"strconv"
	"sync"
	"time"

	"kvd/ingress"
	"kvd/protocol/binary"
	"kvd/protocol/translate"
	"kvd/tenant"
)

// Request is a data command copied out of gnet's buffer so that it can
// outlive the loop pass that decoded it. Requests are pooled.
type Request struct {
	Hdr    Header
	Extras []byte // views into buf
	Key    []byte
	Value  []byte
	buf    []byte

	// Results, set by the worker.
	Status binary.Status
	Reason string
	CAS    uint64
	Flags  uint32
	Num    uint64 // INCR/DECR result
	Res    []byte // value read (GET, GAT)
	Exp    uint32 // the item's expiry (GET, GAT, arithmetic): absolute, 0 = never
	Made   bool   // arithmetic created the item
	Size   int    // resulting value length (APPEND, PREPEND); the value read's (INCR, DECR)
	Mut    bool   // a mutation succeeded: needs the WAL sync before its ack
	// A meta get's item states (engine.Lease): stale, its win token
	// handed out before, won by this command (which then wrote the item).
	StaleItem, TokenSent, Won bool
	// Its reads before (engine.Item): read before, last accessed (Unix
	// seconds, 0 = unknown); a meta get's h and l.
	Fetched  bool
	Accessed uint32

	RU, WU    int64          // units charged
	Throttled time.Duration  // how long throttling held it
	Ticket    ingress.Ticket // its ingress ticket, released when it is done
	Start     time.Time      // its frame complete (before any parking)
	QueuedAt  time.Time      // when it joined the ticket queue
	Queued    time.Duration  // how long it waited for a ticket
	Granted   time.Time      // when it got its ticket, kept if the ticket goes back before its reply

	// Its deadline grant (with DL, its bucket's gate; nil when it holds
	// none), ended exactly once: Done, Expire or Release (EndDeadline, ExpireDeadline, ReleaseDeadline).
	DL    *ingress.BucketDeadline
	Grant ingress.Grant
	// Hold is the units its admission holds in its bucket's throttle
	// (tenant.Throttle.Admit), released when it is metered, or by Release
	// if it never runs.
	Hold tenant.Hold

	Txt translate.Reply // a text/meta command's reply needs (zero: binary)
	Aux []byte          // the text command's opaque and raw key (txt.meta views it)
}

// Header is what a reply needs to echo.
type Header struct {
	Op     binary.Opcode
	Opaque uint32
	CAS    uint64
	Alt    bool
}

// HeaderOf is the header of req.
func HeaderOf(req *binary.Request) Header {
	return Header{Op: req.Opcode, Opaque: req.Opaque, CAS: req.CAS, Alt: req.Alt()}
}

var requestPool = sync.Pool{New: func() any { return new(Request) }}

// NewRequest copies req into a pooled Request.
func NewRequest(req *binary.Request) *Request {
	r := requestPool.Get().(*Request)
	r.Hdr = HeaderOf(req)
	n := len(req.Extras) + len(req.Key) + len(req.Value)
	r.buf = append(r.buf[:0], req.Extras...)
	r.buf = append(r.buf, req.Key...)
	r.buf = append(r.buf, req.Value...)
	r.Extras = r.buf[:len(req.Extras):len(req.Extras)]
	r.Key = r.buf[len(req.Extras) : len(req.Extras)+len(req.Key) : len(req.Extras)+len(req.Key)]
	r.Value = r.buf[len(req.Extras)+len(req.Key) : n : n]
	return r
}

// Release returns r to the pool. A deadline grant it still holds goes back
// first: the command never ran.
func (r *Request) Release() {
	r.ReleaseDeadline() // a command that never ran gives its demand back
	r.Hold.Release()
	r.Status, r.Reason, r.CAS, r.Flags, r.Num, r.Mut = 0, "", 0, 0, 0, false
	r.Size, r.RU, r.WU, r.Throttled, r.Queued = 0, 0, 0, 0, 0
	r.Granted = time.Time{}
	r.Exp, r.Made = 0, false
	r.StaleItem, r.TokenSent, r.Won = false, false, false
	r.Fetched, r.Accessed = false, 0
	if r.Txt.Text() {
		r.Txt = translate.Reply{}
	}
	r.Res = r.Res[:0]
	if cap(r.buf) > 64<<10 {
		r.buf = nil
	}
	if cap(r.Res) > 64<<10 {
		r.Res = nil
	}
	requestPool.Put(r)
}

// Its deadline grant ends exactly once: EndDeadline when its reply is
// ready, ExpireDeadline when its deadline passed while it waited for a
// ticket, ReleaseDeadline when it never runs for another reason.

// EndDeadline ends r's grant when its reply is ready at now: Done with the
// time from its ticket to now. A command that ended in an internal error is
// not a sample of the execution time.
func (r *Request) EndDeadline(now time.Time) {
	if r.DL == nil {
		return
	}
	ok := r.Status != binary.StatusInternal && r.Status != binary.StatusTemporaryFailure
	at := r.Granted
	if r.Ticket.Valid() {
		at = r.Ticket.AcquiredAt()
	}
	r.DL.Done(r.Grant, now.Sub(at), ok, now)
	r.DL, r.Grant = nil, ingress.Grant{}
}

// ReleaseDeadline gives back r's grant, if it still holds one, without
// counting anything: the command will not run.
func (r *Request) ReleaseDeadline() {
	if r.DL == nil {
		return
	}
	r.DL.Release(r.Grant)
	r.DL, r.Grant = nil, ingress.Grant{}
}

// ExpireDeadline ends r's grant because its deadline passed while it waited.
func (r *Request) ExpireDeadline() {
	if r.DL == nil {
		return
	}
	r.DL.Expire(r.Grant)
	r.DL, r.Grant = nil, ingress.Grant{}
}

// Stale reports whether r, queued for a ticket, has a deadline that has
// passed at now, and how long it has waited since it arrived (0 for a
// command without a deadline).
func (r *Request) Stale(now time.Time) (time.Duration, bool) {
	if r.DL == nil {
		return 0, false
	}
	return now.Sub(r.Grant.Due().Add(-r.Grant.Deadline())), r.Grant.Passed(now)
}

// DeadlinePassedReason is the 0x86 reason of a command of bucket whose
// deadline passed while it waited for a ticket.
func DeadlinePassedReason(waited time.Duration, bucket string) string {
	return "deadline passed after " + strconv.FormatInt(waited.Milliseconds(), 10) + " ms in the queue of bucket " + bucket
}
