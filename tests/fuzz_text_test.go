package tests

// The text side of the multi-connection fuzzer: classic and meta commands
// on the worker's private keys in the anonymous bucket, invalid lines
// whose answer package protocol/text predicts (it is checked against
// memcached), garbage, and disconnects mid-command.

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	mc "kvd/protocol/binary"
	"kvd/protocol/text"
)

// textItem is one text command and the reader of its reply.
type textItem struct {
	cmd  []byte
	op   *fuzzOp // a data command on a private key: forgotten if unanswered
	read func() error
}

// textSession runs one text connection on the default bucket.
func (w *fuzzWorker) textSession() error {
	if err := w.dial(true); err != nil {
		return err
	}
	defer w.c.nc.Close()
	for steps := 1 + w.rng.IntN(20); steps > 0 && !w.f.stopped(); steps-- {
		items := w.genTextPipeline()
		switch d := w.rng.IntN(100); {
		case d < 90:
			if err := w.textPipeline(items, -1); err != nil {
				return err
			}
		case d < 94:
			return w.textPipeline(items, w.rng.IntN(len(items)))
		case d < 97:
			return w.textGarbage()
		default:
			return w.textClose(items)
		}
	}
	return nil
}

func (w *fuzzWorker) genTextPipeline() []textItem {
	var items []textItem
	for n := 1 + w.rng.IntN(16); len(items) < n; {
		if w.rng.IntN(10) == 0 {
			items = append(items, w.textInvalid())
		} else {
			items = append(items, w.textData())
		}
	}
	return append(items, textItem{cmd: []byte("mn\r\n"), read: w.expectLine("MN")})
}

// textPipeline writes items and reads their replies in order; with
// abandon ≥ 0 it closes after the replies of the first abandon.
func (w *fuzzWorker) textPipeline(items []textItem, abandon int) error {
	var buf []byte
	for _, it := range items {
		buf = append(buf, it.cmd...)
	}
	w.f.textCmds.Add(int64(len(items)))
	if err := w.writeSplit(buf); err != nil {
		return err
	}
	for i, it := range items {
		if i == abandon {
			// A noreply command has no reply to prove it ran: those just
			// before the abandon point may still be unread by the server
			// when the connection closes, and are as unanswered as the rest.
			j := i
			for j > 0 && items[j-1].op != nil && items[j-1].op.quiet {
				j--
			}
			w.f.disconnects.Add(1)
			w.forgetText(items[j:])
			return nil
		}
		if err := it.read(); err != nil {
			return fmt.Errorf("text item %d of %d %q: %w", i, len(items), short(string(it.cmd)), err)
		}
	}
	return nil
}

func (w *fuzzWorker) forgetText(items []textItem) {
	for _, it := range items {
		if it.op != nil {
			w.retire(it.op.bucket, it.op.key)
		}
	}
}

// textData is a classic or meta data command on a private key.
func (w *fuzzWorker) textData() textItem {
	op := &fuzzOp{bucket: "default", key: w.key('k', w.rng.IntN(fuzzKeys))}
	ctr := w.key('c', w.rng.IntN(fuzzCounters))
	switch d := w.rng.IntN(100); {
	case d < 25:
		return w.textGet(op, ctr)
	case d < 55:
		return w.textStore(op, ctr)
	case d < 65:
		op.kind = fkDelete
		return w.textStatus(op, fmt.Sprintf("%s %s\r\n", pick(w.rng.IntN(2), "delete", "md"), op.key))
	case d < 85:
		op.kind, op.key, op.delta, op.noCreate = pick(w.rng.IntN(2), fkIncr, fkDecr), ctr, uint64(w.rng.IntN(1000)), true
		if w.rng.IntN(6) == 0 {
			op.key = w.key('k', w.rng.IntN(fuzzKeys))
		}
		return w.textStatus(op, fmt.Sprintf("%s %s %d\r\n", op.kind, op.key, op.delta))
	default:
		op.kind, op.expiry = fkTouch, pick[uint32](w.rng.IntN(2), fuzzExpiryNone, fuzzExpiryHour)
		return w.textStatus(op, fmt.Sprintf("touch %s %d\r\n", op.key, op.expiry))
	}
}

