#!/bin/bash
# 36_refused_calls: calls Redis refuses or cannot make durable never let a
# later call's watermark or a reconnect's WAIT count their events as done
# (issue 14, findings 1 and 6).
#   (a) OOM under load on one stream: while the relay drains 20,000 order
#       events, maxmemory flips between 1 byte and unlimited every ~10 ms, so
#       some calls are refused (OOM) while the next call for the same stream,
#       pipelined behind them, runs. Every event arrives exactly once, in
#       order (before the fix the refused calls' events were skipped as
#       "replays" on their resend).
#   (b) WAIT after a resend: primary + replica, --wait-replicas 1. The replica
#       is frozen (SIGSTOP); WAIT times out, the relay reconnects and sends the
#       same calls again. Their events are already on the primary, but the
#       replica has not got them: confirmed_flush_lsn must not pass them
#       while the replica is frozen (before the fix the resent calls wrote
#       nothing, WAIT on the new connection answered at once, and the LSN was
#       confirmed). Thawed, everything is confirmed exactly once.
. "$(dirname "$0")/lib.sh"
setup_tmp
pg_start
load_schema

want() { [ -z "${ONLY:-}" ] || [[ " $ONLY " == *" $1 "* ]]; }

# emit_orders FROM TO: order events only (one stream), 100 per transaction.
emit_orders() {
	psql_q "DO \$\$ BEGIN
	  FOR t IN 0..(($2 - $1 + 1) / 100 - 1) LOOP
	    INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
	      SELECT 'order', i::text, 'created', jsonb_build_object('n', i)
	      FROM generate_series($1 + t * 100, $1 + t * 100 + 99) i;
	    COMMIT;
	  END LOOP;
	END \$\$;"
}

# check_orders FROM WHAT: order events with aggregate_id >= FROM end the
# stream outbox:order exactly once each and in order, and the stream holds
# no id twice.
check_orders() {
	psql_q "SELECT id FROM outbox WHERE aggregate_id::int >= $1 ORDER BY aggregate_id::int" >"$T/exp.$1"
	rx fields outbox:order id >"$T/all.$1"
	assert_eq "" "$(sort "$T/all.$1" | uniq -d | head_n 3)" "$2: no id twice in outbox:order"
	tail -n "$(wc -l <"$T/exp.$1")" "$T/all.$1" >"$T/got.$1"
	ids_exactly_once "$T/exp.$1" "$T/got.$1" "$2"
	assert_eq "$(cat "$T/exp.$1")" "$(cat "$T/got.$1")" "$2: in order"
}

