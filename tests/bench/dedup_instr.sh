#!/bin/bash
# dedup_instr.sh - Redis's CPU cost of the publish path per event, counted in
# instructions (valgrind --tool=callgrind on redis-server), for a relay
# "before" (OLD_REF, default cdfcce6: one string key with a TTL per event id)
# and "after" (this tree: time buckets of listpack hashes). Instruction
# counts are repeatable whatever else the machine runs, unlike the CPU
# seconds dedup_mem.sh reads from INFO; use this one to compare changes to
# the function on a busy machine, dedup_mem.sh for the real-time figure.
#
#   tests/bench/dedup_instr.sh [EVENTS]      (default 20000)
#
# Environment: OLD_REF, OLD_BIN / NEW_BIN (as dedup_mem.sh), WINDOW (the
# --dedup-window of both runs, default 3600: every id of the burst in one
# bucket), RUNS (which runs, default "burst again live steady"; again
# needs burst). The runs:
#   burst: EVENTS rows (UUID ids, 1000 per transaction) committed, then
#          drained into an empty Redis (the bucket sized at once from the
#          backlog the relay found at start);
#   again: EVENTS more rows with the ids of the burst's (deleted in between),
#          drained into the Redis the burst left: every event is a duplicate
#          inside the window (the lookup path; found during the bucket's
#          second window, by the time of day, each also has its age read);
#   live:  EVENTS rows committed while the relay streams into an empty Redis
#          (no backlog at start: the bucket grows from one hash by splits);
#   steady: rows at STEADY_RATE/s while the relay streams, window
#          STEADY_WINDOW, counted after two buckets (see below).
# Prints Redis instructions per event, in all and inside FCALL alone
# (callgrind's inclusive cost of fcallCommand; evalShaCommand for a relay
# using EVALSHA), and the ratio after / before.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
EVENTS=${1:-20000}
OLD_REF=${OLD_REF:-cdfcce6}
WINDOW=${WINDOW:-3600}

command -v valgrind >/dev/null && command -v callgrind_annotate >/dev/null ||
	{ echo "dedup_instr: needs valgrind (apt-get install valgrind)" >&2; exit 2; }

. "$ROOT/tests/bench/lib.sh"
[ -n "${NEW_BIN:-}" ] || NEW_BIN=$(bench_relay_bin)
[ -n "${OLD_BIN:-}" ] || OLD_BIN=$(bench_old_relay_bin "$OLD_REF")

export TESTS_DIR=$ROOT/tests RELAY_LOG_LEVEL=info RELAY_TIMEOUT=900 RELAY_BIN=$NEW_BIN
. "$ROOT/tests/integration/lib.sh"
setup_tmp
pg_start
load_schema

# redis-server under callgrind, in the foreground of a background job (a
# daemonized child is out of callgrind_control's reach); its pidfile still
# names it. Collection is zeroed before each run and dumped after it, to
# $T/cg.<pid>.<n>.
redis_server() {
	valgrind --tool=callgrind --callgrind-out-file="$T/cg.%p" redis-server "$@" --daemonize no \
		>>"$T/valgrind.log" 2>&1 &
}

# instr FILE: total instructions and fcall's (or evalsha's) inclusive share.
instr() {
	local total fc
	total=$(sed -n 's/^summary: *\([0-9]*\).*/\1/p; s/^totals: *\([0-9]*\).*/\1/p' "$1" | tail -n 1)
	fc=$(callgrind_annotate --inclusive=yes --threshold=100 "$1" 2>/dev/null |
		sed -n 's/,//g; s/^ *\([0-9]*\) .*[^a-zA-Z_]\(fcallCommand\|evalShaCommand\)[^a-zA-Z_].*/\1/p' |
		head -n 1)
	echo "${total:-0} ${fc:-0}"
}

slot_create i_old
slot_create i_new
# measure RUN WHO END: drain the slot of WHO to END into the running Redis
# under callgrind, counting from zero; one result line.
measure() {
	local r=$1 who=$2 end=$3 bin=$OLD_BIN
	[ "$who" = new ] && bin=$NEW_BIN
	callgrind_control -z "$REDIS_PID" >/dev/null
	RELAY_BIN=$bin relay_run_until "$end" --slot "i_$who" --dedup-window "$WINDOW" ||
		fail "relay ($who, $r) exit $RELAY_RC"
	assert_eq "$EVENTS" "$(xlen outbox:bench)" "$who $r: every event published once"
	dump "$r" "$who"
}
# dump RUN WHO [EVENTS]: callgrind's counts since the last zeroing, as one
# result line (per EVENTS events, default all of the run's).
dump() {
	local r=$1 who=$2 n=${3:-$EVENTS} f tot fc
	rm -f "$T/cg.$REDIS_PID".*
	callgrind_control -d "$r" "$REDIS_PID" >/dev/null
	wait_for "ls '$T/cg.$REDIS_PID'.* >/dev/null 2>&1" 30 || fail "callgrind wrote no dump"
	f=$(ls "$T/cg.$REDIS_PID".* | head -n 1)
	read -r tot fc <<<"$(instr "$f")"
	cp "$f" "$T/cg-$r-$who.out"
	printf '%s\t%s\t%s\t%s\t%s\n' "$r" "$who" "$tot" "$fc" "$n" >>"$RESULTS"
}
RESULTS=$T/results.tsv
: >"$RESULTS"

