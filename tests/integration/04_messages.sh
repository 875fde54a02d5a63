#!/bin/bash
# 04_messages: transactional logical messages with prefix "outbox" are
# published (payload as its JSON text); non-transactional messages, other
# prefixes and rolled-back messages are not. outbox_emit_message() works and
# messages interleave with table rows in WAL order.
. "$(dirname "$0")/lib.sh"
setup_tmp
pg_start
load_schema
redis_start
slot_create outbox_relay

msg() { echo "{\"id\":\"$1\",\"aggregate_type\":\"order\",\"aggregate_id\":\"$2\",\"event_type\":\"created\",\"payload\":{\"a\":$2}}"; }

psql_q "SELECT pg_logical_emit_message(true, 'outbox', '$(msg m1 1)')" >/dev/null
psql_q "SELECT pg_logical_emit_message(false, 'outbox', '$(msg m2 2)')" >/dev/null
psql_q "SELECT pg_logical_emit_message(true, 'other', '$(msg m3 3)')" >/dev/null
psql_q "SELECT pg_logical_emit_message(true, 'outbox2', '$(msg m3b 3)')" >/dev/null
psql_q "BEGIN; SELECT pg_logical_emit_message(true, 'outbox', '$(msg m4 4)'); ROLLBACK;" >/dev/null
fn_id=$(psql_q "SELECT outbox_emit_message('order', '5', 'created', '{\"b\": [1, 2]}', '{\"h\": \"v\"}')")
# One statement, one transaction: the row's INSERT, then the message.
row_id=$(psql_q "SELECT outbox_emit('order', '6', 'created', '{\"row\": 6}'),
                        pg_logical_emit_message(true, 'outbox', '$(msg m7 7)')" | cut -d'|' -f1)
assert_match "$fn_id" '^[0-9a-f-]{36}$' "outbox_emit_message() returned a uuid"
assert_eq 0 "$(psql_q "SELECT count(*) FROM outbox WHERE id = '$fn_id'")" "outbox_emit_message() wrote no table row"

relay_drain
printf '%s\n' m1 "$fn_id" "$row_id" m7 >"$T/expected"
assert_stream_ids outbox:order "$T/expected"
assert_eq "outbox:order" "$(rx streams 'outbox:*')" "no other stream"
assert_eq 4 "$(sum_xlen)" "non-transactional (m2), other-prefix (m3, m3b) and rolled-back (m4) messages not published"

first=$(rx fields outbox:order id aggregate_type aggregate_id event_type payload | head_n 1)
assert_eq "$(printf 'm1\torder\t1\tcreated\t{"a":1}')" "$first" "m1 fields (payload is the message's JSON text)"
assert_match "$(rx fields outbox:order _lsn | head_n 1)" '^[0-9A-F]+/[0-9A-F]+$' "m1 has an _lsn"

# outbox_emit_message(): compare JSON values, the relay may re-serialize.
python3 - "$(rx fields outbox:order payload headers aggregate_id | sed -n 2p)" <<'PY' || fail "outbox_emit_message() entry: wrong payload/headers"
import json, sys
payload, headers, agg = sys.argv[1].split("\t")
assert json.loads(payload) == {"b": [1, 2]}, payload
assert json.loads(headers) == {"h": "v"}, headers
assert agg == "5", agg
PY
ok "outbox_emit_message() entry carries payload, headers and aggregate_id"
pass
