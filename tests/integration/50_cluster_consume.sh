#!/bin/bash
# 50_cluster_consume: outbox-consume and `outbox-relay status` against a Redis
# Cluster of 3 masters, through the cluster URL (redis-cluster://P1,P2).
#   - the relay publishes 2400 events to 24 streams (--stream
#     'outbox:{aggregate_id}') spread over all 3 masters;
#   - outbox-consume --stream-pattern 'outbox:*' --count 2400 finds the
#     streams on every master (SCAN per master) and prints every event
#     exactly once, per stream in commit order; nothing is pending afterwards
#     (XPENDING asked of each stream's master), and a second consumer of the
#     group finds nothing left;
#   - status lists all 24 streams with their length, watermark and group
#     (each read from the master that owns the key);
#   - MOVED/ASK: while the relay publishes continuously and a consumer runs,
#     the slot of one stream is moved to another master (keys migrated, a
#     pause with the slot served through ASK, then SETSLOT NODE): the
#     consumer follows ASK and MOVED and still prints every event exactly
#     once, nothing pending; status then reads that stream from its new
#     master;
#   - a cluster URL naming a server without cluster support: both exit 5
#     with one line naming the server and the fix.
. "$(dirname "$0")/lib.sh"
setup_tmp
need_consume_bin
pg_start
load_schema
cluster_start 3
slot_create outbox_relay
# shellcheck disable=SC2034 # REDIS_URL is read by lib.sh's _relay_args
REDIS_URL=$CLUSTER_URL
STREAM=(--stream 'outbox:{aggregate_id}')
NSTREAMS=24
psql_q "CREATE SEQUENCE n_seq"

# emit ROWS: one transaction of ROWS events, n from n_seq, aggregate agg-(n % 24).
emit() {
	psql_q "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
	        SELECT 'order', 'agg-' || (n % $NSTREAMS), 'created', jsonb_build_object('n', n)
	        FROM (SELECT nextval('n_seq') n FROM generate_series(1, $1)) s" >/dev/null
}

# consume NAME ARGS...: outbox-consume through the cluster URL (at most 60 s);
# stdout in $T/NAME.out, stderr in $T/NAME.err, exit code in $RC.
consume() {
	local name=$1
	shift
	RC=0
	env -u OUTBOX_CONSUME_GROUP -u OUTBOX_CONSUME_STREAM -u OUTBOX_CONSUME_STREAM_PATTERN \
		timeout -k 5 60 "$CONSUME_BIN" --redis-url "$CLUSTER_URL" "$@" \
		>"$T/$name.out" 2>"$T/$name.err" </dev/null || RC=$?
	log "outbox-consume $name exit code $RC, $(wc -l <"$T/$name.out") lines"
}

# ids_of FILE: the "id" field of every line, in order.
ids_of() { python3 -c 'import json,sys; [print(json.loads(l)["id"]) for l in open(sys.argv[1])]' "$1"; }

# check_order FILE: per stream, the lines of FILE come in commit (n) order.
check_order() {
	python3 - "$1" <<'PY'
import json, sys
last, bad = {}, []
for line in open(sys.argv[1]):
    e = json.loads(line)
    n = e["payload"]["n"]
    if e["stream"] != "outbox:agg-%d" % (n % 24):
        bad.append("n=%d on %s" % (n, e["stream"]))
    if last.get(e["stream"], 0) >= n:
        bad.append("%s: n=%d after n=%d" % (e["stream"], n, last[e["stream"]]))
    last[e["stream"]] = n
print("; ".join(bad[:5]))
PY
}

# pending_report: "STREAM PENDING" for every stream with entries pending in
# group workers, asked of the stream's master (redis-cli -c follows MOVED).
pending_report() {
	local p s n
	for p in $(cluster_masters); do
		for s in $($RX "127.0.0.1:$p" streams 'outbox:*'); do
			n=$(rcli "$p" XPENDING "$s" workers | head_n 1)
			[ "$n" = 0 ] || echo "$s@$p:$n"
		done
	done
}

# status_run NAME: `outbox-relay status` through the cluster URL; OUT, RC.
status_run() {
	RC=0
	env -u OUTBOX_RELAY_PG_DSN -u OUTBOX_RELAY_REDIS_URL -u OUTBOX_RELAY_SLOT \
		-u OUTBOX_RELAY_STREAM_PATTERN timeout -k 5 30 "$RELAY_BIN" status --pg-dsn "$PG_DSN" \
		--redis-url "$CLUSTER_URL" >"$T/$1.out" 2>"$T/$1.err" </dev/null || RC=$?
	OUT=$(cat "$T/$1.out")
	log "status $1: exit code $RC"
}

