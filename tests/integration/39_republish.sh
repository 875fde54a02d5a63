#!/bin/bash
# 39_republish: `outbox-relay republish` heals a gap from the outbox table.
# (a) the gap scenario of 37 end to end: 13 events streamed, the slot dropped,
#     5 committed, exit 8; republish --since <the time the line printed>
#     publishes the 5 (what it reads again from before is skipped as a
#     duplicate); --accept-gap; then every one of the 18 ids is in Redis
#     exactly once, and the live watermark was not touched by republish.
# (b) republished entries equal the streamed ones field by field (numeric,
#     jsonb, bool, bytea, arrays, timestamps, NULLs), plus _republished=true.
# (c) the same dead-letter rules: a NULL id is dead-lettered with the
#     stream path's reason.
# (d) interrupted (SIGINT) during 100,000 rows: exit 1 and a summary; run
#     again: everything exactly once.
# (e) usage errors: no --since, a bad --since, --dedup-window 0, a missing
#     --time-column.
# (f) rows older than --dedup-window (whose ids dedup may no longer hold) are
#     counted (past_window=) and named in a warning; younger ones are not.
. "$(dirname "$0")/lib.sh"
setup_tmp
pg_start
load_schema
redis_start
slot_create outbox_relay

republish() { # ARGS...: run republish; output in $RP_OUT, exit code in $RP_RC
	RP_RC=0
	RP_OUT=$(timeout -k 5 120 "$RELAY_BIN" republish --pg-dsn "$PG_DSN" --redis-url "$REDIS_URL" \
		--log-level info --http-addr "" "$@" 2>&1) || RP_RC=$?
	log "republish $* exit code $RP_RC: $(grep '^republish ' <<<"$RP_OUT" || true)"
}
summary() { grep "^republish " <<<"$RP_OUT" | grep -o " $1=[0-9]*" | cut -d= -f2; }
emit() {
	local i
	for i in $(seq 1 "$1"); do psql_q "SELECT outbox_emit('order', '$2-$i', 'created', '{}')" >/dev/null; done
}

# ---- (a) the gap, healed ----------------------------------------------------
emit 13 a
relay_drain
psql_q "SELECT pg_drop_replication_slot('outbox_relay')" >/dev/null
emit 5 gap
relay_run || true
assert_eq 8 "$RELAY_RC" "(a) the relay refuses the gap"
since=$(grep ' error: ' "$RELAY_LOG" | sed -n 's/.*(committed \([^)]*\)).*/\1/p')
accept=$(grep ' error: ' "$RELAY_LOG" | sed -n 's/.*--accept-gap \([0-9A-F]*\/[0-9A-F]*\).*/\1/p')
assert_match "$since" '^20[0-9-]+T[0-9:.]+Z$' "(a) the refusal gives the last published commit's time ($since)"
wm_before=$(redis_cli GET "outbox-relay:wm:{outbox:order}:outbox_relay")
republish --since "$since"
assert_eq 0 "$RP_RC" "(a) republish exit code"
assert_eq 5 "$(summary published)" "(a) republish published the 5 events of the gap"
assert_eq 0 "$(summary past_window)" "(a) no row older than the dedup window"
assert_not_contains "$RP_OUT" "older than --dedup-window" "(a) and no warning about it"
assert_eq 0 "$(summary dead_lettered)" "(a) nothing dead-lettered"
assert_eq "$wm_before" "$(redis_cli GET "outbox-relay:wm:{outbox:order}:outbox_relay")" "(a) the live watermark is untouched"
relay_drain --accept-gap "$accept"
emit 2 after
relay_drain
psql_q "SELECT id FROM outbox" >"$T/expected"
assert_exactly_once "$T/expected"
assert_eq 5 "$(rx fields outbox:order _republished | grep -c true)" "(a) the 5 republished entries say so"
# Run it again: all duplicates.
republish --since "$since"
assert_eq 0 "$(summary published)" "(a) a second run publishes nothing"
assert_ge "$(summary duplicates)" 7 "(a) a second run skips the rows as duplicates"

# ---- (b) the same fields as the stream path ----------------------------------
psql_q "CREATE TABLE typed (id text, aggregate_type text, n numeric(12,4), f float8, i int8, b bool,
        bin bytea, tags text[], payload jsonb, headers json, ts timestamptz, d date, nan float8,
        note text, created_at timestamptz DEFAULT now())"
