#!/bin/bash
# 59_republish_rules: what `outbox-relay republish` (and heal, which runs it)
# must not get wrong (issue 21, findings 5 and 6). Each failed before its fix.
# (a) a value over Redis's proto-max-bulk-len with CONFIG denied: Redis drops
#     the connection; republish runs again with that size dead-lettered and
#     ends with exit 0, the other rows once. (Before: retried for ever.)
# (b) an ACL refusal of a stream key inside the publish call: exit 5 with the
#     refusal, no endless retry. (Before: retried for ever.)
# (c) two events of one aggregate in one transaction (same created_at, random
#     uuid ids) come out in insert order. (Before: in id order, about half
#     reversed.)
#     The same after CLUSTER put every paid row before its created row in the
#     heap (xmin and cmin kept): the statement order (cmin) decides, not the
#     row's place (ctid). (Before: by ctid, all 40 reversed.)
# (d) rows whose time column is NULL are counted in the summary and a warning.
#     (Before: skipped without a word.)
# (e) a `timestamp without time zone` time column written in the database's
#     zone (America/New_York) is compared in that zone. (Before: read as UTC,
#     the rows of the last 5 hours were missed.)
# (f) the exit 8 line's `republish --since` reaches back before the record's
#     last commit: a transaction that started before that commit and committed
#     after it (its created_at is earlier) is republished. (Before: the line
#     printed the commit time itself and that row was lost.)
. "$(dirname "$0")/lib.sh"
setup_tmp
pg_start
load_schema
redis_start
slot_create outbox_relay

republish() { # ARGS...: republish, 40 s at most; output in $RP_OUT, exit code in $RP_RC
	RP_RC=0
	RP_OUT=$(timeout -k 5 40 "$RELAY_BIN" republish --pg-dsn "$PG_DSN" --log-level info \
		--http-addr "" --retry-max 1s "$@" 2>&1) || RP_RC=$?
	log "republish exit code $RP_RC: $(grep '^republish ' <<<"$RP_OUT" || true)"
}
summary() { grep "^republish " <<<"$RP_OUT" | grep -o " $1=[0-9]*" | cut -d= -f2; }
ADMIN_URL=$REDIS_URL

# ---- (a) a value too large, CONFIG denied -------------------------------------
assert_eq OK "$(redis_cli CONFIG SET proto-max-bulk-len 1mb)" "(a) proto-max-bulk-len 1mb"
assert_eq OK "$(redis_cli ACL SETUSER relay on '>relay-pw-59' '~*' '&*' '+@all' '-config')" "(a) a user without CONFIG"
psql_q "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload, created_at) VALUES
        ('big', 'a1', 'created', '{}', '2030-01-01 00:00:01Z'),
        ('big', 'a2', 'created', jsonb_build_object('blob', repeat('y', 2000000)), '2030-01-01 00:00:02Z'),
        ('big', 'a3', 'created', '{}', '2030-01-01 00:00:03Z')" >/dev/null
republish --redis-url "unix://relay:relay-pw-59@$REDIS_SOCK" --since 2030-01-01 --until 2030-01-02
assert_eq 0 "$RP_RC" "(a) republish ends (exit 0), no endless retry"
assert_eq 1 "$(summary dead_lettered)" "(a) the large row is dead-lettered"
assert_contains "$RP_OUT" "republishing again from the start, with field values of" "(a) one warning says why it ran again"
assert_eq "a1 a3" "$(rx fields outbox:big aggregate_id | tr '\n' ' ' | sed 's/ $//')" "(a) the other rows once, in order"
assert_contains "$(rx fields outbox:dead-letter reason | tail -n 1)" "learned from a refusal" "(a) the dead letter says why"
redis_cli CONFIG SET proto-max-bulk-len 512mb >/dev/null

# ---- (b) an ACL refusal inside the call -----------------------------------------
assert_eq OK "$(redis_cli ACL SETUSER limited on '>limited-pw-59' '~outbox-relay:*' '~outbox:dead-letter' '~outbox:big' '&*' '+@all')" "(b) a user who may not write outbox:denied"
psql_q "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload, created_at) VALUES
        ('denied', 'b1', 'created', '{}', '2031-01-01 00:00:01Z')" >/dev/null
republish --redis-url "unix://limited:limited-pw-59@$REDIS_SOCK" --since 2031-01-01 --until 2031-01-02
assert_eq 5 "$RP_RC" "(b) an ACL refusal: exit 5, no endless retry"
assert_contains "$RP_OUT" "error: Redis: " "(b) one error line names the refusal"
log "(b) $(grep 'error: ' <<<"$RP_OUT")"

# ---- (c) one transaction, two events of each aggregate ----------------------------
psql_q "BEGIN;
        SELECT outbox_emit('ordered', 'c' || g, 'created', '{}') FROM generate_series(1, 40) g;
        SELECT outbox_emit('ordered', 'c' || g, 'paid', '{}') FROM generate_series(1, 40) g;
        COMMIT" >/dev/null
