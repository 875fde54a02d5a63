#!/bin/bash
# 58_heal: a gap healed while the application keeps committing, by following
# the relay's own exit 8 line, loses no row and duplicates none (issue 21,
# finding 2). An application loop commits rows (one or two per transaction,
# two events of one aggregate in the second case) before, during and after
# every step: the refusal, the heal, the first start after it; afterwards
# every committed row is in the streams exactly once (ids in SQL against
# XRANGE).
# (a) the slot dropped while the relay was down: `outbox-relay heal` creates
#     the slot with an exported snapshot, republishes inside it what was
#     committed before the slot's consistent point, moves the slot record to
#     that point; the relay then starts as usual and streams the rest.
#     (Before the fix the line named `republish --since` and then
#     `--accept-gap`: the rows committed between the two were lost.)
# (b) the slot recreated by hand past the record: heal republishes up to now
#     and moves the record to the slot's position; the overlap is dropped by
#     dedup.
# (c) no gap: heal says so, changes nothing, exit 0; --until, --dedup-window 0
#     and an unknown option are exit 2.
# (d) heal killed (kill -9) after it created the slot, while Redis held its
#     writes back: the record did not move, the relay still refuses, heal run
#     again (now the slot-past-the-record case) and the relay: exactly once.
# (e) the slot invalidated (max_slot_wal_keep_size): heal drops it, creates
#     it with a snapshot, and the relay: exactly once.
# (f) the slot past the record still in use (pg_recvlogical here, a walsender
#     whose relay was just killed in life): heal waits up to 10 s for it to be
#     released instead of refusing at once.
. "$(dirname "$0")/lib.sh"
setup_tmp
pg_start
load_schema
redis_start
slot_create outbox_relay
REC=outbox-relay:slot:outbox_relay
psql_q "CREATE TABLE app_ctl (stop int)"

gap_line() { grep ' error: ' "$RELAY_LOG" | tail -n 1; }
heal() { # ARGS...: outbox-relay heal; output in $HEAL_OUT, exit code in $HEAL_RC
	HEAL_RC=0
	HEAL_OUT=$(timeout -k 5 120 "$RELAY_BIN" heal --pg-dsn "$PG_DSN" --redis-url "$REDIS_URL" \
		--log-level info --http-addr "" "$@" 2>&1) || HEAL_RC=$?
	log "heal $* exit code $HEAL_RC: $(grep '^heal ' <<<"$HEAL_OUT" || true)"
}
# follow_line: do what the refusal says, the way an operator pastes it
follow_line() {
	local line since accept
	line=$(gap_line)
	if grep -q 'outbox-relay heal' <<<"$line"; then
		HEAL_START=$(rows_now)
		heal --fetch-size 5 # slower: more rows committed while it reads
		HEAL_END=$(rows_now)
		log "$1 heal: $((HEAL_END - HEAL_START)) rows committed while it ran"
		assert_eq 0 "$HEAL_RC" "$1 heal exit code ($(tail -n 3 <<<"$HEAL_OUT" | tr '\n' ' '))"
		wait_rows 30
		relay_start
	else # the procedure before issue 21: republish, then --accept-gap
		since=$(sed -n 's/.*republish --since \([^;)]*\)[;)].*/\1/p' <<<"$line")
		accept=$(sed -n 's/.*--accept-gap \([0-9A-F]*\/[0-9A-F]*\).*/\1/p' <<<"$line")
		"$RELAY_BIN" republish --pg-dsn "$PG_DSN" --redis-url "$REDIS_URL" --http-addr "" \
			--since "$since" >"$T/republish.out" 2>&1 || fail "$1 republish failed: $(tail -n 2 "$T/republish.out")"
		wait_rows 30
		relay_start --accept-gap "$accept"
	fi
}
# check_once WHAT: stop the application, wait for the relay to have it all,
# then every committed row exactly once
check_once() {
	local n
	wait_rows 30
	app_stop
	n=$(rows_now)
	wait_for "[ \"\$(xlen outbox:order)\" -ge $n ]" 60 || true
	sleep 1 # anything beyond n is a duplicate: give it a moment to show
	relay_stop
	log "$1: $n rows committed, $(xlen outbox:order) entries in the stream, $((n - HEAL_BEFORE)) committed from the refusal on"
	psql_q "SELECT id FROM outbox" >"$T/expected.$1"
	assert_exactly_once "$T/expected.$1"
	ok "$1: every one of the $n committed rows is in the stream exactly once"
}

