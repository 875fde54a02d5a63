#!/bin/bash
# 81_failover_behind: PostgreSQL fails over to a server that is behind what
# the relay already put in Redis. The old primary committed (and the relay
# published) OLD_ONLY rows that the new server never received; the new
# server's commits then take WAL positions at or below the streams'
# watermarks. Before the fix the relay dropped them as replays (a review
# reproduced 50 of 50 rows lost, after `heal` too, or with no refusal at all
# when the slot existed on the new server). Now the relay refuses (exit 8,
# one line naming the history and `outbox-relay heal`, never --accept-gap),
# heal deletes this slot's watermarks at or past the slot's position, and
# every row the new server holds is in the streams exactly once: the rows
# committed before the heal, during it, and after the relay started again.
# FAILOVER_MODE:
#   promoted       a physical standby stopped (so behind), the primary stopped
#                  with -m immediate, the standby promoted (timeline 2); the
#                  relay runs through the failover (multi-host DSN) and is
#                  judged by what it handed to Redis itself.
#   promoted_slot  the same, the relay stopped first, and the slot created on
#                  the new primary before it starts again (a synced failover
#                  slot, PostgreSQL 17's, or an operator's): before the fix no
#                  refusal at all.
#   copy           a base backup started as a primary on timeline 1 (a copy
#                  restored): the history is the same timeline; the WAL end
#                  tells.
# The heal runs as the outbox-relay user of deploy/redis/users.acl (SCAN, DEL).
RELAY_LOG_LEVEL=${RELAY_LOG_LEVEL:-info}
MODE=${FAILOVER_MODE:-promoted}
OLD_ONLY=300
. "$(dirname "$0")/lib.sh"
setup_tmp
PG2=$T/pg2
trap '_rc=$?; [ -f "$PG2/postmaster.pid" ] && as_pg "$PG_BINDIR/pg_ctl" -D "$PG2" -m immediate -w -t 10 stop >/dev/null 2>&1; (exit $_rc); _cleanup' EXIT
log "mode $MODE"
pg_start
load_schema
redis_start
ROOT=$(cd "$TESTS_DIR/.." && pwd)
psql_q "SELECT pg_create_physical_replication_slot('phys_standby')" >/dev/null
T_IN=${T#"${PG_CHROOT:-}"} # the socket dir as the servers see it
psql2() { psql -X -A -t -q -v ON_ERROR_STOP=1 -h "$T" -p 5434 -U postgres -d postgres -c "$1"; }
# emit_on PORT N FROM: N rows, one transaction each, aggregate ids FROM..
emit_on() {
	seq "$3" $(($3 + $2 - 1)) | sed "s/.*/SELECT outbox_emit('order', '&', 'created', '{}');/" |
		psql -X -q -v ON_ERROR_STOP=1 -h "$T" -p "$1" -U postgres -d postgres >/dev/null
}

# The second server: a base backup, port 5434; a standby (-R) unless a copy.
as_pg "$PG_BINDIR/pg_basebackup" -D "$PG2" -h "$T" -p "$PGPORT" -U postgres -X stream -S phys_standby \
	$([ "$MODE" = copy ] || echo -R) >"$T/basebackup.log" 2>&1 ||
	fail "pg_basebackup failed: $(tail -n 3 "$T/basebackup.log")"
echo "port = 5434" >>"$PG2/postgresql.auto.conf"
if [ "$MODE" != copy ]; then
	cat >>"$PG2/postgresql.auto.conf" <<-EOF2
		hot_standby = on
		primary_slot_name = 'phys_standby'
		primary_conninfo = 'host=$T_IN port=$PGPORT user=postgres dbname=postgres'
	EOF2
	as_pg "$PG_BINDIR/pg_ctl" -D "$PG2" -l "$T/pg2.log" -w -t 30 start >/dev/null ||
		fail "standby did not start: $(tail -n 5 "$T/pg2.log")"
	wait_for "[ \"\$(psql_q \"SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'\")\" = 1 ]" 30 ||
		fail "the standby does not stream"
fi

DSN="host=$T,$T port=$PGPORT,5434 user=postgres dbname=postgres target_session_attrs=read-write"
relay_start --pg-dsn "$DSN" --retry-max 1s --status-interval 1s
wait_for "slot_active outbox_relay" 30 || fail "the relay did not start streaming"
emit_on "$PGPORT" 20 1
wait_entries 20 30 outbox:order || fail "the relay did not publish the first 20 rows"
if [ "$MODE" != copy ]; then
	lsn=$(current_lsn)
	wait_for "[ \"\$(psql2 \"SELECT pg_last_wal_replay_lsn() >= '$lsn'\")\" = t ]" 30 ||
		fail "the standby did not replay the first rows"
	as_pg "$PG_BINDIR/pg_ctl" -D "$PG2" -m fast -w -t 30 stop >/dev/null || fail "standby stop failed"
fi
# What only the old primary gets, and the relay publishes.
emit_on "$PGPORT" "$OLD_ONLY" 1000
wait_entries $((20 + OLD_ONLY)) 60 outbox:order || fail "the relay did not publish the old primary's rows"
psql_q "SELECT id FROM outbox" | sort >"$T/old_ids"
[ "$MODE" = promoted ] || relay_stop
pg_stop immediate
log "old primary stopped (-m immediate) after $((20 + OLD_ONLY)) rows, all published"

# The new primary.
if [ "$MODE" = copy ]; then
	as_pg "$PG_BINDIR/pg_ctl" -D "$PG2" -l "$T/pg2.log" -w -t 60 start >/dev/null ||
		fail "the copy did not start: $(tail -n 5 "$T/pg2.log")"
else
	as_pg "$PG_BINDIR/pg_ctl" -D "$PG2" -l "$T/pg2.log" -w -t 30 start >/dev/null ||
		fail "standby did not start again: $(tail -n 5 "$T/pg2.log")"
	as_pg "$PG_BINDIR/pg_ctl" -D "$PG2" -w -t 30 promote >/dev/null || fail "promote failed"
fi
wait_for "[ \"\$(psql2 'SELECT pg_is_in_recovery()')\" = f ]" 30 || fail "the new server is not a primary"
tli=$(psql2 "SELECT ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::int")
log "new primary on timeline $tli at $(psql2 'SELECT pg_current_wal_lsn()'); $(psql2 'SELECT count(*) FROM outbox') rows"
[ "$MODE" = promoted_slot ] && psql2 "SELECT 1 FROM pg_create_logical_replication_slot('outbox_relay', 'wal2json')" >/dev/null
# Before the relay looks: 50 rows; with the slot there, more WAL than the old
# primary wrote after the standby stopped, so that its WAL end passes what
# Redis holds and only the timeline history tells.
emit_on 5434 $([ "$MODE" = promoted_slot ] && echo $((2 * OLD_ONLY)) || echo 50) 5000

[ "$MODE" = promoted ] || relay_start --pg-dsn "$DSN" --retry-max 1s --status-interval 1s
if ! relay_wait 60; then # what it cost: the new server's rows missing from the streams
	relay_stop
	psql2 "SELECT id FROM outbox" | sort >"$T/expected"
	rx fields outbox:order id | sort -u >"$T/got"
	fail "the relay streamed on from the new server: $(comm -23 "$T/expected" "$T/got" | wc -l) of its $(wc -l <"$T/expected") rows are missing from the streams"
fi
assert_eq 8 "$RELAY_RC" "the relay refuses the server behind Redis (exit 8)"
line=$(grep ' error: ' "$RELAY_LOG" | tail -n 1)
case $MODE in
promoted_slot)
	assert_eq 2 "$tli" "promoted: timeline 2"
	assert_contains "$line" "left timeline 1 at" "the line names the timeline the server left before what Redis has"
	;;
