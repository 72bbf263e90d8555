#!/usr/bin/env bash
# s3-local.sh: runs a local S3 endpoint on 127.0.0.1 (OpenStack Swift + s3api/tempauth) for tierfs tests.
#
# Usage: hack/s3-local.sh start|stop|status|env
#   TIERFS_S3_DIR            data dir: configs, rings, device, logs, pids (default /var/tmp/tierfs-s3)
#   TIERFS_S3_PORT           S3 (proxy) port (default 8780)
#   TIERFS_S3_OBJ_PORT       object server port (default 6200)
#   TIERFS_S3_CONT_PORT      container server port (default 6201)
#   TIERFS_S3_ACCT_PORT      account server port (default 6202)
#   TIERFS_S3_MEMCACHE_PORT  memcached port (default 11711)
# Credentials: access key test:tester, secret testing, region us-east-1; use
# eval "$(hack/s3-local.sh env)". Clients must use path-style addressing.
# Needs root (servers drop to the swift user). The only file written outside
# the data dir is /etc/swift/swift.conf: [swift-hash] if it lacks one, and
# max_meta_value_length if it sets none.
set -euo pipefail

DIR=$(realpath -m "${TIERFS_S3_DIR:-/var/tmp/tierfs-s3}")
PORT=${TIERFS_S3_PORT:-8780}
OBJ_PORT=${TIERFS_S3_OBJ_PORT:-6200}
CONT_PORT=${TIERFS_S3_CONT_PORT:-6201}
ACCT_PORT=${TIERFS_S3_ACCT_PORT:-6202}
MC_PORT=${TIERFS_S3_MEMCACHE_PORT:-11711}
PY=/usr/bin/python3
[[ $DIR != *[[:space:]]* ]] || { echo "s3-local: TIERFS_S3_DIR must not contain spaces" >&2; exit 2; }
ETC=$DIR/etc RUN=$DIR/run LOG=$DIR/log DEVICES=$DIR/devices CACHE=$DIR/cache
# Start order; "updater" (swift-object-updater) retries container listing
# updates that the object server could not deliver in time (async pendings),
# once a minute: each sweep forks a child that burns about a second of CPU
# even with nothing pending, which every 5 s was a tenth of this
# 2-core machine, idle, and noise in every timing taken beside it.
# The proxy comes last, once the storage servers answer (see cmd_start).
COMPONENTS=(memcached account container object updater proxy)
START_TIMEOUT=60

die() { echo "s3-local: $*" >&2; exit 1; }
say() { echo "s3-local: $*"; }

# cmdline NAME: the command that runs component NAME (also used to recognise it).
cmdline() {
	case $1 in
	memcached) echo "/usr/bin/memcached -u memcache -l 127.0.0.1 -p $MC_PORT -U 0 -m 64 -c 1024" ;;
	updater) echo "/usr/bin/swift-object-updater $ETC/object-server.conf --verbose" ;;
	*) echo "/usr/bin/swift-$1-server $ETC/$1-server.conf --verbose" ;;
	esac
}

# pid_of NAME: prints the pid of our running NAME, or fails. A pid file only
# counts while its process still has our command line (stale/reused pids).
pid_of() {
	local pid
	pid=$(cat "$RUN/$1.pid" 2>/dev/null) && [ -n "$pid" ] || return 1
	tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline" | grep -qF -- "$(cmdline "$1") " || return 1
	echo "$pid"
}