# burst: each relay into an empty Redis; what it leaves is saved for "again".
run_burst() {
	bench_outbox_rows "$EVENTS" "md5(g::text)::uuid"
	end_burst=$(current_lsn)
	for who in old new; do
		redis_stop
		rm -rf "$T/redis"
		redis_start
		measure burst "$who" "$end_burst"
		redis_cli SAVE >/dev/null
		cp "$T/redis/dump.rdb" "$T/$who.rdb"
	done
}
# again: the same ids in new rows (the old ones deleted), each relay into
# the Redis its burst left (loaded from its RDB file).
run_again() {
	[ -f "$T/new.rdb" ] || fail "RUNS: again needs burst before it"
	psql_q "DELETE FROM outbox" >/dev/null
	bench_outbox_rows "$EVENTS" "md5(g::text)::uuid"
	end_again=$(current_lsn)
	for who in old new; do
		redis_stop
		rm -rf "$T/redis"
		mkdir -p "$T/redis"
		cp "$T/$who.rdb" "$T/redis/dump.rdb"
		redis_start
		measure again "$who" "$end_again"
	done
}
# live: the rows committed while a relay streams, caught up, into an empty Redis.
run_live() {
	for who in old new; do
		bench_streaming "$who" "v_$who" --dedup-window "$WINDOW"
		callgrind_control -z "$REDIS_PID" >/dev/null
		bench_outbox_rows "$EVENTS"
		wait_for "[ \"\$(xlen outbox:bench)\" -ge $EVENTS ]" 600 || fail "live $who: not all published"
		relay_stop 60
		assert_eq "$EVENTS" "$(xlen outbox:bench)" "$who live: every event published once"
		dump live "$who"
	done
}

# steady: rows at STEADY_RATE/s (default 1000) for STEADY_SECS s (default 40)
# while the relay streams, --dedup-window STEADY_WINDOW (default 4): each new
# bucket (two windows long) sized from the previous one, ids looked up in the
# previous bucket during a bucket's first window, ids expiring all along.
# Counted after two buckets (the first, grown from nothing by splits, is the
# live run's case; the second is sized from the part of the first the relay
# saw), per event published from then on.
STEADY_RATE=${STEADY_RATE:-1000}
STEADY_SECS=${STEADY_SECS:-40}
STEADY_WINDOW=${STEADY_WINDOW:-4}
run_steady() {
	for who in old new; do
		bench_streaming "$who" "t_$who" --dedup-window "$STEADY_WINDOW"
		x0=$(xlen outbox:bench)
		per=$((STEADY_RATE / 10))
		bench_paced_rows "$STEADY_SECS" "$per" &
		sleep $((4 * STEADY_WINDOW + 1))
		x1=$(xlen outbox:bench)
		callgrind_control -z "$REDIS_PID" >/dev/null
		wait $!
		total=$((x0 + STEADY_SECS * 10 * per))
		wait_for "[ \"\$(xlen outbox:bench)\" -ge $total ]" 600 || fail "steady $who: not all published"
		relay_stop 60
		assert_eq "$total" "$(xlen outbox:bench)" "$who steady: every event published once"
		dump steady "$who" $((total - x1))
	done
}
for r in ${RUNS:-burst again live steady}; do
	case $r in
	burst | again | live | steady) "run_$r" ;;
	*) fail "RUNS: no run named $r (burst, again, live, steady)" ;;
	esac
done

echo
echo "Redis instructions per event (callgrind, redis-server $(redis-server --version |
	sed 's/.*v=\([^ ]*\).*/\1/')), $EVENTS events, --dedup-window $WINDOW; before = $OLD_REF, after = this tree"
printf '%-7s %14s %14s %14s %14s %8s %8s\n' run "before total" "after total" "before fcall" "after fcall" ratio "fcall"
for r in ${RUNS:-burst again live steady}; do
	awk -F'\t' -v r="$r" '
		$1 == r && $2 == "old" { ot = $3 / $5; of = $4 / $5 }
		$1 == r && $2 == "new" { nt = $3 / $5; nf = $4 / $5 }
		END { printf "%-7s %14.0f %14.0f %14.0f %14.0f %8.3f %8.3f\n", r, ot, nt, of, nf,
			nt / ot, (of > 0 ? nf / of : 0) }' "$RESULTS"
done
pass
