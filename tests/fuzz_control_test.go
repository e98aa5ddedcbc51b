package tests

// The fuzzer's control, session and admin commands: HELLO, STAT, SASL,
// SELECT_BUCKET, FLUSH, throttle settings, CREATE/DELETE_BUCKET.

import (
	"bytes"
	"fmt"
	"slices"

	mc "kvd/protocol/binary"
)

// genControl adds a command every connection may send.
func (w *fuzzWorker) genControl() binItem {
	switch w.rng.IntN(8) {
	case 0:
		return w.want(&mc.Request{Opcode: mc.OpVersion}, mc.StatusOK, func(res *mc.Response) error {
			if !bytes.HasPrefix(res.Value, []byte("1.6.18 kvd-")) {
				return fmt.Errorf("VERSION = %q", res.Value)
			}
			return nil
		})
	case 1:
		return w.want(&mc.Request{Opcode: mc.OpVerbosity, Extras: mc.AppendUint32(nil, uint32(w.rng.IntN(3)))}, mc.StatusOK, nil)
	case 2:
		return w.want(&mc.Request{Opcode: mc.OpSASLListMechs}, mc.StatusOK, func(res *mc.Response) error {
			if string(res.Value) != "PLAIN" {
				return fmt.Errorf("SASL_LIST_MECHS = %q", res.Value)
			}
			return nil
		})
	case 3:
		return w.want(&mc.Request{Opcode: mc.OpListBuckets}, mc.StatusOK, nil)
	case 4, 5:
		return w.genStat()
	case 6:
		return w.genHello()
	default:
		return w.want(&mc.Request{Opcode: mc.OpNoop}, mc.StatusOK, nil)
	}
}

// genStat asks for a STAT group: several frames ending with an empty key,
// or one error (an unknown group, or bucket_details of a bucket the
// connection may not see).
func (w *fuzzWorker) genStat() binItem {
	group := pick(w.rng.IntN(6), "", "throttle", "ingress", "bucket_details", "bucket_details app", "no-such-group")
	req := w.next(&mc.Request{Opcode: mc.OpStat, Key: []byte(group)})
	return binItem{req: req, multi: true, xerror: w.c.xerror, units: w.c.units, check: func(res *mc.Response) error {
		if group == "no-such-group" && res.Status != mc.StatusKeyNotFound {
			return fmt.Errorf("STAT %q: status 0x%02x, want 0x01", group, uint16(res.Status))
		}
		return nil
	}}
}

// fuzzFeatures are what a HELLO asks for: kvd's six and three it does not
// support.
var fuzzFeatures = []uint16{0x07, 0x08, 0x0b, 0x10, 0x1a, 0x1b, 0x02, 0x0c, 0xffff}

// genHello negotiates a random feature set; the reply must be exactly the
// supported ones, in the order asked, once each. It resets the features.
func (w *fuzzWorker) genHello() binItem {
	var asked, want []byte
	seen := map[uint16]bool{}
	for range w.rng.IntN(6) {
		f := fuzzFeatures[w.rng.IntN(len(fuzzFeatures))]
		asked = mc.AppendUint16(asked, f)
		if f <= 0x1b && f != 0x02 && f != 0x0c && !seen[f] {
			want = mc.AppendUint16(want, f)
		}
		seen[f] = true
	}
	it := w.want(&mc.Request{Opcode: mc.OpHello, Key: []byte("kvd-fuzz"), Value: asked}, mc.StatusOK, func(res *mc.Response) error {
		if !bytes.Equal(res.Value, want) {
			return fmt.Errorf("HELLO % x answered % x, want % x", asked, res.Value, want)
		}
		return nil
	})
	w.c.xerror, w.c.alt, w.c.nonBlock, w.c.units = seen[0x07], seen[0x10], seen[0x1b], seen[0x1a]
	return it
}

