#!/bin/bash
# 60_consumer: outbox-consume, the reference XREADGROUP consumer, reads what
# the relay published: every event printed exactly once as one JSON line
# (payload and headers embedded as JSON, fields in entry order), nothing
# pending afterwards; --count is exact across several streams; entries
# another consumer left pending are claimed (--claim-idle); a consumer's own
# pending entries are read first; --create-group; invalid JSON stays a
# string; SIGTERM ends a blocked read at once; a Redis restart is survived.
# --stream-pattern 'outbox:*' skips the dead-letter stream (outbox:dead-letter,
# --dead-letter-stream) and says so once; --include-dead-letter reads it.
. "$(dirname "$0")/lib.sh"
setup_tmp
need_consume_bin
pg_start
load_schema
redis_start
slot_create outbox_relay

# emit TYPE FROM TO: events with a payload that needs escaping and a header.
emit() {
	psql_q "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload, headers)
	        SELECT '$1', 'agg-' || i, 'created',
	               jsonb_build_object('n', i, 's', E'q\"b\\\\s\\tt \u00e9', 'big', 123456789012345678901234567890),
	               jsonb_build_object('trace', 't-' || i)
	        FROM generate_series($2, $3) i" >/dev/null
}

# consume NAME ARGS...: run outbox-consume (at most 60 s) with a clean
# environment; stdout in $T/NAME.out, stderr in $T/NAME.err, exit code in $RC.
consume() {
	local name=$1
	shift
	RC=0
	env -u OUTBOX_CONSUME_GROUP -u OUTBOX_CONSUME_STREAM -u OUTBOX_CONSUME_STREAM_PATTERN \
		timeout -k 5 60 "$CONSUME_BIN" --redis-url "$REDIS_URL" "$@" \
		>"$T/$name.out" 2>"$T/$name.err" </dev/null || RC=$?
	log "outbox-consume $name exit code $RC, $(wc -l <"$T/$name.out") lines"
}

# consume_bg NAME ARGS...: the same in the background; pid in $CPID.
consume_bg() {
	local name=$1
	shift
	"$CONSUME_BIN" --redis-url "$REDIS_URL" "$@" >"$T/$name.out" 2>"$T/$name.err" </dev/null &
	CPID=$!
	echo "$CPID" >>"$T/relay.pids" # the harness kills it on exit
	log "outbox-consume $name started in the background (pid $CPID)"
}

# ids_of FILE: the "id" field of every line, in order.
ids_of() { python3 -c 'import json,sys; [print(json.loads(l)["id"]) for l in open(sys.argv[1])]' "$1"; }

# pending_total: entries pending in group workers over all outbox:* streams.
pending_total() {
	local s n=0
	for s in $(rx streams 'outbox:*'); do
		# the dead-letter stream has the group only once --include-dead-letter read it
		if [ "$s" = outbox:dead-letter ] && ! redis_cli XINFO GROUPS "$s" | grep -qx workers; then
			continue
		fi
		n=$((n + $(redis_cli XPENDING "$s" workers | head_n 1)))
	done
	echo "$n"
}

# check_lines FILE: every line of FILE is one outbox event as the relay wrote
# it: keys in entry order, payload and headers are JSON objects equal to the
# row's, the stream is outbox:<aggregate_type>, every id at most once.
check_lines() {
	psql_q "SELECT json_build_object('id', id, 'payload', payload, 'headers', headers)::text FROM outbox" >"$T/rows.json"
	python3 - "$1" "$T/rows.json" <<'PY' || fail "bad output in $1: $(head_n 3 "$1")"
import json, re, sys
rows = {}
for l in open(sys.argv[2]):
    r = json.loads(l)
    rows[r["id"]] = r
want = ["stream", "entry_id", "id", "aggregate_type", "aggregate_id", "event_type", "payload",
        "headers", "created_at", "_lsn", "_xid", "_committed_at"]
seen = set()
for n, line in enumerate(open(sys.argv[1]), 1):
    e = json.loads(line)
    keys = list(e)  # dicts keep the order of the line (a repeated key would show as missing)
    assert keys == want, "line %d: keys %s" % (n, keys)
    assert re.fullmatch(r"\d+-\d+", e["entry_id"]), "line %d: entry_id %r" % (n, e["entry_id"])
    assert e["stream"] == "outbox:" + e["aggregate_type"], "line %d: stream %r" % (n, e["stream"])
    assert isinstance(e["payload"], dict), "line %d: payload not embedded: %r" % (n, e["payload"])
    assert isinstance(e["headers"], dict), "line %d: headers not embedded" % n
    row = rows[e["id"]]
    assert e["payload"] == row["payload"], "line %d: payload %r != %r" % (n, e["payload"], row["payload"])
    assert e["headers"] == row["headers"], "line %d: headers differ" % n
    assert '123456789012345678901234567890' in line, "line %d: big number not kept exactly" % n
    assert all(isinstance(v, str) for k, v in e.items() if k not in ("payload", "headers"))
    assert e["id"] not in seen, "line %d: id %s printed twice" % (n, e["id"])
    seen.add(e["id"])
PY
	ok "$1: $(wc -l <"$1") well-formed lines, payload and headers embedded, keys in entry order"
}