// textGet is get (one key) or mg with v (a value or EN).
func (w *fuzzWorker) textGet(op *fuzzOp, ctr string) textItem {
	op.kind = fkGet
	if w.rng.IntN(4) == 0 {
		op.key = ctr
	}
	if w.rng.IntN(2) == 0 {
		return textItem{cmd: fmt.Appendf(nil, "mg %s v\r\n", op.key), op: op, read: func() error {
			line, err := w.textLine()
			if err != nil {
				return err
			}
			r := fuzzResult{replied: true, status: mc.StatusKeyNotFound}
			if n, ok := strings.CutPrefix(line, "VA "); ok {
				if r.value, err = w.textBlock(n); err != nil {
					return err
				}
				r.status = mc.StatusOK
			} else if line != "EN" {
				return fmt.Errorf("mg answered %q", line)
			}
			return w.model.judge(op, &r)
		}}
	}
	return textItem{cmd: fmt.Appendf(nil, "get %s\r\n", op.key), op: op, read: func() error {
		line, err := w.textLine()
		if err != nil {
			return err
		}
		r := fuzzResult{replied: true, status: mc.StatusKeyNotFound}
		if rest, ok := strings.CutPrefix(line, "VALUE "+op.key+" "); ok {
			f := strings.Fields(rest)
			if len(f) != 2 {
				return fmt.Errorf("get answered %q", line)
			}
			if r.value, err = w.textBlock(f[1]); err != nil {
				return err
			}
			r.status = mc.StatusOK
			if line, err = w.textLine(); err != nil {
				return err
			}
		}
		if line != "END" {
			return fmt.Errorf("get answered %q, want END", line)
		}
		return w.model.judge(op, &r)
	}}
}

// textStore is set/add/replace/append/prepend (set sometimes noreply) or
// ms.
func (w *fuzzWorker) textStore(op *fuzzOp, ctr string) textItem {
	op.kind = pick(w.rng.IntN(7), fkSet, fkSet, fkSet, fkAdd, fkReplace, fkAppend, fkPrepend)
	op.value = w.value()
	if op.kind <= fkReplace && w.rng.IntN(3) == 0 {
		op.key, op.value = ctr, strconv.Itoa(w.rng.IntN(100000))
	}
	if op.kind == fkSet && w.rng.IntN(3) == 0 {
		return w.textStatus(op, fmt.Sprintf("ms %s %d\r\n%s\r\n", op.key, len(op.value), op.value))
	}
	if op.kind == fkSet && w.rng.IntN(4) == 0 {
		op.quiet = true
		cmd := fmt.Appendf(nil, "set %s %d 0 %d noreply\r\n%s\r\n", op.key, w.rng.IntN(10), len(op.value), op.value)
		return textItem{cmd: cmd, op: op, read: func() error { return w.model.judge(op, &fuzzResult{}) }}
	}
	return w.textStatus(op, fmt.Sprintf("%s %s %d 0 %d\r\n%s\r\n", op.kind, op.key, w.rng.IntN(10), len(op.value), op.value))
}

// textStatus is a command answered with one line: its binary status by
// memcached's text words.
func (w *fuzzWorker) textStatus(op *fuzzOp, cmd string) textItem {
	return textItem{cmd: []byte(cmd), op: op, read: func() error {
		line, err := w.textLine()
		if err != nil {
			return err
		}
		r := fuzzResult{replied: true}
		switch line {
		case "STORED", "DELETED", "TOUCHED", "HD":
			r.status = mc.StatusOK
		case "NOT_FOUND", "NF":
			r.status = mc.StatusKeyNotFound
		case "EXISTS":
			r.status = mc.StatusKeyExists
		case "NOT_STORED", "NS":
			r.status = map[fuzzKind]mc.Status{fkAdd: mc.StatusKeyExists, fkReplace: mc.StatusKeyNotFound}[op.kind]
			if r.status == 0 {
				r.status = mc.StatusNotStored
			}
		case "CLIENT_ERROR cannot increment or decrement non-numeric value":
			r.status = mc.StatusNonNumeric
		default:
			n, err := strconv.ParseUint(line, 10, 64)
			if err != nil || (op.kind != fkIncr && op.kind != fkDecr) {
				return fmt.Errorf("answered %q", line)
			}
			r.number = &n
		}
		return w.model.judge(op, &r)
	}}
}

