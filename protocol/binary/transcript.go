package binary

import (
	"bufio"
	"encoding/hex"
	"fmt"
	"io"
	"strings"
)

// A transcript is a golden conversation with a server, written as text, one
// frame per line (testdata/*.txt):
//
//	> HEX        a request, sent as is
//	< HEX        a response the server sends, in order
//	! ERR HEX    request bytes DecodeRequest must reject with ERR: bad-magic, too-large or bad-lengths
//	= closed     the server closed the connection after the replies above
//	## NAME      names the frame on the next line
//	--- TITLE    starts a new connection
//	# ...        a comment
//
// Spaces inside HEX are ignored (they separate header fields and body
// parts). The package's tests check every frame against the codec
// (DecodeRequest/AppendRequest, DecodeResponse/AppendResponse, CheckShape);
// tests/ replays kvd.txt against the real kvd, and the package's tests
// replay memcached-1.6.18.txt against Debian's memcached.

// TranscriptFrame is one frame line of a transcript.
type TranscriptFrame struct {
	Kind byte   // '>' a request, '<' a response, '!' request bytes the decoder rejects
	Err  error  // for '!': the error DecodeRequest must return (ErrBadMagic, ErrFrameTooLarge, ErrBadLengths)
	Name string // from the last "##" line before the frame
	Line int    // 1-based line number in the transcript
	Raw  []byte // the frame's bytes
}

func (f TranscriptFrame) String() string { return fmt.Sprintf("line %d (%s)", f.Line, f.Name) }

// TranscriptConn is the frames of one connection, in file order.
type TranscriptConn struct {
	Title  string            // the text after "---"
	Frames []TranscriptFrame // in file order
	Closed bool              // the server closes the connection after the last reply
}

// transcriptErrors names the decoder errors a '!' line may expect.
var transcriptErrors = map[string]error{
	"bad-magic":   ErrBadMagic,
	"too-large":   ErrFrameTooLarge,
	"bad-lengths": ErrBadLengths,
}

// ParseTranscript reads a transcript. An error names the offending line.
func ParseTranscript(r io.Reader) ([]TranscriptConn, error) {
	var conns []TranscriptConn
	var name string
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 1<<20)
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		kind, rest, _ := strings.Cut(text, " ")
		switch {
		case text == "" || (strings.HasPrefix(text, "#") && kind != "##"):
			continue
		case kind == "---":
			conns = append(conns, TranscriptConn{Title: rest})
			continue
		case kind == "##":
			name = rest
			continue
		case len(conns) == 0:
			return nil, fmt.Errorf("line %d: frame before the first --- line", line)
		}
		c := &conns[len(conns)-1]
		if text == "= closed" {
			c.Closed = true
			continue
		}
		fr, err := parseTranscriptFrame(kind, rest)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		fr.Name, fr.Line = name, line
		c.Frames = append(c.Frames, fr)
	}
	return conns, sc.Err()
}

// parseTranscriptFrame parses the kind and the rest of a '>', '<' or '!'
// line.
func parseTranscriptFrame(kind, rest string) (TranscriptFrame, error) {
	fr := TranscriptFrame{Kind: kind[0]}
	switch kind {
	case "!":
		errName, hexText, _ := strings.Cut(rest, " ")
		if fr.Err = transcriptErrors[errName]; fr.Err == nil {
			return fr, fmt.Errorf("unknown error %q", errName)
		}
		rest = hexText
	case ">", "<":
	default:
		return fr, fmt.Errorf("cannot parse %q", kind+" "+rest)
	}
	raw, err := hex.DecodeString(strings.Join(strings.Fields(rest), ""))
	if err != nil {
		return fr, fmt.Errorf("frame hex: %w", err)
	}
	fr.Raw = raw
	return fr, nil
}
