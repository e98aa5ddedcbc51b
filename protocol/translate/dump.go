package translate

import (
	"strconv"
	"strings"

	"kvd/protocol/text"
)

// Memcached's key listings: stats cachedump's slab classes
// (MAX_NUMBER_OF_SLAB_CLASSES, the smallest being 1) and the size of one
// cachedump reply (item_cachedump's memlimit).
// metadumpMaxBytes bounds one metadump reply, which memcached streams
// without a bound: kvd builds a reply whole before it is sent.
const (
	dumpClasses      = 64
	dumpMaxBytes     = 2 << 20
	metadumpMaxBytes = 16 << 20
)

// A Dump is one of the key listings of memcached's text protocol, parsed
// from a KindDump command (DumpOf): "stats cachedump <class> <limit>"
// answers "ITEM <key> [<bytes> b; <expiry> s]" lines up to limit (0: all)
// and under 2 MiB; "lru_crawler metadump <all|hash|class,…>" answers
// "key=<uri-encoded key> exp=… la=… cas=… fetch=yes|no cls=1 size=…" lines
// (ending in "\n" alone, as memcached's). Both end with END. kvd has no slab
// classes: every item is in class 1 (as me says), and the other classes
// are empty. The listing's caller feeds it the items (Item), then ends it
// (End); a refused one lists nothing and End answers the refusal. A
// metadump stops before 16 MiB: its reply then ends with a SERVER_ERROR
// line saying so, before END (what memcached-tool reads up to).
type Dump struct {
	meta    bool   // metadump
	all     bool   // class 1 is asked for: every item
	limit   uint64 // cachedump's (0: none)
	shown   uint64
	bytes   int    // the reply so far
	full    bool   // a metadump stopped at metadumpMaxBytes
	refusal string // memcached's answer to a malformed request
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

// Lists reports whether the listing wants items at all: its classes hold
// some and it was not refused.
func (d *Dump) Lists() bool { return d.all && d.refusal == "" }

// Item appends it to dst and reports whether the listing wants more.
// Like memcached, cachedump leaves out keys that would not read as one
// token (binary protocol keys with a space or control byte), which
// metadump's URI encoding shows.
func (d *Dump) Item(dst []byte, it DumpItem) ([]byte, bool) {
	start := len(dst)
	if d.meta {
		if dst = appendMetadumpItem(dst, it); d.bytes+len(dst)-start > metadumpMaxBytes {
			d.full = true
			return dst[:start], false
		}
		d.bytes += len(dst) - start
		return dst, true
	}
	for _, c := range it.Key {
		if c <= ' ' || c == 0x7f {
			return dst, true
		}
	}
	dst = append(append(append(dst, "ITEM "...), it.Key...), " ["...)
	dst = append(strconv.AppendInt(dst, int64(it.Size), 10), " b; "...)
	dst = append(strconv.AppendUint(dst, uint64(it.Expiry), 10), " s]\r\n"...)
	if d.bytes+len(dst)-start+len("END\r\n") > dumpMaxBytes {
		return dst[:start], false
	}
	d.bytes += len(dst) - start
	d.shown++
	return dst, d.limit == 0 || d.shown < d.limit
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

// Busy appends the answer to a listing that could not start because
// another is running: memcached's for a metadump (one crawl at a time).
func (d *Dump) Busy(dst []byte) []byte {
	if d.meta {
		return append(dst, "BUSY currently processing crawler request\r\n"...)
	}
	return append(dst, "SERVER_ERROR another key listing is running: try again\r\n"...)
}

// End appends the listing's end: END, or the refusal.
func (d *Dump) End(dst []byte) []byte {
	switch {
	case d.refusal != "":
		return append(dst, d.refusal...)
	case d.full:
		dst = append(dst, "SERVER_ERROR metadump stopped at "...)
		dst = strconv.AppendInt(dst, metadumpMaxBytes, 10)
		dst = append(dst, " bytes: kvd does not list more in one reply\r\n"...)
	}
	return append(dst, "END\r\n"...)
}
