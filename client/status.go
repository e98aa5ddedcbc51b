package client

import (
	"encoding/json"
	"strings"
	"unicode"
	"unicode/utf8"

	"kvd/protocol/binary"
)

// StatusError is a reply whose status is not StatusOK: the server refused
// Op with Status, for the reason in Context.
//
// Context is the "context" of an XERROR body ({"error":{"context":"…"}}),
// or, when the body is not that JSON (the client did not get XERROR, or the
// server sent something else), the body's text with surrounding space
// trimmed. It may be empty.
type StatusError struct {
	Op      binary.Opcode
	Status  binary.Status
	Context string
}

// Error returns the operation and Reason, e.g.
// "SET_BUCKET_THROTTLE_PROPERTIES: invalid arguments (0x04): reserved 900 is
// above hard_limit 500".
func (e *StatusError) Error() string {
	return e.Op.String() + ": " + e.Reason()
}

// Reason is Error without the operation: the status in words and in hex,
// then the server's context when it adds anything ("invalid arguments
// (0x04): reserved 900 is above hard_limit 500", "not found (0x01)").
func (e *StatusError) Reason() string {
	name := e.Status.String()
	var s string
	if strings.HasPrefix(name, "status 0x") { // a status the codec does not name
		s = name
	} else {
		s = lowerFirst(name) + " (0x" + hex(uint16(e.Status)) + ")"
	}
	// kvd sends the status name as the context when it has no better
	// reason; saying it twice helps nobody.
	if e.Context != "" && !strings.EqualFold(e.Context, name) {
		s += ": " + e.Context
	}
	return s
}

// statusError returns nil for StatusOK and the *StatusError of res
// otherwise.
func statusError(res *binary.Response) error {
	if res.Status == binary.StatusOK {
		return nil
	}
	return &StatusError{Op: res.Opcode, Status: res.Status, Context: errorContext(res.Value)}
}

// errorContext extracts the reason from an error reply's body.
func errorContext(body []byte) string {
	var doc struct {
		Error struct {
			Context *string `json:"context"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &doc) == nil && doc.Error.Context != nil {
		return *doc.Error.Context
	}
	text := strings.ToValidUTF8(string(body), "\uFFFD")
	return strings.TrimSpace(strings.Map(printable, text))
}

// printable keeps a reason on one terminal line: control characters become
// spaces.
func printable(r rune) rune {
	if unicode.IsControl(r) {
		return ' '
	}
	return r
}

func lowerFirst(s string) string {
	r, n := utf8.DecodeRuneInString(s)
	if n == 0 || !unicode.IsUpper(r) {
		return s
	}
	// Keep acronyms ("CAS mismatch") as they are.
	if r2, _ := utf8.DecodeRuneInString(s[n:]); unicode.IsUpper(r2) {
		return s
	}
	return string(unicode.ToLower(r)) + s[n:]
}

// hex formats v as two hex digits, or four when it needs them.
func hex(v uint16) string {
	const digits = "0123456789abcdef"
	if v <= 0xff {
		return string([]byte{digits[v>>4], digits[v&0xf]})
	}
	return string([]byte{digits[v>>12], digits[v>>8&0xf], digits[v>>4&0xf], digits[v&0xf]})
}
