package command

import (
	"bytes"
	"strconv"
	"strings"

	"kvd/catalog"
)

// Memcached's stats cachedump: its slab classes (MAX_NUMBER_OF_SLAB_CLASSES)
// and the size of one reply (item_cachedump's memlimit).
const (
	cachedumpClasses  = 64
	cachedumpMaxBytes = 2 << 20
)

// Cachedump answers the text command "stats cachedump <class> <limit>"
// (arg is what follows cachedump) for bucket bk at now, appending the reply
// to out: memcached's ITEM lines, "ITEM <key> [<bytes> b; <expiry> s]"
// (expiry in Unix seconds, 0 = never), then END. kvd has no slab classes:
// every item is in class 1, the class memcached's me reports, and every
// other class is empty. limit 0 lists all; like memcached, one reply stops
// before 2 MiB, and keys that would not read as one token (a binary
// protocol key with spaces or control bytes) are left out. The items come
// in key order, live ones only; it reads the whole store (on a worker).
// Malformed arguments get memcached's CLIENT_ERROR lines.
func Cachedump(bk *catalog.Bucket, arg string, now uint32, out []byte) []byte {
	f := strings.Fields(arg)
	if len(f) < 2 {
		return append(out, "CLIENT_ERROR bad command line\r\n"...)
	}
	class, err1 := strconv.ParseUint(f[0], 10, 32)
	limit, err2 := strconv.ParseUint(f[1], 10, 32)
	switch {
	case err1 != nil || err2 != nil:
		return append(out, "CLIENT_ERROR bad command line format\r\n"...)
	case class >= cachedumpClasses:
		return append(out, "CLIENT_ERROR Illegal slab id\r\n"...)
	}
	if class == 1 {
		start, shown := len(out), uint64(0)
		var line []byte
		err := bk.Store().Dump(now, func(key []byte, size int, expiry uint32) bool {
			if bytes.ContainsFunc(key, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
				return true
			}
			line = append(append(append(line[:0], "ITEM "...), key...), " ["...)
			line = append(strconv.AppendInt(line, int64(size), 10), " b; "...)
			line = append(strconv.AppendUint(line, uint64(expiry), 10), " s]\r\n"...)
			if len(out)-start+len(line)+len("END\r\n") > cachedumpMaxBytes {
				return false
			}
			out, shown = append(out, line...), shown+1
			return limit == 0 || shown < limit
		})
		if err != nil {
			_, reason := StatusOf(err)
			return append(append(append(out[:start], "SERVER_ERROR "...), reason...), "\r\n"...)
		}
	}
	return append(out, "END\r\n"...)
}
