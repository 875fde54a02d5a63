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
# just the two relay rows and bare, DESIGNS="" no candidate; "filter" is
# native behind a Bloom filter, "strings" native with string shards;
# DESIGN_BATCH sets the events per batch, 126 by default), OUT (keep the table there), PREFILL (0, the
# default; N: each candidate but bare starts with N other ids in its dedup
# window, loaded before the count; the two relay rows start from an empty one),
# CPU_ROUNDS (0; N: then N rounds of the designs into a redis-server without
# valgrind, each design in turn, and a table of Redis's CPU µs per event),
# BESIDE ("", the default: nothing else runs during the CPU rounds; decode:
# a PostgreSQL backend decodes the backlog's WAL with wal2json over and over
# on the other core all through them (pg_logical_slot_peek_changes on a slot
# of its own), as a walsender does beside Redis in a drain on one machine),
# PACE ("0", the default: each design's commands go as fast as Redis takes
# them, through redis-cli --pipe; BYTES:MS: in the CPU rounds they go BYTES
# at a time with MS ms between, so Redis works in bursts and waits between
# them, as it does in a drain, where the relay's groups come one by one; a
# list, such as "0 262144:3": each round runs every design at each pace,
# and the table has a row per design and pace, each ÷ bare at its pace;
# sync: a round trip at a time, as the relay sends a group: its reads, and
# after their replies its MULTI ... EXEC; bare: DESIGN_BATCH XADDs a trip;
# sync1: a batch's reads and its MULTI ... EXEC in one trip),
# AOF (0, the default: no persistence; 1: every redis-server of the run
# with appendonly yes and appendfsync everysec, as bench.sh's aof mode),
# CALLGRIND (1, the default; 0: no valgrind at all, no instruction counts:
# the relay drains once to write the entries and only the CPU rounds run,
# for a design whose cost is memory, not instructions, and a prefill too
# large to load under valgrind).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
EVENTS=${1:-20000}
DESIGNS=${DESIGNS-bare watch native guard}
PREFILL=${PREFILL:-0}
CPU_ROUNDS=${CPU_ROUNDS:-0}
case $CPU_ROUNDS in '' | *[!0-9]*) echo "redis_designs: CPU_ROUNDS must be a number, not '$CPU_ROUNDS'" >&2; exit 2 ;; esac
case ${BESIDE:-} in '' | decode) ;; *) echo "redis_designs: BESIDE must be empty or decode, not '$BESIDE'" >&2; exit 2 ;; esac
PACE=${PACE:-0}
AOF=${AOF:-0}
case $AOF in 0) AOF_ARGS=() ;; 1) AOF_ARGS=(--appendonly yes --appendfsync everysec) ;; *) echo "redis_designs: AOF must be 0 or 1, not '$AOF'" >&2; exit 2 ;; esac
for p in $PACE; do
	case $p in 0 | sync | sync1 | [1-9]*:[0-9]*) ;; *) echo "redis_designs: PACE must be 0, sync, sync1 or BYTES:MS (a list of them), not '$p'" >&2; exit 2 ;; esac
done
CALLGRIND=${CALLGRIND:-1}
case $CALLGRIND in 0 | 1) ;; *) echo "redis_designs: CALLGRIND must be 0 or 1, not '$CALLGRIND'" >&2; exit 2 ;; esac
[ "$CALLGRIND" = 1 ] || [ "$CPU_ROUNDS" -gt 0 ] || { echo "redis_designs: CALLGRIND=0 needs CPU_ROUNDS > 0 (nothing would be measured)" >&2; exit 2; }
case $PREFILL in '' | *[!0-9]*) echo "redis_designs: PREFILL must be a number of ids, not '$PREFILL'" >&2; exit 2 ;; esac
export PREFILL
PY="python3 $ROOT/tests/bench/redis_designs.py"

[ "$CALLGRIND" = 0 ] || command -v valgrind >/dev/null || { echo "redis_designs: needs valgrind (apt-get install valgrind)" >&2; exit 2; }
. "$ROOT/tests/bench/lib.sh"
[ -n "${NEW_BIN:-}" ] || NEW_BIN=$(bench_relay_bin)
export TESTS_DIR=$ROOT/tests RELAY_LOG_LEVEL=info RELAY_TIMEOUT=1800 RELAY_BIN=$NEW_BIN
. "$ROOT/tests/integration/lib.sh"
setup_tmp
pg_start
load_schema