# orphans: swift processes of this data dir that no pid file knows about.
orphans() {
	local f cmd
	for f in /proc/[0-9]*/cmdline; do
		cmd=$(tr '\0' ' ' 2>/dev/null <"$f") || continue
		[[ $cmd == *" /usr/bin/swift-"*" $ETC/"* ]] || continue
		f=${f#/proc/}; echo "${f%/cmdline}"
	done
}

# spawn NAME: runs NAME detached in its own session (pgid = pid), logging to $LOG/NAME.log.
spawn() {
	[ -f "$LOG/$1.log" ] && mv -f "$LOG/$1.log" "$LOG/$1.log.1"
	# shellcheck disable=SC2046 # cmdline holds no globs and data dirs no spaces
	setsid nohup env -u PYTHONPATH -u PYTHONHOME $(cmdline "$1") >"$LOG/$1.log" 2>&1 </dev/null 9>&- &
	echo $! >"$RUN/$1.pid"
}

write_swift_conf() {
	grep -qs '^\[swift-hash\]' /etc/swift/swift.conf && return 0
	mkdir -p /etc/swift
	printf '\n[swift-hash]\nswift_hash_path_suffix = changeme\nswift_hash_path_prefix = changeme\n' \
		>>/etc/swift/swift.conf
}

# S3 gives an object 2 KiB of user metadata, which one header (tierfs's
# x-amz-meta-xattr) may take nearly all of; Swift's default is 256 bytes a
# value. Swift reads its constraints from /etc/swift/swift.conf alone.
write_swift_constraints() {
	local conf=/etc/swift/swift.conf
	grep -qs '^max_meta_value_length' "$conf" && return 0
	if grep -qs '^\[swift-constraints\]' "$conf"; then
		sed -i '/^\[swift-constraints\]/a max_meta_value_length = 2048' "$conf"
	else
		printf '\n[swift-constraints]\nmax_meta_value_length = 2048\n' >>"$conf"
	fi
}

# storage_conf TYPE PORT WORKERS [extra lines]: account/container/object server config.
storage_conf() {
	local type=$1 port=$2 workers=$3; shift 3
	cat >"$ETC/$type-server.conf" <<-EOF
	[DEFAULT]
	bind_ip = 127.0.0.1
	bind_port = $port
	workers = $workers
	user = swift
	swift_dir = $ETC
	devices = $DEVICES
	mount_check = false
	recon_cache_path = $CACHE

	[pipeline:main]
	pipeline = healthcheck $type-server

	[filter:healthcheck]
	use = egg:swift#healthcheck

	[app:$type-server]
	use = egg:swift#$type
	log_requests = false
	EOF
	printf '%s\n' "$@" >>"$ETC/$type-server.conf"
}

write_configs() {
	storage_conf account "$ACCT_PORT" 1
	storage_conf container "$CONT_PORT" 1
	# 1 MiB I/O chunks; GETs keep objects in the page cache; a PUT waits (up to
	# 10 s) for its container listing update so listings read-after-write.
	storage_conf object "$OBJ_PORT" 2 \
		'network_chunk_size = 1048576' 'disk_chunk_size = 1048576' \
		'keep_cache_private = true' 'keep_cache_size = 2147483648' \
		'node_timeout = 10' 'container_update_timeout = 10' '' \
		'[object-updater]' 'interval = 60' 'node_timeout = 10' 'log_level = WARNING'
	# s3api must precede the auth middleware, and slo must follow auth for
	# multipart uploads (s3api checks this at startup); copy handles
	# UploadPartCopy/CopyObject; versioned_writes would be auto-inserted anyway.
	cat >"$ETC/proxy-server.conf" <<-EOF
	[DEFAULT]
	bind_ip = 127.0.0.1
	bind_port = $PORT
	workers = 2
	user = swift
	swift_dir = $ETC

	[pipeline:main]
	pipeline = catch_errors gatekeeper healthcheck proxy-logging cache listing_formats s3api tempauth copy bulk slo dlo versioned_writes proxy-logging proxy-server

	[app:proxy-server]
	use = egg:swift#proxy
	account_autocreate = true
	object_chunk_size = 1048576
	client_chunk_size = 1048576
	node_timeout = 60
	# Each ring has one node, so shutting a node out after errors (default:
	# more than 10 in 60 s) never sends a request elsewhere; it only turns a
	# blip into a minute of 503s ("Please reduce your request rate") for
	# every bucket. Forget errors after one quiet second instead.
	error_suppression_interval = 1

	[filter:s3api]
	use = egg:swift#s3api
	location = us-east-1
	s3_acl = false
	allow_multipart_uploads = true
	max_upload_part_num = 10000
	# BUCKET.localhost:PORT is a virtual-hosted-style request
	storage_domain = localhost

	[filter:tempauth]
	use = egg:swift#tempauth
	user_test_tester = testing .admin

	[filter:slo]
	use = egg:swift#slo
	max_manifest_segments = 10000
	max_manifest_size = 16777216
	concurrency = 8

	[filter:cache]
	use = egg:swift#memcache
	memcache_servers = 127.0.0.1:$MC_PORT
	EOF
	local f
	for f in catch_errors gatekeeper healthcheck proxy_logging listing_formats copy bulk dlo versioned_writes; do
		printf '\n[filter:%s]\nuse = egg:swift#%s\n' "${f/proxy_logging/proxy-logging}" "$f"
	done >>"$ETC/proxy-server.conf"
}

# write_rings: single-replica rings (part power 10, one device d1), rebuilt
# when ports change; with one device, placement is the same either way.
write_rings() {
	local stamp="$ACCT_PORT $CONT_PORT $OBJ_PORT"
	[ "$(cat "$ETC/rings.stamp" 2>/dev/null)" = "$stamp" ] && return 0
	say "building rings in $ETC"
	"$PY" -I - "$ETC" "$ACCT_PORT" "$CONT_PORT" "$OBJ_PORT" <<-'EOF'
	import sys
	from swift.common.ring import RingBuilder
	etc = sys.argv[1]
	for name, port in zip(("account", "container", "object"), sys.argv[2:5]):
	    b = RingBuilder(10, 1, 1)  # part power, replicas, min_part_hours
	    b.add_dev({"id": 0, "region": 1, "zone": 1, "ip": "127.0.0.1",
	               "port": int(port), "device": "d1", "weight": 1, "meta": ""})
	    b.rebalance()
	    b.save(f"{etc}/{name}.builder")
	    b.get_ring().save(f"{etc}/{name}.ring.gz")
	EOF
	echo "$stamp" >"$ETC/rings.stamp"
}

# s3_check TIMEOUT [storage]: waits until memcached and the storage servers
# answer and, unless "storage" is given, until signed S3 requests for the
# account (ListBuckets) and for a bucket (HEAD, 404 counts: the container
# server answered) succeed; prints the last error on timeout.
s3_check() {
	"$PY" -I - "$1" "${2:-s3}" "$PORT" "$MC_PORT" "$ACCT_PORT" "$CONT_PORT" "$OBJ_PORT" <<-'EOF'
	import os, socket, sys, time, urllib.request
	for k in list(os.environ):  # no proxies, profiles or CA bundles
	    if k.lower().endswith("_proxy") or k.startswith("AWS_"):
	        del os.environ[k]
	import boto3, botocore.config, botocore.exceptions
	deadline = time.time() + float(sys.argv[1])
	what, port, mc_port, storage_ports = sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5:]
	cfg = botocore.config.Config(retries={"max_attempts": 1}, connect_timeout=2, read_timeout=10)
	s3 = boto3.client("s3", endpoint_url=f"http://127.0.0.1:{port}", region_name="us-east-1",
	                  aws_access_key_id="test:tester", aws_secret_access_key="testing", config=cfg)
	def head_bucket():
	    try:
	        s3.head_bucket(Bucket="s3-local-ready-probe")
	    except botocore.exceptions.ClientError as e:
	        if e.response["Error"]["Code"] not in ("404", "NoSuchBucket"):
	            raise
	while True:
	    try:
	        socket.create_connection(("127.0.0.1", int(mc_port)), timeout=2).close()
	        for p in storage_ports:
	            urllib.request.urlopen(f"http://127.0.0.1:{p}/healthcheck", timeout=2).read()
	        if what != "storage":
	            s3.list_buckets()
	            head_bucket()
	        sys.exit(0)
	    except Exception as e:
	        err = f"{type(e).__name__}: {e}"
	    if time.time() >= deadline:
	        sys.exit(f"s3-local: S3 endpoint not ready: {err}")
	    time.sleep(0.2)
	EOF
}

