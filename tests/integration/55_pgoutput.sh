#!/bin/bash
# 55_pgoutput: --plugin pgoutput (issue 22). (a) The relay creates a pgoutput
# slot and its publication (FOR TABLE, inserts only). (b) The same WAL through
# a wal2json slot and that pgoutput slot gives identical stream entries, field
# by field (_lsn, _xid and _committed_at included): rows of every type the
# republish test covers and more, NULLs, a column added in the middle (a new
# Relation message), transactions mixing logical messages (the relay's prefix
# and another) with rows, noise on three other tables (one of them other.typed,
# the outbox table's name in another schema), a rolled-back transaction,
# a savepoint rolled back, and one transaction larger than the relay holds in
# memory (it goes to a file). (c) An existing slot's plugin decides. (e) heal
# makes a dropped pgoutput slot again with pgoutput, every row of the gap once.
# (d) A publication that does not publish the table's inserts whole is
# refused, with the statement to run, before a slot is made for it. In (b) a
# row no stream takes is dead-lettered by both: equal entries, raw included.
# (g) Domain columns give the same events on both; pgoutput leaves a generated
# column out, and the relay says so at start.
. "$(dirname "$0")/lib.sh"
setup_tmp
pg_start
load_schema
redis_start

psql_q "CREATE TABLE typed (id text PRIMARY KEY, aggregate_type text, n numeric(12,4), nn numeric,
        f float8, r real, i int8, s int2, b bool, bin bytea, tags text[], ints int4[], payload jsonb,
        headers json, ts timestamptz, tsn timestamp, d date, t time, iv interval, u uuid,
        vc varchar(20), ch char(5), note text, created_at timestamptz DEFAULT now());
        CREATE TABLE noise (k int PRIMARY KEY, v text);
        CREATE TABLE noise_wide (k bigserial PRIMARY KEY, a int, b text, c jsonb, d timestamptz DEFAULT now());
        CREATE SCHEMA other;
        CREATE TABLE other.typed (id text PRIMARY KEY, aggregate_type text, payload jsonb)" >/dev/null

# ---- (a) the relay makes the slot and the publication -------------------------------
W2J=(--slot s_w2j --table public.typed --stream 'w2j:{aggregate_type}' --dead-letter-stream w2j:dead)
# --txn-memory 1MiB: the big transaction below goes to a file
PGO=(--slot s_pgo --plugin pgoutput --table public.typed --stream 'pgo:{aggregate_type}' --txn-memory 1MiB
	--dead-letter-stream pgo:dead)
slot_create s_w2j
relay_drain "${PGO[@]}"
assert_eq "pgoutput" "$(psql_q "SELECT plugin FROM pg_replication_slots WHERE slot_name = 's_pgo'")" \
	"(a) slot s_pgo created with pgoutput"
assert_eq "t|f|f|f|public.typed" "$(psql_q "SELECT pubinsert, pubupdate, pubdelete, pubtruncate,
	(SELECT string_agg(schemaname || '.' || tablename, ',') FROM pg_publication_tables t WHERE t.pubname = p.pubname)
	FROM pg_publication p WHERE pubname = 's_pgo'")" "(a) publication s_pgo: inserts of public.typed only"
assert_match "$(cat "$RELAY_LOG")" 'slot "s_pgo" streams with pgoutput, publication "s_pgo"' "(a) the relay says so"

