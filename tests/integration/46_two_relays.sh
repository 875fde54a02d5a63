#!/bin/bash
# 46_two_relays: two outbox tables (public.outbox, public.outbox_b, same
# columns), two slots, two relays side by side into one Redis.
#   1. Separate streams: relay A (--table public.outbox --slot a --stream
#      'a:{aggregate_type}' --message-prefix outbox_a) and relay B (--table
#      public.outbox_b --slot b --stream 'b:{aggregate_type}' --message-prefix
#      outbox_b) run at the same time over transactions that write to one
#      table, the other, or both. Each set arrives exactly once, in commit
#      order, only in its own streams; logical messages go by prefix; each
#      slot's confirmed_flush_lsn advances.
#   2. Relay B stops: slot b stays behind (and holds WAL back) while slot a
#      keeps advancing; B comes back and catches up, exactly once.
#   3. The same stream for both: both relays write 'shared:{aggregate_type}'.
#      A runs first to the end (its watermark on shared:order is then past
#      every event of B), then B: B's events must all arrive, because each
#      relay has its own watermark key (the slot name is part of it). Both
#      sets exactly once, each in its commit order.
. "$(dirname "$0")/lib.sh"
setup_tmp
pg_start
load_schema
redis_start
psql_q "CREATE TABLE public.outbox_b (LIKE public.outbox INCLUDING ALL)"
slot_create a
slot_create b

# emit FROM TO: rows n = FROM..TO in transactions of 50; even n go to
# public.outbox, odd n to public.outbox_b, so most transactions write both;
# every 4th transaction writes only public.outbox_b (n shifted to odd).
emit() {
	psql_q "DO \$\$ BEGIN
	  FOR t IN 0..(($2 - $1 + 1) / 50 - 1) LOOP
	    INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
	      SELECT (ARRAY['order','customer'])[(i / 2) % 2 + 1], i::text, 'created', jsonb_build_object('n', i, 'src', 'a')
	      FROM generate_series($1 + t * 50, $1 + t * 50 + 49) i WHERE i % 2 = 0 AND t % 4 <> 3;
	    INSERT INTO outbox_b (aggregate_type, aggregate_id, event_type, payload)
	      SELECT (ARRAY['order','customer'])[(i / 2) % 2 + 1], i::text, 'created', jsonb_build_object('n', i, 'src', 'b')
	      FROM generate_series($1 + t * 50, $1 + t * 50 + 49) i WHERE i % 2 = 1 OR t % 4 = 3;
	    COMMIT;
	  END LOOP;
	END \$\$;"
}

# expected TABLE [TYPE]: ids of TABLE (of aggregate_type TYPE), in commit order.
expected() {
	psql_q "SELECT id FROM $1 ${2:+WHERE aggregate_type = '$2'} ORDER BY (payload->>'n')::int"
}

# stop_relay PID N: SIGTERM one of several background relays.
stop_relay() {
	RELAY_PID=$1 RELAY_BG_N=$2
	relay_stop
	assert_eq 0 "$RELAY_RC" "relay #$2 exit code after SIGTERM"
}

# ---------------------------------------------------------------------------
# 1. side by side, separate streams
# ---------------------------------------------------------------------------
relay_start --table public.outbox --slot a --stream 'a:{aggregate_type}' --message-prefix outbox_a
PID_A=$RELAY_PID N_A=$RELAY_BG_N LOG_A=$RELAY_LOG
relay_start --table public.outbox_b --slot b --stream 'b:{aggregate_type}' --message-prefix outbox_b
PID_B=$RELAY_PID N_B=$RELAY_BG_N LOG_B=$RELAY_LOG
emit 1 2000
# One logical message for each relay, in one transaction.
psql_q "BEGIN;
  SELECT pg_logical_emit_message(true, 'outbox_a', json_build_object('id', 'msg-a', 'aggregate_type', 'order', 'aggregate_id', 'm', 'event_type', 'noted', 'payload', '{}'::json)::text);
  SELECT pg_logical_emit_message(true, 'outbox_b', json_build_object('id', 'msg-b', 'aggregate_type', 'order', 'aggregate_id', 'm', 'event_type', 'noted', 'payload', '{}'::json)::text);
