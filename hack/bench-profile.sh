#!/usr/bin/env bash
# bench-profile.sh: where a tierfs worker spends one `make bench` workload.
#
# Usage: hack/bench-profile.sh WORKLOAD [s3|local]
#   WORKLOAD: fio (4k randrw qd64 x 2 jobs, direct, cache hit), create
#   (create/stat/unlink of 10,000 4 KiB files), sqlite-delete, sqlite-wal
#   (SQLite commits), grail (cold reads, 64 KiB chunks, 8 readers), coldread
#   (cold read of 8 x 64 MiB files)
# Mounts tierfs (--durability s3 by default) on a fresh prefix, runs the
# workload once to warm up where that matters, then again under
#   perf record -g --call-graph dwarf -F 499 -p WORKER   (on-CPU)
#   strace -c -f -p WORKER                              (syscalls, waits)
# in turn, and prints the top of each. Output in $OUT (default
# /var/tmp/tierfs-profile/WORKLOAD-DURABILITY). Needs the local S3 up.
set -euo pipefail

cd "$(dirname "$0")/.."
W=${1:?usage: hack/bench-profile.sh WORKLOAD [s3|local]}
DUR=${2:-s3}
BUCKET=${BENCH_BUCKET:-tierfs-bench}
OUT=${OUT:-/var/tmp/tierfs-profile/$W-$DUR}
OPS="/usr/bin/python3 tests/bench/ops.py"
eval "$(hack/s3-local.sh env)"
build/tierfsctl s3 mb "s3://$BUCKET" >/dev/null
rm -rf "$OUT"
mkdir -p "$OUT/mnt"
PREFIX=profile-$W-$DUR-$$
cleanup() {
	build/tierfs unmount "$OUT/mnt" --cache-dir "$OUT/cache" >/dev/null 2>&1 ||
		umount -l "$OUT/mnt" 2>/dev/null || true
	/usr/bin/python3 - "$BUCKET" "$PREFIX/" <<'PY' || true
import os, sys, boto3
s3 = boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL"])
b, p = sys.argv[1:]
for page in s3.get_paginator("list_objects_v2").paginate(Bucket=b, Prefix=p):
    objs = [{"Key": o["Key"]} for o in page.get("Contents", [])]
    if objs:
        s3.delete_objects(Bucket=b, Delete={"Objects": objs})
PY
}
trap cleanup EXIT

# mount_fresh PREFIX: an empty cache dir on PREFIX (each setup of a
# writing workload takes a new PREFIX: what an earlier setup left in S3
# would otherwise be read back cold)
N=0
mount_fresh() {
	build/tierfs unmount "$OUT/mnt" --cache-dir "$OUT/cache" >/dev/null 2>&1 || true
	rm -rf "$OUT/cache"
	build/tierfs mount "s3://$BUCKET/$1" "$OUT/mnt" --cache-dir "$OUT/cache" \
		--durability "$DUR"
	WORKER=$(sed -n 's/^worker=//p' "$OUT/cache/state")
}

# setup: what comes before the measured part; run: the measured part
case $W in
fio)
	setup() {
		N=$((N + 1))
		mount_fresh "$PREFIX/$N"
		fio --name=randrw --directory="$OUT/mnt" --rw=randrw --bs=4k --direct=1 \
			--ioengine=libaio --iodepth=64 --numjobs=2 --size=64m \
			--create_only=1 >/dev/null
		sleep 5
	}
	run() {
		fio --name=randrw --directory="$OUT/mnt" --rw=randrw --bs=4k --direct=1 \
			--ioengine=libaio --iodepth=64 --numjobs=2 --size=64m \
			--runtime=8 --time_based --group_reporting | grep -E 'IOPS|clat.*avg' | head -4
	}
	;;
create)
	setup() { N=$((N + 1)); mount_fresh "$PREFIX/$N"; }
	run() { $OPS meta "$OUT/mnt/m$RANDOM" 10000 15; }
	;;
sqlite-delete | sqlite-wal)
	setup() { N=$((N + 1)); mount_fresh "$PREFIX/$N"; }
	run() { $OPS sqlite "$OUT/mnt/db$RANDOM.sqlite" "${W#sqlite-}" 8 100000; }
	;;
grail)
	setup() { mount_fresh datasets/grail-256m; }
	run() {
		f=$((RANDOM % 15))
		fio --name=grail --filename="$OUT/mnt/f$(printf %02d $f)" --rw=read --bs=64k \
			--ioengine=psync --numjobs=8 --size=32m --offset_increment=32m --thread \
			--runtime=8 --readonly --invalidate=1 --group_reporting | grep -E 'READ:'
	}
	;;
coldread)
	setup() {
		N=$((N + 1))
		mount_fresh "$PREFIX/$N"
		$OPS write "$OUT/mnt/c" 8 64 >/dev/null
		mount_fresh "$PREFIX/$N"
	}
	run() { $OPS read "$OUT/mnt/c" 8 64; }
	;;
*)
	echo "bench-profile: unknown workload $W" >&2
	exit 2
	;;
esac

PROXY_LOG=${TIERFS_S3_DIR:-/var/tmp/tierfs-s3}/log/proxy.log
echo "== $W, durability $DUR: plain, and the S3 requests it made" >&2
setup
before=$(wc -l <"$PROXY_LOG" 2>/dev/null || echo 0)
run | tee "$OUT/plain.txt"
# the local S3's own log: requests under the prefix, by method, with the
# seconds Swift spent on them
tail -n +"$((before + 1))" "$PROXY_LOG" 2>/dev/null | grep -F "/$BUCKET/${PREFIX}" |
	awk '{n[$5]++; t[$5] += $(NF-1) - $(NF-2)} END {for (m in n) printf "S3 %-7s %6d requests, %7.2f s in Swift\n", m, n[m], t[m]}' |
	tee "$OUT/s3-requests.txt" || true

echo "== $W: perf record (on-CPU, worker $WORKER)" >&2
setup
perf record -q -g --call-graph dwarf,16384 -F 499 -p "$WORKER" -o "$OUT/perf.data" \
	2>"$OUT/perf-record.err" &
PERF=$!
sleep 1
run | tee "$OUT/perf-run.txt"
kill -INT "$PERF"
wait "$PERF" || true
perf report -i "$OUT/perf.data" --no-children --sort dso,symbol --stdio -g none \
	2>/dev/null | grep -v '^#' | grep -E '^ +[0-9]' | head -40 >"$OUT/perf-top.txt" || true
perf report -i "$OUT/perf.data" --children --sort symbol --stdio -g none \
	2>/dev/null | grep -v '^#' | grep -E '^ +[0-9]' | head -40 >"$OUT/perf-children.txt" || true
echo "-- top self (dso, symbol):"
head -25 "$OUT/perf-top.txt"
echo "-- top with children:"
head -25 "$OUT/perf-children.txt"

echo "== $W: strace -c (syscalls and waits, all worker threads)" >&2
setup
strace -c -f -w -p "$WORKER" -o "$OUT/strace.txt" &
ST=$!
sleep 1
run | tee "$OUT/strace-run.txt"
kill -INT "$ST"
wait "$ST" || true
head -25 "$OUT/strace.txt"
echo "written $OUT"
