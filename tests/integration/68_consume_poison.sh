#!/bin/bash
# 68_consume_poison: `outbox-consume poison list|replay` (issue 23, item 2) on
# the relay's real output: 10 events and two poison events in outbox:order, 5
# and one poison event in outbox:invoice; a worker (group g1) answers "dead"
# to the poison ones, so three entries are in the two poison streams.
# (a) list: exactly the three, each with its stream, its entry id there, the
#     group, consumer, delivery count, error and event id; --stream,
#     --stream-pattern and --count choose among them.
# (b) replay without --entry or --all is refused (exit 2, one line naming
#     both); an unknown entry is refused (exit 7, naming it) and nothing
#     moves; an invalid id is a usage error.
# (c) replay --entry moves one back: its poison stream shrinks by one, its
#     stream gets a new entry with the event's fields byte for byte and no
#     poison_* field; a worker with a working handler then handles it once
#     and nothing stays pending.
# (d) replay --all moves the other two back; the poison streams are empty.
# (e) the same through a Redis Cluster (three masters, redis-cluster:// URL):
#     the poison streams found on every master, each entry moved back on its
#     stream's slot.
. "$(dirname "$0")/lib.sh"
need_consume_bin
setup_tmp
pg_start
load_schema
redis_start
slot_create outbox_relay

psql_q "SELECT outbox_emit('order', 'o-' || g, 'created', jsonb_build_object('n', g)) FROM generate_series(1, 5) g" >/dev/null
psql_q "SELECT outbox_emit('order', 'o-bad1', 'created', '{\"poison\": true, \"note\": \"tab\there\"}')" >/dev/null
psql_q "SELECT outbox_emit('invoice', 'i-' || g, 'created', jsonb_build_object('n', g)) FROM generate_series(1, 5) g" >/dev/null
psql_q "SELECT outbox_emit('invoice', 'i-bad', 'created', '{\"poison\": true}')" >/dev/null
psql_q "SELECT outbox_emit('order', 'o-bad2', 'created', '{\"poison\": true}')" >/dev/null
psql_q "SELECT outbox_emit('order', 'o-' || g, 'created', jsonb_build_object('n', g)) FROM generate_series(6, 10) g" >/dev/null
relay_drain
assert_eq 12 "$(xlen outbox:order)" "12 events in outbox:order"
assert_eq 6 "$(xlen outbox:invoice)" "6 events in outbox:invoice"
PORDER='outbox-consume:poison:{outbox:order}'
PINVOICE='outbox-consume:poison:{outbox:invoice}'

# consume ARGS...: outbox-consume with the test's Redis, no OUTBOX_CONSUME_* from outside
consume() {
	env -u OUTBOX_CONSUME_GROUP -u OUTBOX_CONSUME_STREAM -u OUTBOX_CONSUME_STREAM_PATTERN \
		-u OUTBOX_CONSUME_POISON_PREFIX "$CONSUME_BIN" "$@"
}
poison() { consume poison "$1" --redis-url "$REDIS_URL" "${@:2}"; }
# worker NAME HANDLER: group g1 on both streams in the background (pid in $WPID, the
# consumer's own: no function or subshell in between, so SIGTERM reaches it)
worker() {
	env -u OUTBOX_CONSUME_GROUP -u OUTBOX_CONSUME_STREAM -u OUTBOX_CONSUME_STREAM_PATTERN \
		-u OUTBOX_CONSUME_POISON_PREFIX \
		"$CONSUME_BIN" --redis-url "$REDIS_URL" --stream outbox:order --stream outbox:invoice --group g1 \
		--consumer "$1" --create-group --block-timeout 200ms --handler "$2" \
		>"$T/$1.stdout" 2>"$T/$1.log" &
	WPID=$!
	echo "$WPID" >>"$T/relay.pids"
}
stop_worker() {
	kill -TERM "$WPID"
	WRC=0
	wait "$WPID" || WRC=$?
	assert_eq 0 "$WRC" "$1: the worker exits 0 on SIGTERM"
}
lines() { [ -f "$1" ] && wc -l <"$1" || echo 0; }
pending() { redis_cli XPENDING "$1" g1 | head -n 1; }
# entry_of STREAM EID: the entry's fields as JSON ([[name, value], ...]), "" when absent
entry_of() {
	rx entries "$1" | python3 -c '
import json, sys
for l in sys.stdin:
    e = json.loads(l)
    if e["eid"] == sys.argv[1]:
        print(json.dumps(e["fields"]))' "$2"
}
# field_of STREAM EID NAME: one field of an entry
field_of() {
	rx entries "$1" | python3 -c '
import sys, json
for l in sys.stdin:
    e = json.loads(l)
    if e["eid"] == sys.argv[1]:
        print(dict(e["fields"]).get(sys.argv[2], "<MISSING>"))' "$2" "$3"
}
# col LINE NAME: the value of NAME= on a list line (the error runs to the end)
col() {
	python3 -c '
import sys
line, name = sys.argv[1], sys.argv[2]
head, _, err = line.partition(" error=")
cols = dict(c.split("=", 1) for c in head.split(" ")[1:])
cols["error"] = err
cols["pid"] = head.split(" ")[0]
print(cols.get(name, "<MISSING>"))' "$1" "$2"
}

