#!/bin/bash
# 25_redis_errors: error replies from a live Redis. The documented rule: OOM,
# READONLY, BUSY and other error replies are retried with capped backoff
# (never a hot loop) and nothing past the rejected events is confirmed;
# a stream key that holds another type (WRONGTYPE) refuses its entries for
# good, so they are dead-lettered by the function itself; NOSCRIPT / "Function not found"
# reload the function (22_redis_restart_function). In this order:
# (a) OOM: maxmemory 1mb, noeviction, Redis already over it: one warning per
#     state change, little CPU, no confirm past the rejected events;
#     maxmemory 0 -> delivered exactly once.
# (c) READONLY: the relay points at a replica (replicaof a primary on
#     127.0.0.1): READONLY logged once, nothing confirmed; REPLICAOF NO ONE
#     -> delivered exactly once.
# (b) WRONGTYPE: outbox:order is a string when order events commit: each
#     order event is in the dead-letter stream exactly once (reason, stream,
#     raw), customer events flow meanwhile, the slot confirms past them, the
#     string key is untouched; after DEL order events flow to the stream.
RELAY_LOG_LEVEL=${RELAY_LOG_LEVEL:-debug}
. "$(dirname "$0")/lib.sh"
setup_tmp
pg_start
load_schema
redis_start
slot_create outbox_relay
TCK=$(getconf CLK_TCK)

# check_once WHAT [MIN_N]: events with aggregate_id >= MIN_N (default 1) are in
# Redis exactly once and in order, and nothing else is.
check_once() {
	local min=${2:-1}
	psql_q "SELECT id FROM outbox WHERE aggregate_id::int >= $min" >"$T/expected"
	assert_exactly_once "$T/expected"
	for t in order customer; do
		psql_q "SELECT id FROM outbox WHERE aggregate_type = '$t' AND aggregate_id::int >= $min ORDER BY aggregate_id::int" >"$T/order.$t"
		assert_stream_ids "outbox:$t" "$T/order.$t"
	done
	ok "$1"
}

