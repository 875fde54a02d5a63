#!/bin/bash
# 09_big_tx: one transaction of 200000 rows is delivered completely, in order,
# with one _lsn, and the relay's peak RSS stays below 64 MB (it must stream a
# large transaction, not buffer it).
RELAY_LOG_LEVEL=${RELAY_LOG_LEVEL:-info}
RELAY_TIMEOUT=${RELAY_TIMEOUT:-240}
. "$(dirname "$0")/lib.sh"
setup_tmp
pg_start
load_schema
redis_start
slot_create outbox_relay

N=200000
psql_q "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
        SELECT 'bulk', i::text, 'created', jsonb_build_object('n', i) FROM generate_series(1, $N) i"
assert_eq 1 "$(psql_q "SELECT count(DISTINCT xmin::text) FROM outbox")" "one transaction"

t0=$(date +%s)
relay_drain
log "relay drained $N events in $(($(date +%s) - t0)) s"
assert_eq "$N" "$(xlen outbox:bulk)" "outbox:bulk holds $N entries"
# One pass over the stream: id, aggregate_id (= insertion order), _lsn.
rx fields outbox:bulk id aggregate_id _lsn >"$T/got"
psql_q "SELECT id FROM outbox ORDER BY aggregate_id::int" >"$T/expected"
cut -f1 "$T/got" >"$T/got.ids"
cmp -s "$T/expected" "$T/got.ids" ||
	fail "ids differ from the table in insertion order ($(sort -u "$T/got.ids" | wc -l) distinct of $(wc -l <"$T/got.ids")): $(diff "$T/expected" "$T/got.ids" | head_n 4)"
ok "all $N ids once each, in insertion order"
seq 1 "$N" >"$T/agg.exp"
cut -f2 "$T/got" | cmp -s "$T/agg.exp" - || fail "aggregate_ids not 1..$N in order"
ok "aggregate_id 1..$N in order"
assert_eq 1 "$(cut -f3 "$T/got" | sort -u | wc -l)" "one _lsn for the whole transaction"

rss=$(relay_peak_rss_kb)
[ -n "$rss" ] || fail "no peak_rss_kb=<N> line in the relay's log"
log "relay peak_rss_kb=$rss"
if relay_sanitized; then
	log "ASan build: peak RSS not asserted (shadow memory and quarantine)"
else
	assert_lt "$rss" 65536 "peak RSS below 64 MB (kB)"
fi
pass
