#!/bin/bash
# 10_consumer_group: with --group workers the relay creates the group on every
# stream it writes, from id 0, so entries written before the group existed are
# delivered too; a consumer reading with XREADGROUP and XACKing gets every
# event once and leaves nothing pending. Re-running with an existing group works.
. "$(dirname "$0")/lib.sh"
setup_tmp
pg_start
load_schema
redis_start
slot_create outbox_relay

emit() { # emit TYPE FROM TO
	psql_q "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
	        SELECT '$1', i::text, 'created', jsonb_build_object('n', i) FROM generate_series($2, $3) i" >/dev/null
}

# Phase 1, no group: 10 order events.
emit order 1 10
relay_drain
assert_eq 10 "$(xlen outbox:order)" "phase 1 published without a group"
assert_eq "" "$(redis_cli XINFO GROUPS outbox:order)" "no group yet"

# Phase 2, --group workers: 20 more order events and 15 on a new stream.
emit order 11 30
emit invoice 1 15
relay_drain --group workers
for s in outbox:order outbox:invoice; do
	assert_contains "$(redis_cli XINFO GROUPS "$s")" workers "group workers exists on $s"
done

# read_group STREAM CONSUMER: XREADGROUP COUNT 1000 until empty, XACK all;
# prints the id field of everything read.
read_group() {
	local s=$1 c=$2 batch
	while :; do
		batch=$(redis-cli -s "$REDIS_SOCK" -2 --json XREADGROUP GROUP workers "$c" COUNT 1000 STREAMS "$s" '>' |
			python3 -c '
import json, sys
r = json.load(sys.stdin)
for _stream, entries in (r or []):
    for eid, kv in entries:
        print(eid, dict(zip(kv[::2], kv[1::2])).get("id", "<MISSING>"))
') || fail "XREADGROUP on $s failed"
		[ -n "$batch" ] || break
		printf '%s\n' "$batch" | cut -d' ' -f2
		# shellcheck disable=SC2046
		redis_cli XACK "$s" workers $(printf '%s\n' "$batch" | cut -d' ' -f1) >/dev/null
	done
}

for t in order invoice; do
	s=outbox:$t
	read_group "$s" c1 >"$T/read.$t"
	psql_q "SELECT id FROM outbox WHERE aggregate_type = '$t' ORDER BY (payload->>'n')::int" >"$T/exp.$t"
	cmp -s "$T/exp.$t" "$T/read.$t" || fail "$s: group read differs from the table ($(wc -l <"$T/read.$t") read, $(wc -l <"$T/exp.$t") expected): $(diff "$T/exp.$t" "$T/read.$t" | head_n 4)"
	ok "$s: XREADGROUP delivered all $(wc -l <"$T/exp.$t") events once, in order (including those written before the group)"
	assert_eq 0 "$(redis_cli XPENDING "$s" workers | head_n 1)" "$s: nothing pending after XACK"
done

# Phase 3: the group already exists; one more event arrives through it.
emit order 31 31
relay_drain --group workers
read_group outbox:order c2 >"$T/read3"
assert_eq "$(psql_q "SELECT id FROM outbox WHERE aggregate_id = '31'")" "$(cat "$T/read3")" "rerun with an existing group: the new event is delivered to the group"
assert_eq 0 "$(redis_cli XPENDING outbox:order workers | head_n 1)" "nothing pending at the end"
pass
