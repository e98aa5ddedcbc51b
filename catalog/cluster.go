package catalog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"

	"kvd/tenant"
)

// Defaults of ClusterOptions.
const (
	DefaultClusterName    = "kvd"
	DefaultLeaseTTL       = 5 * time.Second
	MinLeaseTTL           = 2 * time.Second // etcd's own minimum
	DefaultPublishPeriod  = time.Second     // the server's throttle tick
	DefaultDialTimeout    = 5 * time.Second
	DefaultRequestTimeout = 2 * time.Second
)

// ClusterOptions configure a Cluster (see openCluster).
type ClusterOptions struct {
	// Endpoints are etcd's client URLs (required).
	Endpoints []string
	// NodeName names this node in the cluster (required, unique).
	NodeName string
	// Address is the node's protocol address, shown in members.
	Address string
	// Cluster names the key prefix /kvd/<Cluster>/. Default "kvd".
	Cluster string
	// LeaseTTL is how long a silent node keeps counting. Default 5 s,
	// at least 2 s.
	LeaseTTL time.Duration
	// PublishPeriod is how often Tick publishes. Default 1 s.
	PublishPeriod time.Duration
	// DialTimeout bounds the first connection. Default 5 s.
	DialTimeout time.Duration
	// RequestTimeout bounds each etcd request. Default 2 s.
	RequestTimeout time.Duration
	// FloorPermille is the part of each total every live node holds
	// whatever its demand. Default DefaultFloorPermille.
	FloorPermille int64
	// Logger receives one line per link transition. Default slog.Default().
	Logger *slog.Logger
}