cat >"$T/dead.sh" <<EOF
#!/bin/bash
while IFS= read -r line; do
	case "\$line" in *poison*) echo "dead unknown schema" ;; *) printf '%s\n' "\$line" >>"$T/w1.out"; echo done ;; esac
done
EOF
cat >"$T/good.sh" <<EOF
#!/bin/bash
while IFS= read -r line; do printf '%s\n' "\$line" >>"$T/w2.out"; echo done; done
EOF
chmod +x "$T/dead.sh" "$T/good.sh"

worker w1 "$T/dead.sh"
wait_for "[ \"\$(lines $T/w1.out)\" -ge 15 ] && [ \"\$(xlen '$PORDER')\" = 2 ] && [ \"\$(xlen '$PINVOICE')\" = 1 ]" 120 ||
	fail "the worker did not handle 15 events and move 3 ($(tail -n 3 "$T/w1.log"))"
stop_worker w1
assert_eq 0 "$(pending outbox:order)" "nothing pending on outbox:order"
assert_eq 0 "$(pending outbox:invoice)" "nothing pending on outbox:invoice"

# ---- (a) list ----------------------------------------------------------------------------
poison list >"$T/list.out" 2>"$T/list.err" || fail "poison list failed: $(cat "$T/list.err")"
assert_eq 3 "$(lines "$T/list.out")" "(a) list: three poison entries"
declare -A PID_OF LINE_OF
while IFS= read -r line; do
	s=$(col "$line" stream)
	eid=$(col "$line" entry)
	agg=$(field_of "$s" "$eid" aggregate_id)
	case $agg in o-bad*) assert_eq outbox:order "$s" "(a) $agg: its stream" ;;
	i-bad) assert_eq outbox:invoice "$s" "(a) $agg: its stream" ;;
	*) fail "(a) list shows an entry that is no poison event: $line" ;; esac
	assert_eq "$(field_of "$s" "$eid" id)" "$(col "$line" event)" "(a) $agg: its event id, and its entry id in $s"
	case $s in *order) p=$PORDER ;; *) p=$PINVOICE ;; esac
	assert_eq "$(field_of "$s" "$eid" id)" "$(field_of "$p" "$(col "$line" pid)" id)" "(a) $agg: its id in $p"
	assert_eq g1 "$(col "$line" group)" "(a) $agg: the group"
	assert_eq w1 "$(col "$line" consumer)" "(a) $agg: the consumer"
	assert_eq 1 "$(col "$line" deliveries)" "(a) $agg: one delivery"
	assert_eq "unknown schema" "$(col "$line" error)" "(a) $agg: the handler's reason"
	PID_OF[$agg]=$(col "$line" pid)
	LINE_OF[$agg]=$line
done <"$T/list.out"
assert_eq "i-bad o-bad1 o-bad2" "$(printf '%s\n' "${!PID_OF[@]}" | sort | paste -sd ' ')" "(a) one line for each poison event"
out=$(poison list --stream outbox:invoice)
assert_eq 1 "$(printf '%s\n' "$out" | grep -c .)" "(a) --stream outbox:invoice: one entry"
assert_eq "${LINE_OF[i-bad]}" "$out" "(a) --stream outbox:invoice: i-bad's line"
out=$(poison list --stream-pattern 'outbox:o*')
assert_eq 2 "$(printf '%s\n' "$out" | grep -c .)" "(a) --stream-pattern outbox:o*: two entries"
assert_not_contains "$out" "stream=outbox:invoice" "(a) --stream-pattern outbox:o*: not the invoice one"
assert_eq 1 "$(poison list --count 1 | grep -c .)" "(a) --count 1: one line"
assert_eq "" "$(poison list --stream outbox:nothing)" "(a) a stream without poison entries: nothing"

