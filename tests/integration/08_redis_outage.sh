#!/bin/bash
# 08_redis_outage: Redis (AOF, appendfsync always) goes away while events are
# committed. The relay must not confirm past what Redis acknowledged; after a
# SIGKILL of the relay and a Redis restart from its AOF, a new relay delivers
# everything exactly once.
. "$(dirname "$0")/lib.sh"
setup_tmp
pg_start
load_schema
AOF=(--appendonly yes --appendfsync always)
redis_start "${AOF[@]}"
slot_create outbox_relay

# emit FROM TO [TXSIZE]: rows n = FROM..TO, TXSIZE rows per transaction.
emit() {
	psql_q "DO \$\$
	BEGIN
	  FOR t IN 0..(($2 - $1 + 1) / ${3:-100} - 1) LOOP
	    INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
	      SELECT (ARRAY['order','customer'])[i % 2 + 1], i::text, 'created', jsonb_build_object('n', i)
	      FROM generate_series($1 + t * ${3:-100}, $1 + t * ${3:-100} + ${3:-100} - 1) i;
	    COMMIT;
	  END LOOP;
	END
	\$\$;"
}

relay_start
emit 1 1000
l1=$(current_lsn)
wait_confirmed outbox_relay "$l1" 30 || fail "batch 1 not confirmed within 30 s"
ok "batch 1 (1000 events) confirmed up to $l1"
assert_eq 1000 "$(sum_xlen)" "batch 1 in Redis"

redis_cli shutdown >/dev/null 2>&1 || true
wait_for redis_down 10 || fail "redis did not shut down"
ok "redis shut down (SHUTDOWN, AOF fsynced)"
REDIS_PID=

emit 1001 1500 500 # one transaction
l2=$(current_lsn)  # >= the end of that commit record
emit 1501 2000
l3=$(current_lsn)
sleep 5
conf=$(slot_confirmed_lsn outbox_relay)
log "Redis down: slot confirmed $conf; batch 2 commit <= $l2; batch 3 ends at $l3"
assert_lsn_lt "$conf" "$l2" "confirmed_flush_lsn stays below batch 2's commit while Redis is down"
relay_alive || fail "relay exited while Redis was down (rc: see log); it should retry"
ok "relay still running (retrying) while Redis is down"

relay_kill9
redis_start "${AOF[@]}"
assert_eq 1000 "$(sum_xlen)" "AOF reload: Redis again holds exactly batch 1"
wait_for '! slot_active outbox_relay' 15 || fail "slot still active 15 s after the relay's SIGKILL"
ok "slot released after SIGKILL"

emit 2001 2300
relay_drain
psql_q "SELECT id FROM outbox" >"$T/expected"
assert_exactly_once "$T/expected"
for t in order customer; do
	psql_q "SELECT id FROM outbox WHERE aggregate_type = '$t' ORDER BY (payload->>'n')::int" >"$T/order.$t"
	assert_stream_ids "outbox:$t" "$T/order.$t"
done
pass
