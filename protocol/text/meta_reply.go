package text

import "strconv"

// appendMeta appends the reply to a meta command.
func appendMeta(dst []byte, cmd *Command, o *Outcome) []byte {
	m := &cmd.Meta
	switch cmd.Kind {
	case KindMetaNoop:
		return append(dst, lineMN...)
	case KindMetaGet:
		if o.Status != StatusHit {
			if m.Quiet {
				return dst
			}
			return appendEcho(append(dst, "EN"...), cmd)
		}
		return appendMetaHit(dst, cmd, o, m.Value, o.Value)
	case KindMetaArithmetic:
		if o.Status == StatusNumber {
			var num [20]byte
			v := strconv.AppendUint(num[:0], o.Number, 10)
			return appendMetaHit(dst, cmd, o, m.Value, v)
		}
	}
	if o.Status == StatusNonNumeric {
		return append(dst, lineNonNum...)
	}
	code := metaCode(o.Status)
	if m.Quiet && code == "HD" {
		return dst
	}
	dst = append(dst, code...)
	if code == "HD" && cmd.Kind == KindMetaSet {
		return appendFlags(dst, cmd, o)
	}
	return appendEcho(dst, cmd)
}

// metaCode is the two-letter status of ms, md and ma outcomes.
func metaCode(s Status) string {
	switch s {
	case StatusStored, StatusDeleted, StatusHit, StatusOK, StatusNumber:
		return "HD"
	case StatusNotStored:
		return "NS"
	case StatusExists:
		return "EX"
	}
	return "NF"
}

// appendMetaHit appends "VA <len> flags\r\n<data>\r\n" or "HD flags\r\n".
func appendMetaHit(dst []byte, cmd *Command, o *Outcome, withValue bool, value []byte) []byte {
	if !withValue {
		if cmd.Meta.Quiet && cmd.Kind != KindMetaGet {
			return dst
		}
		return appendFlags(append(dst, "HD"...), cmd, o)
	}
	dst = append(dst, "VA "...)
	dst = strconv.AppendInt(dst, int64(len(value)), 10)
	dst = appendFlags(dst, cmd, o)
	dst = append(dst, value...)
	return append(dst, crlf...)
}

// appendFlags appends the return flags in request order, then Z, X and W
// as memcached orders them, and the line end.
func appendFlags(dst []byte, cmd *Command, o *Outcome) []byte {
	m := &cmd.Meta
	for _, f := range m.Returns() {
		switch f {
		case 'c':
			dst = strconv.AppendUint(append(dst, " c"...), o.CAS, 10)
		case 'f':
			dst = strconv.AppendUint(append(dst, " f"...), uint64(o.Flags), 10)
		case 'h':
			dst = append(dst, " h0"...)
			if o.Fetched {
				dst[len(dst)-1] = '1'
			}
		case 'k':
			dst = appendMetaKey(dst, m, cmd.Key)
		case 'l':
			dst = strconv.AppendInt(append(dst, " l"...), o.LastAccess, 10)
		case 'O':
			dst = append(append(dst, " O"...), m.Opaque...)
		case 's':
			dst = strconv.AppendInt(append(dst, " s"...), int64(len(o.Value)), 10)
		case 't':
			dst = strconv.AppendInt(append(dst, " t"...), o.TTL, 10)
		}
	}
	if o.TokenSent {
		dst = append(dst, " Z"...)
	}
	if o.Stale {
		dst = append(dst, " X"...)
	}
	if o.Win {
		dst = append(dst, " W"...)
	}
	return append(dst, crlf...)
}

// appendEcho appends the flags memcached echoes on a miss or failure: the
// opaque and the key, in request order.
func appendEcho(dst []byte, cmd *Command) []byte {
	m := &cmd.Meta
	for _, f := range m.Returns() {
		switch f {
		case 'k':
			dst = appendMetaKey(dst, m, cmd.Key)
		case 'O':
			dst = append(append(dst, " O"...), m.Opaque...)
		}
	}
	return append(dst, crlf...)
}
