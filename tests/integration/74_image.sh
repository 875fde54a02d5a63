#!/bin/bash
# 74_image: the container image (deploy/Dockerfile) relays for real. Skipped
# (exit 77) unless OUTBOX_IMAGE names an image podman has, e.g.
#
#   deploy/build-image.sh outbox-relay:test
#   OUTBOX_IMAGE=outbox-relay:test meson test -C build --suite integration 74_image
#
# PostgreSQL and Redis run on the host (lib.sh), listening on 127.0.0.1 TCP as
# well; the relay runs in the container with --network host --read-only,
# configured by OUTBOX_RELAY_* variables only. Checked: N events arrive exactly
# once, /healthz and /readyz answer 200, the image's HEALTHCHECK probe passes,
# the process runs as uid 10001, podman stop (SIGTERM) exits 0 after draining.
# Then deploy/compose/postgres-entrypoint.sh initializes a host PostgreSQL
# cluster (its server-setting check included) and the image's relay streams
# from it as outbox_relay, by SCRAM password over TCP, with the password file
# mounted read-only as a secret would be, and (when the image has hiredis_ssl)
# to Redis over rediss:// with the CA file mounted the same way. Last, what the
# FROM scratch runtime root must hold for libpq and OpenSSL: uid 10001's passwd
# entry (libpq's default user name) and the CA bundle at OpenSSL's default
# path (rediss:// without --redis-tls-ca-file), checked with --check-config.
. "$(dirname "$0")/lib.sh"

IMAGE=${OUTBOX_IMAGE:-}
[ -n "$IMAGE" ] || skip "OUTBOX_IMAGE is not set (deploy/build-image.sh builds outbox-relay:test)"
is_root || skip "needs root (podman)"
command -v podman >/dev/null || skip "no podman"
podman image exists "$IMAGE" || fail "OUTBOX_IMAGE=$IMAGE: no such image (deploy/build-image.sh)"
PODMAN=(podman --runtime "${PODMAN_RUNTIME:-runc}")
# No periodic health timer (podman makes it a systemd timer, and CI has no
# systemd): the image's HEALTHCHECK is run on demand (podman healthcheck run).
RUN_OPTS=(--network host --read-only --health-interval disable)
# podman 4.3 still tries the timer and logs an error for it: filter that line.
pm() { "${PODMAN[@]}" "$@" 2> >(sed '/unable to get systemd connection/d' >&2); }
NAME=outbox-it-74-$$
NAME2=$NAME-entrypoint
NAME3=$NAME-memory

setup_tmp
trap '_rc=$?; podman rm -i -f -t 0 "$NAME" "$NAME2" "$NAME3" >/dev/null 2>&1; pkill_ep; (exit $_rc); _cleanup' EXIT
# The entrypoint's cluster (not in lib.sh's bookkeeping): immediate stop.
pkill_ep() {
	[ -f "$T/ep-pg/postmaster.pid" ] || return 0
	runuser -u postgres -- "$PG_BINDIR/pg_ctl" -D "$T/ep-pg" -m immediate -w -t 10 stop >/dev/null 2>&1
}

PGPORT=$(free_tcp_port)
pg_start listen_addresses=127.0.0.1
load_schema
RPORT=$(free_tcp_port)
# An image built with hiredis_ssl (deploy/Dockerfile) also gets rediss://: the
# second relay below talks TLS to the same server's TLS port.
version=$(pm run --rm --network host "$IMAGE" --version)
log "image: $(tr '\n' ';' <<<"$version")"
TLS_ARGS=()
case "$version" in
*"Redis TLS: yes"*)
	TLS=$T/tls
	tls_ca "$TLS" ca "outbox-relay test CA"
	tls_cert "$TLS" server ca localhost "DNS:localhost,IP:127.0.0.1" serverAuth
	TPORT=$(free_tcp_port)
	TLS_ARGS=(--tls-port "$TPORT" --tls-cert-file "$TLS/server.crt" --tls-key-file "$TLS/server.key"
		--tls-ca-cert-file "$TLS/ca.crt" --tls-auth-clients no)
	;;