# status_row STREAM: the STREAM's row in status's streams table.
status_row() { awk -v s="$1" '$1 == s && NF == 6' <<<"$OUT" | head_n 1; }

# ---------------------------------------------------------------------------
# 2400 events on 24 streams over 3 masters
# ---------------------------------------------------------------------------
for _ in $(seq 1 12); do emit 200; done
relay_drain "${STREAM[@]}" --group workers
cluster_streams 'outbox:*' >"$T/where"
assert_eq "$NSTREAMS" "$(wc -l <"$T/where")" "$NSTREAMS streams over the masters"
for p in $CLUSTER_MASTER_PORTS; do
	assert_ge "$(awk -v p="$p" '$1 == p' "$T/where" | wc -l)" 1 "master $p holds some streams"
done
psql_q "SELECT id FROM outbox" >"$T/expected1"

consume all --stream-pattern 'outbox:*' --group workers --consumer c1 --count 2400 --batch 50
assert_eq 0 "$RC" "outbox-consume exit code (--count 2400 reached)"
assert_contains "$(cat "$T/all.err")" "3 masters" "the consumer read the slot map (3 masters)"
ids_of "$T/all.out" >"$T/got1"
ids_exactly_once "$T/expected1" "$T/got1" "outbox-consume over the cluster URL"
bad=$(check_order "$T/all.out")
[ -z "$bad" ] || fail "lines not in commit order per stream: $bad"
ok "every stream's events printed in commit order, each on its own stream"
assert_eq "$NSTREAMS" "$(python3 -c 'import json,sys; print(len({json.loads(l)["stream"] for l in open(sys.argv[1])}))' "$T/all.out")" \
	"events read from all $NSTREAMS streams"
assert_eq "" "$(pending_report)" "nothing pending in group workers on any stream (XPENDING on each master)"

# A second consumer of the group finds nothing left; SIGTERM ends it (exit 0).
"$CONSUME_BIN" --redis-url "$CLUSTER_URL" --stream-pattern 'outbox:*' --group workers --consumer c9 \
	>"$T/none.out" 2>"$T/none.err" </dev/null &
CPID=$!
echo "$CPID" >>"$T/relay.pids"
wait_for "grep -q 'masters' '$T/none.err'" 10 || fail "second consumer did not connect: $(cat "$T/none.err")"
sleep 1.5
kill -TERM "$CPID"
RC=0
wait "$CPID" || RC=$?
assert_eq 0 "$RC" "second consumer exit code after SIGTERM"
assert_eq 0 "$(wc -l <"$T/none.out")" "the second consumer got nothing: everything was acknowledged"

# ---------------------------------------------------------------------------
# status over the cluster
# ---------------------------------------------------------------------------
status_run st1
assert_eq 0 "$RC" "status exit code"
assert_contains "$OUT" "cluster: 3 masters" "status read the slot map"
assert_contains "$OUT" "Streams matching \"outbox:*\": $NSTREAMS" "status found all $NSTREAMS streams"
for i in $(seq 0 $((NSTREAMS - 1))); do
	s=outbox:agg-$i
	row=$(status_row "$s")
	read -r _ len _ _ groups wm <<<"$row"
	[ "$len" = 100 ] || fail "status: $s length '$len', want 100 (row: $row)"
	[ "$groups" = 1 ] || fail "status: $s groups '$groups', want 1 (row: $row)"
	[[ "$wm" =~ ^[0-9A-F]+/[0-9A-F]+:[0-9]+$ ]] || fail "status: $s watermark '$wm' (row: $row)"
	grep -qE "^ *$s +workers +[0-9]+ +0 +0 " <<<"$OUT" ||
		fail "status: no group row 'workers, 0 pending, lag 0' for $s: $(grep -F "$s " <<<"$OUT" | tr '\n' ';')"
done
ok "status: every stream with length 100, 1 group, a watermark; group workers with 0 pending and lag 0"

# ---------------------------------------------------------------------------
# MOVED / ASK while the consumer runs
# ---------------------------------------------------------------------------
MOVE=outbox:agg-7
slot=$(rcli "${CLUSTER_MASTER_PORTS%% *}" CLUSTER KEYSLOT "$MOVE")
from=$(cluster_key_port "$MOVE")
to=
for p in $CLUSTER_MASTER_PORTS; do
	[ "$p" = "$from" ] || to=$p
done
log "$MOVE: slot $slot on master $from, will move to master $to"

relay_start "${STREAM[@]}" --group workers --retry-max 1s
"$CONSUME_BIN" --redis-url "$CLUSTER_URL" --stream-pattern 'outbox:*' --group workers --consumer c2 \
	>"$T/moved.out" 2>"$T/moved.err" </dev/null &
