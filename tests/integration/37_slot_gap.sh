#!/bin/bash
# 37_slot_gap: a slot that is not the one the relay streamed is refused, never
# streamed over silently. The relay keeps a slot record in Redis
# (<key-prefix>:slot:<slot>) and writes it before it confirms a position, so:
# (a) the slot dropped while the relay was stopped (an operator, or a
#     failover to a server without it) and 5 events committed meanwhile: exit
#     8 with one line naming the slot, the last published commit (LSN and
#     time), outbox-relay heal and the manual steps; no slot created; again on a second start
#     with default flags. (Before the fix: "created it", 13 of 18 events.)
# (b) --accept-gap with another position: still exit 8.
# (c) --accept-gap with the printed position: creates the slot, says so,
#     streams from there; the next start needs no flag.
# (d) the slot recreated by hand after the relay's last position: exit 8.
# (e) the slot invalidated (max_slot_wal_keep_size, wal_status lost): exit 8;
#     with --accept-gap it is dropped and created again, and streams.
# (f) Redis unreachable at start, slot missing: the relay creates the slot,
#     then reads the record once Redis answers and refuses (exit 8).
# (g) a standby relay whose record is older than the slot the active relay
#     moved on: no refusal (it reads the record again), takes over, exactly once.
# (h) a brand-new deployment (no record in Redis) still creates the slot.
. "$(dirname "$0")/lib.sh"
setup_tmp
pg_start
load_schema
redis_start
slot_create outbox_relay
REC=outbox-relay:slot:outbox_relay

emit() { # N TAG: N order events, one transaction each
	local i
	for i in $(seq 1 "$1"); do
		psql_q "SELECT outbox_emit('order', '$2-$i', 'created', '{}')" >/dev/null
	done
}
ids() { rx fields outbox:order aggregate_id | tr '\n' ' ' | sed 's/ $//'; }
slot_exists() { [ -n "$(psql_q "SELECT 1 FROM pg_replication_slots WHERE slot_name = '$1'")" ]; }
gap_line() { grep ' error: ' "$RELAY_LOG" | tail -n 1; }
# accept_lsn: the position the refusal tells to pass to --accept-gap
accept_lsn() { gap_line | sed -n 's/.*--accept-gap \([0-9A-F]*\/[0-9A-F]*\).*/\1/p'; }

# ---- (a) the slot dropped while the relay was stopped -----------------------
emit 13 a
relay_drain
assert_eq 13 "$(xlen outbox:order)" "(a) 13 events published"
rec=$(redis_cli GET "$REC")
assert_match "$rec" '^[0-9A-F]{16} [0-9A-F]{16} [0-9]+ tli=1 [0-9]+/postgres$' "(a) the slot record holds confirmed, commit, time, timeline and owner"
last_commit=$(rx fields outbox:order _lsn | tail -n 1)
psql_q "SELECT pg_drop_replication_slot('outbox_relay')" >/dev/null
emit 5 gap
for run in 1 2; do
	relay_run || true
	assert_eq 8 "$RELAY_RC" "(a) start $run after the slot was dropped: exit 8"
	assert_eq 1 "$(grep -c ' error: ' "$RELAY_LOG")" "(a) start $run: one error line"
	line=$(gap_line)
	assert_contains "$line" 'replication slot "outbox_relay" does not exist' "(a) the line names the slot and what is wrong"
	assert_contains "$line" "published events up to the commit at $last_commit (committed 20" "(a) the line gives the last published commit's LSN and time"
	assert_contains "$line" 'Heal it with: outbox-relay heal (with this relay' "(a) the way forward: outbox-relay heal"
	assert_contains "$line" '--accept-gap ' "(a) the manual steps end with --accept-gap"
	slot_exists outbox_relay && fail "(a) start $run created the slot"
	ok "(a) start $run created no slot"
	assert_eq 13 "$(xlen outbox:order)" "(a) start $run published nothing"
