#!/bin/bash
# 01_basic: the relay creates its slot; 500 events in transactions of 1, 3, 50
# and 200 rows from one session arrive exactly once, per stream in commit
# order, with every column as a field plus _lsn, _xid and _committed_at.
. "$(dirname "$0")/lib.sh"
setup_tmp
pg_start
load_schema
redis_start

# No slot yet: the relay creates it, has nothing to publish, and reaches the
# current LSN (confirming keepalives on an idle outbox).
relay_run_until "$(current_lsn)" || true
assert_eq 0 "$RELAY_RC" "first run (creates the slot) exit code"
assert_eq "${RELAY_PLUGIN:-wal2json}|f" "$(psql_q "SELECT plugin, temporary FROM pg_replication_slots WHERE slot_name = 'outbox_relay'")" \
	"slot outbox_relay created with ${RELAY_PLUGIN:-wal2json}, not temporary"
if [ "${RELAY_PLUGIN:-}" = pgoutput ] && pg_has_setting output_plugin_libraries; then
	# lib.sh left wal2json out of output_plugin_libraries: this server is one where it cannot run.
	assert_contains "$(psql_q "SELECT pg_create_logical_replication_slot('w2j_refused', 'wal2json')" 2>&1)" \
		"may not be used as an output plugin" "wal2json is not allowed on this server (pgoutput runs)"
fi

# 500 events, one session. Rows of size-1 transactions go through
# outbox_emit() with a header; the others are INSERT ... SELECT.
types=(order customer invoice)
sizes=(1 3 50 200 1 3 50 192)
n=0
{
	for s in "${sizes[@]}"; do
		echo "BEGIN;"
		if [ "$s" = 1 ]; then
			n=$((n + 1))
			echo "SELECT outbox_emit('${types[n % 3]}', 'agg-$n', 'created', '{\"n\": $n}', '{\"trace\": \"t-$n\"}');"
		else
			echo "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
			      SELECT (ARRAY['order','customer','invoice'])[i % 3 + 1], 'agg-' || i, 'updated',
			             jsonb_build_object('n', i, 's', 'x\"y')
			      FROM generate_series($((n + 1)), $((n + s))) i;"
			n=$((n + s))
		fi
		echo "COMMIT;"
	done
} | psql_q >/dev/null
assert_eq 500 "$(psql_q "SELECT count(*) FROM outbox")" "rows written"
assert_eq 8 "$(psql_q "SELECT count(DISTINCT xmin::text) FROM outbox")" "transactions written"

end=$(current_lsn)
relay_run_until "$end" || true
assert_eq 0 "$RELAY_RC" "relay --endpos $end exit code"
assert_lsn_ge "$(slot_confirmed_lsn outbox_relay)" "$end" "slot confirmed_flush_lsn reached --endpos"

psql_q "SELECT id FROM outbox" >"$T/expected"
assert_exactly_once "$T/expected"
assert_eq "outbox:customer outbox:invoice outbox:order" "$(rx streams 'outbox:*' | tr '\n' ' ' | sed 's/ $//')" \
	"one stream per aggregate_type (template outbox:{aggregate_type})"

for t in "${types[@]}"; do
	s=outbox:$t
	psql_q "SELECT id FROM outbox WHERE aggregate_type = '$t' ORDER BY (payload->>'n')::int" >"$T/order.$t"
	assert_stream_ids "$s" "$T/order.$t"
	assert_field_names "$s" id aggregate_type aggregate_id event_type payload headers created_at _lsn _xid _committed_at

	# Column values exactly as PostgreSQL prints them (jsonb: canonical text).
	psql_q "SELECT concat_ws(E'\t', id, aggregate_type, aggregate_id, event_type, payload::text,
	               headers::text, created_at::text, xmin::text)
	        FROM outbox WHERE aggregate_type = '$t' ORDER BY (payload->>'n')::int" >"$T/vals.exp.$t"
	rx fields "$s" id aggregate_type aggregate_id event_type payload headers created_at _xid >"$T/vals.got.$t"
	if ! cmp -s "$T/vals.exp.$t" "$T/vals.got.$t"; then
		fail "field values of $s differ from the table (expected < > got):
$(diff "$T/vals.exp.$t" "$T/vals.got.$t" | head_n 6)"
	fi
	ok "$s: id, aggregate_type, aggregate_id, event_type, payload, headers, created_at, _xid match the rows"

	# _lsn: "X/Y", non-decreasing along the stream, one per transaction.
	rx fields "$s" _xid _lsn _committed_at >"$T/meta.$t"
	bad=$(python3 -c '
import re, sys
prev, lsn_of = None, {}
for line in open(sys.argv[1]):
    xid, lsn, ts = line.rstrip("\n").split("\t")
    if not re.fullmatch(r"[0-9A-F]+/[0-9A-F]+", lsn):
        sys.exit(print("bad _lsn [%s]" % lsn))
    if not ts:
        sys.exit(print("empty _committed_at"))
    hi, lo = lsn.split("/")
    v = (int(hi, 16) << 32) | int(lo, 16)
    if prev is not None and v < prev[0]:
        sys.exit(print("_lsn goes backwards: %s after %s" % (lsn, prev[1])))
    if lsn_of.setdefault(xid, lsn) != lsn:
        sys.exit(print("xid %s has two _lsn values" % xid))
    prev = (v, lsn)
' "$T/meta.$t")
	[ -z "$bad" ] || fail "$s: $bad"
	ok "$s: _lsn well-formed and non-decreasing, one _lsn per _xid, _committed_at set"
	assert_eq "$(cut -f1 "$T/meta.$t" | sort -u | wc -l)" "$(cut -f2 "$T/meta.$t" | sort -u | wc -l)" \
		"$s: distinct _lsn values = distinct transactions"
	assert_eq 1 "$(redis_cli EXISTS "outbox-relay:wm:{$s}:outbox_relay")" "watermark key for $s exists"
done

# The headers of outbox_emit() rows and a jsonb string with a quote survive.
assert_eq '{"trace": "t-1"}' "$(rx fields outbox:customer headers | head_n 1)" "headers of the first outbox_emit() row"
assert_eq '{"n": 2, "s": "x\"y"}' "$(rx fields outbox:invoice payload | head_n 1)" "payload with an escaped quote"

# A second run from the confirmed position publishes nothing again.
relay_run_until "$(current_lsn)" || true
assert_eq 0 "$RELAY_RC" "second run exit code"
assert_eq 500 "$(sum_xlen)" "entries after a second run (no re-publication)"
pass
