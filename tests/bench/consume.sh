#!/bin/bash
# consume.sh - outbox-consume's throughput in its three forms on the same
# stream: the JSON-lines mode (into /dev/null), worker mode with a no-op
# --handler co-process (it answers "done" to every line), and worker mode
# with a no-op --exec (one `true` process per event). Each reads the whole
# stream in a group of its own; prints events/s and the ratio to JSON lines.
#
#   tests/bench/consume.sh [EVENTS]      (default 20000; --exec reads EVENTS / 10)
#
# Starts its own PostgreSQL 15 + redis-server with the integration harness;
# builds a release relay and consumer in build-bench/ unless RELAY_BIN is set.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
N=${1:-20000}
NEXEC=$((N / 10))
. "$ROOT/tests/bench/lib.sh"
if [ -z "${RELAY_BIN:-}" ]; then
	RELAY_BIN=$(bench_relay_bin)
	ninja -C "$ROOT/build-bench" cmd/outbox-consume/outbox-consume >/dev/null
fi
CONSUME_BIN=$(dirname "$RELAY_BIN")/../outbox-consume/outbox-consume
export RELAY_BIN TESTS_DIR=$ROOT/tests RELAY_LOG_LEVEL=info RELAY_TIMEOUT=600
. "$ROOT/tests/integration/lib.sh"
setup_tmp
pg_start
load_schema
redis_start
slot_create outbox_relay
psql_q "SELECT outbox_emit('order', 'o-' || g, 'created', jsonb_build_object('n', g, 'pad', repeat('p', 200)))
        FROM generate_series(1, $N) g" >/dev/null
relay_drain
[ "$(xlen outbox:order)" = "$N" ] || fail "expected $N entries"

# run NAME EVENTS ARGS...: one consumer reading EVENTS entries; events/s in $RATE
run() {
	local name=$1 n=$2 t0 t1
	shift 2
	t0=$(date +%s%N)
	"$CONSUME_BIN" --redis-url "$REDIS_URL" --stream outbox:order --group "$name" --consumer c \
		--create-group --count "$n" --block-timeout 1s "$@" >/dev/null 2>"$T/$name.log" ||
		fail "$name: exit code $? ($(tail -n 2 "$T/$name.log"))"
	t1=$(date +%s%N)
	RATE=$(awk -v n="$n" -v d=$((t1 - t0)) 'BEGIN { printf "%.0f", n / (d / 1e9) }')
}
# Python answers each line as it comes (mawk would wait to fill its input buffer, and a shell's
# read goes byte by byte).
printf '#!/bin/sh\nexec python3 -c '"'"'import sys\nfor _ in sys.stdin: print("done", flush=True)'"'"'\n' >"$T/noop.sh"
chmod +x "$T/noop.sh"
run lines "$N"
lines=$RATE
run coproc "$N" --handler "$T/noop.sh"
coproc=$RATE
run execs "$NEXEC" --exec true
execs=$RATE
printf '\n%-40s %12s %10s\n' "outbox-consume form" "events/s" "vs lines"
printf '%-40s %12s %10s\n' "JSON lines to stdout ($N events)" "$lines" "1.00"
printf '%-40s %12s %10s\n' "--handler, no-op co-process ($N)" "$coproc" "$(awk -v a="$coproc" -v b="$lines" 'BEGIN { printf "%.2f", a / b }')"
printf '%-40s %12s %10s\n' "--exec true, a process each ($NEXEC)" "$execs" "$(awk -v a="$execs" -v b="$lines" 'BEGIN { printf "%.3f", a / b }')"
