#!/bin/bash
# 32_dead_letter_limits: events the Redis side cannot take as they are are
# dead-lettered at mapping time, with a bounded entry, and the stream goes on
# (issue 14, findings 5, 8 and 9). Redis runs with --proto-max-bulk-len 1mb
# (the smallest Redis 7 accepts), so an oversized dead letter is rejected just
# as a 600 MB one would be with the default 512 MB.
#
# Each case gets its own slot, created right before its writes, and its own
# relay, so a case that stalls does not hide the others:
#
#   wide_message   a logical message with 5,000 keys (5,006 fields with the
#                  metadata; Lua's unpack() in the Redis function fails beyond
#                  about 4,000): dead-lettered "event has 5006 fields ... more
#                  than the 2000"; its raw (over 64 KiB) is cut; the events
#                  before and after it on the same stream arrive exactly once,
#                  in order; one with exactly 2,000 fields is published; the
#                  slot confirms past it. Run with the default dedup window
#                  and with --dedup-window 0.
#   big_null_id    a 3 MiB row with a NULL id: its dead letter carries 64 KiB of
#                  raw at most, raw_truncated "true" and raw_bytes (the original
#                  size); Redis keeps the connection (no reconnect); everything
#                  flows; the slot confirms past it.
#   control_bytes  routing values with a newline, a tab, \u0001, DEL (0x7f)
#                  (outbox rows) and \u0000 (a logical message's JSON: text
#                  columns cannot hold NUL): each is dead-lettered, reason
#                  'routing column "aggregate_type" holds control byte 0x..';
#                  no stream name with a control byte exists; /metrics stays
#                  whole (every family of a scrape taken before is still there,
#                  every sample line parses, no NUL) and counts them.
RELAY_TIMEOUT=${RELAY_TIMEOUT:-60}
. "$(dirname "$0")/lib.sh"
setup_tmp
pg_start
load_schema
redis_start --proto-max-bulk-len 1mb
[ "$(redis_cli CONFIG GET proto-max-bulk-len | tail -n 1)" = 1048576 ] || fail "redis did not take --proto-max-bulk-len 1mb"
# A text payload and a nullable text id: rows the real outbox table refuses.
psql_q "CREATE TABLE public.outbox_loose (id text, aggregate_type text, aggregate_id text, event_type text,
                                          payload text, headers jsonb)"

# good STREAM TAG: one good row in its own transaction; appends its id to $T/good.STREAM.
good() {
	psql_q "INSERT INTO public.outbox_loose (id, aggregate_type, aggregate_id, event_type, payload)
	        VALUES (gen_random_uuid()::text, '$1', '$2', 'created', '{\"n\": 1}') RETURNING id" >>"$T/good.$1"
}

# good_msg STREAM TAG: one good transactional logical message; appends its id.
good_msg() {
	local id
	id=$(psql_q "SELECT gen_random_uuid()")
	psql_q "SELECT pg_logical_emit_message(true, 'outbox',
	        '{\"id\": \"$id\", \"aggregate_type\": \"$1\", \"aggregate_id\": \"$2\", \"payload\": {\"n\": 1}}')" >/dev/null
	echo "$id" >>"$T/good.$1"
}

# case_relay SLOT [ARGS...]: start the case's relay (outbox_loose, its slot).
case_relay() {
	local slot=$1
	shift
	relay_start --slot "$slot" --table public.outbox_loose "$@"
	echo "$RELAY_PID" >"$T/case.pid"
}

# confirmed_past SLOT LSN WHAT: the slot confirms LSN within 30 s, else fail
# saying how far it got and how often the relay lost Redis meanwhile.
confirmed_past() {
	if ! wait_confirmed "$1" "$2" 30; then
		fail "$3: confirmed_flush_lsn of $1 stuck at $(slot_confirmed_lsn "$1"), never reached $2 within 30 s;" \
			"the relay logged $(grep -c 'Redis: \| warn: ' "$RELAY_LOG" || true) Redis/warning lines, e.g.:" \
			"$(grep -m 2 'Redis: \| warn: \| error: ' "$RELAY_LOG" | cut -c1-300 | tr '\n' ' ')"
	fi
	ok "$3: $1 confirmed past $2"
}