// textInvalid is a line the server must refuse and go on after, with the
// reply package text gives for it (a value over the item size is
// swallowed, and drops the key, as memcached does).
func (w *fuzzWorker) textInvalid() textItem {
	w.f.invalid.Add(1)
	key := w.key('k', w.rng.IntN(fuzzKeys))
	var cmd string
	switch w.rng.IntN(7) {
	case 0:
		cmd = "bogus " + key + "\r\n"
	case 1:
		cmd = "get " + strings.Repeat("k", 251) + "\r\n"
	case 2:
		cmd = "incr " + key + " abc\r\n"
	case 3:
		cmd = "set " + key + " 0 0 notanumber\r\n"
	case 4:
		cmd = "touch " + key + "\r\n"
	case 5:
		cmd = "mg " + key + " v \x01\r\n"
	default:
		n := 1<<20 + 1
		if w.rng.IntN(10) != 0 {
			n = 100 // a bad data chunk instead: the block is longer than declared
			cmd = fmt.Sprintf("set %s 0 0 %d\r\n%s\r\n", key, n-3, strings.Repeat("x", n))
			break
		}
		cmd = fmt.Sprintf("set %s 0 0 %d\r\n%s\r\n", key, n, strings.Repeat("x", n))
	}
	return w.predictText([]byte(cmd), key)
}

// predictText runs package text's decoder over cmd and expects the replies
// it predicts; a command the decoder would accept or close on is not
// something this item may send.
func (w *fuzzWorker) predictText(cmd []byte, key string) textItem {
	var want []string
	unlink := false
	var c text.Command
	for rest := cmd; len(rest) > 0; {
		n, err := text.Decode(rest, text.DecodeOptions{}, &c)
		var e *text.Error
		if !errors.As(err, &e) || e.Close || n+e.Swallow > len(rest) {
			panic(fmt.Sprintf("fuzz generator: %q is not a refused command (%d, %v)", short(string(rest)), n, err))
		}
		if len(e.Reply) > 0 {
			want = append(want, strings.TrimSuffix(string(e.Reply), "\r\n"))
		}
		unlink = unlink || e.Unlink
		rest = rest[n+e.Swallow:]
	}
	op := &fuzzOp{kind: fkDelete, bucket: "default", key: key}
	return textItem{cmd: cmd, op: op, read: func() error {
		for _, line := range want {
			if err := w.expectLine(line)(); err != nil {
				return err
			}
		}
		if unlink {
			*w.model.item("default", key) = fuzzItem{}
		}
		return nil
	}}
}

// textGarbage sends random bytes (no newline inside the first 2048, then
// one) and closes; whatever the server answers, it must live on.
func (w *fuzzWorker) textGarbage() error {
	w.f.garbage.Add(1)
	b := w.garbage(1 + w.rng.IntN(4096))
	_ = w.writeSplit(b)
	_ = w.c.nc.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	_, _ = w.c.r.Discard(1 << 20)
	w.f.disconnects.Add(1)
	return nil
}

// textClose ends with a line over 2048 bytes without a newline (the server
// closes), "quit" (closes silently), or half a command (the client closes).
func (w *fuzzWorker) textClose(items []textItem) error {
	switch w.rng.IntN(3) {
	case 0:
		_ = w.writeSplit(bytes.Repeat([]byte("a"), 3000))
	case 1:
		_ = w.writeSplit([]byte("quit\r\n"))
	default:
		cmd := items[0].cmd
		_ = w.writeSplit(cmd[:w.rng.IntN(len(cmd))])
		w.forgetText(items[:1])
		w.f.disconnects.Add(1)
		return nil
	}
	line, err := w.textLine()
	if !isConnGone(err) {
		return fmt.Errorf("not closed: read %q, %v", line, err)
	}
	w.f.serverCloses.Add(1)
	return nil
}

// expectLine reads one line and requires it to be want.
func (w *fuzzWorker) expectLine(want string) func() error {
	return func() error {
		line, err := w.textLine()
		if err != nil {
			return err
		}
		if line != want {
			return fmt.Errorf("answered %q, want %q", line, want)
		}
		return nil
	}
}

func (w *fuzzWorker) textLine() (string, error) {
	_ = w.c.nc.SetReadDeadline(time.Now().Add(fuzzReplyTimeout))
	line, err := w.c.r.ReadString('\n')
	if err != nil {
		return line, err
	}
	w.f.replies.Add(1)
	return strings.TrimSuffix(line, "\r\n"), nil
}

// textBlock reads a data block of the length n (decimal) and its CRLF.
func (w *fuzzWorker) textBlock(n string) ([]byte, error) {
	size, err := strconv.Atoi(n)
	if err != nil || size < 0 {
		return nil, fmt.Errorf("bad length %q", n)
	}
	b := make([]byte, size+2)
	if _, err := io.ReadFull(w.c.r, b); err != nil {
		return nil, err
	}
	if !bytes.HasSuffix(b, []byte("\r\n")) {
		return nil, fmt.Errorf("data block of %d bytes does not end in CRLF", size)
	}
	return b[:size], nil
}
