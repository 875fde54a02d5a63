#!/bin/bash
# republish.sh - how fast `outbox-relay republish` heals a gap, and in how
# much memory: N outbox rows (default 1,000,000, three streams, ~100-byte
# payloads) republished from the table into an empty Redis, next to the two
# streaming paths over the WAL of the same rows in the same run:
# pg_recvlogical (wal2json into /dev/null: the decoding limit) and the relay
# (the same rows through the slot into Redis).
#
#   tests/bench/republish.sh [ROWS]
#
# Prints one table (rows/s, ratio to pg_recvlogical, peak RSS). Starts its
# own PostgreSQL 15 + redis-server with the integration harness; installs
# nothing; builds a release relay in build-bench/ unless RELAY_BIN is set.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
ROWS=${1:-1000000}
. "$ROOT/tests/bench/lib.sh"
[ -n "${RELAY_BIN:-}" ] || RELAY_BIN=$(bench_relay_bin)
export RELAY_BIN TESTS_DIR=$ROOT/tests RELAY_LOG_LEVEL=info RELAY_TIMEOUT=1800
. "$ROOT/tests/integration/lib.sh"
setup_tmp
pg_start
load_schema
redis_start
slot_create s_recv
slot_create s_relay

ms() { echo $((($(date +%s%N) - $1) / 1000000)); }
rate() { echo $(($2 * 1000 / ($1 > 0 ? $1 : 1))); }

t0=$(date +%s%N)
psql_q "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
        SELECT (ARRAY['order','customer','invoice'])[g % 3 + 1], g::text, 'created',
               jsonb_build_object('n', g, 'pad', repeat('x', 80))
        FROM generate_series(1, $ROWS) g" >/dev/null
log "inserted $ROWS rows in $(ms "$t0") ms"
end=$(current_lsn)

t0=$(date +%s%N)
pg_recvlogical -d "$PG_DSN" --slot s_recv --start --endpos "$end" -o format-version=2 \
	-o include-transaction=1 -o add-tables=public.outbox -f /dev/null --no-loop
recv_ms=$(ms "$t0")

t0=$(date +%s%N)
relay_run_until "$end" --slot s_relay || fail "relay exited with $RELAY_RC"
relay_ms=$(ms "$t0")
relay_rss=$(relay_peak_rss_kb)
n=$(xlen_sum outbox:order outbox:customer outbox:invoice)
[ "$n" = "$ROWS" ] || fail "the relay published $n of $ROWS"

redis_cli FLUSHALL >/dev/null
t0=$(date +%s%N)
out=$("$RELAY_BIN" republish --pg-dsn "$PG_DSN" --redis-url "$REDIS_URL" --http-addr "" \
	--log-level warn --since 2000-01-01 2>&1) || fail "republish failed: $out"
rep_ms=$(ms "$t0")
rep_rss=$(grep -o 'peak_rss_kb=[0-9]*' <<<"$out" | cut -d= -f2)
n=$(xlen_sum outbox:order outbox:customer outbox:invoice)
[ "$n" = "$ROWS" ] || fail "republish published $n of $ROWS: $out"

recv_rate=$(rate "$recv_ms" "$ROWS")
printf '\n%-34s %10s %10s %14s %12s\n' path ms rows/s "x recvlogical" "peak RSS MiB"
printf '%-34s %10d %10d %14s %12s\n' "pg_recvlogical (WAL, /dev/null)" "$recv_ms" "$recv_rate" 1.00 -
for row in "relay (WAL -> Redis)|$relay_ms|$relay_rss" "republish (table -> Redis)|$rep_ms|$rep_rss"; do
	IFS='|' read -r name t rss <<<"$row"
	r=$(rate "$t" "$ROWS")
	printf '%-34s %10d %10d %14s %12s\n' "$name" "$t" "$r" \
		"$(awk -v a="$r" -v b="$recv_rate" 'BEGIN { printf "%.2f", a / b }')" \
		"$(awk -v k="$rss" 'BEGIN { printf "%.1f", k / 1024 }')"
done
pass
