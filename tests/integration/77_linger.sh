#!/bin/bash
# 77_linger: --linger holds a batch open for more events before it goes to an
# idle Redis, and loses nothing by it.
#   - An event committed alone reaches its stream no sooner than --linger
#     after its commit was sent (a lower bound: a slow machine only adds to it).
#   - Twenty one-row transactions committed in a burst go to Redis in fewer
#     groups than events (each group: one EXEC), every one exactly once.
#   - An event for another stream does not send the held batch early: two
#     events of two streams committed one after the other both wait.
#   - SIGTERM while a batch is held: the relay writes it before it exits, or,
#     when it had not read the event yet, does not confirm past it; the next
#     run publishes it. Every row is in its stream exactly once, in order.
. "$(dirname "$0")/lib.sh"
setup_tmp
pg_start
load_schema
redis_start
slot_create outbox_relay

LINGER_MS=1000
emit() { echo "SELECT outbox_emit('${2:-order}', 'agg-$1', 'created', '{\"n\": $1}', '{}');"; }

relay_start --linger "${LINGER_MS}ms"
wait_for "slot_active outbox_relay" 30 || fail "relay did not start streaming"
wait_confirmed outbox_relay "$(current_lsn)" 30 || fail "relay did not catch up"

# 1. One event alone waits for the linger.
t0=$(date +%s%N)
emit 1 | psql_q >/dev/null
wait_entries 1 30 outbox:order || fail "event 1 not published"
waited=$((($(date +%s%N) - t0) / 1000000))
log "event 1 in its stream ${waited} ms after its commit was sent"
assert_ge "$waited" "$LINGER_MS" "ms from commit to stream entry, --linger ${LINGER_MS}ms"

# 2. A burst of one-row transactions, one session.
e0=$(redis_calls exec)
for i in $(seq 2 21); do emit "$i"; done | psql_q >/dev/null
wait_entries 21 30 outbox:order || fail "the burst was not published"
e1=$(redis_calls exec)
log "20 one-row transactions went to Redis in $((e1 - e0)) EXEC(s)"
assert_lt "$((e1 - e0))" 20 "EXECs for 20 events committed in a burst (groups of more than one)"

# 3. Two streams: the second stream's event does not send the first one's batch.
t0=$(date +%s%N)
{ emit 1 invoice; emit 2 invoice; } | psql_q >/dev/null
sleep 0.2 # within the window: this event closes outbox:invoice's batch
emit 22 | psql_q >/dev/null
sleep 0.2 # and this one wakes the relay while the window lasts
emit 23 | psql_q >/dev/null
wait_entries 1 30 outbox:invoice || fail "outbox:invoice's events were not published"
waited=$((($(date +%s%N) - t0) / 1000000))
log "outbox:invoice's first entry ${waited} ms after its commit was sent"
assert_ge "$waited" "$LINGER_MS" "ms from commit to the first entry of outbox:invoice, whose batch outbox:order's event closed"
wait_entries 25 30 outbox:order outbox:invoice || fail "the two streams' events were not published"
assert_eq 23 "$(xlen outbox:order)" "outbox:order entries"
assert_eq 2 "$(xlen outbox:invoice)" "outbox:invoice entries"
log "two streams' events went to Redis in $(($(redis_calls exec) - e1)) EXEC(s)"

# 4. SIGTERM while the batch may be held.
emit 24 | psql_q >/dev/null
lsn24=$(current_lsn)
sleep 0.3
relay_stop
assert_eq 0 "$RELAY_RC" "relay exit code after SIGTERM"
n=$(xlen outbox:order)
if [ "$n" = 24 ]; then
	ok "the held event was written on SIGTERM, before --linger ran out"
	assert_lsn_ge "$(slot_confirmed_lsn outbox_relay)" "$lsn24" "slot confirmed past the held event"
else
	assert_eq 23 "$n" "entries after SIGTERM (event 24 not read yet)"
	assert_lsn_lt "$(slot_confirmed_lsn outbox_relay)" "$lsn24" "slot not confirmed past the unwritten event"
fi
assert_ge "$(final_sum "$RELAY_LOG" linger_windows)" 3 "--linger windows (final line): event 1, the burst, the two streams"

relay_drain
psql_q "SELECT id FROM outbox" >"$T/expected"
assert_exactly_once "$T/expected"
for t in order invoice; do
	psql_q "SELECT id FROM outbox WHERE aggregate_type = '$t' ORDER BY (payload->>'n')::int" >"$T/$t"
	assert_stream_ids "outbox:$t" "$T/$t"
done
pass