// genSession logs in (SASL PLAIN) or selects a bucket. A wrong password
// ends the session after this pipeline: the connection's identity after a
// failed login is not something the model predicts.
func (w *fuzzWorker) genSession() binItem {
	if w.rng.IntN(2) == 0 {
		return w.genSelect()
	}
	user := pick(w.rng.IntN(3), "admin", "alice", "bob")
	pw := fuzzPasswords[user]
	if w.rng.IntN(25) == 0 {
		w.c.ending = true
		bad := pick(w.rng.IntN(3), "\x00"+user+"\x00wrong", "no nuls", "\x00"+user)
		return w.want(&mc.Request{Opcode: mc.OpSASLAuth, Key: []byte("PLAIN"), Value: []byte(bad)}, mc.StatusAuthError, nil)
	}
	it := w.want(&mc.Request{Opcode: mc.OpSASLAuth, Key: []byte("PLAIN"), Value: []byte("\x00" + user + "\x00" + pw)}, mc.StatusOK, nil)
	w.c.user, w.c.bucket = user, "" // no bucket is named like a user
	return it
}

// genSelect selects a bucket: the user's own, another tenant's (0x24), one
// that does not exist (0x01 for admin, 0x24 otherwise) or, for admin, one
// of the worker's own.
func (w *fuzzWorker) genSelect() binItem {
	names := []string{"default", "app", "other", "scratch", "no-such-bucket"}
	if len(w.fz) > 0 {
		names = append(names, w.fz[w.rng.IntN(len(w.fz))])
	}
	name := names[w.rng.IntN(len(names))]
	if w.rng.IntN(3) != 0 { // mostly a bucket the user may select, so that data commands run
		name = map[string]string{"": "default", "alice": "app", "bob": pick(w.rng.IntN(3), "other", "scratch", "scratch")}[w.c.user]
		if w.c.user == "admin" {
			name = pick(w.rng.IntN(4), "default", "app", "other", names[len(names)-1])
		}
	}
	exists := name != "no-such-bucket"
	switch {
	case !fuzzCanSelect(w.c.user, name):
		return w.want(&mc.Request{Opcode: mc.OpSelectBucket, Key: []byte(name)}, mc.StatusAccessDenied, nil)
	case !exists:
		return w.want(&mc.Request{Opcode: mc.OpSelectBucket, Key: []byte(name)}, mc.StatusKeyNotFound, nil)
	}
	w.c.bucket = name
	return w.want(&mc.Request{Opcode: mc.OpSelectBucket, Key: []byte(name)}, mc.StatusOK, nil)
}

// fuzzMaxOwnBuckets bounds the buckets a worker keeps created at once.
const fuzzMaxOwnBuckets = 2

// genAdmin sends a privileged command: FLUSH in scratch, throttle settings,
// bucket creation and deletion. Only admin may (0x24 for the others, but
// anyone may FLUSH their bucket).
func (w *fuzzWorker) genAdmin() binItem {
	if w.c.bucket == "scratch" && w.rng.IntN(3) == 0 {
		w.f.flushes.Add(1)
		req := &mc.Request{Opcode: pick(w.rng.IntN(2), mc.OpFlush, mc.OpFlushQ)}
		if w.rng.IntN(3) == 0 {
			req.Extras = mc.AppendUint32(nil, uint32(w.rng.IntN(3)))
		}
		it := w.want(req, mc.StatusOK, nil)
		it.quiet = req.Opcode == mc.OpFlushQ
		check := it.check
		it.check = func(res *mc.Response) error {
			if res == nil {
				return nil
			}
			return check(res)
		}
		return it
	}
	admin := w.c.user == "admin"
	switch w.rng.IntN(4) {
	case 0:
		return w.genBucketThrottle(admin)
	case 1:
		return w.genNodeThrottle(admin)
	case 2:
		return w.genCreate(admin)
	default:
		return w.genDelete(admin)
	}
}

