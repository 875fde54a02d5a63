#!/bin/bash
# 49_pg_failover: a PostgreSQL primary + physical standby; the relay streams
# through a multi-host DSN (target_session_attrs=read-write) while events
# commit continuously; the primary is stopped with -m immediate and the
# standby promoted.
# - PostgreSQL 17+ (PG_CHROOT): the slot is a failover slot, synced to the
#   standby (sync_replication_slots, synchronized_standby_slots): the relay
#   reconnects to the new primary, finds the synced slot and goes on: every
#   event the new primary holds is in Redis exactly once, in order.
# - PostgreSQL 15/16: the standby has no slot: the relay refuses (exit 8,
#   never a silent gap); republish --since <the printed time> and
#   --accept-gap then bring the stream to exactly-once completeness. When the
#   relay had handed Redis a commit the (asynchronous) standby never got, the
#   line says so instead and heal does it (81_failover_behind).
# Prints: events committed, lost, duplicated, and the time to resume.
RELAY_LOG_LEVEL=${RELAY_LOG_LEVEL:-info}
. "$(dirname "$0")/lib.sh"
setup_tmp
PG2=$T/pg2
trap '_rc=$?; [ -f "$PG2/postmaster.pid" ] && as_pg "$PG_BINDIR/pg_ctl" -D "$PG2" -m immediate -w -t 10 stop >/dev/null 2>&1; (exit $_rc); _cleanup' EXIT
pg_start
MAJOR=$(psql_q "SHOW server_version_num")
MAJOR=$((MAJOR / 10000))
FAILOVER_SLOTS=$([ "$MAJOR" -ge 17 ] && echo 1 || echo 0)
load_schema
redis_start
psql_q "SELECT pg_create_physical_replication_slot('phys_standby')" >/dev/null
if [ "$FAILOVER_SLOTS" = 1 ]; then
	psql_q "ALTER SYSTEM SET synchronized_standby_slots = 'phys_standby'" >/dev/null
	psql_q "SELECT pg_reload_conf()" >/dev/null
fi

# The standby: a base backup of the primary, port 5434, same socket dir.
as_pg "$PG_BINDIR/pg_basebackup" -D "$PG2" -h "$T" -p "$PGPORT" -U postgres -X stream -S phys_standby -R \
	>"$T/basebackup.log" 2>&1 || fail "pg_basebackup failed: $(tail -n 3 "$T/basebackup.log")"
