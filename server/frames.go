package server

// What the loop knows of frames before it runs them: the protocols that share
// the port and the frame infos an alt request may carry.

import "kvd/protocol/binary"

// Connection protocols: memcached's text and meta protocols share the port
// with binary, and the first byte of a connection decides (detect).
const (
	protoUnknown uint8 = iota
	protoBinary
	protoText
)

// checkFrameInfos validates an alt request's frame infos: 0 (barrier) is
// accepted (kvd always executes in order), the other known ids are not
// supported, anything else is unknown.
func checkFrameInfos(req *binary.Request) (binary.Status, string) {
	fi := req.FrameInfo
	for len(fi) > 0 {
		id, _, rest, err := binary.NextFrameInfo(fi)
		if err != nil {
			return binary.StatusInvalidArguments, err.Error()
		}
		switch {
		case id == 0:
		case id <= 5:
			return binary.StatusNotSupported, "frame info not supported"
		default:
			return binary.StatusUnknownFrameInfo, "unknown frame info"
		}
		fi = rest
	}
	return binary.StatusOK, ""
}
