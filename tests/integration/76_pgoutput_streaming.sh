#!/bin/bash
# 76_pgoutput_streaming: pgoutput on PostgreSQL 14+ asks for streaming
# (protocol 2): the server sends a transaction larger than
# logical_decoding_work_mem (64kB here) while it decodes it, in blocks that
# interleave with other transactions' blocks, and ends it with a Stream Commit
# or a Stream Abort (of the whole transaction, or of one subtransaction). The
# relay holds each streamed transaction until its Stream Commit and publishes
# exactly what committed. The same WAL goes through a wal2json slot and a
# pgoutput slot, and the two give identical stream entries, field by field:
#  (a) one large transaction with a logical message of the relay's prefix in it
#  (b) a large transaction with a savepoint rolled back after its rows were
#      streamed, a nested one rolled back with its parent, one released
#  (c) a large transaction rolled back whole (nothing of it is published)
#  (d) two large transactions written at once, the later-started one committing
#      first (their blocks interleave; each is published at its own commit)
#  (e) small transactions between them, which the server does not stream
# The server's own statistics (pg_stat_replication_slots.stream_txns) show it
# streamed; --no-pgoutput-streaming on a third slot gives the same entries.
. "$(dirname "$0")/lib.sh"
setup_tmp
pg_start logical_decoding_work_mem=64kB
load_schema
redis_start
[ "$(pg_version_num)" -ge 140000 ] || skip "pgoutput streams only on PostgreSQL 14+"

W2J=(--slot s_w2j --stream 'w2j:{aggregate_type}')
PGO=(--slot s_pgo --plugin pgoutput --stream 'pgo:{aggregate_type}')
OFF=(--slot s_off --plugin pgoutput --stream 'off:{aggregate_type}' --no-pgoutput-streaming)
slot_create s_w2j wal2json
slot_create s_pgo pgoutput
slot_create s_off pgoutput
# psql_in: a session of its own reading SQL from stdin.
psql_in() { psql -X -q -v ON_ERROR_STOP=1 -h "$T" -p "$PGPORT" -U postgres -d postgres >/dev/null; }
# rows TYPE PREFIX FROM TO: an INSERT of outbox rows TYPE, aggregate ids PREFIX-FROM..PREFIX-TO,
# ~200-byte payloads.
rows() {
	echo "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
	      SELECT '$1', '$2-' || g, 'created', jsonb_build_object('g', g, 'pad', repeat('p', 200))
	      FROM generate_series($3, $4) g;"
}

{
	echo "BEGIN;"
	rows big a 1 1500
	echo "SELECT pg_logical_emit_message(true, 'outbox', '{\"id\": \"a-msg\", \"aggregate_type\": \"big\", \"payload\": {\"m\": 1}}');"
	rows big a 1501 3000
	echo "COMMIT;"
	rows small e1 1 3
	echo "BEGIN;"
	rows sp b 1 1000
	echo "SAVEPOINT s1;"
	rows sp b-rolled 1 1000
	echo "ROLLBACK TO SAVEPOINT s1;"
	echo "SAVEPOINT s2;"
	rows sp b-kept 1 500
	echo "RELEASE SAVEPOINT s2;"
	echo "SAVEPOINT s3;"
	rows sp b-outer 1 600
	echo "SAVEPOINT s4;"
	rows sp b-inner 1 600
	echo "ROLLBACK TO SAVEPOINT s3;"
	rows sp b 1001 1500
	echo "COMMIT;"
	echo "BEGIN;"
	rows big c-rolled 1 3000
	echo "ROLLBACK;"
	rows small e2 1 3
} | psql_in || fail "the transactions of (a) to (c) failed"

# (d): A starts first and commits last; B starts while A sleeps, commits first.
{
	echo "BEGIN;"
	rows inter da 1 1500
	echo "SELECT pg_sleep(2);"
	rows inter da 1501 3000
	echo "COMMIT;"
} | psql_in &
pa=$!
sleep 0.5
{
	echo "BEGIN;"
	rows inter db 1 1500
	echo "SELECT pg_sleep(0.2);"
	rows inter db 1501 3000
	echo "COMMIT;"
} | psql_in || fail "(d) transaction B failed"
wait "$pa" || fail "(d) transaction A failed"
rows small e3 1 3 | psql_in || fail "(e) the last small transaction failed"
assert_eq "da-1" "$(psql_q "SELECT aggregate_id FROM outbox WHERE aggregate_type = 'inter' ORDER BY xmin::text::bigint, aggregate_id LIMIT 1")" \
	"(d) A started first"

relay_drain "${W2J[@]}"
relay_drain "${PGO[@]}"
assert_match "$(cat "$RELAY_LOG")" 'streams with pgoutput' "the pgoutput relay ran"
relay_drain "${OFF[@]}"

# The server streamed (its statistics are written when a walsender exits).
streamed=$(psql_q "SELECT stream_txns FROM pg_stat_replication_slots WHERE slot_name = 's_pgo'")
log "s_pgo: stream_txns=$streamed"
assert_ge "$streamed" 4 "the server streamed the large transactions to s_pgo (stream_txns)"
assert_eq 0 "$(psql_q "SELECT coalesce(stream_txns, 0) FROM pg_stat_replication_slots WHERE slot_name = 's_off'")" \
	"--no-pgoutput-streaming: nothing streamed to s_off"

# What committed, per stream, in commit order then insertion order.
for t in big sp inter small; do
	for p in w2j pgo off; do
		rx entries "$p:$t" >"$T/$p.$t"
	done
done
assert_eq 3001 "$(xlen w2j:big)" "(a) 3000 rows and the message"
assert_eq 2000 "$(xlen w2j:sp)" "(b) 1500 rows and the released savepoint's 500"
assert_eq 6000 "$(xlen w2j:inter)" "(d) both transactions"
assert_eq 9 "$(xlen w2j:small)" "(e) the small transactions"
python3 - "$T" <<'PY' || fail "the pgoutput entries differ from the wal2json ones"
import json, sys
d = sys.argv[1]
for t in ("big", "sp", "inter", "small"):
    a = [json.loads(l)["fields"] for l in open(f"{d}/w2j.{t}")]
    for p in ("pgo", "off"):
        b = [json.loads(l)["fields"] for l in open(f"{d}/{p}.{t}")]
        if len(a) != len(b):
            sys.exit(f"{t}: wal2json {len(a)} entries, {p} {len(b)}")
        for i, (x, y) in enumerate(zip(a, b)):
            if x != y:
                sys.exit(f"{t} entry {i}:\n wal2json {x}\n {p} {y}")
ids = {t: [dict(json.loads(l)["fields"]).get("aggregate_id", "") for l in open(f"{d}/pgo.{t}")] for t in ("sp", "inter")}
if any(i.startswith(("b-rolled", "b-outer", "b-inner")) for i in ids["sp"]):
    sys.exit("(b) a rolled-back savepoint's row was published")
if sum(i.startswith("b-kept") for i in ids["sp"]) != 500:
    sys.exit("(b) the released savepoint's rows are not all there")
# (d) B committed first: its 3000 rows come before A's
if ids["inter"][:3000] != ["db-%d" % g for g in range(1, 3001)] or \
   ids["inter"][3000:] != ["da-%d" % g for g in range(1, 3001)]:
    sys.exit("(d) not B's rows then A's, each in insertion order")
PY
ok "pgoutput with and without streaming: the same entries as wal2json, field by field"
assert_eq 0 "$(rx fields pgo:big aggregate_id | grep -c '^c-rolled' || true)" "(c) nothing of the rolled-back transaction published"
pass