slot_create s_typed
psql_q "INSERT INTO typed (id, aggregate_type, n, f, i, b, bin, tags, payload, headers, ts, d, nan, note) VALUES
        ('t-1', 'typed', 12.5, 0.1, 9007199254740993, true, '\\xdeadbeef', '{x,\"y z\"}', '{\"a\": 1, \"s\": \"q\\\"uote\"}',
         '{ \"k\" :  [1,2] }', '2026-11-21 23:51:54.886854+02', '2026-11-21', 'NaN', NULL),
        ('t-2', 'typed', -0.0001, 1e300, -1, false, '', '{}', '[]', 'null', 'infinity', '0001-01-01', 'Infinity', 'line1
line2 \"quoted\" tab	end')" >/dev/null
relay_drain --slot s_typed --table public.typed
rx entries outbox:typed >"$T/streamed.json"
redis_cli DEL outbox:typed >/dev/null
redis_cli --scan --pattern 'outbox-relay:dd:*typed*' | while read -r k; do redis_cli DEL "$k" >/dev/null; done
republish --table public.typed --since 2000-01-01
assert_eq 2 "$(summary published)" "(b) both typed rows republished"
rx entries outbox:typed >"$T/republished.json"
python3 - "$T/streamed.json" "$T/republished.json" <<'PY' || fail "(b) republished entries differ from the streamed ones"
import json, sys
a = [json.loads(l)["fields"] for l in open(sys.argv[1])]
b = [json.loads(l)["fields"] for l in open(sys.argv[2])]
assert len(a) == len(b) == 2, (len(a), len(b))
wal_only = {"_lsn", "_committed_at", "_xid"}
for x, y in zip(a, b):
    assert ["_republished", "true"] in y, y
    x = [f for f in x if f[0] not in wal_only]
    y = [f for f in y if f[0] not in wal_only and f[0] != "_republished"]
    if x != y:
        print("streamed:   ", x, "\nrepublished:", y, file=sys.stderr)
        sys.exit(1)
PY
ok "(b) republished entries equal the streamed ones but for _lsn/_xid/_committed_at and _republished"

# ---- (c) the same dead-letter rules --------------------------------------------
psql_q "INSERT INTO typed (id, aggregate_type) VALUES (NULL, 'typed')" >/dev/null
republish --table public.typed --since 2000-01-01
assert_eq 1 "$(summary dead_lettered)" "(c) the NULL id row is dead-lettered"
assert_eq 'event id column "id" is NULL' "$(rx fields outbox:dead-letter reason | tail -n 1)" "(c) with the stream path's reason"

# ---- (d) interrupted, then run again -------------------------------------------
psql_q "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload, created_at)
        SELECT 'bulk', g::text, 'created', jsonb_build_object('pad', repeat('x', 200)), '2030-01-01'::timestamptz + g * interval '1 ms'
        FROM generate_series(1, 100000) g" >/dev/null
"$RELAY_BIN" republish --pg-dsn "$PG_DSN" --redis-url "$REDIS_URL" --http-addr "" --since 2030-01-01 \
	--fetch-size 500 >"$T/rp.out" 2>"$T/rp.err" &
rp_pid=$!
wait_for "[ \"\$(redis_cli XLEN outbox:bulk)\" -ge 3000 ]" 30 || fail "(d) republish did not get going"
kill -INT "$rp_pid"
rc=0
wait "$rp_pid" || rc=$?
assert_eq 1 "$rc" "(d) interrupted republish: exit 1"
assert_contains "$(cat "$T/rp.out")" "republish interrupted (run it again" "(d) the summary says it was interrupted"
n1=$(redis_cli XLEN outbox:bulk)
assert_lt "$n1" 100000 "(d) it stopped part way ($n1 of 100000)"
republish --since 2030-01-01 --fetch-size 500
assert_eq 0 "$RP_RC" "(d) the second run completes"
assert_eq 100000 "$(redis_cli XLEN outbox:bulk)" "(d) all 100000 rows in the stream"
assert_eq "$n1" "$(summary duplicates)" "(d) what the first run published is skipped as duplicates"
rx fields outbox:bulk aggregate_id | sort -n | uniq -d >"$T/dups"
assert_eq 0 "$(wc -l <"$T/dups")" "(d) no id twice"

# ---- (f) rows older than the dedup window -------------------------------------
iso() { psql_q "SELECT to_char((now() - interval '$1') AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"')"; }
psql_q "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload, created_at)
        SELECT 'old', g::text, 'created', '{}', now() - interval '2 hours' - g * interval '1 s'
        FROM generate_series(1, 3) g" >/dev/null
relay_drain
assert_eq 3 "$(redis_cli XLEN outbox:old)" "(f) the 3 rows written with a time 2 hours back are streamed"
republish --since "$(iso '3 hours')" --until "$(iso '1 hour')" --dedup-window 1h
assert_eq 0 "$RP_RC" "(f) republish exit code"
assert_eq 3 "$(summary past_window)" "(f) the 3 rows are older than a 1h window"
assert_contains "$RP_OUT" "3 row(s) of public.outbox to republish have a created_at older than --dedup-window (3600s)" \
	"(f) a warning names the rows, the table, the column and the window"
assert_eq 3 "$(summary duplicates)" "(f) published minutes ago, dedup still holds them: dropped"
republish --since "$(iso '3 hours')" --until "$(iso '1 hour')" --dedup-window 4h
assert_eq 0 "$(summary past_window)" "(f) with a 4h window they are not older"
assert_not_contains "$RP_OUT" "older than --dedup-window" "(f) and nothing is said"
assert_eq 3 "$(redis_cli XLEN outbox:old)" "(f) nothing was published a second time"

# ---- (e) usage errors -----------------------------------------------------------
republish
assert_eq 2 "$RP_RC" "(e) no --since: exit 2"
assert_contains "$RP_OUT" "--since TIME is required" "(e) says --since is required"
republish --since yesterday-ish
assert_eq 2 "$RP_RC" "(e) a --since that is no time: exit 2"
assert_contains "$RP_OUT" 'invalid input syntax for type timestamp with time zone: "yesterday-ish"' "(e) names the value"
republish --since 2000-01-01 --dedup-window 0
assert_eq 2 "$RP_RC" "(e) --dedup-window 0: exit 2"
republish --since 2000-01-01 --time-column nope
assert_eq 6 "$RP_RC" "(e) a missing --time-column: exit 6"
assert_contains "$RP_OUT" 'column "nope" (named by --time-column) does not exist' "(e) names the column"
relay_run --since 2000-01-01 || true
assert_eq 2 "$RELAY_RC" "(e) the relay itself refuses --since"
pass