COMMIT" >/dev/null
l1=$(current_lsn)
wait_confirmed a "$l1" 30 || fail "slot a not confirmed up to $l1 within 30 s ($(slot_confirmed_lsn a))"
wait_confirmed b "$l1" 30 || fail "slot b not confirmed up to $l1 within 30 s ($(slot_confirmed_lsn b))"
ok "both slots confirmed up to $l1 (a: $(slot_confirmed_lsn a), b: $(slot_confirmed_lsn b))"
na=$(psql_q "SELECT count(*) FROM outbox")
nb=$(psql_q "SELECT count(*) FROM outbox_b")
log "public.outbox: $na rows, public.outbox_b: $nb rows, in $(psql_q "SELECT count(DISTINCT x) FROM (SELECT xmin::text x FROM outbox UNION SELECT xmin::text FROM outbox_b) s") transactions"

{ expected outbox; echo msg-a; } >"$T/exp.a"
{ expected outbox_b; echo msg-b; } >"$T/exp.b"
assert_exactly_once "$T/exp.a" 'a:*'
assert_exactly_once "$T/exp.b" 'b:*'
assert_eq 0 "$(sum_xlen 'outbox:*')" "nothing in the default outbox:* streams"
for s in a b; do
	for t in order customer; do
		{ expected "$( [ $s = a ] && echo outbox || echo outbox_b)" "$t"; [ $t = order ] && echo "msg-$s"; } >"$T/order.$s.$t"
		assert_stream_ids "$s:$t" "$T/order.$s.$t"
	done
done
assert_eq "1 0" "$(redis_cli EXISTS 'outbox-relay:wm:{a:order}:a') $(redis_cli EXISTS 'outbox-relay:wm:{a:order}:b')" \
	"a:order has relay A's watermark (slot a) only"
assert_eq "0 1" "$(redis_cli EXISTS 'outbox-relay:wm:{b:order}:a') $(redis_cli EXISTS 'outbox-relay:wm:{b:order}:b')" \
	"b:order has relay B's watermark (slot b) only"

# ---------------------------------------------------------------------------
# 2. relay B stops: slot b stays behind, slot a keeps advancing
# ---------------------------------------------------------------------------
stop_relay "$PID_B" "$N_B"
cb=$(slot_confirmed_lsn b)
emit 2001 3000
l2=$(current_lsn)
wait_confirmed a "$l2" 30 || fail "slot a not confirmed up to $l2 within 30 s while B is stopped"
ok "slot a confirmed up to $l2 while relay B is stopped"
sleep 2
assert_eq "$cb" "$(slot_confirmed_lsn b)" "slot b's confirmed_flush_lsn stays where relay B left it"
assert_lsn_lt "$(slot_confirmed_lsn b)" "$(slot_confirmed_lsn a)" "slot b is behind slot a"
# What slot b holds back: WAL from its restart_lsn on cannot be removed. A
# slot's restart_lsn moves at running-xacts records (a CHECKPOINT writes one)
# once the relay confirms past them; slot a's does, slot b's cannot.
psql_q "CHECKPOINT"
emit 3001 3050
l2=$(current_lsn)
wait_confirmed a "$l2" 30 || fail "slot a not confirmed up to $l2 within 30 s while B is stopped"
restart_lsn() { psql_q "SELECT restart_lsn FROM pg_replication_slots WHERE slot_name = '$1'"; }
wait_for 'lsn_ge "$(restart_lsn a)" "$(restart_lsn b)" && [ "$(restart_lsn a)" != "$(restart_lsn b)" ]' 15 ||
	log "note: slot a's restart_lsn ($(restart_lsn a)) did not pass slot b's ($(restart_lsn b)) within 15 s"