# ---------------------------------------------------------------------------
# Options and setup errors
# ---------------------------------------------------------------------------
consume help --help
assert_eq 0 "$RC" "--help exit code"
assert_contains "$(cat "$T/help.out")" OUTBOX_CONSUME_CLAIM_IDLE "--help lists the environment variables"
assert_contains "$(cat "$T/help.out")" OUTBOX_CONSUME_BLOCK_TIMEOUT "--help lists the renamed duration options"

consume nogroupflag --stream outbox:order
assert_eq 2 "$RC" "missing --group: exit code"
assert_eq 1 "$(grep -c . "$T/nogroupflag.err")" "missing --group: one stderr line"
assert_contains "$(cat "$T/nogroupflag.err")" "--group" "missing --group: named"

consume badblock --stream outbox:order --group workers --block soon
assert_eq 2 "$RC" "--block soon: exit code"

consume auth --redis-url "unix://:S3cretPw@$REDIS_SOCK" --stream outbox:order --group workers
assert_eq 5 "$RC" "rejected AUTH: exit code"
assert_contains "$(cat "$T/auth.err")" "AUTH" "rejected AUTH: message"
assert_not_contains "$(cat "$T/auth.err")" "S3cretPw" "rejected AUTH: no password in the message"

consume nogroup --stream outbox:order --group workers
assert_eq 5 "$RC" "missing group without --create-group: exit code"
assert_contains "$(tail -n 1 "$T/nogroup.err")" "pass --create-group" "missing group: the hint names --create-group"

# ---------------------------------------------------------------------------
# Everything the relay published, once, then nothing pending
# ---------------------------------------------------------------------------
emit order 1 40
emit customer 1 25
emit invoice 1 15
psql_q "SELECT pg_logical_emit_message(true, 'outbox', 'this is not json')" >/dev/null
relay_drain --group workers
assert_eq 1 "$(xlen outbox:dead-letter)" "the non-JSON message went to outbox:dead-letter"
consume all --stream-pattern 'outbox:*' --group workers --consumer c-all --count 80 --block 1000
assert_eq 0 "$RC" "--count 80: exit code"
assert_eq 80 "$(wc -l <"$T/all.out")" "--count 80: lines printed"
assert_not_contains "$(cat "$T/all.out")" '"stream":"outbox:dead-letter"' "--stream-pattern 'outbox:*' printed no dead letter"
assert_eq 1 "$(grep -c 'not reading the dead-letter stream "outbox:dead-letter"' "$T/all.err")" "the consumer says once that it skips the dead-letter stream"
check_lines "$T/all.out"
psql_q "SELECT id FROM outbox" | sort >"$T/exp.all"
ids_of "$T/all.out" | sort >"$T/got.all"
cmp -s "$T/exp.all" "$T/got.all" || fail "ids printed differ from the table: $(diff "$T/exp.all" "$T/got.all" | head_n 5)"
ok "every event id printed exactly once"
assert_eq 0 "$(pending_total)" "nothing pending after the consumer acknowledged"
for s in outbox:order outbox:customer outbox:invoice; do
	assert_eq 0 "$(redis_cli XINFO GROUPS "$s" | sed -n '/^lag$/{n;p}')" "$s: group lag 0"