# ---- (a) the slot dropped while the relay was down ----------------------------
app_start a
wait_rows 20
relay_drain
psql_q "SELECT pg_drop_replication_slot('outbox_relay')" >/dev/null
wait_rows 30
HEAL_BEFORE=$(rows_now)
relay_run || true
assert_eq 8 "$RELAY_RC" "(a) the relay refuses the gap"
line=$(gap_line)
wait_rows 30
follow_line "(a)"
check_once a
assert_contains "$line" "outbox-relay heal" "(a) the line names outbox-relay heal"

# ---- (b) the slot recreated by hand past the record --------------------------
redis_cli DEL outbox:order >/dev/null
psql_q "DELETE FROM outbox" >/dev/null
app_start b
wait_rows 20
relay_start
wait_rows 20
relay_stop
psql_q "SELECT pg_drop_replication_slot('outbox_relay')" >/dev/null
wait_rows 30
slot_create outbox_relay
wait_rows 30
HEAL_BEFORE=$(rows_now)
relay_run || true
assert_eq 8 "$RELAY_RC" "(b) a slot past the record: exit 8"
follow_line "(b)"
assert_contains "$HEAL_OUT" "dedup" "(b) heal says the overlap is dropped by dedup"
check_once b

# ---- (d) heal killed half way, then run again ---------------------------------
redis_cli DEL outbox:order >/dev/null
psql_q "DELETE FROM outbox" >/dev/null
app_start d
wait_rows 20
relay_drain
psql_q "SELECT pg_drop_replication_slot('outbox_relay')" >/dev/null
wait_rows 30
HEAL_BEFORE=$(rows_now)
relay_run || true
assert_eq 8 "$RELAY_RC" "(d) the relay refuses the gap"
rec=$(redis_cli GET "$REC")
# A transaction holds the slot's creation back (it waits for running
# transactions) until heal has read the record; then Redis holds writes back,
# so heal creates the slot and waits for the republish.
psql_q "BEGIN; SELECT txid_current(); SELECT pg_sleep(4); COMMIT" >/dev/null &
blocker=$!
sleep 0.5
"$RELAY_BIN" heal --pg-dsn "$PG_DSN" --redis-url "$REDIS_URL" --http-addr "" >"$T/heal-d.out" 2>&1 &
heal_pid=$!
wait_for "[ \"\$(psql_q \"SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'CREATE_REPLICATION_SLOT%'\")\" -ge 1 ]" 20 ||
	fail "(d) heal did not get to create the slot: $(cat "$T/heal-d.out")"
redis_cli CLIENT PAUSE 20000 WRITE >/dev/null
wait "$blocker"
wait_for "[ -n \"\$(slot_confirmed_lsn outbox_relay)\" ]" 20 || fail "(d) heal did not create the slot"
sleep 1
kill -9 "$heal_pid"
wait "$heal_pid" 2>/dev/null || true
redis_cli CLIENT UNPAUSE >/dev/null
assert_eq "$rec" "$(redis_cli GET "$REC")" "(d) heal killed before Redis acknowledged the republish: the slot record did not move"
wait_rows 30
relay_run || true
assert_eq 8 "$RELAY_RC" "(d) the relay still refuses (the new slot stands past the record)"
follow_line "(d)"
check_once d