if want a; then
	redis_start
	slot_create outbox_relay
	emit_orders 1 20000
	l_a=$(current_lsn)
	# The flipper stops at a flag, not a signal: a killed flipper's last
	# "CONFIG SET maxmemory 1" could land after the reset below.
	(
		end=$(($(date +%s) + 25))
		while [ "$(date +%s)" -lt "$end" ] && [ ! -e "$T/stop_flipping" ]; do
			redis_cli CONFIG SET maxmemory 1 >/dev/null
			sleep 0.01
			redis_cli CONFIG SET maxmemory 0 >/dev/null
			sleep 0.01
		done
	) &
	flipper=$!
	relay_start --retry-max 200ms
	wait_confirmed outbox_relay "$l_a" 60 || true
	touch "$T/stop_flipping"
	wait "$flipper" 2>/dev/null || true
	redis_cli CONFIG SET maxmemory 0 >/dev/null
	wait_confirmed outbox_relay "$l_a" 60 || fail "(a) not confirmed once memory was unlimited again"
	relay_stop
	ooms=$(grep -c 'OOM' "$RELAY_LOG" || true)
	refused=$(redis_cli INFO stats | tr -d '\r' | sed -n 's/^rejected_calls://p')
	log "(a) relay log lines naming OOM: $ooms; Redis rejected_calls: ${refused:-?}; $(grep 'stopped (' "$RELAY_LOG" | sed 's/.*stopped //')"
	assert_ge "$ooms" 1 "(a) Redis refused some calls with OOM during the drain"
	check_orders 1 "(a) 20000 order events under OOM flips"

	# The same rule, driven directly and deterministically against the
	# library the relay loaded: call B2 of a stream runs while B1 (before it)
	# never ran. B2 states the watermark B1 leaves, so it is refused and
	# writes nothing; after B1, B2 runs.
	owner=$(redis_cli GET outbox-relay:wm:{outbox:order}:outbox_relay | cut -d' ' -f2)
	wm0=$(redis_cli GET outbox-relay:wm:{outbox:order}:outbox_relay)
	n0=$(xlen outbox:order)
	dd0=$(redis_cli HGETALL outbox-relay:dd:{outbox:order} | tr '\n' ' ')
	p1=FFFFFFFF00000000:00000000 p2=FFFFFFFF00000001:00000000
	call() { # POS EXPECT ID (the dedup field: 4 bytes of hash, then the id)
		redis_cli FCALL outbox_relay_publish 5 outbox:order outbox-relay:wm:{outbox:order}:outbox_relay \
			outbox-relay:wm:{outbox:order}:outbox_relay outbox:dead-letter "outbox-relay:dd:{outbox:order}" \
			3600 0 "$owner" "$2" outbox_relay "outbox-relay:dedup:{outbox:order}:" 1 "$1" "hhhh$3" 1 id "$3" 2>&1
	}
	out=$(call "$p2" "$p1" b2)
	assert_contains "$out" "OUTBOX_BEHIND" "(a) B2 refused while B1 has not run"
	assert_eq "$n0" "$(xlen outbox:order)" "(a) the refused B2 wrote no entry"
	assert_eq "$wm0" "$(redis_cli GET outbox-relay:wm:{outbox:order}:outbox_relay)" "(a) the refused B2 left the watermark"
	assert_eq "$dd0" "$(redis_cli HGETALL outbox-relay:dd:{outbox:order} | tr '\n' ' ')" "(a) the refused B2 left the dedup state as it was"
	call "$p1" "" b1 >/dev/null
	call "$p2" "$p1" b2 >/dev/null
	assert_eq "b1 b2" "$(rx fields outbox:order id | tail -n 2 | tr '\n' ' ' | sed 's/ $//')" "(a) B1 then B2 once B1 ran"
	redis_stop
fi

if want b; then
	replica_pair_start
	# shellcheck disable=SC2034 # REDIS_URL is read by lib.sh's _relay_args
	REDIS_URL=redis://127.0.0.1:$PRIMARY_PORT
	REDIS_SOCK=127.0.0.1:$PRIMARY_PORT # rx reads the primary over TCP
	slot_create wait_b
	relay_start --slot wait_b --wait-replicas 1 --wait-timeout 300ms --retry-max 300ms
	emit_orders 50001 50200
	wait_confirmed wait_b "$(current_lsn)" 30 || fail "(b) not confirmed with the replica up"
	rpid=$(rnode_pid "$REPLICA_PORT")
	kill -STOP "$rpid"
	c0=$(slot_confirmed_lsn wait_b)
	emit_orders 50201 50400
	l_b=$(current_lsn)
	first_b=$(psql_q "SELECT min(aggregate_id::int) FROM outbox WHERE aggregate_id::int >= 50201")
	wait_for "[ \"\$(grep -c 'WAIT' '$RELAY_LOG')\" -ge 1 ]" 10 || { kill -CONT "$rpid"; fail "(b) the relay did not report WAIT falling short"; }
	sleep 4 # several timeouts, reconnects and resends
	c1=$(slot_confirmed_lsn wait_b)
	resends=$(grep -c 'resending\|will be sent again' "$RELAY_LOG" || true)
	kill -CONT "$rpid"
	log "(b) first new event $first_b; confirmed $c0 before the freeze, $c1 after 4 s frozen; $resends resend line(s)"
	assert_lsn_lt "$c1" "$l_b" "(b) confirmed_flush_lsn did not pass the events the frozen replica lacks"
	wait_confirmed wait_b "$l_b" 30 || fail "(b) not confirmed after the replica thawed"
	relay_stop
	check_orders 50001 "(b) events around the freeze"
fi
pass
