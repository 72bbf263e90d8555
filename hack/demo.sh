#!/usr/bin/env bash
# demo.sh: `make demo`, tierfs end to end against the local S3 (OpenStack Swift).
#
# Starts the local S3 and shows the S3 layer (s3fs-compatible objects,
# multipart, byte-exact reads). Then the main job, through the CSI socket
# of `tierfs-csi --mode all` (hack/demo-csi.py plays the provisioner and
# kubelet): create a 10Gi volume, publish, stage and publish it into a pod
# directory, real work in it (files, SQLite, git, fio), stats, live
# expansion, unpublish and unstage (everything reaches S3), a snapshot, the
# objects that landed, a restore of the snapshot checked on a fresh cache,
# and the deletes. Ends with raw S3 throughput and the cleanup.
set -euo pipefail

cd "$(dirname "$0")/.."
CTL=build/tierfsctl
BUCKET=${TIERFS_DEMO_BUCKET:-tierfs-demo}
WORK=$(mktemp -d /var/tmp/tierfs-demo.XXXXXX)
started_s3=0

csi_pid=
cleanup() {
	if [ -n "$csi_pid" ]; then kill -TERM "$csi_pid" 2>/dev/null && wait "$csi_pid" || true; fi
	# anything a failed run left mounted under $WORK
	{ grep -o " $WORK[^ ]*" /proc/self/mounts || true; } | sort -r | while read -r m; do
		umount -l "$m" 2>/dev/null || true
	done
	rm -rf "$WORK"
	if [ "$started_s3" -eq 1 ]; then
		hack/s3-local.sh stop >/dev/null 2>&1 || true
	fi
}
trap cleanup EXIT

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

step "starting the local S3 (Swift + s3api)"
if ! hack/s3-local.sh status >/dev/null 2>&1; then
	hack/s3-local.sh start
	started_s3=1
fi
eval "$(hack/s3-local.sh env)"
echo "endpoint $AWS_ENDPOINT_URL, region $AWS_REGION"

step "creating bucket $BUCKET"
$CTL s3 mb "s3://$BUCKET"

PREFIX=demo-$(date +%s)
now=$(date +%s).000000000
step "writing a volume's worth of objects under s3://$BUCKET/$PREFIX/"
printf 'print("hello from tierfs")\n' >"$WORK/hello.py"
: >"$WORK/empty"
head -c 64M /dev/urandom >"$WORK/data.bin"
$CTL s3 put "$WORK/empty" "s3://$BUCKET/$PREFIX/notebooks/" \
	--content-type application/x-directory --meta mode=16877 \
	--meta uid=1000 --meta gid=100 --meta mtime="$now" >/dev/null
$CTL s3 put "$WORK/hello.py" "s3://$BUCKET/$PREFIX/notebooks/hello.py" \
	--content-type text/x-python --meta mode=33188 --meta uid=1000 \
	--meta gid=100 --meta mtime="$now" >/dev/null
$CTL s3 put "$WORK/hello.py" "s3://$BUCKET/$PREFIX/odd names/ünï cødé+%=~.py" \
	--meta mode=33188 >/dev/null
t0=$(date +%s.%N)
etag=$($CTL s3 put "$WORK/data.bin" "s3://$BUCKET/$PREFIX/data/data.bin" \
	--meta mode=33188)
t1=$(date +%s.%N)
awk -v a="$t0" -v b="$t1" -v e="$etag" \
	'BEGIN { printf "data.bin: 64 MiB in %.2f s, multipart ETag %s\n", b - a, e }'

step "what landed in S3"
$CTL s3 ls -r "s3://$BUCKET/$PREFIX/"
echo
$CTL s3 head "s3://$BUCKET/$PREFIX/notebooks/hello.py"

step "reading everything back and comparing bytes"
$CTL s3 get "s3://$BUCKET/$PREFIX/data/data.bin" "$WORK/data.back"
$CTL s3 get "s3://$BUCKET/$PREFIX/odd names/ünï cødé+%=~.py" "$WORK/odd.back"
cmp "$WORK/data.bin" "$WORK/data.back"
cmp "$WORK/hello.py" "$WORK/odd.back"
$CTL s3 get "s3://$BUCKET/$PREFIX/notebooks/hello.py" - | /usr/bin/python3 -
echo "all bytes match"

step "starting tierfs-csi --mode all on $WORK/csi.sock (as a CSI node + controller)"
build/tierfs-csi --mode all --endpoint "unix://$WORK/csi.sock" \
	--node-id demo-node --cache-root "$WORK/csi-cache" \
	--list-bucket "$BUCKET" 2>"$WORK/csi.log" &
csi_pid=$!
for _ in $(seq 100); do [ -S "$WORK/csi.sock" ] && break; sleep 0.1; done
[ -S "$WORK/csi.sock" ] || { cat "$WORK/csi.log"; exit 1; }
echo "tierfs-csi pid $csi_pid; driver $(grep -o 'driver [^,]*' "$WORK/csi.log")"

# the volume's whole life, through the socket (hack/demo-csi.py)
/usr/bin/python3 hack/demo-csi.py "$WORK/csi.sock" "$BUCKET" "$WORK"

step "stopping tierfs-csi (SIGTERM); its log, one line per call"
kill -TERM "$csi_pid"
wait "$csi_pid"
csi_pid=
grep -c ' /csi.v1.' "$WORK/csi.log" | sed 's/$/ calls logged, e.g.:/'
grep ' /csi.v1.' "$WORK/csi.log" | grep -E 'CreateVolume|NodeStage|NodeUnstage|CreateSnapshot' | head -6

step "raw S3 throughput (tierfsctl s3 bench, 256 MiB, 8 threads)"
$CTL s3 bench "s3://$BUCKET/$PREFIX/bench.bin" --size 256M --threads 8

step "cleaning up"
$CTL s3 rm -r "s3://$BUCKET/$PREFIX/"
left=$($CTL s3 ls -r "s3://$BUCKET/$PREFIX/" | wc -l)
echo "objects left under the prefix: $left"
[ "$left" -eq 0 ]
echo
echo "demo finished: a volume created, staged, used, snapshotted, restored and deleted through CSI"