# ---- (e) the slot invalidated (max_slot_wal_keep_size) ---------------------------
pg_stop
pg_start max_slot_wal_keep_size=1MB
redis_cli DEL outbox:order >/dev/null
psql_q "DELETE FROM outbox" >/dev/null
app_start e
wait_rows 20
relay_drain
psql_q "CREATE TABLE filler AS SELECT g, repeat('x', 2000) AS pad FROM generate_series(1, 40000) g" >/dev/null
for i in 1 2 3; do psql_q "SELECT pg_switch_wal()" >/dev/null; psql_q "CHECKPOINT"; done
wait_for "[ \"\$(psql_q \"SELECT wal_status FROM pg_replication_slots WHERE slot_name = 'outbox_relay'\")\" = lost ]" 20 ||
	fail "(e) the slot was not invalidated"
wait_rows 30
HEAL_BEFORE=$(rows_now)
relay_run || true
assert_eq 8 "$RELAY_RC" "(e) an invalidated slot: exit 8"
follow_line "(e)"
assert_contains "$HEAL_OUT" "was invalidated" "(e) heal says it replaced the invalidated slot"
assert_ne lost "$(psql_q "SELECT wal_status FROM pg_replication_slots WHERE slot_name = 'outbox_relay'")" "(e) the slot streams again"
check_once e

# ---- (f) the slot in use for a moment ----------------------------------------------
redis_cli DEL outbox:order >/dev/null
psql_q "DELETE FROM outbox" >/dev/null
psql_q "SELECT outbox_emit('order', 'f-' || g, 'created', '{}') FROM generate_series(1, 5) g" >/dev/null
relay_drain
psql_q "SELECT pg_drop_replication_slot('outbox_relay')" >/dev/null
psql_q "SELECT outbox_emit('order', 'f-gap-' || g, 'created', '{}') FROM generate_series(1, 5) g" >/dev/null
slot_create outbox_relay
# something streams the new slot (as a walsender whose relay was just killed)
pg_recvlogical -h "$T" -p "$PGPORT" -U postgres -d postgres --slot outbox_relay --start -f /dev/null &
recv_pid=$!
echo "$recv_pid" >>"$T/relay.pids"
wait_for "slot_active outbox_relay" 10 || fail "(f) pg_recvlogical did not take the slot"
"$RELAY_BIN" heal --pg-dsn "$PG_DSN" --redis-url "$REDIS_URL" --http-addr "" >"$T/heal-f.out" 2>&1 &
heal_pid=$!
sleep 2
pid_alive "$heal_pid" || fail "(f) heal did not wait for the slot: $(cat "$T/heal-f.out")"
kill "$recv_pid"
rc=0
wait "$heal_pid" || rc=$?
assert_eq 0 "$rc" "(f) heal waited for the slot to be released, then healed ($(grep '^heal ' "$T/heal-f.out" | head -n 1))"
assert_contains "$(cat "$T/heal-f.out")" "is in use by another process: waiting up to 10 s" "(f) heal says it waits"
psql_q "SELECT outbox_emit('order', 'f-after-' || g, 'created', '{}') FROM generate_series(1, 5) g" >/dev/null
relay_drain
psql_q "SELECT id FROM outbox" >"$T/expected.f"
assert_exactly_once "$T/expected.f"

# ---- (c) no gap ---------------------------------------------------------------
rec=$(redis_cli GET "$REC")
heal
assert_eq 0 "$HEAL_RC" "(c) no gap: heal exit code"
assert_contains "$HEAL_OUT" "no gap" "(c) heal says there is no gap"
assert_eq "$rec" "$(redis_cli GET "$REC")" "(c) the slot record is unchanged"
heal --until 2030-01-01
assert_eq 2 "$HEAL_RC" "(c) --until: exit 2"
assert_contains "$HEAL_OUT" "--until is not taken" "(c) says why"
heal --dedup-window 0
assert_eq 2 "$HEAL_RC" "(c) --dedup-window 0: exit 2"
heal --bogus
assert_eq 2 "$HEAL_RC" "(c) an unknown option: exit 2"
assert_contains "$("$RELAY_BIN" heal --help)" "Usage: outbox-relay heal" "(c) heal --help"
assert_eq "$rec" "$(redis_cli GET "$REC")" "(c) the slot record is still unchanged"
pass
