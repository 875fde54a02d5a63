#!/bin/bash
# 17_pg_restart: PostgreSQL 15 does not persist confirmed_flush_lsn on its
# own, so after a restart (fast or immediate) the slot re-sends transactions
# the relay already published. Those replays must not duplicate entries,
# whether dedup keys (default) or only the watermark (--dedup-window 0)
# protect them; a relay running across a restart reconnects and carries on.
. "$(dirname "$0")/lib.sh"
setup_tmp
pg_start
load_schema
redis_start
slot_create outbox_relay
slot_create s_nodedup

emit_orders_customers 1 5000
relay_drain
before=$(slot_confirmed_lsn outbox_relay)
pg_restart immediate
after=$(slot_confirmed_lsn outbox_relay)
log "confirmed_flush_lsn $before before the immediate restart, $after after"
relay_drain
check_orders_customers_once "no duplicates after an immediate restart (slot went back from $before to $after)"

# A relay running across a fast restart reconnects and goes on publishing.
relay_start
emit_orders_customers 5001 6000
wait_confirmed outbox_relay "$(current_lsn)" 30 || fail "batch before the restart not confirmed"
pg_restart fast
emit_orders_customers 6001 7000
l=$(current_lsn)
wait_confirmed outbox_relay "$l" 60 || fail "relay did not reconnect and confirm $l within 60 s after the restart"
relay_alive || fail "relay exited on the PostgreSQL restart instead of reconnecting"
ok "relay reconnected after the restart and confirmed $l"
relay_stop
assert_eq 0 "$RELAY_RC" "relay exit code"
check_orders_customers_once "exactly once across a restart under a running relay"

# Watermark only: --dedup-window 0 on a fresh Redis, replay after a restart.
redis_stop
rm -rf "$T/redis"
redis_start
relay_drain --slot s_nodedup --dedup-window 0
assert_eq 7000 "$(sum_xlen)" "--dedup-window 0: all events published"
pg_restart immediate
log "s_nodedup confirmed $(slot_confirmed_lsn s_nodedup) after the immediate restart"
relay_drain --slot s_nodedup --dedup-window 0
check_orders_customers_once "--dedup-window 0: the watermark alone prevents duplicates on replay"
pass
