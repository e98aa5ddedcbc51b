package tests

import (
	"testing"

	mc "kvd/protocol/binary"
)

// statReq is a STAT request for group ("" for the general group).
func statReq(group string) *mc.Request {
	return &mc.Request{Magic: mc.MagicRequest, Opcode: mc.OpStat, Key: []byte(group)}
}

// TestUnauthenticatedStatRefused checks that on a node without an
// anonymous bucket every STAT group is refused with 0x24 before SASL, that
// VERSION and NOOP still answer, and that the same connection reads STAT
// once authenticated; with an anonymous bucket STAT answers before SASL.
func TestUnauthenticatedStatRefused(t *testing.T) {
	t.Parallel()
	k := startKVD(t, throttleConfig(t, nil, bucketConfig("app", nil, nil)))
	c := dialRaw(t, k.Addr)
	for _, g := range []string{"", "throttle", "ingress", "bucket_details", "bucket_details app", "nonsense"} {
		c.expectStatus("unauthenticated STAT "+g, statReq(g), mc.StatusAccessDenied)
	}
	c.expectStatus("unauthenticated VERSION", &mc.Request{Magic: mc.MagicRequest, Opcode: mc.OpVersion}, mc.StatusOK)
	c.expectStatus("unauthenticated NOOP", noop(), mc.StatusOK)
	c.auth("alice", "alice-pw")
	if got := c.statGroup("throttle"); len(got) == 0 {
		t.Errorf("authenticated STAT throttle: no stats")
	}
	anon := startKVD(t, testConfig)
	if got := dialRaw(t, anon.Addr).statGroup(""); got["pid"] == "" {
		t.Errorf("STAT before SASL with an anonymous bucket: no pid among %d stats", len(got))
	}
}
