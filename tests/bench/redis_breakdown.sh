#!/bin/bash
# redis_breakdown.sh - where Redis's CPU goes per published event (issue 24):
# the relay's drain of a backlog into a redis-server running under
# valgrind --tool=callgrind, its instructions cut into buckets by function
# (callgrind's per-caller inclusive costs), next to a bare XADD of the very
# same entries into a second, fresh redis-server under callgrind, in the
# same run. Instruction counts are repeatable whatever else the machine
# runs, unlike CPU seconds.
#
#   tests/bench/redis_breakdown.sh [EVENTS]      (default 20000)
#
# Environment: NEW_BIN (the relay binary; default: this tree's release build
# in build-bench/), CPU_RUN (1, the default: also the same two loads without
# valgrind, Redis CPU us/event from INFO's used_cpu_user + used_cpu_sys;
# noisy on a busy machine; 0: skip; with it, the bare XADD Redis also takes
# redis-benchmark -P 64 of one of the relay's entries, issue 24's own
# baseline, as many times as there are measured events, into another key),
# CG_OPTS (more valgrind options, for example --cache-sim=yes: the dumps kept
# with OUT then count cache misses too, read with callgrind_annotate),
# CG_RUN (1, the default; 0: no valgrind at all, only the CPU figures, the
# relay's from its one drain: for runs too long for callgrind), OUT (keep the callgrind dumps, the JSON
# and the table in this directory), PUBLISH (function, the default: the relay
# as it is, one FCALL of outbox_relay_publish per batch; native: the relay on
# --publish native, WATCH + reads, then MULTI/EXEC, its own buckets, see
# below; the run fails unless its final line shows native_batches > 0 and
# function_batches=0), PREFILL (0, the default; N: the steady state of a
# window that already holds N ids. N rows more are committed before the
# measured backlog and drained by the same relay slot into the same Redis
# first; only what comes after them is counted, in the relay's drain and
# (its stream filled with the same N entries first) in the bare XADD's).
#
# The backlog: (PREFILL +) EVENTS outbox rows (random UUID ids, 1000 per transaction, one
# stream outbox:bench), committed before the relay starts; the relay runs
# with its defaults (dedup on, --dedup-window 1h, the replay watermark) into
# Redis without persistence, to --endpos. The bare XADD: every entry the
# relay wrote, read back with XRANGE and sent as "XADD outbox:bench * field
# value ..." through redis-cli --pipe (pipelined as deep as it likes) into
# an empty redis-server.
#
# How to read the table: instructions per event and % of the whole
# redis-server process, for the publish function (left) and the bare XADD
# (right). The indented lines add up to the FCALL line; the unindented lines
# plus the FCALL (or XADD) line add up to the whole process ("other" is what
# no bucket claims). Each command's line includes writing its own reply to
# the script's fake client. tests/bench/redis_breakdown.py's header says
# which functions make each bucket (Debian's redis-server is stripped, so
# static functions and Lua's internals are found by their place in the call
# graph). The ratios below the table: the whole process of the publish
# function over the bare XADD's, FCALL alone over the bare XADD command, and
# the XADD inside the function over the bare one (the same entries: ~1).
# Callgrind counts user-space instructions only: the kernel's part of the
# socket reads and writes is in no line (it is in the CPU_RUN figures).
#
# With PUBLISH=native the left column is the relay on --publish native: the
# indented lines add up to the EXEC line (each command run inside EXEC, the
# EXEC's own bookkeeping); the unindented lines (the commands sent outside
# MULTI: WATCH/UNWATCH, the watermark GET, TYPE/TIME, the dedup reads HMGET/
# HGETALL/EXISTS; MULTI and the queuing of each command; read + parse,
# dispatch, write, other) plus the EXEC line add up to the whole process.
# touchWatchedKey (every write's check for clients watching its key) is
# inside the write commands' lines; its total is shown apart below them.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
EVENTS=${1:-20000}
CPU_RUN=${CPU_RUN:-1}
PUBLISH=${PUBLISH:-function}
CG_RUN=${CG_RUN:-1}
[ "$CG_RUN" = 1 ] || CPU_RUN=1
case $PUBLISH in
function) KIND=relay ;;
native) KIND=native ;;
*) echo "redis_breakdown: PUBLISH must be function or native, not '$PUBLISH'" >&2; exit 2 ;;
esac
PY="python3 $ROOT/tests/bench/redis_breakdown.py"

