#!/bin/bash
# 31_poison_rows: rows and logical messages the relay cannot publish as they
# are go to outbox:dead-letter, one entry each, with a reason naming the
# problem, the raw wal2json object and the slot/_lsn/_xid/_committed_at of
# their transaction; the good event committed right after each poison row is
# published exactly once, in order; a duplicate id inside one transaction is
# a dedup skip (one entry, duplicates=1); confirmed_flush_lsn passes them all.
#
# Cases (one poison transaction, then one good transaction, each):
#   null_id        id NULL                                  event id column "id" is NULL
#   empty_id       id ''                                    event id column "id" is empty
#   not_uuid       id 'not-a-uuid-...' with --id-format uuid is not a uuid
#   payload_text   payload (a text column) is not JSON      does not hold valid JSON
#   routing_null   aggregate_type NULL, default template    routing column "aggregate_type" is NULL
#   name_too_long  aggregate_type of 600 bytes              longer than 512
#   name_brace     aggregate_type 'a}b' ("}" outside a tag) outside a {hash tag}
#   too_large      10 KB payload, --max-event-bytes 4KiB    over --max-event-bytes
#   msg_array      message content '[1,2]'                  message content is not a JSON object
#   msg_not_json   message content 'not json 31'            invalid JSON at byte ...
#   msg_no_id      message object without an "id" key       event id column "id" is missing
#   empty_name     aggregate_type '' with --stream '{aggregate_type}' (second slot)
#                                                           stream name is empty
#   duplicate      the same id twice in one transaction     one entry, duplicates=1
# And, not asserted as a dead letter: aggregate_type '' with the default
# template renders "outbox:", a valid name; the row must be somewhere (that
# stream or the dead-letter stream) exactly once.
. "$(dirname "$0")/lib.sh"
setup_tmp
pg_start
load_schema
redis_start
psql_q "CREATE TABLE public.outbox_loose (id text, aggregate_type text, aggregate_id text, event_type text,
                                          payload text, headers jsonb)"
psql_q "CREATE TABLE public.outbox_tmpl (id text, aggregate_type text, aggregate_id text, event_type text,
                                         payload text, headers jsonb)"
slot_create outbox_relay
slot_create s_tmpl

: >"$T/good"  # ids expected in outbox:order, in order
: >"$T/cases" # case<TAB>slot<TAB>distinguishing value in raw<TAB>reason fragment

# loose ID AGGREGATE_TYPE AGGREGATE_ID PAYLOAD: one INSERT into outbox_loose,
# each argument an SQL expression.
loose() {
	psql_q "INSERT INTO public.outbox_loose (id, aggregate_type, aggregate_id, event_type, payload, headers)
	        VALUES ($1, $2, $3, 'created', $4, '{\"h\": 1}')" >/dev/null
}

# good N: one good row (a fresh uuid) in its own transaction; records its id.
good() {
	psql_q "INSERT INTO public.outbox_loose (id, aggregate_type, aggregate_id, event_type, payload)
	        VALUES (gen_random_uuid()::text, 'order', 'good-$1', 'created', '{\"n\": $1}') RETURNING id" >>"$T/good"
}

# good_msg N: one good transactional logical message; records its id.
good_msg() {
	local id
	id=$(psql_q "SELECT gen_random_uuid()")
	psql_q "SELECT pg_logical_emit_message(true, 'outbox',
	        '{\"id\": \"$id\", \"aggregate_type\": \"order\", \"aggregate_id\": \"good-$1\", \"payload\": {\"n\": $1}}')" >/dev/null
	echo "$id" >>"$T/good"
}

# expect CASE SLOT DISTINGUISHING REASON_FRAGMENT
expect() { printf '%s\t%s\t%s\t%s\n' "$@" >>"$T/cases"; }

good 0

loose NULL "'order'" "'p-null-id'" "'{}'"
expect null_id outbox_relay p-null-id 'event id column "id" is NULL'
good 1

loose "''" "'order'" "'p-empty-id'" "'{}'"
expect empty_id outbox_relay p-empty-id 'event id column "id" is empty'
good 2

loose "'not-a-uuid-31'" "'order'" "'p-not-uuid'" "'{}'"
expect not_uuid outbox_relay not-a-uuid-31 'is not a uuid'
good 3

