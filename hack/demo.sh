#!/usr/bin/env bash
# demo.sh: `make demo`, tierfs end to end against the local S3 (OpenStack Swift).
#
# Starts the local S3, mounts a volume with `tierfs mount` the way a node
# will, runs real work in it (files, SQLite in WAL mode, git, fio), unmounts
# (everything goes to S3), shows the objects that landed, mounts the same
# volume again on an empty cache dir as a new node would and checks it, then
# measures raw S3 throughput and cleans up. The CSI plugin that will drive
# the mounts comes with issue 5.
set -euo pipefail

cd "$(dirname "$0")/.."
CTL=build/tierfsctl
BUCKET=${TIERFS_DEMO_BUCKET:-tierfs-demo}
WORK=$(mktemp -d /var/tmp/tierfs-demo.XXXXXX)
started_s3=0

cleanup() {
	for m in "$WORK"/mnt*; do
		mountpoint -q "$m" 2>/dev/null && umount "$m"
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

# Waits for the daemon serving cache dir $1 to exit (its final upload).
wait_daemon() {
	while pgrep -f -- "--cache-dir $1( |$)" >/dev/null; do sleep 0.2; done
}

VOL="s3://$BUCKET/$PREFIX/home/jovyan"
step "mounting $VOL (tierfs mount, as the node plugin will)"
mkdir -p "$WORK/mnt1"
build/tierfs mount "$VOL" "$WORK/mnt1" --cache-dir "$WORK/cache1" \
	--capacity 2G --uid 1000 --gid 100
df -h "$WORK/mnt1"
HOME_DIR=$WORK/mnt1

step "real work in the home directory: files, SQLite (WAL), git, fio"
mkdir -p "$HOME_DIR/notebooks" "$HOME_DIR/data"
cp "$WORK/hello.py" "$HOME_DIR/notebooks/"
cp "$WORK/data.bin" "$HOME_DIR/data/"
/usr/bin/python3 - "$HOME_DIR/notebooks/results.db" <<'PY'
import sqlite3, sys
c = sqlite3.connect(sys.argv[1])
c.execute("PRAGMA journal_mode=WAL")
c.execute("CREATE TABLE runs (id INTEGER PRIMARY KEY, score REAL)")
for i in range(1000):
    c.execute("INSERT INTO runs (score) VALUES (?)", (i / 7,))
    if i % 100 == 0:
        c.commit()
c.commit()
print("sqlite: 1000 rows,", c.execute("PRAGMA integrity_check").fetchone()[0])
c.close()
PY
(
	cd "$HOME_DIR" && git init -q project && cd project &&
		cp ../notebooks/hello.py . && git add . &&
		git -c user.name=demo -c user.email=demo@tierfs commit -qm first &&
		echo "git: $(git log --oneline | wc -l) commit, fsck $(git fsck 2>&1 | wc -l) problems"
)
(cd "$HOME_DIR" && fio --name=randrw --rw=randrw --bs=4k --direct=1 \
	--ioengine=libaio --iodepth=16 --numjobs=1 --size=32M --runtime=5 \
	--time_based --group_reporting | grep -E "^ *(read|write):")
rm -f "$HOME_DIR"/randrw.*

step "unmounting: tierfs uploads what is left, then exits"
umount "$WORK/mnt1"
wait_daemon "$WORK/cache1"
$CTL s3 ls -r "$VOL/" | grep -v '/project/.git/' | head -20
echo "($($CTL s3 ls -r "$VOL/" | wc -l) objects in all)"

step "a new node: the same volume on an empty cache dir"
mkdir -p "$WORK/mnt2"
build/tierfs mount "$VOL" "$WORK/mnt2" --cache-dir "$WORK/cache2"
cmp "$WORK/data.bin" "$WORK/mnt2/data/data.bin"
/usr/bin/python3 -c "
import sqlite3, sys
c = sqlite3.connect(sys.argv[1])
print('sqlite on the new node:', c.execute('SELECT count(*) FROM runs').fetchone()[0],
      'rows,', c.execute('PRAGMA integrity_check').fetchone()[0])
" "$WORK/mnt2/notebooks/results.db"
git -C "$WORK/mnt2/project" fsck && echo "git fsck on the new node: clean"
ls -l "$WORK/mnt2/notebooks"
umount "$WORK/mnt2"
wait_daemon "$WORK/cache2"

step "raw S3 throughput (tierfsctl s3 bench, 256 MiB, 8 threads)"
$CTL s3 bench "s3://$BUCKET/$PREFIX/bench.bin" --size 256M --threads 8

step "cleaning up"
$CTL s3 rm -r "s3://$BUCKET/$PREFIX/"
left=$($CTL s3 ls -r "s3://$BUCKET/$PREFIX/" | wc -l)
echo "objects left under the prefix: $left"
[ "$left" -eq 0 ]
echo
echo "demo finished: a volume mounted, used, moved to a new node, and cleaned up"
