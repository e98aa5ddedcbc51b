package command

import (
	"errors"

	"kvd/catalog"
	"kvd/engine"
	"kvd/protocol/translate"
)

// Dump runs the next chunk of a key listing of the text protocol
// (translate.Dump: stats cachedump, lru_crawler metadump) over bk's items
// live at now, appending its lines to out; on a worker. One listing runs at
// a time on the node (engine.Bucket.Dump): another gets the listing's Busy
// answer, and so does one whose client stopped reading long enough for
// another to take its place. An error ends the listing.
func Dump(bk *catalog.Bucket, d *translate.Dump, now uint32, out []byte) []byte {
	st := bk.Store()
	start := len(out)
	out, err := d.Run(out, func(after []byte, fn func(translate.DumpItem) bool) error {
		return st.Dump(d, now, after, func(key []byte, it engine.Item) bool {
			return fn(translate.DumpItem{Key: key, Size: len(it.Value), Expiry: it.Expiry,
				Accessed: it.Accessed, CAS: it.CAS, Fetched: it.Fetched})
		})
	})
	switch {
	case errors.Is(err, engine.ErrDumpBusy):
		out = d.Busy(out)
	case err != nil:
		_, reason := StatusOf(err)
		out = d.Fail(out[:start], reason)
	}
	if d.Finished() {
		st.EndDump(d)
	}
	return out
}
