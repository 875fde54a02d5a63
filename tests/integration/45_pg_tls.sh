#!/bin/bash
# 45_pg_tls: the relay streams from PostgreSQL over TLS. PostgreSQL listens on
# 127.0.0.1 (a free port) with ssl=on and a server certificate for
# CN=localhost (SAN DNS:localhost) signed by a throwaway CA made with openssl
# in $T; pg_hba allows TCP only as hostssl.
#   1. sslmode=verify-full + sslrootcert=the CA: 300 events arrive exactly
#      once, and pg_stat_ssl shows ssl=t for the walsender streaming the slot.
#   2. sslrootcert=another throwaway CA: the relay logs the certificate
#      verification failure, keeps retrying (does not exit), confirms nothing
#      and publishes nothing. Same for verify-full against host=127.0.0.1
#      (the certificate names localhost only).
#   3. sslmode=require without any CA: delivers the rest, exactly once.
. "$(dirname "$0")/lib.sh"
command -v openssl >/dev/null || skip "openssl is not installed (deploy/install-deps.sh installs it)"
setup_tmp

# ---------------------------------------------------------------------------
# certificates: CA, server cert for localhost, and an unrelated second CA
# ---------------------------------------------------------------------------
TLS=$T/tls
mkdir -p "$TLS"
chmod 755 "$TLS"
tls_ca "$TLS" ca "outbox-relay test CA"
tls_ca "$TLS" ca2 "outbox-relay other CA"
tls_cert "$TLS" server ca localhost DNS:localhost serverAuth
! openssl verify -CAfile "$TLS/ca2.crt" "$TLS/server.crt" >/dev/null 2>&1 || fail "server.crt verifies against ca2.crt (test bug)"
if is_root; then
	chown postgres:postgres "$TLS/server.key" "$TLS/server.crt"
fi
ok "throwaway CA, server certificate for CN=localhost (SAN DNS:localhost), second CA"

# ---------------------------------------------------------------------------
# PostgreSQL on 127.0.0.1:$PGPORT with ssl=on, TCP only through hostssl
# ---------------------------------------------------------------------------
PGPORT=$(free_tcp_port)
pg_start
cat >>"$PGDATA/postgresql.conf" <<EOF
listen_addresses = '127.0.0.1'
ssl = on
ssl_cert_file = '$TLS/server.crt'
ssl_key_file = '$TLS/server.key'
EOF
cat >"$PGDATA/pg_hba.conf" <<EOF
local all all trust
local replication all trust
hostssl all all 127.0.0.1/32 trust
EOF
pg_restart
err=$(psql -X -At -c "SELECT 1" "host=127.0.0.1 port=$PGPORT user=postgres dbname=postgres sslmode=disable" 2>&1 || true)
assert_contains "$err" "no pg_hba.conf entry" "TCP without SSL is rejected by pg_hba"
assert_eq "on" "$(psql_q "SHOW ssl")" "ssl=on"
load_schema
slot_create outbox_relay

TLS_DSN="host=localhost port=$PGPORT user=postgres dbname=postgres"
assert_eq "t" "$(psql -X -At -c "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()" \
	"$TLS_DSN sslmode=verify-full sslrootcert=$TLS/ca.crt")" "psql with verify-full and the CA connects over SSL"
redis_start

