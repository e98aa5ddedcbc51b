package server

import (
	"time"

	"kvd/catalog"
	"kvd/ingress"
	"kvd/protocol/binary"
	"kvd/tenant"
)

// Deadline admission (SPEC section 7, seed 004): the server's side of
// ingress.DeadlineGate and ingress.BucketDeadline.
//
// A data command that takes a ticket asks its bucket's gate after the
// throttle said run and before ingress.Acquire (checkDeadline), with the
// time its bytes arrived (ingress.InputClock), so that what it waited in the
// connection's input already counts. Refused, it
// is answered 0x86 at once: "deadline <D> ms cannot be met: …" with
// retry_after_us (in the XERROR JSON, or at the end of the plain-text
// reason). Admitted, its Grant travels with it in its request, through the
// ticket queue if it waits, and ends exactly once:
//
//   - Done on the worker (or on the loop for a resident GET) when its reply
//     is ready, with the time from ticket to reply (endDeadline);
//   - Expire when its deadline passes while it waits for a ticket: it is
//     answered 0x86 "deadline passed after N ms in the queue" instead of
//     running stale, by the housekeeping tick (ingress.Expire every 10 ms
//     finds it through batch.Due and calls batch.Expired, which hands the
//     reply to the loop), or at the latest when it is granted a ticket
//     (batch.Granted);
//   - Release when it never runs for another reason: Acquire refused it,
//     its queue wait timed out, its bucket was deleted, its client went away,
//     or it was left in the input to be admitted again later.
//
// Unthrottled connections take exempt tickets and skip the gate, as they
// skip every other admission limit.

// deadlineSettings are the gate's settings of a bucket's tenant settings.
func deadlineSettings(set tenant.Settings) ingress.DeadlineSettings {
	return ingress.DeadlineSettings{
		Deadline: set.Deadline, Percentile: set.DeadlinePercentile, ExpectedExecution: set.ExpectedExecution,
	}
}

// newBucketDeadline is a new bucket's gate. tenant validated the settings
// already; should the two ever disagree, the bucket runs without a deadline
// and the error is logged rather than the bucket refused.
func (s *Server) newBucketDeadline(b *catalog.Bucket) *ingress.BucketDeadline {
	dl, err := ingress.NewBucketDeadline(&s.deadline, deadlineSettings(b.Settings()))
	if err != nil {
		s.log.Error("deadline settings ignored", "bucket", b.Name(), "err", err)
		dl, _ = ingress.NewBucketDeadline(&s.deadline, ingress.DeadlineSettings{})
	}
	return dl
}

// setBucketDeadline applies changed settings to a bucket's gate.
func (s *Server) setBucketDeadline(b *catalog.Bucket) {
	if err := stateOf(b).dl.SetSettings(deadlineSettings(b.Settings())); err != nil {
		s.log.Error("deadline settings ignored", "bucket", b.Name(), "err", err)
	}
}

// checkDeadline asks c's bucket's gate whether req, of class pool, can meet
// the bucket's deadline; arrival is when the command's bytes reached the
// loop (ingress.InputClock), from which its deadline counts, so that the time it
// waited in the connection's input or for the throttle is spent already.
// Admitted, the Grant waits in c.grant for the request the command is copied
// into (addReq, serveResident), or for dropGrant. Refused, the command is
// answered 0x86 here, unless a batch is being collected: its reply must not
// overtake theirs, so it stays in the input and asks again once they ran.
func (s *Server) checkDeadline(c *conn, req *binary.Request, pool ingress.Pool, arrival, now time.Time) verdict {
	dl := stateOf(c.bucket).dl
	capacity := s.ingress.PoolSize(pool)
	if c.collect != nil && !dl.Fits(pool, capacity, arrival, now) {
		return admitWait
	}
	g, ok, retry := dl.Admit(pool, capacity, arrival, now)
	switch {
	case ok:
		if g.Deadline() > 0 {
			c.dl, c.grant = dl, g
		}
		return admitRun
	case c.collect != nil:
		return admitWait // lost a race since Fits: counted, but answered later
	}
	c.bucket.Throttle().CountRejected()
	c.throttledFor = 0 // the command is answered: its throttle wait is not the next one's
	c.out = c.enc.DeadlineRefusal(c.out, req, g, capacity, retry)
	return admitAnswered
}
