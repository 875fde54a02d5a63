#!/bin/bash
# 47_redis_tls: rediss:// (TLS to Redis).
#
# Every build: --redis-tls-* with a plain redis:// URL exits 2 naming the
# option; only one of --redis-tls-cert-file/--redis-tls-key-file exits 2; an
# unreadable CA file exits 2.
#
# A build without hiredis_ssl (Debian 12's hiredis 0.14): a rediss:// URL makes
# outbox-relay, outbox-relay status and outbox-consume exit 5 at once, with one
# line that says this build has no TLS and names the fix; nothing is confirmed.
#
# A build with hiredis_ssl >= 1.0 (CI's third build, deploy/build-hiredis-tls.sh):
# redis-server listens on a unix socket (plain, for the test's own checks) and
# on a TLS port on 127.0.0.1 (no plain TCP port), with a server certificate for
# localhost / 127.0.0.1 from a throwaway CA and tls-auth-clients yes.
#   1. CA + client certificate (and a Redis password: AUTH inside TLS): 3,000 small events and one 20,000-row
#      transaction of ~1 KB events (the pipeline fills the socket, so TLS
#      writes block and resume) arrive exactly once and in order; the slot is
#      confirmed to the end.
#   2. outbox-consume and outbox-relay status work over the same TLS port.
#   3. Redis restarted (AOF) in the middle of a 60,000-event drain: the relay reconnects over
#      TLS and everything arrives exactly once.
#   4. A CA that did not sign the server certificate, a server name the
#      certificate does not carry, and no client certificate: each exits 5 with
#      one line naming the option to fix; the slot does not move.
. "$(dirname "$0")/lib.sh"
command -v openssl >/dev/null || skip "openssl is not installed (deploy/install-deps.sh installs it)"
setup_tmp
need_consume_bin

TLS=$T/tls
tls_ca "$TLS" ca "outbox-relay test CA"
tls_ca "$TLS" ca2 "outbox-relay other CA"
tls_cert "$TLS" server ca localhost "DNS:localhost,IP:127.0.0.1" serverAuth
tls_cert "$TLS" client ca outbox-relay "DNS:outbox-relay" clientAuth
ok "throwaway CA, server certificate (localhost, 127.0.0.1), client certificate, second CA"

pg_start
load_schema
slot_create outbox_relay
redis_start
PLAIN_URL=$REDIS_URL

# run_bin NAME BIN ARGS...: run BIN (at most 30 s) with no OUTBOX_* variables;
# exit code in $RC, stdout+stderr in $T/NAME.out.
run_bin() {
	local name=$1 bin=$2
	shift 2
	RC=0
	env $(env | sed -n 's/^\(OUTBOX_[A-Z_]*\)=.*/-u \1/p') timeout -k 5 30 "$bin" "$@" \
		>"$T/$name.out" 2>&1 </dev/null || RC=$?
	log "$name: exit code $RC: $(head -c 300 "$T/$name.out" | tr '\n' ' ')"
}

# ---------------------------------------------------------------------------
# option checks, every build
# ---------------------------------------------------------------------------
run_bin plain-ca "$RELAY_BIN" --pg-dsn "$PG_DSN" --redis-url "$PLAIN_URL" --http-addr "" \
	--redis-tls-ca-file "$TLS/ca.crt"
assert_eq 2 "$RC" "--redis-tls-ca-file with a unix:// URL: exit code"
assert_contains "$(cat "$T/plain-ca.out")" "--redis-tls-ca-file applies only to TLS" "the error names the option"
assert_eq 1 "$(wc -l <"$T/plain-ca.out")" "one line"
run_bin half-pair "$RELAY_BIN" --pg-dsn "$PG_DSN" --redis-url rediss://localhost:1 --http-addr "" \
	--redis-tls-cert-file "$TLS/client.crt"
assert_eq 2 "$RC" "--redis-tls-cert-file without --redis-tls-key-file: exit code"
assert_contains "$(cat "$T/half-pair.out")" "go together" "the error says cert and key go together"
run_bin no-ca "$CONSUME_BIN" --redis-url rediss://localhost:1 --group g --stream s \
	--redis-tls-ca-file "$TLS/missing.crt"
assert_eq 2 "$RC" "outbox-consume with a missing CA file: exit code"
assert_contains "$(cat "$T/no-ca.out")" "cannot read --redis-tls-ca-file" "the error names the option and the file"

