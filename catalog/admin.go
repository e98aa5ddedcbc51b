package catalog

import (
	"errors"
	"fmt"

	"kvd/engine"
	"kvd/tenant"
)

// Admin is a bucket or node admin command of the protocol's (CREATE_BUCKET,
// DELETE_BUCKET, SetBucketThrottleProperties, SetNodeThrottleProperties).
type Admin uint8

// The admin commands.
const (
	AdminCreate    Admin = iota // name, body: optional bucket settings (tenant.ParseSettings)
	AdminDelete                 // name
	AdminSetBucket              // name, body: tenant.ParseBucketSettings
	AdminSetNode                // body: tenant.ParseNodeThrottle
)

// Prepare decodes and checks an admin command against the catalog as it is
// now, without I/O, and returns the change that carries it out; the change
// writes the catalog (and in a cluster etcd), so it runs off the event
// loop, naming who asked for the admin log. A refusal is an error:
// tenant.ErrInvalidBucketName or tenant.ErrInvalidSettings for a bad name
// or body, engine.ErrBucketNotFound (naming the bucket) for a bucket the
// node does not have.
func (c *Catalog) Prepare(cmd Admin, name string, body []byte) (apply func(who string) error, err error) {
	switch cmd {
	case AdminCreate:
		if err := tenant.ValidBucketName(name); err != nil {
			return nil, err
		}
		if err := tenant.CheckDocLen(body); err != nil {
			return nil, err
		}
		set, err := tenant.ParseSettings(body, c.Defaults())
		if err != nil {
			return nil, err
		}
		return func(who string) error { _, err := c.Create(name, set, who); return err }, nil
	case AdminDelete:
		return func(who string) error {
			err := c.Delete(name, who)
			if errors.Is(err, engine.ErrBucketNotFound) {
				err = fmt.Errorf("%w: %s", engine.ErrBucketNotFound, name)
			}
			return err
		}, nil
	case AdminSetBucket:
		b, ok := c.Get(name)
		if !ok {
			if _, err := tenant.ParseBucketSettings(body, tenant.Settings{}); err != nil {
				return nil, err // a bad body is reported before a missing bucket
			}
			return nil, fmt.Errorf("%w: %s", engine.ErrBucketNotFound, name)
		}
		set, err := tenant.ParseBucketSettings(body, b.Settings())
		if err != nil {
			return nil, err
		}
		return func(who string) error { return c.SetBucketSettings(b, set, who) }, nil
	case AdminSetNode:
		next, err := tenant.ParseNodeThrottle(body, c.Node())
		if err != nil {
			return nil, err
		}
		return func(who string) error { return c.SetNode(next, who) }, nil
	}
	return nil, fmt.Errorf("catalog: unknown admin command %d", cmd)
}

// Flush empties bucket b and makes that durable: FLUSH and text's
// flush_all, run off the event loop. With at > 0 (an absolute Unix time:
// memcached's delayed flush) the items that exist then go then, and are
// served until then; a time that has passed changes nothing (the server
// turns one after its start into 0, as memcached does).
func (c *Catalog) Flush(b *Bucket, at, now uint32) error {
	b.Counters.CmdFlush.Add(1)
	var err error
	if at == 0 {
		err = b.Store().Flush()
	} else {
		err = b.Store().FlushAt(at, now)
	}
	if err != nil {
		return err
	}
	return c.db.SyncWAL()
}
