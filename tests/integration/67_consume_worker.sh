#!/bin/bash
# 67_consume_worker: outbox-consume's worker mode (issue 23, items 1 and 2) on
# the relay's real output: 50 events and one poison event (its payload makes
# every handler fail) in outbox:order, read by one group per case.
# (a) --exec: one process per event, exit 0 acknowledges; the poison event
#     fails, is delivered again, and after --max-deliveries 3 is moved to
#     outbox-consume:poison:{outbox:order} with its group, consumer, delivery
#     count, last error, stream and entry id, and acknowledged: nothing stays
#     pending, each good event was handled once.
# (b) --handler: one co-process answering done / retry; the same outcome,
#     with the handler's reason as the error.
# (c) the co-process answers "dead": moved at its first delivery.
# (d) SIGTERM while the handler runs: the event in hand is finished and
#     acknowledged, then exit 0; the rest of the batch stays pending.
# (e) a co-process that exits without answering is started again; its event
#     is delivered again and handled once.
. "$(dirname "$0")/lib.sh"
need_consume_bin
setup_tmp
pg_start
load_schema
redis_start
slot_create outbox_relay

psql_q "SELECT outbox_emit('order', 'o-' || g, 'created', jsonb_build_object('n', g)) FROM generate_series(1, 25) g" >/dev/null
psql_q "SELECT outbox_emit('order', 'o-bad', 'created', '{\"poison\": true}')" >/dev/null
psql_q "SELECT outbox_emit('order', 'o-' || g, 'created', jsonb_build_object('n', g)) FROM generate_series(26, 50) g" >/dev/null
relay_drain
assert_eq 51 "$(xlen outbox:order)" "51 events in outbox:order"
POISON='outbox-consume:poison:{outbox:order}'

# worker NAME GROUP ARGS...: outbox-consume in the background (pid in $WPID, log $T/NAME.log)
worker() {
	local name=$1 group=$2
	shift 2
	env -u OUTBOX_CONSUME_GROUP -u OUTBOX_CONSUME_STREAM -u OUTBOX_CONSUME_STREAM_PATTERN \
		"$CONSUME_BIN" --redis-url "$REDIS_URL" --stream outbox:order --group "$group" \
		--consumer "$name" --create-group --block-timeout 200ms "$@" >"$T/$name.stdout" 2>"$T/$name.log" &
	WPID=$!
	echo "$WPID" >>"$T/relay.pids"
}
stop_worker() { # exit code in $WRC
	kill -TERM "$WPID"
	WRC=0
	wait "$WPID" || WRC=$?
}
pending() { redis_cli XPENDING outbox:order "$1" | head -n 1; }
lines() { [ -f "$1" ] && wc -l <"$1" || echo 0; }
# poison_field GROUP FIELD: the field of the poison entry that group moved
poison_field() {
	rx entries "$POISON" | python3 -c '
import json, sys
for l in sys.stdin:
    f = dict(json.loads(l)["fields"])
    if f.get("poison_group") == sys.argv[1]:
        print(f.get(sys.argv[2], ""))' "$1" "$2"
}
# distinct_ids FILE: the event ids handled, one line per handling
distinct_ids() { python3 -c 'import json, sys; print(len({json.loads(l)["id"] for l in open(sys.argv[1])}))' "$1"; }

# Options that do not go together: one line naming them, exit 2.
out=$("$CONSUME_BIN" --redis-url "$REDIS_URL" --stream outbox:order --group g --exec true --handler cat 2>&1) && rc=0 || rc=$?
assert_eq 2 "$rc" "--exec with --handler: exit code"
assert_contains "$out" "give one" "--exec with --handler: the line says so"
out=$("$CONSUME_BIN" --redis-url "$REDIS_URL" --stream outbox:order --group g --max-deliveries 3 2>&1) && rc=0 || rc=$?
assert_eq 2 "$rc" "--max-deliveries without a handler: exit code"
assert_contains "$out" "add --exec CMD or --handler CMD" "--max-deliveries without a handler: the fix"

# ---- (a) --exec -------------------------------------------------------------------
cat >"$T/exec.sh" <<EOF
#!/bin/sh
line=\$(cat)
case "\$line" in *poison*) echo "no such customer" >&2; exit 3 ;; esac
printf '%s\n' "\$line" >>"$T/a.out"
EOF
chmod +x "$T/exec.sh"
worker a ga --exec "$T/exec.sh" --max-deliveries 3
wait_for "[ \"\$(lines $T/a.out)\" -ge 50 ] && [ \"\$(poison_field ga poison_entry_id)\" != '' ]" 60 ||
	fail "(a) the worker did not handle 50 events and move the poison one ($(tail -n 3 "$T/a.log"))"
