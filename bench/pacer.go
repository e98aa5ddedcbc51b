package bench

import (
	"math/rand/v2"
	"strconv"
	"time"
)

// Pacer spaces operations at a fixed rate on an absolute schedule: the k-th
// operation is due at start + k/rate, so time lost in a slow batch is made
// up by the following ones instead of drifting. Catching up is bounded by
// maxLag: when the schedule is more than maxLag behind, it restarts maxLag
// before now, so a long stall (a throttled connection, a GC pause) is
// followed by at most maxLag·rate operations sent back to back.
//
// Time is an argument: the caller passes now and sleeps for the returned
// delay. A Pacer with rate 0 never delays. It is not safe for concurrent
// use; each connection owns one.
type Pacer struct {
	start  time.Time
	perOp  float64 // seconds between operations; 0 = unlimited
	n      float64 // operations scheduled since start
	maxLag time.Duration
}

// NewPacer returns a Pacer for rate operations per second whose first
// operation is due at start.
func NewPacer(rate float64, start time.Time, maxLag time.Duration) Pacer {
	p := Pacer{start: start, maxLag: max(maxLag, 0)}
	if rate > 0 {
		p.perOp = 1 / rate
	}
	return p
}

// Reserve schedules n more operations and returns how long after now the
// first of them is due (0 when it is already due). The caller sends the n
// operations together once the delay has passed.
func (p *Pacer) Reserve(n int, now time.Time) time.Duration {
	if p.perOp == 0 {
		return 0
	}
	due := p.dueAt()
	if now.Sub(due) > p.maxLag {
		p.start, p.n = now.Add(-p.maxLag), 0
		due = p.start
	}
	p.n += float64(n)
	return max(due.Sub(now), 0)
}

// dueAt is when the next unscheduled operation is due.
func (p *Pacer) dueAt() time.Time {
	return p.start.Add(time.Duration(p.n * p.perOp * float64(time.Second)))
}

// connPacer returns connection i's share of a bucket's rate: rate/conns, with
// the connections' schedules staggered by 1/rate so that they do not fire in
// step.
func connPacer(rate float64, conns, i int, start time.Time) Pacer {
	if rate <= 0 {
		return Pacer{}
	}
	offset := time.Duration(float64(i) / rate * float64(time.Second))
	return NewPacer(rate/float64(conns), start.Add(offset), pacerMaxLag)
}

// pacerMaxLag bounds how much a connection catches up after a stall.
const pacerMaxLag = 100 * time.Millisecond

// workload chooses operations and keys for one connection. Keys are
// "kvb:<bucket>:<index>" with the index zero-padded to the width of the key
// space, so every key of a bucket has the same length. It is deterministic
// for a given seed and not safe for concurrent use.
type workload struct {
	prefix    []byte // "kvb:<bucket>:"
	width     int    // digits of the largest index
	keys      uint64
	getWeight int
	weights   int // getWeight + setWeight
	rng       *rand.Rand
}

// newWorkload returns the workload of connection conn of bucket number
// bucket, seeded from seed, bucket and conn.
func newWorkload(spec *BucketSpec, seed uint64, bucket, conn int) *workload {
	return &workload{
		prefix:    []byte("kvb:" + spec.Name + ":"),
		width:     len(strconv.FormatInt(spec.Keys-1, 10)),
		keys:      uint64(spec.Keys),
		getWeight: spec.GetWeight,
		weights:   spec.GetWeight + spec.SetWeight,
		rng:       rand.New(rand.NewPCG(seed, uint64(bucket)<<32|uint64(conn))),
	}
}

// next draws an operation (GET when get is true, else SET) and a key index.
func (w *workload) next() (get bool, key uint64) {
	get = w.rng.IntN(w.weights) < w.getWeight
	return get, w.rng.Uint64N(w.keys)
}

// keyLen is the length of every key of the workload.
func (w *workload) keyLen() int { return len(w.prefix) + w.width }

// appendKey appends the key with index k to dst.
func (w *workload) appendKey(dst []byte, k uint64) []byte {
	dst = append(dst, w.prefix...)
	var digits [20]byte
	d := strconv.AppendUint(digits[:0], k, 10)
	for range w.width - len(d) {
		dst = append(dst, '0')
	}
	return append(dst, d...)
}

// makeValue returns the value every SET of a bucket writes: n printable,
// deterministic bytes.
func makeValue(n int) []byte {
	v := make([]byte, n)
	for i := range v {
		v[i] = 'a' + byte(i%26)
	}
	return v
}

// readUnits and writeUnits compute units by kvd's SPEC section 5 when the
// server does not report them: a read of a hit costs ceil((key+value)/size),
// at least 1; a write costs ceil((key+value)/size).
func readUnits(keyLen, valueLen, size int) int64 {
	return max(ceilDiv(keyLen+valueLen, size), 1)
}

func writeUnits(keyLen, valueLen, size int) int64 {
	return ceilDiv(keyLen+valueLen, size)
}

func ceilDiv(a, b int) int64 { return int64((a + b - 1) / b) }
