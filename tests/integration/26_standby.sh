#!/bin/bash
# 26_standby: relay A streams; relay B started on the same slot reports
# "standby" and keeps waiting (alive after 5 s, no exit; the slot stays with
# A's walsender). SIGKILL A: B takes the slot over within 10 s (the slot's
# active_pid becomes B's walsender, told apart by application_name) and
# delivers what A left unconfirmed, then new events. Every event is in Redis
# exactly once.
RELAY_LOG_LEVEL=${RELAY_LOG_LEVEL:-info}
. "$(dirname "$0")/lib.sh"
setup_tmp
pg_start
load_schema
redis_start
slot_create outbox_relay

active_pid() { psql_q "SELECT active_pid FROM pg_replication_slots WHERE slot_name = 'outbox_relay'"; }
# slot_app: application_name of the walsender holding the slot.
slot_app() {
	psql_q "SELECT a.application_name FROM pg_replication_slots s JOIN pg_stat_activity a ON a.pid = s.active_pid WHERE s.slot_name = 'outbox_relay'"
}

relay_start --pg-dsn "$PG_DSN application_name=relay_a"
A_PID=$RELAY_PID
A_LOG=$RELAY_LOG
emit_orders_customers 1 1000
wait_confirmed outbox_relay "$(current_lsn)" 30 || fail "relay A did not deliver the first batch"
a_ws=$(active_pid)
assert_eq relay_a "$(slot_app)" "the slot is held by relay A's walsender (pid $a_ws)"

relay_start --pg-dsn "$PG_DSN application_name=relay_b"
B_PID=$RELAY_PID
B_LOG=$RELAY_LOG
wait_for "grep -q 'standby: slot' '$B_LOG'" 10 || fail "relay B did not report standby within 10 s"
ok "relay B: $(grep -m1 -o 'standby: slot.*' "$B_LOG" | cut -c1-200)"
emit_orders_customers 1001 2000 # flows through A meanwhile
sleep 5
pid_alive "$B_PID" || fail "relay B exited while waiting as a standby (see $B_LOG)"
ok "relay B still running after 5 s as a standby"
assert_eq "$a_ws" "$(active_pid)" "the slot is still active with A's walsender"
assert_eq relay_a "$(slot_app)" "the slot is still held by relay A"
wait_confirmed outbox_relay "$(current_lsn)" 30 || fail "relay A did not deliver the second batch"
assert_eq 1 "$(grep -c 'standby: slot' "$B_LOG")" "relay B logs standby once, not once per retry"

# A dies right after a commit, likely with part of it unacknowledged or
# unconfirmed: B must deliver the rest without duplicating anything.
emit_orders_customers 2001 3000 1000
kill -9 "$A_PID"
t0=$(date +%s%N)
wait_for "! pid_alive $A_PID" 10 || fail "relay A survives SIGKILL"
wait "$A_PID" 2>/dev/null || true
log "relay A (pid $A_PID) killed with SIGKILL"
wait_for '[ "$(slot_app)" = relay_b ]' 10 || fail "relay B did not take the slot over within 10 s of A's SIGKILL (active_pid $(active_pid), app $(slot_app))"
takeover_ms=$((($(date +%s%N) - t0) / 1000000))
b_ws=$(active_pid)
log "takeover: relay B's walsender (pid $b_ws) holds the slot $takeover_ms ms after A's SIGKILL"
assert_ne "$a_ws" "$b_ws" "active_pid changed"
assert_lt "$takeover_ms" 10000 "takeover time (ms)"
wait_for "grep -q 'is free now: active, streaming' '$B_LOG'" 5 || fail "relay B did not log the takeover"
ok "relay B: $(grep -m1 -o 'slot "outbox_relay" is free now.*' "$B_LOG")"

emit_orders_customers 3001 4000
wait_confirmed outbox_relay "$(current_lsn)" 30 || fail "events after the takeover were not delivered by relay B"
relay_stop
assert_eq 0 "$RELAY_RC" "relay B exit code after SIGTERM"
log "relay B: $(grep 'stopped (' "$B_LOG" | tail -n 1 | sed 's/.*stopped //')"
check_orders_customers_once "exactly once and in order across the takeover"
pass
