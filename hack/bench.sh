#!/usr/bin/env bash
# bench.sh: `make bench`, raw S3 throughput of tierfsctl beside boto3, same run.
#
# Starts the local S3, runs `tierfsctl s3 bench` and the boto3 peer on the
# same object size and thread count, alternating, RUNS times each, and
# prints each figure's median with its spread and the tierfs/boto3 ratio.
# Results also go to bench/results/s3.json. Then hack/bench-coldmount.sh
# times a new node's mount of a 100,000-file volume. The other filesystem
# benchmarks of DESIGN §8 join with issue 6.
set -euo pipefail

cd "$(dirname "$0")/.."
SIZE=${BENCH_SIZE:-1G}
THREADS=${BENCH_THREADS:-8}
RUNS=${BENCH_RUNS:-3}
BUCKET=${BENCH_BUCKET:-tierfs-bench}
OUT=bench/results
mkdir -p "$OUT"
started_s3=0
trap '[ "$started_s3" -eq 1 ] && hack/s3-local.sh stop >/dev/null 2>&1 || true' EXIT

if ! hack/s3-local.sh status >/dev/null 2>&1; then
	hack/s3-local.sh start
	started_s3=1
fi
eval "$(hack/s3-local.sh env)"
build/tierfsctl s3 mb "s3://$BUCKET"

raw=$(mktemp)
for i in $(seq 1 "$RUNS"); do
	echo "run $i/$RUNS: tierfsctl" >&2
	build/tierfsctl s3 bench "s3://$BUCKET/bench-tierfs" --size "$SIZE" \
		--threads "$THREADS" | sed 's/^/tierfs /' >>"$raw"
	echo "run $i/$RUNS: boto3" >&2
	/usr/bin/python3 tests/bench/s3_boto3.py "s3://$BUCKET/bench-boto3" \
		--size "$SIZE" --threads "$THREADS" | sed 's/^/boto3 /' >>"$raw"
done

/usr/bin/python3 - "$raw" "$OUT/s3.json" "$SIZE" "$THREADS" <<'PY'
import json, statistics, sys
raw, out, size, threads = sys.argv[1:]
data = {}
for line in open(raw):
    who, metric, rest = line.split(None, 2)
    if metric in ("put:", "get:", "small-put:"):
        data.setdefault(metric[:-1], {}).setdefault(who, []).append(float(rest.split()[0]))
print(f"\nraw S3, {size} object, {threads} threads (median of runs; spread = max-min)")
print(f"{'figure':<12}{'tierfs':>12}{'boto3':>12}{'ratio':>9}  spread tierfs / boto3")
result = {"size": size, "threads": int(threads), "figures": {}}
for metric, unit, better in (("put", "MiB/s", max), ("get", "MiB/s", max), ("small-put", "ms", min)):
    t, b = data[metric]["tierfs"], data[metric]["boto3"]
    mt, mb = statistics.median(t), statistics.median(b)
    ratio = mt / mb if better is max else mb / mt
    print(f"{metric:<12}{mt:>8.1f} {unit:<5}{mb:>6.1f} {unit:<5}{ratio:>6.2f}x  "
          f"{max(t) - min(t):.1f} / {max(b) - min(b):.1f}")
    result["figures"][metric] = {"unit": unit, "tierfs": t, "boto3": b,
                                 "tierfs_median": mt, "boto3_median": mb,
                                 "ratio_vs_boto3": ratio}
print("(ratio > 1 means tierfs is better)")
json.dump(result, open(out, "w"), indent=2)
print(f"written {out}")
PY
rm -f "$raw"

# a new node mounting a 100,000-file volume (DESIGN §8: about 1 s)
hack/bench-coldmount.sh

# what a crash costs: the stall per worker restart, and recovery with
# 1 GiB dirty (issue 4)
/usr/bin/python3 hack/bench-restart.py