// EnsureDefaults fills zero fields with their defaults.
func (o *ClusterOptions) EnsureDefaults() {
	if o.Cluster == "" {
		o.Cluster = DefaultClusterName
	}
	if o.LeaseTTL == 0 {
		o.LeaseTTL = DefaultLeaseTTL
	}
	if o.PublishPeriod == 0 {
		o.PublishPeriod = DefaultPublishPeriod
	}
	if o.DialTimeout == 0 {
		o.DialTimeout = DefaultDialTimeout
	}
	if o.RequestTimeout == 0 {
		o.RequestTimeout = DefaultRequestTimeout
	}
	if o.FloorPermille == 0 {
		o.FloorPermille = DefaultFloorPermille
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
}

// Validate reports the first invalid field.
func (o *ClusterOptions) Validate() error {
	switch {
	case len(o.Endpoints) == 0:
		return fmt.Errorf("%w: no etcd endpoints", ErrClusterOptions)
	case o.NodeName == "" || tenant.ValidBucketName(o.NodeName) != nil:
		return fmt.Errorf("%w: node name %q: want 1..100 of A-Z a-z 0-9 _ . %% -", ErrClusterOptions, o.NodeName)
	case tenant.ValidBucketName(o.Cluster) != nil:
		return fmt.Errorf("%w: cluster name %q: want 1..100 of A-Z a-z 0-9 _ . %% -", ErrClusterOptions, o.Cluster)
	case o.LeaseTTL < MinLeaseTTL || o.LeaseTTL%time.Second != 0:
		return fmt.Errorf("%w: lease TTL %v: want whole seconds, at least %v", ErrClusterOptions, o.LeaseTTL, MinLeaseTTL)
	case o.PublishPeriod <= 0 || o.PublishPeriod*2 > o.LeaseTTL:
		return fmt.Errorf("%w: publish period %v: want > 0 and at most half the lease TTL", ErrClusterOptions, o.PublishPeriod)
	case o.DialTimeout <= 0 || o.RequestTimeout <= 0:
		return fmt.Errorf("%w: timeouts must be positive", ErrClusterOptions)
	case o.FloorPermille < 0 || o.FloorPermille > 1000:
		return fmt.Errorf("%w: floor %d‰: want 0..1000", ErrClusterOptions, o.FloorPermille)
	}
	return nil
}

// applier is what a Cluster changes as etcd changes: the Catalog
// implements it. Calls come from one goroutine (the watch), in etcd's
// order; each must be idempotent (a change this node wrote comes back).
type applier interface {
	// applyClusterBucket creates the bucket or replaces its settings; inc
	// is its incarnation (clusterBucket).
	applyClusterBucket(name string, b clusterBucket) error
	// removeClusterBucket deletes the bucket (a no-op if absent).
	removeClusterBucket(name string) error
	// followEtcd is told, before each catch-up, the life of the etcd it
	// reads (see keyspace) and etcd's cluster ID.
	followEtcd(life, clusterID uint64)
	// syncClusterBuckets is a catch-up: all is every bucket etcd has.
	syncClusterBuckets(all map[string]clusterBucket) error
	// seedCluster ends a catch-up: a node new to this etcd life writes the
	// buckets only it has into etcd.
	seedCluster(cl *Cluster) error
	// applyClusterNode applies node settings; haveCapacity is false when
	// etcd holds no capacity for this node (keep the local one).
	applyClusterNode(n nodeSettings, haveCapacity bool) error
	// applyClusterUsers replaces the users from their document.
	applyClusterUsers(doc []byte) error
}

// clusterBucket is a bucket as etcd holds it: its settings, and its
// incarnation, the create revision of its key. A bucket deleted and created
// again has a new incarnation, which tells a node that was away when it
// happened that the data it holds under that name is the old bucket's.
type clusterBucket struct {
	set tenant.Settings
	inc int64
}

// Member is a live node as the cluster sees it.
type Member struct {
	Name      string    `json:"name"`
	Address   string    `json:"address"`
	Heartbeat time.Time `json:"heartbeat"` // the node's clock at its last publish
}

// Cluster is this node's connection to the cluster: the catalog's reader
// and writer in etcd, and the publisher and calculator of shares.
type Cluster struct {
	opts  ClusterOptions
	cli   *clientv3.Client
	keys  keyspace
	apply applier
	log   *slog.Logger

	life       atomic.Uint64 // the etcd life token the catalog follows (ensureLife)
	newLife    chan struct{} // the publisher found another life token: catch up (capacity 1)
	lastAnswer atomic.Int64  // UnixNano of the report etcd last acknowledged
	applied    atomic.Int64  // the etcd revision the applier has caught up with
	pub        chan report   // to the publisher, latest wins (capacity 1)

	viewMu sync.Mutex
	view   clusterView // guarded by viewMu

	tickMu     sync.Mutex
	link       link             // guarded by tickMu
	lastShares map[string]Share // guarded by tickMu: the last shares computed while up
	knownNodes int              // guarded by tickMu: live nodes when last up
	lastPub    time.Time        // guarded by tickMu
	rounds     roundState       // guarded by tickMu: the node's own demands of its last two rounds
	status     ClusterStatus    // guarded by tickMu

	cancel context.CancelFunc
	wg     sync.WaitGroup
	lease  clientv3.LeaseID // owned by the publisher goroutine

	reconcileFault atomic.Pointer[func() error] // tests: fails ReconcileFile with what it returns
}

// joinRetry is the pause between a joining node's tries to read etcd.
const joinRetry = 100 * time.Millisecond

// openCluster connects to etcd, reads the whole catalog (calling a for
// every bucket, the node settings and the users), and starts the watch
// and the publisher. It fails if etcd does not answer within DialTimeout
// (trying again after each request's RequestTimeout):
// a node joins only with etcd reachable (once running, it rides out
// outages). now is the caller's clock. Close releases everything.
func openCluster(now time.Time, opts ClusterOptions, a applier) (*Cluster, error) {
	opts.EnsureDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints: opts.Endpoints, DialTimeout: opts.DialTimeout,
		DialKeepAliveTime: time.Second, DialKeepAliveTimeout: time.Second,
		// gRPC's reconnect backoff grows to 120 s by default: after a
		// long outage the node would stay in fallback long after etcd
		// returned. Retry at least every second instead.
		DialOptions: []grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
			MinConnectTimeout: time.Second,
		})},
		Logger: quietZap(),
	})
	if err != nil {
		return nil, fmt.Errorf("catalog: etcd client: %w", err)
	}
	c := &Cluster{opts: opts, cli: cli, keys: newKeyspace(opts.Cluster), apply: a, log: opts.Logger,
		pub: make(chan report, 1), newLife: make(chan struct{}, 1), view: newClusterView(), lastShares: map[string]Share{},
		link: link{grace: 2 * opts.PublishPeriod, ttl: opts.LeaseTTL}}
	joining := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), opts.DialTimeout)
	rev, err := c.catchUp(ctx)
	for rev == 0 && err != nil && ctx.Err() == nil { // each try gives up after RequestTimeout
		time.Sleep(joinRetry)
		rev, err = c.catchUp(ctx)
	}
	cancel()
	if err != nil {
		cli.Close()
		return nil, fmt.Errorf("catalog: join cluster %q at %v: %w", opts.Cluster, opts.Endpoints, err)
	}
	if err := c.claimName(now); err != nil {
		cli.Close()
		return nil, err
	}
	if err := a.seedCluster(c); err != nil {
		cli.Close()
		return nil, fmt.Errorf("catalog: seed cluster %q: %w", opts.Cluster, err)
	}
	// etcd has just answered: the time since now went to the catch-up and
	// to waiting out a killed predecessor's lease (claimName), not to
	// silence. And the members the catch-up found are the node count a
	// fallback divides by until a tick in state up counts them.
	c.lastAnswer.Store(now.Add(time.Since(joining)).UnixNano())
	c.knownNodes = c.liveNodes()
	ctx, c.cancel = context.WithCancel(context.Background())
	c.wg.Add(2)
	go c.watchLoop(ctx, rev)
	go c.publishLoop(ctx)
	return c, nil
}