command -v valgrind >/dev/null && command -v callgrind_annotate >/dev/null ||
	{ echo "redis_breakdown: needs valgrind (apt-get install valgrind)" >&2; exit 2; }

. "$ROOT/tests/bench/lib.sh"
[ -n "${NEW_BIN:-}" ] || NEW_BIN=$(bench_relay_bin)

export TESTS_DIR=$ROOT/tests RELAY_LOG_LEVEL=info RELAY_TIMEOUT=1800 RELAY_BIN=$NEW_BIN
. "$ROOT/tests/integration/lib.sh"
setup_tmp
pg_start
load_schema

# redis-server under callgrind (CG=1) in the foreground of a background job
# (a daemonized child is out of callgrind_control's reach; its pidfile still
# names it), or plain (CG=0), as lib.sh starts it.
CG=1
redis_server() { bench_redis_server "$@"; }
# fresh_redis: an empty redis-server (CG as set), no persistence.
fresh_redis() {
	redis_stop
	rm -rf "$T/redis"
	redis_start
}
# dump NAME: callgrind's counts since the last zeroing, to $T/cg-NAME.out.
dump() { bench_cg_total "$1" >/dev/null; }
final_field() { bench_final_field "$@"; }
# check_path: the relay's final line shows the batches went the way PUBLISH asks.
check_path() {
	local nb fb
	nb=$(final_field "$RELAY_LOG" native_batches)
	fb=$(final_field "$RELAY_LOG" function_batches)
	[ -n "$nb" ] && [ -n "$fb" ] || fail "relay: no native_batches/function_batches in its final line"
	if [ "$PUBLISH" = native ]; then
		[ "$nb" -gt 0 ] || fail "relay --publish native: native_batches=$nb (no batch written natively)"
		assert_eq 0 "$fb" "relay --publish native: function_batches=0"
	else
		assert_eq 0 "$nb" "relay --publish function: native_batches=0"
	fi
	log "relay: native_batches=$nb function_batches=$fb watch_retries=$(final_field "$RELAY_LOG" watch_retries)" \
		"native_groups=$(final_field "$RELAY_LOG" native_groups) lookups_skipped=$(final_field "$RELAY_LOG" lookups_skipped)" \
		"record_ids_read=$(final_field "$RELAY_LOG" record_ids_read)"
}

PREFILL=${PREFILL:-0}
case $PREFILL in '' | *[!0-9]*) echo "redis_breakdown: PREFILL must be a number of rows, not '$PREFILL'" >&2; exit 2 ;; esac

# One backlog for every run: one slot per run, all created before it is written.
slot_create b_cg
[ "$CPU_RUN" = 1 ] && slot_create b_cpu
if [ "$PREFILL" -gt 0 ]; then
	bench_outbox_rows "$PREFILL"
	pre_end=$(current_lsn)
	log "prefill: $PREFILL rows to $pre_end"
fi
bench_outbox_rows "$EVENTS"
end=$(current_lsn)
log "backlog: $EVENTS rows to $end"
TOTAL=$((PREFILL + EVENTS))

# prefill SLOT: with PREFILL, the relay drains the prefill rows on SLOT into
# the running Redis (a window of PREFILL ids or more: --endpos lets it
# publish the transactions it has read past the position before it
# stops), and Redis's command counts start again. PRE_N: the entries the
# stream holds then; the measured run begins with them as replays of the
# slot, which the watermark drops, and counts only what it adds
# (MEASURED). Callers zero their own CPU counts after it. The prefill's
# relay reads ahead of what Redis has acknowledged (up to
# --max-inflight-events) and publishes what it has read when it stops, so
# it runs with a small window: it then stops about a transaction (1000
# rows) past its end, not up to 10,000 events into the measured backlog.
PRE_N=0
prefill() {
	[ "$PREFILL" -gt 0 ] || return 0
	relay_run_until "$pre_end" --slot "$1" --dedup-window 1h --publish "$PUBLISH" --max-inflight-events 256 ||
		fail "relay (prefill) exit $RELAY_RC"
	PRE_N=$(xlen outbox:bench)
	assert_ge "$PRE_N" "$PREFILL" "relay: every prefill event published"
	redis_cli CONFIG RESETSTAT >/dev/null
}

