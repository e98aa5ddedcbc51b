#!/usr/bin/env bash
# store.sh: how kvd's store behaves as it grows. kvd (wal_sync off, the
# config compare.sh uses) runs alone on a fresh data directory under
# memcaslap -c 32 -t 6s: first --fill runs with 1 KiB values (not reported),
# then --runs runs with 4 KiB values, each reported with its TPS, the bytes
# kvd wrote to disk per command (/proc/PID/io write_bytes, background work
# included: the script waits 4 s after each run), user and system CPU µs per
# command and minor page faults per command. Then kvd is stopped and
# restarted twice on the same directory, timed until its port opens: with a
# cold page cache (drop_caches; needs root, else skipped) and a warm one.
# The warm-up that loads the items into the item cache is most of it.
#
#   bench/store.sh                         10 runs of 4 KiB values on a fresh store
#   bench/store.sh --fill 12 --runs 3      the same after twelve 1 KiB runs
#   bench/store.sh --bin /tmp/kvd-other    another kvd binary
set -euo pipefail

RUNS=10 FILL=0 BIN="" PORT=23211 PID="" OPENED=""
while [ $# -gt 0 ]; do
	case "$1" in
	--runs) RUNS=$2; shift ;;
	--fill) FILL=$2; shift ;;
	--bin) BIN=$(realpath "$2"); shift ;;
	*) echo "store.sh: unknown argument $1" >&2; exit 2 ;;
	esac
	shift
done

ROOT=$(cd "$(dirname "$0")/.." && pwd)
TMP=$(mktemp -d /tmp/kvd-store.XXXXXX)
trap '[ -n "$PID" ] && kill "$PID" 2>/dev/null; wait 2>/dev/null; rm -rf "$TMP"' EXIT
if [ -z "$BIN" ]; then
	(cd "$ROOT" && go build -o "$TMP/kvd" ./cmd/kvd)
	BIN=$TMP/kvd
fi
# shellcheck source=bench/kvd.sh
. "$ROOT/bench/kvd.sh" # kvd_config, wait_port
kvd_config false >"$TMP/kvd.json"
printf '%s\n' key '64 64 1' value '4096 4096 1' cmd '0 0.1' '1 0.9' >"$TMP/4k.cfg"

# start: starts kvd on $TMP/data; OPENED is the seconds until its port opened.
start() {
	local t0=$EPOCHREALTIME
	"$BIN" -config "$TMP/kvd.json" -data-dir "$TMP/data" -listen "127.0.0.1:$PORT" \
		-metrics-listen "127.0.0.1:$((PORT + 1))" -log-level warn &
	PID=$!
	wait_port "$PORT" 3000 || true
	OPENED=$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN {printf "%.1f", b - a}')
}

stop() { kill "$PID"; wait "$PID" 2>/dev/null || true; PID=""; }

# run LABEL ARGS...: one memcaslap run and its line.
run() {
	local label=$1 f0 u0 s0 w0 f1 u1 s1 w1 out ops tps
	shift
	read -r f0 u0 s0 < <(awk '{print $10, $14, $15}' "/proc/$PID/stat")
	w0=$(awk '/^write_bytes/ {print $2}' "/proc/$PID/io")
	out=$(memcaslap -s "127.0.0.1:$PORT" -B -T 2 -t 6s -c 32 "$@" 2>&1)
	sleep 4
	read -r f1 u1 s1 < <(awk '{print $10, $14, $15}' "/proc/$PID/stat")
	w1=$(awk '/^write_bytes/ {print $2}' "/proc/$PID/io")
	ops=$(awk '/^Run time/ {print $5}' <<<"$out" | tail -1)
	tps=$(awk '/^Run time/ {print $7}' <<<"$out" | tail -1)
	[ -n "$label" ] || return 0
	awk -v l="$label" -v t="$tps" -v o="$ops" -v w=$((w1 - w0)) -v u=$((u1 - u0)) -v s=$((s1 - s0)) \
		-v f=$((f1 - f0)) -v hz="$(getconf CLK_TCK)" \
		'BEGIN {printf "%-8s %8d %10.0f %8.2f %8.2f %8.3f\n", l, t, w / o, u * 1e6 / hz / o, s * 1e6 / hz / o, f / o}'
}

echo "# kvd $BIN, data in $TMP/data" >&2
start
for _ in $(seq "$FILL"); do run ""; done
printf '%-8s %8s %10s %8s %8s %8s\n' run TPS bytes/op usr/op sys/op flt/op
for r in $(seq "$RUNS"); do run "4k-$r" -F "$TMP/4k.cfg"; done
stop
echo "# store: $(du -sm "$TMP/data" | cut -f1) MB, $(find "$TMP/data" -name '*.blob' | wc -l) blob files"
sync
if echo 3 2>/dev/null >/proc/sys/vm/drop_caches; then
	start
	echo "open, cold page cache: $OPENED s"
	stop
else
	echo "open, cold page cache: skipped (drop_caches needs root)"
fi
start
echo "open, warm page cache: $OPENED s"
stop
