#!/usr/bin/env bash
# bench-coldmount.sh: how long a new node takes to show a 100,000-file volume.
#
# Part of `make bench` (hack/bench.sh runs it with the local S3 up and its
# environment set). The volume s3://$BUCKET/cold-100k (100 directories of
# 1,000 small files) is made once through a tierfs mount and kept in the
# local S3 between runs: the first run spends about 12 minutes on it here
# (Swift takes about 140 small PUTs a second on 2 cores). Each run then
# mounts it on an empty cache dir and times `tierfs mount` until the first
# `ls` of the root returns, and until a walk of the whole tree does.
# Prints the medians and spreads; writes bench/results/coldmount.json.
set -euo pipefail

cd "$(dirname "$0")/.."
BUCKET=${BENCH_BUCKET:-tierfs-bench}
RUNS=${BENCH_RUNS:-3}
DIRS=${COLD_DIRS:-100}
PER_DIR=${COLD_FILES_PER_DIR:-1000}
PREFIX=cold-$((DIRS * PER_DIR / 1000))k
WORK=$(mktemp -d /var/tmp/tierfs-cold.XXXXXX)
OUT=bench/results
mkdir -p "$OUT"
cleanup() {
	mountpoint -q "$WORK/mnt" && fusermount3 -u "$WORK/mnt" || true
	rm -rf "$WORK"
}
trap cleanup EXIT
mkdir -p "$WORK/mnt"

if ! build/tierfsctl s3 head "s3://$BUCKET/$PREFIX/.tierfs/index.db" \
	>/dev/null 2>&1; then
	echo "cold mount: creating the $((DIRS * PER_DIR))-file volume" \
		"s3://$BUCKET/$PREFIX (once; kept for later runs)" >&2
	build/tierfs mount "s3://$BUCKET/$PREFIX" "$WORK/mnt" \
		--cache-dir "$WORK/make" --upload-delay 1s
	/usr/bin/python3 - "$WORK/mnt" "$DIRS" "$PER_DIR" <<'PY'
import os, sys
root, dirs, per = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
for d in range(dirs):
    os.mkdir(f"{root}/d{d:03}")
    for f in range(per):
        with open(f"{root}/d{d:03}/f{f:04}", "w") as fh:
            fh.write(f"{d}/{f}\n")
PY
	# unmount returns when every object and the index are in S3
	fusermount3 -u "$WORK/mnt"
	while pgrep -f "tierfs mount s3://$BUCKET/$PREFIX " >/dev/null; do
		sleep 1
	done
	rm -rf "$WORK/make"
fi

raw="$WORK/raw"
for i in $(seq 1 "$RUNS"); do
	rm -rf "$WORK/cache"
	t0=$(date +%s.%N)
	build/tierfs mount "s3://$BUCKET/$PREFIX" "$WORK/mnt" \
		--cache-dir "$WORK/cache"
	n=$(ls "$WORK/mnt" | wc -l)
	t1=$(date +%s.%N)
	files=$(find "$WORK/mnt" -type f | wc -l)
	t2=$(date +%s.%N)
	# the supervisor and its worker: the worker is the big one
	rss=$(ps -o rss= -p "$(pgrep -d, -f "tierfs mount s3://$BUCKET/$PREFIX ")" |
		sort -n | tail -1)
	fusermount3 -u "$WORK/mnt"
	while pgrep -f "tierfs mount s3://$BUCKET/$PREFIX " >/dev/null; do
		sleep 0.2
	done
	rec=$(grep -o 'reconciled with [0-9]* objects in [0-9]* ms' \
		"$WORK/cache/tierfs.log" | tail -1 || true)
	echo "run $i/$RUNS: $n entries in the root, $files files;" \
		"rss ${rss} KiB; ${rec:-no reconcile logged}" >&2
	echo "$t0 $t1 $t2 $n $files $rss ${rec:-none}" >>"$raw"
done

/usr/bin/python3 - "$raw" "$OUT/coldmount.json" "$PREFIX" <<'PY'
import json, statistics, sys
raw, out, prefix = sys.argv[1:]
ls_s, walk_s, rss, rec = [], [], [], []
for line in open(raw):
    f = line.split()
    t0, t1, t2 = float(f[0]), float(f[1]), float(f[2])
    ls_s.append(t1 - t0)
    walk_s.append(t2 - t0)
    rss.append(int(f[5]) / 1024)
    if "objects in" in line:
        rec.append(int(line.split("objects in")[1].split()[0]) / 1000)
files = int(open(raw).readline().split()[4])
print(f"\ncold mount of {prefix} ({files} files) on an empty cache dir "
      "(median of runs; spread = max-min)")
rows = [("mount to first ls of root", ls_s, "s"),
        ("mount to full tree walk", walk_s, "s"),
        ("background LIST reconcile", rec, "s"),
        ("daemon RSS after the walk", rss, "MiB")]
result = {"prefix": prefix, "files": files, "figures": {}}
for name, v, unit in rows:
    if not v:
        continue
    print(f"{name:<28}{statistics.median(v):>8.2f} {unit:<4} "
          f"spread {max(v) - min(v):.2f}")
    result["figures"][name] = {"unit": unit, "runs": v,
                               "median": statistics.median(v)}
print("DESIGN §8: about 1 s (the NFS baseline)")
json.dump(result, open(out, "w"), indent=2)
print(f"written {out}")
PY