# ---- (b) refusals ------------------------------------------------------------------------
out=$(poison replay 2>&1) && rc=0 || rc=$?
assert_eq 2 "$rc" "(b) bare replay: exit code"
assert_eq 1 "$(printf '%s\n' "$out" | grep -c .)" "(b) bare replay: one line"
assert_contains "$out" "--entry" "(b) bare replay: names --entry"
assert_contains "$out" "--all" "(b) bare replay: names --all"
out=$(poison replay --entry 1-0 2>&1) && rc=0 || rc=$?
assert_eq 7 "$rc" "(b) unknown entry: exit code"
assert_contains "$out" "poison entry 1-0 not found" "(b) unknown entry: the line names it"
out=$(poison replay --stream outbox:order --entry 1-0 2>&1) && rc=0 || rc=$?
assert_eq 7 "$rc" "(b) unknown entry of a named stream: exit code"
assert_contains "$out" "$PORDER" "(b) unknown entry of a named stream: the poison stream named"
out=$(poison replay --entry not-an-id 2>&1) && rc=0 || rc=$?
assert_eq 2 "$rc" "(b) invalid id: exit code"
assert_contains "$out" "--entry" "(b) invalid id: the option named"
out=$(poison replay --entry 1-0 --all 2>&1) && rc=0 || rc=$?
assert_eq 2 "$rc" "(b) --entry with --all: exit code"
assert_eq 2 "$(xlen "$PORDER")" "(b) nothing moved from $PORDER"
assert_eq 1 "$(xlen "$PINVOICE")" "(b) nothing moved from $PINVOICE"
assert_eq 12 "$(xlen outbox:order)" "(b) nothing added to outbox:order"
assert_eq 6 "$(xlen outbox:invoice)" "(b) nothing added to outbox:invoice"