if ! "$RELAY_BIN" --version | grep -q 'Redis TLS: yes'; then
	# -----------------------------------------------------------------------
	# no TLS in this build: refuse rediss:// at once, clearly
	# -----------------------------------------------------------------------
	log "$("$RELAY_BIN" --version | tr '\n' ' ')"
	c0=$(slot_confirmed_lsn outbox_relay)
	emit_orders_customers 1 100
	run_bin relay-notls "$RELAY_BIN" --pg-dsn "$PG_DSN" --redis-url rediss://127.0.0.1:6390 --http-addr ""
	assert_eq 5 "$RC" "outbox-relay with rediss:// in a build without TLS: exit code"
	assert_match "$(cat "$T/relay-notls.out")" "rediss:// \(TLS\) is not supported by this build.*hiredis 0?\.?[0-9]+\.[0-9]+ without hiredis_ssl.*build-hiredis-tls\.sh" \
		"outbox-relay names the missing hiredis_ssl and the fix"
	assert_eq "$c0" "$(slot_confirmed_lsn outbox_relay)" "nothing confirmed"
	run_bin status-notls "$RELAY_BIN" status --pg-dsn "$PG_DSN" --redis-url rediss://127.0.0.1:6390
	assert_eq 5 "$RC" "outbox-relay status with rediss:// in a build without TLS: exit code"
	assert_contains "$(cat "$T/status-notls.out")" "not supported by this build" "status says why"
	run_bin consume-notls "$CONSUME_BIN" --redis-url rediss://127.0.0.1:6390 --group g --stream outbox:order
	assert_eq 5 "$RC" "outbox-consume with rediss:// in a build without TLS: exit code"
	assert_contains "$(cat "$T/consume-notls.out")" "not supported by this build" "outbox-consume says why"
	log "this build has no Redis TLS: the TLS path itself runs in a build against hiredis_ssl (.ci/run's build-tls)"
	pass
fi

# ---------------------------------------------------------------------------
# Redis with a TLS port (and the unix socket the test reads through)
# ---------------------------------------------------------------------------
TPORT=$(free_tcp_port)
TLS_PW=tls-S3cret-pw # AUTH goes over the TLS session too
REDIS_TLS_ARGS=(--tls-port "$TPORT" --bind 127.0.0.1 --tls-cert-file "$TLS/server.crt"
	--tls-key-file "$TLS/server.key" --tls-ca-cert-file "$TLS/ca.crt" --tls-auth-clients yes
	--appendonly yes --appendfsync everysec --requirepass "$TLS_PW")
redis_stop
redis_start "${REDIS_TLS_ARGS[@]}"
TLS_URL=rediss://:$TLS_PW@localhost:$TPORT
CLIENT=(--redis-tls-ca-file "$TLS/ca.crt" --redis-tls-cert-file "$TLS/client.crt"
	--redis-tls-key-file "$TLS/client.key")

# ---------------------------------------------------------------------------
# 1. events over TLS, exactly once, in order
# ---------------------------------------------------------------------------
emit_orders_customers 1 3000
psql_q "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
        SELECT 'big', i::text, 'created', jsonb_build_object('n', i, 'pad', repeat('x', 1000))
        FROM generate_series(1, 20000) i"
REDIS_URL=$TLS_URL
end1=$(current_lsn)
relay_drain "${CLIENT[@]}"
assert_contains "$(cat "$RELAY_LOG")" "over TLS" "the relay's log says the connection is TLS"
assert_eq 23000 "$(sum_xlen)" "23,000 entries"
check_orders_customers_once "3,000 small events exactly once and in order over TLS"
psql_q "SELECT id FROM outbox WHERE aggregate_type = 'big' ORDER BY aggregate_id::int" >"$T/order.big"
assert_stream_ids outbox:big "$T/order.big"
# Against the WAL end before the drain: background records (running_xacts
# from the bgwriter, autovacuum) may be written after it.
c1=$(slot_confirmed_lsn outbox_relay)
lsn_ge "$c1" "$end1" || fail "slot confirmed to the end: $c1 < $end1"
ok "slot confirmed to the end ($c1 >= $end1)"
ok "20,000 events of ~1 KB in one transaction arrive in order over TLS"