# 1. The relay's drain into Redis under callgrind (CG_RUN=0: plain, its CPU taken).
CG=$CG_RUN
fresh_redis
prefill b_cg
[ "$CG" = 1 ] && callgrind_control -z "$REDIS_PID" >/dev/null
c0=$(bench_redis_cpu_s)
relay_run_until "$end" --slot b_cg --dedup-window 1h --publish "$PUBLISH" || fail "relay exit $RELAY_RC"
c1=$(bench_redis_cpu_s)
assert_eq "$TOTAL" "$(xlen outbox:bench)" "relay: every event published once"
check_path
MEASURED=$((TOTAL - PRE_N))
log "measured: $MEASURED events after $PRE_N already in the stream"
# A table of a few events is not a measurement: fixed costs (the index
# read, the function's load) would weigh as per-event costs.
[ "$MEASURED" -ge $((EVENTS / 2)) ] ||
	fail "the prefill's relay published $((PRE_N - PREFILL)) of the $EVENTS measured rows: only $MEASURED left to measure (at least half are needed)"
redis_cli INFO commandstats >"$T/relay.cmdstats"
[ "$CG" = 1 ] && dump relay
fcalls=$(sed -n 's/^cmdstat_fcall:calls=\([0-9]*\),.*/\1/p' "$T/relay.cmdstats")
execs=$(sed -n 's/^cmdstat_exec:calls=\([0-9]*\),.*/\1/p' "$T/relay.cmdstats")
fcalls=${fcalls:-0} execs=${execs:-0}
# The entries the relay wrote, as plain XADDs (the prefill's apart).
BARE_PRE=$PRE_N
$PY feed "$REDIS_SOCK" outbox:bench outbox:bench "$T/xadd.resp" "$BARE_PRE" >"$T/feed.count"
assert_eq "$MEASURED" "$(cat "$T/feed.count")" "bare: every entry read back"
$PY feed "$REDIS_SOCK" outbox:bench outbox:bench "$T/prefill.resp" 0 "$BARE_PRE" >"$T/feed.count"
assert_eq "$BARE_PRE" "$(cat "$T/feed.count")" "bare: every prefill entry read back"
# ENTRY: the first measured entry's fields and values, for redis-benchmark.
mapfile -d '' -t ENTRY < <($PY entry "$REDIS_SOCK" outbox:bench "$BARE_PRE")
[ "${#ENTRY[@]}" -ge 2 ] || fail "no entry to give redis-benchmark"
# bare_prefill: the prefill's entries into the bare XADD's stream first.
bare_prefill() {
	[ "$PREFILL" -gt 0 ] || return 0
	redis_cli --pipe <"$T/prefill.resp" >"$T/pipe.log" 2>&1 || fail "redis-cli --pipe (prefill): $(tail -n 3 "$T/pipe.log")"
	assert_eq "$BARE_PRE" "$(xlen outbox:bench)" "bare: every prefill entry added"
}

# 2. The same entries as bare XADDs into a fresh Redis under callgrind.
if [ "$CG_RUN" = 1 ]; then
fresh_redis
bare_prefill
callgrind_control -z "$REDIS_PID" >/dev/null
redis_cli --pipe <"$T/xadd.resp" >"$T/pipe.log" 2>&1 || fail "redis-cli --pipe: $(tail -n 3 "$T/pipe.log")"
assert_eq "$TOTAL" "$(xlen outbox:bench)" "bare: every entry added"
dump bare
redis_stop

log "analysing the dumps"
$PY analyze "$T/cg-relay.out" "$KIND" "$T/relay.cmdstats" >"$T/relay.json"
$PY analyze "$T/cg-bare.out" bare >"$T/bare.json"
# Cross-check the parser against callgrind_annotate's inclusive cost by function.
annotated() {
	callgrind_annotate --inclusive=yes --threshold=100 "$1" 2>/dev/null |
		sed -n "s/,//g; s/^ *\([0-9]*\) .*[^a-zA-Z_]$2[^a-zA-Z_'].*/\1/p" | head -n 1
}
checks="relay fcallCommand fcall"
[ "$PUBLISH" = native ] && checks="relay execCommand exec"
for chk in "$checks" "relay xaddCommand xadd" "bare xaddCommand xadd"; do
	read -r run fn key <<<"$chk"
	assert_eq "$(annotated "$T/cg-$run.out" "$fn")" \
		"$(python3 -c "import json, sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])" "$T/$run.json" "$key")" \
		"$run: $fn's inclusive instructions as callgrind_annotate counts them"
