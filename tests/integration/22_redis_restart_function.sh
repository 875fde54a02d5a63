#!/bin/bash
# 22_redis_restart_function: (1) Redis with AOF (appendfsync always) is shut
# down and restarted from the same dir while the relay is publishing a stream
# of commits: the relay reconnects, and every event is in Redis exactly once.
# (2) FUNCTION FLUSH on the live server: the relay's next publish fails with
# "Function not found", it reconnects, loads its library again (FUNCTION LIST
# shows outbox_relay) and delivers everything exactly once, without a restart.
. "$(dirname "$0")/lib.sh"
setup_tmp
pg_start
load_schema
AOF=(--appendonly yes --appendfsync always)
redis_start "${AOF[@]}"
slot_create outbox_relay

library_loaded() { redis_cli FUNCTION LIST LIBRARYNAME outbox_relay | grep -qx outbox_relay; }

# The function path (--publish native calls the function only for what it does
# not take; 75_publish_native covers that path's hand-offs).
relay_start --retry-max 1s --publish function
emit_orders_customers 1 2000
wait_confirmed outbox_relay "$(current_lsn)" 30 || fail "first batch not confirmed"
library_loaded || fail "FUNCTION LIST does not show the outbox_relay library"
ok "relay loaded the outbox_relay library"

# ---- (1) Redis restart under load -----------------------------------------
# A writer commits 20 transactions of 500 rows while Redis goes down and
# comes back; the shutdown lands in the middle of it, usually with commands in
# flight.
emit_bg() {
	for i in $(seq 0 19); do
		emit_orders_customers $((2001 + i * 500)) $((2500 + i * 500)) 500
		sleep 0.05
	done
}
emit_bg &
writer=$!
wait_for '[ "$(sum_xlen)" -ge 3000 ]' 20 || fail "relay did not publish the writer's first commits"
redis_stop save
ok "redis shut down mid-stream ($(psql_q "SELECT count(*) FROM outbox") rows committed so far)"
sleep 1.5
redis_start "${AOF[@]}"
wait "$writer" || fail "writer failed"
emit_orders_customers 12001 12100
wait_confirmed outbox_relay "$(current_lsn)" 30 || fail "relay did not catch up within 30 s after the Redis restart"
relay_alive || fail "relay exited across the Redis restart"
assert_eq 1 "$(grep -c 'Redis: reconnected' "$RELAY_LOG" || true)" "one 'Redis: reconnected' line after the restart"
check_orders_customers_once "exactly once across a Redis restart (AOF) under a running relay"
library_loaded || fail "outbox_relay library missing after the AOF restart"
ok "outbox_relay library still loaded after the AOF restart"

# ---- (2) FUNCTION FLUSH on the live server -------------------------------
assert_eq OK "$(redis_cli FUNCTION FLUSH)" "FUNCTION FLUSH"
library_loaded && fail "FUNCTION FLUSH left the library in place (test bug)"
emit_orders_customers 12101 13100
wait_confirmed outbox_relay "$(current_lsn)" 30 || fail "relay did not deliver after FUNCTION FLUSH within 30 s"
relay_alive || fail "relay exited after FUNCTION FLUSH"
flush_line=$(grep 'Function not found' "$RELAY_LOG" | head_n 1)
[ -n "$flush_line" ] || fail "no 'Function not found' in the relay's log"
ok "relay logged the failed publish: ${flush_line#* warn: }"
assert_eq 2 "$(grep -c 'Redis: reconnected' "$RELAY_LOG" || true)" "a second 'Redis: reconnected' line after FUNCTION FLUSH"
library_loaded || fail "FUNCTION LIST does not show outbox_relay after the relay reconnected"
ok "FUNCTION LIST shows outbox_relay again (reloaded by the relay)"
check_orders_customers_once "exactly once after FUNCTION FLUSH"

relay_stop
assert_eq 0 "$RELAY_RC" "relay exit code after SIGTERM"
final=$(grep 'stopped (' "$RELAY_LOG" | tail -n 1)
log "final: ${final#*stopped } (replays: commands Redis had run before a disconnect, sent again)"
pass