loose "gen_random_uuid()::text" "'order'" "'p-payload-text'" "'this is {bad'"
expect payload_text outbox_relay p-payload-text 'does not hold valid JSON'
good 4

loose "gen_random_uuid()::text" NULL "'p-routing-null'" "'{}'"
expect routing_null outbox_relay p-routing-null 'routing column "aggregate_type" is NULL'
good 5

loose "gen_random_uuid()::text" "repeat('L', 600)" "'p-name-too-long'" "'{}'"
expect name_too_long outbox_relay p-name-too-long 'longer than 512'
good 6

loose "gen_random_uuid()::text" "'a}b'" "'p-name-brace'" "'{}'"
expect name_brace outbox_relay p-name-brace 'outside a {hash tag}'
good 7

loose "gen_random_uuid()::text" "'order'" "'p-too-large'" "'{\"blob\": \"' || repeat('z', 10240) || '\"}'"
expect too_large outbox_relay p-too-large 'over --max-event-bytes'
good 8

psql_q "SELECT pg_logical_emit_message(true, 'outbox', '[1,2]')" >/dev/null
expect msg_array outbox_relay '[1,2]' 'not a JSON object'
good_msg 9

psql_q "SELECT pg_logical_emit_message(true, 'outbox', 'not json 31')" >/dev/null
expect msg_not_json outbox_relay 'not json 31' 'invalid JSON'
good_msg 10

psql_q "SELECT pg_logical_emit_message(true, 'outbox', '{\"aggregate_type\": \"order\", \"aggregate_id\": \"p-msg-no-id\"}')" >/dev/null
expect msg_no_id outbox_relay p-msg-no-id 'event id column "id" is missing'
good_msg 11

# The same id twice in one transaction: the second is a duplicate (dedup skip).
dup=$(psql_q "SELECT gen_random_uuid()")
psql_q "BEGIN;
        INSERT INTO public.outbox_loose (id, aggregate_type, aggregate_id, event_type, payload) VALUES ('$dup', 'order', 'dup-first', 'created', '{}');
        INSERT INTO public.outbox_loose (id, aggregate_type, aggregate_id, event_type, payload) VALUES ('$dup', 'order', 'dup-second', 'created', '{}');
        COMMIT;"
echo "$dup" >>"$T/good"
good 12

