package text

import (
	"bytes"
	"flag"
	"testing"

	"kvd/protocol/text/texttest"
)

// TestRandomPipelines sends seeded random pipelines of classic and meta
// commands (and some malformed ones) to a fresh memcached per seed and to
// the decoder driving the model, and compares the replies byte for byte.
// The generator (package texttest) avoids time and the item facts the
// model does not keep.
var randomSeeds = flag.Int("seeds", 10, "TestRandomPipelines: number of seeds (1000 commands each)")

func TestRandomPipelines(t *testing.T) {
	const perSeed = 1000
	seeds, total := uint64(*randomSeeds), 0
	for seed := uint64(1); seed <= seeds; seed++ {
		addr := texttest.StartMemcached(t)
		g := texttest.NewGen(seed, texttest.GenOptions{})
		var in bytes.Buffer
		for range perSeed {
			g.Command(&in)
		}
		in.WriteString(texttest.SentinelCommand)
		total += perSeed
		want, wantClosed := texttest.Ask(t, addr, in.Bytes(), true)
		got, gotClosed := newModel(1 << 20).run(in.Bytes())
		want, got = texttest.NormalizeCAS(want), texttest.NormalizeCAS(got)
		if !bytes.Equal(got, want) || gotClosed != wantClosed {
			t.Errorf("seed %d: first difference:\n%s", seed, texttest.FirstDiff(in.Bytes(), want, got))
		}
	}
	t.Logf("%d random commands over %d seeds", total, seeds)
}
