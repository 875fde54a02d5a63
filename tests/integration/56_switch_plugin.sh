#!/bin/bash
# 56_switch_plugin: a running deployment moved from a wal2json slot to a
# pgoutput slot, and back, while the application keeps committing, the way
# README ("Switching plugins") says: create the new slot (pgoutput: its
# publication first) beside the running relay, wait until the old slot is
# confirmed at or past the new slot's consistent point, stop the old relay,
# start the new one; the events committed between the two are sent again by
# the new relay and dropped by dedup. Afterwards every committed row is in the
# streams exactly once (ids in SQL against XRANGE), each relay published some
# of them, and the old slot and its record are gone.
. "$(dirname "$0")/lib.sh"
unset RELAY_PLUGIN # this test names the plugin of every run
setup_tmp
pg_start
load_schema
redis_start

published() { grep -o ' published=[0-9]*' "$1" | tail -n 1 | cut -d= -f2; }
duplicates() { grep -o ' duplicates=[0-9]*' "$1" | tail -n 1 | cut -d= -f2; }

# switch OLD NEW PLUGIN: the running relay streams slot OLD; move to NEW.
switch() {
	local old=$1 new=$2 plugin=$3 x log_old
	if [ "$plugin" = pgoutput ]; then
		psql_q "CREATE PUBLICATION \"$new\" FOR TABLE public.outbox WITH (publish = 'insert')" >/dev/null
	fi
	x=$(psql_q "SELECT lsn FROM pg_create_logical_replication_slot('$new', '$plugin')")
	log "slot $new ($plugin) consistent at $x"
	wait_rows 20 # the application commits on; the old relay publishes on
	wait_confirmed "$old" "$x" 60 || fail "slot $old was not confirmed up to $x"
	log_old=$RELAY_LOG
	relay_stop
	assert_eq 0 "$RELAY_RC" "the relay on $old stopped cleanly"
	relay_start --slot "$new" --plugin "$plugin"
	wait_for "slot_active $new" 30 || fail "the relay on $new did not start streaming"
	wait_rows 20
	psql_q "SELECT pg_drop_replication_slot('$old')" >/dev/null
	redis_cli DEL "outbox-relay:slot:$old" >/dev/null
	assert_eq "" "$(slot_confirmed_lsn "$old")" "slot $old dropped after the switch"
	PUB_OLD=$(published "$log_old")
	assert_ge "$PUB_OLD" 1 "the relay on $old published events"
}

relay_start --slot outbox_relay --plugin wal2json
wait_for "slot_active outbox_relay" 30 || fail "the first relay did not start streaming"
app_start sw
wait_rows 30

switch outbox_relay outbox_relay_pgo pgoutput # wal2json -> pgoutput
switch outbox_relay_pgo outbox_relay_w2j wal2json # and back
PGO_LOG=$T/relay.2.log
assert_ge "$(published "$PGO_LOG")" 1 "the relay on pgoutput published events"
log "overlap dropped by dedup on the pgoutput relay: $(duplicates "$PGO_LOG") event(s)"

app_stop
LAST=$(current_lsn)
relay_stop
relay_drain --slot outbox_relay_w2j --plugin wal2json
assert_lsn_ge "$(slot_confirmed_lsn outbox_relay_w2j)" "$LAST" "the last slot confirmed past every commit"

psql_q "SELECT id FROM outbox ORDER BY id" >"$T/expected"
log "$(wc -l <"$T/expected") rows committed across two switches"
assert_exactly_once "$T/expected"
assert_eq 1 "$(grep -l 'streams with pgoutput' "$T"/relay.*.log | wc -l)" "one relay (the second) streamed with pgoutput"
pass