republish --redis-url "$ADMIN_URL" --since 2000-01-01 --until 2029-01-01
assert_eq 80 "$(summary published)" "(c) 80 events republished"
rx fields outbox:ordered aggregate_id event_type >"$T/ordered"
bad=$(awk -F'\t' '$2 == "created" { c[$1] = NR } $2 == "paid" && !($1 in c) { n++ } END { print n + 0 }' "$T/ordered")
assert_eq 0 "$bad" "(c) every aggregate's created comes before its paid (insert order within the transaction)"
assert_eq "$(seq -f 'c%g' 1 40 | tr '\n' ' ')" "$(head -n 40 "$T/ordered" | cut -f1 | tr '\n' ' ')" "(c) the 40 created in insert order"
# The heap reordered: CLUSTER by an index that puts paid before created.
psql_q "CREATE INDEX outbox_59c ON outbox (event_type DESC, aggregate_id); CLUSTER outbox USING outbox_59c;
        DROP INDEX outbox_59c" >/dev/null
first=$(psql_q "SELECT event_type FROM outbox WHERE aggregate_type = 'ordered' ORDER BY ctid LIMIT 1")
assert_eq paid "$first" "(c) after CLUSTER the heap holds a paid row first"
redis_cli DEL outbox:ordered >/dev/null
republish --redis-url "$ADMIN_URL" --key-prefix p59c --since 2000-01-01 --until 2029-01-01
assert_eq 80 "$(summary published)" "(c) after CLUSTER: 80 events republished (a fresh dedup state)"
rx fields outbox:ordered aggregate_id event_type >"$T/ordered"
bad=$(awk -F'\t' '$2 == "created" { c[$1] = NR } $2 == "paid" && !($1 in c) { n++ } END { print n + 0 }' "$T/ordered")
assert_eq 0 "$bad" "(c) after CLUSTER: every created still before its paid (statement order, not heap order)"

# ---- (d) NULL time ----------------------------------------------------------------
psql_q "CREATE TABLE nt (LIKE outbox INCLUDING DEFAULTS); ALTER TABLE nt ALTER created_at DROP NOT NULL;
        INSERT INTO nt (aggregate_type, aggregate_id, event_type, payload, created_at) VALUES
        ('nt', 'd1', 'created', '{}', NULL), ('nt', 'd2', 'created', '{}', NULL), ('nt', 'd3', 'created', '{}', now())" >/dev/null
republish --redis-url "$ADMIN_URL" --table public.nt --since 2000-01-01
assert_eq 0 "$RP_RC" "(d) exit 0"
assert_eq 1 "$(summary published)" "(d) the row with a time is published"
assert_eq 2 "$(summary skipped_null_time)" "(d) the summary counts the 2 rows with a NULL created_at"
assert_contains "$RP_OUT" '2 row(s) of public.nt have a NULL created_at' "(d) a warning says so"

# ---- (e) timestamp without time zone, written in New York -------------------------
psql_q "ALTER DATABASE postgres SET timezone = 'America/New_York'" >/dev/null
psql_q "CREATE TABLE tz (LIKE outbox INCLUDING DEFAULTS); ALTER TABLE tz ALTER created_at TYPE timestamp;
        ALTER TABLE tz ALTER created_at SET DEFAULT now()" >/dev/null
psql_q "INSERT INTO tz (aggregate_type, aggregate_id, event_type, payload) VALUES ('tz', 'e1', 'created', '{}')" >/dev/null
since=$(date -u -d '-2 minutes' +%Y-%m-%dT%H:%M:%SZ)
republish --redis-url "$ADMIN_URL" --table public.tz --since "$since"
psql_q "ALTER DATABASE postgres RESET timezone" >/dev/null
assert_eq 0 "$RP_RC" "(e) exit 0"
assert_eq 1 "$(summary published)" "(e) the row written 'now' in New York time is after --since $since"

# ---- (f) the printed --since, and a transaction that started before the record's commit
redis_cli DEL outbox:order >/dev/null
psql_q "BEGIN; SELECT outbox_emit('order', 'f-long', 'created', '{}'); SELECT pg_sleep(4); COMMIT" >/dev/null &
long_pid=$!
sleep 1
psql_q "SELECT outbox_emit('order', 'f-1', 'created', '{}')" >/dev/null
relay_drain
psql_q "SELECT pg_drop_replication_slot('outbox_relay')" >/dev/null
wait "$long_pid"
relay_run || true
assert_eq 8 "$RELAY_RC" "(f) the relay refuses the gap"
line=$(grep ' error: ' "$RELAY_LOG" | tail -n 1)
since=$(sed -n 's/.*republish --since \([^;]*\);.*/\1/p' <<<"$line")
committed=$(sed -n 's/.*(committed \([^)]*\)).*/\1/p' <<<"$line")
assert_lt "$(date -d "$since" +%s)" "$(date -d "$committed" +%s)" "(f) the printed --since $since is before the last commit $committed"
republish --redis-url "$ADMIN_URL" --since "$since"
assert_eq 0 "$RP_RC" "(f) exit 0"
assert_contains "$(rx fields outbox:order aggregate_id | tr '\n' ' ')" "f-long" "(f) the long transaction's row (created before the record's commit, committed after it) is republished"
pass
