#!/bin/bash
# record_seed.sh - what reading a live dedup bucket into the id record
# (--dedup-record-seed) costs Redis and saves it, for a relay that starts
# over a window it did not write itself (a restart, a deploy, a reconnect).
#
#   tests/bench/record_seed.sh [EVENTS]      (default 40000)
#
# One Redis state is made once: PREFILL (default 100000) outbox rows drained
# by a relay (--publish native) into an empty redis-server, saved as an RDB.
# Then, for each N of SEEDS (default "0 1024 4096"), a redis-server loads a
# copy of that RDB and a new relay, with --dedup-record-seed N, drains the
# same EVENTS rows that follow (random UUID ids, 1000 per transaction, one
# stream, --dedup-window 1h, no persistence) from a slot of its own, all
# made at the same position before the rows were written. Every run starts
# from the same window, the same buckets and the same K, so what differs is
# only what the relay reads and leaves out.
#
# Per run: the relay's lookups_skipped and record_ids_read (its final line);
# Redis's HMGET and HKEYS calls per event and their µs (INFO commandstats);
# with CG=1 (the default) Redis's instructions per event for the whole
# process under callgrind (repeatable whatever else the machine runs); and
# Redis's CPU µs per event (INFO used_cpu_*, noisy on a busy machine).
# Environment: NEW_BIN (the relay; default this tree's release build in
# build-bench/), PREFILL, SEEDS, CG (0: no valgrind), OUT (keep the table).
#
# LAT_RATE=R (with LAT_SECS, default 10): instead of the drain, a steady rate
# right after the start. For each N a relay (--dedup-record-seed N) starts on
# its own slot over a copy of the window, caught up, and pgbench commits R
# one-row transactions a second into the same stream for LAT_SECS seconds.
# Per run: commit → XADD (the entry id's time) p50 / p99 / p99.9 / max ms
# over all of them and over those committed in the first second, and the
# relay's ids read and lookups left out. What reading the window costs the
# first groups after a start shows here as their latency.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
EVENTS=${1:-40000}
PREFILL=${PREFILL:-100000}
SEEDS=${SEEDS:-0 1024 4096}
LAT_RATE=${LAT_RATE:-}
LAT_SECS=${LAT_SECS:-10}
for v in "$EVENTS" "$PREFILL" $SEEDS $LAT_RATE "$LAT_SECS"; do
	case $v in '' | *[!0-9]*) echo "record_seed: EVENTS, PREFILL, SEEDS, LAT_RATE and LAT_SECS are numbers, not '$v'" >&2; exit 2 ;; esac
done
CG_RUN=${CG:-1}
[ -z "$LAT_RATE" ] || CG_RUN=0
[ "$CG_RUN" = 0 ] || command -v valgrind >/dev/null ||
	{ echo "record_seed: needs valgrind (apt-get install valgrind), or CG=0" >&2; exit 2; }

. "$ROOT/tests/bench/lib.sh"
[ -n "${NEW_BIN:-}" ] || NEW_BIN=$(bench_relay_bin)
export TESTS_DIR=$ROOT/tests RELAY_LOG_LEVEL=info RELAY_TIMEOUT=1800 RELAY_BIN=$NEW_BIN
. "$ROOT/tests/integration/lib.sh"
setup_tmp
pg_start
load_schema

# redis-server under callgrind while CG=1 (the measured runs), else plain.
CG=0
redis_server() { bench_redis_server "$@"; }
# cmdstat NAME FIELD: calls or usec of command NAME in $T/cmdstats (0 if it never ran).
cmdstat() {
	local v
	v=$(tr -d '\r' <"$T/cmdstats" | sed -n "s/^cmdstat_$1:/,/p" | sed -n "s/.*,$2=\([0-9]*\).*/\1/p")
	echo "${v:-0}"
}

# window_load N: a redis-server over a copy of the saved window, for setting N.
window_load() {
	rm -rf "$T/redis"
	mkdir -p "$T/redis"
	cp "$T/prefill.rdb" "$T/redis/dump.rdb"
	redis_start
	assert_eq "$PRE_N" "$(xlen outbox:bench)" "N=$1: the saved window loaded"
}
# run_done N: setting N's row logged, its Redis stopped.
run_done() {
	log "N=$1: $(tail -n 1 "$T/table.md")"
	redis_stop
}
# table_done: the table printed (and kept in OUT); the run passed.
table_done() {
	cat "$T/table.md"
	[ -z "${OUT:-}" ] || { mkdir -p "$OUT" && cp "$T/table.md" "$OUT/"; }
	pass
}