# ---- (b) the same WAL through both ------------------------------------------------
psql_q "BEGIN;
INSERT INTO noise VALUES (1, 'a'), (2, 'b');
INSERT INTO typed (id, aggregate_type, n, nn, f, r, i, s, b, bin, tags, ints, payload, headers, ts, tsn, d, t, iv, u, vc, ch, note) VALUES
 ('t-1', 'typed', 12.5, 'NaN', 0.1, 1.5, 9007199254740993, -7, true, '\\xdeadbeef', '{x,\"y z\"}', '{1,NULL,3}',
  '{\"a\": 1, \"s\": \"q\\\"uote\", \"big\": 123456789012345678901234567890}', '{ \"k\" :  [1,2] }',
  '2026-11-21 23:51:54.886854+02', '2026-11-21 23:51:54', '2026-11-21', '12:34:56.5', '1 day 02:03:04',
  'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', 'vär\"char', 'ab', E'line1\nline2 \"quoted\" tab\tend \\\\ back \x01ctl'),
 ('t-2', 'typed', -0.0001, '1e-30', 1e300, '-Infinity', -1, 0, false, '', '{}', '{}', '[]', 'null',
  'infinity', '-infinity', '0001-01-01', '00:00', '0', NULL, '', NULL, NULL);
INSERT INTO typed (id, aggregate_type, n, f, b, bin, tags, payload, note) VALUES
 ('t-dead', NULL, 1.5, 'NaN', true, '\\x00ff', '{a,\"b c\"}', '{\"q\": \"x\\\"y\"}', E'tab\there\nnl \\ bs \x01 ctl \x08\x0c\r');
SELECT pg_logical_emit_message(true, 'outbox', '{\"id\": \"m-1\", \"aggregate_type\": \"typed\", \"payload\": {\"x\": 1}}');
SELECT pg_logical_emit_message(true, 'other', 'not ours');
UPDATE noise SET v = 'c' WHERE k = 1;
COMMIT;
BEGIN; INSERT INTO typed (id, aggregate_type, f) VALUES ('rolled-back', 'typed', 'NaN'); ROLLBACK;
BEGIN;
INSERT INTO typed (id, aggregate_type, f, note) VALUES ('t-3', 'typed', 'NaN', 'before the savepoint');
SAVEPOINT s1; INSERT INTO typed (id, aggregate_type) VALUES ('in-savepoint', 'typed'); ROLLBACK TO s1;
DELETE FROM noise WHERE k = 2;
INSERT INTO typed (id, aggregate_type, payload) VALUES ('t-4', 'other', '{\"deep\": {\"a\": [1, {\"b\": null}]}}');
COMMIT;
ALTER TABLE typed ADD COLUMN extra text, DROP COLUMN r;
INSERT INTO typed (id, aggregate_type, extra, ts) VALUES ('t-5', 'typed', 'after alter', '2000-02-29 00:00:00+00');
SELECT pg_logical_emit_message(false, 'outbox', '{\"id\": \"nontx\", \"aggregate_type\": \"typed\"}');
TRUNCATE noise;
INSERT INTO typed (id, aggregate_type, payload, note)
  SELECT 'big-' || g, (ARRAY['typed','other'])[g % 2 + 1], jsonb_build_object('g', g, 'pad', repeat('p', 300)), repeat('n', g % 50)
  FROM generate_series(1, 20000) g;
INSERT INTO typed (id, aggregate_type, payload, note, bin)
  SELECT 'large-' || g, 'typed', jsonb_build_object('pad', repeat(E'q\"\\\\ \x01', 30000 * g)), repeat(E'n\t', 50000),
         decode(repeat('ab', 40000), 'hex') FROM generate_series(1, 3) g;
