#!/bin/bash
# 64_redis_memory: Redis's maxmemory-policy and memory use (issue 11 §4).
#   (a) maxmemory-policy allkeys-lru: the relay refuses with exit 5 and one
#       line naming the setting and the fix (noeviction, --allow-eviction);
#       nothing published; --check-config lists it as a problem (exit 9).
#   (b) --allow-eviction (and OUTBOX_RELAY_ALLOW_EVICTION=true): it runs.
#   (c) volatile-lru: it runs, with one warning (dedup keys have a TTL and go
#       first: duplicates could slip through).
#   (d) /metrics has outbox_relay_redis_used_memory_bytes and
#       outbox_relay_redis_maxmemory_bytes; /readyz stays 200 and says
#       "ready redis-memory-pressure" above 90% of maxmemory.
. "$(dirname "$0")/lib.sh"
setup_tmp
pg_start
load_schema
redis_start --maxmemory 100mb --maxmemory-policy allkeys-lru
slot_create outbox_relay

emit() {
	psql_q "SELECT outbox_emit('order', 'agg-' || i, 'created', '{}') FROM generate_series(1, $1) i" >>"$T/expected"
}

# (a) allkeys-lru
: >"$T/expected"
emit 3
relay_run --endpos "$(current_lsn)" || true
assert_eq 5 "$RELAY_RC" "(a) allkeys-lru: exit code"
errs=$(grep ' error: ' "$RELAY_LOG" || true)
assert_eq 1 "$(printf '%s\n' "$errs" | grep -c .)" "(a) one error line [${errs:0:300}]"
assert_contains "$errs" "maxmemory-policy allkeys-lru" "(a) the line names the setting"
assert_contains "$errs" "set maxmemory-policy noeviction" "(a) the line names the fix"
assert_contains "$errs" "--allow-eviction" "(a) the line names --allow-eviction"
assert_eq 0 "$(redis_cli EXISTS outbox:order)" "(a) nothing published"
relay_run --check-config || true
assert_eq 9 "$RELAY_RC" "(a) --check-config: exit code"
assert_contains "$(cat "$RELAY_LOG")" "maxmemory-policy allkeys-lru" "(a) --check-config names the policy"

# (b) --allow-eviction, then the variable
relay_drain --allow-eviction
assert_exactly_once "$T/expected"
emit 2
OUTBOX_RELAY_ALLOW_EVICTION=true relay_drain
assert_exactly_once "$T/expected"

# (c) volatile-lru
redis_cli CONFIG SET maxmemory-policy volatile-lru >/dev/null
emit 2
relay_drain
assert_eq 1 "$(grep -c 'maxmemory-policy volatile-lru' "$RELAY_LOG")" "(c) volatile-lru: one warning"
assert_contains "$(grep 'volatile-lru' "$RELAY_LOG")" "duplicate could slip through" "(c) the warning says what can go wrong"
assert_contains "$(grep 'volatile-lru' "$RELAY_LOG")" " warn" "(c) it is a warning"
assert_exactly_once "$T/expected"

# (d) metrics and /readyz
redis_cli CONFIG SET maxmemory-policy noeviction >/dev/null
relay_start --http-addr 127.0.0.1:0
wait_for "grep -q 'serving /metrics' '$RELAY_LOG'" 10 "the HTTP endpoint" || fail "no HTTP endpoint"
PORT=$(sed -n 's/.*serving \/metrics.*(port \([0-9]*\)).*/\1/p' "$RELAY_LOG" | head -n 1)
wait_for "[ -n \"\$(metric_value $PORT outbox_relay_redis_used_memory_bytes)\" ]" 15 "used_memory in /metrics" ||
	fail "(d) no outbox_relay_redis_used_memory_bytes in /metrics"
assert_eq 104857600 "$(metric_value "$PORT" outbox_relay_redis_maxmemory_bytes)" "(d) maxmemory in /metrics (100mb)"
used=$(metric_value "$PORT" outbox_relay_redis_used_memory_bytes)
real=$(redis_cli INFO memory | tr -d '\r' | sed -n 's/^used_memory://p')
assert_ge "$used" $((real / 2)) "(d) used_memory in /metrics is near INFO's ($real)"
assert_lt "$used" $((real * 2)) "(d) used_memory in /metrics is near INFO's ($real)"
wait_for "[ \"\$(http_get $PORT /readyz)\" = 200 ]" 10 "readyz 200" || fail "(d) readyz never 200"
assert_eq "ready" "$(cat "$T/http.body")" "(d) /readyz body with room to spare"
# maxmemory just above used_memory: more than 90% used.
redis_cli CONFIG SET maxmemory $((real * 105 / 100)) >/dev/null
wait_for "http_get $PORT /readyz >/dev/null; grep -q 'redis-memory-pressure' '$T/http.body'" 15 "memory pressure on /readyz" ||
	fail "(d) /readyz does not report memory pressure: $(cat "$T/http.body")"
assert_eq 200 "$(http_get "$PORT" /readyz)" "(d) /readyz stays 200 under memory pressure"
assert_eq "ready redis-memory-pressure" "$(cat "$T/http.body")" "(d) /readyz body under memory pressure"
redis_cli CONFIG SET maxmemory 0 >/dev/null
wait_for "http_get $PORT /readyz >/dev/null; [ \"\$(cat '$T/http.body')\" = ready ]" 15 "pressure gone" ||
	fail "(d) /readyz still reports memory pressure after maxmemory 0"
assert_eq 0 "$(metric_value "$PORT" outbox_relay_redis_maxmemory_bytes)" "(d) maxmemory 0 in /metrics"
relay_stop
pass