# ---------------------------------------------------------------------------
# 2. outbox-consume and status over TLS
# ---------------------------------------------------------------------------
run_bin consume "$CONSUME_BIN" --redis-url "$TLS_URL" "${CLIENT[@]}" --group tls --create-group \
	--stream outbox:order --count 1500
assert_eq 0 "$RC" "outbox-consume --count 1500 over TLS: exit code"
assert_eq 1500 "$(grep -c '"entry_id"' "$T/consume.out")" "outbox-consume read the 1,500 order events over TLS"
assert_eq 0 "$(redis_cli XPENDING outbox:order tls | head -n 1)" "and acknowledged them"
run_bin status "$RELAY_BIN" status --pg-dsn "$PG_DSN" --redis-url "$TLS_URL" "${CLIENT[@]}"
assert_eq 0 "$RC" "outbox-relay status over TLS: exit code"
assert_match "$(cat "$T/status.out")" "outbox:big +20000 " "status lists outbox:big with 20000 entries"

# ---------------------------------------------------------------------------
# 3. Redis restarted in the middle of a drain
# ---------------------------------------------------------------------------
emit_orders_customers 3001 63000 500
relay_start "${CLIENT[@]}" --retry-max 300ms
wait_for '[ "$(sum_xlen)" -ge 26000 ]' 60 || fail "no progress over TLS before the restart"
log "restarting Redis with $(sum_xlen) of 83,000 entries written"
redis_stop save
redis_start "${REDIS_TLS_ARGS[@]}"
REDIS_URL=$TLS_URL # redis_start points it at the unix socket
wait_confirmed outbox_relay "$(current_lsn)" 60 || fail "not confirmed within 60 s after Redis came back"
relay_stop
assert_eq 0 "$RELAY_RC" "relay exit code after SIGTERM"
assert_contains "$(cat "$RELAY_LOG")" "reconnected" "the relay reconnected over TLS"
log "relay: $(grep -o 'published=[0-9]* replays=[0-9]* duplicates=[0-9]*' "$RELAY_LOG" | tail -n 1)"
check_orders_customers_once "63,000 small events exactly once and in order across a Redis restart"

# ---------------------------------------------------------------------------
# 4. certificate problems: exit 5, one line naming the fix, slot unchanged
# ---------------------------------------------------------------------------
emit_orders_customers 63001 63100
c0=$(slot_confirmed_lsn outbox_relay)
n0=$(sum_xlen)
relay_run --redis-tls-ca-file "$TLS/ca2.crt" --redis-tls-cert-file "$TLS/client.crt" \
	--redis-tls-key-file "$TLS/client.key" || true
assert_eq 5 "$RELAY_RC" "a CA that did not sign the server's certificate: exit code"
line=$(grep -m1 'certificate' "$RELAY_LOG")
assert_contains "$line" "was not accepted" "wrong CA: says the certificate was not accepted"
assert_contains "$line" "--redis-tls-ca-file" "wrong CA: names --redis-tls-ca-file"

relay_run "${CLIENT[@]}" --redis-tls-server-name redis.example || true
assert_eq 5 "$RELAY_RC" "a server name the certificate does not carry: exit code"
line=$(grep -m1 'certificate' "$RELAY_LOG")
assert_contains "$line" "\"redis.example\"" "name mismatch: names the expected name"
assert_contains "$line" "hostname mismatch" "name mismatch: says what is wrong"

REDIS_URL=rediss://:$TLS_PW@127.0.0.1:$TPORT # the certificate carries IP:127.0.0.1 too
relay_run --redis-tls-ca-file "$TLS/ca.crt" || true
assert_eq 5 "$RELAY_RC" "no client certificate for a server with tls-auth-clients yes: exit code"
assert_contains "$(grep -m1 'client certificate' "$RELAY_LOG")" "--redis-tls-cert-file" \
	"no client certificate: names --redis-tls-cert-file"
assert_eq "$c0" "$(slot_confirmed_lsn outbox_relay)" "the slot did not move"
assert_eq "$n0" "$(sum_xlen)" "nothing was published"

relay_drain "${CLIENT[@]}"
check_orders_customers_once "the last 100 events exactly once over rediss://127.0.0.1 (IP in the certificate)"
assert_eq "" "$(grep -l -- "$TLS_PW" "$T"/relay.*.log "$T"/*.out 2>/dev/null || true)" "the Redis password appears in no log or output"
pass