done
st_rc=0
"$RELAY_BIN" status --pg-dsn "$PG_DSN" --redis-url "$REDIS_URL" >"$T/status.out" 2>&1 || st_rc=$?
assert_eq 8 "$st_rc" "(a) outbox-relay status: exit 8 while the gap stands"
assert_contains "$(cat "$T/status.out")" "error: gap suspected: the slot does not exist, but the relay confirmed it up to" "(a) status says plainly that a gap is suspected"
assert_match "$(cat "$T/status.out")" "last_commit +$last_commit \\(committed 20" "(a) status shows the last published commit"
gap=$(accept_lsn)
assert_match "$gap" '^[0-9A-F]+/[0-9A-F]+$' "(a) the refusal names the position to accept ($gap)"

# ---- (b) --accept-gap with another position -----------------------------------
relay_run --accept-gap 0/1 || true
assert_eq 8 "$RELAY_RC" "(b) --accept-gap 0/1 (not the refused gap): still exit 8"

# ---- (c) --accept-gap with the printed position -------------------------------
relay_drain --accept-gap "$gap"
assert_contains "$(cat "$RELAY_LOG")" "replication slot \"outbox_relay\" does not exist; --accept-gap $gap: accepted" "(c) the accepted gap is logged"
slot_exists outbox_relay || fail "(c) the slot was not created"
rec=$(redis_cli GET "$REC" | cut -d' ' -f1)
assert_lsn_ge "$(printf '%X/%X' $((16#$rec >> 32)) $((16#$rec & 0xFFFFFFFF)))" "$(slot_confirmed_lsn outbox_relay)" "(c) the record covers the new slot's position"
emit 3 c
relay_drain
assert_eq "$(seq -f 'a-%g' 1 13 | tr '\n' ' ')c-1 c-2 c-3" "$(ids)" "(c) the next start needs no flag: events after the new slot arrive (the 5 of the gap are for republish)"

# ---- (d) the slot recreated by hand -------------------------------------------
psql_q "SELECT pg_drop_replication_slot('outbox_relay')" >/dev/null
emit 2 d
slot_create outbox_relay
relay_run || true
assert_eq 8 "$RELAY_RC" "(d) a recreated slot: exit 8"
assert_match "$(gap_line)" 'replication slot "outbox_relay" stands at [0-9A-F]+/[0-9A-F]+, past [0-9A-F]+/[0-9A-F]+, the last position this relay confirmed: it was created again' "(d) the line says the slot is past the record"
relay_drain --accept-gap "$(accept_lsn)"

# ---- (e) the slot invalidated -------------------------------------------------
pg_stop
pg_start max_slot_wal_keep_size=1MB
emit 1 e
relay_drain
psql_q "CREATE TABLE filler AS SELECT g, repeat('x', 2000) AS pad FROM generate_series(1, 40000) g" >/dev/null
for i in 1 2 3; do psql_q "SELECT pg_switch_wal()" >/dev/null; psql_q "CHECKPOINT"; done
wait_for "[ \"\$(psql_q \"SELECT wal_status FROM pg_replication_slots WHERE slot_name = 'outbox_relay'\")\" = lost ]" 20 ||
	fail "(e) the slot was not invalidated: wal_status $(psql_q "SELECT wal_status FROM pg_replication_slots WHERE slot_name = 'outbox_relay'")"
emit 1 e-lost
relay_run || true
assert_eq 8 "$RELAY_RC" "(e) an invalidated slot: exit 8"
st_rc=0
"$RELAY_BIN" status --pg-dsn "$PG_DSN" --redis-url "$REDIS_URL" >"$T/status.out" 2>&1 || st_rc=$?
assert_eq 8 "$st_rc" "(e) outbox-relay status: exit 8"
# PostgreSQL 17+ has pg_replication_slots.invalidation_reason, which the relay
# reports instead of wal_status.
if [ "$(pg_version_num)" -ge 170000 ]; then
	why="invalidation_reason wal_removed"
else
	why="wal_status lost"
fi
assert_contains "$(cat "$T/status.out")" "error: gap suspected: the slot was invalidated ($why)" "(e) status names the invalidation"
assert_contains "$(gap_line)" "replication slot \"outbox_relay\" was invalidated ($why)" "(e) the line says it was invalidated"
relay_drain --accept-gap "$(accept_lsn)"
assert_ne lost "$(psql_q "SELECT wal_status FROM pg_replication_slots WHERE slot_name = 'outbox_relay'")" "(e) --accept-gap replaced the invalidated slot"
emit 1 e-after
relay_drain
assert_eq "e-1 e-after-1" "$(ids | tr ' ' '\n' | grep '^e-' | tr '\n' ' ' | sed 's/ $//')" "(e) the replaced slot streams"
pg_stop
pg_start