# seed_latency: the LAT_RATE runs (see the header), one per N of SEEDS.
seed_latency() {
	local n rows last want prev=0
	cat >"$T/lat.sql" <<-'EOF'
		INSERT INTO public.outbox (aggregate_type, aggregate_id, event_type, payload) VALUES ('bench', :client_id, 'lat', '{"n": 1}');
	EOF
	printf '%s\n' "relay --dedup-record-seed N started over a window of $PRE_N ids it did not write, then $LAT_RATE one-row transactions/s for $LAT_SECS s ($(redis-server --version | grep -o 'v=[0-9.]*'))" \
		"" \
		"| N | events | ids read into the record | lookups left out | commit → XADD ms: p50 / p99 / p99.9 / max | the first second's: events, p99 / max | groups |" \
		"|---:|---:|---:|---:|---|---|---:|" >"$T/table.md"
	for n in $SEEDS; do
		window_load "$n"
		last=$(redis_cli XREVRANGE outbox:bench + - COUNT 1 | head -n 1)
		slot_create "l_$n"
		OUTBOX_RELAY_DEDUP_RECORD_SEED=$n relay_start --slot "l_$n" --dedup-window 1h --publish native
		wait_for "slot_active l_$n" 30 || fail "N=$n: the relay did not start streaming"
		"$PG_BINDIR/pgbench" -n -M prepared -f "$T/lat.sql" -R "$LAT_RATE" -T "$LAT_SECS" -c 4 -j 2 \
			-h "$T" -p "$PGPORT" -U postgres postgres >"$T/pgbench.$n.log" 2>&1 ||
			{ cat "$T/pgbench.$n.log" >&2; fail "N=$n: pgbench failed"; }
		# this run's rows: those committed since the run before
		rows=$(psql_q "SELECT count(*) FROM outbox WHERE event_type = 'lat'")
		want=$((PRE_N + rows - prev))
		prev=$rows
		wait_for "[ \$(xlen outbox:bench) -ge $want ]" 60 || fail "N=$n: $(xlen outbox:bench) entries, $want expected"
		relay_stop
		assert_eq 0 "$RELAY_RC" "N=$n: the relay stopped cleanly"
		assert_eq "$want" "$(xlen outbox:bench)" "N=$n: every row once"
		python3 - "$n" "$(final_sum "$RELAY_LOG" record_ids_read)" "$(final_sum "$RELAY_LOG" lookups_skipped)" \
			"$(final_sum "$RELAY_LOG" native_groups)" "$REDIS_SOCK" "$last" "$ROOT/tests/bench" >>"$T/table.md" <<-'PY'
				import sys
				sys.path.insert(0, sys.argv[7])
				from bench import Redis, parse_pg_ts
				n, rd, sk, gr, sock, start = sys.argv[1:7]
				c = Redis(sock)
				lat, start = [], "(" + start
				while True:
				    b = c.call("XRANGE", "outbox:bench", start, "+", "COUNT", "10000")
				    for eid, kv in b:
				        d = dict(zip(kv[::2], kv[1::2]))
				        if d.get("event_type") == "lat":
				            t = parse_pg_ts(d["_committed_at"])
				            lat.append((t, int(eid.split("-")[0]) / 1000.0 - t))
				    if len(b) < 10000:
				        break
				    start = "(" + b[-1][0]
				def q(v, p):  # nearest rank, in ms
				    v = sorted(v); return v[min(len(v) - 1, int(len(v) * p))] * 1000
				first = [l for t, l in lat if t < lat[0][0] + 1]
				all_ = [l for _, l in lat]
				print("| %s | %s | %s | %s | %.1f / %.1f / %.1f / %.1f | %s, %.1f / %.1f | %s |" % (
				    n, format(len(all_), ","), format(int(rd), ","), format(int(sk), ","), q(all_, .5), q(all_, .99),
				    q(all_, .999), max(all_) * 1000, format(len(first), ","), q(first, .99), max(first) * 1000, gr))
			PY
		run_done "$n"
	done
	table_done
}

