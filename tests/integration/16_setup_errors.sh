#!/bin/bash
# 16_setup_errors: permanent setup failures map to their exit codes:
# 6 outbox table missing, 3 role without REPLICATION, 5 Redis refuses auth,
# 5 a password sent to a Redis that has none, 5 a database number the Redis
# does not have (SELECT out of range; each with one error line naming
# --redis-url and the fix, before any slot is created), 3 wal_level below
# logical. Each is bounded by a 30 s timeout (124 = the relay kept retrying a
# permanent error).
RELAY_TIMEOUT=${RELAY_TIMEOUT:-30}
. "$(dirname "$0")/lib.sh"
setup_tmp
pg_start
load_schema
redis_start

relay_run --table public.no_such_table || true
assert_eq 6 "$RELAY_RC" "--table public.no_such_table: exit code"
assert_contains "$(cat "$RELAY_LOG")" "no_such_table" "log names the missing table"

psql_q "CREATE ROLE plain LOGIN; GRANT SELECT ON public.outbox TO plain"
_relay_args() { RELAY_ARGS=(--pg-dsn "host=$T port=$PGPORT user=plain dbname=postgres" --redis-url "$REDIS_URL" --log-level "$RELAY_LOG_LEVEL" --http-addr ""); }
relay_run --slot s_plain || true
assert_eq 3 "$RELAY_RC" "role without REPLICATION: exit code"
unset -f _relay_args
_relay_args() { RELAY_ARGS=(--pg-dsn "$PG_DSN" --redis-url "$REDIS_URL" --log-level "$RELAY_LOG_LEVEL" --http-addr ""); }

redis_stop
redis_start --requirepass s3cret
relay_run --slot s_auth || true
assert_eq 5 "$RELAY_RC" "Redis requires a password we do not send: exit code"
redis_stop
redis_start

# redis_refused SLOT WHAT REPLY FIX: the relay exited 5 with one error line
# that quotes REPLY and names --redis-url and FIX, and created no slot.
redis_refused() {
	local line
	assert_eq 5 "$RELAY_RC" "$2: exit code (124 = retried a permanent error)"
	assert_eq 1 "$(grep -c ' error: ' "$RELAY_LOG")" "$2: one error line"
	line=$(grep ' error: ' "$RELAY_LOG")
	log "relay: ${line#* error: }"
	assert_contains "$line" "$3" "$2: the line quotes Redis's reply"
	assert_contains "$line" "--redis-url" "$2: the line names --redis-url"
	assert_contains "$line" "$4" "$2: the line says the fix"
	assert_eq 0 "$(psql_q "SELECT count(*) FROM pg_replication_slots WHERE slot_name = '$1'")" \
		"$2: no slot created"
}
REDIS_URL="unix://:n0-such-pw@$REDIS_SOCK" relay_run --slot s_nopw || true
redis_refused s_nopw "a password for a Redis without one" "without any password configured" \
	"drop the password"
assert_not_contains "$(cat "$RELAY_LOG")" "n0-such-pw" "a password for a Redis without one: no password in the log"
REDIS_URL="unix://$REDIS_SOCK?db=99" relay_run --slot s_db99 || true
redis_refused s_db99 "database 99 (the server has 16)" "DB index is out of range" \
	"raise \"databases\" in redis.conf"

psql_q "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots" >/dev/null
pg_stop fast
pg_start wal_level=replica
assert_eq replica "$(psql_q "SHOW wal_level")" "server restarted with wal_level=replica"
relay_run --slot s_replica || true
assert_eq 3 "$RELAY_RC" "wal_level=replica: exit code"
assert_match "$(cat "$RELAY_LOG")" 'wal_level' "log mentions wal_level"
pass