# ---- (c) replay --entry -------------------------------------------------------------------
line=${LINE_OF[o-bad1]}
pid=${PID_OF[o-bad1]}
orig=$(entry_of outbox:order "$(col "$line" entry)")
out=$(poison replay --entry "$pid" 2>&1) || fail "(c) replay --entry $pid failed: $out"
assert_match "$out" "^$pid -> [0-9]+-[0-9]+ stream=outbox:order\$" "(c) the line: old id -> new id"
newid=${out#"$pid -> "}
newid=${newid%% *}
assert_eq 1 "$(xlen "$PORDER")" "(c) the poison stream shrank by one"
assert_eq "" "$(entry_of "$PORDER" "$pid")" "(c) the poison entry is gone"
assert_eq 13 "$(xlen outbox:order)" "(c) outbox:order has one entry more"
assert_eq "$orig" "$(entry_of outbox:order "$newid")" "(c) the new entry has the event's fields, byte for byte"
assert_not_contains "$(entry_of outbox:order "$newid")" "poison_" "(c) and no poison_* field"
assert_eq 2 "$(poison list | grep -c .)" "(c) list shows the other two"
assert_not_contains "$(poison list)" "${line%% error=*}" "(c) and not it"
out=$(poison replay --entry "$pid" 2>&1) && rc=0 || rc=$?
assert_eq 7 "$rc" "(c) replaying it again: not found"
assert_eq 13 "$(xlen outbox:order)" "(c) and not added twice"

worker w2 "$T/good.sh"
wait_for "[ \"\$(lines $T/w2.out)\" -ge 1 ] && [ \"\$(pending outbox:order)\" = 0 ]" 120 ||
	fail "(c) the replayed event was not handled ($(tail -n 3 "$T/w2.log"))"
stop_worker "(c)"
assert_eq 1 "$(lines "$T/w2.out")" "(c) the group got the replayed event once, and only it"
assert_contains "$(cat "$T/w2.out")" '"o-bad1"' "(c) it is o-bad1"
assert_eq 0 "$(pending outbox:order)" "(c) nothing pending"

# ---- (d) replay --all ---------------------------------------------------------------------
out=$(poison replay --all 2>&1) || fail "(d) replay --all failed: $out"
assert_eq 2 "$(printf '%s\n' "$out" | grep -c ' -> ')" "(d) two entries replayed"
assert_contains "$out" "stream=outbox:invoice" "(d) one to outbox:invoice"
assert_contains "$out" "stream=outbox:order" "(d) one to outbox:order"
assert_eq 0 "$(xlen "$PORDER")" "(d) $PORDER is empty"
assert_eq 0 "$(xlen "$PINVOICE")" "(d) $PINVOICE is empty"
assert_eq 14 "$(xlen outbox:order)" "(d) outbox:order has o-bad2 again"
assert_eq 7 "$(xlen outbox:invoice)" "(d) outbox:invoice has i-bad again"
assert_eq "" "$(poison list)" "(d) list shows nothing"
assert_eq 2 "$(rx fields outbox:order aggregate_id | grep -c '^o-bad2$')" "(d) o-bad2 in outbox:order twice: the original and the replay"
# ---- (e) a Redis Cluster ------------------------------------------------------------------
cluster_start 3
CS="outbox:order outbox:invoice outbox:customer"
for st in $CS; do
	for i in 1 2; do cluster_rx cmd XADD "$st" '*' id "$st-$i" payload '{"n": 1}' >/dev/null; done
	cluster_rx cmd XADD "$st" '*' id "$st-bad" payload '{"poison": true}' >/dev/null
done
# slot_owner SLOT: the id of the master serving it
slot_owner() {
	cluster_nodes | awk -v s="$1" '$3 ~ /master/ { for (i = 9; i <= NF; i++) { n = split($i, r, "-"); if (s >= r[1] && s <= r[n]) print $1 } }'
}
owners=$(for st in $CS; do slot_owner "$(rcli "${CLUSTER_MASTER_PORTS%% *}" cluster keyslot "outbox-consume:poison:{$st}")"; done | sort -u | wc -l)
assert_ge "$owners" 2 "(e) the three poison streams are on more than one master"
cpoison() { consume poison "$1" --redis-url "$CLUSTER_URL" "${@:2}"; }
cat >"$T/cdead.sh" <<EOF
#!/bin/bash
while IFS= read -r line; do case "\$line" in *poison*) echo "dead cluster says no" ;; *) echo done ;; esac; done
EOF
chmod +x "$T/cdead.sh"
env -u OUTBOX_CONSUME_GROUP -u OUTBOX_CONSUME_STREAM -u OUTBOX_CONSUME_STREAM_PATTERN \
	-u OUTBOX_CONSUME_POISON_PREFIX \
	"$CONSUME_BIN" --redis-url "$CLUSTER_URL" --stream-pattern 'outbox:*' --group gc --consumer wc \
	--create-group --block-timeout 200ms --handler "$T/cdead.sh" >"$T/wc.stdout" 2>"$T/wc.log" &
WPID=$!
echo "$WPID" >>"$T/relay.pids"
wait_for "[ \"\$(cpoison list 2>/dev/null | grep -c .)\" = 3 ]" 120 ||
	fail "(e) the cluster worker did not move 3 events ($(tail -n 3 "$T/wc.log"))"
stop_worker "(e)"
cpoison list >"$T/clist.out" || fail "(e) poison list through the cluster failed"
assert_eq "outbox:customer outbox:invoice outbox:order" "$(sed 's/.* stream=\([^ ]*\) .*/\1/' "$T/clist.out" | sort | paste -sd ' ')" "(e) list: one entry of each stream"
assert_eq 3 "$(grep -c ' group=gc consumer=wc deliveries=1 .* error=cluster says no$' "$T/clist.out")" "(e) list: group, consumer, deliveries, error"
pid=$(grep " stream=outbox:invoice " "$T/clist.out" | cut -d' ' -f1)
out=$(cpoison replay --stream outbox:invoice --entry "$pid" 2>&1) || fail "(e) replay --entry through the cluster failed: $out"
assert_match "$out" "^$pid -> [0-9]+-[0-9]+ stream=outbox:invoice\$" "(e) replay --entry: the line"
out=$(cpoison replay --all 2>&1) || fail "(e) replay --all through the cluster failed: $out"
assert_eq 2 "$(printf '%s\n' "$out" | grep -c ' -> ')" "(e) replay --all: the other two"
assert_eq "" "$(cpoison list)" "(e) the poison streams are empty"
for st in $CS; do
	assert_eq "$st-1 $st-2 $st-bad $st-bad" "$(cluster_rx fields "$st" id | paste -sd ' ')" "(e) $st: its event back at the end, once"
	assert_not_contains "$(cluster_rx entries "$st" | tail -n 1)" "poison_" "(e) $st: no poison_* field"
done
pass
