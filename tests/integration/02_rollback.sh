#!/bin/bash
# 02_rollback: rolled-back transactions, rolled-back savepoints and failed
# plpgsql exception blocks never reach Redis; committed rows around them do,
# in commit order.
. "$(dirname "$0")/lib.sh"
setup_tmp
pg_start
load_schema
redis_start
slot_create outbox_relay

# uid LETTER: a fixed uuid per letter, e.g. uid C = 00000000-0000-0000-0000-00000000000c
uid() { printf '00000000-0000-0000-0000-%012x' "$(printf '%d' "'$1")"; }
ins() { echo "INSERT INTO outbox (id, aggregate_type, aggregate_id, event_type, payload) VALUES ('$(uid "$1")', 'order', '$1', 'e', '{\"k\": \"$1\"}');"; }

psql_q <<SQL
BEGIN; $(ins A) COMMIT;
BEGIN; $(ins B) ROLLBACK;
BEGIN; $(ins C) SAVEPOINT s1; $(ins D) ROLLBACK TO SAVEPOINT s1; $(ins E) COMMIT;
BEGIN; SAVEPOINT s2; $(ins F) RELEASE SAVEPOINT s2; $(ins G) COMMIT;
BEGIN; $(ins H) SAVEPOINT s3; $(ins I) COMMIT;
BEGIN; SAVEPOINT s4; $(ins J) SAVEPOINT s5; $(ins L) ROLLBACK TO SAVEPOINT s4; $(ins M) COMMIT;
DO \$\$
BEGIN
  $(ins N)
  BEGIN
    $(ins O)
    RAISE EXCEPTION 'roll back the block';
  EXCEPTION WHEN raise_exception THEN NULL;
  END;
END
\$\$;
BEGIN;
INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
  SELECT 'order', 'big-rollback', 'e', jsonb_build_object('i', i) FROM generate_series(1, 5000) i;
ROLLBACK;
BEGIN; $(ins P) COMMIT;
SQL

for x in A C E F G H I M N P; do uid $x; echo; done >"$T/expected"
assert_eq "$(cat "$T/expected")" "$(psql_q "SELECT id FROM outbox ORDER BY aggregate_id")" "committed rows in the table"

relay_drain
assert_stream_ids outbox:order "$T/expected"
assert_eq 10 "$(sum_xlen)" "entries over all streams"
assert_eq 0 "$(redis_cli EXISTS outbox:dead-letter)" "nothing dead-lettered"
got=$(rx fields outbox:order aggregate_id | tr -d '\n')
assert_eq ACEFGHIMNP "$got" "aggregate_ids in commit order (B, D, J, L, O and the 5000-row rollback absent)"
pass
