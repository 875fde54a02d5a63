#!/bin/bash
# 48_redis_tls_cluster: rediss-cluster:// — a 3-master Redis Cluster that
# speaks only TLS (tls-port, port 0, tls-cluster yes: clients and the cluster
# bus), with a throwaway CA. The relay discovers the slot map over TLS, opens
# one TLS connection per master (the certificate carries IP:127.0.0.1, the
# address CLUSTER SLOTS announces) and delivers 4,000 events on 40 streams
# exactly once, spread over all three masters; outbox-consume and status read
# them through the same URL over TLS. Skipped in builds without
# hiredis_ssl (47_redis_tls checks their refusal).
. "$(dirname "$0")/lib.sh"
command -v openssl >/dev/null || skip "openssl is not installed (deploy/install-deps.sh installs it)"
"$RELAY_BIN" --version | grep -q 'Redis TLS: yes' ||
	skip "this build has no Redis TLS (hiredis_ssl); .ci/run's build-tls runs this test"
setup_tmp

TLS=$T/tls
tls_ca "$TLS" ca "outbox-relay test CA"
# Cluster nodes present their certificate on both ends of bus connections.
tls_cert "$TLS" node ca localhost "DNS:localhost,IP:127.0.0.1" "serverAuth, clientAuth"
ok "throwaway CA and node certificate"

pg_start
load_schema
slot_create outbox_relay

# tcli PORT ARGS...: redis-cli over TLS to 127.0.0.1:PORT.
tcli() {
	local p=$1
	shift
	redis-cli --tls --cacert "$TLS/ca.crt" -h 127.0.0.1 -p "$p" --raw "$@"
}

ports=()
for _ in 1 2 3; do
	p=$(free_tcp_port bus)
	ports+=("$p")
	mkdir -p "$T/n$p"
	redis-server --port 0 --tls-port "$p" --bind 127.0.0.1 --tls-cluster yes --cluster-enabled yes \
		--cluster-config-file "$T/n$p/nodes.conf" --tls-cert-file "$TLS/node.crt" \
		--tls-key-file "$TLS/node.key" --tls-ca-cert-file "$TLS/ca.crt" --tls-auth-clients no \
		--dir "$T/n$p" --save '' --daemonize yes --pidfile "$T/n$p/pid" --logfile "$T/n$p/log" ||
		fail "redis-server (TLS cluster node $p) failed to start"
	wait_for "[ -s '$T/n$p/pid' ]" 10 || fail "node $p wrote no pidfile"
	cat "$T/n$p/pid" >>"$T/redis.pids"
	wait_for "[ \"\$(tcli $p ping 2>/dev/null)\" = PONG ]" 10 || fail "node $p does not answer PING over TLS"
done
timeout 60 redis-cli --tls --cacert "$TLS/ca.crt" --cluster create "127.0.0.1:${ports[0]}" \
	"127.0.0.1:${ports[1]}" "127.0.0.1:${ports[2]}" --cluster-yes >"$T/create.log" 2>&1 ||
	fail "redis-cli --cluster create over TLS: $(tail -n 3 "$T/create.log")"
for p in "${ports[@]}"; do
	wait_for "tcli $p cluster info | grep -q cluster_state:ok" 30 || fail "node $p: cluster_state is not ok"
done
ok "3-master cluster on TLS ports ${ports[*]} (no plain TCP port)"

psql_q "DO \$\$ BEGIN
  FOR t IN 0..39 LOOP
    INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
      SELECT 't' || (i % 40), i::text, 'created', jsonb_build_object('n', i)
      FROM generate_series(t * 100 + 1, t * 100 + 100) i;
    COMMIT;
  END LOOP;
END \$\$;"
REDIS_URL="rediss-cluster://127.0.0.1:${ports[1]}"
end1=$(current_lsn)
relay_drain --redis-tls-ca-file "$TLS/ca.crt"
assert_contains "$(cat "$RELAY_LOG")" "over TLS" "the relay's log says the cluster connection is TLS"

# Every stream's entries, from the master that holds it: ids must be the rows' ids, once each.
: >"$T/got"
for p in "${ports[@]}"; do
	keys=$(tcli "$p" --scan --pattern 'outbox:t*' | sort)
	nkeys=$(printf '%s\n' "$keys" | grep -c . || true)
	[ "$nkeys" -gt 0 ] || fail "master $p holds no stream: the events did not spread over the cluster"
	log "master $p holds $nkeys streams"
	for k in $keys; do
		tcli "$p" XRANGE "$k" - + | awk 'prev == "id" { print } { prev = $0 }' >>"$T/got"
	done
done
psql_q "SELECT id FROM outbox" >"$T/expected"
assert_eq 4000 "$(wc -l <"$T/got")" "4,000 entries across the three masters"
ids_exactly_once "$T/expected" "$T/got" "TLS cluster"
# Against the WAL end before the drain (background WAL may follow it).
c1=$(slot_confirmed_lsn outbox_relay)
lsn_ge "$c1" "$end1" || fail "slot confirmed to the end: $c1 < $end1"
ok "slot confirmed to the end ($c1 >= $end1)"

# outbox-consume and status through the same rediss-cluster:// URL.
RC=0
env -u OUTBOX_CONSUME_GROUP -u OUTBOX_CONSUME_STREAM -u OUTBOX_CONSUME_STREAM_PATTERN \
	timeout -k 5 60 "$CONSUME_BIN" --redis-url "$REDIS_URL" --redis-tls-ca-file "$TLS/ca.crt" \
	--stream-pattern 'outbox:t*' --group g --create-group --count 4000 \
	>"$T/consume.out" 2>"$T/consume.err" </dev/null || RC=$?
assert_eq 0 "$RC" "outbox-consume over rediss-cluster:// exit code (--count 4000)"
python3 -c 'import json,sys; [print(json.loads(l)["id"]) for l in open(sys.argv[1])]' "$T/consume.out" >"$T/consumed"
ids_exactly_once "$T/expected" "$T/consumed" "outbox-consume over the TLS cluster"
RC=0
env -u OUTBOX_RELAY_PG_DSN -u OUTBOX_RELAY_REDIS_URL -u OUTBOX_RELAY_STREAM_PATTERN \
	timeout -k 5 30 "$RELAY_BIN" status --pg-dsn "$PG_DSN" --redis-url "$REDIS_URL" \
	--redis-tls-ca-file "$TLS/ca.crt" --stream-pattern 'outbox:t*' >"$T/status.out" 2>&1 </dev/null || RC=$?
assert_eq 0 "$RC" "status over rediss-cluster:// exit code"
assert_contains "$(cat "$T/status.out")" 'Streams matching "outbox:t*": 40' "status finds the 40 streams over TLS"
pass