BEGIN;
INSERT INTO noise_wide (a, b, c) SELECT g, 'w' || g, jsonb_build_object('g', g) FROM generate_series(1, 300) g;
INSERT INTO other.typed VALUES ('other-1', 'typed', '{\"not\": \"ours\"}'), ('other-2', 'other', '{}');
INSERT INTO typed (id, aggregate_type, extra) VALUES ('t-7', 'typed', 'between the noise');
SELECT pg_logical_emit_message(true, 'outbox', '{\"id\": \"m-2\", \"aggregate_type\": \"other\", \"payload\": {}}');
UPDATE noise_wide SET b = 'changed' WHERE a % 7 = 0;
DELETE FROM other.typed WHERE id = 'other-2';
INSERT INTO noise_wide (a, b) SELECT g, repeat('x', g) FROM generate_series(1, 200) g;
COMMIT;" >/dev/null
# Large values (64 KiB and more: the decoder leaves them in the message) in a transaction held in
# memory, and above in one read back from the file (whose buffer the sink keeps).
psql_q "INSERT INTO typed (id, aggregate_type, note) VALUES ('large-in-memory', 'other', repeat(E'\u00e9\\\\', 70000))" >/dev/null
relay_drain "${W2J[@]}"
relay_drain "${PGO[@]}"
assert_match "$(cat "$RELAY_LOG")" 'streams with pgoutput' "(b) the pgoutput relay ran"
assert_match "$(cat "$RELAY_LOG")" 'a (streamed )?pgoutput transaction of 20[0-9]{3} messages .* bytes of it in a temporary file' \
	"(b) the 20,000-row transaction went past --txn-memory, into a file"
for t in typed other; do
	rx entries "w2j:$t" >"$T/w2j.$t"
	rx entries "pgo:$t" >"$T/pgo.$t"
done
python3 - "$T" <<'PY' || fail "(b) the pgoutput entries differ from the wal2json ones"
import json, sys
d = sys.argv[1]
total = 0
for t in ("typed", "other"):
    a = [json.loads(l)["fields"] for l in open(f"{d}/w2j.{t}")]
    b = [json.loads(l)["fields"] for l in open(f"{d}/pgo.{t}")]
    if len(a) != len(b):
        print(f"{t}: wal2json {len(a)} entries, pgoutput {len(b)}", file=sys.stderr)
        sys.exit(1)
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            print(f"{t} entry {i}:\n wal2json {x}\n pgoutput {y}", file=sys.stderr)
            sys.exit(1)
    total += len(a)
print(total)
PY
assert_eq 20012 "$(($(xlen w2j:typed) + $(xlen w2j:other)))" "(b) every row and the messages, once"
assert_not_contains "$(cat "$T/w2j.typed" "$T/pgo.typed" "$T/w2j.other" "$T/pgo.other")" '"other-' \
	"(b) no row of other.typed (the outbox table's name in another schema) on either"
# A row no stream takes (aggregate_type NULL) is dead-lettered by both; pgoutput's raw is
# the relay's rendering of the row in wal2json's form, wal2json's is wal2json's own bytes.
rx entries w2j:dead >"$T/w2j.dead"
rx entries pgo:dead >"$T/pgo.dead"
python3 - "$T" <<'PY' || fail "(b) the pgoutput dead letter differs from the wal2json one"
import json, sys
d = sys.argv[1]
a = [dict(json.loads(l)["fields"]) for l in open(f"{d}/w2j.dead")]
b = [dict(json.loads(l)["fields"]) for l in open(f"{d}/pgo.dead")]
if len(a) != 1 or len(b) != 1:
    sys.exit(f"dead letters: wal2json {len(a)}, pgoutput {len(b)}")
if (a[0].pop("slot", None), b[0].pop("slot", None)) != ("s_w2j", "s_pgo"):
    sys.exit("each dead letter names its own slot")
if "raw" not in a[0] or a[0] != b[0]:
    for k in sorted(set(a[0]) | set(b[0])):
        if a[0].get(k) != b[0].get(k):
            print(f"field {k}:\n wal2json {a[0].get(k)!r}\n pgoutput {b[0].get(k)!r}", file=sys.stderr)
    sys.exit(1)
PY
assert_contains "$(cat "$T/pgo.dead")" 't-dead' "(b) the dead letter is the t-dead row"
ok "(b) the dead letter of a row no stream takes is the same on both, raw included"
ok "(b) the pgoutput entries equal the wal2json ones, field by field"
assert_eq 0 "$(redis_cli XLEN outbox:dead-letter)" "(b) nothing dead-lettered"

