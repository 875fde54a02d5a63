#!/bin/bash
# 61_status: `outbox-relay status` reports the slot (name, plugin, active,
# confirmed_flush_lsn, lag, wal_status) and, per stream matching the pattern,
# length, last id, entries added, the relay's watermark and each consumer
# group's consumers, pending entries and lag; it takes the relay's flags and
# OUTBOX_RELAY_* variables; passwords never appear; exit codes 3 (PostgreSQL
# unreachable), 4 (no slot), 5 (Redis unreachable) still print what they can.
. "$(dirname "$0")/lib.sh"
setup_tmp
pg_start
load_schema
redis_start
slot_create outbox_relay

PGPW=Pw0rdNotShown
REDISPW=RedisPwNotShown

# status NAME ARGS...: run `outbox-relay status` (at most 30 s) with a clean
# environment; sets RC, OUT (stdout) and ERR (stderr).
status() {
	local name=$1
	shift
	RC=0
	env -u OUTBOX_RELAY_PG_DSN -u OUTBOX_RELAY_REDIS_URL -u OUTBOX_RELAY_SLOT \
		-u OUTBOX_RELAY_STREAM_PATTERN timeout -k 5 30 "$RELAY_BIN" status "$@" \
		>"$T/$name.out" 2>"$T/$name.err" </dev/null || RC=$?
	OUT=$(cat "$T/$name.out")
	ERR=$(cat "$T/$name.err")
	log "status $name: exit code $RC"
}

# field KEY: the value of "  KEY   value" in $OUT (slot section).
field() { sed -n "s/^  $1  *//p" <<<"$OUT" | head_n 1; }

psql_q "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
        SELECT (ARRAY['order','invoice'])[i % 2 + 1], i::text, 'created', jsonb_build_object('n', i)
        FROM generate_series(1, 30) i" >/dev/null
relay_drain --group workers
# c1 takes 4 order entries and acknowledges none; a second group on orders.
redis_cli XREADGROUP GROUP workers c1 COUNT 4 STREAMS outbox:order '>' >/dev/null
redis_cli XGROUP CREATE outbox:order audit '$' >/dev/null

# ---------------------------------------------------------------------------
# The full report, with a password in the DSN
# ---------------------------------------------------------------------------
status full --pg-dsn "$PG_DSN password=$PGPW" --redis-url "$REDIS_URL"
assert_eq 0 "$RC" "status exit code"
assert_eq "" "$ERR" "nothing on stderr"
assert_eq outbox_relay "$(field slot_name)" "slot_name"
assert_eq wal2json "$(field plugin)" "plugin"
assert_eq false "$(field active)" "active while no relay runs"
assert_eq "$(slot_confirmed_lsn outbox_relay)" "$(field confirmed_flush_lsn)" "confirmed_flush_lsn as pg_replication_slots has it"
assert_match "$(field lag_bytes)" '^[0-9]+ \(' "lag_bytes is a number"
assert_eq reserved "$(field wal_status)" "wal_status"
assert_contains "$OUT" "dbname=postgres user=postgres" "PostgreSQL connection shown"
assert_not_contains "$OUT$ERR" "$PGPW" "the DSN's password is not shown"
assert_contains "$OUT" 'Streams matching "outbox:*": 2' "two streams found"
# Stream rows: STREAM LENGTH LAST-GENERATED-ID ENTRIES-ADDED GROUPS WATERMARK
for s in outbox:order outbox:invoice; do
	row=$(grep -E "^  $s +[0-9]" <<<"$OUT" | head_n 1)
	read -r _ len last added ngroups wm <<<"$row"
	assert_eq 15 "$len" "$s: length"
	assert_eq "$(redis_cli XINFO STREAM "$s" | sed -n '/^last-generated-id$/{n;p}')" "$last" "$s: last-generated-id"
	assert_eq 15 "$added" "$s: entries-added"
	assert_match "$wm" '^[0-9A-F]+/[0-9A-F]+:[0-9]+$' "$s: watermark shown as LSN:index ($wm)"
done
# Group rows: STREAM GROUP CONSUMERS PENDING LAG LAST-DELIVERED-ID
assert_match "$OUT" '^  outbox:order +workers +1 +4 +11 +[0-9]+-[0-9]+ +[0-9]+\.[0-9]s$' "outbox:order/workers: 1 consumer, 4 pending, lag 11, the oldest pending age"
assert_match "$OUT" '^  outbox:order +audit +0 +0 +0 +[0-9]+-[0-9]+ +-$' "outbox:order/audit: nothing pending, lag 0, no pending age"
assert_match "$OUT" '^  outbox:invoice +workers +0 +0 +15 +0-0 +-$' "outbox:invoice/workers: untouched, lag 15"

