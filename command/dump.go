package command

import (
	"errors"

	"kvd/catalog"
	"kvd/engine"
	"kvd/protocol/translate"
)

// Dump runs a key listing of the text protocol (translate.Dump: stats
// cachedump, lru_crawler metadump) over bk's items live at now, appending
// the reply to out. It reads the whole store: on a worker, and one at a
// time (engine.ErrDumpBusy: the listing's Busy answer).
func Dump(bk *catalog.Bucket, d *translate.Dump, now uint32, out []byte) []byte {
	if !d.Lists() {
		return d.End(out)
	}
	start := len(out)
	err := bk.Store().Dump(now, func(key []byte, it engine.Item) bool {
		var more bool
		out, more = d.Item(out, translate.DumpItem{Key: key, Size: len(it.Value), Expiry: it.Expiry,
			Accessed: it.Accessed, CAS: it.CAS, Fetched: it.Fetched})
		return more
	})
	switch {
	case errors.Is(err, engine.ErrDumpBusy):
		return d.Busy(out[:start])
	case err != nil:
		_, reason := StatusOf(err)
		return append(append(append(out[:start], "SERVER_ERROR "...), reason...), "\r\n"...)
	}
	return d.End(out)
}