done
fi

# 3. Optional: both again without valgrind, Redis CPU from INFO (noisy).
if [ "$CPU_RUN" = 1 ]; then
	CG=0
	if [ "$CG_RUN" = 1 ]; then
		fresh_redis
		prefill b_cpu
		c0=$(bench_redis_cpu_s)
		relay_run_until "$end" --slot b_cpu --dedup-window 1h --publish "$PUBLISH" || fail "relay (cpu) exit $RELAY_RC"
		c1=$(bench_redis_cpu_s)
		assert_eq "$TOTAL" "$(xlen outbox:bench)" "relay (cpu): every event published once"
	fi
	fresh_redis
	bare_prefill
	c2=$(bench_redis_cpu_s)
	redis_cli --pipe <"$T/xadd.resp" >"$T/pipe.log" 2>&1 || fail "redis-cli --pipe (cpu)"
	c3=$(bench_redis_cpu_s)
	assert_eq "$((BARE_PRE + MEASURED))" "$(xlen outbox:bench)" "bare (cpu): every entry added"
	# issue 24's baseline: redis-benchmark's 50 clients, 64 commands deep
	c4=$(bench_redis_cpu_s)
	redis-benchmark -s "$REDIS_SOCK" -P 64 -n "$MEASURED" -q XADD outbox:rb '*' "${ENTRY[@]}" >"$T/rb.log" 2>&1 ||
		fail "redis-benchmark: $(tail -n 3 "$T/rb.log")"
	c5=$(bench_redis_cpu_s)
	# (it sends whole pipelines, so it may add a few more than asked)
	rb_n=$(xlen outbox:rb)
	assert_ge "$rb_n" "$MEASURED" "redis-benchmark: every XADD added"
	redis_stop
	awk -v a="$c0" -v b="$c1" -v c="$c2" -v d="$c3" -v e="$c4" -v f="$c5" -v n="$((TOTAL - PRE_N))" -v m="$MEASURED" -v r="$rb_n" 'BEGIN {
		printf "{\"relay_us\": %.4f, \"bare_us\": %.4f, \"rb_us\": %.4f}\n", (b - a) * 1e6 / n, (d - c) * 1e6 / m, (f - e) * 1e6 / r }' >"$T/cpu.json"
fi

if [ "$CG_RUN" = 0 ]; then
	{
		echo
		echo "Redis CPU per event, redis-server $(redis-server --version | sed 's/.*v=\([^ ]*\).*/\1/'), $MEASURED events" \
			"(UUID ids) after $PRE_N already in the window, relay defaults on --publish $PUBLISH, no persistence;" \
			"$execs EXECs, $fcalls FCALLs; bare XADD: the same entries through redis-cli --pipe"
		$PY cpu "$T/cpu.json" "$PUBLISH"
	} | tee "$T/table.txt"
	if [ -n "${OUT:-}" ]; then
		mkdir -p "$OUT"
		cp "$T/cpu.json" "$T/relay.cmdstats" "$T/table.txt" "$OUT/"
	fi
	pass
fi
{
	echo
	echo "Redis instructions per event (callgrind), redis-server $(redis-server --version |
		sed 's/.*v=\([^ ]*\).*/\1/'), $MEASURED events (UUID ids) after $PRE_N already in the window, relay defaults (--dedup-window 1h,"
	if [ "$PUBLISH" = native ]; then
		echo "watermark) on --publish native, no persistence; $execs EXECs ($((MEASURED / (execs > 0 ? execs : 1))) events per EXEC)," \
			"$fcalls FCALLs; bare XADD: the same entries through redis-cli --pipe"
	else
		echo "watermark), no persistence; $fcalls FCALLs ($((MEASURED / (fcalls > 0 ? fcalls : 1))) events per FCALL);" \
			"bare XADD: the same entries through redis-cli --pipe"
	fi
	echo
	$PY report "$T/relay.json" "$T/bare.json" "$MEASURED" "$T/cpu.json"
} | tee "$T/table.txt"
if [ -n "${OUT:-}" ]; then
	mkdir -p "$OUT"
	cp "$T"/cg-*.out "$T"/*.json "$T/relay.cmdstats" "$T/table.txt" "$OUT/"
fi
pass
