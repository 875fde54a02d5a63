#!/bin/bash
# pgoutput_stream.sh - how long the walsender takes to hand over one large
# transaction, by decoder (issue 22's item 6): pg_recvlogical (no relay, no
# Redis) on the same backlog, each contender on a slot of its own, rounds
# interleaved.
#
#   tests/bench/pgoutput_stream.sh [ROWS] [ROUNDS]     (defaults 1000000, 3)
#
# The backlog: ROWS outbox rows in ONE transaction (the bench's tx1M shape).
# Contenders:
#   wal2json       the options the relay sends wal2json (format-version 2 ...)
#   pgoutput       the options the relay sends pgoutput (proto_version 1,
#                  messages): the transaction comes once its commit is decoded,
#                  after the walsender spilled it to disk past
#                  logical_decoding_work_mem and read it back
#   pgoutput_s     proto_version 2, streaming on: the walsender sends the
#                  transaction's changes while it decodes them (Stream Start /
#                  Stop blocks), and its Stream Commit when the commit is read
# Prints per contender the median wall time, the walsender's CPU seconds
# (bench.py run's accounting) and the ratio to pgoutput. The relay does not
# ask for streaming: this measures what it would gain, since it can publish
# a pgoutput transaction only once its commit's end LSN has arrived.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
ROWS=${1:-1000000}
ROUNDS=${2:-3}
PY=python3
BENCH_PY=$ROOT/tests/bench/bench.py
case "$ROWS$ROUNDS" in *[!0-9]*) echo "usage: $0 [ROWS] [ROUNDS]" >&2; exit 2 ;; esac

export TESTS_DIR=$ROOT/tests RELAY_BIN=${RELAY_BIN:-/bin/true}
. "$ROOT/tests/integration/lib.sh"
setup_tmp
pg_start
load_schema
PM_PID=$(head -n 1 "$PGDATA/postmaster.pid")
DSN="host=$T port=$PGPORT user=postgres dbname=postgres"

CONTENDERS="wal2json pgoutput pgoutput_s"
psql_q "CREATE PUBLICATION bench_pub FOR TABLE public.outbox WITH (publish = 'insert')" >/dev/null
for r in $(seq 1 "$ROUNDS"); do
	for c in $CONTENDERS; do
		plugin=pgoutput
		[ "$c" = wal2json ] && plugin=wal2json
		psql_q "SELECT 1 FROM pg_create_logical_replication_slot('s_${c}_$r', '$plugin')" >/dev/null
	done
done
psql_q "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
        SELECT 'bench', g::text, 'created', jsonb_build_object('n', g) FROM generate_series(1, $ROWS) g" >/dev/null
END_LSN=$(current_lsn)
log "backlog: $ROWS rows in one transaction, up to $END_LSN; logical_decoding_work_mem $(psql_q "SHOW logical_decoding_work_mem")"

: >"$T/runs.jsonl"
for r in $(seq 1 "$ROUNDS"); do
	for c in $CONTENDERS; do
		case $c in
		wal2json) opts=(-o format-version=2 -o include-transaction=1 -o include-xids=1 -o include-lsn=1
			-o include-timestamp=1 -o add-tables=public.outbox -o add-msg-prefixes=outbox) ;;
		pgoutput) opts=(-o proto_version=1 -o publication_names=bench_pub -o messages=true) ;;
		pgoutput_s) opts=(-o proto_version=2 -o publication_names=bench_pub -o messages=true -o streaming=on) ;;
		esac
		$PY "$BENCH_PY" run --json "$T/runs.jsonl" --meta "contender=$c" --meta "round=$r" \
			--postmaster "$PM_PID" --stderr "$T/recv.$c.$r.log" -- \
			"$PG_BINDIR/pg_recvlogical" --no-loop -d "$DSN" --slot "s_${c}_$r" --start \
			--endpos "$END_LSN" "${opts[@]}" -f /dev/null ||
			fail "pg_recvlogical ($c, round $r): $(tail -n 2 "$T/recv.$c.$r.log")"
		lag=$(psql_q "SELECT pg_wal_lsn_diff('$END_LSN', confirmed_flush_lsn) FROM pg_replication_slots WHERE slot_name = 's_${c}_$r'")
		[ "${lag%%.*}" -le 0 ] || fail "pg_recvlogical ($c, round $r) stopped $lag bytes short of $END_LSN"
	done
done

$PY - "$T/runs.jsonl" "$ROWS" <<'EOF'
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
rows = int(sys.argv[2])
by = {}
for r in runs:
    c = r["contender"]
    ws = r.get("procs", {}).get("walsender", {}).get("cpu_s", 0.0)
    by.setdefault(c, []).append((r["wall_s"], ws, r["user_s"] + r["sys_s"]))
base = statistics.median(w for w, _, _ in by["pgoutput"])
print()
print("| contender | rounds | wall s (median) | min-max | walsender CPU s | pg_recvlogical CPU s | wall / pgoutput's |")
print("|---|---:|---:|---:|---:|---:|---:|")
for c in ("wal2json", "pgoutput", "pgoutput_s"):
    v = by.get(c, [])
    if not v:
        continue
    w = statistics.median(x[0] for x in v)
    print("| %s | %d | %.2f | %.2f-%.2f | %.2f | %.2f | %.2f |" % (
        c, len(v), w, min(x[0] for x in v), max(x[0] for x in v),
        statistics.median(x[1] for x in v), statistics.median(x[2] for x in v), w / base))
print()
print("%d rows in one transaction; wal2json and pgoutput: the relay's options; pgoutput_s: proto_version 2, streaming on" % rows)
EOF
pass
