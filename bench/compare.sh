#!/usr/bin/env bash
# compare.sh: kvd against Debian memcached and the bare gnet ceiling
# (bench/ceiling), under memcaslap, servers alternated within each round
# (each round starts one server later: see rotated).
# See docs/performance.md for what it prints.
#
#   bench/compare.sh                       full run: -c 8, 32, 128 and 4 KiB values, 3 rounds of 8 s
#   bench/compare.sh --smoke               1 round of 2 s at -c 32 only
#   bench/compare.sh --rss                 RSS per million 1 KiB items, kvd vs memcached
#   bench/compare.sh --fsync               64 synced writers (kvbench) vs a write+fdatasync loop
#
# Options: --rounds N, --time 8s, --conc "8 32 128", --no-4k, --servers "memcached ceiling kvd-off kvd-on",
# --no-quiesce (do not wait for the servers to go idle before and after each run: see quiesce),
# --csv FILE (default compare.csv), --kvd-config-extra 'JSON fields' (added to both kvd configs),
# --prebuilt DIR (kvd, ceiling and kvbench already built there: no build), --ceiling-flags '...', --profile SECONDS (CPU profile of kvd-off during its first -c 32 run, or of the config --profile-config names (c8, c128, 4k),
# written next to the CSV as kvd-off.pprof).
# A/B: a server named kvd-off-X or kvd-on-X (X a suffix of letters) runs the binary given by
# --bin X=PATH (default the one built here) with the config fields given by --extra X='JSON fields'
# (default --kvd-config-extra) and the bucket fields given by --bucket-extra X='JSON fields', e.g.
#   --servers "ceiling kvd-off kvd-off-a" --bin a=/tmp/kvd-old --extra a='"item_cache_bytes": 67108864'
#   --servers "kvd-off kvd-off-a" --bin a=/tmp/kvd-nolatency     (latency recorder off: go build -tags kvd_nolatency)
set -euo pipefail

QUIET_MAX=${QUIET_MAX:-60} ROUNDS=3 TIME=8s CONC="8 32 128" BIG=1 SERVERS="memcached ceiling kvd-off kvd-on"
CSV=compare.csv MODE=memcaslap EXTRA="" CEILFLAGS="" PROFILE=0 PREBUILT=""
declare -A BIN XTRA BXTRA
while [ $# -gt 0 ]; do
	case "$1" in
	--smoke) ROUNDS=1 TIME=2s CONC=32 BIG=0 ;;
	--rounds) ROUNDS=$2; shift ;;
	--time) TIME=$2; shift ;;
	--conc) CONC=$2; shift ;;
	--no-4k) BIG=0 ;;
	--servers) SERVERS=$2; shift ;;
	--csv) CSV=$2; shift ;;
	--kvd-config-extra) EXTRA="$2,"; shift ;;
	--ceiling-flags) CEILFLAGS=$2; shift ;;
	--profile) PROFILE=$2; shift ;;
	--profile-config) PROFCFG=$2; shift ;;
	--no-quiesce) QUIET_MAX=0 ;;
	--prebuilt) PREBUILT=$(realpath "$2"); shift ;;
	--bin) BIN[${2%%=*}]=$(realpath "${2#*=}"); shift ;;
	--extra) XTRA[${2%%=*}]="${2#*=},"; shift ;;
	--bucket-extra) BXTRA[${2%%=*}]=", ${2#*=}"; shift ;;
	--rss) MODE=rss ;;
	--fsync) MODE=fsync ;;
	*) echo "compare.sh: unknown argument $1" >&2; exit 2 ;;
	esac
	shift
done

ROOT=$(cd "$(dirname "$0")/.." && pwd)
TMP=$(mktemp -d /tmp/kvd-compare.XXXXXX)
declare -A PID ADDR METRICS
cleanup() {
	for s in "${!PID[@]}"; do kill "${PID[$s]}" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$TMP"
}
trap cleanup EXIT

if [ -n "$PREBUILT" ]; then
	cp "$PREBUILT/kvd" "$PREBUILT/ceiling" "$PREBUILT/kvbench" "$TMP/"
else
	echo "# building into $TMP" >&2
	(cd "$ROOT" && go build -o "$TMP/kvd" ./cmd/kvd && go build -o "$TMP/ceiling" ./bench/ceiling &&
		go build -o "$TMP/kvbench" ./cmd/kvbench)
fi

# shellcheck source=bench/kvd.sh
. "$ROOT/bench/kvd.sh" # kvd_config, wait_port

