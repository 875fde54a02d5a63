#!/bin/bash
# dedup_mem.sh - what the exactly-once (dedup) state costs Redis per event, in
# memory and in CPU, for a relay "before" (a git ref, default cdfcce6: one
# string key with a TTL per event id) and "after" (this tree: time buckets of
# listpack hashes, binary ids; see README "Dedup state"). Issue 11 §1.
#
#   tests/bench/dedup_mem.sh [EVENTS]      (default 100000)
#
# Environment: OLD_REF (git ref of "before", default cdfcce6), OLD_BIN / NEW_BIN
# (use these binaries instead of building), ROUNDS (default 3), RATE (events/s
# of the steady run, default 5000), STEADY_SECS (its length, default 80: five buckets).
#
# Six runs per relay, each on a fresh redis-server (unix socket, no persistence):
#   burst:  EVENTS outbox rows (UUID ids, 1000 per transaction) committed, then
#           drained with the default --dedup-window 1h: every id is inside the
#           window (one bucket, sized at once from the backlog the relay
#           found at start). bytes/event = (used_memory after - before - MEMORY
#           USAGE of the stream) / EVENTS, i.e. the dedup state plus the
#           watermark ("streams del": the same after DEL of the streams, without
#           MEMORY USAGE's estimate). ROUNDS rounds.
#   live:   the same rows committed (as fast as PostgreSQL takes them) while the
#           relay streams: it has no backlog to size the bucket from, so the
#           bucket grows from one hash by splits. ROUNDS rounds.
#   lifecycle, live-lifecycle: the burst and the live run again with
#           --dedup-window LIFE_WINDOW (default 20), Redis CPU counted until
#           the dedup state has expired (see each below).
#   steady: --dedup-window 8 (buckets of 16 s: lookups read the previous
#           bucket during a bucket's first 8 s, each new bucket starts at the
#           size the last one ended with) while rows arrive at RATE/s for
#           STEADY_SECS s, ids expiring all along (the old layout's expiry
#           costs CPU here). Its bytes/event divides by the ids inside the
#           window at the end (RATE * 8); ids live one to three windows, so
#           expect about twice the burst figure (the old layout: one). CPU
#           counted after two buckets (see below).
# Redis CPU per event: INFO cpu used_cpu_user + used_cpu_sys of redis-server
# over the run / events; and INFO commandstats usec of fcall / events (the
# function alone). Starts its own PostgreSQL 15 + redis-server with the
# integration harness; installs nothing; builds release binaries (build-bench/
# for this tree, a temp dir for OLD_REF) unless OLD_BIN / NEW_BIN are set.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
EVENTS=${1:-100000}
ROUNDS=${ROUNDS:-3}
RATE=${RATE:-5000}
STEADY_SECS=${STEADY_SECS:-80}
OLD_REF=${OLD_REF:-cdfcce6}

. "$ROOT/tests/bench/lib.sh"
[ -n "${NEW_BIN:-}" ] || NEW_BIN=$(bench_relay_bin)
[ -n "${OLD_BIN:-}" ] || OLD_BIN=$(bench_old_relay_bin "$OLD_REF")

export TESTS_DIR=$ROOT/tests RELAY_LOG_LEVEL=info RELAY_TIMEOUT=600 RELAY_BIN=$NEW_BIN
. "$ROOT/tests/integration/lib.sh"
setup_tmp
pg_start
load_schema