done
# Per stream, lines come in stream order.
python3 - "$T/all.out" <<'PY' || fail "entries of a stream out of order"
import json, sys
last = {}
for l in open(sys.argv[1]):
    e = json.loads(l)
    ms, seq = map(int, e["entry_id"].split("-"))
    assert (ms, seq) > last.get(e["stream"], (-1, -1)), e
    last[e["stream"]] = (ms, seq)
PY
ok "entries of each stream printed in stream order"
# The dead letter only with --include-dead-letter.
consume dl --stream-pattern 'outbox:*' --group workers --consumer c-dl --create-group --include-dead-letter --count 1 --block 1000
assert_eq 0 "$RC" "--include-dead-letter: exit code"
assert_contains "$(cat "$T/dl.out")" '"stream":"outbox:dead-letter"' "--include-dead-letter printed the dead letter"
assert_eq 0 "$(pending_total)" "nothing pending after the dead letter was read"

# ---------------------------------------------------------------------------
# --count is exact over several streams: nothing extra left pending
# ---------------------------------------------------------------------------
emit order 41 50
emit customer 26 35
emit invoice 16 25
relay_drain --group workers
consume four --stream-pattern 'outbox:*' --group workers --consumer c-four --count 4 --block 500
assert_eq 0 "$RC" "--count 4: exit code"
assert_eq 4 "$(wc -l <"$T/four.out")" "--count 4: lines"
assert_eq 0 "$(pending_total)" "--count 4 over 3 streams left nothing pending"
consume rest --stream-pattern 'outbox:*' --group workers --consumer c-rest --count 26 --batch 7 --block 500
assert_eq 26 "$(wc -l <"$T/rest.out")" "--count 26 --batch 7: lines"
cat "$T/four.out" "$T/rest.out" >"$T/both.out"
check_lines "$T/both.out"
assert_eq 0 "$(pending_total)" "nothing pending after both"

# ---------------------------------------------------------------------------
# Claiming: c1 reads 8 entries and dies without acknowledging them
# ---------------------------------------------------------------------------
emit order 51 70
relay_drain --group workers
redis-cli -s "$REDIS_SOCK" -2 --json XREADGROUP GROUP workers c1 COUNT 8 STREAMS outbox:order '>' |
	python3 -c 'import json,sys; [print(dict(zip(kv[::2], kv[1::2]))["id"]) for _s, es in json.load(sys.stdin) for _eid, kv in es]' \
		>"$T/c1.ids"
assert_eq 8 "$(wc -l <"$T/c1.ids")" "c1 took 8 entries"
assert_eq 8 "$(pending_total)" "c1's 8 entries are pending"
sleep 0.3 # idle longer than --claim-idle 100
consume c2 --stream outbox:order --group workers --consumer c2 --claim-idle 100 --count 20 --block 500
assert_contains "$(cat "$T/c2.err")" "--claim-idle 100: a bare number here still means milliseconds" \
	"old --claim-idle: a bare number keeps its meaning, with a warning naming --claim-min-idle"
assert_eq 0 "$RC" "c2 exit code"
assert_eq 20 "$(wc -l <"$T/c2.out")" "c2 printed the 20 new events"
check_lines "$T/c2.out"
missing=$(comm -23 <(sort "$T/c1.ids") <(ids_of "$T/c2.out" | sort))
assert_eq "" "$missing" "c2 printed every entry c1 left pending"
assert_contains "$(cat "$T/c2.err")" "claimed 8 entries" "c2 says it claimed 8 entries"
assert_eq 0 "$(pending_total)" "nothing pending after c2"

# ---------------------------------------------------------------------------
# Own pending entries first: c3 is restarted under the same name
# ---------------------------------------------------------------------------
emit order 71 75
relay_drain --group workers
redis-cli -s "$REDIS_SOCK" -2 --json XREADGROUP GROUP workers c3 COUNT 5 STREAMS outbox:order '>' |
	python3 -c 'import json,sys; [print(dict(zip(kv[::2], kv[1::2]))["id"]) for _s, es in json.load(sys.stdin) for _eid, kv in es]' \
		>"$T/c3.pending"
