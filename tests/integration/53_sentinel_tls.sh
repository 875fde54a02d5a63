#!/bin/bash
# 53_sentinel_tls: rediss-sentinel:// (TLS to the Sentinels and to the master).
#
# A build without hiredis_ssl: outbox-relay, outbox-relay status and
# outbox-consume refuse a rediss-sentinel:// URL at once, exit 5, one line
# naming the fix (as 47_redis_tls does for rediss://).
#
# A build with hiredis_ssl (CI's build-tls): a master and a replica that speak
# TLS only to clients and to each other (tls-replication yes; a plain port for
# the test's own checks), three Sentinels with a TLS port each, a throwaway CA.
#   1. The relay with rediss-sentinel://S1,S2,S3#outbox-master and
#      --redis-tls-ca-file publishes 200 events exactly once.
#   2. The master is SIGKILLed, Sentinel promotes the replica (it announces
#      its TLS port); 200 more events reach the new master over TLS; all 400
#      exactly once, in order. outbox-consume reads them through the same URL.
#   3. A CA that did not sign the certificates: exit 5, one line naming
#      --redis-tls-ca-file; the slot does not move.
. "$(dirname "$0")/lib.sh"
command -v openssl >/dev/null || skip "openssl is not installed (deploy/install-deps.sh installs it)"
command -v redis-sentinel >/dev/null || [ -n "$REDIS_CHROOT" ] ||
	skip "no redis-sentinel (Debian package redis-sentinel; deploy/install-deps.sh installs it)"
need_consume_bin
setup_tmp
pg_start
load_schema
slot_create outbox_relay

# run_bin NAME BIN ARGS...: run BIN (at most 60 s) with no OUTBOX_* variables;
# exit code in $RC, stdout+stderr in $T/NAME.out.
run_bin() {
	local name=$1 bin=$2
	shift 2
	RC=0
	env $(env | sed -n 's/^\(OUTBOX_[A-Z_]*\)=.*/-u \1/p') timeout -k 5 60 "$bin" "$@" \
		>"$T/$name.out" 2>&1 </dev/null || RC=$?
	log "$name: exit code $RC: $(grep -m1 -E 'error|refus' "$T/$name.out" | cut -c1-300 || true)"
}
emit() { # N TAG: N events, one transaction each; ids appended to $T/expected
	local i
	for i in $(seq 1 "$1"); do
		psql_q "SELECT outbox_emit('order', '$2-$i', 'created', '{}')" >>"$T/expected"
	done
}

if ! "$RELAY_BIN" --version | grep -q 'Redis TLS: yes'; then
	URL="rediss-sentinel://127.0.0.1:1,127.0.0.1:2#$SENTINEL_NAME"
	run_bin relay "$RELAY_BIN" --pg-dsn "$PG_DSN" --redis-url "$URL" --http-addr ""
	assert_eq 5 "$RC" "outbox-relay with rediss-sentinel:// in a build without TLS: exit code"
	assert_contains "$(cat "$T/relay.out")" "not supported by this build" "outbox-relay says why"
	run_bin status "$RELAY_BIN" status --pg-dsn "$PG_DSN" --redis-url "$URL"
	assert_eq 5 "$RC" "status with rediss-sentinel:// in a build without TLS: exit code"
	assert_contains "$(cat "$T/status.out")" "not supported by this build" "status says why"
	run_bin consume "$CONSUME_BIN" --redis-url "$URL" --group g --stream outbox:order
	assert_eq 5 "$RC" "outbox-consume with rediss-sentinel:// in a build without TLS: exit code"
	assert_contains "$(cat "$T/consume.out")" "not supported by this build" "outbox-consume says why"
	log "this build has no Redis TLS: the TLS path runs in a build against hiredis_ssl (.ci/run's build-tls)"
	pass
fi

