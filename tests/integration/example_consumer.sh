#!/bin/bash
# example_consumer.sh: the scenario of the consumer examples' tests, sourced by
# 66_example_python.sh (deploy/examples/python) and 57_example_node.sh
# (deploy/examples/node), which check their own prerequisites, call setup_tmp,
# set WORKER to the example's command (an array; the common flags follow it:
# --redis-url, --pg-dsn, --stream, --group, --consumer, then the scenario's)
# and call example_consumer_scenario. Its own tooling (the killer, rpy) is
# Debian's Python with redis-py and psycopg2 (python3-redis python3-psycopg2).
#   (a) exactly once in effect across kill -9: 300 events, a slow handler; the
#       worker is SIGKILLed (while SIGSTOPped, once an effect is committed but
#       its entry not yet acked), restarted under its name (pending-first
#       re-read), SIGKILLed again, and a second worker claims the dead one's
#       entries (XAUTOCLAIM): 300 effect rows, one per event id, 0 pending, an
#       effect repeated as a no-op, exit 0 on SIGTERM;
#   (b) poison: one event fails every time; with --max-deliveries 3 it is in
#       outbox:order:dlq exactly once (deliveries >= 3, entry id, error, the
#       event's fields), acked; every other event has its effect;
#   (c) a second group "slow" that read everything and acked nothing keeps all
#       its pending entries through relay rounds with --trim acked, while the
#       worker's group acked them; once "slow" acks, the relay trims. On the
#       way the worker's PostgreSQL connection is terminated: it reconnects
#       and retries in place, dead-lettering nothing.
# The worker's log must follow the examples' wording: "already applied",
# "claimed", "reconnecting", and "stopped" as its last line after SIGTERM.

PY=/usr/bin/python3 # Debian's: python3 on PATH may be another one without the packages

# example_tooling_check: skip unless $PY imports redis and psycopg2.
example_tooling_check() {
	if ! [ -x "$PY" ] || ! "$PY" -c 'import redis, psycopg2' 2>/dev/null; then
		skip "$PY cannot import redis and psycopg2 (Debian: python3-redis python3-psycopg2)"
	fi
}

