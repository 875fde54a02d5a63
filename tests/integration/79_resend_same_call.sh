#!/bin/bash
# 79_resend_same_call: with --dedup-window 0 only the LSN watermark drops what
# PostgreSQL streams again after a reconnect, so an event sent again must be
# compared with what the calls before it in the same write leave, not only
# with the watermark that write read. With --publish native and --publish
# function:
#   - Redis holds its replies (CLIENT PAUSE WRITE): the call for e-1 is sent
#     and waits for its EXEC, the call for e-2 queues behind it.
#   - The walsender dies while it decodes a large transaction T, before the
#     relay confirmed anything of e-1, e-2 or T: after the reconnect the server
#     streams e-1, e-2 and T again, into a call behind e-2's.
#   - The e-2 call and that call were one unit of the native path, decided
#     against the watermark e-1's call left: e-2 sent again was written a
#     second time (review 2026-12-05). Every event is in its stream exactly
#     once, and the relay counted the events sent again as replays.
. "$(dirname "$0")/lib.sh"
setup_tmp
pg_start
load_schema
redis_start
slot_create outbox_relay
psql_q "CREATE TABLE filler (x int)"
emit1() { psql_q "SELECT outbox_emit('$1', '$2', 'created', '{}')" >/dev/null; }

# resend MODE TYPE: the scenario with --publish MODE on the stream outbox:TYPE.
resend() {
	local mode=$1 type=$2 replays
	log "--publish $mode, stream outbox:$type"
	relay_start --dedup-window 0 --redis-timeout 120s --publish "$mode"
	emit1 "$type" pre-1
	wait_for "[ \"\$(xlen outbox:$type)\" = 1 ]" 30 || fail "$mode: relay does not publish"

	# Redis holds its answers: e-1's call in flight, e-2's behind it.
	redis_cli CLIENT PAUSE 90000 WRITE >/dev/null
	emit1 "$type" e-1
	sleep 0.5
	emit1 "$type" e-2
	sleep 0.5
	# T: an event, a long stretch of WAL the relay ignores (seconds to decode), an event.
	psql_q "BEGIN; SELECT outbox_emit('$type', 'T-a', 'created', '{}');
		INSERT INTO filler SELECT generate_series(1, 2000000);
		SELECT outbox_emit('$type', 'T-b', 'created', '{}'); COMMIT;" >/dev/null
	sleep 0.3
	# The walsender dies while it decodes T's filler.
	psql_q "SELECT pg_terminate_backend(pid) FROM pg_stat_replication" >/dev/null
	log "$mode: walsender terminated"
	wait_for 'grep -q "reconnected, streaming" "$RELAY_LOG"' 30 || fail "$mode: no reconnect"
	sleep 6 # e-1, e-2 and T decoded and sent again
	redis_cli CLIENT UNPAUSE >/dev/null
	wait_for "[ \"\$(xlen outbox:$type)\" -ge 5 ]" 60 || true
	sleep 3
	relay_stop
	rx fields "outbox:$type" aggregate_id _lsn >"$T/entries.$mode"
	log "$mode: entries: $(tr '\t\n' ': ' <"$T/entries.$mode")"
	for id in pre-1 e-1 e-2 T-a T-b; do
		assert_eq 1 "$(grep -c "^$id	" "$T/entries.$mode" || true)" \
			"$mode: $id is in outbox:$type exactly once (dedup off: the watermark alone)"
	done
	assert_eq 5 "$(xlen "outbox:$type")" "$mode: entries of outbox:$type"
	replays=$(grep -o 'stopped ([a-z]*): .* replays=[0-9]*' "$RELAY_LOG" | sed 's/.*replays=//')
	assert_ge "${replays:-0}" 1 "$mode: events the server sent again, counted as replays"
	psql_q "TRUNCATE filler"
}

resend native order
resend function invoice
pass
