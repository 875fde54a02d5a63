#!/bin/bash
# demo.sh - outbox-relay end to end in about ten seconds, on a fresh Debian 12
# machine: installs what is missing, builds, starts a throwaway PostgreSQL 15
# (wal2json) and redis-server on unix sockets in a temp dir, runs the relay,
# commits outbox events the three ways the product supports, reads them back
# with XREADGROUP, shows what the relay confirmed, and removes everything.
#
#   deploy/demo.sh            (as root, or a user with sudo for the package step)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

deploy/install-deps.sh
[ -f build/build.ninja ] || meson setup build >/dev/null
meson compile -C build >/dev/null

export RELAY_BIN=$ROOT/build/cmd/outbox-relay/outbox-relay
export TESTS_DIR=$ROOT/tests
export RELAY_LOG_LEVEL=info
CONSUME=$ROOT/build/cmd/outbox-consume/outbox-consume
# The integration-test harness knows how to start and always stop the servers.
# shellcheck source=../tests/integration/lib.sh
. "$ROOT/tests/integration/lib.sh"
TEST_NAME=demo
setup_tmp

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

say "starting a throwaway PostgreSQL 15 + wal2json and Redis in $T"
pg_start
load_schema
redis_start

say "starting outbox-relay (slot outbox_relay, consumer group 'demo' on every stream)"
relay_start --group demo --http-addr ""
wait_for "slot_active outbox_relay" 20 "the relay to start streaming" ||
	fail "relay did not start streaming"
tail -n 3 "$RELAY_LOG"

say "committing events: 3 orders in one transaction, a user event, a rolled-back one, a logical message"
psql_q <<'SQL'
BEGIN;
SELECT outbox_emit('order', 'o-' || i, 'order.created', jsonb_build_object('order', i, 'total', 9.95 * i))
  FROM generate_series(1, 3) AS i;
COMMIT;
SQL
psql_q "SELECT outbox_emit('user', 'u-1', 'user.signed_up', '{\"email\": \"a@example.com\"}')" >/dev/null
psql_q "BEGIN; SELECT outbox_emit('order', 'o-x', 'order.created', '{}'); ROLLBACK;" >/dev/null
psql_q "SELECT outbox_emit_message('user', 'u-2', 'user.signed_up', '{\"email\": \"b@example.com\"}')" >/dev/null
echo "5 events committed, 1 rolled back (never published)"

say "reading them back with XREADGROUP (group demo) and XACK"
if [ -x "$CONSUME" ]; then
	"$CONSUME" --redis-url "unix://$REDIS_SOCK" --stream outbox:order --stream outbox:user \
		--group demo --consumer demo-1 --count 5 --block-timeout 10s
else
	for s in outbox:order outbox:user; do
		redis_cli XREADGROUP GROUP demo demo-1 COUNT 10 BLOCK 10000 STREAMS "$s" '>'
	done
fi

say "what PostgreSQL knows: the slot's confirmed position has caught up with the WAL"
end=$(current_lsn)
wait_for "lsn_ge \"\$(slot_confirmed_lsn outbox_relay)\" $end" 20 "confirm" || true
psql_q "SELECT 'slot ' || slot_name || ' confirmed_flush_lsn=' || confirmed_flush_lsn || ' (WAL end ' || pg_current_wal_lsn() || ')' FROM pg_replication_slots"

say "stopping the relay (SIGTERM drains and confirms)"
relay_stop
grep -E "stopped" "$RELAY_LOG" | tail -n 1
say "done; every server started here has been stopped and $T removed"