CPID=$!
echo "$CPID" >>"$T/relay.pids"
# An emitter session commits 24-row transactions (one event per stream) until told to stop.
(
	trap - EXIT
	while [ ! -e "$T/stop-emitter" ]; do
		emit 24
		sleep 0.05
	done
) &
EMITTER=$!
wait_for "[ \$(wc -l <'$T/moved.out') -ge 240 ]" 30 || fail "the consumer prints nothing new: $(tail -n 5 "$T/moved.err")"
before=$(wc -l <"$T/moved.out")
cluster_move_slot "$slot" "$from" "$to" 1.5
sleep 1.5
touch "$T/stop-emitter"
wait "$EMITTER" || fail "the emitter session failed"
assert_eq "$to" "$(cluster_key_port "$MOVE")" "$MOVE is now on master $to"

psql_q "SELECT id FROM outbox" | sort >"$T/all_ids"
sort "$T/expected1" | comm -23 "$T/all_ids" - >"$T/expected2"
n2=$(wc -l <"$T/expected2")
wait_confirmed outbox_relay "$(current_lsn)" 60 || fail "relay did not confirm the last commit"
wait_for "[ \$(wc -l <'$T/moved.out') -ge $n2 ]" 60 ||
	fail "the consumer printed $(wc -l <"$T/moved.out") of $n2 events: $(tail -n 5 "$T/moved.err")"
sleep 1 # a duplicate would arrive now
kill -TERM "$CPID"
RC=0
wait "$CPID" || RC=$?
assert_eq 0 "$RC" "consumer exit code after SIGTERM"
relay_stop
log "consumer printed $before events before the move, $(wc -l <"$T/moved.out") in all"
assert_ge "$(grep -c "\"stream\":\"$MOVE\"" "$T/moved.out")" 10 "events of $MOVE were consumed around the move"
moved=$(grep -c 'MOVED' "$T/moved.err" || true)
ask=$(grep -c ': ASK ' "$T/moved.err" || true)
log "consumer log: $moved MOVED lines, $ask ASK lines"
assert_ge "$moved" 1 "the consumer got and followed MOVED"
assert_ge "$ask" 1 "the consumer got and followed ASK (the slot was being migrated)"
assert_not_contains "$(cat "$T/moved.err")" "reconnecting in" "the consumer never had to reconnect"
ids_of "$T/moved.out" >"$T/got2"
ids_exactly_once "$T/expected2" "$T/got2" "consumer during the slot move"
bad=$(check_order "$T/moved.out")
[ -z "$bad" ] || fail "lines not in commit order per stream: $bad"
ok "commit order per stream kept through the move"
assert_eq "" "$(pending_report)" "nothing pending in group workers on any stream after the move"

status_run st2
assert_eq 0 "$RC" "status exit code after the move"
assert_contains "$OUT" "Streams matching \"outbox:*\": $NSTREAMS" "status finds all $NSTREAMS streams after the move"
total=$(rcli "$to" XLEN "$MOVE")
row=$(status_row "$MOVE")
read -r _ len _ _ groups _ <<<"$row"
assert_eq "$total 1" "$len $groups" "status reads $MOVE (length, groups) from its new master $to"

# ---------------------------------------------------------------------------
# A cluster URL naming a server without cluster support: exit 5, one line
# ---------------------------------------------------------------------------
PLAIN=$(rnode_new)
RC=0
timeout -k 5 30 "$CONSUME_BIN" --redis-url "redis-cluster://127.0.0.1:$PLAIN" --stream-pattern 'outbox:*' \
	--group workers >"$T/plain.out" 2>"$T/plain.err" </dev/null || RC=$?
assert_eq 5 "$RC" "outbox-consume with a cluster URL on a plain server: exit code"
assert_contains "$(cat "$T/plain.err")" "127.0.0.1:$PLAIN/0 is not a Redis Cluster node (cluster support disabled): use redis:// for a single server" \
	"outbox-consume names the server and the fix"
RC=0
timeout -k 5 30 "$RELAY_BIN" status --pg-dsn "$PG_DSN" --redis-url "redis-cluster://127.0.0.1:$PLAIN" \
	>"$T/plain-st.out" 2>&1 </dev/null || RC=$?
assert_eq 5 "$RC" "status with a cluster URL on a plain server: exit code"
assert_contains "$(cat "$T/plain-st.out")" "error: 127.0.0.1:$PLAIN/0 is not a Redis Cluster node (cluster support disabled)" \
	"status names the server and the fix"
pass
