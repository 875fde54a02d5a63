#!/bin/bash
# 18_big_event_resend: a large event is sent to Redis from the WAL message's
# own memory, in slices (never copied whole). Redis (AOF, appendfsync always)
# freezes (SIGSTOP) while a 24 MiB row full of characters JSON escapes twice
# (quotes, backslashes) is being sent, and is then SIGKILLed and restarted
# from its AOF: the relay sends the whole call again on the new connection.
# Checked: the payload field is byte-for-byte the row's jsonb text (compared
# inside Redis), the event and its neighbours arrive exactly once in commit
# order, the slot is confirmed past all of them, the relay reconnected, and
# (outside sanitizer builds) the relay's peak RSS stays within 2 x the
# message + 24 MB. With RELAY_PLUGIN=pgoutput (18_big_event_resend_pgoutput)
# the value is sent from the buffer its transaction was read back into from
# the spool's file (over --txn-memory), and S is the value's size.
RELAY_TIMEOUT=${RELAY_TIMEOUT:-240}
# The bound is about resident memory: MALLOC_PERTURB_ (set by meson test)
# makes glibc write every byte it hands out, used or merely reserved.
unset MALLOC_PERTURB_
. "$(dirname "$0")/lib.sh"
setup_tmp
pg_start
load_schema
AOF=(--appendonly yes --appendfsync always)
redis_start "${AOF[@]}"
slot_create outbox_relay

emit() { # emit AGGREGATE_ID PAYLOAD_SQL
	psql_q "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
	        VALUES ('big', '$1', 'created', $2)" >/dev/null
}
relay_start
emit e1 "'{\"n\": 1}'"
wait_entries 1 30 outbox:big || fail "the first event was not published"
ok "relay streaming"

# 'ab"c\' is 5 bytes of text, 7 in jsonb's text form and 11 in wal2json's.
N=$((24 * 1024 * 1024 / 11))
kill -STOP "$REDIS_PID"
log "redis frozen (SIGSTOP)"
emit e2 "jsonb_build_object('blob', repeat('ab\"c\\', $N))"
emit e3 "'{\"n\": 3}'"
end=$(current_lsn)
want_len=$(psql_q "SELECT octet_length(payload::text) FROM outbox WHERE aggregate_id = 'e2'")
log "e2's payload: $want_len bytes of jsonb text"
sleep 3 # the relay reads the row and writes until the socket is full
redis_kill9 "${AOF[@]}"
wait_entries 3 120 outbox:big || fail "not all 3 events were published after Redis came back"
wait_confirmed outbox_relay "$end" 60 || fail "slot not confirmed up to $end"
ok "all events published and confirmed up to $end"
assert_eq "e1 e2 e3" "$(rx fields outbox:big aggregate_id | tr '\n' ' ' | sed 's/ $//')" "each event once, in commit order"
check=$(redis_cli EVAL "
local e = redis.call('XRANGE', KEYS[1], '-', '+')[2][2]
for i = 1, #e, 2 do
  if e[i] == 'payload' then
    local want = '{\"blob\": \"' .. string.rep('ab\\\\\"c\\\\\\\\', tonumber(ARGV[1])) .. '\"}'
    return #e[i + 1] .. ' ' .. tostring(e[i + 1] == want)
  end
end
return 'no payload field'" 1 outbox:big "$N")
assert_eq "$want_len true" "$check" "e2's payload field is the row's jsonb text, byte for byte"
relay_stop
assert_match "$(grep -c 'unacknowledged event(s) will be sent again' "$RELAY_LOG")" '^[1-9]' "the relay lost Redis with the call unacknowledged and sent it again"
rss=$(relay_peak_rss_kb)
if [ "${RELAY_PLUGIN:-}" = pgoutput ]; then
	msg_kb=$((want_len / 1024)) # pgoutput sends the value's text as it is: S is about the value
else
	msg_kb=$(((want_len + want_len / 2) / 1024)) # the row in wal2json, escapes included (upper bound)
fi
log "relay peak_rss_kb=$rss for a row of ~$msg_kb kB in ${RELAY_PLUGIN:-wal2json}"
if relay_sanitized || [ -n "${ASAN_OPTIONS:-}" ]; then
	log "sanitizer build: peak RSS not asserted"
else
	assert_lt "$rss" $((2 * msg_kb + 24000)) "peak RSS within 2 x the message + 24 MB (kB)"
fi
pass
