#!/bin/bash
# 69_consume_metrics: outbox-consume --http-addr (issue 23, item 4) on the
# relay's real output: 20 events and one poison event (every handler run on
# it fails) in outbox:order; group "workers" handles them with a co-process
# and --max-deliveries 3; group "idle" reads nothing; group "stuck" holds one
# entry pending. Asserted from /metrics scrapes, polled without timing
# assumptions:
#  - handled 20; the poison event failed 3 times, was retried twice, then
#    poisoned once; the handler histogram counts every run (20 + 3);
#  - lag of "idle" is every entry (21) and it has nothing pending; "stuck"
#    has 1 pending entry, older than 0 s; "workers" ends at lag 0, 0 pending;
#  - /healthz is 200, then 503 once Redis is stopped (redis_connected 0);
#  - `outbox-relay status` shows the OLDEST-PENDING-AGE column, "-" for a
#    group with nothing pending and seconds for "stuck";
#  - a bad --http-addr is refused with one line naming it, exit 2.
. "$(dirname "$0")/lib.sh"
need_consume_bin
setup_tmp
pg_start
load_schema
redis_start
slot_create outbox_relay

psql_q "SELECT outbox_emit('order', 'o-' || g, 'created', jsonb_build_object('n', g)) FROM generate_series(1, 10) g" >/dev/null
psql_q "SELECT outbox_emit('order', 'o-bad', 'created', '{\"poison\": true}')" >/dev/null
psql_q "SELECT outbox_emit('order', 'o-' || g, 'created', jsonb_build_object('n', g)) FROM generate_series(11, 20) g" >/dev/null
relay_drain
assert_eq 21 "$(xlen outbox:order)" "21 events in outbox:order"
redis_cli XGROUP CREATE outbox:order idle 0 >/dev/null
redis_cli XGROUP CREATE outbox:order stuck 0 >/dev/null
redis_cli XREADGROUP GROUP stuck s1 COUNT 1 STREAMS outbox:order '>' >/dev/null
assert_eq 1 "$(redis_cli XPENDING outbox:order stuck | head -n 1)" "one entry pending for group stuck"

# A bad address: one line naming the option, exit 2.
out=$("$CONSUME_BIN" --redis-url "$REDIS_URL" --stream outbox:order --group g --http-addr nope 2>&1) && rc=0 || rc=$?
assert_eq 2 "$rc" "a bad --http-addr: exit code"
assert_contains "$out" "--http-addr" "a bad --http-addr: the line names the option"

cat >"$T/coproc.sh" <<'SH'
#!/bin/bash
while IFS= read -r line; do
	case "$line" in *poison*) echo "retry upstream said 503" ;; *) echo done ;; esac
done
SH
chmod +x "$T/coproc.sh"
env -u OUTBOX_CONSUME_GROUP -u OUTBOX_CONSUME_STREAM -u OUTBOX_CONSUME_STREAM_PATTERN \
	"$CONSUME_BIN" --redis-url "$REDIS_URL" --stream outbox:order --group workers --consumer w1 \
	--create-group --block-timeout 200ms --retry-max 200ms --handler "$T/coproc.sh" \
	--max-deliveries 3 --http-addr 127.0.0.1:0 >"$T/w.stdout" 2>"$T/w.log" &
WPID=$!
echo "$WPID" >>"$T/relay.pids"
wait_for "grep -q 'serving /metrics' '$T/w.log'" 60 || fail "no HTTP endpoint ($(tail -n 3 "$T/w.log"))"
PORT=$(sed -n 's/.*serving \/metrics.*(port \([0-9]*\)).*/\1/p' "$T/w.log" | head -n 1)
[ -n "$PORT" ] || fail "no port in the log"
ok "outbox-consume serves on port $PORT"