# ---- (c) an existing slot's plugin decides ------------------------------------------
psql_q "INSERT INTO typed (id, aggregate_type) VALUES ('t-6', 'typed')" >/dev/null
relay_drain --slot s_pgo --table public.typed --stream 'pgo:{aggregate_type}' --txn-memory 1MiB
assert_match "$(cat "$RELAY_LOG")" 'streams with pgoutput, publication "s_pgo" \(the slot.s plugin, not --plugin.s\)' \
	"(c) a pgoutput slot streams with pgoutput without --plugin, and says so"
assert_eq "t-6" "$(rx fields pgo:typed id | tail -n 1)" "(c) and publishes"

# ---- (e) heal a dropped pgoutput slot ------------------------------------------------
psql_q "SELECT pg_drop_replication_slot('s_pgo');
        INSERT INTO typed (id, aggregate_type) SELECT 'gap-' || g, 'typed' FROM generate_series(1, 20) g" >/dev/null
relay_run_until "$(current_lsn)" "${PGO[@]}" || true
assert_eq 8 "$RELAY_RC" "(e) the dropped slot is a gap: exit 8"
HEAL_RC=0
HEAL_OUT=$(timeout -k 5 120 "$RELAY_BIN" heal --pg-dsn "$PG_DSN" --redis-url "$REDIS_URL" --http-addr "" \
	"${PGO[@]}" 2>&1) || HEAL_RC=$?
assert_eq 0 "$HEAL_RC" "(e) heal exit code ($(tail -n 1 <<<"$HEAL_OUT"))"
assert_eq "pgoutput" "$(psql_q "SELECT plugin FROM pg_replication_slots WHERE slot_name = 's_pgo'")" \
	"(e) heal made the slot again with pgoutput"
psql_q "INSERT INTO typed (id, aggregate_type) VALUES ('after-heal', 'typed')" >/dev/null
relay_drain "${PGO[@]}"
rx fields pgo:typed id | grep -E '^(gap-|after-heal)' | sort | uniq -c | awk '{print $1}' | sort -u >"$T/counts"
assert_eq 1 "$(cat "$T/counts")" "(e) every row of the gap and after it once"
assert_eq 21 "$(rx fields pgo:typed id | grep -cE '^(gap-|after-heal)')" "(e) all 21 of them"

# ---- (f) a slot made before its publication ------------------------------------------
# pgoutput reads the publication as of each change: a publication made now
# would not cover what the slot holds, so the relay refuses to make one.
psql_q "SELECT pg_create_logical_replication_slot('s_early', 'pgoutput');
        INSERT INTO typed (id, aggregate_type) VALUES ('early-1', 'typed')" >/dev/null
early=$(slot_confirmed_lsn s_early)
relay_run_until "$(current_lsn)" --slot s_early --table public.typed || true
assert_eq 3 "$RELAY_RC" "(f) publication missing for an existing pgoutput slot: exit 3"
assert_match "$(grep -m1 'error' "$RELAY_LOG")" 'publication "s_early" does not exist, and slot "s_early" does: .* drop the slot' \
	"(f) the line says why and what to do"
assert_eq "$early" "$(slot_confirmed_lsn s_early)" "(f) nothing was confirmed: the slot still holds early-1"
# (A publication made by hand after the slot is not refused: PostgreSQL 15's
# pgoutput then passes over what the slot holds from before it, and nothing
# here can tell; README, "pgoutput", says to make the publication first.)

# ---- (d) publications that would lose events ----------------------------------------
refused() { # PUBLICATION SQL WANT: the relay on a new pgoutput slot exits 3 naming the fix
	psql_q "$2" >/dev/null
	relay_run_until "$(current_lsn)" --slot "s_$1" --plugin pgoutput --publication "$1" --table public.typed || true
	assert_eq 3 "$RELAY_RC" "(d) publication $1: exit code"
	assert_match "$(grep -m1 'error' "$RELAY_LOG")" "$3" "(d) publication $1: the line says what to run"
}
refused p_upd "CREATE PUBLICATION p_upd FOR TABLE typed WITH (publish = 'update')" \
	'does not publish inserts: run ALTER PUBLICATION "p_upd" SET \(publish = .insert.\)'