*) log "the image has no Redis TLS: rediss:// not tested" ;;
esac
redis_start --port "$RPORT" --bind 127.0.0.1 ${TLS_ARGS[@]+"${TLS_ARGS[@]}"}
HPORT=$(free_tcp_port)
assert_eq PONG "$(redis-cli -h 127.0.0.1 -p "$RPORT" ping)" "Redis answers on 127.0.0.1:$RPORT"

container_log() { podman logs "$1" 2>&1 | tail -n 30 | cut -c1-300; }

log "podman run $IMAGE (PostgreSQL 127.0.0.1:$PGPORT, Redis 127.0.0.1:$RPORT, HTTP 127.0.0.1:$HPORT)"
pm run -d --name "$NAME" "${RUN_OPTS[@]}" \
	-e OUTBOX_RELAY_PG_DSN="host=127.0.0.1 port=$PGPORT user=postgres dbname=postgres" \
	-e OUTBOX_RELAY_REDIS_URL="redis://127.0.0.1:$RPORT" \
	-e OUTBOX_RELAY_HTTP_ADDR="127.0.0.1:$HPORT" \
	-e OUTBOX_RELAY_LOG_LEVEL=info \
	"$IMAGE" >/dev/null || fail "podman run failed"

readyz() { curl -s -o /dev/null -w '%{http_code}' --max-time 3 "http://127.0.0.1:$HPORT/readyz"; }
wait_for '[ "$(readyz)" = 200 ]' 60 || fail "/readyz never answered 200: $(container_log "$NAME")"
ok "/readyz 200"
assert_eq 200 "$(curl -s -o /dev/null -w '%{http_code}' --max-time 3 "http://127.0.0.1:$HPORT/healthz")" "/healthz"
assert_eq outbox_relay "$(psql_q "SELECT slot_name FROM pg_replication_slots WHERE active")" "the container's relay holds the slot"

# N events in a few transactions, then wait until they are all in Redis.
N=300
psql_q "SELECT outbox_emit('order', 'o-1', 'created', '{\"n\": 1}')" >/dev/null
psql_q "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
        SELECT (ARRAY['order','customer'])[i % 2 + 1], 'a-' || i, 'updated', jsonb_build_object('n', i)
        FROM generate_series(2, 200) i" >/dev/null
psql_q "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
        SELECT 'invoice', 'i-' || i, 'created', '{}' FROM generate_series(201, $N) i" >/dev/null
psql_q "SELECT id FROM outbox" >"$T/expected"
assert_eq "$N" "$(wc -l <"$T/expected")" "rows committed"
wait_for '[ "$(stream_ids_all | wc -l)" -ge '"$N"' ]' 60 ||
	fail "only $(stream_ids_all | wc -l) of $N events reached Redis: $(container_log "$NAME")"
assert_exactly_once "$T/expected"

# The HEALTHCHECK the image declares, run by podman (then the probe by hand).
hc=$(podman inspect --format '{{json .Config.Healthcheck}}' "$NAME")
assert_contains "$hc" outbox-relay-healthcheck "image HEALTHCHECK uses the static probe"
pm healthcheck run "$NAME" || fail "podman healthcheck run failed: $hc"
ok "podman healthcheck run: healthy"
pm exec "$NAME" /usr/local/bin/outbox-relay-healthcheck /readyz >/dev/null ||
	fail "outbox-relay-healthcheck /readyz failed inside the container"
ok "outbox-relay-healthcheck /readyz exits 0 inside the container"

