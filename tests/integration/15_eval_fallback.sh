#!/bin/bash
# 15_eval_fallback: --no-redis-functions (SCRIPT LOAD + EVALSHA instead of FCALL) gives the same
# result: exactly once and in order, also across a SIGKILL and a replay; no
# function library is loaded into Redis.
. "$(dirname "$0")/lib.sh"
setup_tmp
pg_start
load_schema
redis_start
slot_create outbox_relay
slot_create s_replay # sees the same events: a full replay later

psql_q <<'SQL'
SELECT outbox_emit('order', '0', 'created', '{"n": 0}', '{"h": 1}');
DO $$
BEGIN
  FOR t IN 0..49 LOOP
    INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
      SELECT (ARRAY['order','customer'])[i % 2 + 1], i::text, 'created', jsonb_build_object('n', i)
      FROM generate_series(t * 100 + 1, t * 100 + 100) i;
    COMMIT;
  END LOOP;
END
$$;
SQL

relay_start --no-redis-functions
wait_entries 2000 60 outbox:order outbox:customer || true
relay_kill9
n=$(sum_xlen)
log "after SIGKILL: $n entries"
relay_drain --no-redis-functions
psql_q "SELECT id FROM outbox" >"$T/expected"
assert_exactly_once "$T/expected"
for t in order customer; do
	psql_q "SELECT id FROM outbox WHERE aggregate_type = '$t' ORDER BY (payload->>'n')::int" >"$T/order.$t"
	assert_stream_ids "outbox:$t" "$T/order.$t"
	assert_field_names "outbox:$t" id aggregate_type aggregate_id event_type payload headers created_at _lsn _xid _committed_at
done
assert_eq '{"h": 1}' "$(rx fields outbox:order headers | head_n 1)" "headers of the first event"
assert_eq "" "$(redis_cli FUNCTION LIST)" "no Redis function library loaded"

# A full replay of the same WAL through another slot: the EVALSHA path dedups it all.
relay_drain --no-redis-functions --slot s_replay
assert_eq 5001 "$(sum_xlen)" "replay through a second slot adds nothing"
pass
