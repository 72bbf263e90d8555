#!/usr/bin/env bash
# bench-coldmount.sh: only the cold-start part of `make bench`.
#
# A new node mounting the 100,000-file volume s3://$BENCH_BUCKET/cold-100k
# (made once through tierfs and kept; about 12 minutes here): from the
# mount command on an empty cache dir until the first `ls` of the root
# returns, and until a walk of the whole tree does, on tierfs, rclone and
# s3fs (tests/bench/harness.py, workload "coldmount"; DESIGN §8: about 1 s).
# COLD_DIRS and COLD_FILES_PER_DIR (100 x 1000) size the volume.
set -euo pipefail
cd "$(dirname "$0")/.."
BENCH_ONLY=coldmount exec hack/bench.sh
