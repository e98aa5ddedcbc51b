#!/usr/bin/env bash
# cluster_uneven.sh: the cluster's hard-limit accuracy under uneven load.
# Three kvd nodes and Debian's etcd on loopback; bucket "lim" has a
# cluster-wide hard limit of 3000 units/s. Node 1's clients are paced at
# --light ops/s (1-RU GETs), nodes 2 and 3's are not paced; the key space
# is preloaded first, then the three kvbench runs go at once (3 s of
# warm-up, then --duration measured). Prints each node's ops/s and the
# total, N rounds; with --bin OTHER, each round runs OTHER too (A/B).
#
#   bench/cluster_uneven.sh [--rounds 3] [--duration 20s] [--light 750] [--bin /path/to/other/kvd]
set -euo pipefail
ROUNDS=3 DUR=20s LIGHT=750 OTHER=""
while [ $# -gt 0 ]; do
	case "$1" in
	--rounds) ROUNDS=$2; shift ;;
	--duration) DUR=$2; shift ;;
	--light) LIGHT=$2; shift ;;
	--bin) OTHER=$2; shift ;;
	*) echo "cluster_uneven.sh: unknown argument $1" >&2; exit 2 ;;
	esac
	shift
done
command -v etcd >/dev/null || { echo "cluster_uneven.sh: needs etcd (apt-get install etcd-server)" >&2; exit 2; }
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TMP=$(mktemp -d /tmp/kvd-uneven.XXXXXX)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$TMP"; }
trap cleanup EXIT
(cd "$ROOT" && go build -o "$TMP/kvd" ./cmd/kvd && go build -o "$TMP/kvbench" ./cmd/kvbench)
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
waitport() { for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return; sleep 0.1; done; echo "nothing listens on $1" >&2; exit 1; }
cat >"$TMP/c.json" <<JSON
{"node_capacity": 25000, "anonymous_bucket": "default",
 "buckets": [{"name": "default"}, {"name": "lim", "reserved": 0, "hard_limit": 3000}],
 "users": [{"name": "app", "password": "app-pw", "buckets": ["*"]}]}
JSON

run() { # $1 = kvd binary, $2 = label
	local d="$TMP/run" ec ep p i b=() tot=0 v
	rm -rf "$d"; mkdir -p "$d"; PIDS=()
	ec=$(port); ep=$(port)
	etcd --name e --data-dir "$d/etcd" --listen-client-urls "http://127.0.0.1:$ec" --advertise-client-urls "http://127.0.0.1:$ec" \
		--listen-peer-urls "http://127.0.0.1:$ep" --initial-advertise-peer-urls "http://127.0.0.1:$ep" \
		--initial-cluster "e=http://127.0.0.1:$ep" --log-level warn >"$d/etcd.log" 2>&1 &
	PIDS+=($!); waitport "$ec"
	for i in 1 2 3; do
		p=$(port)
		"$1" --cluster "http://127.0.0.1:$ec" --node-name "n$i" --listen "127.0.0.1:$p" --data-dir "$d/d$i" \
			--config "$TMP/c.json" --metrics-listen "" >"$d/n$i.log" 2>&1 &
		PIDS+=($!); waitport "$p"; eval "P$i=$p"
	done
	sleep 2
	# Each node's store (nodes share limits, not data) is loaded before
	# any measurement: preloads run beside the other nodes' windows would
	# spend the bucket's limit in them, and each window would start when
	# its own preload ended.
	for i in 1 2 3; do
		eval "p=\$P$i"
		"$TMP/kvbench" --addr "127.0.0.1:$p" --bucket "lim:2,user=app,password=app-pw,mix=100:0" --preload \
			--warmup 0 --duration 1s >"$d/preload$i.out" 2>&1 & b+=($!)
	done
	wait "${b[@]}"; b=()
	# The three windows start together (3 s of warm-up each, for the
	# cluster to split the limit by the new demand) and last --duration.
	"$TMP/kvbench" --addr "127.0.0.1:$P1" --bucket "lim:2:$LIGHT,user=app,password=app-pw,mix=100:0" --warmup 3s --duration "$DUR" >"$d/b1.out" 2>&1 & b+=($!)
	"$TMP/kvbench" --addr "127.0.0.1:$P2" --bucket "lim:2,user=app,password=app-pw,mix=100:0" --warmup 3s --duration "$DUR" >"$d/b2.out" 2>&1 & b+=($!)
	"$TMP/kvbench" --addr "127.0.0.1:$P3" --bucket "lim:2,user=app,password=app-pw,mix=100:0" --warmup 3s --duration "$DUR" >"$d/b3.out" 2>&1 & b+=($!)
	wait "${b[@]}"
	printf '%-8s' "$2"
	for i in 1 2 3; do
		v=$(awk '$1=="lim"{print $3}' "$d/b$i.out"); printf ' n%d %6s' "$i" "$v"; tot=$((tot + ${v:-0}))
	done
	awk -v t="$tot" 'BEGIN { printf "  total %5d (%.1f%% of 3000)\n", t, t / 30 }'
	for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	PIDS=()
}
for r in $(seq "$ROUNDS"); do
	run "$TMP/kvd" "round$r"
	[ -n "$OTHER" ] && run "$OTHER" "other$r"
done