VG=$CALLGRIND # 0: redis-server runs without valgrind (the CPU rounds)
redis_server() {
	if [ "$VG" = 0 ]; then
		redis-server "$@"
		return
	fi
	valgrind --tool=callgrind --callgrind-out-file="$T/cg.%p" redis-server "$@" --daemonize no \
		>>"$T/valgrind.log" 2>&1 &
}
fresh_redis() {
	redis_stop
	rm -rf "$T/redis"
	redis_start "${AOF_ARGS[@]}"
}
# total NAME: redis-server's instructions since the last zeroing (0
# without callgrind); zero: start counting.
total() { if [ "$VG" = 1 ]; then bench_cg_total "$@"; else echo 0; fi; }
zero() { [ "$VG" = 0 ] || callgrind_control -z "$REDIS_PID" >/dev/null; }
# dedup_ids: the ids in every dedup shard of the candidates' layouts (a
# hash: its fields; the strings design's shard ":s:<j>": its length ÷ 21,
# redis_designs.py's REC).
dedup_ids() {
	{
		redis_cli --scan --pattern 'outbox-relay:dedup:{outbox:bench}:*[0-9]' | awk '!/:s:[0-9]*$/ { print "HLEN " $0 }' |
			redis_cli
		redis_cli --scan --pattern 'outbox-relay:dedup:{outbox:bench}:s:*' | sed 's/^/STRLEN /' |
			redis_cli | awk '{ print $1 / 21 }'
	} | awk '{ n += $1 } END { print n + 0 }'
}

final_field() { bench_final_field "$@"; }

# Both relays' slots before the backlog: they drain the identical WAL.
slot_create b_cg
slot_create b_cg_native
[ -z "${BESIDE:-}" ] || slot_create b_beside
bench_outbox_rows "$EVENTS"
end=$(current_lsn)

fresh_redis
zero
relay_run_until "$end" --slot b_cg --dedup-window 1h --publish function || fail "relay exit $RELAY_RC"
assert_eq "$EVENTS" "$(xlen outbox:bench)" "relay: every event published once"
relay_total=$(total relay)

fresh_redis
zero
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
# load D: a fresh Redis with the candidates' functions and D's prefill.
load() {
	fresh_redis
	$PY lua >"$T/cand.lua"
	redis_cli -x FUNCTION LOAD <"$T/cand.lua" >/dev/null
	pre=0
	if [ -f "$T/$1.resp.pre" ]; then
		redis_cli --pipe <"$T/$1.resp.pre" >"$T/$1.prepipe" 2>&1 || fail "$1: prefill: $(tail -n 3 "$T/$1.prepipe")"
		assert_contains "$(cat "$T/$1.prepipe")" "errors: 0," "$1: prefill without errors"
		pre=$PREFILL
	fi
}
# send D [P]: D's commands, at P (one of PACE's settings; with valgrind, or
# P=0: through redis-cli --pipe), C1 Redis's CPU seconds right after them;
# then checked.
send() {
	# per: sync's round trips per batch (bare: one, its XADDs)
	local per=2
	[ "${2:-0}" = sync1 ] || [ "$1" = bare ] && per=1
	if [ "$VG" = 0 ] && [[ ${2:-0} == sync* ]]; then
		$PY sync "$REDIS_SOCK" "$T/$1.resp" "$per" >"$T/$1.pipe" 2>&1 || fail "$1: $2 send: $(tail -n 3 "$T/$1.pipe")"
	elif [ "$VG" = 0 ] && [ "${2:-0}" != 0 ]; then
		$PY pace "$REDIS_SOCK" "$T/$1.resp" "${2%%:*}" "${2#*:}" >"$T/$1.pipe" 2>&1 ||
			fail "$1: paced send: $(tail -n 3 "$T/$1.pipe")"
	else
		redis_cli --pipe <"$T/$1.resp" >"$T/$1.pipe" 2>&1 || fail "$1: redis-cli --pipe: $(tail -n 3 "$T/$1.pipe")"
	fi
	[ "$VG" = 1 ] || C1=$(bench_redis_cpu_s)
	assert_contains "$(cat "$T/$1.pipe")" "errors: 0," "$1: no command failed"
	if [ "$VG" = 0 ] && [[ ${2:-0} == sync* ]]; then
		local batches=$(((EVENTS + ${DESIGN_BATCH:-126} - 1) / ${DESIGN_BATCH:-126}))
		assert_contains "$(cat "$T/$1.pipe")" "round trips: $((batches * per))" "$1: $2: $per round trip(s) per batch"
	fi
	assert_eq "$EVENTS" "$(xlen outbox:bench)" "$1: every entry added once"
	[ "$1" = bare ] || assert_eq "$((EVENTS + pre))" "$(dedup_ids)" "$1: every id in the dedup hashes"
}
for d in $DESIGNS; do
	[ "$CALLGRIND" = 1 ] || break
	load "$d"
	zero
	send "$d"
	tot[$d]=$(total "$d")
