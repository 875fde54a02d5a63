#!/bin/bash
# ceiling_window.sh - Redis's ceiling (issue 24) over a wide dedup window:
# what a capped redis-server publishes through the relay, against bare XADDs
# of the same entries, when the window already holds many ids, as it does in
# production (bench.sh's drains all start from an empty one).
#
#   tests/bench/ceiling_window.sh [EVENTS]      (default 100000)
#
# Needs root (a CPU cgroup). One relay (--publish native, its defaults with
# --dedup-window 1h) streams one slot into one redis-server throughout, as in
# production: it drains PREFILL (default 2000000) outbox rows (random UUID
# ids, 1000 per transaction, one stream) first, uncapped, so the window holds
# them and the relay's own id record knows them. Then ROUNDS (default 3)
# rounds, each: the stream trimmed to nothing (its watermark and the dedup
# buckets stay), Redis saved (uncapped), the relay stopped (SIGSTOP) while
# EVENTS rows are written, redis-server capped at REDIS_CPU_QUOTA (default 10)
# % of one core, the relay continued (SIGCONT) until the stream holds the
# round's rows. Afterwards, for each round, a capped redis-server loads that
# round's save and gets the entries the relay wrote in the round as bare
# XADDs through redis-cli --pipe.
#
# Per run: events/s by Redis's own clock (first to last stream entry id of the
# run) and Redis's CPU µs per event (INFO used_cpu_*); relay ÷ bare of the
# rates, per round: 0.5 or more is a cost within 2× a bare XADD's at the
# ceiling. OUT=DIR keeps the table.
#
# PERF=1: also perf record (cpu-clock samples, 999 a second) of the
# redis-server during round 1 of the relay and of the bare XADDs, and the
# functions that took most of its samples in each (perf from linux-perf;
# redis-server's own symbols).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
EVENTS=${1:-100000}
PREFILL=${PREFILL:-2000000}
ROUNDS=${ROUNDS:-3}
QUOTA=${REDIS_CPU_QUOTA:-10}
for v in "$EVENTS" "$PREFILL" "$ROUNDS" "$QUOTA"; do
	case $v in '' | *[!0-9]*) echo "ceiling_window: EVENTS, PREFILL, ROUNDS and REDIS_CPU_QUOTA are numbers, not '$v'" >&2; exit 2 ;; esac
done
[ "$QUOTA" -ge 1 ] && [ "$QUOTA" -le 100 ] || { echo "ceiling_window: REDIS_CPU_QUOTA is 1..100 (% of one core)" >&2; exit 2; }
[ "$ROUNDS" -ge 1 ] || { echo "ceiling_window: ROUNDS is at least 1" >&2; exit 2; }

. "$ROOT/tests/bench/lib.sh"
[ -n "${NEW_BIN:-}" ] || NEW_BIN=$(bench_relay_bin)
export TESTS_DIR=$ROOT/tests RELAY_LOG_LEVEL=info RELAY_TIMEOUT=3600 RELAY_BIN=$NEW_BIN
. "$ROOT/tests/integration/lib.sh"
setup_tmp
# The cgroup goes too, once its redis-server is gone; then setup_tmp's cleanup.
trap '_rc=$?; [ -z "${REDIS_PID:-}" ] || kill -9 "$REDIS_PID" 2>/dev/null; bench_cpu_cap_done; (exit $_rc); _cleanup' EXIT
pg_start
load_schema

# perf_start NAME / perf_stop: PERF=1's samples of the redis-server while NAME runs.
PERF=${PERF:-0}
PERF_PID=
perf_start() {
	[ "$PERF" = 1 ] || return 0
	perf record -F 999 -g -o "$T/perf.$1.data" -p "$REDIS_PID" >"$T/perf.$1.log" 2>&1 &
	PERF_PID=$!
	wait_for "grep -q . '$T/perf.$1.log' || [ -s '$T/perf.$1.data' ]" 10 || true
}
perf_stop() {
	[ -n "$PERF_PID" ] || return 0
	kill -INT "$PERF_PID" 2>/dev/null || true
	wait "$PERF_PID" 2>/dev/null || true
	PERF_PID=
}