# uid 10001, as seen by podman and by the host kernel.
assert_eq 10001:10001 "$(podman inspect --format '{{.Config.User}}' "$NAME")" "image USER"
hpid=$(podman inspect --format '{{.State.Pid}}' "$NAME")
assert_eq 10001 "$(awk '/^Uid:/ { print $2 }' "/proc/$hpid/status")" "relay process uid (host view)"
assert_eq outbox-relay "$(tr '\0' ' ' <"/proc/$hpid/cmdline" | awk '{ print $1 }' | xargs basename)" "PID 1 of the container is the relay"

# More events right before SIGTERM: podman stop must drain them, and exit 0.
psql_q "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
        SELECT 'order', 'late-' || i, 'created', '{}' FROM generate_series(1, 100) i" >/dev/null
end=$(current_lsn)
t0=$(date +%s)
pm stop -t 30 "$NAME" >/dev/null || fail "podman stop failed"
assert_lt $(($(date +%s) - t0)) 25 "podman stop seconds (SIGTERM, not the SIGKILL fallback)"
assert_eq 0 "$(podman inspect --format '{{.State.ExitCode}}' "$NAME")" "container exit code after podman stop"
psql_q "SELECT id FROM outbox" >"$T/expected"
assert_exactly_once "$T/expected"
assert_lsn_ge "$(slot_confirmed_lsn outbox_relay)" "$end" "slot confirmed up to the last commit before SIGTERM"
pm rm "$NAME" >/dev/null

# --- deploy/compose/postgres-entrypoint.sh against a host PostgreSQL 15 ---
ROOT=$(cd "$TESTS_DIR/.." && pwd)
EPPORT=$(free_tcp_port)
mkdir -p "$T/ep-init"
cp "$ROOT/sql/outbox.sql" "$ROOT/sql/roles.sql" "$T/ep-init/"
echo "ep-secret-$$" >"$T/ep-password"
chmod 644 "$T/ep-password"
log "postgres-entrypoint.sh on 127.0.0.1:$EPPORT"
# Its psql uses the default socket directory (/var/run/postgresql), as in the
# compose image; only the port is private to this test.
# A copy in $T: the postgres user may not reach the checkout (a CI clone in a
# 0700 temp dir).
install -m 755 "$ROOT/deploy/compose/postgres-entrypoint.sh" "$T/ep-entrypoint.sh"
runuser -u postgres -- env PATH="$PG_BINDIR:$PATH" PGDATA="$T/ep-pg" PGPORT="$EPPORT" \
	POSTGRES_DB=app PG_RELAY_PASSWORD_FILE="$T/ep-password" INITDB_DIR="$T/ep-init" \
	"$T/ep-entrypoint.sh" >"$T/ep.log" 2>&1 &
wait_for "pg_isready -q -h 127.0.0.1 -p $EPPORT" 90 || fail "entrypoint PostgreSQL not ready: $(tail -n 20 "$T/ep.log")"
assert_contains "$(cat "$T/ep.log")" "outbox_relay password set" "entrypoint set the password from the file"
epq() { PGPASSWORD=ep-secret-$$ psql -X -A -t -q -h 127.0.0.1 -p "$EPPORT" -U outbox_relay -d app -c "$1"; }
assert_eq logical "$(epq 'SHOW wal_level')" "entrypoint: wal_level"
if pg_has_setting output_plugin_libraries; then
	assert_contains "$(epq 'SHOW output_plugin_libraries')" wal2json "entrypoint: output_plugin_libraries lists wal2json"
else
	assert_eq 0 "$(grep -c output_plugin_libraries "$T/ep-pg/postgresql.conf" || true)" \
		"entrypoint: no output_plugin_libraries line for a server without that setting"
fi

