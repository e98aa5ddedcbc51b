package tests

import (
	"bufio"
	"bytes"
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"kvd/protocol/text/texttest"
)

// TestTextCASDifferential compares kvd with Debian's memcached on compare-
// and-swap that can succeed, which TestTextDifferential cannot reach (its
// pipelines are written before any reply, so they name CAS values neither
// server assigned). Here each seeded step is sent alone and answered before
// the next, and a step may name the CAS value this server last showed for
// its key ({cas}) or the one before that ({stale}): cas, gets and gats, and
// the meta commands' C and c flags (mg, ms, md, ma), beside stores, incr,
// touch and delete that make new versions, with expiries none, relative,
// absolute and already passed. The two transcripts, CAS values
// renamed in order of appearance (texttest.NormalizeCAS), must be equal.
func TestTextCASDifferential(t *testing.T) {
	mcAddr := texttest.StartMemcached(t)
	k := startKVD(t, textDiffConfig)
	const seeds, steps = 20, 300
	matched := 0 // steps naming {cas} that memcached carried out: the CAS matched
	for seed := uint64(1); seed <= seeds; seed++ {
		script := casScript(seed, steps)
		want, got := runCASScript(t, mcAddr, script), runCASScript(t, k.Addr, script)
		matched += casMatches(want)
		want, got = texttest.NormalizeCAS(want), texttest.NormalizeCAS(got)
		if !bytes.Equal(want, got) {
			t.Fatalf("seed %d: kvd differs from memcached; first difference:\n%s", seed, texttest.FirstDiff(nil, want, got))
		}
	}
	t.Logf("%d steps over %d seeds, %d compare-and-swaps that matched: kvd and memcached 1.6.18 replied the same, byte for byte",
		seeds*steps, seeds, matched)
	if matched < seeds*steps/50 {
		t.Errorf("only %d compare-and-swaps matched: the script hardly reaches the path it is for", matched)
	}
}

// casMatches counts the steps of a transcript that named {cas} and were
// carried out (STORED, HD, VA).
func casMatches(transcript []byte) int {
	n := 0
	for _, step := range strings.Split(string(transcript), "> ")[1:] {
		label, reply, _ := strings.Cut(step, "\n")
		if strings.Contains(label, "{cas}") && (strings.HasPrefix(reply, "STORED") || strings.HasPrefix(reply, "HD") ||
			strings.HasPrefix(reply, "VA")) {
			n++
		}
	}
	return n
}

// casStep is one command of a CAS script, about key; its text may hold
// {cas} and {stale}, filled per server when it is sent.
type casStep struct {
	key, text string
}

