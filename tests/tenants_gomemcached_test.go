package tests

import (
	"errors"
	"testing"
	"time"

	"github.com/couchbase/gomemcached"
	memcached "github.com/couchbase/gomemcached/client"

	mc "kvd/protocol/binary"
)

func init() {
	tenantClients["gomemcached"] = dialGMCTenant
}

// gmcTenantClient is github.com/couchbase/gomemcached's client.
type gmcTenantClient struct {
	t testing.TB
	c *memcached.Client
}

func dialGMCTenant(t testing.TB, addr string) tenantClient {
	t.Helper()
	c, err := memcached.Connect("tcp", addr)
	if err != nil {
		t.Fatalf("gomemcached connect %s: %v", addr, err)
	}
	c.SetDeadline(time.Now().Add(30 * time.Second))
	t.Cleanup(func() { _ = c.Close() })
	return gmcTenantClient{t: t, c: c}
}

// result turns gomemcached's (response, error) pair, where a non-success
// response is returned as the error, into a status and body.
func (g gmcTenantClient) result(what string, res *gomemcached.MCResponse, err error) (mc.Status, string) {
	g.t.Helper()
	var r *gomemcached.MCResponse
	switch {
	case err == nil && res != nil:
		return mc.Status(res.Status), string(res.Body)
	case errors.As(err, &r):
		return mc.Status(r.Status), string(r.Body)
	}
	g.t.Fatalf("gomemcached %s: %v", what, err)
	return 0, ""
}

func (g gmcTenantClient) authPlain(user, password string) mc.Status {
	res, err := g.c.Auth(user, password)
	st, _ := g.result("SASL_AUTH", res, err)
	return st
}

func (g gmcTenantClient) selectBucketStatus(name string) mc.Status {
	res, err := g.c.SelectBucket(name)
	st, _ := g.result("SELECT_BUCKET", res, err)
	return st
}

func (g gmcTenantClient) getValue(key string) (mc.Status, string) {
	res, err := g.c.Get(0, key)
	return g.result("GET", res, err)
}

func (g gmcTenantClient) setValue(key, value string) mc.Status {
	res, err := g.c.Set(0, key, 0, 0, []byte(value))
	st, _ := g.result("SET", res, err)
	return st
}

func (g gmcTenantClient) adminCmd(op mc.Opcode, key, body string) (mc.Status, string) {
	res, err := g.c.Send(&gomemcached.MCRequest{Opcode: gomemcached.CommandCode(op),
		Key: []byte(key), Body: []byte(body)})
	return g.result(op.String(), res, err)
}