info() { redis_cli INFO "$1" | tr -d '\r' | sed -n "s/^$2:\([^,]*\).*/\1/p"; }
fcall_usec() {
	redis_cli INFO commandstats | tr -d '\r' | sed -n 's/^cmdstat_fcall:calls=\([0-9]*\),usec=\([0-9]*\),.*/\2 \1/p'
}
fresh_redis() {
	redis_stop
	rm -rf "$T/redis"
	redis_start
}
# measure NAME EVENTS INWINDOW: print one result line for the current Redis,
# against the counters saved by start_measure.
start_measure() {
	M0=$(info memory used_memory) C0=$(bench_redis_cpu_s)
	redis_cli CONFIG RESETSTAT >/dev/null
}
measure() {
	local name=$1 n=$2 inwin=$3 m1 c1 st fu fc keys enc
	m1=$(info memory used_memory) c1=$(bench_redis_cpu_s)
	st=0
	for s in $(redis_cli --scan --pattern 'outbox:*'); do
		[ "$(redis_cli TYPE "$s")" = stream ] || continue
		st=$((st + $(redis_cli MEMORY USAGE "$s" SAMPLES 0)))
	done
	read -r fu fc <<<"$(fcall_usec)"
	keys=$(redis_cli DBSIZE)
	# The same without the stream's own estimate: delete the streams, count what is left.
	for s in $(redis_cli --scan --pattern 'outbox:*'); do redis_cli DEL "$s" >/dev/null; done
	m2=$(info memory used_memory)
	redis_cli --scan --pattern 'outbox-relay:dd:*:*' >"$T/scan"
	enc=$(sed -n '1,200p' "$T/scan" | while read -r k; do redis_cli OBJECT ENCODING "$k"; done |
		grep . | sort | uniq -c | tr -s ' \n' ' ' || true)
	awk -v name="$name" -v n="$n" -v w="$inwin" -v m0="$M0" -v m1="$m1" -v st="$st" -v c0="$C0" \
		-v c1="$c1" -v fu="${fu:-0}" -v fc="${fc:-0}" -v keys="$keys" -v enc="${enc:-none}" -v m2="$m2" \
		'BEGIN { printf "%s\t%d\t%d\t%.1f\t%.1f\t%.2f\t%.2f\t%d\t%d\t%s\n", name, n, w, (m1 - m0 - st) / w,
			 (m2 - m0) / w, (c1 - c0) * 1000000 / n, fu / n, fc, keys, enc }'
}

RESULTS=$T/results.tsv
: >"$RESULTS"

# burst: all contenders' slots see the same rows.
for r in $(seq 1 "$ROUNDS"); do
	slot_create "b_old_$r"
	slot_create "b_new_$r"
done
bench_outbox_rows "$EVENTS"
end=$(current_lsn)
for r in $(seq 1 "$ROUNDS"); do
	for who in old new; do
		bin=$OLD_BIN
		[ "$who" = new ] && bin=$NEW_BIN
		fresh_redis
		start_measure
		RELAY_BIN=$bin relay_run_until "$end" --slot "b_${who}_$r" || fail "relay ($who) exit $RELAY_RC"
		assert_eq "$EVENTS" "$(xlen outbox:bench)" "burst $who round $r: every event published"
		measure "burst-$who" "$EVENTS" "$EVENTS" >>"$RESULTS"
	done
done

# live: the burst committed while a relay streams, caught up.
for r in $(seq 1 "$ROUNDS"); do
	for who in old new; do
		bench_streaming "$who" "v_$who"
		start_measure
		bench_outbox_rows "$EVENTS"
		wait_for "[ \"\$(xlen outbox:bench)\" -ge $EVENTS ]" 120 || fail "live $who: not all published"
		measure "live-$who" "$EVENTS" "$EVENTS" >>"$RESULTS"
		relay_stop
		psql_q "SELECT pg_drop_replication_slot('v_$who')" >/dev/null # max_replication_slots
	done
done