stop_worker
assert_eq 0 "$WRC" "(a) exit code after SIGTERM"
assert_eq 50 "$(lines "$T/a.out")" "(a) 50 events handled"
assert_eq 50 "$(distinct_ids "$T/a.out")" "(a) each once"
assert_eq 0 "$(pending ga)" "(a) nothing pending"
assert_eq 3 "$(poison_field ga poison_deliveries)" "(a) moved after 3 deliveries"
assert_eq "outbox:order" "$(poison_field ga poison_stream)" "(a) the poison entry names its stream"
assert_eq a "$(poison_field ga poison_consumer)" "(a) and the consumer"
assert_contains "$(poison_field ga poison_error)" "exited with status 3" "(a) and the last error"
assert_contains "$(poison_field ga payload)" '"poison": true' "(a) with the event's own fields"
assert_eq 51 "$(xlen outbox:order)" "(a) the stream itself is untouched"
assert_contains "$(cat "$T/a.log")" "no such customer" "(a) the handler's stderr is in the log"
assert_contains "$(cat "$T/a.log")" "worker: handled=50 failed=3 poisoned=1" "(a) the final counts"

# ---- (b) --handler, a co-process answering done / retry -----------------------------
cat >"$T/coproc.sh" <<EOF
#!/bin/bash
while IFS= read -r line; do
	case "\$line" in *poison*) echo "retry upstream said 503" ;; *) printf '%s\n' "\$line" >>"$T/b.out"; echo done ;; esac
done
EOF
chmod +x "$T/coproc.sh"
worker b gb --handler "$T/coproc.sh" --max-deliveries 3
wait_for "[ \"\$(lines $T/b.out)\" -ge 50 ] && [ \"\$(poison_field gb poison_entry_id)\" != '' ]" 60 ||
	fail "(b) the co-process did not handle 50 events and move the poison one ($(tail -n 3 "$T/b.log"))"
stop_worker
assert_eq 0 "$WRC" "(b) exit code after SIGTERM"
assert_eq 50 "$(distinct_ids "$T/b.out")" "(b) 50 events handled"
assert_eq 50 "$(lines "$T/b.out")" "(b) each once"
assert_eq 0 "$(pending gb)" "(b) nothing pending"
assert_eq 3 "$(poison_field gb poison_deliveries)" "(b) moved after 3 deliveries"
assert_eq "upstream said 503" "$(poison_field gb poison_error)" "(b) the handler's reason is the error"

# ---- (c) the co-process answers dead ---------------------------------------------------
sed 's/retry upstream said 503/dead unknown schema/; s/b\.out/c.out/' "$T/coproc.sh" >"$T/coproc_dead.sh"
chmod +x "$T/coproc_dead.sh"
worker c gc --handler "$T/coproc_dead.sh"
wait_for "[ \"\$(lines $T/c.out)\" -ge 50 ] && [ \"\$(poison_field gc poison_entry_id)\" != '' ]" 60 ||
	fail "(c) the dead answer did not move the event ($(tail -n 3 "$T/c.log"))"
stop_worker
assert_eq 1 "$(poison_field gc poison_deliveries)" "(c) dead: moved at its first delivery (no --max-deliveries needed)"
assert_eq "unknown schema" "$(poison_field gc poison_error)" "(c) with the handler's reason"
assert_eq 0 "$(pending gc)" "(c) nothing pending"

# ---- (d) SIGTERM while the handler runs ---------------------------------------------------
cat >"$T/slow.sh" <<EOF
#!/bin/sh
line=\$(cat)
touch "$T/d.started"
i=0
while [ ! -f "$T/d.go" ] && [ \$i -lt 600 ]; do sleep 0.1; i=\$((i + 1)); done
printf '%s\n' "\$line" >>"$T/d.out"
EOF
chmod +x "$T/slow.sh"
worker d gd --exec "$T/slow.sh"
wait_for "[ -f $T/d.started ]" 30 || fail "(d) the handler never started"
kill -TERM "$WPID"
sleep 0.3 # the signal is in; the handler still waits
touch "$T/d.go"
WRC=0
wait "$WPID" || WRC=$?
assert_eq 0 "$WRC" "(d) exit code after SIGTERM during the handler"
assert_eq 1 "$(lines "$T/d.out")" "(d) the event in hand was finished"
assert_eq 50 "$(pending gd)" "(d) it was acknowledged; the other 50 of the batch stay pending"

# ---- (e) a co-process that exits without answering ------------------------------------------
cat >"$T/crash.sh" <<EOF
#!/bin/bash
while IFS= read -r line; do
	if [ ! -f "$T/e.crashed" ]; then touch "$T/e.crashed"; exit 1; fi
	case "\$line" in *poison*) echo "dead poison" ;; *) printf '%s\n' "\$line" >>"$T/e.out"; echo done ;; esac
done
EOF
chmod +x "$T/crash.sh"
worker e ge --handler "$T/crash.sh"
wait_for "[ \"\$(lines $T/e.out)\" -ge 50 ]" 60 || fail "(e) the restarted co-process did not handle 50 events ($(tail -n 3 "$T/e.log"))"
stop_worker
assert_eq 50 "$(lines "$T/e.out")" "(e) 50 events handled"
assert_eq 50 "$(distinct_ids "$T/e.out")" "(e) each once, the one in hand at the crash included"
assert_contains "$(cat "$T/e.log")" "exited without answering" "(e) the crash is logged"
assert_eq 0 "$(pending ge)" "(e) nothing pending"
pass
