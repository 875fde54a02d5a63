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

relay_start
emit_orders_customers 1 1000
l1=$(current_lsn)
wait_confirmed outbox_relay "$l1" 30 || fail "batch 1 not confirmed within 30 s"
ok "batch 1 (1000 events) confirmed up to $l1"
assert_eq 1000 "$(sum_xlen)" "batch 1 in Redis"

redis_cli shutdown >/dev/null 2>&1 || true
wait_for redis_down 10 || fail "redis did not shut down"
ok "redis shut down (SHUTDOWN, AOF fsynced)"
REDIS_PID=

emit_orders_customers 1001 1500 500 # one transaction
l2=$(current_lsn)  # >= the end of that commit record
emit_orders_customers 1501 2000
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

emit_orders_customers 2001 2300
relay_drain
check_orders_customers_once "exactly once and in order across the Redis outage"
pass