# dead_letter VALUE: the fields (JSON object) of the one dead letter whose raw
# contains VALUE; fails unless there is exactly one.
dead_letter() {
	rx entries outbox:dead-letter | python3 -c '
import json, sys
hits = [dict(json.loads(l)["fields"]) for l in sys.stdin if sys.argv[1] in dict(json.loads(l)["fields"]).get("raw", "")]
if len(hits) != 1:
    sys.exit("%d dead letters whose raw contains %r" % (len(hits), sys.argv[1]))
print(json.dumps(hits[0]))
' "$1"
}

# jfield JSON NAME: a field of a dead_letter object ("" when absent).
jfield() { python3 -c 'import json, sys; print(json.loads(sys.argv[1]).get(sys.argv[2], ""))' "$1" "$2"; }

# ---------------------------------------------------------------------------
# case_wide_message STREAM [RELAY ARGS...]: the stream is also the slot's name.
case_wide_message() {
	local s=$1 end dl reason raw_len
	shift
	slot_create "$s"
	good "$s" before-1
	good_msg "$s" before-2
	# 5,000 keys after id, aggregate_type and aggregate_id (JSON text, so the
	# distinguishing aggregate_id comes first in the raw wal2json object).
	psql_q "SELECT pg_logical_emit_message(true, 'outbox',
	        '{\"id\": \"' || gen_random_uuid() || '\", \"aggregate_type\": \"$s\", \"aggregate_id\": \"p-$s-5000\"'
	        || (SELECT string_agg(format(', \"k%s\": %s', i, i), '') FROM generate_series(1, 5000) i) || '}')" >/dev/null
	good_msg "$s" after-1
	# Exactly at the limit: 1,997 keys + _lsn, _xid, _committed_at = 2,000 fields, published.
	psql_q "SELECT gen_random_uuid()" >"$T/at_limit"
	psql_q "SELECT pg_logical_emit_message(true, 'outbox',
	        '{\"id\": \"$(cat "$T/at_limit")\", \"aggregate_type\": \"$s\", \"aggregate_id\": \"at-limit\"'
	        || (SELECT string_agg(format(', \"k%s\": %s', i, i), '') FROM generate_series(1, 1994) i) || '}')" >/dev/null
	cat "$T/at_limit" >>"$T/good.$s"
	good "$s" after-2
	end=$(current_lsn)
	case_relay "$s" "$@"
	confirmed_past "$s" "$end" "5,000-key message"
	assert_stream_ids "outbox:$s" "$T/good.$s"
	assert_eq 2000 "$(rx entries "outbox:$s" | python3 -c 'import json, sys; print(max(len(json.loads(l)["fields"]) for l in sys.stdin))')" \
		"the event with 2,000 fields is published whole"
	dl=$(dead_letter "p-$s-5000") || fail "the 5,000-key message is not dead-lettered once: $dl"
	reason=$(jfield "$dl" reason)
	assert_eq "event has 5006 fields (with _lsn, _xid, _committed_at), more than the 2000 a stream entry may have" \
		"$reason" "the dead letter says why"
	raw_len=$(python3 -c 'import json, sys; print(len(json.loads(sys.argv[1])["raw"].encode("utf-8", "surrogateescape")))' "$dl")
	assert_ge 65536 "$raw_len" "its raw is cut to 64 KiB at most"
	assert_eq true "$(jfield "$dl" raw_truncated)" "raw_truncated says so"
	assert_ge "$(jfield "$dl" raw_bytes)" 65537 "raw_bytes holds the original size"
	relay_stop
	assert_eq 0 "$RELAY_RC" "the relay exits 0 on SIGTERM"
	assert_contains "$(grep 'stopped (' "$RELAY_LOG" | tail -n 1)" "dead_lettered=1 " "the final line counts the dead letter"
}
# With the dedup window (default) and without it: today's code loses the
# message as a "duplicate" in the first case (the Lua error aborts the function
# after its SET NX of the dedup key; the retry finds the key) and retries
# forever in the second.
run_case wide_message case_wide_message wide
run_case wide_message_no_dedup case_wide_message wide_nodedup --dedup-window 0

