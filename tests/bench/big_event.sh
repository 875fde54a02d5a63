#!/bin/bash
# big_event.sh - peak memory for one large event: for each size S (MiB,
# default "1 16 64"), one outbox row whose jsonb payload is {"blob": "xxx..."}
# with S MiB of x's, relayed alone by a fresh relay process. Prints the
# relay's peak RSS beside pg_recvlogical's on the same row (wal2json into
# /dev/null: libpq's own copies, the floor any libpq client pays), and the
# issue-12 bound 2 x S + 24 MB.
#
#   tests/bench/big_event.sh [SIZES_MIB...]
#   ESCAPED=1 tests/bench/big_event.sh ...   the text is 'ab"c\' repeated, so
#                                           wal2json's message is 2.2 x S
#
# Starts its own PostgreSQL 15 + redis-server with the integration harness;
# builds a release relay in build-bench/ unless RELAY_BIN is set. Peak RSS is
# the kernel's VmHWM of each process (GNU time's %M for pg_recvlogical, the
# relay's own peak_rss_kb log line for the relay).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
SIZES=("$@")
[ ${#SIZES[@]} -gt 0 ] || SIZES=(1 16 64)
if [ -z "${RELAY_BIN:-}" ]; then
	B=$ROOT/build-bench
	[ -f "$B/build.ninja" ] ||
		meson setup "$B" "$ROOT" -Dbuildtype=release -Dintegration_tests=false >/dev/null
	ninja -C "$B" cmd/outbox-relay/outbox-relay >/dev/null
	RELAY_BIN=$B/cmd/outbox-relay/outbox-relay
fi
export RELAY_BIN TESTS_DIR=$ROOT/tests RELAY_LOG_LEVEL=info RELAY_TIMEOUT=600
. "$ROOT/tests/integration/lib.sh"
setup_tmp
pg_start
load_schema
redis_start
# proto-max-bulk-len defaults to 512 MB; nothing to raise for <= 256 MiB.

printf '\n%8s %14s %14s %14s %10s %12s\n' "S MiB" "message MiB" "relay MiB" "recvlogical MiB" "relay/S" "bound MiB"
for s in "${SIZES[@]}"; do
	slot_create "s_recv_$s"
	slot_create "s_relay_$s"
	if [ -n "${ESCAPED:-}" ]; then
		blob="repeat('ab\"c\\', $s * 1048576 / 5)"
	else
		blob="repeat('x', $s * 1048576)"
	fi
	psql_q "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
	        VALUES ('big', 'b$s', 'created', jsonb_build_object('blob', $blob))" >/dev/null
	end=$(current_lsn)
	# pg_recvlogical's peak, on the same row.
	/usr/bin/time -f '%M' -o "$T/recv.$s" pg_recvlogical -d "$PG_DSN" --slot "s_recv_$s" --start \
		--endpos "$end" -o format-version=2 -o include-transaction=1 -o add-tables=public.outbox \
		-f "$T/recv.out.$s" --no-loop
	msg=$(grep -m1 '"action":"I"' "$T/recv.out.$s" | wc -c)
	rm -f "$T/recv.out.$s"
	relay_run_until "$end" --slot "s_relay_$s" --max-event-bytes 512MiB || fail "relay exited with $RELAY_RC"
	[ "$(redis_cli XLEN outbox:big)" = 1 ] || fail "the $s MiB event was not published"
	redis_cli DEL outbox:big >/dev/null
	rk=$(relay_peak_rss_kb)
	ck=$(cat "$T/recv.$s")
	awk -v s="$s" -v m="$msg" -v r="$rk" -v c="$ck" 'BEGIN {
		printf "%8d %14.1f %14.1f %14.1f %10.2f %12.1f\n", s, m / 1048576, r / 1024, c / 1024,
			(r / 1024) / s, 2 * s + 24e6 / 1048576 }'
	psql_q "SELECT pg_drop_replication_slot('s_recv_$s'), pg_drop_replication_slot('s_relay_$s')" >/dev/null
	psql_q "DELETE FROM outbox" >/dev/null
done
