#!/bin/bash
# redis_designs.sh - Redis's instructions per event for candidate publish
# designs (issue 24, item 2: "the measurement decides"), all on the same
# entries in the same run: the relay's outbox_relay_publish function as it
# is (the relay draining a backlog), a bare XADD of each entry, and the
# designs of tests/bench/redis_designs.py (its header says what each sends),
# and the relay on --publish native (WATCH + MULTI/EXEC, no Lua), draining
# the same WAL from its own slot.
# Each runs into a fresh redis-server under valgrind --tool=callgrind;
# instruction counts do not mind a busy machine.
#
#   tests/bench/redis_designs.sh [EVENTS]      (default 20000)
#
# Environment: NEW_BIN (the relay binary; default: this tree's release build
# in build-bench/), DESIGNS (the Python candidates, default "bare watch
# native guard"; "bare" is the ÷ bare column's base, so DESIGNS="bare" runs
# just the two relay rows and bare, DESIGNS="" no candidate), OUT (keep the
# table there).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
EVENTS=${1:-20000}
DESIGNS=${DESIGNS-bare watch native guard}
PY="python3 $ROOT/tests/bench/redis_designs.py"

command -v valgrind >/dev/null || { echo "redis_designs: needs valgrind (apt-get install valgrind)" >&2; exit 2; }
. "$ROOT/tests/bench/lib.sh"
[ -n "${NEW_BIN:-}" ] || NEW_BIN=$(bench_relay_bin)
export TESTS_DIR=$ROOT/tests RELAY_LOG_LEVEL=info RELAY_TIMEOUT=1800 RELAY_BIN=$NEW_BIN
. "$ROOT/tests/integration/lib.sh"
setup_tmp
pg_start
load_schema

redis_server() {
	valgrind --tool=callgrind --callgrind-out-file="$T/cg.%p" redis-server "$@" --daemonize no \
		>>"$T/valgrind.log" 2>&1 &
}
fresh_redis() {
	redis_stop
	rm -rf "$T/redis"
	redis_start
}
# total NAME: redis-server's instructions since the last zeroing.
total() {
	local f
	rm -f "$T/cg.$REDIS_PID".*
	callgrind_control -d "$1" "$REDIS_PID" >/dev/null
	wait_for "ls '$T/cg.$REDIS_PID'.* >/dev/null 2>&1" 60 || fail "callgrind wrote no dump"
	f=$(ls "$T/cg.$REDIS_PID".* | head -n 1)
	wait_for "grep -q '^totals:' '$f'" 120 || fail "callgrind dump $f incomplete"
	sed -n 's/^totals: *\([0-9]*\).*/\1/p' "$f"
}
# dedup_ids: the fields in every dedup hash of the candidates' layout.
dedup_ids() {
	local n=0 k
	for k in $(redis_cli --scan --pattern 'outbox-relay:dedup:{outbox:bench}:*'); do
		n=$((n + $(redis_cli HLEN "$k")))
	done
	echo "$n"
}

# final_field LOG FIELD: FIELD=N of the relay's final line ("stopped (...): ...").
final_field() {
	grep -o "stopped (.*" "$1" | tail -n 1 | grep -o " $2=[0-9]*" | cut -d= -f2
}

# Both relays' slots before the backlog: they drain the identical WAL.
slot_create b_cg
slot_create b_cg_native
bench_outbox_rows "$EVENTS"
end=$(current_lsn)

fresh_redis
callgrind_control -z "$REDIS_PID" >/dev/null
relay_run_until "$end" --slot b_cg --dedup-window 1h --publish function || fail "relay exit $RELAY_RC"
assert_eq "$EVENTS" "$(xlen outbox:bench)" "relay: every event published once"
relay_total=$(total relay)

fresh_redis
callgrind_control -z "$REDIS_PID" >/dev/null
relay_run_until "$end" --slot b_cg_native --dedup-window 1h --publish native || fail "relay --publish native exit $RELAY_RC"
assert_eq "$EVENTS" "$(xlen outbox:bench)" "relay --publish native: every event published once"
nb=$(final_field "$RELAY_LOG" native_batches)
fb=$(final_field "$RELAY_LOG" function_batches)
wr=$(final_field "$RELAY_LOG" watch_retries)
[ -n "$nb" ] && [ -n "$fb" ] || fail "relay --publish native: no native_batches/function_batches in its final line"
[ "$nb" -gt 0 ] || fail "relay --publish native: native_batches=$nb (no batch written natively)"
assert_eq 0 "$fb" "relay --publish native: function_batches=0"
log "relay --publish native: native_batches=$nb function_batches=$fb watch_retries=${wr:-?}"
native_total=$(total native_relay)
declare -A tot
for d in $DESIGNS; do
	$PY gen "$d" "$REDIS_SOCK" outbox:bench "$T/$d.resp" >"$T/$d.count"
	assert_eq "$EVENTS" "$(cat "$T/$d.count")" "$d: every entry read back"
done
for d in $DESIGNS; do
	fresh_redis
	$PY lua >"$T/cand.lua"
	redis_cli -x FUNCTION LOAD <"$T/cand.lua" >/dev/null
	callgrind_control -z "$REDIS_PID" >/dev/null
	redis_cli --pipe <"$T/$d.resp" >"$T/$d.pipe" 2>&1 || fail "$d: redis-cli --pipe: $(tail -n 3 "$T/$d.pipe")"
	assert_contains "$(cat "$T/$d.pipe")" "errors: 0," "$d: no command failed"
	assert_eq "$EVENTS" "$(xlen outbox:bench)" "$d: every entry added once"
	[ "$d" = bare ] || assert_eq "$EVENTS" "$(dedup_ids)" "$d: every id in the dedup hashes"
	tot[$d]=$(total "$d")
done
redis_stop
{
	echo
	echo "Redis instructions per event (callgrind, whole redis-server process), redis-server" \
		"$(redis-server --version | sed 's/.*v=\([^ ]*\).*/\1/'), $EVENTS events (UUID ids), batches of 126"
	printf '%-44s %12s %10s\n' design instr/event "÷ bare"
	bare=${tot[bare]:-0}
	row() { awk -v n="$EVENTS" -v t="$2" -v b="$bare" -v l="$1" \
		'BEGIN { printf "%-44s %12.0f %10s\n", l, t / n, (b > 0 ? sprintf("%.2f", t / b) : "-") }'; }
	row "relay (outbox_relay_publish, as it is)" "$relay_total"
	row "relay --publish native" "$native_total"
	for d in $DESIGNS; do row "$d" "${tot[$d]}"; done
} | tee "$T/table.txt"
[ -n "${OUT:-}" ] && mkdir -p "$OUT" && cp "$T/table.txt" "$OUT/"
pass
