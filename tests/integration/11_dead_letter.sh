#!/bin/bash
# 11_dead_letter: rows the relay cannot publish (NULL or empty id) go to
# outbox:dead-letter with a reason and the raw wal2json object; good rows
# around them are still published and the relay reaches --endpos.
. "$(dirname "$0")/lib.sh"
setup_tmp
pg_start
load_schema
psql_q "CREATE TABLE public.outbox_loose (id text, aggregate_type text, aggregate_id text, event_type text,
                                          payload jsonb, headers jsonb, created_at timestamptz DEFAULT now())"
redis_start
slot_create outbox_relay

psql_q "INSERT INTO outbox_loose (id, aggregate_type, aggregate_id, event_type, payload) VALUES (NULL, 'order', 'a1', 'created', '{\"x\": 1}')"
psql_q "INSERT INTO outbox_loose (id, aggregate_type, aggregate_id, event_type, payload) VALUES ('', 'order', 'a2', 'created', '{\"x\": 2}')"
psql_q "INSERT INTO outbox_loose (id, aggregate_type, aggregate_id, event_type, payload) VALUES ('good-1', 'order', 'a3', 'created', '{\"x\": 3}')"
# Rows of public.outbox are not this relay's business.
psql_q "SELECT outbox_emit('order', 'ignored', 'created', '{}')" >/dev/null

relay_drain --table public.outbox_loose
assert_eq 2 "$(xlen outbox:dead-letter)" "outbox:dead-letter holds 2 entries"
printf 'good-1\n' >"$T/expected"
assert_stream_ids outbox:order "$T/expected"
assert_eq "outbox:dead-letter outbox:order" "$(rx streams 'outbox:*' | tr '\n' ' ' | sed 's/ $//')" "streams"

rx entries outbox:dead-letter >"$T/dl"
python3 - "$T/dl" <<'PY' || fail "dead-letter entries malformed: $(cat "$T/dl")"
import json, sys
entries = [json.loads(l) for l in open(sys.argv[1])]
assert len(entries) == 2, len(entries)
want = [("a1", None), ("a2", "")]
for e, (agg, idval) in zip(entries, want):
    f = dict(e["fields"])
    assert f.get("reason", "").strip(), "empty or missing reason in %s" % e
    raw = json.loads(f["raw"])
    assert isinstance(raw, dict), "raw is not a JSON object: %r" % f["raw"]
    assert raw.get("action") == "I", raw
    assert raw.get("table") == "outbox_loose" and raw.get("schema") == "public", raw
    cols = {c["name"]: c.get("value") for c in raw["columns"]}
    assert cols["aggregate_id"] == agg, ("dead letters out of order or wrong row", cols)
    assert cols["id"] == idval, cols
    assert cols["payload"] is not None, cols
    print("dead letter %s: reason=%r" % (agg, f["reason"]))
PY
ok "dead letters carry a non-empty reason and the raw wal2json insert (NULL id, then empty id)"
pass