# aggregate_type '' with the default template: "outbox:".
empty_agg=$(psql_q "INSERT INTO public.outbox_loose (id, aggregate_type, aggregate_id, event_type, payload)
                    VALUES (gen_random_uuid()::text, '', 'p-empty-agg', 'created', '{}') RETURNING id")
good 13

# An empty stream name proper needs a template that is only the column:
# second slot, its own table (its messages filtered out by the prefix).
psql_q "INSERT INTO public.outbox_tmpl (id, aggregate_type, aggregate_id, event_type, payload)
        VALUES (gen_random_uuid()::text, '', 'p-empty-name', 'created', '{}')"
expect empty_name s_tmpl p-empty-name 'routing column "aggregate_type" is empty'
tmpl_good=$(psql_q "INSERT INTO public.outbox_tmpl (id, aggregate_type, aggregate_id, event_type, payload)
                    VALUES (gen_random_uuid()::text, 'tmplgood', 'good-tmpl', 'created', '{}') RETURNING id")

end_lsn=$(current_lsn)
n_cases=$(wc -l <"$T/cases")
n_main=$(grep -c $'\toutbox_relay\t' "$T/cases")

relay_drain --table public.outbox_loose --id-format uuid --max-event-bytes 4KiB
main_log=$RELAY_LOG
assert_lsn_ge "$(slot_confirmed_lsn outbox_relay)" "$end_lsn" "outbox_relay confirmed_flush_lsn passes every poison row"

relay_drain --slot s_tmpl --table public.outbox_tmpl --stream '{aggregate_type}' --message-prefix not-outbox
assert_lsn_ge "$(slot_confirmed_lsn s_tmpl)" "$end_lsn" "s_tmpl confirmed_flush_lsn passes the empty-name row"
echo "$tmpl_good" >"$T/tmpl_expected"
assert_stream_ids tmplgood "$T/tmpl_expected"

# Good events: every one exactly once, in commit order, all in outbox:order.
assert_stream_ids outbox:order "$T/good"
assert_eq 1 "$(rx fields outbox:order id aggregate_id | grep -c "^$dup"$'\t')" "duplicate id: exactly one entry"
assert_eq "$dup"$'\t'dup-first "$(rx fields outbox:order id aggregate_id | grep "^$dup"$'\t')" "duplicate id: the first row won"

# Nothing lost: the '' aggregate_type row is in "outbox:" or dead-lettered, once.
in_stream=$(rx fields outbox: id 2>/dev/null | grep -cx "$empty_agg" || true)
in_dl=$(rx fields outbox:dead-letter raw | grep -c 'p-empty-agg' || true)
assert_eq 1 "$((in_stream + in_dl))" "aggregate_type '' (default template) is delivered once somewhere"
log "note: aggregate_type '' with the default template went to $([ "$in_stream" = 1 ] && echo 'stream "outbox:"' || echo outbox:dead-letter)"
n_main=$((n_main + in_dl))
n_cases=$((n_cases + in_dl))

final=$(tail -n 1 "$main_log")
assert_contains "$final" "duplicates=1 " "final log line reports the one duplicate"
assert_contains "$final" "dead_lettered=$n_main " "final log line reports $n_main dead letters"
assert_eq "$n_main" "$(grep -c ' warn: dead-lettering' "$main_log")" "one warning line per dead letter"

# Poison events appear in no event stream (compare all ids outside the dead letters).
cat "$T/good" >"$T/all_expected"
[ "$in_stream" = 0 ] || echo "$empty_agg" >>"$T/all_expected"
echo "$tmpl_good" >>"$T/all_expected"
stream_ids_all '*' | sort >"$T/all_got"
if ! cmp -s <(sort "$T/all_expected") "$T/all_got"; then
	fail "event streams hold other ids than the good ones: $(diff <(sort "$T/all_expected") "$T/all_got" | head_n 10)"
fi
ok "no poison event reached an event stream"

# Every dead letter: its case, a reason with the fragment, raw, slot, _lsn, _xid.
assert_eq "$n_cases" "$(xlen outbox:dead-letter)" "outbox:dead-letter holds one entry per poison case"
rx entries outbox:dead-letter >"$T/dl"
python3 - "$T/dl" "$T/cases" <<'PY' || fail "dead-letter checks failed (see above)"
import json, re, sys

entries = [dict(json.loads(l)["fields"]) for l in open(sys.argv[1])]
cases = [l.rstrip("\n").split("\t") for l in open(sys.argv[2])]
bad = 0
for name, slot, value, frag in cases:
    problems = []
    hits = [e for e in entries if value in e.get("raw", "")]
    if len(hits) != 1:
        print("FAIL - %s: %d dead letters whose raw contains %r" % (name, len(hits), value))
        bad += 1
        continue
    e = hits[0]
    reason = e.get("reason", "")
    if not reason.strip():
        problems.append("empty reason")
    if frag and frag not in reason:
        problems.append("reason %r lacks %r" % (reason, frag))
    try:
        raw = json.loads(e["raw"])
        if not isinstance(raw, dict) or raw.get("action") not in ("I", "M"):
            problems.append("raw is not a wal2json I/M object: %r" % e["raw"][:200])
    except ValueError:
        problems.append("raw is not JSON: %r" % e["raw"][:200])
    if e.get("slot") != slot:
        problems.append("slot=%r, want %r" % (e.get("slot"), slot))
    if not re.fullmatch(r"[0-9A-F]+/[0-9A-F]+", e.get("_lsn", "")):
        problems.append("_lsn=%r" % e.get("_lsn"))
    if not re.fullmatch(r"[0-9]+", e.get("_xid", "")):
        problems.append("_xid=%r" % e.get("_xid"))
    if not e.get("_committed_at"):
        problems.append("no _committed_at")
    if problems:
        print("FAIL - %s: %s" % (name, "; ".join(problems)))
        bad += 1
    else:
        print("ok - dead letter %s: reason=%r" % (name, reason))
sys.exit(1 if bad else 0)
PY
ok "every poison case dead-lettered with its reason, raw, slot, _lsn, _xid and _committed_at"
pass