# ---- (f) Redis unreachable at start, slot missing ------------------------------
psql_q "SELECT pg_drop_replication_slot('outbox_relay')" >/dev/null
redis_stop save # keeps the record (the test Redis has no AOF)
relay_start --retry-max 1s
wait_for "slot_exists outbox_relay" 20 || fail "(f) the relay did not create the slot while Redis was down"
ok "(f) PostgreSQL first: the slot was created while Redis was unreachable"
redis_start
relay_wait 30 || fail "(f) the relay did not stop once Redis answered"
assert_eq 8 "$RELAY_RC" "(f) once Redis answered: exit 8"
assert_contains "$(gap_line)" 'does not exist (this relay created it while Redis was unreachable)' "(f) the line says why"
relay_drain --accept-gap "$(accept_lsn)"

# ---- (g) a standby with an older record ---------------------------------------
redis_cli DEL outbox:order >/dev/null
emit 10 g1
relay_start --status-interval 1s
A_PID=$RELAY_PID
A_LOG=$RELAY_LOG
wait_entries 10 30 outbox:order || fail "(g) relay A did not publish"
relay_start --status-interval 1s
B_PID=$RELAY_PID
B_LOG=$RELAY_LOG
wait_for "grep -q 'standby' '$B_LOG'" 20 || fail "(g) relay B did not become a standby"
rec_b=$(redis_cli GET "$REC" | cut -d' ' -f1)
emit 10 g2
wait_for "[ \"\$(redis_cli GET $REC | cut -d' ' -f1)\" != $rec_b ]" 30 || fail "(g) relay A did not move the record"
b_pos=$(printf '%X/%X' $((16#$rec_b >> 32)) $((16#$rec_b & 0xFFFFFFFF)))
wait_for "[ -n \"\$(psql_q \"SELECT 1 FROM pg_replication_slots WHERE slot_name = 'outbox_relay' AND confirmed_flush_lsn > '$b_pos'\")\" ]" 30 ||
	fail "(g) relay A did not confirm past the record relay B read ($b_pos)"
RELAY_PID=$A_PID
relay_stop
RELAY_PID=$B_PID
RELAY_LOG=$B_LOG
wait_for "grep -q 'is free now: active, streaming' '$B_LOG'" 30 || fail "(g) relay B did not take over: $(tail -n 3 "$B_LOG")"
emit 5 g3
wait_entries 25 30 outbox:order || fail "(g) relay B did not publish after taking over"
relay_alive || fail "(g) relay B exited: $(tail -n 2 "$B_LOG")"
ok "(g) relay B took over without a refusal"
assert_contains "$(cat "$B_LOG")" "the last position this relay confirmed: it was created again or advanced by something else, or Redis lost the newer record (a failover without --wait-replicas); reading the slot record again" \
	"(g) relay B found the slot past the record it had read, and read it again"
relay_stop
assert_eq "$(seq -f 'g1-%g' 1 10 | tr '\n' ' ')$(seq -f 'g2-%g' 1 10 | tr '\n' ' ')$(seq -f 'g3-%g' 1 5 | tr '\n' ' ' | sed 's/ $//')" "$(ids)" "(g) every event once, in order"

# ---- (h) a brand-new deployment ------------------------------------------------
redis_cli FLUSHALL >/dev/null
psql_q "SELECT pg_drop_replication_slot('outbox_relay')" >/dev/null
relay_drain
slot_exists outbox_relay || fail "(h) no record in Redis: the slot was not created"
assert_contains "$(cat "$RELAY_LOG")" 'streaming slot "outbox_relay" (created it)' "(h) a new deployment creates the slot"
st_rc=0
"$RELAY_BIN" status --pg-dsn "$PG_DSN" --redis-url "$REDIS_URL" >"$T/status.out" 2>&1 || st_rc=$?
assert_eq 0 "$st_rc" "(h) outbox-relay status: exit 0"
assert_contains "$(cat "$T/status.out")" "gap check: ok (the slot is at or behind the record)" "(h) status: gap check ok"
pass