func (w *fuzzWorker) genBucketThrottle(admin bool) binItem {
	names := append([]string{"app", "scratch", "no-such-bucket"}, w.fz...)
	name := names[w.rng.IntN(len(names))]
	reserved := 1000 + w.rng.IntN(4000)
	body, st := fmt.Sprintf(`{"reserved": %d, "hard_limit": %d}`, reserved, reserved+w.rng.IntN(5000)), mc.StatusOK
	switch w.rng.IntN(6) {
	case 0:
		body = fmt.Sprintf(`{"reserved": %d, "hard_limit": "unlimited"}`, reserved)
	case 1:
		body, st = fmt.Sprintf(`{"reserved": %d, "hard_limit": %d}`, reserved, reserved-1), mc.StatusInvalidArguments
	case 2:
		body, st = pick(w.rng.IntN(4), `{"reserved": "lots"}`, `not json`, `{"reserved": 5000`, ``), mc.StatusInvalidArguments
	}
	switch {
	case !admin:
		st = mc.StatusAccessDenied
	case name == "no-such-bucket" && st == mc.StatusOK:
		st = mc.StatusKeyNotFound
	case name == "no-such-bucket":
		return w.oneOf(&mc.Request{Opcode: mc.OpSetBucketThrottle, Key: []byte(name), Value: []byte(body)},
			mc.StatusKeyNotFound, mc.StatusInvalidArguments)
	}
	return w.want(&mc.Request{Opcode: mc.OpSetBucketThrottle, Key: []byte(name), Value: []byte(body)}, st, nil)
}

func (w *fuzzWorker) genNodeThrottle(admin bool) binItem {
	body, st := fmt.Sprintf(`{"capacity": %d}`, 40000+w.rng.IntN(40000)), mc.StatusOK
	if w.rng.IntN(3) == 0 {
		body, st = pick(w.rng.IntN(4), `{"capacity": "x"}`, `[1,2]`, `{"capacity": 1`, ``), mc.StatusInvalidArguments
	}
	if !admin {
		st = mc.StatusAccessDenied
	}
	return w.want(&mc.Request{Opcode: mc.OpSetNodeThrottle, Value: []byte(body)}, st, nil)
}

// genCreate creates one of the worker's own buckets, or an existing one
// (0x02).
func (w *fuzzWorker) genCreate(admin bool) binItem {
	if !admin {
		return w.want(&mc.Request{Opcode: mc.OpCreateBucket, Key: []byte("fz-denied")}, mc.StatusAccessDenied, nil)
	}
	if len(w.fz) >= fuzzMaxOwnBuckets || w.rng.IntN(4) == 0 {
		return w.want(&mc.Request{Opcode: mc.OpCreateBucket, Key: []byte("app")}, mc.StatusKeyExists, nil)
	}
	w.fzSeq++
	name := fmt.Sprintf("fz-%d-%d", w.id, w.fzSeq)
	w.fz = append(w.fz, name)
	value := pick(w.rng.IntN(2), "", `{"reserved": 2000, "hard_limit": "unlimited"}`)
	return w.want(&mc.Request{Opcode: mc.OpCreateBucket, Key: []byte(name), Value: []byte(value)}, mc.StatusOK, nil)
}

// genDelete deletes one of the worker's own buckets that the connection
// has not selected, or one that does not exist (0x01).
func (w *fuzzWorker) genDelete(admin bool) binItem {
	if !admin {
		return w.want(&mc.Request{Opcode: mc.OpDeleteBucket, Key: []byte("app")}, mc.StatusAccessDenied, nil)
	}
	if n := len(w.fzMaybe); n > 0 && w.c.bucket != w.fzMaybe[n-1] {
		name := w.fzMaybe[n-1]
		w.fzMaybe = w.fzMaybe[:n-1]
		it := w.oneOf(&mc.Request{Opcode: mc.OpDeleteBucket, Key: []byte(name)}, mc.StatusOK, mc.StatusKeyNotFound)
		return w.thenDrop(it, name)
	}
	i := slices.IndexFunc(w.fz, func(n string) bool { return n != w.c.bucket })
	if i < 0 || w.rng.IntN(4) == 0 {
		return w.want(&mc.Request{Opcode: mc.OpDeleteBucket, Key: []byte("fz-never-created")}, mc.StatusKeyNotFound, nil)
	}
	name := w.fz[i]
	w.fz = slices.Delete(w.fz, i, i+1)
	return w.thenDrop(w.want(&mc.Request{Opcode: mc.OpDeleteBucket, Key: []byte(name)}, mc.StatusOK, nil), name)
}

// thenDrop makes a DELETE_BUCKET item drop the bucket's model once it is
// answered (commands before it in the pipeline are judged first).
func (w *fuzzWorker) thenDrop(it binItem, name string) binItem {
	check := it.check
	it.check = func(res *mc.Response) error {
		w.model.dropBucket(name)
		return check(res)
	}
	return it
}