example_consumer_scenario() {
	[ ${#WORKER[@]} -gt 0 ] || fail "example_consumer_scenario: WORKER is not set"
pg_start
load_schema
redis_start
slot_create outbox_relay
S=outbox:order
DLQ=$S:dlq
N=300

# rpy CODE ARGS...: $PY with redis-py on the test Redis as `r`, args in `args`.
rpy() {
	local code=$1
	shift
	"$PY" -c "import sys, json, redis
r = redis.Redis(unix_socket_path=sys.argv[1], decode_responses=True)
args = sys.argv[2:]
$code" "$REDIS_SOCK" "$@"
}
effects() { psql_q "SELECT count(*) FROM consumer_effects"; }
pending() { redis_cli XPENDING "$S" "${1:-workers}" | head_n 1; }
dlq_len() { redis_cli XLEN "$DLQ"; }

# worker_start NAME ARGS...: the example in the background as consumer NAME
# of group workers (env from WENV); pid in $WPID, log in $WLOG = $T/NAME.log
# (.2, .3 for later runs of the same name), exit code in $WLOG.rc. A subshell
# waits for it, so that bash's "Killed" notices for kill -9 go to /dev/null.
WENV=()
worker_start() {
	local name=$1 log=$T/$1.log i=2
	shift
	while [ -e "$log" ]; do log=$T/$name.log.$i && i=$((i + 1)); done
	(
		env "${WENV[@]}" "${WORKER[@]}" --redis-url "$REDIS_URL" --pg-dsn "$PG_DSN application_name=$name" --stream "$S" \
			--group workers --consumer "$name" "$@" >"$log" 2>&1 </dev/null &
		echo $! >"$log.pid"
		rc=0
		wait $! || rc=$?
		echo "$rc" >"$log.rc"
	) 2>/dev/null &
	wait_for "[ -s '$log.pid' ]" 10 || fail "worker $name did not start"
	WPID=$(cat "$log.pid")
	WLOG=$log
	echo "$WPID" >>"$T/relay.pids" # the harness kills it on exit
	log "worker $name started (pid $WPID, log $(basename "$log")): ${WENV[*]} $*"
}
# worker_stop: SIGTERM, at most 15 s; the exit code must be 0.
worker_stop() {
	kill -TERM "$WPID"
	wait_for "[ -s '$WLOG.rc' ]" 15 || fail "worker pid $WPID still runs 15 s after SIGTERM"
	assert_eq 0 "$(cat "$WLOG.rc")" "worker exits 0 on SIGTERM"
	assert_contains "$(tail -n 1 "$WLOG")" "stopped" "the worker logged its clean stop"
}

# killer NAME MIN_EFFECTS OUT: SIGSTOP the worker $WPID again and again; while it
# is stopped, SIGKILL it when at least MIN_EFFECTS (and fewer than N) effects
# exist and one of its pending entries already has its effect committed (a
# crash between COMMIT and XACK); else SIGCONT. Writes to OUT, from the state
# after the kill: effects, the dead consumer's pending entries, those among them
# whose effect exists. Gives up (exit 1) after 60 s.
cat >"$T/killer.py" <<'PY'
import os, random, signal, sys, time
import psycopg2, redis
pid, name, min_effects, n = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
r = redis.Redis(unix_socket_path=sys.argv[5], decode_responses=True)
pg = psycopg2.connect(sys.argv[6])
pg.autocommit = True
def state():
    with pg.cursor() as c:
        c.execute("SELECT entry_id FROM consumer_effects")
        done = {row[0] for row in c.fetchall()}
    pend = {p["message_id"] for p in r.xpending_range("outbox:order", "workers", "-", "+", 10000, name)}
    return done, pend
def proc_state():
    with open("/proc/%d/stat" % pid) as f:
        return f.read().rsplit(")", 1)[1].split()[0]
def stopped():
    return proc_state() == "T"
def dead():
    # a zombie, or already reaped (its /proc entry may go between two looks)
    try:
        return proc_state() == "Z"
    except OSError:
        return True
deadline = time.monotonic() + 60
while time.monotonic() < deadline:
    os.kill(pid, signal.SIGSTOP)
    while not stopped():
        time.sleep(0.001)
    time.sleep(0.005)  # let a command it sent just before reach Redis
    done, pend = state()
    if min_effects <= len(done) < n and pend & done:
        os.kill(pid, signal.SIGKILL)
        while not dead():
            time.sleep(0.01)
        done, pend = state()
        print(len(done), len(pend), len(pend & done))
        sys.exit(0)
    os.kill(pid, signal.SIGCONT)
    time.sleep(random.uniform(0.005, 0.03))
sys.exit(1)
PY
killer() {
	"$PY" "$T/killer.py" "$WPID" "$1" "$2" "$N" "$REDIS_SOCK" "$PG_DSN" >"$3" ||
		fail "no SIGKILL of worker $1 with >= $2 effects and a committed-but-unacked entry within 60 s (effects $(effects))"
	wait_for "[ -s '$WLOG.rc' ]" 10 || fail "worker pid $WPID survives SIGKILL"
	assert_eq 137 "$(cat "$WLOG.rc")" "worker $1 died of SIGKILL"
}

# ---------------------------------------------------------------------------
log "=== (a) exactly once in effect across kill -9"
psql_q "SELECT outbox_emit('order', 'o-' || i, 'created', jsonb_build_object('i', i))
        FROM generate_series(1, $N) i" >/dev/null
psql_q "SELECT id FROM outbox ORDER BY id" >"$T/ids.a"
relay_drain --group workers --group slow
assert_eq "$N" "$(redis_cli XLEN "$S")" "the relay published $N events to $S"

WENV=(OUTBOX_EXAMPLE_TEST_SLEEP=0.01) # a slow handler and a slow ack: ~20 ms per event
worker_start w1 --claim-idle 60
# The worker creates its effects table as it starts; the killer reads it from the first pause.
wait_for "[ \"\$(psql_q \"SELECT to_regclass('consumer_effects') IS NOT NULL\")\" = t ]" 30 ||
	fail "worker w1 did not create its effects table ($(tail -n 3 "$WLOG"))"
killer w1 65 "$T/kill.1" # not a multiple of the batch (10): entries of the batch are left
read -r e1 p1 d1 <"$T/kill.1"
log "1st SIGKILL of w1: $e1 effects, $p1 entries pending for w1, $d1 of them with their effect committed"
assert_ge "$d1" 1 "the 1st kill hit an entry committed but not acked"
assert_lt "$e1" "$N" "the 1st kill came before the last effect"

worker_start w1 --claim-idle 60 # same name: re-reads its pending entries first
wait_for "grep -q 'already applied' '$WLOG'" 30 ||
	fail "w1 restarted did not meet the entry it committed before the kill: $(tail -n 5 "$WLOG")"
ok "w1 after its restart: $(grep 'already applied' "$WLOG" | head_n 1 | sed 's/.*INFO //')"
assert_eq 0 "$(dlq_len)" "the repeated effect was a no-op, not a failure"
killer w1 $((e1 + 33)) "$T/kill.2"
read -r e2 p2 d2 <"$T/kill.2"
log "2nd SIGKILL of w1: $e2 effects, $p2 entries pending for w1, $d2 of them with their effect committed"
assert_ge "$p2" 1 "w1 died with entries pending"
assert_lt "$e2" "$N" "the 2nd kill came before the last effect"

WENV=()
worker_start w2 --claim-idle 1 # another consumer: claims what w1 left once idle 1 s
wait_for "[ \"\$(effects)\" = $N ] && [ \"\$(pending)\" = 0 ]" 60 ||
	fail "after 60 s: $(effects) effects, $(pending) pending"
assert_contains "$(cat "$WLOG")" "claimed" "w2 claimed w1's entries (XAUTOCLAIM)"
worker_stop
assert_eq "$N" "$(effects)" "(a) one effect row per event"
psql_q "SELECT event_id FROM consumer_effects ORDER BY event_id" >"$T/effects.a"
ids_exactly_once "$T/ids.a" "$T/effects.a" "effects of (a)"
assert_eq 0 "$(pending)" "(a) group workers has nothing pending"
assert_eq 0 "$(dlq_len)" "(a) nothing dead-lettered"

# ---------------------------------------------------------------------------
log "=== (b) a poison event"
psql_q "SELECT outbox_emit('order', 'b-' || i, 'created', '{}') FROM generate_series(1, 9) i" >/dev/null
poison=$(psql_q "SELECT outbox_emit('order', 'poison', 'created', '{}')")
psql_q "SELECT outbox_emit('order', 'b-' || i, 'created', '{}') FROM generate_series(10, 19) i" >/dev/null
relay_drain --group workers --group slow
poison_entry=$(rpy '
for eid, f in r.xrange("outbox:order"):
    if f["id"] == args[0]: print(eid)' "$poison")
[ -n "$poison_entry" ] || fail "the poison event $poison is not in $S"
WENV=(OUTBOX_EXAMPLE_TEST_FAIL_ID="$poison")
worker_start w3 --max-deliveries 3 --retry-delay 0.2
wait_for "[ \"\$(effects)\" = $((N + 19)) ] && [ \"\$(dlq_len)\" = 1 ] && [ \"\$(pending)\" = 0 ]" 30 ||
	fail "after 30 s: $(effects) effects, $(dlq_len) dead letters, $(pending) pending"
worker_stop
assert_eq 1 "$(dlq_len)" "(b) the poison event is in $DLQ exactly once"
rpy '
[(eid, f)] = r.xrange("outbox:order:dlq")
print(f["stream"], f["entry_id"], f["group"], f["deliveries"], json.loads(f["event"])["id"])
print(f["error"])' >"$T/dlq"
read -r d_stream d_entry d_group d_deliveries d_event <"$T/dlq"
assert_eq "$S $poison_entry workers $poison" "$d_stream $d_entry $d_group $d_event" \
	"(b) the dead letter names the stream, entry id, group and event"
assert_ge "$d_deliveries" 3 "(b) its delivery count"
assert_contains "$(sed -n 2p "$T/dlq")" "test hook" "(b) the dead letter carries the last error"
assert_eq "" "$(redis_cli XPENDING "$S" workers "$poison_entry" "$poison_entry" 1)" "(b) the poison entry is acked"
assert_eq 0 "$(psql_q "SELECT count(*) FROM consumer_effects WHERE event_id = '$poison'")" "(b) no effect of the poison event"
psql_q "SELECT id FROM outbox WHERE id <> '$poison' ORDER BY id" >"$T/ids.b"
psql_q "SELECT event_id FROM consumer_effects ORDER BY event_id" >"$T/effects.b"
ids_exactly_once "$T/ids.b" "$T/effects.b" "effects of every other event"

# ---------------------------------------------------------------------------
log "=== (c) --trim acked keeps what group slow has not acked"
total=$(redis_cli XLEN "$S")
rpy 'r.xreadgroup("slow", "s1", {"outbox:order": ">"}, count=100000)'
assert_eq "$total" "$(pending slow)" "(c) group slow read all $total entries and acked none"
rpy 'print("\n".join(p["message_id"] for p in r.xpending_range("outbox:order", "slow", "-", "+", 100000)))' >"$T/slow.pending"

relay_start --trim acked --trim-interval 1s
WENV=()
worker_start w4 --retry-delay 0.2
# Its PostgreSQL connection is cut while it is idle: the next event fails on
# it, and is retried in place on a new connection, not counted as a failure.
wait_for "[ -n \"\$(psql_q \"SELECT pid FROM pg_stat_activity WHERE application_name = 'w4'\")\" ]" 15 ||
	fail "w4 did not connect to PostgreSQL: $(tail -n 3 "$WLOG")"
assert_eq t "$(psql_q "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'w4'")" \
	"(c) w4's PostgreSQL connection terminated"
# New events: the relay trims the streams it published to since it started.
psql_q "SELECT outbox_emit('order', 'c-' || i, 'created', '{}') FROM generate_series(1, 10) i" >/dev/null
wait_for "[ \"\$(effects)\" = $((N + 29)) ] && [ \"\$(pending)\" = 0 ]" 30 ||
	fail "after 30 s: $(effects) effects, $(pending) pending in group workers"
ok "(c) group workers acked everything ($(effects) effects)"
assert_contains "$(cat "$WLOG")" "reconnecting" "(c) w4 reconnected to PostgreSQL"
assert_eq 1 "$(dlq_len)" "(c) the lost connection dead-lettered nothing"
rounds=$(grep -c 'trim: [0-9]' "$RELAY_LOG" || true)
wait_for "[ \$(grep -c 'trim: [0-9]' '$RELAY_LOG') -ge $((rounds + 2)) ]" 15 ||
	fail "no two trim rounds within 15 s: $(grep 'trim' "$RELAY_LOG" | tail -n 3)"
assert_not_contains "$(cat "$RELAY_LOG")" "entries removed" "(c) the trim rounds removed nothing"
assert_eq $((total + 10)) "$(redis_cli XLEN "$S")" "(c) $S keeps every entry"
rpy 'print("\n".join(e for e, _ in r.xrange("outbox:order")))' >"$T/stream.c"
assert_eq "" "$(comm -23 <(sort "$T/slow.pending") <(sort "$T/stream.c"))" \
	"(c) every entry pending for slow is still in $S ($(wc -l <"$T/slow.pending"))"

# The control: once slow acks them, the same relay trims them.
rpy 'print(r.xack("outbox:order", "slow", *[l.strip() for l in sys.stdin]))' <"$T/slow.pending" >"$T/slow.acked"
assert_eq "$total" "$(cat "$T/slow.acked")" "(c) slow acked its $total entries"
wait_for "grep -q 'entries removed' '$RELAY_LOG'" 15 || fail "no trim within 15 s after slow acked"
assert_lt "$(redis_cli XLEN "$S")" "$total" "(c) the relay trimmed once slow acked ($(grep -o '[0-9]* entries removed' "$RELAY_LOG" | head_n 1))"
worker_stop
relay_stop
assert_eq 0 "$RELAY_RC" "relay exit code"
pass
}
