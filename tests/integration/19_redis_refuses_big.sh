#!/bin/bash
# 19_redis_refuses_big: an event Redis cannot take (a field value over its
# proto-max-bulk-len, here lowered to 1 MB) never makes the relay retry into
# the same failure forever.
# (a) CONFIG GET is allowed: the relay read proto-max-bulk-len at connect and
#     dead-letters the 2 MB event (reason names proto-max-bulk-len); the next
#     event is published and the run ends with exit 0.
# (b) CONFIG is denied (as in deploy/redis/users.acl): Redis answers the call
#     with a protocol error and drops the connection; the relay exits 5 at
#     once with one line naming the value's size and the fix, confirming
#     nothing past the event. The documented way out, --max-event-bytes below
#     the limit, then dead-letters it and the stream goes on.
RELAY_TIMEOUT=${RELAY_TIMEOUT:-60}
. "$(dirname "$0")/lib.sh"
setup_tmp
pg_start
load_schema
redis_start --proto-max-bulk-len 1mb
slot_create outbox_relay

emit() { # emit AGGREGATE_ID PAYLOAD_SQL
	psql_q "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
	        VALUES ('big', '$1', 'created', $2)" >/dev/null
}

# ---- (a) proto-max-bulk-len readable ----------------------------------------
emit a1 "jsonb_build_object('blob', repeat('x', 2000000))"
emit a2 "'{\"n\": 2}'"
relay_drain
assert_eq 1 "$(xlen outbox:dead-letter)" "(a) one dead letter"
reason=$(rx fields outbox:dead-letter reason)
assert_contains "$reason" "over Redis's proto-max-bulk-len 1048576" "(a) the reason names proto-max-bulk-len"
assert_eq a2 "$(rx fields outbox:big aggregate_id)" "(a) the next event is published"

# ---- (b) CONFIG denied -----------------------------------------------------------
assert_eq OK "$(redis_cli ACL SETUSER relay on '>relay-pw-19' '~*' '&*' '+@all' '-config')" "(b) a user without CONFIG"
REDIS_URL="unix://relay:relay-pw-19@$REDIS_SOCK"
before=$(slot_confirmed_lsn outbox_relay)
emit b1 "'{\"n\": 1}'"
emit b2 "jsonb_build_object('blob', repeat('y', 2000000))"
emit b3 "'{\"n\": 3}'"
end=$(current_lsn)
relay_run_until "$end" || true
assert_eq 5 "$RELAY_RC" "(b) exit 5, not an endless retry"
line=$(grep -m1 'proto-max-bulk-len' "$RELAY_LOG" || true)
log "(b) $line"
assert_contains "$line" "over the server's proto-max-bulk-len; set --max-event-bytes below that" "(b) one line names the limit and the fix"
assert_match "$line" "a value of [0-9]+ bytes" "(b) and the value's size"
assert_lsn_lt "$(slot_confirmed_lsn outbox_relay)" "$end" "(b) nothing confirmed past the refused event"
assert_eq 1 "$(xlen outbox:dead-letter)" "(b) nothing dead-lettered yet"
relay_run_until "$end" --max-event-bytes 1000000 || true
assert_eq 0 "$RELAY_RC" "(b) with --max-event-bytes below the limit the relay drains"
assert_eq 2 "$(xlen outbox:dead-letter)" "(b) the event is dead-lettered"
assert_contains "$(rx fields outbox:dead-letter reason | tail -n 1)" "over --max-event-bytes 1000000" "(b) as too large"
assert_eq "a2 b1 b3" "$(rx fields outbox:big aggregate_id | tr '\n' ' ' | sed 's/ $//')" "(b) the other events once, in order"
wait_confirmed outbox_relay "$end" 10 || fail "(b) not confirmed up to $end"
ok "(b) confirmed past the refused event ($before -> $end)"
pass
