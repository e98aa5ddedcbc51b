package translate

import (
	"strconv"
	"strings"
	"sync/atomic"

	"kvd/protocol/text"
)

// Memcached's key listings: stats cachedump's slab classes
// (MAX_NUMBER_OF_SLAB_CLASSES, the smallest being 1) and the size of one
// cachedump reply (item_cachedump's memlimit); and the lines of one chunk
// of a listing (Run).
const (
	dumpClasses  = 64
	dumpMaxBytes = 2 << 20
	dumpChunk    = 256 << 10
)

// A Dump is one of the key listings of memcached's text protocol, parsed
// from a KindDump command (DumpOf): "stats cachedump <class> <limit>"
// answers "ITEM <key> [<bytes> b; <expiry> s]" lines up to limit (0: all)
// and under 2 MiB; "lru_crawler metadump <all|hash|class,…>" answers
// "key=<uri-encoded key> exp=… la=… cas=… fetch=yes|no cls=1 size=…" lines
// (ending in "\n" alone, as memcached's) without a bound. Both end with
// END. kvd has no slab classes: every item is in class 1 (as me says), and
// the other classes are empty. A refused one lists nothing and answers the
// refusal.
//
// A listing runs a chunk at a time (Run), each on a worker, the session
// taking the command up again for the next once the connection's output
// has room (Session.Next), until Finished.
type Dump struct {
	meta     bool   // metadump
	all      bool   // class 1 is asked for: every item
	limit    uint64 // cachedump's (0: none)
	shown    uint64
	bytes    int    // the reply so far
	chunk    int    // this chunk's lines
	complete bool   // no more lines: the limit or the size reached
	after    []byte // the last key listed or passed over
	refusal  string // memcached's answer to a malformed request
	finished atomic.Bool
}

// DumpItem is what a listing shows of one live item.
type DumpItem struct {
	Key      []byte
	Size     int    // the value's bytes
	Expiry   uint32 // Unix seconds, 0 = never
	Accessed uint32 // Unix seconds
	CAS      uint64
	Fetched  bool
}

// DumpOf parses cmd (KindDump) as memcached 1.6.18 does, refusals included.
func DumpOf(cmd *text.Command) *Dump {
	args := make([]string, 0, len(cmd.Keys))
	for _, k := range cmd.Keys {
		args = append(args, string(k))
	}
	if len(args) > 0 && args[0] == "metadump" {
		return metadumpOf(args[1:])
	}
	d := &Dump{}
	if len(args) < 3 {
		d.refusal = "CLIENT_ERROR bad command line\r\n"
		return d
	}
	class, err1 := strconv.ParseUint(args[1], 10, 32)
	limit, err2 := strconv.ParseUint(args[2], 10, 32)
	switch {
	case err1 != nil || err2 != nil:
		d.refusal = "CLIENT_ERROR bad command line format\r\n"
	case class >= dumpClasses:
		d.refusal = "CLIENT_ERROR Illegal slab id\r\n"
	}
	d.all, d.limit = class == 1, limit
	return d
}

// metadumpOf parses metadump's one argument (the decoder checked there is
// one): all, hash, or a comma-separated list of classes.
func metadumpOf(args []string) *Dump {
	d := &Dump{meta: true}
	if len(args) != 1 {
		d.refusal = "ERROR\r\n"
		return d
	}
	if args[0] == "all" || args[0] == "hash" {
		d.all = true
		return d
	}
	some := false
	for p := range strings.SplitSeq(args[0], ",") {
		if p == "" {
			continue
		}
		class, err := strconv.ParseUint(p, 10, 32)
		if err != nil || class < 1 || class >= dumpClasses {
			d.refusal = "BADCLASS invalid class id\r\n"
			return d
		}
		d.all, some = d.all || class == 1, true
	}
	if !some {
		d.refusal = "NOTSTARTED no items to crawl\r\n"
	}
	return d
}

