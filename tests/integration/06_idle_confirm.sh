#!/bin/bash
# 06_idle_confirm: with the outbox idle and another table busy, the relay
# keeps confirming, so the slot does not pin WAL: confirmed_flush_lsn reaches
# the LSN after the other writes within 20 s, and nothing is published.
. "$(dirname "$0")/lib.sh"
setup_tmp
pg_start
load_schema
redis_start
slot_create outbox_relay
start=$(slot_confirmed_lsn outbox_relay)

relay_start
wait_for "slot_active outbox_relay" 20 || fail "relay never started streaming"
ok "relay streaming"

{
	echo "CREATE TABLE other (x int, pad text);"
	for i in $(seq 1 300); do
		echo "INSERT INTO other SELECT g, repeat('p', 100) FROM generate_series(1, 50) g;"
	done
	echo "UPDATE other SET x = x + 1 WHERE x < 10;"
	echo "DELETE FROM other WHERE x > 40;"
} | psql_q
target=$(current_lsn)
log "other-table writes done; slot confirmed $(slot_confirmed_lsn outbox_relay), target $target (started at $start)"

if ! wait_confirmed outbox_relay "$target" 20; then
	fail "confirmed_flush_lsn stuck at $(slot_confirmed_lsn outbox_relay), below $target after 20 s of idle outbox"
fi
ok "confirmed_flush_lsn $(slot_confirmed_lsn outbox_relay) >= $target while the outbox is idle"
relay_alive || fail "relay exited during the test"
assert_eq "" "$(rx streams '*')" "nothing published (no streams at all)"

# A later outbox event is still delivered by the same process.
psql_q "SELECT outbox_emit('order', '1', 'created', '{}')" >/dev/null
end=$(current_lsn)
wait_confirmed outbox_relay "$end" 20 || fail "outbox event after the idle period not confirmed"
assert_eq 1 "$(xlen outbox:order)" "event after the idle period published"
relay_stop
assert_eq 0 "$RELAY_RC" "relay exit code after SIGTERM"
pass
