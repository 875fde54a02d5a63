#!/bin/bash
# 54_large_values: a large value is published with its own bytes, whichever
# decoder path produced it, and a row over --max-event-bytes is dead-lettered
# without being decoded.
# (a) issue 21, finding 1: a row whose short event_type holds a control byte
#     (so the fast tokenizer hands the row to yajl, whose values live in the
#     decoder's arena) and whose payload is 100 KB (so the sink sends it
#     without a copy), followed in the same transaction by 30 ordinary rows
#     that reuse the arena: every entry's payload equals its row's, byte for
#     byte (rendered in SQL), and so does event_type.
# (b) the same, in 12 transactions of random shapes: large values with and
#     without escapes and control bytes, small ones between them.
# (c) issue 21, finding 3: with --max-event-bytes 1MiB a 3 MiB row is
#     dead-lettered by the check that reads only the message's first bytes
#     ("row is N bytes of wal2json"), not after decoding it ("event is N
#     bytes"), and later rows still flow.
RELAY_LOG_LEVEL=${RELAY_LOG_LEVEL:-info}
. "$(dirname "$0")/lib.sh"
setup_tmp
pg_start
load_schema
redis_start
slot_create outbox_relay

# compare_payloads STREAM: each entry's id, event_type and payload against the
# row with that id, as SQL renders it (payload::text is what wal2json prints
# for jsonb). Differences are listed by id; a missing row is a difference too.
compare_payloads() {
	local stream=$1 n
	rx fields "$stream" id event_type payload >"$T/got.tsv"
	# The same escaping as rx.py: tab and newline as \t and \n, backslashes as is.
	psql_q "SELECT id || E'\t' || replace(replace(event_type, E'\t', '\t'), E'\n', '\n')
	               || E'\t' || replace(replace(payload::text, E'\t', '\t'), E'\n', '\n')
	        FROM outbox WHERE aggregate_type = '${stream#outbox:}'" >"$T/want.tsv"
	sort -o "$T/got.tsv" "$T/got.tsv"
	sort -o "$T/want.tsv" "$T/want.tsv"
	if ! cmp -s "$T/got.tsv" "$T/want.tsv"; then
		comm -23 "$T/want.tsv" "$T/got.tsv" >"$T/diff.want"
		comm -13 "$T/want.tsv" "$T/got.tsv" >"$T/diff.got"
		n=$(wc -l <"$T/diff.want")
		fail "$stream: $n rows differ from their entries (first row: $(head_n 1 <"$T/diff.want" | cut -c1-120); its entry: $(grep -F "$(head_n 1 <"$T/diff.want" | cut -f1)" "$T/diff.got" | cut -c1-50)...$(grep -F "$(head_n 1 <"$T/diff.want" | cut -f1)" "$T/diff.got" | cut -c100000-100060))"
	fi
	wc -l <"$T/want.tsv"
}

# ---- (a) the reported row ---------------------------------------------------
psql_q "BEGIN;
INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
  VALUES ('big', 'b0', E'esc\\x1bape', jsonb_build_object('big', repeat('x', 100000)));
INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
  SELECT 'big', 'b' || k, 'created', jsonb_build_object('k', k, 'pad', repeat('y', 2000))
  FROM generate_series(1, 30) k;
COMMIT;"
relay_drain
assert_eq 31 "$(xlen outbox:big)" "(a) 31 entries"
assert_eq 31 "$(compare_payloads outbox:big)" "(a) each of the 31 entries equals its row"

# ---- (b) random shapes -------------------------------------------------------
seed=${SEED:-$RANDOM}
log "(b) seed $seed"
psql_q "SELECT setseed(($seed % 1000) / 1000.0)" >/dev/null
for tx in $(seq 1 12); do
	psql_q "BEGIN;
	INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
	  SELECT 'mix', 't$tx-' || k,
	         CASE WHEN random() < 0.4 THEN E'ctl\\x01\"q\\\\' || k ELSE 'plain' || k END,
	         CASE WHEN random() < 0.3
	              THEN jsonb_build_object('k', k, 'v', repeat(CASE WHEN random() < 0.5 THEN 'a\"b' ELSE 'é€' END,
	                                                           (20000 + random() * 80000)::int))
	              ELSE jsonb_build_object('k', k, 'small', repeat('z', (random() * 50)::int)) END
	  FROM generate_series(1, 1 + (random() * 40)::int) k;
	COMMIT;" >/dev/null
done
relay_drain
rows=$(compare_payloads outbox:mix)
assert_ge "$rows" 12 "(b) rows of 12 transactions"
ok "(b) each of the $rows entries equals its row"
assert_eq 0 "$(redis_cli EXISTS outbox:dead-letter)" "(a, b) nothing dead-lettered"

# ---- (c) over --max-event-bytes: dead-lettered before decoding --------------
psql_q "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
        VALUES ('huge', 'h1', 'created', jsonb_build_object('blob', repeat('y', 3 * 1024 * 1024)))"
psql_q "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
        VALUES ('huge', 'h2', 'created', '{}')"
relay_drain --max-event-bytes 1MiB
assert_eq 1 "$(xlen outbox:dead-letter)" "(c) one dead letter"
reason=$(rx fields outbox:dead-letter reason)
log "(c) reason: $reason"
assert_match "$reason" '^row is [0-9]+ bytes of wal2json, over --max-event-bytes' \
	"(c) dead-lettered by the undecoded check"
assert_eq h2 "$(rx fields outbox:huge aggregate_id)" "(c) the next row flows"
pass