# start NAME PORT: starts one server, records its PID and address.
start() {
	local name=$1 port=$2 mport=$(($2 + 1000))
	ADDR[$name]=127.0.0.1:$port
	case "$name" in
	memcached) memcached $( [ "$(id -u)" = 0 ] && echo -u root) -t 2 -U 0 -l 127.0.0.1 -p "$port" -m "${MCMEM:-1024}" -c 4096 &
		PID[$name]=$! ;;
	ceiling) "$TMP/ceiling" -listen "127.0.0.1:$port" $CEILFLAGS >/dev/null 2>&1 &
		PID[$name]=$! ;;
	kvd-*)
		local sync=false bin=$TMP/kvd extra=$EXTRA bextra=""
		case "$name" in kvd-on*) sync=true ;; esac
		local sfx=${name#kvd-o[nf]*-}
		if [ "$sfx" != "$name" ]; then
			bin=${BIN[$sfx]:-$bin} extra=${XTRA[$sfx]:-$extra} bextra=${BXTRA[$sfx]:-}
		fi
		mkdir -p "$TMP/$name"
		kvd_config $sync "$extra" "$bextra" >"$TMP/$name.json"
		METRICS[$name]=127.0.0.1:$mport
		"$bin" -listen "127.0.0.1:$port" -data-dir "$TMP/$name" -config "$TMP/$name.json" \
			-metrics-listen "127.0.0.1:$mport" -log-level warn &
		PID[$name]=$! ;;
	esac
	wait_port "$port" && return 0
	echo "compare.sh: $name did not start" >&2
	exit 1
}

# ticks_all: user + system clock ticks of every server so far.
ticks_all() {
	local t=0 p u y
	for p in "${PID[@]}"; do
		read -r u y < <(cpu "$p")
		t=$((t + u + y))
	done
	echo "$t"
}

# quiesce waits, up to QUIET_MAX seconds, until the servers together use at
# most 3 clock ticks in half a second (an idle kvd uses about 0.7: its
# housekeeping tick): the background work a run leaves behind (Pebble's flushes and
# compactions) then runs neither into the next server's measurement nor
# into this one's next round. --no-quiesce turns it off.
quiesce() {
	[ "$QUIET_MAX" = 0 ] && return 0
	local start=$SECONDS before after
	while [ $((SECONDS - start)) -lt "$QUIET_MAX" ]; do
		before=$(ticks_all)
		sleep 0.5
		after=$(ticks_all)
		[ $((after - before)) -le 3 ] && return 0
	done
	echo "compare.sh: servers still busy after ${QUIET_MAX}s; measuring anyway" >&2
}

# latency NAME: a kvd server's latency sums and counts so far, read and
# write class ("rsum rcount wsum wcount", from
# kvd_node_command_latency_seconds: frame complete to reply written); zeros
# for the other servers.
latency() {
	case "$1" in kvd-*) ;; *) echo 0 0 0 0; return ;; esac
	curl -s "http://${METRICS[$1]}/metrics" | awk '
		/^kvd_node_command_latency_seconds_sum\{class="read"\}/ {rs = $2}
		/^kvd_node_command_latency_seconds_count\{class="read"\}/ {rc = $2}
		/^kvd_node_command_latency_seconds_sum\{class="write"\}/ {ws = $2}
		/^kvd_node_command_latency_seconds_count\{class="write"\}/ {wc = $2}
		END {printf "%.6f %d %.6f %d\n", rs, rc, ws, wc}'
}

# cpu PID: user and system clock ticks of the process so far.
cpu() { awk '{print $14, $15}' "/proc/$1/stat"; }

