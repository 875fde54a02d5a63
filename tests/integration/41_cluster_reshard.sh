#!/bin/bash
# 41_cluster_reshard: a Redis Cluster of 3 masters; the relay (--stream
# 'outbox:{aggregate_id}', 50 streams) drains a backlog of 60000 events while
# a second session keeps committing (20-row transactions back to back), and
# meanwhile redis-cli --cluster reshard moves 2000 slots from master 1 to
# master 2, then 2000 slots back from master 2 to master 1. Slots holding
# streams move with their keys (stream, watermark, dedup keys) under the
# relay: it gets MOVED, ASK and TRYAGAIN. Afterwards every event is in the
# cluster exactly once, per stream in commit order; the relay never exited.
# The number of MOVED / ASK / TRYAGAIN lines in the relay's debug log is
# reported.
. "$(dirname "$0")/lib.sh"
setup_tmp
pg_start
load_schema
cluster_start 3
slot_create outbox_relay
# shellcheck disable=SC2034 # REDIS_URL is read by lib.sh's _relay_args
REDIS_URL=$CLUSTER_URL
psql_q "CREATE SEQUENCE n_seq"

# emit ROWS: one transaction of ROWS events; n from n_seq (one session at a
# time, so n order is commit order), aggregate id agg-(n % 50).
emit() {
	psql_q "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
	        SELECT 'order', 'agg-' || (n % 50), 'created', jsonb_build_object('n', n)
	        FROM (SELECT nextval('n_seq') n FROM generate_series(1, $1)) s"
}

# The backlog: 60000 events in 300 transactions.
psql_q "DO \$\$ BEGIN
  FOR t IN 1..300 LOOP
    INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
      SELECT 'order', 'agg-' || (n % 50), 'created', jsonb_build_object('n', n)
      FROM (SELECT nextval('n_seq') n FROM generate_series(1, 200)) s;
    COMMIT;
  END LOOP;
END \$\$;"
assert_eq 60000 "$(psql_q "SELECT count(*) FROM outbox")" "backlog written"
BACKLOG_END=$(current_lsn)

read -ra M <<<"$CLUSTER_MASTER_PORTS"
ID1=$(cluster_node_id "${M[0]}")
ID2=$(cluster_node_id "${M[1]}")
slots_of() { cluster_nodes | awk -v id="$1" '$1 == id { n = 0; for (i = 9; i <= NF; i++) { if ($i ~ /^\[/) continue; k = split($i, r, "-"); n += (k == 2 ? r[2] - r[1] + 1 : 1) } print n }'; }
s1=$(slots_of "$ID1")
s2=$(slots_of "$ID2")
log "before: master ${M[0]} has $s1 slots, master ${M[1]} has $s2"

HP=$(free_tcp_port)
relay_start --retry-max 1s --max-inflight-events 2000 --http-addr "127.0.0.1:$HP" --stream 'outbox:{aggregate_id}'

# A second session commits 20-row transactions until told to stop.
(
	trap - EXIT
	while [ ! -e "$T/stop-emitter" ]; do
		emit 20
	done
) &
EMITTER=$!

# reshard FROM_ID TO_ID N LOGNAME
reshard() {
	local t0
	t0=$(date +%s%N)
	redis-cli --cluster reshard "127.0.0.1:${M[0]}" --cluster-from "$1" --cluster-to "$2" \
		--cluster-slots "$3" --cluster-yes >"$T/$4.log" 2>&1 ||
		fail "redis-cli --cluster reshard ($4) failed: $(tail -n 5 "$T/$4.log")"
	log "$4: moved $3 slots in $((($(date +%s%N) - t0) / 1000000)) ms ($(grep -c 'Moving slot' "$T/$4.log" || true) 'Moving slot' lines)"
	cluster_wait_ok 30 || fail "cluster not ok 30 s after $4"
}

wait_for 'slot_active outbox_relay' 10 || fail "the relay does not stream"
c=$(slot_confirmed_lsn outbox_relay)
if lsn_ge "$c" "$BACKLOG_END"; then
	log "note: the relay had already confirmed the whole backlog ($c) when the reshard started"
else
	log "reshard starts while the relay drains the backlog (confirmed $c < backlog end $BACKLOG_END)"
fi
reshard "$ID1" "$ID2" 2000 reshard-1-to-2
relay_alive || fail "the relay exited during the first reshard"
c=$(slot_confirmed_lsn outbox_relay)
lsn_ge "$c" "$BACKLOG_END" || log "after reshard 1 the relay is still draining the backlog (confirmed $c < $BACKLOG_END)"
assert_eq "$((s1 - 2000)) $((s2 + 2000))" "$(slots_of "$ID1") $(slots_of "$ID2")" "after reshard 1: 2000 slots moved from ${M[0]} to ${M[1]}"
reshard "$ID2" "$ID1" 2000 reshard-2-to-1
relay_alive || fail "the relay exited during the second reshard"
assert_eq "$s1 $s2" "$(slots_of "$ID1") $(slots_of "$ID2")" "after reshard 2: slot counts back to $s1 / $s2"
sleep 1
touch "$T/stop-emitter"
wait "$EMITTER" || fail "the emitter session failed"
total=$(psql_q "SELECT count(*) FROM outbox")
ok "emitter stopped; $total events committed in all ($((total - 60000)) during the reshards)"

end=$(current_lsn)
wait_confirmed outbox_relay "$end" 60 || fail "slot not confirmed up to $end within 60 s of the last commit ($(slot_confirmed_lsn outbox_relay))"
ok "relay confirmed everything up to $end"
relay_alive || fail "the relay exited"
ok "the relay (pid $RELAY_PID) ran through both reshards"

psql_q "SELECT id FROM outbox" >"$T/expected"
cluster_ids_exactly_once "$T/expected"

psql_q "SELECT 'outbox:' || aggregate_id || E'\t' || id FROM outbox ORDER BY (payload->>'n')::int" >"$T/order"
cluster_assert_order "$T/order"

# What the relay went through.
moved=$(grep -c 'MOVED' "$RELAY_LOG" || true)
ask=$(grep -c 'ASK' "$RELAY_LOG" || true)
tryagain=$(grep -c 'TRYAGAIN' "$RELAY_LOG" || true)
redirects=$(python3 -c 'import sys, urllib.request; sys.stdout.write(urllib.request.urlopen("http://127.0.0.1:%s/metrics" % sys.argv[1], timeout=5).read().decode())' "$HP" |
	grep -E '^outbox_relay_(redis_errors_total|reconnects_total|replays_skipped_total|duplicates_skipped_total)' | grep -v ' 0$' | tr '\n' ' ')
relay_stop
assert_eq 0 "$RELAY_RC" "relay exit code after SIGTERM"
stats=$(grep -o 'published=[0-9]* replays=[0-9]* duplicates=[0-9]*' "$RELAY_LOG" | tail -n 1)
log "relay log lines: MOVED $moved, ASK $ask, TRYAGAIN $tryagain; final: $stats"
log "metrics: $redirects"
assert_contains "$stats" "duplicates=0" "no event dropped as a duplicate id"
pass
