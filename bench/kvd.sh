# kvd.sh: what the benchmark scripts (compare.sh, store.sh, bursts.sh) share
# about the kvd they start. Sourced, not run.

# kvd_config SYNC [EXTRA [BUCKET_EXTRA]]: the benchmarks' kvd config, on
# stdout: an anonymous bucket, throttling on (reserved 0) but not binding
# (node capacity 10^9 units/s). EXTRA is config fields ending in a comma;
# BUCKET_EXTRA bucket fields starting with one. A BUCKET_EXTRA that names
# "reserved" replaces the default (e.g. ', "reserved": "unlimited"': the
# throttle's check returns at its first test, as for throttling off).
kvd_config() {
	local reserved=', "reserved": 0'
	case "${3:-}" in *'"reserved"'*) reserved='' ;; esac
	cat <<EOF_CONFIG
{ ${2:-} "node_capacity": 1000000000, "wal_sync": $1, "anonymous_bucket": "default",
  "max_connections_per_bucket": 10000, "buckets": [{"name": "default"$reserved ${3:-}}] }
EOF_CONFIG
}

# wait_port PORT [TRIES]: waits until 127.0.0.1:PORT accepts a connection,
# looking every 50 ms, TRIES times (default 200: 10 s); fails after that.
wait_port() {
	local i
	for ((i = 0; i < ${2:-200}; i++)); do
		(exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
		sleep 0.05
	done
	return 1
}
