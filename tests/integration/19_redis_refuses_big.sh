#!/bin/bash
# 19_redis_refuses_big: an event Redis cannot take (a field value over its
# proto-max-bulk-len, here lowered to 1 MB) never makes the relay retry into
# the same failure forever.
# (a) CONFIG GET is allowed: the relay read proto-max-bulk-len at connect and
#     dead-letters the 2 MB event (reason names proto-max-bulk-len); the next
#     event is published and the run ends with exit 0.
# (b) CONFIG is denied (as in deploy/redis/users.acl): Redis answers the call
#     with a protocol error and drops the connection. The relay learns the
#     limit from the refusal: it stops confirming nothing past the event and
#     runs again from the slot's position with values that large
#     dead-lettered (one warning naming the size and the permanent fixes);
#     the same --endpos run ends with exit 0, every other event once, in
#     order. A later run with the permanent fix (--max-event-bytes below the
#     limit) publishes nothing twice.
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
assert_contains "$reason" "over 1048576, the largest value Redis takes (its proto-max-bulk-len" "(a) the reason names proto-max-bulk-len"
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
assert_eq 0 "$RELAY_RC" "(b) the run drains to --endpos (exit 0), no endless retry"
refusal=$(grep -m1 'Protocol error' "$RELAY_LOG" || true)
log "(b) $refusal"
assert_match "$refusal" "a value of [0-9]+ bytes in it is over the server's proto-max-bulk-len" "(b) the refusal is logged with the value's size"
again=$(grep -m1 'running again from the last confirmed position' "$RELAY_LOG" || true)
assert_contains "$again" "raise proto-max-bulk-len, or set --max-event-bytes below it" "(b) one warning names the permanent fixes"
assert_eq 2 "$(xlen outbox:dead-letter)" "(b) the event is dead-lettered"
assert_contains "$(rx fields outbox:dead-letter reason | tail -n 1)" "learned from a refusal" "(b) with the reason"
assert_eq "a2 b1 b3" "$(rx fields outbox:big aggregate_id | tr '\n' ' ' | sed 's/ $//')" "(b) the other events once, in order"
wait_confirmed outbox_relay "$end" 10 || fail "(b) not confirmed up to $end"
ok "(b) confirmed past the refused event ($before -> $end)"
relay_run_until "$end" --max-event-bytes 1000000 || true
assert_eq 0 "$RELAY_RC" "(b) the permanent fix: the relay starts and drains"
assert_eq 2 "$(xlen outbox:dead-letter)" "(b) nothing dead-lettered twice"
assert_eq 3 "$(xlen outbox:big)" "(b) nothing published twice"
pass
