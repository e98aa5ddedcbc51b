package main

// inflightBytes is the node's max_inflight_bytes: the file's value (0 = no
// limit), or def when the file leaves it out.
func inflightBytes(p *int64, def int64) int64 {
	if p == nil {
		return def
	}
	return *p
}