# measure WHAT: WHAT's row (rate by the entries' ids, Redis's CPU per event
# since C0) appended to $T/runs.
measure() {
	local c1 rate
	c1=$(bench_redis_cpu_s)
	rate=$(python3 - "$REDIS_SOCK" "$ROOT/tests/bench" <<-'PY'
		import sys
		sys.path.insert(0, sys.argv[2])
		from bench import Redis
		c = Redis(sys.argv[1])
		first = c.call("XRANGE", "outbox:bench", "-", "+", "COUNT", "1")[0][0]
		last = c.call("XREVRANGE", "outbox:bench", "+", "-", "COUNT", "1")[0][0]
		n = c.call("XLEN", "outbox:bench")
		ms = int(last.split("-")[0]) - int(first.split("-")[0])
		print("%.0f" % ((n - 1) * 1000.0 / max(ms, 1)))
	PY
	)
	printf '%s %s %s\n' "$1" "$rate" "$(awk -v a="$C0" -v b="$c1" -v n="$EVENTS" 'BEGIN { printf "%.2f", (b - a) * 1e6 / n }')" >>"$T/runs"
	log "$1: $(tail -n 1 "$T/runs")"
}

slot_create pre
redis_start
relay_start --slot pre --dedup-window 1h --publish native
wait_for "slot_active pre" 30 || fail "the relay does not stream"
bench_outbox_rows "$PREFILL"
wait_for "[ \$(xlen outbox:bench) -ge $PREFILL ]" 3600 || fail "prefill: $(xlen outbox:bench) of $PREFILL rows published"
assert_eq "$PREFILL" "$(xlen outbox:bench)" "prefill: every row once"
WINDOW=$(python3 - "$REDIS_SOCK" "$ROOT/tests/bench" <<-'PY'
	import sys
	sys.path.insert(0, sys.argv[2])
	from bench import Redis
	c = Redis(sys.argv[1])
	keys, ids, cur = 0, 0, "0"
	while True:
	    cur, ks = c.call("SCAN", cur, "TYPE", "hash", "COUNT", "10000")
	    for k in ks:
	        if k.count(":") >= 4:  # a bucket's hash "<base>:<S>:<b>:<j>", not the index
	            keys += 1
	            ids += c.call("HLEN", k) - c.call("HEXISTS", k, "")  # less the hash's own marker
	    if cur == "0":
	        break
	print(keys, ids)
PY
)
log "window: $WINDOW (dedup hashes, ids)"

: >"$T/runs"
: >"$T/cmds"
for r in $(seq 1 "$ROUNDS"); do
	redis_cli XTRIM outbox:bench MAXLEN 0 >/dev/null
	assert_eq OK "$(redis_cli SAVE)" "round $r: saved"
	cp "$T/redis/dump.rdb" "$T/round$r.rdb"
	kill -STOP "$RELAY_PID"
	bench_outbox_rows "$EVENTS"
	bench_cpu_cap "$QUOTA" "$REDIS_PID" || fail "could not cap redis-server (above)"
	C0=$(bench_redis_cpu_s)
	redis_cli CONFIG RESETSTAT >/dev/null
	[ "$r" != 1 ] || perf_start relay
	kill -CONT "$RELAY_PID"
	wait_for "[ \$(xlen outbox:bench) -ge $EVENTS ]" 3600 || fail "round $r: $(xlen outbox:bench) of $EVENTS rows published"
	perf_stop
	assert_eq "$EVENTS" "$(xlen outbox:bench)" "round $r: every row once"
	measure "relay $r"
	redis_cli INFO commandstats | tr -d '\r' | sed -n 's/^cmdstat_\([a-z]*\):calls=\([0-9]*\),usec=\([0-9]*\),.*/\1 \2 \3/p' |
		awk -v r="$r" -v n="$EVENTS" '$1 != "config" && $1 != "info" && $1 != "xlen" && $1 != "xrange" && $1 != "xrevrange" { printf "%s %s %.3f %.2f\n", r, $1, $2 / n, $3 / n }' >>"$T/cmds"
	python3 "$ROOT/tests/bench/bench.py" bare "$REDIS_SOCK" 'outbox:bench' "$T/bare$r.resp" >/dev/null
	bench_cpu_uncap "$REDIS_PID"
done
relay_stop 60
assert_eq 0 "$RELAY_RC" "the relay stopped cleanly"
SKIPPED=$(bench_final_field "$RELAY_LOG" lookups_skipped)
GROUPS_N=$(bench_final_field "$RELAY_LOG" native_groups)
redis_stop

