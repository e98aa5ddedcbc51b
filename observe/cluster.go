package observe

import (
	"encoding/json"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"kvd/catalog"
	"kvd/tenant"
)

// The cluster's figures: STAT cluster and the kvd_cluster_* series. On a
// single node the catalog has no cluster and none of it shows.

// clusterStat is the JSON document of STAT cluster.
type clusterStat struct {
	Node    string           `json:"node"`
	Etcd    string           `json:"etcd"` // up, holding or fallback
	Members []catalog.Member `json:"members"`
	// Shares are this node's share of each bucket's cluster-wide limits.
	Shares []shareStat `json:"shares"`
}

// shareStat is one bucket's local share and the cluster's usage.
type shareStat struct {
	Bucket    string       `json:"bucket"`
	Reserved  tenant.Limit `json:"reserved"`   // this node's share of the total
	HardLimit tenant.Limit `json:"hard_limit"` // this node's share of the total
	// TotalReserved and TotalHardLimit are the bucket's settings: the
	// cluster-wide totals the shares split.
	TotalReserved  tenant.Limit `json:"total_reserved"`
	TotalHardLimit tenant.Limit `json:"total_hard_limit"`
	// ClusterUsage is the units every live node charged the bucket in the
	// last second, as they published it; NodeUsage is each node's part.
	ClusterUsage int64            `json:"cluster_usage"`
	NodeUsage    map[string]int64 `json:"node_usage"`
}

// Cluster is STAT "cluster": the node's view of the cluster, with the
// shares of the buckets canSee allows, as a JSON document. A single node
// answers ErrNotCluster.
func (v *View) Cluster(canSee func(string) bool) ([]byte, error) {
	cat := v.node.Parts().Catalog
	cl := cat.Cluster()
	if cl == nil {
		return nil, fmt.Errorf("%w: kvd was started without --cluster", ErrNotCluster)
	}
	st := cl.Status()
	out := clusterStat{Node: st.Node, Etcd: st.State.String(), Members: st.Members, Shares: []shareStat{}}
	if out.Members == nil {
		out.Members = []catalog.Member{}
	}
	for _, sh := range st.Shares {
		if !canSee(sh.Bucket) {
			continue
		}
		ss := shareStat{Bucket: sh.Bucket, Reserved: tenant.Limit(sh.Reserved), HardLimit: tenant.Limit(sh.HardLimit),
			ClusterUsage: st.Usage[sh.Bucket], NodeUsage: st.NodeUsage[sh.Bucket]}
		if ss.NodeUsage == nil {
			ss.NodeUsage = map[string]int64{}
		}
		if b, ok := cat.Get(sh.Bucket); ok {
			set := b.Settings()
			ss.TotalReserved, ss.TotalHardLimit = tenant.Limit(set.Reserved), tenant.Limit(set.HardLimit)
		}
		out.Shares = append(out.Shares, ss)
	}
	doc, _ := json.Marshal(out)
	return doc, nil
}

var (
	descClusterNodes = desc("kvd_cluster_nodes", "Live cluster members this node sees, itself included (cluster mode only).")
	descEtcdUp       = desc("kvd_cluster_etcd_up", "1 while etcd answers this node, 0 while it holds its last shares or falls back to static ones (cluster mode only).")
	descShare        = desc("kvd_bucket_share_units", "This node's share of the bucket's cluster-wide limits in units per second, by kind (reserved, hard_limit); an unlimited share is not exported (cluster mode only).", "bucket", "kind")
)

func describeCluster(ch chan<- *prometheus.Desc) {
	ch <- descClusterNodes
	ch <- descEtcdUp
	ch <- descShare
}

// collectCluster exports the last cluster tick's figures; nothing on a
// single node.
func collectCluster(ch chan<- prometheus.Metric, cat *catalog.Catalog) {
	cl := cat.Cluster()
	if cl == nil {
		return
	}
	st := cl.Status()
	emitGauge(ch, descClusterNodes, float64(max(len(st.Members), 1)))
	up := 0.0
	if st.State == catalog.LinkUp {
		up = 1
	}
	emitGauge(ch, descEtcdUp, up)
	for _, sh := range st.Shares {
		if sh.Reserved != tenant.Unlimited {
			emitGauge(ch, descShare, float64(sh.Reserved), sh.Bucket, "reserved")
		}
		if sh.HardLimit != tenant.Unlimited {
			emitGauge(ch, descShare, float64(sh.HardLimit), sh.Bucket, "hard_limit")
		}
	}
}
