#!/bin/bash
# 62_metrics_logs: /metrics, /healthz and /readyz scraped during a real run
# agree with what the test did (events written, updates ignored, dead
# letters, the confirmed LSN); a standby relay answers 503 on /readyz; JSON
# logs are one object per line with ts, level, msg and slot, and never a
# password.
. "$(dirname "$0")/lib.sh"
setup_tmp
pg_start
load_schema
redis_start
slot_create outbox_relay

# metric NAME [LABEL_SUBSTRING]: the sum of matching samples from the last scrape.
metric() {
	grep -E "^$1[{ ]" "$T/scrape" | { if [ -n "${2:-}" ]; then grep -F "$2"; else cat; fi; } |
		awk '{ s += $NF } END { printf "%.0f\n", s }'
}

relay_start --http-addr 127.0.0.1:0 --log-format json --group g1
wait_for "grep -q 'serving /metrics' '$RELAY_LOG'" 10 "the HTTP endpoint" || fail "no HTTP endpoint"
PORT=$(sed -n 's/.*serving \/metrics.*(port \([0-9]*\)).*/\1/p' "$RELAY_LOG" | head -n 1)
[ -n "$PORT" ] || fail "no port in the log"
wait_for "slot_active outbox_relay" 15 "streaming" || fail "relay not streaming"
wait_for "[ \"\$(http_get $PORT /readyz)\" = 200 ]" 10 "readyz 200" || fail "readyz never 200"
ok "/readyz 200 while streaming"
assert_eq 200 "$(http_get "$PORT" /healthz)" "/healthz"
assert_eq 404 "$(http_get "$PORT" /nope)" "unknown path"

# 120 events over two streams, 5 updates and 2 deletes (ignored), 2 dead letters.
psql_q "SELECT outbox_emit(CASE WHEN i % 3 = 0 THEN 'user' ELSE 'order' END, i::text, 'created',
                           jsonb_build_object('i', i)) FROM generate_series(1, 120) i" >/dev/null
psql_q "UPDATE public.outbox SET event_type = 'x' WHERE aggregate_id IN ('1','2','3','4','5')"
psql_q "DELETE FROM public.outbox WHERE aggregate_id IN ('6','7')"
psql_q "SELECT pg_logical_emit_message(true, 'outbox', '[1,2]')" >/dev/null
psql_q "SELECT pg_logical_emit_message(true, 'outbox', '{\"id\":\"m\",\"aggregate_type\":null}')" >/dev/null
end=$(current_lsn)
wait_confirmed outbox_relay "$end" 30 || fail "slot never confirmed $end"

assert_eq 200 "$(http_get "$PORT" /metrics)" "/metrics status"
cp "$T/http.body" "$T/scrape"
assert_eq 120 "$(metric outbox_relay_events_published_total)" "published_total equals the events written"
assert_eq 80 "$(metric outbox_relay_events_published_total 'stream="outbox:order"')" "published to outbox:order"
assert_eq 40 "$(metric outbox_relay_events_published_total 'stream="outbox:user"')" "published to outbox:user"
assert_eq 5 "$(metric outbox_relay_ignored_changes_total 'kind="update"')" "ignored updates"
assert_eq 2 "$(metric outbox_relay_ignored_changes_total 'kind="delete"')" "ignored deletes"
assert_eq 1 "$(metric outbox_relay_dead_lettered_total 'reason="not_json_object"')" "dead letter: not an object"
assert_eq 1 "$(metric outbox_relay_dead_lettered_total 'reason="routing"')" "dead letter: routing NULL"
assert_eq 0 "$(metric outbox_relay_inflight_events)" "nothing in flight"
assert_eq 1 "$(metric outbox_relay_state 'state="streaming"')" "state streaming"
assert_eq 120 "$(metric outbox_relay_commit_to_publish_seconds_count)" "one latency sample per event"
confirmed=$(metric outbox_relay_confirmed_lsn)
assert_ge "$confirmed" "$(lsn_to_int "$end")" "confirmed_lsn metric >= the LSN the slot confirmed"
assert_contains "$(cat "$T/scrape")" 'slot="outbox_relay"' "every series carries the slot label"
assert_contains "$(grep '^outbox_relay_info' "$T/scrape")" "plugin=\"${RELAY_PLUGIN:-wal2json}\"} 1" "outbox_relay_info names the slot's plugin"

# A second relay on the same slot is a standby: alive, /readyz 503.
main_log=$RELAY_LOG
main_pid=$RELAY_PID
relay_start --http-addr 127.0.0.1:0
wait_for "grep -q 'standby' '$RELAY_LOG'" 15 "standby" || fail "second relay not standby"
PORT2=$(sed -n 's/.*serving \/metrics.*(port \([0-9]*\)).*/\1/p' "$RELAY_LOG" | head -n 1)
assert_eq 503 "$(http_get "$PORT2" /readyz)" "standby /readyz"
assert_contains "$(cat "$T/http.body")" "standby" "standby /readyz says why"
relay_stop
RELAY_PID=$main_pid
RELAY_LOG=$main_log
relay_stop

# JSON logs: every line one object with ts, level, msg, slot.
python3 - "$main_log" <<'PY' || fail "JSON log lines malformed"
import json, sys
n = 0
for line in open(sys.argv[1]):
    o = json.loads(line)
    for k in ("ts", "level", "msg", "slot"):
        assert k in o, (k, line)
    n += 1
assert n >= 3, n
PY
ok "JSON log lines carry ts, level, msg and slot"
assert_contains "$(cat "$main_log")" '"lsn":"' "dead-letter warnings carry the lsn field"
pass
