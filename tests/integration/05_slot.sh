#!/bin/bash
# 05_slot: the relay creates a missing slot (wal2json, persistent), reuses an
# existing one, refuses a slot of another plugin with exit 4 without touching
# it, and with --no-create-slot exits 4 on a missing slot without creating it.
. "$(dirname "$0")/lib.sh"
setup_tmp
pg_start
load_schema
redis_start

slot_info() { psql_q "SELECT plugin, slot_type, temporary, database FROM pg_replication_slots WHERE slot_name = '$1'"; }

assert_eq "" "$(slot_info s1)" "no slot s1 before the first run"
relay_run_until "$(current_lsn)" --slot s1 || true
assert_eq 0 "$RELAY_RC" "run with a missing slot (created) exit code"
assert_eq "wal2json|logical|f|postgres" "$(slot_info s1)" "s1 created: wal2json, logical, not temporary, db postgres"

# Reuse: an event written now is delivered by a second run on the same slot.
psql_q "SELECT outbox_emit('order', '1', 'created', '{}')" >/dev/null
relay_run_until "$(current_lsn)" --slot s1 || true
assert_eq 0 "$RELAY_RC" "second run on the existing slot exit code"
assert_eq 1 "$(psql_q "SELECT count(*) FROM pg_replication_slots")" "still exactly one slot"
assert_eq 1 "$(xlen outbox:order)" "event delivered through the reused slot"
assert_eq 0 "$(grep -ciE '\b(error|fatal)\b' "$RELAY_LOG" || true)" "no error lines in the second run's log"

# A slot with another plugin: exit 4, a message naming the plugin, slot kept.
slot_create td test_decoding
relay_run --slot td || true
assert_eq 4 "$RELAY_RC" "slot with plugin test_decoding: exit code"
assert_match "$(cat "$RELAY_LOG")" 'test_decoding|[Pp]lugin' "log mentions the plugin"
assert_eq "test_decoding|logical|f|postgres" "$(slot_info td)" "slot td left untouched"

# --no-create-slot with a missing slot: exit 4 and nothing created.
relay_run --slot missing --no-create-slot || true
assert_eq 4 "$RELAY_RC" "--no-create-slot with a missing slot: exit code"
assert_eq "" "$(slot_info missing)" "slot 'missing' not created"
assert_match "$(cat "$RELAY_LOG")" 'missing' "log names the missing slot"

# The slot in use by another relay: the second one must not steal or drop it.
relay_start --slot s1
wait_for "slot_active s1" 20 || fail "relay never became active on s1"
ok "relay #$RELAY_N streams from s1"
first_pid=$RELAY_PID
# It may exit (non-zero) or keep retrying; either way it must not succeed.
RELAY_TIMEOUT=10 relay_run_until "$(current_lsn)" --slot s1 || true
assert_ne 0 "$RELAY_RC" "a second relay on an active slot does not report success"
assert_eq "wal2json|logical|f|postgres" "$(slot_info s1)" "s1 still exists"
RELAY_PID=$first_pid
relay_alive || fail "the first relay died when a second one tried the same slot"
relay_stop
assert_eq 0 "$RELAY_RC" "first relay exits 0 on SIGTERM"
pass