// Run lists the next chunk of the listing through scan, appending its
// lines to dst, and at the listing's end its last line too (END, or the
// refusal), after which Finished reports true. scan calls fn with the live
// items whose keys come after the one it is given (nil: from the first),
// in key order, until fn returns false. An error from scan ends nothing:
// the caller answers it (Busy, Fail), which ends the listing.
func (d *Dump) Run(dst []byte, scan func(after []byte, fn func(DumpItem) bool) error) ([]byte, error) {
	d.chunk = 0
	if d.all && d.refusal == "" {
		stopped := false
		err := scan(d.after, func(it DumpItem) bool {
			var more bool
			dst, more = d.item(dst, it)
			stopped = !more
			return more
		})
		if err != nil {
			return dst, err
		}
		if stopped && !d.complete {
			return dst, nil // the chunk is full: more to come
		}
	}
	d.Finish()
	return d.end(dst), nil
}

// Finish ends the listing (Finished reports true).
func (d *Dump) Finish() { d.finished.Store(true) }

// Finished reports whether the listing's last chunk has run. It may be
// read while a chunk runs.
func (d *Dump) Finished() bool { return d.finished.Load() }

// item appends it to dst and reports whether the chunk wants more. Like
// memcached, cachedump leaves out keys that would not read as one token
// (binary protocol keys with a space or control byte), which metadump's
// URI encoding shows.
func (d *Dump) item(dst []byte, it DumpItem) ([]byte, bool) {
	d.after = append(d.after[:0], it.Key...)
	start := len(dst)
	if d.meta {
		dst = appendMetadumpItem(dst, it)
	} else {
		for _, c := range it.Key {
			if c <= ' ' || c == 0x7f {
				return dst, true
			}
		}
		dst = append(append(append(dst, "ITEM "...), it.Key...), " ["...)
		dst = append(strconv.AppendInt(dst, int64(it.Size), 10), " b; "...)
		dst = append(strconv.AppendUint(dst, uint64(it.Expiry), 10), " s]\r\n"...)
		if d.bytes+len(dst)-start+len("END\r\n") > dumpMaxBytes {
			d.complete = true
			return dst[:start], false
		}
		if d.shown++; d.limit != 0 && d.shown >= d.limit {
			d.complete = true
		}
	}
	d.bytes += len(dst) - start
	d.chunk += len(dst) - start
	return dst, !d.complete && d.chunk < dumpChunk
}

// appendMetadumpItem is memcached's crawler_metadump_eval line.
func appendMetadumpItem(dst []byte, it DumpItem) []byte {
	dst = append(dst, "key="...)
	for _, c := range it.Key {
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~' {
			dst = append(dst, c)
		} else {
			dst = append(dst, '%', "0123456789ABCDEF"[c>>4], "0123456789ABCDEF"[c&15])
		}
	}
	exp := int64(-1)
	if it.Expiry != 0 {
		exp = int64(it.Expiry)
	}
	dst = strconv.AppendInt(append(dst, " exp="...), exp, 10)
	dst = strconv.AppendUint(append(dst, " la="...), uint64(it.Accessed), 10)
	dst = strconv.AppendUint(append(dst, " cas="...), it.CAS, 10)
	if it.Fetched {
		dst = append(dst, " fetch=yes"...)
	} else {
		dst = append(dst, " fetch=no"...)
	}
	dst = strconv.AppendInt(append(dst, " cls=1 size="...), int64(text.ItemSize(len(it.Key), it.Size)), 10)
	return append(dst, '\n')
}

// Busy ends a listing that could not go on because another is running,
// appending its answer: memcached's for a metadump (one crawl at a time).
func (d *Dump) Busy(dst []byte) []byte {
	d.Finish()
	if d.meta {
		return append(dst, "BUSY currently processing crawler request\r\n"...)
	}
	return append(dst, "SERVER_ERROR another key listing is running: try again\r\n"...)
}

// Fail ends a listing that failed, appending SERVER_ERROR with reason.
func (d *Dump) Fail(dst []byte, reason string) []byte {
	d.Finish()
	return text.AppendServerError(dst, reason)
}

// end appends the listing's last line: END, or the refusal.
func (d *Dump) end(dst []byte) []byte {
	if d.refusal != "" {
		return append(dst, d.refusal...)
	}
	return append(dst, "END\r\n"...)
}
