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
# Emitted from a session whose TimeZone and DateStyle are not the relay's: the
# created_at format must not depend on them (checked below).
fn_id=$(PGOPTIONS='-c TimeZone=Asia/Kolkata -c DateStyle=SQL,DMY' \
	psql_q "SELECT outbox_emit_message('order', '5', 'created', '{\"b\": [1, 2]}', '{\"h\": \"v\"}')")
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

# created_at: one text format on both paths, the row's (wal2json in the relay's
# session, UTC) = the message's (outbox_emit_message), like _committed_at.
TS_RE='^[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,6})?\+00$'
rx fields outbox:order id created_at >"$T/created"
fn_ts=$(awk -F'\t' -v id="$fn_id" '$1 == id { print $2 }' "$T/created")
row_ts=$(awk -F'\t' -v id="$row_id" '$1 == id { print $2 }' "$T/created")
assert_match "$row_ts" "$TS_RE" "outbox_emit() entry: created_at is YYYY-MM-DD HH:MM:SS[.ffffff]+00 [$row_ts]"
assert_match "$fn_ts" "$TS_RE" "outbox_emit_message() entry: created_at has the same format [$fn_ts]"
assert_eq "$(psql_q "SELECT created_at AT TIME ZONE 'UTC' FROM outbox WHERE id = '$row_id'")+00" "$row_ts" \
	"outbox_emit() entry: created_at is the row's value in UTC"

# Both in one transaction (one now()) from a non-UTC session: the same text.
PGOPTIONS='-c TimeZone=America/St_Johns -c DateStyle=German' psql_q "BEGIN;
	SELECT outbox_emit('tz', '1', 'created', '{}');
	SELECT outbox_emit_message('tz', '2', 'created', '{}');
	COMMIT;" >/dev/null
relay_drain
rx fields outbox:tz aggregate_id created_at >"$T/created.tz"
assert_eq 2 "$(wc -l <"$T/created.tz")" "outbox:tz has the row and the message"
tz_row=$(awk -F'\t' '$1 == "1" { print $2 }' "$T/created.tz")
tz_msg=$(awk -F'\t' '$1 == "2" { print $2 }' "$T/created.tz")
assert_match "$tz_row" "$TS_RE" "same transaction: the row's created_at format [$tz_row]"
assert_eq "$tz_row" "$tz_msg" "same transaction: outbox_emit() and outbox_emit_message() give the same created_at text"
pass