# A fresh Redis keyspace: another cluster, the same slot name.
redis_cli FLUSHALL >/dev/null
R2URL=redis://127.0.0.1:$RPORT
REDIS2=(-e OUTBOX_RELAY_REDIS_URL="$R2URL")
if [ ${#TLS_ARGS[@]} -gt 0 ]; then
	R2URL=rediss://127.0.0.1:$TPORT # the TLS port only: arriving events went over TLS
	REDIS2=(-v "$TLS/ca.crt:/run/secrets/redis-ca.crt:ro" -e OUTBOX_RELAY_REDIS_URL="$R2URL"
		-e OUTBOX_RELAY_REDIS_TLS_CA_FILE=/run/secrets/redis-ca.crt)
fi
pm run -d --name "$NAME2" "${RUN_OPTS[@]}" \
	-v "$T/ep-password:/run/secrets/pg_relay_password:ro" \
	-e OUTBOX_RELAY_PG_DSN="host=127.0.0.1 port=$EPPORT dbname=app user=outbox_relay" \
	-e OUTBOX_RELAY_PG_PASSWORD_FILE=/run/secrets/pg_relay_password \
	"${REDIS2[@]}" \
	-e OUTBOX_RELAY_HTTP_ADDR="127.0.0.1:$HPORT" \
	"$IMAGE" >/dev/null || fail "podman run (entrypoint cluster) failed"
wait_for '[ "$(readyz)" = 200 ]' 60 || fail "/readyz never 200 against the entrypoint cluster: $(container_log "$NAME2")"
ok "relay as outbox_relay (SCRAM over TCP, password file), Redis $R2URL, is ready"
runuser -u postgres -- psql -X -A -t -q -h /var/run/postgresql -p "$EPPORT" -d app \
	-c "SELECT outbox_emit('order', 'e-' || i, 'created', '{}') FROM generate_series(1, 20) i" >/dev/null
runuser -u postgres -- psql -X -A -t -q -h /var/run/postgresql -p "$EPPORT" -d app -c "SELECT id FROM outbox" >"$T/ep-expected"
wait_for '[ "$(stream_ids_all | wc -l)" -ge 20 ]' 60 ||
	fail "events from the entrypoint cluster did not arrive: $(container_log "$NAME2")"
assert_exactly_once "$T/ep-expected"
pm stop -t 30 "$NAME2" >/dev/null
assert_eq 0 "$(podman inspect --format '{{.State.ExitCode}}' "$NAME2")" "second container exit code"
pm rm "$NAME2" >/dev/null

# The runtime root is FROM scratch (deploy/Dockerfile): what libpq and OpenSSL
# look up at run time must be in it. --check-config connects to both servers
# and exits 0 only when everything is right (9 with one line per problem).
check_in_image() {
	RC=0
	OUT=$(pm run --rm "${RUN_OPTS[@]}" "$@" "$IMAGE" --check-config 2>&1) || RC=$?
}
# libpq takes the default user name from the passwd entry of uid 10001.
check_in_image -e OUTBOX_RELAY_PG_DSN="host=127.0.0.1 port=$PGPORT dbname=postgres" \
	-e OUTBOX_RELAY_REDIS_URL="redis://127.0.0.1:$RPORT"
assert_contains "$OUT" 'role "outbox-relay" does not exist' "no user= in the DSN: libpq found uid 10001's name (exit $RC)"
if [ ${#TLS_ARGS[@]} -gt 0 ]; then
	# No --redis-tls-ca-file: OpenSSL's default paths (/usr/lib/ssl/cert.pem ->
	# /etc/ssl/certs/ca-certificates.crt) are the image's CA bundle, which
	# does not hold the test CA; mounted over the bundle, it is trusted. The
	# host name goes through the image's nsswitch.conf (files).
	SYSTLS=(-e OUTBOX_RELAY_PG_DSN="host=127.0.0.1 port=$PGPORT user=postgres dbname=postgres"
		-e OUTBOX_RELAY_REDIS_URL="rediss://localhost:$TPORT")
	check_in_image "${SYSTLS[@]}"
	assert_eq 9 "$RC" "--check-config exit code, rediss:// to a private CA with the image's own bundle"
	assert_contains "$OUT" "was not accepted for \"localhost\"" "the image's bundle does not trust the test CA"
	check_in_image -v "$TLS/ca.crt:/etc/ssl/certs/ca-certificates.crt:ro" "${SYSTLS[@]}"
	assert_eq 0 "$RC" "--check-config exit code, rediss://localhost with the test CA as the system bundle: $(tail -n 3 <<<"$OUT")"
fi


# --- the shipped memory limit vs the largest row accepted by default ---------
LIMIT=$(awk '/limits:/ { l = 1; next } l && /memory:/ { print $2; exit }' "$TESTS_DIR/../deploy/kubernetes/deployment.yaml")
[[ "$LIMIT" =~ ^[0-9]+Mi$ ]] || fail "no memory limit found in deploy/kubernetes/deployment.yaml ($LIMIT)"
redis_cli FLUSHALL >/dev/null
# {"blob": "x..."}: the row as wal2json prints it is the blob plus ~1.3 KiB.
psql_q "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
        VALUES ('big', 'b1', 'created', jsonb_build_object('blob', repeat('x', 64 * 1048576 - 4096)))" >/dev/null
end=$(current_lsn)
mem_run() { # mem_run LIMIT_MiB: the relay under that memory limit, no swap
	pm run -d --name "$NAME3" "${RUN_OPTS[@]}" --memory "${1}m" --memory-swap "${1}m" \
		-e OUTBOX_RELAY_PG_DSN="host=127.0.0.1 port=$PGPORT user=postgres dbname=postgres" \
		-e OUTBOX_RELAY_REDIS_URL="redis://127.0.0.1:$RPORT" \
		-e OUTBOX_RELAY_MAX_INFLIGHT_BYTES=16MiB -e OUTBOX_RELAY_HTTP_ADDR= \
		-e OUTBOX_RELAY_LOG_LEVEL=info \
		"$IMAGE" >/dev/null || fail "podman run --memory ${1}m failed"
}
mem_run 128
wait_for '[ "$(podman inspect --format "{{.State.Running}}" "$NAME3")" = false ]' 60 ||
	fail "under 128Mi the relay still runs after 60 s: $(container_log "$NAME3")"
log "under 128Mi: exit code $(podman inspect --format '{{.State.ExitCode}}' "$NAME3"), OOMKilled $(podman inspect --format '{{.State.OOMKilled}}' "$NAME3"): $(container_log "$NAME3" | tail -n 2)"
# SIGKILL (137): the kernel's OOM killer, nothing else signals it here
# (podman on cgroup v1 does not set OOMKilled).
assert_eq 137 "$(podman inspect --format '{{.State.ExitCode}}' "$NAME3")" "under 128Mi the 64 MiB row OOM-kills the relay (why the limit is $LIMIT)"
assert_eq 0 "$(redis_cli EXISTS outbox:big)" "nothing published under 128Mi"
pm rm "$NAME3" >/dev/null
mem_run "${LIMIT%Mi}"
wait_for '[ "$(redis_cli EXISTS outbox:big)" = 1 ]' 120 ||
	fail "under $LIMIT the 64 MiB row was not published: $(container_log "$NAME3")"
wait_confirmed outbox_relay "$end" 30 || fail "under $LIMIT: not confirmed up to $end"
assert_eq true "$(podman inspect --format '{{.State.Running}}' "$NAME3")" "under $LIMIT the relay runs on after the row"
assert_eq "$((64 * 1048576 - 4096 + 12))" "$(redis_cli EVAL "local e = redis.call('XRANGE', KEYS[1], '-', '+')[1][2]
for i = 1, #e, 2 do if e[i] == 'payload' then return #e[i + 1] end end
return -1" 1 outbox:big)" "the payload arrived whole"
pm stop -t 30 "$NAME3" >/dev/null
assert_eq 0 "$(podman inspect --format '{{.State.ExitCode}}' "$NAME3")" "exit code after podman stop"
pm rm "$NAME3" >/dev/null

pass