for r in $(seq 1 "$ROUNDS"); do
	rm -rf "$T/redis"
	mkdir -p "$T/redis"
	cp "$T/round$r.rdb" "$T/redis/dump.rdb"
	redis_start
	bench_cpu_cap "$QUOTA" "$REDIS_PID" || fail "could not cap redis-server (above)"
	assert_eq 0 "$(xlen outbox:bench)" "bare $r: round $r's save loaded, its stream empty"
	C0=$(bench_redis_cpu_s)
	[ "$r" != 1 ] || perf_start bare
	redis-cli -s "$REDIS_SOCK" --pipe <"$T/bare$r.resp" >"$T/bare.pipe" 2>&1 || fail "bare: redis-cli --pipe: $(tail -n 3 "$T/bare.pipe")"
	perf_stop
	grep -q "errors: 0, replies: $EVENTS" "$T/bare.pipe" || fail "bare $r: $(tail -n 1 "$T/bare.pipe")"
	assert_eq "$EVENTS" "$(xlen outbox:bench)" "bare $r: every entry once"
	measure "bare $r"
	redis_stop
done

python3 - "$T/runs" "$WINDOW" "$EVENTS" "$QUOTA" "$(redis-server --version | grep -o 'v=[0-9.]*')" \
	"$SKIPPED" "$GROUPS_N" "$PREFILL" >"$T/table.md" <<-'PY'
	import sys, statistics as st
	runs, window, n, quota, ver, skipped, groups, pre = sys.argv[1:]
	keys, ids = window.split()
	rows = {}
	for l in open(runs):
	    what, r, rate, cpu = l.split()
	    rows.setdefault(what, {})[int(r)] = (float(rate), float(cpu))
	rounds = sorted(rows["relay"])
	print("One relay over a window of {:,} ids in {:,} dedup hashes (its own drain of {:,} rows), then {} "
	      "rounds of {:,} new events each, redis-server {} capped at {} % of one core; the relay's lookups "
	      "left out by its id record over the whole run: {:,}, groups: {:,}\n".format(
	          int(ids), int(keys), int(pre), len(rounds), int(n), ver, quota, int(skipped or 0), int(groups or 0)))
	print("| run | events/s (median; rounds) | Redis CPU µs/event (median; rounds) | relay ÷ bare, rate (median; rounds) |")
	print("|---|---:|---:|---:|")
	for what in ("relay", "bare"):
	    x = rows[what]
	    ratio = [x[r][0] / rows["bare"][r][0] for r in rounds]
	    print("| %s | {:,.0f} (%s) | %.2f (%s) | %.2f (%s) |".format(st.median([x[r][0] for r in rounds])) % (
	        what, " ".join("%.0f" % x[r][0] for r in rounds), st.median([x[r][1] for r in rounds]),
	        " ".join("%.2f" % x[r][1] for r in rounds), st.median(ratio), " ".join("%.2f" % v for v in ratio)))
PY
python3 - "$T/cmds" >>"$T/table.md" <<-'PY'
	import sys, statistics as st
	c = {}
	for l in open(sys.argv[1]):
	    r, cmd, calls, usec = l.split()
	    c.setdefault(cmd, []).append((float(calls), float(usec)))
	print("\nThe relay's commands (INFO commandstats, per event, medians of the rounds; µs by the wall "
	      "clock around each command, so under the cap they include the time the kernel held Redis back):\n")
	print("| command | calls/event | µs/event |")
	print("|---|---:|---:|")
	for cmd, v in sorted(c.items(), key=lambda kv: -st.median([u for _, u in kv[1]])):
	    print("| %s | %.3f | %.2f |" % (cmd.upper(), st.median([k for k, _ in v]), st.median([u for _, u in v])))
PY
if [ "$PERF" = 1 ]; then
	for w in relay bare; do
		printf '\nredis-server during round 1 (%s): the functions with most samples (perf, self)\n\n| share | function |\n|---:|---|\n' "$w"
		perf report -i "$T/perf.$w.data" --no-children --sort symbol --stdio -g none 2>/dev/null |
			sed -n 's/^ *\([0-9.]*%\) *\[[.k]\] \([^ ]*\).*/| \1 | \2 |/p' | awk 'NR <= 25'
	done >>"$T/table.md"
fi
cat "$T/table.md"
[ -z "${OUT:-}" ] || { mkdir -p "$OUT" && cp "$T/table.md" "$T/runs" "$T/cmds" "$OUT/"; }
pass
