#!/bin/bash
# 14_sigterm: SIGTERM while draining a 60000-event backlog (sent once a third
# of it is in Redis, so it lands mid-drain however fast the relay is): the
# relay exits 0 within 15 s, logs peak_rss_kb, confirms what it delivered; a
# restart finishes the backlog exactly once and in order.
. "$(dirname "$0")/lib.sh"
setup_tmp
pg_start
load_schema
redis_start
slot_create outbox_relay
start=$(slot_confirmed_lsn outbox_relay)

N=60000
psql_q <<SQL
DO \$\$
BEGIN
  FOR t IN 0..$((N / 100 - 1)) LOOP
    INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
      SELECT (ARRAY['order','customer','invoice'])[i % 3 + 1], i::text, 'created', jsonb_build_object('n', i)
      FROM generate_series(t * 100 + 1, t * 100 + 100) i;
    COMMIT;
  END LOOP;
END
\$\$;
SQL

relay_start
wait_entries $((N / 3)) 60 outbox:order outbox:customer outbox:invoice || fail "relay did not get a third of the way"
relay_alive || fail "relay exited before SIGTERM"
t0=$(date +%s%N)
kill -TERM "$RELAY_PID"
relay_wait 15 || {
	kill -9 "$RELAY_PID"
	fail "relay still running 15 s after SIGTERM"
}
log "relay exited $((($(date +%s%N) - t0) / 1000000)) ms after SIGTERM"
assert_eq 0 "$RELAY_RC" "exit code after SIGTERM"
assert_match "$(cat "$RELAY_LOG")" 'peak_rss_kb=[0-9]+' "exit log line with peak_rss_kb"
n=$(sum_xlen)
conf=$(slot_confirmed_lsn outbox_relay)
log "after SIGTERM: $n of $N entries in Redis, slot confirmed $conf (started at $start)"
assert_lt "$n" "$N" "SIGTERM landed mid-drain (the relay stopped instead of finishing the backlog)"
# Final feedback: every transaction whole in Redis (100 entries) must be
# confirmed, i.e. its _lsn <= confirmed_flush_lsn.
assert_whole_tx_confirmed 100 "$conf" "the last transaction whole in Redis is confirmed (final feedback before exit)"

relay_drain
psql_q "SELECT id FROM outbox" >"$T/expected"
assert_exactly_once "$T/expected"
for t in order customer invoice; do
	psql_q "SELECT id FROM outbox WHERE aggregate_type = '$t' ORDER BY (payload->>'n')::int" >"$T/order.$t"
	assert_stream_ids "outbox:$t" "$T/order.$t"
done
pass
