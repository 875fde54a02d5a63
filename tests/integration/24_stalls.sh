#!/bin/bash
# 24_stalls: servers that hang instead of failing.
# (a) redis-server is SIGSTOPped for 4 s (longer than --redis-timeout 1s)
#     while events commit: the relay logs the timeout, does not confirm past
#     what Redis acknowledged, retries; after SIGCONT everything is in Redis
#     exactly once (commands the frozen server ran late are skipped as
#     replays).
# (b) the walsender serving the relay is SIGSTOPped for 5 s while events
#     commit; after SIGCONT the stream resumes: exactly once.
# (c) the same with --pg-timeout 2s --status-interval 500ms: the relay logs
#     "no message from the server within", reconnects, waits as a standby
#     while the frozen walsender still holds the slot, and takes over once it
#     is released after SIGCONT: exactly once.
RELAY_LOG_LEVEL=${RELAY_LOG_LEVEL:-info}
. "$(dirname "$0")/lib.sh"
setup_tmp
# A failing assertion must not leave a stopped process behind: continue every
# process we stopped before the harness cleans up.
STOPPED=
_cont_stopped() {
	local p
	for p in $STOPPED; do kill -CONT "$p" 2>/dev/null || true; done
}
trap '_rc=$?; _cont_stopped; (exit $_rc); _cleanup' EXIT
pg_start
load_schema
redis_start
slot_create outbox_relay

# emit_for FROM SECONDS: one 50-row transaction every 0.25 s; prints the next FROM.
emit_for() {
	local n=$1 end=$(($(date +%s%N) + $2 * 1000000000))
	while [ "$(date +%s%N)" -lt "$end" ]; do
		emit_orders_customers "$n" $((n + 49)) 50 >/dev/null
		n=$((n + 50))
		sleep 0.25
	done
	echo "$n"
}

walsender_pid() { psql_q "SELECT active_pid FROM pg_replication_slots WHERE slot_name = 'outbox_relay'"; }

# ---- (a) Redis frozen -------------------------------------------------------
relay_start --redis-timeout 1s --retry-max 1s
emit_orders_customers 1 1000
wait_confirmed outbox_relay "$(current_lsn)" 30 || fail "first batch not confirmed"
kill -STOP "$REDIS_PID"
STOPPED="$REDIS_PID"
log "redis-server (pid $REDIS_PID) stopped with SIGSTOP"
next=$(emit_for 1001 4)
conf_frozen=$(slot_confirmed_lsn outbox_relay)
grep -qE 'no reply from Redis.* within 1000 ms' "$RELAY_LOG" ||
	fail "the relay did not log 'no reply from Redis ... within 1000 ms' while Redis was frozen"
ok "relay logged: $(grep -m1 -oE 'Redis: no reply from Redis[^;]* within 1000 ms' "$RELAY_LOG")"
relay_alive || fail "relay exited while Redis was frozen"
kill -CONT "$REDIS_PID"
STOPPED=
log "redis-server continued (SIGCONT)"
emit_orders_customers "$next" $((next + 99))
next=$((next + 100))
wait_confirmed outbox_relay "$(current_lsn)" 30 || fail "relay did not catch up within 30 s after SIGCONT"
assert_match "$(cat "$RELAY_LOG")" 'Redis: (reconnected|recovered)' "relay reconnected to Redis"
first_lsn=$(rx fields outbox:customer aggregate_id _lsn | awk -F'\t' '$1 == 1001 { print $2 }')
assert_lsn_lt "$conf_frozen" "$first_lsn" "confirmed_flush_lsn while Redis was frozen stays below the first unacknowledged commit"
check_orders_customers_once "(a) exactly once after Redis was frozen for 4 s"
relay_stop
assert_eq 0 "$RELAY_RC" "(a) relay exit code after SIGTERM"
log "(a) $(grep 'stopped (' "$RELAY_LOG" | tail -n 1 | sed 's/.*stopped //')"

# ---- (b) walsender frozen, no --pg-timeout ----------------------------------
relay_start --retry-max 1s
wait_for slot_active\ outbox_relay 15 || fail "relay did not start streaming"
ws=$(walsender_pid)
kill -STOP "$ws"
STOPPED="$ws"
log "walsender (pid $ws) stopped with SIGSTOP"
conf_frozen=$(slot_confirmed_lsn outbox_relay)
start_n=$next
next=$(emit_for "$next" 5)
assert_eq "$conf_frozen" "$(slot_confirmed_lsn outbox_relay)" "(b) confirmed_flush_lsn does not move while the walsender is frozen"
kill -CONT "$ws"
STOPPED=
log "walsender continued (SIGCONT)"
wait_confirmed outbox_relay "$(current_lsn)" 30 || fail "relay did not deliver within 30 s after the walsender's SIGCONT"
relay_alive || fail "relay exited"
check_orders_customers_once "(b) exactly once after the walsender was frozen for 5 s ($((next - start_n)) events committed meanwhile)"
relay_stop
assert_eq 0 "$RELAY_RC" "(b) relay exit code after SIGTERM"

# ---- (c) walsender frozen, --pg-timeout 2s ----------------------------------
relay_start --retry-max 1s --pg-timeout 2s --status-interval 500ms
wait_for slot_active\ outbox_relay 15 || fail "relay did not start streaming"
ws=$(walsender_pid)
kill -STOP "$ws"
STOPPED="$ws"
t0=$(date +%s%N)
log "walsender (pid $ws) stopped with SIGSTOP"
start_n=$next
next=$(emit_for "$next" 5)
grep -q 'no message from the server within 2000 ms' "$RELAY_LOG" ||
	fail "the relay did not log 'no message from the server within 2000 ms' while the walsender was frozen"
ok "relay logged: $(grep -m1 -o 'PostgreSQL: no message from the server within[^;]*' "$RELAY_LOG")"
wait_for "grep -q 'standby: slot' '$RELAY_LOG'" 10 ||
	fail "the relay did not report waiting for the slot held by the frozen walsender"
ok "relay waits as a standby while the frozen walsender holds the slot"
assert_eq "$ws" "$(walsender_pid)" "(c) the frozen walsender still holds the slot"
kill -CONT "$ws"
STOPPED=
log "walsender continued (SIGCONT) after $((($(date +%s%N) - t0) / 1000000)) ms"
wait_for "[ -n \"\$(walsender_pid)\" ] && [ \"\$(walsender_pid)\" != $ws ]" 20 ||
	fail "no new walsender took the slot within 20 s of SIGCONT"
ok "a new walsender (pid $(walsender_pid)) serves the relay"
wait_confirmed outbox_relay "$(current_lsn)" 30 || fail "relay did not deliver within 30 s after taking the slot back"
assert_match "$(cat "$RELAY_LOG")" 'slot "outbox_relay" is free now' "relay logged that it took the slot back"
check_orders_customers_once "(c) exactly once after a --pg-timeout reconnect ($((next - start_n)) events committed while frozen)"
relay_stop
assert_eq 0 "$RELAY_RC" "(c) relay exit code after SIGTERM"
log "(c) $(grep 'stopped (' "$RELAY_LOG" | tail -n 1 | sed 's/.*stopped //')"
pass
