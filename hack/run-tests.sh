#!/usr/bin/env bash
# run-tests.sh: runs every tierfs test suite and ends with "N passed, N failed".
#
# Suites: make check, C unit tests (plain and ASan/UBSan), the CSI plugin's
# pytest suite (ASan build of tierfs-csi, no S3), the packaging checks
# (tests/deploy: the Helm chart rendered by build/tierfs-render, the
# manifests, the fio Job, the Dockerfile, against build/tierfs-csi; no S3,
# no cluster), then, against the local
# Swift S3 (started here if it is not running, stopped again afterwards),
# the C integration tests (ASan build), the pytest integration tests and
# the CSI Controller's, Node's, life and csi-sanity tests (tests/csi).
# TIERFS_ONLY=unit|integration runs one half (the CSI suite is in the
# integration half); TIERFS_ONLY=csi runs the CSI suite alone, and
# TIERFS_ONLY=deploy the packaging checks alone. Exit status:
# 0 only when every suite ran and nothing failed.
#
# A hang fails instead of running CI out of time: a pytest test that runs
# longer than TIERFS_TEST_TIMEOUT seconds (600) ends its suite with every
# thread's stack in the log (pytest-timeout), and a suite that runs longer
# than TIERFS_SUITE_TIMEOUT seconds (2400) is killed.
set -uo pipefail

cd "$(dirname "$0")/.."
ROOT=$PWD
PY=/usr/bin/python3
BUILD=build
ASAN=build/asan
ONLY=${TIERFS_ONLY:-all}
# the Makefile's UNIT_TESTS, so that a new one cannot be built and not run
mapfile -t UNIT_TESTS < <(make -s --no-print-directory print-unit-tests)
LOGDIR=$BUILD/test-logs
mkdir -p "$LOGDIR"

passed=0
failed=0
suites_failed=()

TEST_TIMEOUT=${TIERFS_TEST_TIMEOUT:-600}
SUITE_TIMEOUT=${TIERFS_SUITE_TIMEOUT:-2400}

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0:exitcode=99}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

# Runs "$@" with its output in the log $1, killed past SUITE_TIMEOUT
# (which the log then says); returns its exit status.
run_limited() {
	local log=$1
	shift
	timeout -k 30 "$SUITE_TIMEOUT" "$@" >"$log" 2>&1
	local rc=$?
	if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
		echo "killed after $SUITE_TIMEOUT s" >>"$log"
	fi
	return "$rc"
}

# Runs one cmocka binary and adds its counts; a crash or sanitizer report
# with no count is one failure.
run_cmocka() {
	local name=$1 bin=$2 log=$LOGDIR/$1.log
	run_limited "$log" "$bin"
	local rc=$?
	local p f
	# a binary may run several groups: add up every group's summary
	p=$(grep -Eo '^\[  PASSED  \] [0-9]+' "$log" | grep -Eo '[0-9]+' |
		awk '{ s += $1 } END { print s + 0 }')
	f=$(grep -Eo '^\[  FAILED  \] [0-9]+ test' "$log" | grep -Eo '[0-9]+' |
		awk '{ s += $1 } END { print s + 0 }')
	if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
		f=1 # crashed, or a sanitizer fired after the tests
	fi
	passed=$((passed + p))
	failed=$((failed + f))
	if [ "$f" -ne 0 ]; then
		suites_failed+=("$name")
		echo "FAIL $name ($p passed, $f failed) — log: $log"
		sed -n '/FAILED\|ERROR\|Sanitizer\|runtime error/,+12p' "$log" | head -60
	else
		echo "ok   $name ($p passed)"
	fi
}

# Runs pytest on the given files and adds its counts.
run_pytest() {
	local name=$1
	shift
	local log=$LOGDIR/$name.log
	run_limited "$log" $PY -m pytest -q -p no:cacheprovider \
		--timeout "$TEST_TIMEOUT" --timeout-method thread --durations=10 "$@"
	local rc=$?
	local summary p f e
	summary=$(grep -E '[0-9]+ (passed|failed|error)' "$log" | tail -1)
	p=$(grep -Eo '[0-9]+ passed' <<<"$summary" | grep -Eo '[0-9]+')
	f=$(grep -Eo '[0-9]+ failed' <<<"$summary" | grep -Eo '[0-9]+')
	e=$(grep -Eo '[0-9]+ errors?' <<<"$summary" | grep -Eo '[0-9]+')
	p=${p:-0}
	f=$(( ${f:-0} + ${e:-0} ))
	if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
		f=1 # collection error, no tests run, or a crash
	fi
	passed=$((passed + p))
	failed=$((failed + f))
	if [ "$f" -ne 0 ]; then
		suites_failed+=("$name")
		echo "FAIL $name ($p passed, $f failed) — log: $log"
		if grep -q '^+* Timeout +*$' "$log"; then
			# the test that hung: where each thread was, less the
			# frames of Python's and pytest's own files
			sed -n '/^+* Timeout +*$/,$p' "$log" | awk '
				/^  File "\/usr\/lib\// { skip = 1; next }
				/^  File "<frozen/ { skip = 1; next }
				/^  File / { skip = 0 }
				/^    / && skip { next }
				{ print }' | head -120
		else
			tail -60 "$log"
		fi
	else
		echo "ok   $name ($p passed)"
	fi
}