TLS=$T/tls
tls_ca "$TLS" ca "outbox-relay test CA"
tls_ca "$TLS" ca2 "outbox-relay other CA"
tls_cert "$TLS" server ca localhost "DNS:localhost,IP:127.0.0.1" "serverAuth, clientAuth"
NODE_TLS=(--tls-cert-file "$TLS/server.crt" --tls-key-file "$TLS/server.key" --tls-ca-cert-file "$TLS/ca.crt"
	--tls-replication yes --tls-auth-clients no)

# A master and a replica: plain port P (the test's checks), TLS port TP.
MP=$(free_tcp_port)
MTP=$(free_tcp_port)
_rnode_launch "$MP" --tls-port "$MTP" "${NODE_TLS[@]}" || fail "the TLS master does not start"
RP=$(free_tcp_port)
RTP=$(free_tcp_port)
_rnode_launch "$RP" --tls-port "$RTP" "${NODE_TLS[@]}" --replicaof 127.0.0.1 "$MTP" ||
	fail "the TLS replica does not start"
wait_for "replicas_synced $RP" 30 || fail "the replica does not sync over TLS: $(rnode_log_tail "$RP" 3)"
ok "master $MP (TLS $MTP) and replica $RP (TLS $RTP) replicate over TLS"
SENTINEL_TLS=1 sentinels_start "$MTP" 3 "tls-cert-file $TLS/server.crt" "tls-key-file $TLS/server.key" \
	"tls-ca-cert-file $TLS/ca.crt" "tls-replication yes" "tls-auth-clients no"
URL="rediss-sentinel://$SENTINEL_TLS_ADDRS#$SENTINEL_NAME"
REDIS_URL=$URL
: >"$T/expected"

# 1. Through the Sentinels over TLS.
emit 200 a
relay_drain --redis-tls-ca-file "$TLS/ca.crt"
assert_contains "$(cat "$RELAY_LOG")" "connected to Redis at master \"$SENTINEL_NAME\"/0 via Sentinel 127.0.0.1:" "the relay found the master through the Sentinels"
assert_contains "$(cat "$RELAY_LOG")" "over TLS" "over TLS"
$RX "127.0.0.1:$MP" fields outbox:order id >"$T/got.1" || fail "could not read the master's stream"
ids_exactly_once "$T/expected" "$T/got.1" "master $MP, over TLS"

# 2. Failover.
rnode_kill9 "$MP"
wait_for "sentinels_agree $RTP" 60 || fail "the Sentinels did not promote $RTP (TLS port of $RP)"
ok "Sentinel promoted the replica: every Sentinel names 127.0.0.1:$RTP"
emit 200 b
relay_drain --redis-tls-ca-file "$TLS/ca.crt"
$RX "127.0.0.1:$RP" fields outbox:order id >"$T/got.2" || fail "could not read the new master's stream"
ids_exactly_once "$T/expected" "$T/got.2" "new master $RP, over TLS"
cmp -s "$T/expected" "$T/got.2" || fail "outbox:order on the new master is not in commit order"
ok "outbox:order in commit order"
run_bin consume "$CONSUME_BIN" --redis-url "$URL" --redis-tls-ca-file "$TLS/ca.crt" --stream outbox:order \
	--group g --create-group --count 400 --block-timeout 1s
assert_eq 0 "$RC" "outbox-consume over rediss-sentinel://: exit code"
assert_eq 400 "$(grep -c '"stream":"outbox:order"' "$T/consume.out")" "outbox-consume read the 400 events"

# 3. The wrong CA.
c0=$(slot_confirmed_lsn outbox_relay)
emit 5 c
relay_run --redis-tls-ca-file "$TLS/ca2.crt" || true
assert_eq 5 "$RELAY_RC" "a CA that did not sign the certificates: exit code"
assert_contains "$(grep ' error: ' "$RELAY_LOG")" "--redis-tls-ca-file" "the line names --redis-tls-ca-file"
assert_eq "$c0" "$(slot_confirmed_lsn outbox_relay)" "nothing confirmed"
pass