held=$(psql_q "SELECT slot_name || ': ' || pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn) || ' bytes' FROM pg_replication_slots
               WHERE slot_name IN ('a', 'b') ORDER BY slot_name" | tr '\n' ' ')
log "WAL retained behind each slot's restart_lsn: $held"
assert_lsn_lt "$(restart_lsn b)" "$cb" "slot b's restart_lsn is at or before where relay B stopped: WAL from there on is kept"
expected outbox >"$T/exp.a"
echo msg-a >>"$T/exp.a"
assert_exactly_once "$T/exp.a" 'a:*'
assert_eq "$(($(wc -l <"$T/exp.b")))" "$(sum_xlen 'b:*')" "b:* streams unchanged while relay B is stopped"

relay_start --table public.outbox_b --slot b --stream 'b:{aggregate_type}' --message-prefix outbox_b
PID_B=$RELAY_PID N_B=$RELAY_BG_N
wait_confirmed b "$l2" 30 || fail "slot b not confirmed up to $l2 within 30 s after relay B's restart"
ok "relay B caught up: slot b confirmed up to $l2"
{ expected outbox_b; echo msg-b; } >"$T/exp.b"
assert_exactly_once "$T/exp.b" 'b:*'
stop_relay "$PID_A" "$N_A"
stop_relay "$PID_B" "$N_B"
for f in "$LOG_A" "$LOG_B"; do
	assert_eq 0 "$(grep -c ' error: ' "$f" || true)" "no error lines in $(basename "$f")"
done

# ---------------------------------------------------------------------------
# 3. both relays into the same streams; A first, then B
# ---------------------------------------------------------------------------
a0=$(psql_q "SELECT count(*) FROM outbox")
b0=$(psql_q "SELECT count(*) FROM outbox_b")
emit 3051 4050
SHARED=(--stream 'shared:{aggregate_type}')
relay_drain --table public.outbox --slot a "${SHARED[@]}" --message-prefix outbox_a
log "relay A's watermark on shared:order after its drain: $(redis_cli GET 'outbox-relay:wm:{shared:order}:a' | tr -c '[:print:]' '.')"
assert_eq "$(psql_q "SELECT count(*) FROM outbox WHERE (payload->>'n')::int > 3050")" "$(sum_xlen 'shared:*')" \
	"after relay A: shared:* holds A's new events only"
relay_drain --table public.outbox_b --slot b "${SHARED[@]}" --message-prefix outbox_b
assert_eq "1 1" "$(redis_cli EXISTS 'outbox-relay:wm:{shared:order}:a') $(redis_cli EXISTS 'outbox-relay:wm:{shared:order}:b')" \
	"shared:order has one watermark per slot"
{
	psql_q "SELECT id FROM outbox WHERE (payload->>'n')::int > 3050"
	psql_q "SELECT id FROM outbox_b WHERE (payload->>'n')::int > 3050"
} >"$T/exp.shared"
assert_exactly_once "$T/exp.shared" 'shared:*'
for t in order customer; do
	rx fields "shared:$t" id payload >"$T/got.shared.$t"
	for src in a b; do
		tbl=outbox
		[ $src = b ] && tbl=outbox_b
		psql_q "SELECT id FROM $tbl WHERE aggregate_type = '$t' AND (payload->>'n')::int > 3050 ORDER BY (payload->>'n')::int" >"$T/exp.shared.$src.$t"
		grep -F "\"src\": \"$src\"" "$T/got.shared.$t" | cut -f1 >"$T/got.shared.$src.$t" || true
		if ! cmp -s "$T/exp.shared.$src.$t" "$T/got.shared.$src.$t"; then
			fail "shared:$t: relay $src's events are not in commit order:
$(diff "$T/exp.shared.$src.$t" "$T/got.shared.$src.$t" | head_n 8)"
		fi
		ok "shared:$t: relay $src's $(wc -l <"$T/exp.shared.$src.$t") events in commit order"
	done
done
# The earlier streams got nothing new.
assert_eq "$((a0 + 1))" "$(sum_xlen 'a:*')" "a:* unchanged by phase 3"
assert_eq "$((b0 + 1))" "$(sum_xlen 'b:*')" "b:* unchanged by phase 3"
pass
