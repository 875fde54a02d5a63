#!/bin/bash
# 28_sigterm_bound: how long a stop takes, and what it leaves confirmed.
# (1) SIGTERM during a heavy drain (60000-event backlog, --shutdown-timeout
#     3s): exit code 0 within 3 + 2 s; confirmed_flush_lsn equals the
#     confirmed= of the relay's final log line and covers every transaction
#     that is whole in Redis; a restart delivers the rest with no duplicate.
# (2) the same while redis-server is frozen (SIGSTOP), so the in-flight
#     events cannot drain: the relay gives up after --shutdown-timeout, says
#     so, exits 0 within 3 + 2 s without confirming them; the frozen server
#     runs them late after SIGCONT, and the restart skips them as replays.
# (3) a second SIGTERM right after the first (Redis frozen again, so the
#     first one is still waiting): exit code 1 at once, without draining; a
#     restart delivers everything exactly once.
# (4) SIGTERM while the walsender is frozen (SIGSTOP: a dead network as the
#     relay sees it, no reset): the final status and CopyDone get no answer,
#     yet the relay exits 0 within --shutdown-timeout 2s + 2 s (before the
#     fix it waited for the server forever).
RELAY_LOG_LEVEL=${RELAY_LOG_LEVEL:-info}
. "$(dirname "$0")/lib.sh"
setup_tmp
STOPPED=
trap '_rc=$?; [ -z "$STOPPED" ] || kill -CONT $STOPPED 2>/dev/null; (exit $_rc); _cleanup' EXIT
pg_start
load_schema
redis_start
slot_create outbox_relay
STREAMS=(outbox:order outbox:customer outbox:invoice)

B=60000
# emit_backlog FROM: B rows n = FROM.., 500 per transaction.
emit_backlog() {
	psql_q "DO \$\$ BEGIN
	  FOR t IN 0..($B / 500 - 1) LOOP
	    INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
	      SELECT (ARRAY['order','customer','invoice'])[i % 3 + 1], i::text, 'created', jsonb_build_object('n', i)
	      FROM generate_series($1 + t * 500, $1 + t * 500 + 499) i;
	    COMMIT;
	  END LOOP;
	END \$\$;"
}

# check_once WHAT FROM: the events with aggregate_id >= FROM are in Redis
# exactly once and in order, and nothing else is; then the streams are
# deleted (the relay's watermarks stay) so that each part checks only its own
# backlog.
check_once() {
	psql_q "SELECT id FROM outbox WHERE aggregate_id::int >= $2" >"$T/expected"
	assert_exactly_once "$T/expected"
	for t in order customer invoice; do
		psql_q "SELECT id FROM outbox WHERE aggregate_type = '$t' AND aggregate_id::int >= $2 ORDER BY aggregate_id::int" >"$T/order.$t"
		assert_stream_ids "outbox:$t" "$T/order.$t"
	done
	ok "$1"
	redis_cli DEL "${STREAMS[@]}" >/dev/null
}

final_field() { grep 'stopped (' "$RELAY_LOG" | tail -n 1 | grep -o " $1=[^ ]*" | cut -d= -f2; }

# stop_timed SIGNALS...: send the signals to the relay (the second once the
# first has been logged), wait for it to exit; sets STOP_MS.
stop_timed() {
	local t0
	t0=$(date +%s%N)
	kill -TERM "$RELAY_PID"
	if [ "${1:-1}" = 2 ]; then
		wait_for "grep -q 'stopping: waiting' '$RELAY_LOG'" 5 || fail "relay did not log the first SIGTERM"
		kill -TERM "$RELAY_PID"
	fi
	relay_wait 20 || {
		kill -9 "$RELAY_PID"
		fail "relay still running 20 s after SIGTERM"
	}
	STOP_MS=$((($(date +%s%N) - t0) / 1000000))
}

