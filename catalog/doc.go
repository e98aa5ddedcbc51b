// Package catalog owns the node's buckets and their durable settings: the
// registry of buckets the server serves, loading them from the engine at
// start, creating and deleting them, the persisted node throttle settings
// (capacity and the defaults of new buckets), and the reconciliation of the
// config file with run-time changes (a file edit wins where it changed
// something). In a cluster it also owns the link to etcd, where the
// catalog of every node lives, and each bucket's share of the cluster-wide
// limits.
//
// A Bucket is one tenant as the rest of kvd sees it: its keyspace (an
// engine.Bucket), its settings, its throttle gauge (a tenant.BucketThrottle),
// its command counters and the set of connections parked until its next
// throttle tick. The catalog never touches a connection: parked connections
// are Wakers, woken by WakeParked, which visits only the buckets that have
// some (a node may have 100,000 buckets: nothing the catalog does per
// tick or per bucket created walks them all; ApplyFile creates the file's
// new buckets in engine batches and registers their throttles at once).
//
// # Invariants
//
//   - A bucket is in the registry if and only if the engine has it. Create
//     persists before it registers; Delete unregisters (and marks the bucket
//     deleted, so that connections holding it see that on their next
//     command) before it removes the data.
//   - Every settings change is persisted before it applies, and is logged
//     once, naming who made it. In a cluster "persisted" means written to
//     etcd first, then to the local engine.
//   - The config file wins only where it changed: ApplyFile compares the
//     file with what was applied from it last time (persisted in the
//     engine under "config_applied", or in etcd under "files/<node>" in a
//     cluster), so an edit made while kvd was stopped wins over an older run-time change,
//     and a run-time change wins over a file value that did not change
//     since (a deletion too: a bucket the file lists that was deleted stays
//     deleted while its entry is unchanged).
//   - ApplyFile checks the whole file against the run-time settings before
//     it writes any of it: an edit they make invalid (ErrFileConflict)
//     changes nothing and leaves "config_applied" as it was.
//
// # Cluster mode
//
// With Options.Cluster set (kvd --cluster ENDPOINTS --node-name NAME) the
// catalog lives in etcd (v3 API) under /kvd/<cluster>/ (layout: keyspace
// in etcd_store.go), and every node follows it: a Cluster reads the whole
// prefix at open (catch-up), then watches it from the revision it read,
// and hands every bucket, node-defaults, capacity and users change to the
// Catalog through the applier interface (cluster_apply.go). Run-time
// changes (Create, Delete, SetBucketSettings, SetNode) go to etcd first (a
// create is a transaction that fails if the bucket exists), then apply
// locally at once; when the watch brings the same change back, applying
// it again is a no-op. A watch that fails because its revision was
// compacted reads everything again, and syncClusterBuckets drops what
// disappeared. A node that joins for the first time keeps the buckets it
// already has and seeds them into etcd; from then on (a marker in the
// engine's metadata, "cluster_member") etcd wins, and a bucket deleted
// while the node was away is deleted on it when it catches up. A bucket
// deleted and created again meanwhile is told apart by its incarnation,
// the create revision of its etcd key, which the node records per bucket
// ("cluster_incarnation/<name>"): a different one drops the local data
// first (applyIncarnationLocked). An etcd that lost its data (on the same
// address, perhaps with the same cluster ID and its revisions starting
// over) or was replaced is told apart by its life token (key life: random,
// made by the first node to find none); the member marker records the
// token the node follows, and a node that finds another, at start or
// through its heartbeat's compare while running (errNewLife), catches up
// as a first join: it seeds, it does not delete (followEtcd, seedCluster).
// Users come from etcd too: the Observer's UsersChanged hands them to the
// server.
//
// Each node's config file meets etcd item by item (reconcileFile,
// etcd_file.go), compared with what that node's file said when it last
// applied it (files/<node>), as a single node compares with
// "config_applied": an item the file edited since goes to etcd (the
// fields it changed, over run-time changes); an item the file never named
// is seeded only if etcd lacks it; an unchanged item, or the value the
// item was last written with from any node's file (file_last), leaves
// etcd as it is. Nodes may run with the same file or different ones; a
// restarted node's unchanged file, or a joining node's older one, reverts
// nothing.
//
// Cluster-wide limits. A bucket's reserved and hard_limit are totals for
// the cluster; node capacity stays per node. Each throttle tick the server
// calls Catalog.TickCluster, which hands Cluster.Tick every bucket's local
// demand and usage of the last second (demand: all it can get when its
// throttle refused units, tenant.BucketThrottle counts them; else its
// usage plus a quarter); the Cluster
// publishes them under the node's lease (members/<node>, usage/<node>),
// and returns the node's Share of every bucket, computed from the demands
// every live node published: a floor of 2% of the total split evenly (so
// an idle node can start), the rest max-min fair by demand, what nobody
// wants spread evenly. TickCluster applies each share to the bucket's
// throttle gauge. Every node runs the same pure function on the demands
// all nodes published the round before (a round is a PublishPeriod of the
// wall clock; each report carries its round and the one before), so the
// shares of a round sum to at most the total however the nodes' ticks are
// phased; a demand not in sight counts as wanting everything, which only
// shrinks the others' shares. The server starts its throttle's seconds on
// the wall clock's (clock.WholeSecond), so the nodes also move to each
// round's split together. A node whose lease expires drops out of
// the demands and the survivors take its share within the TTL. Between two
// ticks, a settings change (0x2a, a reload) applies the static share
// (total ÷ live nodes, never more than the node's part) rather than the
// cluster total, and the next tick replaces it with the demand-based
// share: a change never lets one node admit the whole cluster's limit.
//
// Why this design. CockroachDB's distributed token bucket keeps one bucket
// per tenant in a system table; each pod asks it for grants of tokens
// (with a trickle rate when the bucket is in debt) and, when the server
// cannot be reached, spends at a fallback rate. It is exact, but every
// grant is a transaction on the shared store, and a consumer needs a round
// trip before it can admit. Doorman hands out leases of capacity from a
// master that runs FAIR_SHARE over every client's wants; a client keeps its
// lease until it expires and then falls back to a safe rate. kvd takes
// Doorman's allocation (max-min fair over wants, capacity bounded by the
// total, leases that expire) but not its master: etcd is already the
// shared topic (the statestore of seed 001), so every node computes the
// same allocation itself from the published wants, and etcd's lease is the
// Doorman lease. That costs one keep-alive and one small write per node
// per second, needs no leader election, and never puts etcd on the path
// of a command. From CockroachDB it takes the fallback rate: when etcd is
// unreachable, the node keeps its last shares for one lease TTL (as long
// as the others still count it), then enforces total ÷ last known node
// count until etcd answers (states Up, Holding, Fallback; each transition
// logged once). During a partition of one node, the cluster may exceed a
// total by that node's static share.
//
// # Concurrency
//
// Catalog, Bucket and Cluster are safe for concurrent use. Get, All, Names
// and the Bucket accessors take at most a short read lock that is never
// held across I/O, so event loops may call them. Create, Delete,
// SetBucketSettings, SetNode and ApplyFile do engine I/O (and, in a
// cluster, wait for etcd for at most the request timeout): call them off
// the loops. Mutations, the watch's applier calls included, are serialized
// by one mutex (Catalog.mu), so a reload, a run-time change and a change
// from etcd never interleave. TickCluster is meant for one goroutine (the
// server's housekeeping) and never blocks on etcd.
package catalog
