#!/usr/bin/env bash
# install-deps.sh: apt-installs every package tierfs builds, tests and demos with.
# Idempotent: packages already installed are skipped, and apt is not touched
# at all when nothing is missing. Needs root (or sudo) on Debian 12.
set -euo pipefail

PACKAGES=(
	# build
	build-essential pkg-config
	libgrpc-dev libprotobuf-c-dev protobuf-c-compiler
	# google/protobuf/{wrappers,timestamp}.proto, which proto/csi.proto imports
	libprotobuf-dev
	libcurl4-openssl-dev libssl-dev libfuse3-dev fuse3
	libsqlite3-dev sqlite3 libexpat1-dev libcmocka-dev
	# style and static checks (make check)
	clang-format cppcheck
	# tests, demo and benchmarks (git, openssl and procps are used by them;
	# a minimal Debian image lacks them)
	python3 python3-pytest python3-grpcio python3-boto3 fio
	# a test that hangs fails with every thread's stack (run-tests.sh)
	python3-pytest-timeout
	# protoc --python_out: the CSI tests build their stubs from proto/csi.proto
	protobuf-compiler
	# a venv on the mount with an offline pip install (test_fs_tools.py):
	# venv bundles pip and setuptools wheels; building a local package also
	# needs the wheel wheel in /usr/share/python-wheels
	python3-venv python3-wheel-whl
	git openssl procps util-linux
	# which syscalls the daemon makes, in order (test_fs_index.py: the
	# first mount's marker is made durable)
	strace
	# the local S3: OpenStack Swift with s3api, plus memcached
	swift swift-proxy swift-account swift-container swift-object memcached
	# peers for interop tests and benchmarks
	s3fs rclone
	# the chart checks (tests/deploy): its templates rendered with Go's
	# text/template and sprig, built offline in GOPATH mode
	golang-go golang-github-masterminds-sprig-dev
	# the rest of the packaging checks: YAML, and jq for the fio Job
	python3-yaml jq
	# make bench: its chart (bench/results/bench.png), and perf to profile
	# the daemon where it misses a bar
	gnuplot-nox linux-perf
)

# `kubectl kustomize` for deploy/: Debian's kubernetes-client, unless a
# kubectl is installed already (another package owns /usr/bin/kubectl on
# some machines, and would make the install fail)
if ! command -v kubectl >/dev/null 2>&1; then
	PACKAGES+=(kubernetes-client)
fi

missing=()
for p in "${PACKAGES[@]}"; do
	if ! dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q '^install ok installed$'; then
		missing+=("$p")
	fi
done

if [ ${#missing[@]} -eq 0 ]; then
	echo "install-deps: all ${#PACKAGES[@]} packages present"
	exit 0
fi

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO=sudo
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
# Debian's swift packages start their services on install where an init
# system runs; tierfs runs its own Swift (hack/s3-local.sh), so keep them off.
policy=/usr/sbin/policy-rc.d
created_policy=0
if [ ! -e "$policy" ]; then
	printf '#!/bin/sh\nexit 101\n' | $SUDO tee "$policy" >/dev/null
	$SUDO chmod 755 "$policy"
	created_policy=1
fi
trap '[ $created_policy -eq 1 ] && $SUDO rm -f "$policy"' EXIT
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
echo "install-deps: done"