# ---- (1) SIGTERM during a heavy drain --------------------------------------
emit_backlog 1
relay_start --shutdown-timeout 3s
wait_entries $((B / 3)) 60 "${STREAMS[@]}" || fail "relay did not get a third of the way"
stop_timed 1
log "(1) relay exited ${STOP_MS} ms after SIGTERM with $(xlen_sum "${STREAMS[@]}") of $B entries in Redis"
assert_eq 0 "$RELAY_RC" "(1) exit code after SIGTERM"
assert_lt "$STOP_MS" 5000 "(1) exit within --shutdown-timeout 3s + 2 s (ms)"
assert_lt "$(xlen_sum "${STREAMS[@]}")" "$B" "(1) SIGTERM landed mid-drain"
conf=$(slot_confirmed_lsn outbox_relay)
assert_eq "$(final_field confirmed)" "$conf" "(1) confirmed_flush_lsn equals the final log line's confirmed="
assert_whole_tx_confirmed 500 "$conf" "(1) every transaction whole in Redis is confirmed"
relay_drain
check_once "(1) a restart delivered the rest exactly once" 1

# ---- (2) SIGTERM while Redis is frozen -------------------------------------
emit_backlog $((B + 1))
relay_start --shutdown-timeout 3s
wait_entries $((B / 3)) 60 "${STREAMS[@]}" || fail "relay did not get a third of the way"
kill -STOP "$REDIS_PID"
STOPPED=$REDIS_PID
sleep 0.2 # let commands pile up unanswered
stop_timed 1
log "(2) relay exited ${STOP_MS} ms after SIGTERM (Redis frozen)"
assert_eq 0 "$RELAY_RC" "(2) exit code after SIGTERM with Redis frozen"
assert_lt "$STOP_MS" 5000 "(2) exit within --shutdown-timeout 3s + 2 s (ms)"
assert_ge "$STOP_MS" 2900 "(2) the relay waited --shutdown-timeout for Redis (ms)"
assert_match "$(cat "$RELAY_LOG")" 'shutdown timeout: [0-9]+ event\(s\) unacknowledged' "(2) the relay says what it left unacknowledged"
conf=$(slot_confirmed_lsn outbox_relay)
assert_eq "$(final_field confirmed)" "$conf" "(2) confirmed_flush_lsn equals the final log line's confirmed="
kill -CONT "$REDIS_PID"
STOPPED=
relay_drain
log "(2) restart: $(grep 'stopped (' "$RELAY_LOG" | tail -n 1 | sed 's/.*stopped //')"
check_once "(2) a restart delivered the rest exactly once" $((B + 1))

# ---- (3) a second SIGTERM exits at once ------------------------------------
emit_backlog $((2 * B + 1))
relay_start --shutdown-timeout 10s
wait_entries $((B / 3)) 60 "${STREAMS[@]}" || fail "relay did not get a third of the way"
kill -STOP "$REDIS_PID"
STOPPED=$REDIS_PID
sleep 0.2
stop_timed 2
log "(3) relay exited ${STOP_MS} ms after the first SIGTERM (the second followed it)"
assert_eq 1 "$RELAY_RC" "(3) exit code after a second SIGTERM"
assert_lt "$STOP_MS" 2000 "(3) exit at once, not after --shutdown-timeout 10s (ms)"
assert_match "$(cat "$RELAY_LOG")" 'second signal, exiting now without draining' "(3) the relay says it exits without draining"
kill -CONT "$REDIS_PID"
STOPPED=
relay_drain
check_once "(3) a restart delivered everything exactly once" $((2 * B + 1))

# ---- (4) SIGTERM while the walsender is frozen -----------------------------
psql_q "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
        SELECT 'order', i::text, 'created', '{}' FROM generate_series($((3 * B + 1)), $((3 * B + 10))) i"
relay_start --shutdown-timeout 2s
wait_entries 10 30 outbox:order || fail "relay did not publish the 10 events"
ws=$(psql_q "SELECT active_pid FROM pg_replication_slots WHERE slot_name = 'outbox_relay'")
[ -n "$ws" ] || fail "no walsender holds the slot"
kill -STOP "$ws"
STOPPED=$ws
stop_timed 1
log "(4) relay exited ${STOP_MS} ms after SIGTERM (walsender frozen)"
kill -CONT "$ws"
STOPPED=
assert_eq 0 "$RELAY_RC" "(4) exit code after SIGTERM with the walsender frozen"
assert_lt "$STOP_MS" 4000 "(4) exit within --shutdown-timeout 2s + 2 s (ms)"
relay_drain
check_once "(4) a restart delivered everything exactly once" $((3 * B + 1))
pass
