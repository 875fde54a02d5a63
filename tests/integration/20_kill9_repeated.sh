#!/bin/bash
# 20_kill9_repeated: 13 SIGKILLs of the relay at random points while it
# drains a 100000-event backlog committed in transactions of mixed sizes
# (1 to 5000 rows), restarting it after each; a final run drains the rest.
# Every event must be in Redis exactly once and in commit order per stream,
# and at least half of the kills must land mid-drain (the relay had published
# something in that run and the backlog was not finished yet).
RELAY_LOG_LEVEL=${RELAY_LOG_LEVEL:-info}
. "$(dirname "$0")/lib.sh"
setup_tmp
pg_start
load_schema
redis_start
slot_create outbox_relay

N=100000
STREAMS=(outbox:order outbox:customer outbox:invoice)
# Transaction sizes cycle through this list (a 5000-row one spans several
# in-flight windows; single-row ones make many small commits).
psql_q <<SQL
DO \$\$
DECLARE
  sizes int[] := ARRAY[1, 7, 250, 5000, 1, 40, 1200, 3, 600, 90, 2500, 15];
  i int := 1;
  t int := 0;
  n int;
BEGIN
  WHILE i <= $N LOOP
    n := least(sizes[t % array_length(sizes, 1) + 1], $N - i + 1);
    INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
      SELECT (ARRAY['order','customer','invoice'])[k % 3 + 1], k::text, 'created', jsonb_build_object('n', k)
      FROM generate_series(i, i + n - 1) k;
    COMMIT;
    i := i + n;
    t := t + 1;
  END LOOP;
END
\$\$;
SQL
assert_eq "$N" "$(psql_q "SELECT count(*) FROM outbox")" "rows written"
ntx=$(psql_q "SELECT count(DISTINCT xmin::text) FROM outbox")
log "$N rows in $ntx transactions"
assert_ge "$ntx" 100 "many transactions of mixed sizes"

start=$(slot_confirmed_lsn outbox_relay)
KILLS=13
mid=0
for k in $(seq 1 $KILLS); do
	before=$(xlen_sum "${STREAMS[@]}")
	# The previous walsender must have let go of the slot, or the new relay
	# would wait as a standby.
	wait_for '! slot_active outbox_relay' 15 || fail "slot still active 15 s after the relay's SIGKILL"
	relay_start
	if [ "$k" = 1 ]; then
		# During startup: within the first 30 ms.
		sleep "0.0$((RANDOM % 3))$((RANDOM % 10))"
	else
		# A random point in the next stretch of what is left, so that the
		# kills spread over the whole backlog however fast the relay is
		# (it drains 100k events in about a second), then up to 9 ms more.
		step=$(((N - before) / (KILLS - k + 2)))
		[ "$step" -ge 1 ] || step=1
		target=$((before + 1 + (RANDOM * 32768 + RANDOM) % step))
		wait_entries "$target" 30 "${STREAMS[@]}" || true
		sleep "0.00$((RANDOM % 10))"
	fi
	relay_kill9
	after=$(xlen_sum "${STREAMS[@]}")
	log "SIGKILL #$k: $before -> $after entries in Redis, slot confirmed $(slot_confirmed_lsn outbox_relay)"
	[ "$after" -gt "$before" ] && [ "$after" -lt "$N" ] && mid=$((mid + 1))
done
[ "$mid" -ge $(((KILLS + 1) / 2)) ] ||
	fail "only $mid of $KILLS kills landed mid-drain; the test did not exercise what it should"
ok "$mid of $KILLS kills landed in the middle of the drain"
log "$(xlen_sum "${STREAMS[@]}") of $N entries in Redis before the final run"

wait_for '! slot_active outbox_relay' 15 || fail "slot still active 15 s after the last SIGKILL"
relay_drain
psql_q "SELECT id FROM outbox" >"$T/expected"
assert_exactly_once "$T/expected"
for t in order customer invoice; do
	psql_q "SELECT id FROM outbox WHERE aggregate_type = '$t' ORDER BY aggregate_id::int" >"$T/order.$t"
	assert_stream_ids "outbox:$t" "$T/order.$t"
done
final=$(grep 'stopped (' "$RELAY_LOG" | tail -n 1)
log "final run: ${final#*stopped }"
assert_lsn_ge "$(slot_confirmed_lsn outbox_relay)" "$(grep -o 'reached --endpos [0-9A-F/]*' "$RELAY_LOG" | awk '{print $3}')" \
	"confirmed_flush_lsn at --endpos after the final run"
log "confirmed_flush moved $start -> $(slot_confirmed_lsn outbox_relay) across $KILLS kills"
pass
