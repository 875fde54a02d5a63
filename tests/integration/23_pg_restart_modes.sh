#!/bin/bash
# 23_pg_restart_modes: PostgreSQL is restarted with -m fast, then (on a second
# backlog, with a second relay) with -m immediate, each time while the relay
# streams a 40000-event backlog. The relay reconnects and finishes the backlog
# on its own (a fast shutdown lets the walsender send what it has decoded
# first, an immediate one cuts it off). PostgreSQL 15 does not persist confirmed_flush_lsn on its own,
# so after a restart it resends from an older position: the relay must skip
# those replays (its final "stopped" line reports replays=N; N > 0 in at
# least one of the two cases) and every event is in Redis exactly once.
RELAY_LOG_LEVEL=${RELAY_LOG_LEVEL:-info}
. "$(dirname "$0")/lib.sh"
setup_tmp
pg_start
load_schema
redis_start
slot_create outbox_relay
STREAMS=(outbox:order outbox:customer)

# final_field NAME: NAME=value from the relay's "stopped" line.
final_field() { grep 'stopped (' "$RELAY_LOG" | tail -n 1 | grep -o " $1=[^ ]*" | cut -d= -f2; }

declare -A REPLAYS
B=40000
from=1
for mode in fast immediate; do
	emit_orders_customers "$from" $((from + B - 1))
	end=$(current_lsn)
	relay_start --retry-max 1s
	# Restart once a quarter of this backlog is in Redis.
	have=$(xlen_sum "${STREAMS[@]}")
	wait_entries $((have + B / 4)) 60 "${STREAMS[@]}" || fail "relay did not get a quarter of the way"
	before=$(slot_confirmed_lsn outbox_relay)
	n=$(xlen_sum "${STREAMS[@]}")
	pg_restart "$mode"
	after=$(slot_confirmed_lsn outbox_relay)
	n2=$(xlen_sum "${STREAMS[@]}")
	log "-m $mode restart begun with $((n - have)) of $B events in Redis ($((n2 - have)) once it was back up): confirmed_flush_lsn $before before, $after after"
	assert_lt "$n" $((have + B)) "-m $mode: the restart began mid-drain"
	wait_confirmed outbox_relay "$end" 60 || fail "-m $mode: relay did not reconnect and confirm $end within 60 s"
	relay_alive || fail "-m $mode: relay exited on the restart instead of reconnecting"
	assert_match "$(cat "$RELAY_LOG")" 'PostgreSQL: reconnected, streaming slot' "-m $mode: relay logged its reconnect"
	relay_stop
	assert_eq 0 "$RELAY_RC" "-m $mode: relay exit code after SIGTERM"
	assert_eq "$(slot_confirmed_lsn outbox_relay)" "$(final_field confirmed)" "-m $mode: confirmed_flush_lsn equals the relay's final confirmed="
	REPLAYS[$mode]=$(final_field replays)
	log "-m $mode: $(grep 'stopped (' "$RELAY_LOG" | tail -n 1 | sed 's/.*stopped //')"
	check_orders_customers_once "exactly once across a -m $mode restart"
	from=$((from + B))
done

log "replays skipped: ${REPLAYS[fast]} after -m fast, ${REPLAYS[immediate]} after -m immediate"
assert_ge $((REPLAYS[fast] + REPLAYS[immediate])) 1 "PostgreSQL resent already published events after a restart, and the relay skipped them (replays > 0)"
pass
