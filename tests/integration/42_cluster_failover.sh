#!/bin/bash
# 42_cluster_failover: a Redis Cluster of 3 masters with 1 replica each
# (appendonly no, cluster-node-timeout 2000); the relay runs with
# --wait-replicas 1, so an event counts as acknowledged only once a replica
# has it (otherwise a write acknowledged by a master that dies before
# replicating it is lost by Redis itself, which no relay can prevent).
# While a session keeps committing events over 50 streams, master 1 (the
# first seed of the relay's redis-cluster:// URL, holding some of the
# streams) is killed with SIGKILL. Its replica is promoted; the promoted
# master has no replica, so WAIT 1 cannot succeed there and the relay must
# not confirm past what is not replicated. The killed node is started again
# (empty: no persistence), rejoins as the replica of the promoted master and
# resyncs; the relay (the same process) then confirms everything. Every
# event is in the cluster exactly once, per stream in commit order.
. "$(dirname "$0")/lib.sh"
setup_tmp
pg_start
load_schema
cluster_start 3 1
slot_create outbox_relay
# shellcheck disable=SC2034 # REDIS_URL is read by lib.sh's _relay_args
REDIS_URL=$CLUSTER_URL
psql_q "CREATE SEQUENCE n_seq"
read -ra M <<<"$CLUSTER_MASTER_PORTS"
VICTIM=${M[0]}
VICTIM_ID=$(cluster_node_id "$VICTIM")
REPLICA=$(cluster_nodes | awk -v id="$VICTIM_ID" '$3 ~ /slave/ && $4 == id { split($2, a, "[:@]"); print a[2] }')
[ -n "$REPLICA" ] || fail "master $VICTIM has no replica: $(cluster_nodes | tr '\n' ';')"
log "victim: master $VICTIM (first seed of $CLUSTER_URL), its replica: $REPLICA"

# emit ROWS: one transaction; n from n_seq (one session, so n order is commit
# order); aggregate id agg-(n % 50): each 50-row transaction touches all 50
# streams, so every master's streams.
emit() {
	psql_q "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
	        SELECT 'order', 'agg-' || (n % 50), 'created', jsonb_build_object('n', n)
	        FROM (SELECT nextval('n_seq') n FROM generate_series(1, $1)) s"
}

HP=$(free_tcp_port)
metrics() { python3 -c 'import sys, urllib.request; sys.stdout.write(urllib.request.urlopen("http://127.0.0.1:%s/metrics" % sys.argv[1], timeout=5).read().decode())' "$HP"; }
relay_start --wait-replicas 1 --wait-timeout 1s --retry-max 1s --http-addr "127.0.0.1:$HP" --stream 'outbox:{aggregate_id}'
(
	trap - EXIT
	while [ ! -e "$T/stop-emitter" ]; do
		emit 50
		sleep 0.02
	done
) &
EMITTER=$!

# Let it run: some thousands of events confirmed (replicated) first.
wait_for '[ "$(psql_q "SELECT count(*) FROM outbox")" -ge 3000 ]' 60 || fail "the emitter is too slow"
l0=$(current_lsn)
wait_confirmed outbox_relay "$l0" 30 || fail "not confirmed up to $l0 within 30 s before the failover ($(slot_confirmed_lsn outbox_relay))"
ok "before the failover: confirmed up to $l0 with --wait-replicas 1"
nvictim=$($RX "127.0.0.1:$VICTIM" streams 'outbox:*' | wc -l)
assert_ge "$nvictim" 1 "the victim holds some streams ($nvictim)"

rnode_kill9 "$VICTIM"
t0=$(date +%s%N)
wait_for "rcli $REPLICA role | head_n 1 | grep -qx master" 30 || fail "replica $REPLICA not promoted within 30 s: $(rnode_log_tail "$REPLICA" 10)"
wait_for "cluster_ok $(echo "$CLUSTER_PORTS" | tr ' ' '\n' | grep -vx "$VICTIM" | tr '\n' ' ')" 30 ||
	fail "cluster not ok on the surviving nodes 30 s after the promotion: $(cat "$T/cluster-check.log")"
ok "replica $REPLICA promoted, cluster_state:ok in $((($(date +%s%N) - t0) / 1000000)) ms"
relay_alive || fail "the relay exited after the master died"

# The promoted master has no replica: WAIT 1 fails there, so nothing past
# the first event it holds may be confirmed. (Every transaction touches it.)
sleep 3
l1=$(current_lsn)
c1=$(slot_confirmed_lsn outbox_relay)
sleep 3
c2=$(slot_confirmed_lsn outbox_relay)
assert_lsn_lt "$c2" "$l1" "no replica for the promoted master: confirmed_flush_lsn stays behind the commits since (3 s later)"
log "confirmed $c1 then $c2 while the promoted master $REPLICA has no replica (WAL at $l1)"
wait_for "grep -q 'WAIT' '$RELAY_LOG'" 10 || fail "no WAIT line in the relay's log while a master has no replica"
log "relay: $(grep -m1 'WAIT' "$RELAY_LOG" | cut -c1-300)"

# The killed node comes back empty and becomes the new master's replica.
rnode_start "$VICTIM"
wait_for "rcli $VICTIM role | head_n 1 | grep -qx slave" 30 || fail "the restarted node $VICTIM did not become a replica: $(rnode_log_tail "$VICTIM" 10)"
wait_for "replicas_synced $VICTIM" 30 || fail "the restarted node $VICTIM is not in sync with $REPLICA"
ok "node $VICTIM rejoined as the replica of $REPLICA and resynced"
cluster_wait_ok 30 || fail "cluster not ok after the old master rejoined"

sleep 2
touch "$T/stop-emitter"
wait "$EMITTER" || fail "the emitter session failed"
total=$(psql_q "SELECT count(*) FROM outbox")
end=$(current_lsn)
wait_confirmed outbox_relay "$end" 60 || fail "not confirmed up to $end within 60 s after the replica came back ($(slot_confirmed_lsn outbox_relay))"
ok "the relay (same process, pid $RELAY_PID) confirmed all $total events up to $end"
relay_alive || fail "the relay exited"

psql_q "SELECT id FROM outbox" >"$T/expected"
cluster_ids_exactly_once "$T/expected"
psql_q "SELECT 'outbox:' || aggregate_id || E'\t' || id FROM outbox ORDER BY (payload->>'n')::int" >"$T/order"
cluster_assert_order "$T/order"
# The replicas hold the same (what WAIT 1 vouched for).
got_r=$T/got.replicas
for p in $(cluster_nodes | awk '$3 ~ /slave/ && $3 !~ /fail/ { split($2, a, "[:@]"); print a[2] }'); do
	$RX "127.0.0.1:$p" ids 'outbox:*' outbox:dead-letter
done >"$got_r"
ids_exactly_once "$T/expected" "$got_r" "read from the replicas"

m=$(metrics | grep -E '^outbox_relay_(redis_errors_total|reconnects_total|replays_skipped_total|duplicates_skipped_total)' | grep -v ' 0$' | tr '\n' ' ')
relay_stop
assert_eq 0 "$RELAY_RC" "relay exit code after SIGTERM"
log "relay log lines: MOVED $(grep -c MOVED "$RELAY_LOG" || true), ASK $(grep -c 'ASK' "$RELAY_LOG" || true), WAIT $(grep -c 'WAIT' "$RELAY_LOG" || true); final: $(grep -o 'published=[0-9]* replays=[0-9]* duplicates=[0-9]*' "$RELAY_LOG" | tail -n 1)"
log "metrics: $m"
pass
