#!/usr/bin/env bash
# fairness.sh: issue 9's fair-dequeue measurement. A light tenant paces
# synced SETs (1 connection, 200/s) alone and then beside a 64-connection
# synced-SET flood in another bucket, on kvd with fair dequeue on and with
# one FIFO per pool (ingress.fair_dequeue false), alternating, N rounds.
# Prints each run and the medians of the light tenant's p50/p99.
#
#   bench/fairness.sh [--rounds 3] [--duration 10s] [--flood-extra '"max_concurrent": 8']
set -euo pipefail
ROUNDS=3 DUR=10s FLOODX=""
while [ $# -gt 0 ]; do
	case "$1" in
	--rounds) ROUNDS=$2; shift ;;
	--duration) DUR=$2; shift ;;
	--flood-extra) FLOODX=", $2"; shift ;;
	*) echo "fairness.sh: unknown argument $1" >&2; exit 2 ;;
	esac
	shift
done
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TMP=$(mktemp -d /tmp/kvd-fair.XXXXXX)
PID=""
cleanup() { [ -n "$PID" ] && kill "$PID" 2>/dev/null; wait 2>/dev/null || true; rm -rf "$TMP"; }
trap cleanup EXIT
(cd "$ROOT" && go build -o "$TMP/kvd" ./cmd/kvd && go build -o "$TMP/kvbench" ./cmd/kvbench)

start() { # $1 = fair_dequeue (true|false)
	cat >"$TMP/c.json" <<JSON
{"wal_sync": true, "ingress": {"fair_dequeue": $1},
 "buckets": [{"name": "light", "reserved": "unlimited", "hard_limit": "unlimited"},
             {"name": "flood", "reserved": "unlimited", "hard_limit": "unlimited"$FLOODX}],
 "users": [{"name": "u", "password": "p", "buckets": ["*"]}]}
JSON
	rm -rf "$TMP/data"
	"$TMP/kvd" --listen 127.0.0.1:19411 --data-dir "$TMP/data" --config "$TMP/c.json" --metrics-listen "" 2>"$TMP/kvd.log" &
	PID=$!
	for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/19411) 2>/dev/null && return; sleep 0.1; done
	echo "kvd did not start"; cat "$TMP/kvd.log"; exit 1
}
stop() { kill "$PID"; wait "$PID" 2>/dev/null || true; PID=""; }
light() { # extra kvbench args; prints "p50_ms p99_ms" of the light bucket
	"$TMP/kvbench" --addr 127.0.0.1:19411 --bucket light:1:200,user=u,password=p,mix=0:100,value=100 \
		"$@" --warmup 2s --duration "$DUR" --json |
		/usr/bin/python3 -c 'import json,sys; b=[x for x in json.load(sys.stdin)["buckets"] if x["bucket"]=="light"][0]; print("%.2f %.1f" % (b["p50_us"]/1e3, b["p99_us"]/1e3))'
}
FLOOD=(--bucket flood:64,user=u,password=p,mix=0:100,value=100,keys=100000)
echo "# load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq "$ROUNDS"); do
	for mode in true false; do
		start "$mode"
		a=$(light); f=$(light "${FLOOD[@]}")
		stop
		echo "round $r fair_dequeue=$mode light alone p50/p99 ms: $a  beside flood: $f"
		echo "$mode $a $f" >>"$TMP/rows"
	done
done
echo "# load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
/usr/bin/python3 - "$TMP/rows" <<'PY'
import sys, statistics as st
rows = [l.split() for l in open(sys.argv[1])]
for mode, name in (("true", "fair"), ("false", "FIFO")):
    r = [list(map(float, x[1:])) for x in rows if x[0] == mode]
    med = [st.median(c) for c in zip(*r)]
    print(f"median {name}: light alone p50 {med[0]:.2f} ms p99 {med[1]:.1f} ms; beside flood p50 {med[2]:.2f} ms p99 {med[3]:.1f} ms"
          f"  (p50 ×{med[2]/med[0]:.1f}, p99 ×{med[3]/med[1]:.1f})")
PY