# median of the numbers on stdin.
median() { sort -g | awk '{a[NR]=$1} END {if (NR == 0) print 0; else if (NR % 2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }

# one_run CONFIG ROUND SERVER ARGS...: one memcaslap run, one CSV row.
one_run() {
	local cfg=$1 round=$2 name=$3
	shift 3
	local pid=${PID[$name]} hz u0 s0 u1 s1 out
	hz=$(getconf CLK_TCK)
	quiesce
	local rs0 rc0 ws0 wc0 rs1 rc1 ws1 wc1
	read -r rs0 rc0 ws0 wc0 < <(latency "$name")
	read -r u0 s0 < <(cpu "$pid")
	if [ "$PROFILE" != 0 ] && [ "$name" = kvd-off ] && [ "$cfg" = "${PROFCFG:-c32}" ] && [ "$round" = 1 ]; then
		curl -s -o "$(dirname "$CSV")/kvd-off.pprof" "http://${METRICS[$name]}/debug/pprof/profile?seconds=$PROFILE" &
	fi
	out=$(memcaslap -s "${ADDR[$name]}" -B -T 2 -t "$TIME" "$@" 2>&1)
	quiesce # the run's trailing background work counts in its CPU per op
	read -r u1 s1 < <(cpu "$pid")
	read -r rs1 rc1 ws1 wc1 < <(latency "$name")
	local ops tps
	ops=$(echo "$out" | awk '/^Run time/ {for (i = 1; i <= NF; i++) if ($i == "Ops:") print $(i+1)}')
	tps=$(echo "$out" | awk '/^Run time/ {for (i = 1; i <= NF; i++) if ($i == "TPS:") print $(i+1)}')
	if [ -z "$ops" ] || [ "$ops" = 0 ]; then
		echo "compare.sh: memcaslap against $name gave no result:" >&2
		echo "$out" >&2
		exit 1
	fi
	local miss
	miss=$(echo "$out" | awk '/^get_misses/ {print $2; exit}')
	awk -v c="$cfg" -v r="$round" -v n="$name" -v t="$tps" -v o="$ops" -v m="${miss:-0}" \
		-v du=$((u1 - u0)) -v ds=$((s1 - s0)) -v hz="$hz" \
		-v rs="$rs0 $rs1" -v rc="$rc0 $rc1" -v ws="$ws0 $ws1" -v wc="$wc0 $wc1" \
		'function mean(s, c,  a, b) {split(s, a, " "); split(c, b, " "); return b[2] > b[1] ? sprintf("%.1f", (a[2]-a[1])*1e6/(b[2]-b[1])) : ""}
		BEGIN {printf "%s,%s,%s,%s,%s,%s,%.2f,%.2f,%s,%s\n", c, r, n, t, o, m, du*1e6/hz/o, ds*1e6/hz/o, mean(rs, rc), mean(ws, wc)}' >>"$CSV"
	echo "  $cfg round $round $name: $tps TPS" >&2
}

# rotated ROUND: the servers in the order round ROUND runs them, the list
# rotated by ROUND-1 places, so that no server always runs right after
# the same one (on this box the order moved a server's ratio by up to 0.1).
rotated() {
	local -a list=($SERVERS)
	local n=${#list[@]} i
	for ((i = 0; i < n; i++)); do echo "${list[$(((i + $1 - 1) % n))]}"; done
}

memcaslap_mode() {
	local port=21211
	for s in $SERVERS; do start "$s" $port; port=$((port + 10)); done
	printf '%s\n' key '64 64 1' value '4096 4096 1' cmd '0 0.1' '1 0.9' >"$TMP/4k.cfg"
	echo "config,round,server,tps,ops,get_misses,usr_us_per_op,sys_us_per_op,get_lat_us,set_lat_us" >"$CSV"
	local cfgs=""
	for c in $CONC; do cfgs="$cfgs c$c"; done
	[ "$BIG" = 1 ] && cfgs="$cfgs 4k"
	for cfg in $cfgs; do
		for r in $(seq "$ROUNDS"); do
			for s in $(rotated "$r"); do
				case "$cfg" in
				4k) one_run "$cfg" "$r" "$s" -c 32 -F "$TMP/4k.cfg" ;;
				*) one_run "$cfg" "$r" "$s" -c "${cfg#c}" ;;
				esac
			done
		done
	done
	summary
}

# summary prints one line per configuration and server: median TPS, ratios
# to memcached and to the ceiling (of the medians), the median of the paired
# ratios (each round's TPS over the reference's in the same round: the
# machine's drift between rounds cancels out), median server CPU µs/op.
summary() {
	printf '%-6s %-10s %10s %8s %8s %8s %8s %8s %8s %8s %8s\n' config server "TPS" "/mcd" "/ceil" "/mcd(p)" "/ceil(p)" "usr/op" "sys/op" "get_us" "set_us"
	local cfg s
	for cfg in $(tail -n +2 "$CSV" | cut -d, -f1 | uniq); do
		local mcd ceil
		mcd=$(awk -F, -v c="$cfg" '$1 == c && $3 == "memcached" {print $4}' "$CSV" | median)
		ceil=$(awk -F, -v c="$cfg" '$1 == c && $3 == "ceiling" {print $4}' "$CSV" | median)
		for s in $SERVERS; do
			local tps usr sys pm pc gl sl
			tps=$(awk -F, -v c="$cfg" -v n="$s" '$1 == c && $3 == n {print $4}' "$CSV" | median)
			usr=$(awk -F, -v c="$cfg" -v n="$s" '$1 == c && $3 == n {print $7}' "$CSV" | median)
			sys=$(awk -F, -v c="$cfg" -v n="$s" '$1 == c && $3 == n {print $8}' "$CSV" | median)
			gl=$(awk -F, -v c="$cfg" -v n="$s" '$1 == c && $3 == n && $9 != "" {print $9}' "$CSV" | median)
			sl=$(awk -F, -v c="$cfg" -v n="$s" '$1 == c && $3 == n && $10 != "" {print $10}' "$CSV" | median)
			pm=$(paired "$cfg" "$s" memcached)
			pc=$(paired "$cfg" "$s" ceiling)
			awk -v c="$cfg" -v n="$s" -v t="$tps" -v m="$mcd" -v e="$ceil" -v u="$usr" -v y="$sys" -v pm="$pm" -v pc="$pc" \
				-v gl="$gl" -v sl="$sl" \
				'BEGIN {printf "%-6s %-10s %10d %8s %8s %8s %8s %8.2f %8.2f %8s %8s\n", c, n, t,
					(m > 0 ? sprintf("%.2f", t/m) : "-"), (e > 0 ? sprintf("%.2f", t/e) : "-"), pm, pc, u, y,
					(gl > 0 ? sprintf("%.1f", gl) : "-"), (sl > 0 ? sprintf("%.1f", sl) : "-")}'
		done
	done
}