emit order 76 80
relay_drain --group workers
consume c3 --stream outbox:order --group workers --consumer c3 --claim-min-idle 0 --count 10 --block-timeout 500ms
assert_eq 10 "$(wc -l <"$T/c3.out")" "c3 printed 10 events"
assert_eq "$(tr '\n' ' ' <"$T/c3.pending")" "$(ids_of "$T/c3.out" | head_n 5 | tr '\n' ' ')" \
	"c3 printed its own 5 pending entries first, in order"
assert_contains "$(cat "$T/c3.err")" "re-reading 5 pending entries" "c3 says it re-read its pending entries"
assert_eq 0 "$(pending_total)" "nothing pending after c3"

# ---------------------------------------------------------------------------
# --create-group on a stream written by hand; invalid JSON stays a string
# ---------------------------------------------------------------------------
redis_cli XADD manual:1 '*' id m1 payload 'not json' headers '{"a": [1, 2.50]}' note '{"x":1}' >/dev/null
consume manual --stream manual:1 --group g2 --create-group --count 1 --block 500
assert_eq 0 "$RC" "--create-group: exit code"
python3 - "$T/manual.out" <<'PY' || fail "manual entry rendered wrongly: $(cat "$T/manual.out")"
import json, sys
line = open(sys.argv[1]).read()
e = json.loads(line)
assert e["payload"] == "not json", e
assert e["headers"] == {"a": [1, 2.5]} and '"headers":{"a":[1,2.50]}' in line, line
assert e["note"] == '{"x":1}', e
assert list(e) == ["stream", "entry_id", "id", "payload", "headers", "note"], list(e)
PY
ok "invalid JSON payload kept as a string, headers embedded (2.50 kept), other fields strings"
assert_contains "$(redis_cli XINFO GROUPS manual:1)" g2 "group g2 created on manual:1"
assert_eq 0 "$(redis_cli XPENDING manual:1 g2 | head_n 1)" "manual:1: nothing pending"

# ---------------------------------------------------------------------------
# SIGTERM while blocked in XREADGROUP: exit 0 at once, not after --block
# ---------------------------------------------------------------------------
consume_bg term --stream-pattern 'outbox:*' --group workers --consumer c-term --block 20000
emit invoice 26 26
relay_drain --group workers
wait_for "[ \$(wc -l <'$T/term.out') -ge 1 ]" 20 || fail "background consumer printed nothing: $(cat "$T/term.err")"
sleep 0.5 # back in the blocking read
t0=$(date +%s%N)
kill -TERM "$CPID"
wait_for "! pid_alive $CPID" 10 || fail "consumer ignores SIGTERM"
rc=0
wait "$CPID" 2>/dev/null || rc=$?
ms=$((($(date +%s%N) - t0) / 1000000))
assert_eq 0 "$rc" "SIGTERM: exit code"
assert_lt "$ms" 3000 "SIGTERM ended the 20 s BLOCK wait promptly (ms)"
assert_eq 1 "$(wc -l <"$T/term.out")" "the background consumer printed the new event"
assert_eq 0 "$(pending_total)" "nothing pending after SIGTERM"

# ---------------------------------------------------------------------------
# Redis restarts under a running consumer: it reconnects and goes on
# ---------------------------------------------------------------------------
consume_bg reconnect --stream manual:2 --group g3 --create-group --consumer c-re --block 500 --claim-idle 0
wait_for "grep -q 'created consumer group' '$T/reconnect.err'" 20 || fail "consumer did not start: $(cat "$T/reconnect.err")"
redis_cli XADD manual:2 '*' id before payload '{}' >/dev/null
wait_for "grep -q before '$T/reconnect.out'" 20 || fail "no output before the restart"
redis_stop
sleep 1
redis_start
redis_cli XADD manual:2 '*' id after payload '{"n":1}' >/dev/null
wait_for "grep -q after '$T/reconnect.out'" 30 || fail "no output after the restart: $(tail -n 5 "$T/reconnect.err")"
ok "the consumer reconnected after a Redis restart and printed the new entry"
assert_match "$(cat "$T/reconnect.err")" "retrying in|reconnecting in" "the connection loss was reported with a retry"
kill -TERM "$CPID"
wait_for "! pid_alive $CPID" 10 || fail "consumer ignores SIGTERM"
pass