done
redis_stop
# CPU_ROUNDS rounds of every design in turn, Redis without valgrind: CPU µs
# per event from INFO (noisy on a busy machine; the median is reported).
declare -A cpus
VG=0
# beside_start / beside_stop: BESIDE's load, on for all of the CPU rounds.
# The DO block loops until its backend is terminated (a psql killed alone
# would leave it running).
beside_start() {
	[ "${BESIDE:-}" = decode ] || return 0
	psql_q "SET application_name = 'beside'; DO \$\$ BEGIN LOOP
	          PERFORM count(*) FROM pg_logical_slot_peek_changes('b_beside', NULL, NULL, 'format-version', '2');
	        END LOOP; END \$\$" >/dev/null 2>&1 &
	BESIDE_PID=$!
	wait_for "[ -n \"\$(psql_q \"SELECT 1 FROM pg_stat_activity WHERE application_name = 'beside' AND state = 'active'\")\" ]" 30 ||
		fail "BESIDE=decode: the decoding backend did not start"
}
beside_stop() {
	[ "${BESIDE:-}" = decode ] || return 0
	assert_eq 1 "$(psql_q "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'beside' AND state = 'active'")" \
		"BESIDE=decode: the decoding backend ran all through the CPU rounds"
	psql_q "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'beside'" >/dev/null
	wait "$BESIDE_PID" || true # its session was terminated: psql reports an error
}
[ "$CPU_ROUNDS" = 0 ] || beside_start
for ((r = 1; r <= CPU_ROUNDS; r++)); do
	for p in $PACE; do
		for d in $DESIGNS; do
			load "$d"
			redis_cli CONFIG RESETSTAT >/dev/null
			c0=$(bench_redis_cpu_s)
			send "$d" "$p"
			cpus[$d@$p]+="$(awk -v a="$c0" -v b="$C1" -v n="$EVENTS" 'BEGIN { printf "%.3f", (b - a) * 1e6 / n }') "
			# the design's commands, per event: "design@pace command calls µs"
			redis_cli INFO commandstats | tr -d '\r' |
				sed -n 's/^cmdstat_\([a-z]*\):calls=\([0-9]*\),usec=\([0-9]*\),.*/\1 \2 \3/p' |
				awk -v k="$d@$p" -v n="$EVENTS" '$1 !~ /^(config|info|xlen|scan|hlen|strlen|ping)$/ { printf "%s %s %.3f %.3f\n", k, $1, $2 / n, $3 / n }' >>"$T/cmds"
		done
	done
done
[ "$CPU_ROUNDS" = 0 ] || beside_stop
redis_stop
{
	[ "$CALLGRIND" = 0 ] || {
	echo
	echo "Redis instructions per event (callgrind, whole redis-server process), redis-server" \
		"$(redis-server --version | sed 's/.*v=\([^ ]*\).*/\1/'), $EVENTS events (UUID ids), batches of ${DESIGN_BATCH:-126}," \
		"candidates but bare with $PREFILL other ids in the window (the relay rows: none)${AOF_ARGS:+, appendonly yes (everysec)}"
	printf '%-44s %12s %10s\n' design instr/event "÷ bare"
	bare=${tot[bare]:-0}
	row() { awk -v n="$EVENTS" -v t="$2" -v b="$bare" -v l="$1" \
		'BEGIN { printf "%-44s %12.0f %10s\n", l, t / n, (b > 0 ? sprintf("%.2f", t / b) : "-") }'; }
	row "relay (outbox_relay_publish, as it is)" "$relay_total"
	row "relay --publish native" "$native_total"
	for d in $DESIGNS; do row "$d" "${tot[$d]}"; done
	}
	if [ "$CPU_ROUNDS" -gt 0 ]; then
		echo
		echo "Redis CPU µs per event (INFO used_cpu_user + used_cpu_sys, no valgrind), median of" \
			"$CPU_ROUNDS rounds (each: every design in turn at each pace)${BESIDE:+, with BESIDE=$BESIDE}${AOF_ARGS:+, appendonly yes (everysec)}, and the rounds;" \
			"pace 0: as fast as Redis takes them, B:M: B bytes at a time, M ms apart, sync: a round trip at a time (sync1: one per batch)"
		printf '%-30s %13s %12s %10s  %s\n' design pace "CPU µs" "÷ bare" rounds
		med() { tr ' ' '\n' <<<"$1" | grep . | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'; }
		for p in $PACE; do
			cb=$(med "${cpus[bare@$p]:-}")
			for d in $DESIGNS; do
				m=$(med "${cpus[$d@$p]}")
				awk -v l="$d" -v p="$p" -v m="$m" -v b="${cb:-0}" -v r="${cpus[$d@$p]}" \
					'BEGIN { printf "%-30s %13s %12.2f %10s  %s\n", l, p, m, (b > 0 ? sprintf("%.2f", m / b) : "-"), r }'
			done
		done
		echo
		echo "Their commands (INFO commandstats, medians of the rounds): calls per event, µs per event" \
			"(the wall clock around each command; an EXEC's includes the commands it ran)"
		python3 - "$T/cmds" <<-'PY'
			import sys, statistics as st
			c = {}
			for l in open(sys.argv[1]):
			    k, cmd, calls, us = l.split()
			    c.setdefault(k, {}).setdefault(cmd, []).append((float(calls), float(us)))
			for k, cmds in c.items():
			    top = sorted(cmds.items(), key=lambda kv: -st.median(u for _, u in kv[1]))
			    print("%-30s %s" % (k, "  ".join("%s %.3f %.2f" % (cmd.upper(), st.median(n for n, _ in v), st.median(u for _, u in v))
			                                      for cmd, v in top if st.median(u for _, u in v) >= 0.01)))
		PY
	fi
} | tee "$T/table.txt"
[ -n "${OUT:-}" ] && mkdir -p "$OUT" && cp "$T/table.txt" "$OUT/"
pass