refused p_other "CREATE PUBLICATION p_other FOR TABLE noise" \
	'does not include the outbox table "public"."typed": run ALTER PUBLICATION "p_other" ADD TABLE'
refused p_where "CREATE PUBLICATION p_where FOR TABLE typed WHERE (aggregate_type = 'typed')" \
	'with a row filter .WHERE.: rows or columns it leaves out would never reach the streams'
refused p_cols "CREATE PUBLICATION p_cols FOR TABLE typed (id, aggregate_type)" \
	'with a column list'
# ---- (g) domains and generated columns -----------------------------------------------
# pgoutput names a domain by its base type (its Type message), wal2json by the domain's name: the
# relay tells the decoder the outbox table's domains, read at start. Before, a headers column of a
# domain over text holding no JSON was published by wal2json (type jtext) and dead-lettered on
# pgoutput (type text: "does not hold valid JSON"). A generated column pgoutput leaves out of its
# rows, wal2json prints it: the relay says so at start (README, "pgoutput").
psql_q "CREATE DOMAIN jtext AS text; CREATE DOMAIN posint AS int4 CHECK (VALUE > 0);
        CREATE TABLE dom (id text PRIMARY KEY, aggregate_type text, headers jtext, n posint, payload jsonb,
        g text GENERATED ALWAYS AS (id || '!') STORED)" >/dev/null
DW2J=(--slot s_dw2j --table public.dom --stream 'dw2j:{aggregate_type}' --dead-letter-stream dw2j:dead)
DPGO=(--slot s_dpgo --plugin pgoutput --table public.dom --stream 'dpgo:{aggregate_type}'
	--dead-letter-stream dpgo:dead)
slot_create s_dw2j
relay_drain "${DPGO[@]}"
assert_match "$(cat "$RELAY_LOG")" 'outbox table public.dom has generated column\(s\) g, which pgoutput leaves out' \
	"(g) the pgoutput relay names the generated column at start"
psql_q "INSERT INTO dom (id, aggregate_type, headers, n, payload) VALUES
        ('d-1', 'dom', 'not json', 5, '{\"a\": 1}'), ('d-2', 'dom', '{\"k\": [1]}', NULL, NULL)" >/dev/null
relay_drain "${DW2J[@]}"
assert_not_contains "$(cat "$RELAY_LOG")" 'generated column' "(g) no such warning on wal2json"
relay_drain "${DPGO[@]}"
rx entries dw2j:dom >"$T/dw2j"
rx entries dpgo:dom >"$T/dpgo"
python3 - "$T" <<'PY' || fail "(g) the pgoutput entries differ from the wal2json ones beyond the generated column"
import json, sys
d = sys.argv[1]
a = [dict(json.loads(l)["fields"]) for l in open(f"{d}/dw2j")]
b = [dict(json.loads(l)["fields"]) for l in open(f"{d}/dpgo")]
if [x.get("id") for x in a] != ["d-1", "d-2"] or [x.get("id") for x in b] != ["d-1", "d-2"]:
    sys.exit(f"ids: wal2json {[x.get('id') for x in a]}, pgoutput {[x.get('id') for x in b]}")
if [x.pop("g", None) for x in a] != ["d-1!", "d-2!"] or any("g" in x for x in b):
    sys.exit("wal2json prints the generated column, pgoutput leaves it out")
for x, y in zip(a, b):
    if x != y:
        sys.exit(f"wal2json {x}\npgoutput {y}")
PY
ok "(g) a domain column gives the same events on both (headers of a domain over text published)"
assert_eq 0 "$(redis_cli XLEN dpgo:dead)" "(g) nothing dead-lettered on pgoutput"

pass