slot_create pre
bench_outbox_rows "$PREFILL"
pre_end=$(current_lsn)
if [ -z "$LAT_RATE" ]; then
	for n in $SEEDS; do slot_create "m_$n"; done
	bench_outbox_rows "$EVENTS"
fi
end=$(current_lsn)
TOTAL=$((PREFILL + EVENTS))
log "prefill: $PREFILL rows to $pre_end; then $EVENTS rows to $end"

# The window, once: drained, saved, kept.
redis_start
relay_run_until "$pre_end" --slot pre --dedup-window 1h --publish native --max-inflight-events 256 ||
	fail "relay (prefill) exit $RELAY_RC"
PRE_N=$(xlen outbox:bench)
assert_ge "$PRE_N" "$PREFILL" "prefill: every row published"
assert_eq OK "$(redis_cli SAVE)" "prefill: saved"
cp "$T/redis/dump.rdb" "$T/prefill.rdb"
redis_stop
[ -z "$LAT_RATE" ] || { seed_latency; exit; }
MEASURED=$((TOTAL - PRE_N))
[ "$MEASURED" -ge $((EVENTS / 2)) ] || fail "the prefill's relay published $((PRE_N - PREFILL)) of the $EVENTS rows to measure"

UNDER=
[ "$CG_RUN" = 0 ] || UNDER=" (under callgrind)"
printf '%s\n' "relay --dedup-record-seed N over a window of $PRE_N ids it did not write, then $MEASURED new events ($(redis-server --version | grep -o 'v=[0-9.]*'))" \
	"" \
	"| N | ids read into the record | lookups left out | HMGET calls/event | HKEYS calls/event | HMGET + HKEYS µs/event$UNDER | Redis instructions/event | Redis CPU µs/event$UNDER | groups |" \
	"|---:|---:|---:|---:|---:|---:|---:|---:|---:|" >"$T/table.md"
for n in $SEEDS; do
	CG=$CG_RUN
	window_load "$n"
	redis_cli CONFIG RESETSTAT >/dev/null
	[ "$CG" = 0 ] || callgrind_control -z "$REDIS_PID" >/dev/null
	c0=$(bench_redis_cpu_s)
	OUTBOX_RELAY_DEDUP_RECORD_SEED=$n relay_run_until "$end" --slot "m_$n" --dedup-window 1h --publish native ||
		fail "relay (N=$n) exit $RELAY_RC"
	c1=$(bench_redis_cpu_s)
	redis_cli INFO commandstats >"$T/cmdstats"
	ir=-
	[ "$CG" = 0 ] || ir=$(bench_cg_total "seed$n")
	assert_eq "$TOTAL" "$(xlen outbox:bench)" "N=$n: every row once"
	read_ids=$(bench_final_field "$RELAY_LOG" record_ids_read)
	skipped=$(bench_final_field "$RELAY_LOG" lookups_skipped)
	[ "$n" != 0 ] || assert_eq 0 "$read_ids" "N=0: nothing read into the record"
	[ "$n" = 0 ] || assert_ge "$read_ids" 1 "N=$n: ids of the window read into the record"
	python3 - "$n" "$read_ids" "$skipped" "$MEASURED" "$(cmdstat hmget calls)" "$(cmdstat hkeys calls)" \
		"$(cmdstat hmget usec)" "$(cmdstat hkeys usec)" "$ir" "$c0" "$c1" "$(bench_final_field "$RELAY_LOG" native_groups)" \
		>>"$T/table.md" <<-'PY'
			import sys
			n, rd, sk, ev, hm, hk, hmu, hku, ir, c0, c1, gr = sys.argv[1:]
			ev = int(ev)
			irs = "-" if ir == "-" else "{:,}".format(round(int(ir) / ev))
			print("| %s | {:,} | {:,} | %.3f | %.3f | %.2f | %s | %.2f | %s |".format(int(rd), int(sk))
			      % (n, int(hm) / ev, int(hk) / ev, (int(hmu) + int(hku)) / ev, irs,
			         (float(c1) - float(c0)) * 1e6 / ev, gr))
		PY
	run_done "$n"
done
table_done
