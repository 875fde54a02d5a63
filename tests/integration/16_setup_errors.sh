#!/bin/bash
# 16_setup_errors: permanent setup failures map to their exit codes:
# 6 outbox table missing, 3 role without REPLICATION, 5 Redis refuses auth,
# 3 wal_level below logical. Each is bounded by a 30 s timeout (124 = the
# relay kept retrying a permanent error).
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

psql_q "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots" >/dev/null
pg_stop fast
pg_start wal_level=replica
assert_eq replica "$(psql_q "SHOW wal_level")" "server restarted with wal_level=replica"
relay_run --slot s_replica || true
assert_eq 3 "$RELAY_RC" "wal_level=replica: exit code"
assert_match "$(cat "$RELAY_LOG")" 'wal_level' "log mentions wal_level"
pass
