#!/bin/bash
# 82_cluster_slot_unserved: a Redis Cluster of 3 masters
# (cluster-require-full-coverage no) where the hash slot of one stream is
# served by no master when the relay starts (CLUSTER DELSLOTS on every node).
# The relay publishes the other streams' events; the first event for the
# unserved slot is a lost connection like any other (one log line naming the
# slot, a back-off, the Redis error counted), not a silent reconnect at full
# speed. Once a master serves the slot again (CLUSTER ADDSLOTS), the same
# process publishes the held events: every event exactly once, per stream in
# commit order, and the slot confirmed up to the last commit.
. "$(dirname "$0")/lib.sh"
setup_tmp
pg_start
load_schema
cluster_start 3 0 --cluster-require-full-coverage no
slot_create outbox_relay
# shellcheck disable=SC2034 # REDIS_URL is read by lib.sh's _relay_args
REDIS_URL=$CLUSTER_URL
read -ra M <<<"$CLUSTER_MASTER_PORTS"

# The stream outbox:agg-0 (its keys' tag is {outbox:agg-0}): its slot and the master that holds it.
SLOT=$(rcli "${M[0]}" cluster keyslot 'outbox:agg-0')
OWNER=
for p in "${M[@]}"; do
	# The node's own line of CLUSTER NODES lists its slots: N or N-M.
	if rcli "$p" cluster nodes | awk -v s="$SLOT" '$3 ~ /myself/ {
		for (i = 9; i <= NF; i++) { n = split($i, r, "-"); if (n == 1) r[2] = r[1]; if (s + 0 >= r[1] + 0 && s + 0 <= r[2] + 0) f = 1 }
	} END { exit !f }'; then
		OWNER=$p
	fi
done
[ -n "$OWNER" ] || fail "no master owns slot $SLOT: $(cluster_nodes | tr '\n' ';')"
for p in "${M[@]}"; do
	rcli "$p" cluster delslots "$SLOT" >/dev/null || fail "CLUSTER DELSLOTS $SLOT on $p failed"
done
wait_for "! rcli ${M[0]} cluster slots | grep -qx '$SLOT'" 10 || true
for p in "${M[@]}"; do
	rcli "$p" set 'x{outbox:agg-0}' 1 2>&1 | grep -q CLUSTERDOWN ||
		fail "master $p still serves slot $SLOT: $(rcli "$p" set 'x{outbox:agg-0}' 1 2>&1)"
done
ok "slot $SLOT (outbox:agg-0, was on $OWNER) is served by no master"

# emit ROWS: one transaction over agg-0..agg-9, n in commit order.
psql_q "CREATE SEQUENCE n_seq"
emit() {
	psql_q "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
	        SELECT 'order', 'agg-' || (n % 10), 'created', jsonb_build_object('n', n)
	        FROM (SELECT nextval('n_seq') n FROM generate_series(1, $1)) s"
}

HP=$(free_tcp_port)
metrics() { python3 -c 'import sys, urllib.request; sys.stdout.write(urllib.request.urlopen("http://127.0.0.1:%s/metrics" % sys.argv[1], timeout=5).read().decode())' "$HP"; }
relay_start --publish "${PUBLISH:-native}" --retry-max 1s --http-addr "127.0.0.1:$HP" --stream 'outbox:{aggregate_id}'
emit 100
wait_for "grep -q 'no connected master serves hash slot $SLOT' '$RELAY_LOG'" 30 ||
	fail "no line naming slot $SLOT in the relay's log: $(tail -n 5 "$RELAY_LOG")"
ok "the relay names the unserved slot: $(grep -m1 "hash slot $SLOT" "$RELAY_LOG" | cut -c1-240)"
sleep 3
relay_alive || fail "the relay exited while slot $SLOT had no master"
nlines=$(grep -c "hash slot $SLOT" "$RELAY_LOG" || true)
# With --retry-max 1s a try a second at most (a reconnect per event loop turn before).
[ "$nlines" -le 10 ] || fail "$nlines lines naming slot $SLOT within about 3 s: no back-off"
ok "$nlines line(s) naming slot $SLOT within about 3 s: the tries back off"
errs=$(metrics | sed -n 's/^outbox_relay_redis_errors_total{.*kind="cluster_redirect".*} \([0-9]*\)$/\1/p')
assert_ge "${errs:-0}" 1 "the Redis error is counted (redis_errors_total{kind=\"cluster_redirect\"} ${errs:-none})"
c=$(slot_confirmed_lsn outbox_relay)
end=$(current_lsn)
assert_lsn_lt "$c" "$end" "nothing confirmed past the held events ($c < $end)"

rcli "$OWNER" cluster addslots "$SLOT" >/dev/null || fail "CLUSTER ADDSLOTS $SLOT on $OWNER failed"
wait_for "rcli ${M[0]} set 'x{outbox:agg-0}' 1 2>&1 | grep -qv CLUSTERDOWN && rcli ${M[1]} set 'x{outbox:agg-0}' 1 2>&1 | grep -qv CLUSTERDOWN" 30 ||
	fail "slot $SLOT not served again 30 s after ADDSLOTS"
for p in "${M[@]}"; do rcli "$p" del 'x{outbox:agg-0}' >/dev/null 2>&1 || true; done
ok "slot $SLOT served by $OWNER again"
emit 50
end=$(current_lsn)
wait_confirmed outbox_relay "$end" 60 || fail "not confirmed up to $end within 60 s after the slot came back ($(slot_confirmed_lsn outbox_relay))"
relay_alive || fail "the relay exited"
psql_q "SELECT id FROM outbox" >"$T/expected"
cluster_ids_exactly_once "$T/expected"
psql_q "SELECT 'outbox:' || aggregate_id || E'\t' || id FROM outbox ORDER BY (payload->>'n')::int" >"$T/order"
cluster_assert_order "$T/order"
relay_stop
assert_eq 0 "$RELAY_RC" "relay exit code after SIGTERM"
pass
