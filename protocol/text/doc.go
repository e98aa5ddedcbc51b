// Package text is kvd's codec for memcached's text protocol (get, set, cas,
// incr, …) and meta protocol (mg, ms, md, ma, mn, me), as memcached 1.6.18
// speaks them. It turns bytes into a Command and an execution Outcome into
// reply bytes, and nothing else: it does no I/O, starts no goroutines, keeps
// no state between calls and knows nothing of the server. Functions are safe
// for concurrent use; a Command belongs to whoever holds it.
//
// # Decoding
//
// Decode reads one command from the front of a buffer:
//
//	for {
//		n, err := text.Decode(in, opts, &cmd)
//		if e, ok := err.(*text.Error); ok {
//			// send e.Reply (may be empty: noreply), drop n bytes, then drop
//			// e.Swallow more as they arrive; close if e.Close
//		} else if n == 0 {
//			break // incomplete: read more
//		} else {
//			// execute cmd, then AppendReply; drop n bytes
//		}
//	}
//
// Invariants:
//   - Decode never allocates (a multi-get keeps its first 24 keys in Keys
//     and counts the rest, which the caller takes from Line). Key, Keys, Value
//     and Meta's byte slices are views into the input buffer, except a
//     base64 key (Meta.Base64), which is decoded into the Command itself.
//     They are valid until the buffer is reused; the caller copies what
//     outlives that.
//   - A returned error is always an *Error wrapping one of the package's
//     sentinels, whose Reply is the exact line memcached 1.6.18 sends for
//     that input (checked against the real memcached in memcached_test.go),
//     empty when memcached sends nothing (classic noreply; a line over 2048
//     bytes without a newline, which closes the connection).
//   - n counts only bytes that belong to the command; a storage command is
//     returned only once its whole data block is in the buffer, so a value
//     is never half-stored. A data block that does not end in "\r\n" at the
//     declared length is "CLIENT_ERROR bad data chunk" and is consumed.
//   - A value over DecodeOptions.MaxValue is refused from its line alone
//     ("SERVER_ERROR object too large for cache") with Error.Swallow set to
//     its length + 2, so no buffer grows to hold it. memcached sends that
//     reply after it has swallowed the data, and (for set) deletes the old
//     item of that key: Error.Unlink reports that.
//
// # Limits, as memcached applies them
//
// Keys up to 250 bytes (MaxKeyLen); classic keys may hold any byte but space,
// newline and NUL, exactly as memcached accepts them. A line without a newline
// may grow to 2048 bytes (MaxLineLen), or to DecodeOptions.MaxGetLine for a
// get/gets (memcached lets those grow without bound). Numbers follow
// memcached's safe_strto* helpers: flags keep their low 32 bits, exptime and
// lengths are signed 32-bit. A meta line of more than 19 tokens is refused
// (memcached's MFLAG_MAX_OPT_LENGTH); an opaque token is at most 31 bytes.
//
// # Encoding
//
// Append… functions append one reply to dst and return it; they allocate
// only when dst must grow. AppendReply turns a protocol-neutral Outcome into
// the reply memcached gives for that command, applying classic noreply and
// meta quiet mode (q hides mg's EN, ms's and md's HD, and every ma update,
// VA included, but not an ma creation; errors and other codes always show).
// Meta return flags come in the order the request gave them, then Z, X and
// W; each command returns only the flags memcached returns for it (mg all,
// ms O k c on every code, ma O k c t, md O k), and a miss echoes O and k.
//
// # Checked against memcached
//
// memcached_test.go runs ~90 hostile and ordinary inputs against a fresh
// Debian memcached 1.6.18 and against Decode+AppendReply driving a small
// model (model_test.go), byte for byte, including whether the connection
// closes; random_test.go does the same for seeded random pipelines of
// classic and meta commands; testdata holds the captured transcripts, so
// TestGolden checks them without memcached.
package text