// claimName takes this node's member key under a lease of its own, and
// only while no other process holds it: a second kvd under the same
// --node-name would enforce that name's share of every limit twice. The key
// of a node that died without leaving (kill -9) lives until its lease ends,
// so claimName waits that long (the lease TTL and a second). A live holder
// rewrites the key every PublishPeriod; one that did not in all that time
// is gone, and its key outlived it only because etcd restarted meanwhile
// (etcd gives the leases it restores a whole TTL again): claimName revokes
// that lease and takes the name. Otherwise it refuses to join with
// ErrNodeNameInUse.
func (c *Cluster) claimName(now time.Time) error {
	key := c.keys.member(c.opts.NodeName)
	member, _ := json.Marshal(memberInfo{Address: c.opts.Address, Heartbeat: now})
	wait := c.opts.LeaseTTL + time.Second
	deadline := time.Now().Add(wait)
	var first *mvccpb.KeyValue // the holder's key as first seen
	for {
		held, err := c.claimOnce(key, member)
		switch {
		case err != nil:
			return fmt.Errorf("catalog: claim node name %q: %w", c.opts.NodeName, err)
		case held == nil:
			return nil
		case first == nil || held.Lease != first.Lease:
			first, deadline = held, time.Now().Add(wait)
		case time.Now().After(deadline) && held.ModRevision == first.ModRevision && held.Lease != 0:
			c.log.Warn("cluster: taking over the node name from a member that has not written for a lease TTL "+
				"(its lease outlived it: etcd restarted)", "node", c.opts.NodeName, "held_by", string(held.Value),
				"silent_for", wait.String())
			if err := c.revoke(clientv3.LeaseID(held.Lease)); err != nil {
				return fmt.Errorf("catalog: claim node name %q: revoke the silent holder's lease: %w", c.opts.NodeName, err)
			}
			first = nil
			continue
		case time.Now().After(deadline):
			_ = c.revoke(c.lease)
			return fmt.Errorf("%w: %q is held by a live member (%s), still after %v: another kvd runs under that name",
				ErrNodeNameInUse, c.opts.NodeName, held.Value, wait)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// revoke ends a lease (ours, or a silent holder's), and with it its keys.
func (c *Cluster) revoke(id clientv3.LeaseID) error {
	if id == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.opts.RequestTimeout)
	defer cancel()
	_, err := c.cli.Revoke(ctx, id)
	if errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return nil // it ended meanwhile
	}
	return err
}

// claimOnce creates key with member under the node's lease (granted on the
// first call) unless the key exists; then it returns the holder's key.
func (c *Cluster) claimOnce(key string, member []byte) (held *mvccpb.KeyValue, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), c.opts.RequestTimeout)
	defer cancel()
	if err := c.renewLease(ctx); err != nil { // an earlier attempt's lease lives on while we wait
		return nil, err
	}
	resp, err := c.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, string(member), clientv3.WithLease(c.lease))).
		Else(clientv3.OpGet(key)).Commit()
	if err != nil {
		return nil, err
	}
	if resp.Succeeded {
		return nil, nil
	}
	if r := resp.Responses; len(r) == 1 && len(r[0].GetResponseRange().Kvs) == 1 {
		return r[0].GetResponseRange().Kvs[0], nil
	}
	return &mvccpb.KeyValue{Value: []byte("?")}, nil // gone between the compare and the get: try again
}

// Close leaves the cluster: it revokes the node's lease (the other nodes
// take its shares at once), stops the watch and the publisher, and closes
// the client.
func (c *Cluster) Close() error {
	c.cancel()
	c.wg.Wait()
	_ = c.revoke(c.lease)
	return c.cli.Close()
}

// ReconcileFile applies the config file to the cluster (see
// reconcileFile); the changes reach every node, this one included,
// through the watch.
func (c *Cluster) ReconcileFile(f ClusterFile) error {
	if fault := c.reconcileFault.Load(); fault != nil {
		if err := (*fault)(); err != nil {
			return err
		}
	}
	return c.reconcileFile(context.Background(), f)
}