# metric SERIES: its value in a fresh scrape ("" when absent).
metric() {
	[ "$(http_get "$PORT" /metrics)" = 200 ] || return 0
	awk -v s="$1" 'index($0, s " ") == 1 { print $2 }' "$T/http.body"
}
L='{stream="outbox:order",group="workers"}'
wait_for "[ \"\$(metric 'outbox_consume_events_poisoned_total$L')\" = 1 ] &&
	[ \"\$(metric 'outbox_consume_events_handled_total$L')\" = 20 ]" 120 ||
	fail "the worker did not handle 20 events and poison one ($(tail -n 3 "$T/w.log"))"
assert_eq 20 "$(metric "outbox_consume_events_handled_total$L")" "handled = events"
assert_eq 3 "$(metric "outbox_consume_events_failed_total$L")" "the poison event failed 3 times"
assert_eq 2 "$(metric "outbox_consume_events_retried_total$L")" "and was retried twice"
assert_eq 1 "$(metric "outbox_consume_events_poisoned_total$L")" "then poisoned once"
assert_eq 23 "$(metric 'outbox_consume_handler_duration_seconds_count{group="workers"}')" \
	"histogram count = handled + failed runs"
assert_eq 23 "$(metric 'outbox_consume_handler_duration_seconds_bucket{group="workers",le="+Inf"}')" \
	"the +Inf bucket agrees"
assert_match "$(metric 'outbox_consume_handler_duration_seconds_sum{group="workers"}')" '^[0-9]+\.[0-9]{6}$' \
	"histogram sum in seconds"

# The lag table is refreshed every few seconds by the consumer's loop.
wait_for "[ \"\$(metric 'outbox_consume_lag_entries{stream=\"outbox:order\",group=\"workers\"}')\" = 0 ] &&
	[ \"\$(metric 'outbox_consume_pending_entries{stream=\"outbox:order\",group=\"workers\"}')\" = 0 ]" 120 ||
	fail "the workers group's lag and pending never reached 0"
ok "workers: lag 0, nothing pending"
assert_eq 21 "$(metric 'outbox_consume_lag_entries{stream="outbox:order",group="idle"}')" \
	"a group that reads nothing lags by every entry"
assert_eq 0 "$(metric 'outbox_consume_pending_entries{stream="outbox:order",group="idle"}')" \
	"and has nothing pending"
assert_eq 0.000 "$(metric 'outbox_consume_oldest_pending_age_seconds{stream="outbox:order",group="idle"}')" \
	"nothing pending: age 0"
assert_eq 1 "$(metric 'outbox_consume_pending_entries{stream="outbox:order",group="stuck"}')" \
	"group stuck: 1 pending"
assert_eq 20 "$(metric 'outbox_consume_lag_entries{stream="outbox:order",group="stuck"}')" \
	"group stuck: the other 20 not delivered"
wait_for "python3 -c 'import sys; sys.exit(not float(sys.argv[1]) > 0)' \
	\"\$(metric 'outbox_consume_oldest_pending_age_seconds{stream=\"outbox:order\",group=\"stuck\"}')\"" 120 ||
	fail "the oldest pending age of group stuck stays 0"
ok "group stuck: oldest pending age $(metric 'outbox_consume_oldest_pending_age_seconds{stream="outbox:order",group="stuck"}') s"
assert_eq 1 "$(metric 'outbox_consume_redis_connected{group="workers"}')" "redis_connected 1"
assert_eq 200 "$(http_get "$PORT" /healthz)" "/healthz while connected"
assert_eq 404 "$(http_get "$PORT" /nope)" "an unknown path"

# status: the OLDEST-PENDING-AGE column, per group.
RC=0
env -u OUTBOX_RELAY_GROUP -u OUTBOX_RELAY_STREAM_PATTERN timeout -k 5 30 "$RELAY_BIN" status \
	--pg-dsn "$PG_DSN" --redis-url "$REDIS_URL" >"$T/status.out" 2>&1 || RC=$?
assert_eq 0 "$RC" "status exit code"
assert_contains "$(grep 'LAST-DELIVERED-ID' "$T/status.out")" "OLDEST-PENDING-AGE" "status: the column"
assert_match "$(awk '$1 == "outbox:order" && $2 == "stuck" { print $7 }' "$T/status.out")" '^[0-9]+\.[0-9]s$' \
	"status: group stuck's oldest pending age"
assert_eq - "$(awk '$1 == "outbox:order" && $2 == "idle" { print $7 }' "$T/status.out")" \
	"status: nothing pending shows -"

# Redis gone: /healthz 503, /metrics still served.
redis_stop
wait_for "[ \"\$(http_get $PORT /healthz)\" = 503 ]" 120 || fail "/healthz stays 200 without Redis"
assert_contains "$(cat "$T/http.body")" "redis-down" "/healthz says why"
assert_eq 0 "$(metric 'outbox_consume_redis_connected{group="workers"}')" "redis_connected 0"
assert_eq 20 "$(metric "outbox_consume_events_handled_total$L")" "the counters outlive the connection"
kill -TERM "$WPID"
WRC=0
wait "$WPID" || WRC=$?
assert_eq 0 "$WRC" "exit code after SIGTERM"
pass
