package texttest

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"math/rand/v2"
	"regexp"
	"strconv"
	"strings"
)

// GenOptions keep a pipeline clear of what a server that differs from
// memcached on purpose cannot match (docs/text-protocol.md lists kvd's
// intended differences). The zero value generates what memcached and
// protocol/text's model agree on.
type GenOptions struct {
	// StableKeyForm: base64 keys (b) come from their own key space, used by
	// ms, md and mg only, so an item is always read in the form it was
	// stored in (kvd does not remember the form; memcached's k flag shows
	// the stored one).
	StableKeyForm bool
	// NoShrink: no incr makes a number shorter: numbers stay below 2^63
	// (no wrap at 2^64) and are never "0" (nor is ma's creation), so no
	// concatenation of them has a leading zero. memcached writes a shorter result in place, padded
	// with spaces; kvd stores the digits alone.
	NoShrink bool
}

// Gen writes seeded random pipelines of classic and meta commands, with
// some malformed ones. Commands avoid time (every TTL is 0) and the item
// facts neither kvd nor protocol/text's model keep (h, l), and the win
// tokens and stale items protocol/text's model does not keep
// (tests.TestMetaLeases compares those).
type Gen struct {
	rng  *rand.Rand
	opts GenOptions
}

// NewGen returns a generator for seed.
func NewGen(seed uint64, opts GenOptions) *Gen {
	return &Gen{rng: rand.New(rand.NewPCG(seed, 15)), opts: opts}
}

func (g *Gen) pick(options ...string) string { return options[g.rng.IntN(len(options))] }

func (g *Gen) key() string { return "k" + strconv.Itoa(g.rng.IntN(6)) }

func (g *Gen) value() string {
	switch g.rng.IntN(4) {
	case 0:
		shift := g.rng.IntN(64)
		if g.opts.NoShrink {
			return strconv.FormatUint(g.rng.Uint64()>>max(shift, 1)|1, 10)
		}
		return strconv.FormatUint(g.rng.Uint64()>>shift, 10)
	case 1:
		return ""
	}
	return strings.Repeat(g.pick("a", "b", "xy", "9"), g.rng.IntN(5)+1)
}

func (g *Gen) noreply() string {
	if g.rng.IntN(5) == 0 {
		return " noreply"
	}
	return ""
}

// Command appends one command to w.
func (g *Gen) Command(w *bytes.Buffer) {
	switch g.rng.IntN(16) {
	case 0, 1:
		fmt.Fprintf(w, "%s %s %s\r\n", g.pick("get", "gets"), g.key(), g.key())
	case 2, 3:
		v := g.value()
		fmt.Fprintf(w, "%s %s %d 0 %d%s\r\n%s\r\n", g.pick("set", "add", "replace", "append", "prepend"),
			g.key(), g.rng.IntN(70000), len(v), g.noreply(), v)
	case 4:
		v := g.value()
		fmt.Fprintf(w, "cas %s 0 0 %d %d%s\r\n%s\r\n", g.key(), len(v), 1000000+g.rng.IntN(30), g.noreply(), v)
	case 5:
		// No decr: memcached pads a shorter result with spaces in place, or
		// stores a new item of the exact length when another thread holds
		// the item at that moment, so what a later read sees is random.
		fmt.Fprintf(w, "incr %s %d%s\r\n", g.key(), g.rng.IntN(1000), g.noreply())
	case 6:
		fmt.Fprintf(w, "%s %s%s\r\n", g.pick("delete", "touch"), g.key(), g.pick("", " 0"))
	case 7:
		fmt.Fprintf(w, "%s 0 %s\r\n", g.pick("gat", "gats"), g.key())
	case 8, 9:
		g.metaGet(w)
	case 10, 11:
		g.metaSet(w)
	case 12:
		fmt.Fprintf(w, "md %s%s%s\r\n", g.metaKey(true), g.flag("q", "O1", "k", "C"+strconv.Itoa(1000000+g.rng.IntN(30))), g.flag("q", "k"))
	case 13:
		key, mode := g.metaKey(false), g.flag("N0", "J7", "D3", "MI", "M+")
		if g.opts.NoShrink && mode == " N0" {
			mode = " N0 J7" // a created "0" could become a leading zero
		}
		fmt.Fprintf(w, "ma %s%s%s%s%s\r\n", key, mode, g.flag("v", "q", "t"), g.flag("c", "O9", "k"), g.flag("v"))
	case 14:
		w.WriteString(g.pick("mn\r\n", "version\r\n", "verbosity 1\r\n", "flush_all\r\n", "bogus\r\n", "get\r\n",
			"set k1 0 0 2\r\nabc\r\n", "set k2 x 0 1\r\nz\r\n", "mg k1 zz\r\n", "ms k3 2 MZ\r\nhi\r\n", "incr k1 -1\r\n"))
	default:
		fmt.Fprintf(w, "mn\r\n")
	}
}

// metaKey is a key, sometimes in base64 with the b flag. Under
// StableKeyForm base64 keys name their own items ("b0"…"b5"), and only
// when stores allows it (not for ma, whose creation memcached stores with
// a plain key).
func (g *Gen) metaKey(stores bool) string {
	k := g.key()
	if g.rng.IntN(4) == 0 {
		if g.opts.StableKeyForm {
			if !stores {
				return k
			}
			k = "b" + k[1:]
		}
		return base64.StdEncoding.EncodeToString([]byte(k)) + " b"
	}
	return k
}

// flag is " f" for one of the options, or nothing.
func (g *Gen) flag(options ...string) string {
	if g.rng.IntN(3) == 0 {
		return ""
	}
	return " " + g.pick(options...)
}

func (g *Gen) metaGet(w *bytes.Buffer) {
	fmt.Fprintf(w, "mg %s", g.metaKey(true))
	seen := map[string]bool{}
	for range g.rng.IntN(6) {
		f := g.pick("v", "f", "t", "c", "s", "k", "O42", "q")
		if !seen[f] {
			seen[f] = true
			w.WriteString(" " + f)
		}
	}
	w.WriteString("\r\n")
}

func (g *Gen) metaSet(w *bytes.Buffer) {
	v := g.value()
	fmt.Fprintf(w, "ms %s %d%s%s%s%s\r\n%s\r\n", g.metaKey(true), len(v), g.flag("T0", "F7", "F99"),
		g.flag("ME", "MA", "MP", "MR", "MS"), g.flag("c", "q", "k", "O5"),
		g.flag("C"+strconv.Itoa(1000000+g.rng.IntN(30))), v)
}

var casPattern = regexp.MustCompile(`(?m)(^VALUE \S+ \d+ \d+ | c)(\d+)`)

// NormalizeCAS renames CAS values in order of appearance (0 stays 0): two
// servers number items differently (memcached spends CAS ids on some failed
// stores too).
func NormalizeCAS(out []byte) []byte {
	names := map[string]string{"0": "0"}
	return casPattern.ReplaceAllFunc(out, func(m []byte) []byte {
		sub := casPattern.FindSubmatch(m)
		name, ok := names[string(sub[2])]
		if !ok {
			name = "#" + strconv.Itoa(len(names))
			names[string(sub[2])] = name
		}
		return append(append([]byte(nil), sub[1]...), name...)
	})
}

// FirstDiff shows where two transcripts part.
func FirstDiff(in, want, got []byte) string {
	i := 0
	for i < len(want) && i < len(got) && want[i] == got[i] {
		i++
	}
	from := max(0, i-200)
	return fmt.Sprintf("memcached: %q\nother:     %q\n(input %d bytes)", want[from:min(len(want), i+200)],
		got[from:min(len(got), i+200)], len(in))
}
