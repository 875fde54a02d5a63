#!/bin/bash
# 44_wait_aof: --wait-aof (WAITAOF, Redis 7.2+) against the installed Redis
# (or, with REDIS_CHROOT, the chroot's redis-server/valkey-server).
#   - Redis older than 7.2 (Debian 12: 7.0) has no WAITAOF: --wait-aof local
#     makes the relay exit 5 at startup with one error line naming WAITAOF,
#     "Redis 7.2" and the server's version, whether AOF is on or off; nothing
#     is published and the slot is not advanced.
#   - Redis 7.2+ (Valkey too): with appendonly no the line names --wait-aof
#     and appendonly (exit 5); with appendonly yes events flow, are confirmed
#     exactly once, and the server counted WAITAOF calls (INFO commandstats).
#   Which branch runs is decided by asking the server (COMMAND INFO WAITAOF),
#   not by its version: Valkey has its own version numbers.
#   - Bad values are configuration errors (exit 2): --wait-aof always,
#     --wait-aof local,replicas without --wait-replicas, --wait-aof local with
#     --wait-replicas (it would wait for no replica).
RELAY_TIMEOUT=${RELAY_TIMEOUT:-30}
. "$(dirname "$0")/lib.sh"
setup_tmp
pg_start
load_schema
slot_create outbox_relay
psql_q "SELECT outbox_emit('order', '1', 'created', '{}')" >/dev/null
c0=$(slot_confirmed_lsn outbox_relay)

# expect_refusal WHAT NEEDLE...: the last relay_run exited 5 with exactly one
# error line, which contains every NEEDLE.
expect_refusal() {
	local what=$1 line n
	shift
	assert_eq 5 "$RELAY_RC" "$what: exit code"
	n=$(grep -c ' error: ' "$RELAY_LOG" || true)
	line=$(grep -m1 ' error: ' "$RELAY_LOG" || true)
	log "$what: ${line:0:300}"
	assert_eq 1 "$n" "$what: one error line"
	for needle in "$@"; do
		assert_contains "$line" "$needle" "$what: the error line"
	done
	assert_eq "$c0" "$(slot_confirmed_lsn outbox_relay)" "$what: slot not advanced"
	assert_eq 0 "$(sum_xlen)" "$what: nothing published"
}

# Configuration errors first (no server needed).
redis_start
relay_run --wait-aof always || true
assert_eq 2 "$RELAY_RC" "--wait-aof always: exit code"
assert_contains "$(cat "$RELAY_LOG")" "--wait-aof" "--wait-aof always: the message names the option"
relay_run --wait-aof local,replicas || true
assert_eq 2 "$RELAY_RC" "--wait-aof local,replicas without --wait-replicas: exit code"
assert_contains "$(cat "$RELAY_LOG")" "--wait-replicas" "--wait-aof local,replicas without --wait-replicas: the message names --wait-replicas"
relay_run --wait-aof local --wait-replicas 1 || true
assert_eq 2 "$RELAY_RC" "--wait-aof local with --wait-replicas: exit code"
assert_contains "$(cat "$RELAY_LOG")" "--wait-aof local,replicas" "--wait-aof local with --wait-replicas: the message names the mode that waits for both"
has_waitaof=$(redis_cli COMMAND INFO WAITAOF | head -n 1)
redis_stop

ver=$(redis_server --version | sed -n 's/.* v=\([0-9.]*\).*/\1/p')
log "$(redis_server --version | cut -d' ' -f1-3): COMMAND INFO WAITAOF -> ${has_waitaof:-nil}"
if [ "$has_waitaof" != waitaof ]; then
	# No WAITAOF: refused whatever the AOF setting.
	redis_start --appendonly yes --appendfsync always
	t0=$(date +%s%N)
	relay_run --wait-aof local || true
	ms=$((($(date +%s%N) - t0) / 1000000))
	expect_refusal "Redis $ver, appendonly yes, --wait-aof local" WAITAOF "Redis 7.2" "$ver"
	assert_lt "$ms" 10000 "refused at startup ($ms ms), not after retrying"
	relay_run --wait-aof local,replicas --wait-replicas 1 || true
	expect_refusal "Redis $ver, --wait-aof local,replicas" WAITAOF "Redis 7.2"
	redis_stop

	redis_start --appendonly no
	relay_run --wait-aof local || true
	expect_refusal "Redis $ver, appendonly no, --wait-aof local" WAITAOF
	redis_stop
else
	redis_start --appendonly no
	relay_run --wait-aof local || true
	expect_refusal "Redis $ver, appendonly no, --wait-aof local" --wait-aof appendonly
	redis_stop

	redis_start --appendonly yes --appendfsync everysec
	psql_q "SELECT outbox_emit('order', g::text, 'created', '{}') FROM generate_series(2, 200) g" >/dev/null
	relay_drain --wait-aof local
	psql_q "SELECT id FROM outbox" >"$T/expected"
	assert_exactly_once "$T/expected"
	calls=$(redis_cli INFO commandstats | tr -d '\r' | sed -n 's/^cmdstat_waitaof:calls=\([0-9]*\),.*/\1/p')
	assert_lt 0 "${calls:-0}" "WAITAOF calls the server counted"
	assert_lsn_lt "$c0" "$(slot_confirmed_lsn outbox_relay)" "slot advanced with --wait-aof local"
	cp "$T/expected" "$T/published"
	redis_stop
fi

# Without --wait-aof the same server is fine (on a fresh Redis: what is not
# published yet).
: >>"$T/published"
psql_q "SELECT outbox_emit('order', '201', 'created', '{}')" >/dev/null
redis_start
relay_drain
psql_q "SELECT id FROM outbox" | grep -vxFf "$T/published" >"$T/expected"
assert_exactly_once "$T/expected"
pass