# ---------------------------------------------------------------------------
# While the relay streams: active, with its pid
# ---------------------------------------------------------------------------
relay_start --group workers
wait_for "slot_active outbox_relay" 20 || fail "relay did not start streaming"
status active --pg-dsn "$PG_DSN" --redis-url "$REDIS_URL"
assert_eq 0 "$RC" "status exit code while the relay runs"
assert_eq true "$(field active)" "active while the relay streams"
assert_eq "$(psql_q "SELECT active_pid FROM pg_replication_slots WHERE slot_name = 'outbox_relay'")" \
	"$(field active_pid)" "active_pid is the walsender's"
relay_stop

# ---------------------------------------------------------------------------
# The relay's environment works as it is; --stream-pattern by variable
# ---------------------------------------------------------------------------
RC=0
OUTBOX_RELAY_PG_DSN=$PG_DSN OUTBOX_RELAY_REDIS_URL=$REDIS_URL OUTBOX_RELAY_STREAM_PATTERN='outbox:inv*' \
	OUTBOX_RELAY_GROUP=workers OUTBOX_RELAY_MAXLEN=1000 \
	timeout 30 "$RELAY_BIN" status --log-level warn >"$T/env.out" 2>&1 || RC=$?
OUT=$(cat "$T/env.out")
assert_eq 0 "$RC" "status from OUTBOX_RELAY_* variables (relay-only options ignored)"
assert_contains "$OUT" 'Streams matching "outbox:inv*": 1' "OUTBOX_RELAY_STREAM_PATTERN applies"
assert_not_contains "$OUT" "outbox:order" "only the matching stream is shown"

# ---------------------------------------------------------------------------
# Failures: each section still shown
# ---------------------------------------------------------------------------
status noslot --pg-dsn "$PG_DSN" --redis-url "$REDIS_URL" --slot nosuch
assert_eq 4 "$RC" "missing slot: exit code"
assert_contains "$OUT" "does not exist" "missing slot: said so"
assert_contains "$OUT" "outbox:order" "missing slot: the Redis section is still printed"

status nopg --pg-dsn "host=$T/nowhere port=1 dbname=x user=u password=$PGPW connect_timeout=2" \
	--redis-url "$REDIS_URL"
assert_eq 3 "$RC" "PostgreSQL unreachable: exit code"
assert_contains "$OUT" "could not connect" "PostgreSQL unreachable: said so"
assert_contains "$OUT" "outbox:order" "PostgreSQL unreachable: the Redis section is still printed"
assert_not_contains "$OUT$ERR" "$PGPW" "PostgreSQL unreachable: no password shown"

status noredis --pg-dsn "$PG_DSN" --redis-url "unix://:$REDISPW@$T/nowhere.sock"
assert_eq 5 "$RC" "Redis unreachable: exit code"
assert_contains "$OUT" "could not connect to Redis" "Redis unreachable: said so"
assert_eq outbox_relay "$(field slot_name)" "Redis unreachable: the slot section is still printed"
assert_not_contains "$OUT$ERR" "$REDISPW" "Redis unreachable: no password shown"

status both --pg-dsn "host=$T/nowhere port=1 dbname=x connect_timeout=2" --redis-url "unix://$T/nowhere.sock"
assert_eq 3 "$RC" "both unreachable: the first problem's exit code"

status badflag --pg-dsn "$PG_DSN" --bogus
assert_eq 2 "$RC" "unknown option: exit code"
assert_contains "$ERR" "outbox-relay status --help" "unknown option: points at status --help"
status nopattern --pg-dsn "$PG_DSN" --stream-pattern
assert_eq 2 "$RC" "--stream-pattern without a value: exit code"
status nodsn --redis-url "$REDIS_URL"
assert_eq 2 "$RC" "missing --pg-dsn: exit code"
status help --help
assert_eq 0 "$RC" "--help exit code"
assert_contains "$OUT" "--stream-pattern" "--help documents --stream-pattern"

# ---------------------------------------------------------------------------
# Redis with a password (last: redis_cli has none)
# ---------------------------------------------------------------------------
redis_cli CONFIG SET requirepass "$REDISPW" >/dev/null
echo "$REDISPW" >"$T/redis.pw"
status redispw --pg-dsn "$PG_DSN" --redis-url "unix://$REDIS_SOCK" --redis-password-file "$T/redis.pw"
assert_eq 0 "$RC" "--redis-password-file: exit code"
assert_contains "$OUT" "outbox:order" "--redis-password-file: streams shown"
assert_not_contains "$OUT$ERR" "$REDISPW" "--redis-password-file: password not shown"
status redisurlpw --pg-dsn "$PG_DSN" --redis-url "unix://:$REDISPW@$REDIS_SOCK"
assert_eq 0 "$RC" "password in --redis-url: exit code"
assert_not_contains "$OUT$ERR" "$REDISPW" "password in --redis-url: not shown"
status redisbadpw --pg-dsn "$PG_DSN" --redis-url "unix://:wrong-$REDISPW@$REDIS_SOCK"
assert_eq 5 "$RC" "wrong Redis password: exit code"
assert_not_contains "$OUT$ERR" "$REDISPW" "wrong Redis password: not shown"
pass