# ---------------------------------------------------------------------------
# 1. verify-full with the right CA
# ---------------------------------------------------------------------------
PG_DSN="$TLS_DSN sslmode=verify-full sslrootcert=$TLS/ca.crt"
relay_start --retry-max 1s
emit_orders_customers 1 300 50
l1=$(current_lsn)
wait_confirmed outbox_relay "$l1" 30 || fail "not confirmed over TLS within 30 s (slot at $(slot_confirmed_lsn outbox_relay), want $l1)"
ok "300 events confirmed over TLS up to $l1"
ssl=$(psql_q "SELECT s.ssl::int || ' ' || s.version || ' ' || coalesce(a.client_addr::text, '') || ' ' || a.backend_type
              FROM pg_replication_slots r JOIN pg_stat_ssl s ON s.pid = r.active_pid
              JOIN pg_stat_activity a ON a.pid = r.active_pid WHERE r.slot_name = 'outbox_relay'")
assert_match "$ssl" '^1 TLSv1\.[23] 127\.0\.0\.1(/32)? walsender$' "pg_stat_ssl: the walsender of slot outbox_relay uses SSL ($ssl)"
relay_stop
assert_eq 0 "$RELAY_RC" "relay (verify-full) exit code after SIGTERM"
psql_q "SELECT id FROM outbox" >"$T/expected"
assert_exactly_once "$T/expected"

# ---------------------------------------------------------------------------
# 2. the wrong CA; the right CA but a host name the certificate does not name
# ---------------------------------------------------------------------------
emit_orders_customers 301 400 50
l2=$(current_lsn)
c0=$(slot_confirmed_lsn outbox_relay)
assert_lsn_lt "$c0" "$l2" "events 301-400 not confirmed yet"

PG_DSN="$TLS_DSN sslmode=verify-full sslrootcert=$TLS/ca2.crt"
relay_start --retry-max 1s
wait_for "grep -qi 'certificate verify failed' '$RELAY_LOG'" 20 ||
	fail "wrong CA: no 'certificate verify failed' in the relay's log within 20 s"
sleep 3
relay_alive || fail "wrong CA: the relay exited (see its log) instead of retrying"
ok "wrong CA: the relay logs the verification failure and keeps retrying"
line=$(grep -i -m1 'certificate verify failed' "$RELAY_LOG")
log "relay says: ${line:0:300}"
attempts=$(grep -ci 'certificate verify failed' "$RELAY_LOG" || true)
warns=$(grep -i 'certificate verify failed' "$RELAY_LOG" | grep -c ' warn: ' || true)
assert_eq 1 "$warns" "wrong CA: one warning for the outage ($attempts attempts in ~4 s, the others at debug level)"
assert_eq "$c0" "$(slot_confirmed_lsn outbox_relay)" "wrong CA: confirmed_flush_lsn unchanged"
assert_eq 300 "$(sum_xlen)" "wrong CA: nothing published"
assert_eq f "$(psql_q "SELECT active FROM pg_replication_slots WHERE slot_name = 'outbox_relay'")" "wrong CA: the slot is not active"
relay_stop
assert_eq 0 "$RELAY_RC" "relay (wrong CA, retrying) exit code after SIGTERM"

PG_DSN="host=127.0.0.1 port=$PGPORT user=postgres dbname=postgres sslmode=verify-full sslrootcert=$TLS/ca.crt"
relay_start --retry-max 1s
wait_for "grep -qiE 'does not match host name|certificate' '$RELAY_LOG'" 20 ||
	fail "host name mismatch: no certificate error in the relay's log within 20 s"
sleep 2
relay_alive || fail "host name mismatch: the relay exited instead of retrying"
line=$(grep -iE -m1 'does not match host name|certificate' "$RELAY_LOG")
assert_contains "$line" "127.0.0.1" "host name mismatch: the log line names the host we asked for"
assert_eq "$c0" "$(slot_confirmed_lsn outbox_relay)" "host name mismatch: confirmed_flush_lsn unchanged"
relay_stop

# ---------------------------------------------------------------------------
# 3. sslmode=require, no CA at all: encrypted, not verified; delivers
# ---------------------------------------------------------------------------
# shellcheck disable=SC2034 # PG_DSN is read by lib.sh's _relay_args
PG_DSN="$TLS_DSN sslmode=require"
relay_start --retry-max 1s
wait_confirmed outbox_relay "$l2" 30 || fail "sslmode=require: not confirmed within 30 s"
ssl=$(psql_q "SELECT s.ssl::int FROM pg_replication_slots r JOIN pg_stat_ssl s ON s.pid = r.active_pid WHERE r.slot_name = 'outbox_relay'")
assert_eq 1 "$ssl" "sslmode=require: the walsender uses SSL"
relay_stop
assert_eq 0 "$RELAY_RC" "relay (require) exit code after SIGTERM"
check_orders_customers_once "exactly once and in order over TLS"
pass