*) assert_contains "$line" "has WAL up to" "the line says the server's WAL ends before what Redis has" ;;
esac
assert_contains "$line" "outbox-relay heal" "the line says how to heal"
assert_contains "$line" "--accept-gap does not apply" "the line rules out --accept-gap"
log "refusal: $line"

# The heal, as the shipped outbox-relay ACL user, while the application commits.
relaypw=relay-secret-81
line=$(grep '^user outbox-relay ' "$ROOT/deploy/redis/users.acl" |
	sed "s/#RELAY_PASSWORD_SHA256/#$(printf '%s' "$relaypw" | sha256sum | cut -d' ' -f1)/")
read -r -a words <<<"$line"
assert_eq OK "$(redis_cli ACL SETUSER "${words[@]:1}")" "ACL SETUSER outbox-relay (deploy/redis/users.acl)"
emit_on 5434 200 6000 &
APP=$!
HEAL_RC=0
HEAL_OUT=$(timeout -k 5 120 "$RELAY_BIN" heal --pg-dsn "$DSN" --redis-url "unix://outbox-relay:$relaypw@$REDIS_SOCK" \
	--log-level info --http-addr "" --fetch-size 5 2>&1) || HEAL_RC=$?
log "heal exit code $HEAL_RC: $(grep '^heal ' <<<"$HEAL_OUT" | tr '\n' ' ')"
assert_eq 0 "$HEAL_RC" "heal exit code ($(tail -n 3 <<<"$HEAL_OUT" | tr '\n' ' '))"
assert_not_contains "$HEAL_OUT" "NOPERM" "heal needs no command the shipped ACL user lacks"
deleted=$(sed -n 's/.* watermarks_deleted=\([0-9]*\).*/\1/p' <<<"$HEAL_OUT")
[ "${deleted:-0}" -ge 1 ] || fail "heal deleted no watermark: $(grep '^heal' <<<"$HEAL_OUT")"
ok "heal deleted $deleted watermark(s) at or past the new slot's position"
relay_start --pg-dsn "$DSN" --retry-max 1s
wait "$APP" || fail "the application's commits failed"
emit_on 5434 200 7000 # after the heal, while the relay streams
psql2 "SELECT id FROM outbox" | sort >"$T/expected"
n=$(wc -l <"$T/expected")
# The old primary's rows that the new server never had stay in the streams.
comm -23 "$T/old_ids" "$T/expected" >"$T/old_only"
wait_for "[ \"\$(xlen outbox:order)\" -ge $((n + $(wc -l <"$T/old_only"))) ]" 60 ||
	log "the streams hold $(xlen outbox:order) entries, $n + $(wc -l <"$T/old_only") expected"
relay_stop
rx fields outbox:order id >"$T/got.all"
grep -vxF -f "$T/old_only" "$T/got.all" >"$T/got" || true
ids_exactly_once "$T/expected" "$T/got" "the $n rows of the new primary"
assert_eq "$(wc -l <"$T/old_only")" "$(grep -cxF -f "$T/old_only" "$T/got.all")" \
	"the old primary's rows the new one never had are in the streams once each (published before the failover)"
log "mode $MODE: $n rows on the new primary all in the streams once; $(wc -l <"$T/old_only") rows only the old primary had"
pass
