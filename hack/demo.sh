#!/usr/bin/env bash
# demo.sh: `make demo`, tierfs end to end against the local S3 (OpenStack Swift).
#
# Today the filesystem and CSI layers are still to come, so the demo drives
# the S3 client through tierfsctl: it starts the local S3, writes objects the
# way tierfs lays them out (metadata headers, directory markers, odd names,
# a multipart file), reads them back and checks every byte, shows what
# landed in S3, measures raw throughput, and cleans up.
set -euo pipefail

cd "$(dirname "$0")/.."
CTL=build/tierfsctl
BUCKET=${TIERFS_DEMO_BUCKET:-tierfs-demo}
WORK=$(mktemp -d /var/tmp/tierfs-demo.XXXXXX)
started_s3=0

cleanup() {
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

step "raw S3 throughput (tierfsctl s3 bench, 256 MiB, 8 threads)"
$CTL s3 bench "s3://$BUCKET/$PREFIX/bench.bin" --size 256M --threads 8

step "cleaning up"
$CTL s3 rm -r "s3://$BUCKET/$PREFIX/"
left=$($CTL s3 ls -r "s3://$BUCKET/$PREFIX/" | wc -l)
echo "objects left under the prefix: $left"
[ "$left" -eq 0 ]
echo
echo "demo finished: the S3 layer works end to end"