# lifecycle: the burst again, with --dedup-window LIFE_WINDOW (default 20 s),
# and Redis CPU counted until the dedup state has expired away (DBSIZE back
# to the few keys that stay: stream, watermark, slot record, index), less
# Redis's idle CPU over the same time (measured right after, idle). The
# old layout pays for its 100k expiries here, which a burst inside a 1 h
# window never shows; the new one for its bucket hashes expiring whole.
LIFE_WINDOW=${LIFE_WINDOW:-20}
# until_expired NAME: wait until the dedup state has expired (DBSIZE back to
# the few keys that stay), then one result line: Redis CPU per event since
# c0/t0 (set by the caller), less Redis's idle CPU over the same time
# (measured right after, 10 s).
until_expired() {
	local c1 t1 c2
	wait_for '[ "$(redis_cli DBSIZE)" -le 6 ]' $((3 * LIFE_WINDOW + 120)) ||
		fail "$1: the dedup state did not expire ($(redis_cli DBSIZE) keys)"
	c1=$(bench_redis_cpu_s)
	t1=$(date +%s%N)
	sleep 10
	c2=$(bench_redis_cpu_s)
	awk -v name="$1" -v n="$EVENTS" -v c0="$c0" -v c1="$c1" -v c2="$c2" -v t0="$t0" -v t1="$t1" \
		'BEGIN { idle = (c2 - c1) / 10; el = (t1 - t0) / 1e9;
			 printf "%s\t%d\t%d\t-\t-\t%.2f\t-\t-\t-\t(%.0f s until expired, idle %.4f s/s subtracted)\n",
				name, n, n, ((c1 - c0) - idle * el) * 1e6 / n, el, idle }' >>"$RESULTS"
}
slot_create l_old
slot_create l_new
bench_outbox_rows "$EVENTS"
lend=$(current_lsn)
for who in old new; do
	bin=$OLD_BIN
	[ "$who" = new ] && bin=$NEW_BIN
	fresh_redis
	c0=$(bench_redis_cpu_s)
	t0=$(date +%s%N)
	RELAY_BIN=$bin relay_run_until "$lend" --slot "l_$who" --dedup-window "$LIFE_WINDOW" ||
		fail "relay ($who) exit $RELAY_RC"
	assert_eq "$EVENTS" "$(xlen outbox:bench)" "lifecycle $who: every event published"
	until_expired "lifecycle-$who"
done

# live-lifecycle: the live run's whole life. The rows committed while a relay
# streams with --dedup-window LIFE_WINDOW, starting right after a bucket
# boundary (so the burst fills one first bucket from nothing, by splits),
# Redis CPU counted until the dedup state has expired, less idle CPU with
# the relay still running. What the new layout pays for growing its first
# bucket, against what the old one pays for expiring one key per id.
for who in old new; do
	bench_streaming "$who" "lv_$who" --dedup-window "$LIFE_WINDOW"
	while [ $(($(date +%s) % (2 * LIFE_WINDOW))) -ne 0 ]; do sleep 0.1; done
	c0=$(bench_redis_cpu_s)
	t0=$(date +%s%N)
	bench_outbox_rows "$EVENTS"
	wait_for "[ \"\$(xlen outbox:bench)\" -ge $EVENTS ]" 120 || fail "live-lifecycle $who: not all published"
	until_expired "live-lifecycle-$who"
	relay_stop
	psql_q "SELECT pg_drop_replication_slot('lv_$who')" >/dev/null
	assert_eq "$EVENTS" "$(xlen outbox:bench)" "live-lifecycle $who: every event published once"
done

# steady: rows arrive at RATE/s while the relay runs, --dedup-window 8.
# Memory counted from the start, CPU after two buckets (4 windows + 1 s: the
# first bucket grows from nothing by splits, the live run's case, and the
# second is sized from the part of it the relay saw), per event from then on.
win=8
secs=$STEADY_SECS
per=$((RATE / 10))
for who in old new; do
	bench_streaming "$who" "s_$who" --dedup-window "$win"
	base=$(xlen outbox:bench)
	start_measure
	bench_paced_rows "$secs" "$per" &
	sleep $((4 * win + 1))
	x1=$(xlen outbox:bench) C0=$(bench_redis_cpu_s)
	redis_cli CONFIG RESETSTAT >/dev/null
	wait $!
	n=$((secs * 10 * per))
	wait_for "[ \"\$(xlen outbox:bench)\" -ge $((base + n)) ]" 60 || fail "steady $who: not all published"
	measure "steady-$who" $((base + n - x1)) $((RATE * win)) >>"$RESULTS"
	relay_stop
done

echo
echo "dedup state per event (Redis $(redis-server --version | sed 's/.*v=\([^ ]*\).*/\1/')), $EVENTS events; before = $OLD_REF, after = this tree"
printf '%-13s %7s %9s %12s %12s %13s %12s %7s %7s %s\n' run events in-window bytes/event "(streams del)" "cpu µs/event" "fcall µs/ev" calls keys "encodings (<=200 dedup hashes)"
sort -s -k1,1 "$RESULTS" | awk -F'\t' '{ printf "%-13s %7s %9s %12s %12s %13s %12s %7s %7s %s\n", $1, $2, $3, $4, $5, $6, $7, $8, $9, $10 }'
pass
