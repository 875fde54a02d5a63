#!/bin/bash
# 03_ignored_changes: UPDATE, DELETE and TRUNCATE of outbox rows publish
# nothing (not even dead letters), and the relay still confirms past them.
. "$(dirname "$0")/lib.sh"
setup_tmp
pg_start
load_schema
redis_start
slot_create outbox_relay

psql_q "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
        SELECT 'order', i::text, 'created', jsonb_build_object('i', i) FROM generate_series(1, 3) i"
relay_drain
assert_eq 3 "$(xlen outbox:order)" "3 inserts published"

psql_q <<'SQL'
UPDATE outbox SET payload = '{"changed": true}', event_type = 'changed' WHERE aggregate_id = '1';
UPDATE outbox SET aggregate_type = 'customer' WHERE aggregate_id = '2';
BEGIN; UPDATE outbox SET headers = '{"h": 1}'; DELETE FROM outbox WHERE aggregate_id = '3'; COMMIT;
DELETE FROM outbox;
INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload) VALUES ('order', 't', 'x', '{}');
DELETE FROM outbox WHERE aggregate_id = 't';
TRUNCATE outbox;
SQL
# The insert of row 't' above is an insert and is published; everything else is not.
end=$(current_lsn)
relay_run_until "$end" || true
assert_eq 0 "$RELAY_RC" "relay reaches --endpos $end past the updates/deletes/truncate"
assert_lsn_ge "$(slot_confirmed_lsn outbox_relay)" "$end" "confirmed_flush_lsn advanced past them"
assert_eq 4 "$(xlen outbox:order)" "outbox:order holds the 3 first inserts plus the insert of row t"
assert_eq "1 2 3 t" "$(rx fields outbox:order aggregate_id | tr '\n' ' ' | sed 's/ $//')" "aggregate_ids published"
assert_eq created "$(rx fields outbox:order event_type | head_n 1)" "first entry unchanged by the UPDATE"
assert_eq "outbox:order" "$(rx streams 'outbox:*')" "no other stream (the UPDATE to customer published nothing)"
assert_eq 0 "$(redis_cli EXISTS outbox:dead-letter)" "nothing dead-lettered"

# Still publishing after the TRUNCATE.
psql_q "SELECT outbox_emit('order', 'after', 'created', '{}')" >/dev/null
relay_drain
assert_eq 5 "$(xlen outbox:order)" "an insert after TRUNCATE is published"
assert_eq after "$(rx fields outbox:order aggregate_id | tail -n 1)" "last entry is the new insert"

# Insert-then-delete in one transaction (sql/outbox.sql, option c): the table
# stays empty and the event is still published.
psql_q "BEGIN;
        SELECT outbox_emit('order', 'same-tx', 'created', '{\"k\": 1}');
        DELETE FROM outbox WHERE aggregate_id = 'same-tx';
        COMMIT;" >/dev/null
assert_eq 0 "$(psql_q "SELECT count(*) FROM outbox WHERE aggregate_id = 'same-tx'")" "insert-then-delete leaves no row"
relay_drain
assert_eq 6 "$(xlen outbox:order)" "insert-then-delete in one transaction is published"
assert_eq "same-tx	{\"k\": 1}" "$(rx fields outbox:order aggregate_id payload | tail -n 1)" "its entry carries the inserted row"
pass
