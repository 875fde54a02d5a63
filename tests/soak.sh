#!/bin/bash
# soak.sh - the integrity oracle (tests/integration/80_integrity.sh) for longer.
#
#   tests/soak.sh --minutes N [--seed S] [--build-dir DIR]
#
# Runs 80_integrity with N minutes of random rows and faults (seed S, default
# the time) against DIR's outbox-relay (default build/, BUILD_DIR works too),
# then prints ONE line:
#   soak: seed=S minutes=N rows=R messages=M rolled_back=B faults: relay_kill9=a redis_restart=b
#         redis_kill9=c redis_stall=f pg_restart=d watch_noise=w slot_heal=e second_relay=s lookups_skipped=K aof_repairs=A record_ids_read=I
#         lost=L duplicated=D corrupted=C reordered=O (republished: P) messages_lost_in_slot_gaps=G
#         result=PASS|FAIL
# (on one line). Exit status: the test's (0 pass, 1 a discrepancy or a
# failure). The whole output of the run is kept in soak-<seed>.log in the
# current directory (KEEP_LOG=0: removed when it passed).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
minutes=
seed=$(date +%s)
build=${BUILD_DIR:-build}
while [ $# -gt 0 ]; do
	case "$1" in
	--minutes) minutes=$2; shift 2 ;;
	--seed) seed=$2; shift 2 ;;
	--build-dir) build=$2; shift 2 ;;
	-h | --help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "soak.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
	esac
done
case "$minutes" in
'' | *[!0-9]*) echo "soak.sh: --minutes N (whole minutes) is required" >&2; exit 2 ;;
esac
case "$seed" in
'' | *[!0-9]*) echo "soak.sh: --seed takes a number" >&2; exit 2 ;;
esac
case "$build" in /*) ;; *) build=$here/../$build ;; esac
bin=$build/cmd/outbox-relay/outbox-relay
[ -x "$bin" ] || { echo "soak.sh: no $bin: build first (meson setup $build && meson compile -C $build)" >&2; exit 2; }
logf=$PWD/soak-$seed.log
rc=0
# The drain after a long run may take longer than the short test's.
ORACLE_SEED=$seed ORACLE_SECONDS=$((minutes * 60)) RELAY_TIMEOUT_DRAIN=$((600 + minutes * 60)) \
	RELAY_BIN=$bin TESTS_DIR=$here RELAY_LOG_LEVEL=${RELAY_LOG_LEVEL:-info} \
	bash "$here/integration/80_integrity.sh" >"$logf" 2>&1 || rc=$?
line=$(grep '^integrity: ' "$logf" | tail -n 1 || true)
if [ -z "$line" ]; then
	line="integrity: seed=$seed (the run stopped before its summary: $(grep -m1 'FAIL' "$logf" | cut -c1-300 || echo "see $logf"))"
fi
line=${line#integrity: }
line=${line/seconds=$((minutes * 60))/minutes=$minutes}
echo "soak: $line result=$([ "$rc" = 0 ] && echo PASS || echo FAIL)"
if [ "$rc" = 0 ] && [ "${KEEP_LOG:-1}" = 0 ]; then
	rm -f "$logf"
fi
exit "$rc"