if [ "$ONLY" = all ]; then
	echo "== static checks (clang-format, cppcheck)"
	if make -s check >"$LOGDIR/check.log" 2>&1; then
		passed=$((passed + 1))
		echo "ok   make check"
	else
		failed=$((failed + 1))
		suites_failed+=("make-check")
		echo "FAIL make check — log: $LOGDIR/check.log"
		tail -30 "$LOGDIR/check.log"
	fi
fi

if [ "$ONLY" = all ] || [ "$ONLY" = unit ]; then
	echo "== unit tests (plain, then ASan/UBSan)"
	for t in "${UNIT_TESTS[@]}"; do
		run_cmocka "$t" "$BUILD/tests/$t"
		run_cmocka "$t-asan" "$ASAN/tests/$t"
	done
fi

if [ "$ONLY" = all ] || [ "$ONLY" = integration ] || [ "$ONLY" = csi ]; then
	echo "== CSI plugin tests (tierfs-csi on a unix socket; no S3)"
	export TIERFS_CSI_BIN=$ROOT/$ASAN/tierfs-csi
	# without S3 even when the caller's environment has it: the files
	# that need S3 skip themselves here and run in the S3 section below
	AWS_ENDPOINT_URL= run_pytest pytest-csi tests/csi \
		--ignore=tests/csi/test_csi_node.py \
		--ignore=tests/csi/test_csi_life.py
fi

if [ "$ONLY" = all ] || [ "$ONLY" = deploy ]; then
	echo "== packaging checks (chart, manifests, fio Job, image; no S3, no cluster)"
	TIERFS_RENDER=$ROOT/$BUILD/tierfs-render \
		TIERFS_DEPLOY_CSI_BIN=$ROOT/$BUILD/tierfs-csi \
		run_pytest pytest-deploy tests/deploy
fi

if [ "$ONLY" = all ] || [ "$ONLY" = integration ]; then
	echo "== integration tests against the local S3"
	started_s3=0
	if ! hack/s3-local.sh status >/dev/null 2>&1; then
		if hack/s3-local.sh start >"$LOGDIR/s3-local.log" 2>&1; then
			started_s3=1
		else
			echo "FAIL could not start the local S3:"
			tail -30 "$LOGDIR/s3-local.log"
			failed=$((failed + 1))
			suites_failed+=("s3-local")
		fi
	fi
	if hack/s3-local.sh status >/dev/null 2>&1; then
		eval "$(hack/s3-local.sh env)"
		export TIERFS_CTL=$ROOT/$ASAN/tierfsctl
		export TIERFS_BIN=$ROOT/$ASAN/tierfs
		run_cmocka test_s3_live-asan "$ASAN/tests/test_s3_live"
		run_pytest pytest-integration tests/integration
		# the Node service on real mounts (tierfs beside tierfs-csi)
		export TIERFS_CSI_BIN=$ROOT/$ASAN/tierfs-csi
		run_pytest pytest-csi-s3 tests/csi/test_csi_controller.py
		run_pytest pytest-csi-node tests/csi/test_csi_node.py
		# a user's whole volume life, and 20 volumes at once
		run_pytest pytest-csi-life tests/csi/test_csi_life.py
		# csi-sanity's checks, on tierfs-csi --mode all
		run_pytest pytest-csi-sanity tests/csi/test_csi_sanity.py
	fi
	if [ "$started_s3" -eq 1 ]; then
		hack/s3-local.sh stop >/dev/null 2>&1
	fi
fi

echo
if [ ${#suites_failed[@]} -ne 0 ]; then
	echo "failed suites: ${suites_failed[*]}"
fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]