T_IN=${T#"${PG_CHROOT:-}"} # the socket dir as the servers see it
# postgresql.auto.conf (where -R wrote its primary_conninfo) is read last: add there.
cat >>"$PG2/postgresql.auto.conf" <<-EOF2
	port = 5434
	hot_standby = on
	hot_standby_feedback = on
	primary_slot_name = 'phys_standby'
	primary_conninfo = 'host=$T_IN port=$PGPORT user=postgres dbname=postgres'
EOF2
[ "$FAILOVER_SLOTS" = 1 ] && echo "sync_replication_slots = on" >>"$PG2/postgresql.auto.conf"
as_pg "$PG_BINDIR/pg_ctl" -D "$PG2" -l "$T/pg2.log" -w -t 30 start >/dev/null || fail "standby did not start: $(tail -n 5 "$T/pg2.log")"
psql2() { psql -X -A -t -q -h "$T" -p 5434 -U postgres -d postgres -c "$1"; }
wait_for "[ \"\$(psql_q \"SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'\")\" = 1 ]" 30 ||
	fail "the standby does not stream"
ok "PostgreSQL $MAJOR primary (5433) + standby (5434) streaming"

DSN="host=$T,$T port=$PGPORT,5434 user=postgres dbname=postgres target_session_attrs=read-write"
# emitter N FROM: commit N events (aggregate_id FROM..), one per transaction, to
# whichever server is the primary; failed commits are retried as new events.
emitter() {
	local i=$2 end=$(($2 + $1))
	while [ "$i" -lt "$end" ]; do
		psql -X -A -t -q "$DSN connect_timeout=2" -c "SELECT outbox_emit('order', '$i', 'created', '{}')" >/dev/null 2>&1 || sleep 0.05
		i=$((i + 1))
	done
}

relay_start --pg-dsn "$DSN" --retry-max 1s --status-interval 1s
wait_for "slot_active outbox_relay" 20 || fail "the relay did not start streaming"
emitter 150 1 &
EMIT=$!
wait_entries 60 30 outbox:order || fail "the relay did not publish"
if [ "$FAILOVER_SLOTS" = 1 ]; then
	# A synced slot stays temporary (and is dropped at promotion) until the
	# primary's slot has moved past what the standby reserved: checkpoints
	# (running_xacts) and the relay's confirms move it.
	synced_ready() {
		psql_q "CHECKPOINT" >/dev/null
		[ "$(psql2 "SELECT synced AND NOT temporary FROM pg_replication_slots WHERE slot_name = 'outbox_relay'")" = t ]
	}
	wait_for synced_ready 60 || fail "the slot was not synced to the standby: $(psql2 "SELECT synced, temporary FROM pg_replication_slots")"
	ok "the failover slot is synced to the standby (synced, not temporary)"
fi
t_stop=$(date +%s%N)
pg_stop immediate
as_pg "$PG_BINDIR/pg_ctl" -D "$PG2" -w -t 30 promote >/dev/null || fail "promote failed"
log "primary stopped (-m immediate), standby promoted"
if [ "$FAILOVER_SLOTS" = 1 ]; then
	# The new primary inherited synchronized_standby_slots (the base backup
	# copied postgresql.auto.conf) for a standby it does not have: logical
	# decoding would wait for it for ever. What Patroni or an operator does:
	wait_for "[ \"\$(psql2 'SELECT pg_is_in_recovery()')\" = f ]" 30 || fail "the standby was not promoted"
	# Until then the relay says why nothing moves, in one log line.
	wait_for "grep -q 'warn: PostgreSQL says: WARNING: replication slot \"phys_standby\" specified in parameter \"synchronized_standby_slots\" does not exist DETAIL:' '$RELAY_LOG'" 30 ||
		fail "the relay did not pass on the server's warning: $(tail -n 3 "$RELAY_LOG")"
	assert_eq 0 "$(grep -c '^DETAIL:' "$RELAY_LOG" || true)" "the server's notices are log lines, not raw libpq output"
	psql2 "ALTER SYSTEM RESET synchronized_standby_slots" >/dev/null
	psql2 "SELECT pg_reload_conf()" >/dev/null
fi
wait "$EMIT" || true
emitter 50 1000
committed=$(psql2 "SELECT count(*) FROM outbox")
psql2 "SELECT id FROM outbox" >"$T/expected"

if [ "$FAILOVER_SLOTS" = 1 ]; then
	wait_for "[ \"\$(xlen outbox:order)\" -ge $committed ]" 60 || fail "the relay did not deliver after the failover: $(tail -n 5 "$RELAY_LOG")"
	log "every event in Redis $((($(date +%s%N) - t_stop) / 1000000)) ms after the primary was stopped (50 of them committed after the promotion)"
	relay_alive || fail "the relay exited: $(tail -n 3 "$RELAY_LOG")"
	resumed=$(grep -m1 'PostgreSQL: reconnected' "$RELAY_LOG" | cut -d' ' -f1)
	ok "the relay reconnected to the new primary and went on ($resumed)"
	log "streaming again $((($(date -d "$resumed" +%s%N) - t_stop) / 1000000)) ms after the primary was stopped"
else
	relay_wait 60 || fail "the relay did not stop at the gap: $(tail -n 5 "$RELAY_LOG")"
	assert_eq 8 "$RELAY_RC" "PostgreSQL $MAJOR: the standby has no slot: exit 8"
	refused_ms=$((($(date -d "$(grep ' error: ' "$RELAY_LOG" | cut -d' ' -f1)" +%s%N) - t_stop) / 1000000))
	if grep ' error: ' "$RELAY_LOG" | grep -q -- '--accept-gap does not apply'; then
		# The relay had handed Redis a commit the standby never received
		# (asynchronous): the new primary's history does not hold it (81_failover_behind).
		assert_contains "$(grep ' error: ' "$RELAY_LOG")" 'outbox-relay heal' "the line says to heal"
		out=$("$RELAY_BIN" heal --pg-dsn "$DSN" --redis-url "$REDIS_URL" --http-addr "" 2>&1) ||
			fail "heal failed: $out"
		log "the standby was behind what Redis held: $(grep '^heal done' <<<"$out")"
		relay_start --pg-dsn "$DSN"
	else
		assert_contains "$(grep ' error: ' "$RELAY_LOG")" 'replication slot "outbox_relay" does not exist' "the line says the slot is missing"
		since=$(grep ' error: ' "$RELAY_LOG" | sed -n 's/.*republish --since \([^;]*\);.*/\1/p')
		accept=$(grep ' error: ' "$RELAY_LOG" | sed -n 's/.*--accept-gap \([0-9A-F]*\/[0-9A-F]*\).*/\1/p')
		out=$("$RELAY_BIN" republish --pg-dsn "$DSN" --redis-url "$REDIS_URL" --http-addr "" --since "$since" 2>&1) ||
			fail "republish failed: $out"
		log "$(grep '^republish' <<<"$out")"
		relay_start --pg-dsn "$DSN" --accept-gap "$accept"
	fi
	wait_for "[ \"\$(xlen outbox:order)\" -ge $committed ]" 60 || fail "not every event arrived after republish"
	log "refused $refused_ms ms after the primary was stopped; complete again $((($(date +%s%N) - t_stop) / 1000000)) ms after (republish and --accept-gap run at once here)"
fi
relay_stop
rx fields outbox:order id >"$T/got"
dup=$(sort "$T/got" | uniq -d | wc -l)
lost=$(sort "$T/expected" | comm -23 - <(sort -u "$T/got") | wc -l)
extra=$(sort -u "$T/got" | comm -13 <(sort "$T/expected") - | wc -l)
log "PostgreSQL $MAJOR failover: $committed events on the new primary, $lost lost, $dup duplicated, $extra published from the old primary that the standby never received"
assert_eq 0 "$lost" "no committed event lost"
assert_eq 0 "$dup" "no event duplicated"
if [ "$FAILOVER_SLOTS" = 1 ]; then
	assert_eq 0 "$extra" "synchronized_standby_slots: nothing published that the standby did not have"
	rx fields outbox:order aggregate_id | awk 'NR > 1 && $1 + 0 < prev + 0 { bad = 1 } { prev = $1 } END { exit bad }' ||
		fail "events out of order"
	ok "in order"
fi
pass