# ---------------------------------------------------------------------------
case_big_null_id() {
	local end dl raw raw_len size
	redis_cli CONFIG RESETSTAT >/dev/null
	slot_create s_big
	good big before
	psql_q "INSERT INTO public.outbox_loose (id, aggregate_type, aggregate_id, event_type, payload)
	        VALUES (NULL, 'big', 'p-big-null-id', 'created', '{\"blob\": \"' || repeat('z', 3 * 1024 * 1024) || '\"}')"
	good big after
	end=$(current_lsn)
	case_relay s_big
	confirmed_past s_big "$end" "3 MiB row with a NULL id"
	assert_stream_ids outbox:big "$T/good.big"
	dl=$(dead_letter p-big-null-id) || fail "the 3 MiB row is not dead-lettered once: $dl"
	assert_eq 'event id column "id" is NULL' "$(jfield "$dl" reason)" "the dead letter says why"
	raw=$(jfield "$dl" raw)
	raw_len=${#raw}
	assert_ge 65536 "$raw_len" "its raw is cut to 64 KiB at most"
	assert_ge "$raw_len" 65533 "and not much shorter (a UTF-8 character may be dropped)"
	assert_match "$raw" '^\{"action":"I"' "the raw is the start of the wal2json insert"
	assert_eq true "$(jfield "$dl" raw_truncated)" "raw_truncated says so"
	size=$(jfield "$dl" raw_bytes)
	assert_ge "$size" $((3 * 1024 * 1024)) "raw_bytes holds the original size"
	assert_eq 0 "$(grep -c 'Redis: ' "$RELAY_LOG" || true)" "Redis never dropped the connection"
	assert_eq 0 "$(redis_cli INFO stats | tr -d '\r' | sed -n 's/^total_error_replies://p')" "Redis sent no error reply"
	relay_stop
	assert_eq 0 "$RELAY_RC" "the relay exits 0 on SIGTERM"
}
run_case big_null_id case_big_null_id

# ---------------------------------------------------------------------------

# check_scrape BASELINE SCRAPE: SCRAPE is whole Prometheus text: no NUL, UTF-8,
# every line a comment or a sample that parses, every family of BASELINE
# present. Prints "family count" problems; empty when fine.
check_scrape() {
	python3 - "$1" "$2" <<-'PY'
		import re, sys
		base, body = open(sys.argv[1], "rb").read(), open(sys.argv[2], "rb").read()
		bad = []
		if b"\0" in body:
		    bad.append("NUL byte at %d" % body.index(b"\0"))
		text = body.decode("utf-8", "replace")
		lv = r'"(?:[^"\\\n]|\\[\\"n])*"'
		sample = re.compile(r'^[a-zA-Z_:][a-zA-Z0-9_:]*(\{[a-zA-Z_][a-zA-Z0-9_]*=' + lv + r'(,[a-zA-Z_][a-zA-Z0-9_]*=' + lv + r')*\})? [-+0-9.eEInfa]+$')
		if not text.endswith("\n"):
		    bad.append("does not end with a newline")
		for line in text.split("\n")[:-1]:
		    if line.startswith("#"):
		        continue
		    if not sample.match(line):
		        bad.append("bad line %r" % line[:200])
		fam = lambda t: set(re.findall(r"^# TYPE (\S+)", t, re.M))
		missing = fam(base.decode()) - fam(text)
		if missing:
		    bad.append("families missing: %s" % " ".join(sorted(missing)))
		print("; ".join(bad[:5]))
	PY
}

case_control_bytes() {
	local end port problems streams v expr tag byte dl
	slot_create s_ctl
	case_relay s_ctl --http-addr 127.0.0.1:0
	wait_for "grep -q 'serving /metrics' '$RELAY_LOG'" 10 || fail "no HTTP endpoint"
	port=$(sed -n 's/.*serving \/metrics.*(port \([0-9]*\)).*/\1/p' "$RELAY_LOG" | head_n 1)
	wait_for "slot_active s_ctl" 15 || fail "relay not streaming"
	good ctl first
	wait_confirmed s_ctl "$(current_lsn)" 20 || fail "the first event was not confirmed"
	assert_eq 200 "$(http_get "$port" /metrics)" "/metrics before"
	cp "$T/http.body" "$T/scrape.before"
	assert_eq "" "$(check_scrape "$T/scrape.before" "$T/scrape.before")" "the scrape before the control bytes parses"

	: >"$T/ctl_cases" # distinguishing value<TAB>byte
	for v in "E'a\\nb'	p-ctl-nl	0x0a" "E'a\\tb'	p-ctl-tab	0x09" "'a' || chr(1) || 'b'	p-ctl-01	0x01" \
		"'a' || chr(127) || 'b'	p-ctl-7f	0x7f"; do
		IFS=$'\t' read -r expr tag byte <<<"$v"
		psql_q "INSERT INTO public.outbox_loose (id, aggregate_type, aggregate_id, event_type, payload)
		        VALUES (gen_random_uuid()::text, $expr, '$tag', 'created', '{}')"
		printf '%s\t%s\n' "$tag" "$byte" >>"$T/ctl_cases"
		good ctl "after-$tag"
	done
	# NUL: only JSON text can carry it; the message's "\u0000" is decoded to a NUL byte.
	psql_q "SELECT pg_logical_emit_message(true, 'outbox',
	        '{\"id\": \"' || gen_random_uuid() || '\", \"aggregate_type\": \"a\\u0000b\", \"aggregate_id\": \"p-ctl-nul\"}')" >/dev/null
	printf '%s\t%s\n' p-ctl-nul 0x00 >>"$T/ctl_cases"
	good_msg ctl after-nul
	good ctl last
	end=$(current_lsn)
	confirmed_past s_ctl "$end" "control bytes in routing values"
	assert_stream_ids outbox:ctl "$T/good.ctl"
	assert_eq 200 "$(http_get "$port" /metrics)" "/metrics after"
	cp "$T/http.body" "$T/scrape.after"
	problems=$(check_scrape "$T/scrape.before" "$T/scrape.after")
	assert_eq "" "$problems" "/metrics is whole and parses after the control bytes"
	while IFS=$'\t' read -r tag byte; do
		dl=$(dead_letter "$tag") || fail "$tag is not dead-lettered once: $dl"
		assert_contains "$(jfield "$dl" reason)" "routing column \"aggregate_type\" holds control byte $byte" "$tag: the reason names the column and the byte"
	done <"$T/ctl_cases"
	streams=$(rx cmd KEYS '*' | python3 -c 'import json, sys; print("\n".join(k for k in json.load(sys.stdin) if any(ord(c) < 32 or ord(c) == 127 for c in k)))')
	assert_eq "" "$streams" "no Redis key with a control byte"

	assert_contains "$(cat "$T/scrape.after")" 'outbox_relay_dead_lettered_total{slot="s_ctl",reason="routing"} 5' "/metrics counts the 5 routing dead letters"
	relay_stop
	assert_eq 0 "$RELAY_RC" "the relay exits 0 on SIGTERM"
}
run_case control_bytes case_control_bytes

# ---------------------------------------------------------------------------

log "cases passed: ${#CASES_OK[@]}: ${CASES_OK[*]}"
if [ "${#CASES_FAILED[@]}" -gt 0 ]; then
	fail "${#CASES_FAILED[@]} case(s) failed: ${CASES_FAILED[*]}"
fi
pass
