#!/usr/bin/env bash
# bench.sh: `make bench`, tierfs beside rclone, s3fs, the local disk and raw S3.
#
# Starts the local S3 if it is not running (and leaves it running: other
# work may share it), then runs tests/bench/harness.py, which runs every
# workload of issue 6 on every target, BENCH_RUNS (3) times, and prints a
# table of medians, spreads, ratios and DESIGN §8 bars. Results go to
# bench/results/bench.{txt,json,png}. BENCH_QUICK=1 is a ~3 minute smoke
# run; BENCH_ONLY=fio,meta and BENCH_TARGETS=local,tierfs-s3 narrow it.
# The first run also makes the kept data sets in the bench bucket (the
# 100,000-file volume takes about 12 minutes here).
set -euo pipefail

cd "$(dirname "$0")/.."
BUCKET=${BENCH_BUCKET:-tierfs-bench}

if ! hack/s3-local.sh status >/dev/null 2>&1; then
	hack/s3-local.sh start
fi
eval "$(hack/s3-local.sh env)"
build/tierfsctl s3 mb "s3://$BUCKET" >/dev/null
exec /usr/bin/python3 tests/bench/harness.py