cpu_ticks() { # utime + stime of PID in clock ticks
	local s
	s=$(cat "/proc/$1/stat") || return 1
	s=${s##*) }
	awk '{ print $12 + $13 }' <<<"$s"
}

# lsn_of_event STREAM AGGREGATE_ID: the _lsn field of that event.
lsn_of_event() { rx fields "$1" aggregate_id _lsn | awk -F'\t' -v a="$2" '$1 == a { print $2 }'; }

# count_log REGEX [FILE]: matching lines in the relay's log.
count_log() { grep -cE -- "$1" "${2:-$RELAY_LOG}" || true; }

relay_start --retry-max 1s
emit_orders_customers 1 200
wait_confirmed outbox_relay "$(current_lsn)" 30 || fail "first batch not confirmed"

# ---- (a) OOM -----------------------------------------------------------------
redis_cli SETRANGE filler 3000000 x >/dev/null
redis_cli CONFIG SET maxmemory-policy noeviction >/dev/null
redis_cli CONFIG SET maxmemory 1mb >/dev/null
used=$(redis_cli INFO memory | sed -n 's/^used_memory:\([0-9]*\).*/\1/p')
assert_ge "$used" 1048577 "Redis uses more than maxmemory (bytes)"
warn0=$(count_log ' warn: ')
emit_orders_customers 2001 2500
l_a=$(current_lsn)
wait_for "grep -q 'OOM command not allowed' '$RELAY_LOG'" 10 || fail "the relay did not log OOM within 10 s"
cpu0=$(cpu_ticks "$RELAY_PID")
sleep 8
cpu1=$(cpu_ticks "$RELAY_PID")
cpu_ms=$(((cpu1 - cpu0) * 1000 / TCK))
log "(a) relay CPU over 8 s of OOM replies: ${cpu_ms} ms"
assert_lt "$cpu_ms" 800 "(a) relay CPU time (ms) over 8 s of OOM replies"
relay_alive || fail "relay exited on OOM"
conf_a=$(slot_confirmed_lsn outbox_relay)
noom=$(count_log ' warn: .*OOM')
nattempt=$(count_log 'OOM')
log "(a) OOM: $noom warning line(s); $nattempt log line(s) mention OOM"
assert_eq 1 "$noom" "(a) one OOM warning while Redis stays out of memory"
assert_eq $((warn0 + 1)) "$(count_log ' warn: ')" "(a) no other warnings meanwhile"
assert_ge "$nattempt" 5 "(a) the relay keeps retrying (capped backoff, attempts at debug level)"
assert_lt "$nattempt" 40 "(a) retries are paced (no hot loop)"
redis_cli CONFIG SET maxmemory 0 >/dev/null
ok "CONFIG SET maxmemory 0"
wait_confirmed outbox_relay "$l_a" 30 || fail "relay did not deliver within 30 s after maxmemory 0"
first_a=$(lsn_of_event outbox:customer 2001)
assert_lsn_lt "$conf_a" "$first_a" "(a) confirmed_flush_lsn stayed below the first rejected commit during OOM"
check_once "(a) exactly once after OOM"
relay_stop
assert_eq 0 "$RELAY_RC" "relay exit code after SIGTERM"
log "$(grep 'stopped (' "$RELAY_LOG" | tail -n 1 | sed 's/.*stopped //')"

MAIN_SOCK=$REDIS_SOCK

# ---- (c) READONLY: a replica ------------------------------------------------
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
mkdir -p "$T/primary" "$T/replica"
redis_server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$T/primary" \
	--daemonize yes --pidfile "$T/primary.pid" --logfile "$T/primary.log" || fail "primary did not start"
wait_for "[ -s '$T/primary.pid' ]" 10 || fail "primary wrote no pidfile"
cat "$T/primary.pid" >>"$T/redis.pids"
redis_server --port 0 --unixsocket "$T/replica.sock" --unixsocketperm 700 --save '' --appendonly no \
	--dir "$T/replica" --replicaof 127.0.0.1 "$port" \
	--daemonize yes --pidfile "$T/replica.pid" --logfile "$T/replica.log" || fail "replica did not start"
wait_for "[ -s '$T/replica.pid' ]" 10 || fail "replica wrote no pidfile"
cat "$T/replica.pid" >>"$T/redis.pids"
REDIS_SOCK=$T/replica.sock
REDIS_URL=unix://$REDIS_SOCK
wait_for "redis_cli INFO replication | grep -q 'master_link_status:up'" 20 || fail "replica did not sync with the primary on port $port"
ok "replica of 127.0.0.1:$port is up (unix socket $REDIS_SOCK)"

relay_start --retry-max 1s
emit_orders_customers 3001 3200
l_c=$(current_lsn)
wait_for "grep -q READONLY '$RELAY_LOG'" 10 || fail "the relay did not log READONLY within 10 s"
sleep 3
line=$(grep -m1 READONLY "$RELAY_LOG")
log "relay: ${line#* warn: }"
nro=$(count_log ' warn: .*READONLY')
log "(c) READONLY: $nro warning line(s), $(count_log READONLY) log line(s) mention it"
assert_eq 1 "$nro" "(c) one READONLY warning while the server stays a replica"
conf_c=$(slot_confirmed_lsn outbox_relay)
relay_alive || fail "relay exited on READONLY"
assert_eq OK "$(redis_cli REPLICAOF NO ONE)" "REPLICAOF NO ONE on the replica"
wait_confirmed outbox_relay "$l_c" 30 || fail "relay did not deliver within 30 s after REPLICAOF NO ONE"
first_c=$(lsn_of_event outbox:customer 3001)
assert_lsn_lt "$conf_c" "$first_c" "(c) nothing confirmed past the rejected events while the server was a replica"
check_once "(c) exactly once into the promoted replica" 3001
relay_stop
assert_eq 0 "$RELAY_RC" "relay exit code after SIGTERM"

# Back to the first Redis for (b).
REDIS_SOCK=$MAIN_SOCK
REDIS_URL=unix://$REDIS_SOCK
redis_cli DEL outbox:order outbox:customer >/dev/null # (b) checks only its own events
# The slot moved on while (c) published to the other Redis, so this Redis's
# slot record is behind the slot: the relay would refuse that gap (exit 8,
# 37_slot_gap). (b) starts this Redis's record afresh instead.
redis_cli DEL outbox-relay:slot:outbox_relay >/dev/null
relay_start --retry-max 1s
wait_for slot_active\ outbox_relay 15 || fail "relay did not start streaming"

# ---- (b) WRONGTYPE -----------------------------------------------------------
# A stream key that holds another type refuses every entry for good: the
# function writes those entries to the dead-letter stream in the same call
# (reason, stream, raw fields), the watermark moves past them, and every
# other stream goes on. Nothing is lost, nothing stalls.
assert_eq OK "$(redis_cli SET outbox:order 'not a stream')" "outbox:order is a string"
dl0=$(xlen outbox:dead-letter)
emit_orders_customers 4001 4200
l_b=$(current_lsn)
wait_confirmed outbox_relay "$l_b" 30 || fail "(b) the relay did not confirm past the refused entries within 30 s (stalled)"
relay_alive || fail "relay exited on WRONGTYPE"
assert_eq string "$(redis_cli TYPE outbox:order)" "the relay did not touch the string key"
nwarn=$(count_log ' warn: .*WRONGTYPE.*dead-lettered')
assert_ge "$nwarn" 1 "(b) the log says the refused entries were dead-lettered"
log "relay: $(grep -m1 'WRONGTYPE' "$RELAY_LOG" | sed 's/.* warn: //')"
# The dead letters: one per order event, each id once, with the reason and the stream.
rx entries outbox:dead-letter | tail -n +"$((dl0 + 1))" >"$T/dl_b"
python3 - "$T/dl_b" >"$T/dl_b.ids" <<'PY' || fail "(b) dead-letter entries are malformed: $(head -c 600 "$T/dl_b")"
import json, sys
for line in open(sys.argv[1]):
    f = dict(json.loads(line)["fields"])
    assert f["stream"] == "outbox:order", f
    assert f["reason"].startswith("redis rejected the entry: WRONGTYPE"), f
    assert f["slot"] == "outbox_relay", f
    print(json.loads(f["raw"])["id"])
PY
psql_q "SELECT id FROM outbox WHERE aggregate_type = 'order' AND aggregate_id::int >= 4001" >"$T/exp_b"
ids_exactly_once "$T/exp_b" "$T/dl_b.ids" "(b) order events in the dead-letter stream"
psql_q "SELECT id FROM outbox WHERE aggregate_type = 'customer' AND aggregate_id::int >= 4001 ORDER BY aggregate_id::int" >"$T/cust_b"
rx fields outbox:customer id | tail -n "$(wc -l <"$T/cust_b")" >"$T/cust_b.got"
assert_eq "$(cat "$T/cust_b")" "$(cat "$T/cust_b.got")" "(b) customer events published in order while outbox:order refused"
# Once the key is a stream again, order events flow to it.
redis_cli DEL outbox:order >/dev/null
ok "DEL outbox:order"
emit_orders_customers 4201 4400
wait_confirmed outbox_relay "$(current_lsn)" 30 || fail "relay did not deliver within 30 s after DEL"
relay_stop
assert_eq 0 "$RELAY_RC" "relay exit code after SIGTERM"
log "(b) $(grep 'stopped (' "$RELAY_LOG" | tail -n 1 | sed 's/.*stopped //')"
psql_q "SELECT id FROM outbox WHERE aggregate_type = 'order' AND aggregate_id::int >= 4201 ORDER BY aggregate_id::int" >"$T/order_b2"
assert_stream_ids outbox:order "$T/order_b2"
pass
