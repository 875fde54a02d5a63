#!/bin/bash
# run.sh - the whole test suite from a fresh Debian 12 machine: install what
# is missing, build with warnings as errors, run every test (unit tests and
# integration tests against real PostgreSQL 15 + wal2json and redis-server).
#
#   tests/run.sh                     build dir "build"
#   BUILD_DIR=build-asan MESON_ARGS="-Db_sanitize=address,undefined -Db_lundef=false" tests/run.sh
#
# Exit status: meson test's (0 when everything passed).
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD_DIR=${BUILD_DIR:-build}
deploy/install-deps.sh
. tests/python_path.sh
if [ ! -f "$BUILD_DIR/build.ninja" ]; then
	# shellcheck disable=SC2086 # MESON_ARGS is a word list on purpose
	meson setup "$BUILD_DIR" -Dwerror=true ${MESON_ARGS:-}
fi
meson compile -C "$BUILD_DIR"
exec meson test -C "$BUILD_DIR" --print-errorlogs --num-processes "${TEST_JOBS:-2}" ${TEST_ARGS:-}