check_ports_free() {
	local p
	for p in "$PORT" "$OBJ_PORT" "$CONT_PORT" "$ACCT_PORT" "$MC_PORT"; do
		if (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
			die "port $p is already in use (another instance with a different TIERFS_S3_DIR?)"
		fi
	done
}

# lock: serialises start/stop of one data dir (parallel test runners).
lock() {
	mkdir -p "$DIR"
	exec 9>"$DIR/.lock"
	flock -w 120 9 || die "timed out waiting for $DIR/.lock"
}

cmd_start() {
	local c running=1 t0=$SECONDS
	for c in "${COMPONENTS[@]}"; do pid_of "$c" >/dev/null || running=0; done
	if [ $running -eq 1 ] && s3_check 5 2>/dev/null; then
		say "already running on http://127.0.0.1:$PORT (data: $DIR)"
		return 0
	fi
	cmd_stop >/dev/null  # clean up a partial or stale instance
	check_ports_free
	mkdir -p "$ETC" "$RUN" "$LOG" "$DEVICES/d1" "$CACHE"
	[ "$(stat -c %U "$DEVICES/d1")" = swift ] || chown -R swift:swift "$DEVICES"
	chown swift:swift "$CACHE"
	write_swift_conf
	write_swift_constraints
	write_configs
	write_rings
	# Clients retrying through a restart reach the proxy the moment it
	# listens; were a storage server not listening yet, each of their
	# requests would be an error against it. So the proxy starts last.
	for c in "${COMPONENTS[@]}"; do [ "$c" = proxy ] || spawn "$c"; done
	if ! s3_check "$START_TIMEOUT" storage || ! { spawn proxy && s3_check "$START_TIMEOUT"; }; then
		for c in "${COMPONENTS[@]}"; do
			echo "--- $c ($(pid_of "$c" >/dev/null && echo running || echo NOT running)): tail of $LOG/$c.log" >&2
			tail -n 15 "$LOG/$c.log" >&2 || true
		done
		cmd_stop >&2
		die "not ready after ${START_TIMEOUT}s, start aborted (logs in $LOG)"
	fi
	say "ready on http://127.0.0.1:$PORT after $((SECONDS - t0))s (data: $DIR)"
}

# signal_all SIG PID...: signals each pid's process group (or the pid if it
# leads none); fails if none of them exists any more.
signal_all() {
	local sig=$1 pid found=1; shift
	for pid; do
		kill "-$sig" -- "-$pid" 2>/dev/null || kill "-$sig" "$pid" 2>/dev/null || continue
		found=0
	done
	return $found
}

cmd_stop() {
	local c pid pids=() _
	for c in "${COMPONENTS[@]}"; do
		if pid=$(pid_of "$c"); then pids+=("$pid"); fi
	done
	mapfile -t -O "${#pids[@]}" pids < <(orphans)
	rm -f "$RUN"/*.pid
	if [ ${#pids[@]} -eq 0 ]; then
		say "not running (data: $DIR)"
		return 0
	fi
	# Servers lead their own process group: signal the group to reach workers.
	signal_all TERM "${pids[@]}"
	for _ in $(seq 50); do
		signal_all 0 "${pids[@]}" || { say "stopped (data kept in $DIR)"; return 0; }
		sleep 0.2
	done
	signal_all KILL "${pids[@]}" || true
	say "killed after 10s (data kept in $DIR)"
}

cmd_status() {
	local c pid rc=0
	for c in "${COMPONENTS[@]}"; do
		if pid=$(pid_of "$c"); then echo "$c: running (pid $pid)"; else echo "$c: stopped"; rc=1; fi
	done
	if [ $rc -eq 0 ] && s3_check 5; then echo "s3: ok (http://127.0.0.1:$PORT, data: $DIR)"; return 0; fi
	echo "s3: not available"
	return 1
}

cmd_env() {
	printf 'export %s\n' "AWS_ENDPOINT_URL=http://127.0.0.1:$PORT" AWS_REGION=us-east-1 \
		AWS_ACCESS_KEY_ID=test:tester AWS_SECRET_ACCESS_KEY=testing
}

case "${1:-}" in
start) [ "$(id -u)" -eq 0 ] || die "start needs root"; lock; cmd_start ;;
stop) if [ -d "$DIR" ]; then lock; cmd_stop; else say "not running (no $DIR)"; fi ;;
status) cmd_status ;;
env) cmd_env ;;
*) echo "usage: $0 start|stop|status|env" >&2; exit 2 ;;
esac
