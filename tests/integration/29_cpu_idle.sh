#!/bin/bash
# 29_cpu_idle: no busy loops. The relay's CPU time (utime + stime from
# /proc/PID/stat) stays under 0.2 s over 10 s with nothing to do, and under
# 0.5 s over a 10 s PostgreSQL outage (pg_stop, default --retry-max); it then
# reconnects on its own and delivers what was committed after the restart
# exactly once.
. "$(dirname "$0")/lib.sh"
setup_tmp
pg_start
load_schema
redis_start
slot_create outbox_relay
TCK=$(getconf CLK_TCK)

cpu_ticks() { # utime + stime of PID in clock ticks
	local s
	s=$(cat "/proc/$1/stat") || return 1
	s=${s##*) }
	awk '{ print $12 + $13 }' <<<"$s"
}

# cpu_over SECONDS: the relay's CPU time (ms) over the next SECONDS of wall time.
cpu_over() {
	local c0 c1
	c0=$(cpu_ticks "$RELAY_PID")
	sleep "$1"
	c1=$(cpu_ticks "$RELAY_PID")
	echo $(((c1 - c0) * 1000 / TCK))
}

psql_q "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
        SELECT 'order', i::text, 'created', jsonb_build_object('n', i) FROM generate_series(1, 100) i"
relay_start
wait_confirmed outbox_relay "$(current_lsn)" 30 || fail "first batch not confirmed"
sleep 1 # past startup and the first status update

idle_ms=$(cpu_over 10)
log "relay CPU over 10 s idle: ${idle_ms} ms (CLK_TCK $TCK)"
assert_lt "$idle_ms" 200 "CPU time (ms) over 10 s with nothing to do"
relay_alive || fail "relay exited while idle"

pg_stop fast
ok "PostgreSQL stopped"
down_ms=$(cpu_over 10)
log "relay CPU over a 10 s PostgreSQL outage: ${down_ms} ms"
assert_lt "$down_ms" 500 "CPU time (ms) over a 10 s PostgreSQL outage"
relay_alive || fail "relay exited while PostgreSQL was down; it should retry"
assert_eq 1 "$(grep -c ' warn: PostgreSQL:' "$RELAY_LOG" || true)" "one 'PostgreSQL:' warning for the outage"
attempts=$(grep -c ' debug: PostgreSQL:.*next try in' "$RELAY_LOG" || true)
log "$attempts reconnect attempts during the outage (debug lines)"
assert_lt "$attempts" 30 "reconnect attempts are paced (no hot loop)"

pg_start
psql_q "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
        SELECT 'order', i::text, 'created', jsonb_build_object('n', i) FROM generate_series(101, 200) i"
# The backoff may have grown to several seconds (default --retry-max 30s).
wait_confirmed outbox_relay "$(current_lsn)" 45 || fail "relay did not reconnect and deliver within 45 s after PostgreSQL came back"
assert_match "$(cat "$RELAY_LOG")" 'PostgreSQL: reconnected' "relay reconnected to PostgreSQL"
relay_stop
assert_eq 0 "$RELAY_RC" "relay exit code after SIGTERM"
psql_q "SELECT id FROM outbox" >"$T/expected"
assert_exactly_once "$T/expected"
log "CPU: ${idle_ms} ms over 10 s idle, ${down_ms} ms over a 10 s PostgreSQL outage"
pass