# paired CONFIG SERVER REFERENCE: the median over rounds of SERVER's TPS over
# REFERENCE's in the same round, or "-" without the reference.
paired() {
	awk -F, -v c="$1" -v n="$2" -v ref="$3" '$1 == c && $3 == n {t[$2] = $4} $1 == c && $3 == ref {r[$2] = $4}
		END {for (k in t) if (k in r && r[k] > 0) printf "%.4f\n", t[k] / r[k]}' "$CSV" | median |
		awk '{if ($1 == 0) print "-"; else printf "%.2f\n", $1}'
}

# rss_mode: RSS after storing 1,000,000 1 KiB items (kvd wal_sync off vs
# memcached with -m 2048 so that nothing is evicted).
rss_mode() {
	MCMEM=2048
	start memcached 21211
	start kvd-off 21221
	for s in memcached kvd-off; do
		local before after
		before=$(awk '/VmRSS/ {print $2}' "/proc/${PID[$s]}/status")
		"$TMP/kvbench" --addr "${ADDR[$s]}" --anonymous --bucket "r:16,mix=0:100,value=1024,keys=1000000" \
			--preload --warmup 0s --duration 1s >/dev/null
		sleep 2
		after=$(awk '/VmRSS/ {print $2}' "/proc/${PID[$s]}/status")
		echo "$s: RSS $((before / 1024)) MiB empty, $((after / 1024)) MiB with 1,000,000 1 KiB items ($(((after - before) / 1024)) MiB per million)"
	done
}

# fsync_mode: 64 synced writers against kvd wal_sync on (or the kvd-on*
# servers named in --servers, alternated); commands per fsync from kvd's
# Pebble WAL fsync count; beside a write+fdatasync loop's rate on the same
# disk (dd oflag=dsync, one thread).
fsync_mode() {
	local list="" port=21211 s
	for s in $SERVERS; do case "$s" in kvd-on*) list="$list $s" ;; esac; done
	[ -z "$list" ] && list=kvd-on
	for s in $list; do start "$s" $port; port=$((port + 10)); done
	local f0 f1 out ops r
	fsyncs() { curl -s "http://${METRICS[$1]}/metrics" | awk '/^kvd_pebble_wal_fsync_latency_seconds_count/ {print $2}'; }
	for r in $(seq "$ROUNDS"); do
		for s in $list; do
			f0=$(fsyncs "$s")
			out=$("$TMP/kvbench" --addr "${ADDR[$s]}" --anonymous --json --bucket "w:64,mix=0:100,value=256,keys=100000" \
				--warmup 2s --duration 10s)
			f1=$(fsyncs "$s")
			ops=$(echo "$out" | grep -o '"ops": *[0-9]*' | head -1 | tr -dc 0-9)
			awk -v s="$s" -v o="$ops" -v f="$((f1 - f0))" 'BEGIN {printf "%s: 64 synced writers: %d ops in 10 s, %.0f ops/s; %.0f fsyncs/s; %.1f commands per fsync (fsyncs counted over warmup + run)\n", s, o, o/10, f/12, (f > 0 ? o/(f*10/12) : 0)}'
		done
	done
	local t0 t1
	t0=$(date +%s.%N)
	dd if=/dev/zero of="$TMP/dsync" bs=4096 count=1000 oflag=dsync status=none
	t1=$(date +%s.%N)
	awk -v a="$t0" -v b="$t1" 'BEGIN {printf "single thread write+fdatasync (dd bs=4096 oflag=dsync): %.0f/s\n", 1000/(b-a)}'
}

case "$MODE" in
memcaslap) memcaslap_mode ;;
rss) rss_mode ;;
fsync) fsync_mode ;;
esac
