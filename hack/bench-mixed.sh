#!/usr/bin/env bash
# bench-mixed.sh: a reader beside a writer it shares nothing with, on one or
# more tierfs builds in turn (an A/B of a change that touches the daemon's
# locks).
#
# Usage: hack/bench-mixed.sh [RUNS] [SECONDS] [DURABILITY] BIN...
#   RUNS (default 3) rounds; in each, every BIN is mounted on a fresh
#   prefix and cache dir (--durability DURABILITY, default local) and runs
#   `tests/bench/ops.py mixed MNT SECONDS` (default 5): 4 KiB O_DIRECT
#   random reads of a 64 MiB file written and read once (cached), while
#   another process creates 4 KiB files. One line per mount: reads/s, their
#   p50/p99/p99.9, and the creates/s beside them. Needs the local S3 up.
set -euo pipefail

cd "$(dirname "$0")/.."
RUNS=3 SECS=5 DUR=local
[[ ${1:-} =~ ^[0-9]+$ ]] && RUNS=$1 && shift
[[ ${1:-} =~ ^[0-9.]+$ ]] && SECS=$1 && shift
[[ ${1:-} == s3 || ${1:-} == local ]] && DUR=$1 && shift
(($#)) || { echo "usage: hack/bench-mixed.sh [RUNS] [SECONDS] [s3|local] BIN..." >&2; exit 2; }
BUCKET=${BENCH_BUCKET:-tierfs-bench}
OUT=${OUT:-/var/tmp/tierfs-mixed}
eval "$(hack/s3-local.sh env)"
build/tierfsctl s3 mb "s3://$BUCKET" >/dev/null
PREFIX=mixed-$$
mkdir -p "$OUT/mnt"
BIN=
cleanup() {
	[[ -n $BIN ]] && "$BIN" unmount "$OUT/mnt" --cache-dir "$OUT/cache" >/dev/null 2>&1 ||
		umount -l "$OUT/mnt" 2>/dev/null || true
	build/tierfsctl s3 rm -r "s3://$BUCKET/$PREFIX/" >/dev/null 2>&1 || true
}
trap cleanup EXIT
for r in $(seq "$RUNS"); do
	i=0
	for BIN in "$@"; do
		i=$((i + 1))
		rm -rf "$OUT/cache"
		"$BIN" mount "s3://$BUCKET/$PREFIX/$r-$i" "$OUT/mnt" --cache-dir "$OUT/cache" \
			--durability "$DUR"
		/usr/bin/python3 tests/bench/ops.py mixed "$OUT/mnt/x" "$SECS" |
			/usr/bin/python3 -c '
import json, sys
o = json.load(sys.stdin)
print("%s: %.0f reads/s, p50 %.2f p99 %.2f p99.9 %.2f ms; %.0f creates/s beside them"
      % (sys.argv[1], o["reads"] / o["s"], o["p50"] * 1e3, o["p99"] * 1e3,
         o["p99.9"] * 1e3, o["creates"] / o["s"]))' "$BIN"
		"$BIN" unmount "$OUT/mnt" --cache-dir "$OUT/cache" >/dev/null
	done
done
BIN=
