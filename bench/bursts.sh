#!/usr/bin/env bash
# bursts.sh: kvd under bursts of load on a store that grows, two kvd
# configurations A and B compared in ABBA order (each sequence on a fresh
# store), so that a linear drift of the machine cancels out.
#
# A sequence: start kvd (wal_sync off, throttling on but not binding), run
# memcaslap -B -T 2 -c 32 for --time, --bursts times, --gap apart (no
# quiesce: what one burst leaves behind, flushes and compactions, runs into
# the next), print each burst's TPS, the mean, and kvd's compaction figures.
#
#   bench/bursts.sh                                   A and B the same: the noise floor
#   bench/bursts.sh --b '"item_cache_bytes": 67108864' --value 4096 --rounds 2
#   bench/bursts.sh --bin-b /tmp/kvd-other            B runs another kvd build
#
# On the 2-core development machine four sequences of one build and config
# gave means of 107.5k to 132.8k TPS: one ABBA proves little
# (docs/performance.md, fourth session).
#
# Options: --bursts N (10), --time 6s, --gap 2 (seconds), --value BYTES (1024),
# --rounds N (1: one ABBA), --a 'JSON fields', --b 'JSON fields' (config fields
# added to A's or B's), --bin-b PATH, --prebuilt DIR (kvd already built there).
set -euo pipefail

BURSTS=10 TIME=6s GAP=2 VALUE=1024 ROUNDS=1 A="" B="" PREBUILT="" BINB=""
while [ $# -gt 0 ]; do
	case "$1" in
	--bursts) BURSTS=$2; shift ;;
	--time) TIME=$2; shift ;;
	--gap) GAP=$2; shift ;;
	--value) VALUE=$2; shift ;;
	--rounds) ROUNDS=$2; shift ;;
	--a) A=$2; shift ;;
	--b) B=$2; shift ;;
	--bin-b) BINB=$(realpath "$2"); shift ;;
	--prebuilt) PREBUILT=$(realpath "$2"); shift ;;
	*) echo "bursts.sh: unknown argument $1" >&2; exit 2 ;;
	esac
	shift
done

ROOT=$(cd "$(dirname "$0")/.." && pwd)
TMP=$(mktemp -d /tmp/kvd-bursts.XXXXXX)
PID=""
cleanup() {
	[ -n "$PID" ] && kill "$PID" 2>/dev/null || true
	wait 2>/dev/null || true
	rm -rf "$TMP"
}
trap cleanup EXIT

if [ -n "$PREBUILT" ]; then
	cp "$PREBUILT/kvd" "$TMP/"
else
	(cd "$ROOT" && go build -o "$TMP/kvd" ./cmd/kvd)
fi
printf '%s\n' key '64 64 1' value "$VALUE $VALUE 1" cmd '0 0.1' '1 0.9' >"$TMP/mc.cfg"
# shellcheck source=bench/kvd.sh
. "$ROOT/bench/kvd.sh" # kvd_config, wait_port

# sequence NAME EXTRA BIN: one sequence on a fresh store.
sequence() {
	local name=$1 extra=$2 bin=$3 dir=$TMP/data tps="" sum=0 t
	rm -rf "$dir" && mkdir -p "$dir"
	kvd_config false "${extra:+$extra,}" >"$TMP/kvd.json"
	"$bin" -listen 127.0.0.1:21501 -data-dir "$dir" -config "$TMP/kvd.json" \
		-metrics-listen 127.0.0.1:22501 -log-level warn &
	PID=$!
	wait_port 21501 || { echo "bursts.sh: kvd did not start" >&2; exit 1; }
	for _ in $(seq "$BURSTS"); do
		t=$(memcaslap -s 127.0.0.1:21501 -B -T 2 -c 32 -t "$TIME" -F "$TMP/mc.cfg" |
			sed -n 's/^Run time.*TPS: \([0-9]*\).*/\1/p')
		tps="$tps ${t:-0}" sum=$((sum + ${t:-0}))
		sleep "$GAP"
	done
	local m
	m=$(curl -s http://127.0.0.1:22501/metrics |
		awk '/^kvd_pebble_(compaction_debt_bytes|l0_sublevels) / {
			sub("kvd_pebble_", "", $1); printf " %s=%.4g", $1, $2 }')
	kill "$PID" && wait "$PID" 2>/dev/null || true
	PID=""
	echo "$name: mean $((sum / BURSTS)) TPS; bursts:$tps;$m"
}

for r in $(seq "$ROUNDS"); do
	sequence A "$A" "$TMP/kvd"
	sequence B "$B" "${BINB:-$TMP/kvd}"
	sequence B "$B" "${BINB:-$TMP/kvd}"
	sequence A "$A" "$TMP/kvd"
done