// casScript is a seeded sequence of commands on four keys.
func casScript(seed uint64, n int) []casStep {
	rng := rand.New(rand.NewPCG(seed, 41))
	value := func() string {
		if rng.IntN(3) == 0 {
			return strconv.Itoa(rng.IntN(1000) + 1) // a number, for incr and ma
		}
		return strings.Repeat(string(rune('a'+rng.IntN(3))), rng.IntN(6)+1)
	}
	// An expiry that does not pass within a run, or one that has passed:
	// none, 1,000 s, a Unix time a day ahead, 3,000,000 (February 1970)
	// and -1.
	expiry := func() string {
		return [...]string{"0", "0", "1000", strconv.FormatInt(time.Now().Unix()+86400, 10), "3000000", "-1"}[rng.IntN(6)]
	}
	steps := []casStep{{"", "flush_all\r\n"}}
	for range n {
		key := "x" + strconv.Itoa(rng.IntN(4)) // not "c…": NormalizeCAS reads " c<digits>" as a CAS
		v := value()
		var text string
		switch rng.IntN(16) {
		case 0, 1:
			text = fmt.Sprintf("set %s %d %s %d\r\n%s\r\n", key, rng.IntN(5), expiry(), len(v), v)
		case 2, 3:
			text = fmt.Sprintf("gets %s\r\n", key)
		case 4:
			text = fmt.Sprintf("gats %s %s\r\n", expiry(), key)
		case 5, 6:
			text = fmt.Sprintf("cas %s %d %s %d {cas}%s\r\n%s\r\n", key, rng.IntN(5), expiry(), len(v), casNoreply(rng), v)
		case 7:
			text = fmt.Sprintf("cas %s 0 0 %d {stale}\r\n%s\r\n", key, len(v), v)
		case 8:
			text = fmt.Sprintf("mg %s c v f\r\n", key)
		case 9:
			text = fmt.Sprintf("ms %s %d c C{cas}\r\n%s\r\n", key, len(v), v)
		case 10:
			text = fmt.Sprintf("ms %s %d c C{stale} M%s\r\n%s\r\n", key, len(v), []string{"S", "A", "P", "R"}[rng.IntN(4)], v)
		case 11:
			text = fmt.Sprintf("md %s C{%s}\r\n", key, []string{"cas", "stale"}[rng.IntN(2)])
		case 12:
			text = fmt.Sprintf("ma %s C{%s} v c\r\n", key, []string{"cas", "stale"}[rng.IntN(2)])
		case 13:
			text = fmt.Sprintf("incr %s %d\r\n", key, rng.IntN(10)+1)
		case 14:
			text = fmt.Sprintf("%s %s 0 0 %d\r\n%s\r\n", []string{"append", "prepend", "add", "replace"}[rng.IntN(4)], key, len(v), v)
		default:
			text = []string{"delete " + key + "\r\n", "touch " + key + " " + expiry() + "\r\n"}[rng.IntN(2)]
		}
		steps = append(steps, casStep{key, text})
	}
	return steps
}

func casNoreply(rng *rand.Rand) string {
	if rng.IntN(4) == 0 {
		return " noreply"
	}
	return ""
}

// runCASScript sends script to addr a step at a time on one connection,
// each followed by mn to mark its end, fills each step's {cas} and {stale}
// with the CAS values this server showed for its key, and returns the
// replies (the MN markers left out).
func runCASScript(t *testing.T, addr string, script []casStep) []byte {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	r := bufio.NewReader(nc)
	seen := map[string][]string{} // key → CAS values shown, latest last
	pick := func(key string, back int) string {
		if cs := seen[key]; len(cs) > back {
			return cs[len(cs)-1-back]
		}
		return "999999999" // none shown: a value no server has given
	}
	var out bytes.Buffer
	for i, st := range script {
		cmd := strings.ReplaceAll(strings.ReplaceAll(st.text, "{cas}", pick(st.key, 0)), "{stale}", pick(st.key, 1))
		_ = nc.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := nc.Write([]byte(cmd + "mn\r\n")); err != nil {
			t.Fatalf("%s: step %d %q: %v", addr, i, cmd, err)
		}
		fmt.Fprintf(&out, "> %s", casStepLabel(st.text))
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				t.Fatalf("%s: step %d %q: %v after %q", addr, i, cmd, err, line)
			}
			if line == "MN\r\n" {
				break
			}
			out.WriteString(line)
			if c, ok := casShown(line); ok {
				seen[st.key] = append(seen[st.key], c)
			}
		}
	}
	return out.Bytes()
}

// casStepLabel is a step's command line as the transcript shows it: the
// template, so that the two servers' inputs read the same.
func casStepLabel(text string) string {
	line, _, _ := strings.Cut(text, "\r\n")
	return line + "\n"
}

// casShown returns the CAS value a reply line shows: the fifth field of a
// VALUE line (gets, gats), or a meta reply's c flag.
func casShown(line string) (string, bool) {
	f := strings.Fields(line)
	switch {
	case len(f) == 5 && f[0] == "VALUE":
		return f[4], true
	case len(f) > 0 && (f[0] == "VA" || f[0] == "HD"):
		for _, flag := range f[1:] {
			if c, ok := strings.CutPrefix(flag, "c"); ok && c != "" {
				return c, true
			}
		}
	}
	return "", false
}
