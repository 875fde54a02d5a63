#!/bin/bash
# 75_publish_native: --publish native (lib/sink_native.c: the function's
# decisions made in C under WATCH, written with MULTI/EXEC) against --publish
# function (the Lua function of lib/sink_script.c), differentially.
#   (a) The same WAL through two relays, one per mode, each on its own slot
#       (both made before the writes) into its own redis-server. The
#       workload: several streams; a transaction of 3200 rows plus 50 of its
#       own ids again (dedup shards split); ids again in later transactions
#       (rows and messages); outbox_emit_message mixed with rows; the column
#       types of 39_republish (numeric, float8 with NaN/Infinity, int8 past
#       2^53, bool, bytea, text[], jsonb, json, timestamptz, date, text with
#       quotes, tabs and newlines) and NULLs; a ~100 KiB value (held by
#       pointer: the function's path in native mode); a row with a NULL id (a
#       dead letter; another in part 2). Both relays stream the first part and are killed with
#       SIGKILL once its last event is in Redis; each slot is then put back
#       to where it began (dropped and copied from a slot made beside it
#       before the writes), so the restarted relays replay the whole first
#       part whatever they had confirmed (dropped by the watermark: the same
#       count in both modes, independent of when the kill came), then drain
#       the second part (ids of the first again: duplicates) with --endpos.
#       Then both Redis hold: the same streams, each with the same entries
#       field by field in the same order (entry ids aside); the same ids in
#       each stream's dedup hashes; the same buckets in the index hash, each
#       with the same count of ids and about the same K (two runs of the
#       function alone differ by a shard or two: K grows from each call's
#       "ids to come", and which events share a call depends on Redis's reply
#       times); a TTL on every dedup shard. The final log lines give
#       the same published/duplicates/replays, native_batches > 0 in native
#       mode (0 with the function), and few function batches in native mode
#       (the large value and the dead letter).
#       A third relay runs the same WAL the same way in native mode with
#       --no-native-predict (read 2 always after read 1's answers), on its own
#       slot and Redis: its Redis and the predicting native one's hold the
#       same (as above), their final lines give the same counts, and only the
#       predicting one used predicted lookups (native_predicted > 0; 0 with
#       --no-native-predict). A fourth runs it in native mode with
#       --dedup-record 0 (every id looked up): its Redis and the native one's
#       (which keeps the record by default) hold the same, their final lines
#       give the same counts, and only the native one left lookups out
#       (lookups_skipped > 0; 0 with --dedup-record 0). Part 2 was committed
#       before the four drains began: each relay's batches waited for more
#       events (catchup_waits). After the kill, the relay with
#       --no-native-predict reads part 1's buckets into its record
#       (--dedup-record-seed, record_ids_read) and leaves lookups out; the
#       native one drains part 2 with --dedup-record-seed 0 (a unit that reads
#       buckets sends no predicted lookups, and its predictions are counted).
#   (b) Switching modes on one Redis: function, native, function again, each
#       part with ids published before the switch: no entry missing, none
#       twice, the duplicates dropped across each switch.
#   (c) --publish bogus (and OUTBOX_RELAY_PUBLISH=bogus): exit 2, one line
#       naming --publish (the variable).
#   (d) Writes that fail while the next group is read ahead: a backlog of 300
#       small transactions over three streams (ids of the transaction before
#       again), drained by the function into one Redis and by native into
#       another while a client keeps writing a key every native group watches
#       (the dead-letter stream, XADD MAXLEN 0: it stays empty), so EXECs
#       answer nil with the next group's reads staged behind them. Both Redis
#       then hold the same streams and dedup state (as in (a)), the final lines
#       give the same published and duplicates, and the native one shows EXECs
#       that failed (watch_retries), groups read ahead (native_ahead), reads
#       ahead dropped (ahead_voided) and calls that joined a group after its
#       read 1 (native_late).
#   (e) Another writer adds an id to a bucket the relay's id record holds in
#       full: relay A (native, one slot, --table public.ev) writes 40 rows in
#       two transactions (the second's lookups left out: lookups_skipped); relay B
#       (the function, its own slot, --table public.ev2) publishes ids e-a and
#       e-b into the same stream; then A's table commits e-a, e-b and 20 new ids.
#       A must drop e-a and e-b as duplicates (the bucket's count moved, so its
#       record is not trusted) and publish the 20: the stream holds each id once.
#       Then A commits 20 more new ids and e-1 again: the record was dropped for
#       that bucket, so every id is looked up (lookups_skipped unchanged) and e-1
#       is a duplicate.
#   (f) A bucket made before the relay started is read into its id record
#       (--dedup-record-seed), while the relay's own writes split the hashes
#       not read yet: relay A (native, --dedup-record-seed 1: one hash per
#       group) writes 40 ids f-1..f-40 (K = 2) and is stopped. Started again,
#       it writes 100 new ids in one transaction (K grows to 6: both hashes
#       split, their ids moved to hashes the read never reaches) while it reads
#       hash 0 (committed before the start, held together with --linger), then 1
#       new id while it reads hash 1, then all 141 ids again with
#       10 new ones. Each id is in the stream once; the second run dropped the
#       141 as duplicates, read the bucket's ids into its record
#       (record_ids_read), and then left lookups out (lookups_skipped). A
#       record that leaves out the ids its own split moved says "not there" of
#       some of f-1..f-40, and they are published twice.
#   (g) How much a group reads into the record: one hash per event of the
#       group, at least 16, at most --dedup-record-seed. Relay A writes 3,000
#       ids in one transaction (K >= 64) and is stopped. Started again with
#       the default --dedup-record-seed (1,024) and --linger 1s (each
#       transaction one group), caught up: a one-row
#       transaction's group sends exactly 16 HKEYS (INFO commandstats), a
#       40-row transaction's 40 or what is left; then one-row transactions
#       until every hash is read, and the next one's lookup is left out. A
#       relay that reads --dedup-record-seed hashes in every group reads the
#       whole bucket in the first.
#   (h) Another writer splits a bucket the relay is reading into its record,
#       adding no id: relay A (native, --dedup-record-seed 1) writes 40 ids
#       (K = 2) and is stopped; started again, it writes h-41 while it reads
#       hash 0. Relay B (the function) publishes h-1..h-40 twice: all
#       duplicates, but its call expects 80 ids and grows K to 6, so hash 1's
#       ids move to hashes 3 and 5 with the count unchanged. A then writes
#       h-42 and all 52 ids again: each id is in the stream once. A record
#       that checks only the count reads hash 1 as it is now, calls the bucket
#       read, and publishes the ids that moved a second time.
# Nothing depends on the machine's speed: the waits are for conditions,
# bounded generously.
. "$(dirname "$0")/lib.sh"
setup_tmp
pg_start
load_schema
# A table without a primary key, so rows can share an id, with the column
# types of 39_republish.
psql_q "CREATE TABLE public.ev (id text, aggregate_type text, aggregate_id text, event_type text,
        payload jsonb, headers jsonb, created_at timestamptz DEFAULT now(), n numeric(12,4), f float8,
        i int8, b bool, bin bytea, tags text[], hj json, ts timestamptz, d date, nan float8, note text)"

# One dedup bucket for the whole test, however slow the machine: a window
# whose two-window bucket lasts the next hour.
DW=1800
now=$(date +%s)
while [ $((now / (2 * DW))) -ne $(((now + 3600) / (2 * DW))) ]; do DW=$((DW + 1)); done
OPTS=(--table public.ev --dedup-window "$DW")

# same_state LABEL ADDR_F ADDR_N [NAME_F NAME_N]: the function's Redis and the
# native one (or those NAME_F and NAME_N wrote) hold the same streams, each
# with the same entries field by field in the same order (entry ids aside),
# the same ids in each stream's dedup hashes, the same buckets with the same
# counts and about the same K, and a TTL on every dedup shard; each
# difference is said on its own line.
same_state() {
	python3 - "$2" "$3" "$_LIB_DIR" "$1" "${4:-function}" "${5:-native}" <<-'PY'

		import re, sys
		sys.path.insert(0, sys.argv[3])
		label, NF, NN = sys.argv[4], sys.argv[5], sys.argv[6]
		from rx import Client
		def scan(c, pattern):
		    keys, cursor = set(), "0"
		    while True:
		        cursor, batch = c.call("SCAN", cursor, "MATCH", pattern, "COUNT", 1000)
		        keys.update(batch)
		        if cursor == "0":
		            return sorted(keys)
		def state(addr):
		    c = Client(addr)
		    st = {"streams": {}, "ids": {}, "buckets": {}, "nottl": [], "shards": 0}
		    for s in c.streams("outbox:*"):
		        # A dead letter names its relay's slot.
		        st["streams"][s] = [[["slot", "<slot>"] if f[0] == "slot" and f[1] in ("s_f", "s_n", "s_p", "s_r", "d_f", "d_n") else list(f)
		                             for f in kv] for _, kv in c.xrange(s)]
		        if s == "outbox:dead-letter":
		            continue
		        base = "outbox-relay:dd:{%s}" % s
		        ids = set()
		        for k in scan(c, base + ":*"):
		            st["shards"] += 1
		            ids.update(f for f in c.call("HKEYS", k) if f != "")
		            if c.call("TTL", k) <= 0:
		                st["nottl"].append(k)
		        st["ids"][s] = ids
		        h = c.call("HGETALL", base) or []
		        st["buckets"][s] = {h[i]: tuple(h[i + 1].split()[:2]) for i in range(0, len(h), 2)
		                            if re.fullmatch(r"\d+:\d+", h[i])}
		    return st
		f, n = state(sys.argv[1]), state(sys.argv[2])
		bad = []
		def say(m):
		    bad.append(m)
		    print("[75_publish_native] FAIL: %s %s" % (label, m), file=sys.stderr)
		if sorted(f["streams"]) != sorted(n["streams"]):
		    say("streams: %s %s, %s %s" % (NF, sorted(f["streams"]), NN, sorted(n["streams"])))
		for s in sorted(set(f["streams"]) & set(n["streams"])):
		    a, b = f["streams"][s], n["streams"][s]
		    if a != b:
		        k = next((j for j in range(min(len(a), len(b))) if a[j] != b[j]), min(len(a), len(b)))
		        ea, eb = (a[k] if k < len(a) else []), (b[k] if k < len(b) else [])
		        diff = [(i, ea[i] if i < len(ea) else None, eb[i] if i < len(eb) else None)
		                for i in range(max(len(ea), len(eb))) if (ea[i:i + 1] or None) != (eb[i:i + 1] or None)]
		        say("%s: %d entries (%s), %d (%s), first difference at entry %d, fields (index, %s, %s): %s" % (
		            s, len(a), NF, len(b), NN, k, NF, NN, str(diff)[:1500]))
		    else:
		        print("[75_publish_native] ok - %s %s: the same %d entries, field by field, in order" % (label, s, len(a)))
		for s in sorted(set(f["ids"]) | set(n["ids"])):
		    a, b = f["ids"].get(s, set()), n["ids"].get(s, set())
		    if a != b:
		        say("%s: dedup ids differ: %d (%s), %d (%s), %d only in %s (e.g. %r), %d only in %s (e.g. %r)" % (
		            s, len(a), NF, len(b), NN, len(a - b), NF, sorted(a - b)[:3], len(b - a), NN, sorted(b - a)[:3]))
		    else:
		        print("[75_publish_native] ok - %s %s: the same %d ids in the dedup hashes" % (label, s, len(a)))
		    # The same buckets with the same count of ids. K, as the function
		    # grows it from each call's "ids to come", depends on how the events
		    # fell into calls, which group commit decides by Redis's reply times:
		    # two runs of the function alone differ by a shard or two on the bulk
		    # stream (300 vs 301). Equal K is asserted within max(2, K/20).
		    ba, bb = f["buckets"].get(s, {}), n["buckets"].get(s, {})
		    far = [b for b in ba if b in bb and abs(int(ba[b][0]) - int(bb[b][0])) > max(2, int(ba[b][0]) // 20)]
		    if sorted(ba) != sorted(bb) or any(ba[b][1] != bb[b][1] for b in ba if b in bb) or far:
		        say("%s: bucket records (K, count) differ: %s %s, %s %s" % (s, NF, ba, NN, bb))
		    else:
		        print("[75_publish_native] ok - %s %s: the same buckets and counts, K within max(2, K/20): %s %s, %s %s" % (label, s, NF, ba, NN, bb))
		for name, st in ((NF, f), (NN, n)):
		    if st["nottl"]:
		        say("%s: %d dedup shards without a TTL, e.g. %s" % (name, len(st["nottl"]), st["nottl"][:3]))
		    else:
		        print("[75_publish_native] ok - %s %s: all %d dedup shards have a TTL" % (label, name, st["shards"]))
		if label == "(a)" and (len(f["ids"].get("outbox:bulk", set())) < 3000 or max(int(k) for k, _ in f["buckets"]["outbox:bulk"].values()) < 8):
		    say("%s: the bulk stream's dedup state did not split (test bug?): %s" % (NF, f["buckets"].get("outbox:bulk")))
		sys.exit(1 if bad else 0)
	PY
}

# ---------------------------------------------------------------------------
# (a) the same WAL through both modes
# ---------------------------------------------------------------------------
case_a() {
	local PF PN PP PR m port skipped pid_f pid_n pid_p pid_r lf ln2 lp lr l2 x
	PF=$(rnode_new)
	PN=$(rnode_new)
	PP=$(rnode_new)
	PR=$(rnode_new)
	# Eight slots at one position (copies of the first): the relays see the
	# same backlog ahead of their slot, and so size the dedup buckets alike.
	slot_create s_f
	for m in s_n s_p s_r bak_f bak_n bak_p bak_r; do
		psql_q "SELECT 1 FROM pg_copy_logical_replication_slot('s_f', '$m')" >/dev/null
	done
	# Part 1.
	psql_q >/dev/null <<-'SQL'
		BEGIN;
		INSERT INTO ev (id, aggregate_type, aggregate_id, event_type, payload, n, i)
		  SELECT 'b-' || g, 'bulk', (g % 97)::text, 'created', jsonb_build_object('g', g), g / 7.0, g
		  FROM generate_series(1, 3200) g;
		INSERT INTO ev (id, aggregate_type, aggregate_id, event_type, payload)
		  SELECT 'b-' || g, 'bulk', 'dup-in-tx', 'again', '{}' FROM generate_series(1, 50) g;
		COMMIT;
		DO $$ BEGIN
		  FOR t IN 1..30 LOOP
		    INSERT INTO ev (id, aggregate_type, aggregate_id, event_type, payload, headers, n, f, i, b, bin,
		                    tags, hj, ts, d, nan, note)
		      SELECT gen_random_uuid()::text, (ARRAY['order','customer','invoice'])[g % 3 + 1], t || '-' || g,
		             'created', jsonb_build_object('t', t, 'g', g, 's', E'q"uote\\back'),
		             CASE WHEN g % 5 = 0 THEN NULL ELSE '{"h": 1}'::jsonb END,
		             CASE WHEN g % 4 = 0 THEN NULL ELSE g * 1.25 END, g * 0.1, 9007199254740993 + g,
		             CASE WHEN g % 7 = 0 THEN NULL ELSE g % 2 = 0 END,
		             CASE WHEN g % 6 = 0 THEN ''::bytea ELSE decode(lpad(to_hex(g), 8, '0'), 'hex') END,
		             CASE WHEN g % 8 = 0 THEN '{}'::text[] ELSE ARRAY['x', 'y z', g::text] END,
		             ('{ "k" :  [' || g || ', 2] }')::json,
		             CASE WHEN g % 9 = 0 THEN 'infinity'::timestamptz
		                  ELSE '2026-11-21 23:51:54.886854+02'::timestamptz + g * interval '1 s' END,
		             '2026-11-21'::date + g,
		             CASE g % 3 WHEN 0 THEN 'NaN'::float8 WHEN 1 THEN 'Infinity'::float8 ELSE -1e300 END,
		             CASE WHEN g % 2 = 0 THEN NULL ELSE E'line1\nline2 "quoted" tab\tend' END
		      FROM generate_series(1, 50) g;
		    PERFORM outbox_emit_message((ARRAY['order','customer','invoice'])[t % 3 + 1], 'm-' || t,
		                                'messaged', jsonb_build_object('t', t));
		    COMMIT;
		  END LOOP;
		END $$;
		BEGIN;
		INSERT INTO ev (id, aggregate_type, aggregate_id, event_type, payload)
		  SELECT 'b-' || g, 'bulk', 'dup-across-tx', 'again', '{}' FROM generate_series(100, 120) g;
		SELECT 1 FROM pg_logical_emit_message(true, 'outbox', json_build_object('id', 'b-5', 'aggregate_type', 'bulk',
		  'aggregate_id', 'msg', 'event_type', 'again', 'payload', '{}'::json)::text);
		INSERT INTO ev (id, aggregate_type, aggregate_id, event_type, payload) VALUES ('x-1', 'customer', 'x', 'row', '{}');
		SELECT 1 FROM pg_logical_emit_message(true, 'outbox', json_build_object('id', 'x-1', 'aggregate_type', 'customer',
		  'aggregate_id', 'x', 'event_type', 'message-same-id', 'payload', '{}'::json)::text);
		SELECT 1 FROM pg_logical_emit_message(true, 'outbox', json_build_object('id', 'msg-dup-1', 'aggregate_type', 'order',
		  'aggregate_id', 'm', 'event_type', 'first', 'payload', '{}'::json)::text);
		COMMIT;
		BEGIN;
		INSERT INTO ev (id, aggregate_type, aggregate_id, event_type, payload) VALUES ('big-0', 'order', 'big', 'before', '{}');
		INSERT INTO ev (id, aggregate_type, aggregate_id, event_type, payload, note)
		  VALUES ('big-1', 'order', 'big', 'large', jsonb_build_object('blob', repeat('x', 102400)), NULL);
		INSERT INTO ev (id, aggregate_type, aggregate_id, event_type, payload) VALUES ('big-2', 'order', 'big', 'after', '{}');
		INSERT INTO ev (id, aggregate_type, aggregate_id, event_type, payload) VALUES (NULL, 'order', 'null-id', 'dead', '{}');
		SELECT 1 FROM pg_logical_emit_message(true, 'outbox', json_build_object('id', 'msg-dup-1', 'aggregate_type', 'order',
		  'aggregate_id', 'm', 'event_type', 'second', 'payload', '{}'::json)::text);
		COMMIT;
		INSERT INTO ev (id, aggregate_type, aggregate_id, event_type, payload) VALUES ('marker-1', 'marker', 'm', 'part1', '{}');
	SQL
	# Both relays stream part 1 and are killed once its last event is in Redis.
	REDIS_URL=redis://127.0.0.1:$PF
	relay_start --slot s_f --publish function "${OPTS[@]}"
	pid_f=$RELAY_PID
	lf=$RELAY_LOG
	REDIS_URL=redis://127.0.0.1:$PN
	relay_start --slot s_n --publish native --http-addr 127.0.0.1:0 "${OPTS[@]}"
	pid_n=$RELAY_PID
	ln2=$RELAY_LOG
	REDIS_URL=redis://127.0.0.1:$PP
	relay_start --slot s_p --publish native --no-native-predict "${OPTS[@]}"
	pid_p=$RELAY_PID
	lp=$RELAY_LOG
	REDIS_URL=redis://127.0.0.1:$PR
	relay_start --slot s_r --publish native --dedup-record 0 "${OPTS[@]}"
	pid_r=$RELAY_PID
	lr=$RELAY_LOG
	wait_for "[ \"\$($RX 127.0.0.1:$PF fields outbox:marker id)\" = marker-1 ]" 240 ||
		fail "(a) function: part 1 not published in 240 s ($(tail -n 3 "$lf" | cut -c1-300))"
	wait_for "[ \"\$($RX 127.0.0.1:$PN fields outbox:marker id)\" = marker-1 ]" 240 ||
		fail "(a) native: part 1 not published in 240 s ($(tail -n 3 "$ln2" | cut -c1-300))"
	wait_for "[ \"\$($RX 127.0.0.1:$PP fields outbox:marker id)\" = marker-1 ]" 240 ||
		fail "(a) native, --no-native-predict: part 1 not published in 240 s ($(tail -n 3 "$lp" | cut -c1-300))"
	wait_for "[ \"\$($RX 127.0.0.1:$PR fields outbox:marker id)\" = marker-1 ]" 240 ||
		fail "(a) native, --dedup-record 0: part 1 not published in 240 s ($(tail -n 3 "$lr" | cut -c1-300))"
	# The native relay's id record left lookups out in part 1 (its count dies with the kill).
	port=$(metrics_port "$ln2")
	skipped=$(metric_value "$port" outbox_relay_redis_dedup_lookups_skipped_total)
	log "(a) native: $skipped lookups left out in part 1, $(metric_value "$port" outbox_relay_redis_dedup_record_bytes) bytes of record"
	kill -9 "$pid_f" "$pid_n" "$pid_p" "$pid_r"
	wait "$pid_f" 2>/dev/null || true
	wait "$pid_n" 2>/dev/null || true
	wait "$pid_p" 2>/dev/null || true
	wait "$pid_r" 2>/dev/null || true
	RELAY_PID=
	log "(a) the four relays killed with SIGKILL after part 1"
	# Each slot back to where it began.
	for m in f n p r; do
		wait_for "! slot_active s_$m" 60 || fail "(a) slot s_$m still active 60 s after the relay was killed"
		psql_q "SELECT pg_drop_replication_slot('s_$m')" >/dev/null
		psql_q "SELECT 1 FROM pg_copy_logical_replication_slot('bak_$m', 's_$m')" >/dev/null
		psql_q "SELECT pg_drop_replication_slot('bak_$m')" >/dev/null
	done
	# Part 2: ids of part 1 again, new ids, messages, another large value.
	psql_q >/dev/null <<-'SQL'
		BEGIN;
		INSERT INTO ev (id, aggregate_type, aggregate_id, event_type, payload)
		  SELECT 'b-' || g, 'bulk', 'part2-dup', 'again', '{}' FROM generate_series(1, 200) g;
		INSERT INTO ev (id, aggregate_type, aggregate_id, event_type, payload)
		  SELECT 'b2-' || g, 'bulk', (g % 13)::text, 'created', jsonb_build_object('g', g) FROM generate_series(1, 600) g;
		COMMIT;
		BEGIN;
		INSERT INTO ev (id, aggregate_type, aggregate_id, event_type, payload)
		  SELECT id, aggregate_type, 'part2-dup', 'again', '{}' FROM ev WHERE aggregate_type IN ('order', 'customer')
		    AND id IS NOT NULL ORDER BY aggregate_id, id LIMIT 40;
		SELECT 1 FROM outbox_emit_message('invoice', 'm2', 'messaged', '{"part": 2}');
		INSERT INTO ev (id, aggregate_type, aggregate_id, event_type, payload, hj, note)
		  VALUES ('p2-1', 'invoice', 'p2', 'created', '{"a": [1, null]}', 'null', NULL);
		SELECT 1 FROM pg_logical_emit_message(true, 'outbox', json_build_object('id', 'x-1', 'aggregate_type', 'customer',
		  'aggregate_id', 'x', 'event_type', 'message-part2', 'payload', '{}'::json)::text);
		COMMIT;
		INSERT INTO ev (id, aggregate_type, aggregate_id, event_type, payload)
		  VALUES ('big-3', 'invoice', 'big', 'large', jsonb_build_object('blob', repeat('y', 102400)));
		INSERT INTO ev (id, aggregate_type, aggregate_id, event_type, payload) VALUES (NULL, 'invoice', 'null-id', 'dead', '{}');
		INSERT INTO ev (id, aggregate_type, aggregate_id, event_type, payload) VALUES ('marker-2', 'marker', 'm', 'part2', '{}');
	SQL
	l2=$(current_lsn)
	REDIS_URL=redis://127.0.0.1:$PF
	relay_run_until "$l2" --slot s_f --publish function "${OPTS[@]}" || fail "(a) function: the drain after the kill exited $RELAY_RC"
	F_LOGS=$RELAY_LOG
	REDIS_URL=redis://127.0.0.1:$PN
	# Without reading part 1's buckets into its record: a unit that reads them
	# sends no predicted lookups, and this relay is the one whose predictions
	# are counted. The relay without predictions reads them (below).
	relay_run_until "$l2" --slot s_n --publish native --dedup-record-seed 0 "${OPTS[@]}" ||
		fail "(a) native: the drain after the kill exited $RELAY_RC"
	N_LOGS=$RELAY_LOG
	REDIS_URL=redis://127.0.0.1:$PP
	relay_run_until "$l2" --slot s_p --publish native --no-native-predict "${OPTS[@]}" ||
		fail "(a) native, --no-native-predict: the drain after the kill exited $RELAY_RC"
	P_LOGS=$RELAY_LOG
	REDIS_URL=redis://127.0.0.1:$PR
	relay_run_until "$l2" --slot s_r --publish native --dedup-record 0 "${OPTS[@]}" ||
		fail "(a) native, --dedup-record 0: the drain after the kill exited $RELAY_RC"
	R_LOGS=$RELAY_LOG
	REDIS_URL=unix://$REDIS_SOCK

	# The function's run on its own: every id once, nothing else.
	psql_q "SELECT DISTINCT id FROM ev WHERE id IS NOT NULL" >"$T/a.rows"
	$RX "127.0.0.1:$PF" ids 'outbox:*' outbox:dead-letter >"$T/a.f.ids"
	{
		cat "$T/a.rows"
		echo msg-dup-1
		grep -vxF -f "$T/a.rows" "$T/a.f.ids" | grep -v '^msg-dup-1$' | grep -E '^[0-9a-f-]{36}$' || true
	} | sort -u >"$T/a.f.exp"
	ids_exactly_once "$T/a.f.exp" "$T/a.f.ids" "(a) function"
	assert_eq 32 "$(($(wc -l <"$T/a.f.exp") - $(wc -l <"$T/a.rows")))" "(a) function: the 31 messages of random ids and msg-dup-1 (x-1 and b-5 came as rows first)"

	# The two Redis, compared (a difference is reported after the counts below).
	same=1
	same_state "(a)" "127.0.0.1:$PF" "127.0.0.1:$PN" || same=
	[ -z "$same" ] || ok "(a) both Redis hold the same streams and dedup state"

	assert_eq 2 "$($RX "127.0.0.1:$PF" cmd XLEN outbox:dead-letter)" "(a) function: the two NULL ids dead-lettered once each"
	for x in published duplicates replays dead_lettered; do
		assert_eq "$(final_sum "$F_LOGS" $x)" "$(final_sum "$N_LOGS" $x)" "(a) $x: the same in both modes"
	done
	assert_ge "$(final_sum "$F_LOGS" replays)" 3000 "(a) part 1 replayed after the kill (dropped by the watermark)"
	assert_ge "$(final_sum "$F_LOGS" duplicates)" 240 "(a) part 2's ids of part 1 dropped as duplicates"
	assert_eq 0 "$(final_sum "$F_LOGS" native_batches)" "(a) --publish function: no native batch"
	assert_ge "$(final_sum "$F_LOGS" function_batches)" 20 "(a) --publish function: every batch through the function"
	assert_ge "$(final_sum "$N_LOGS" native_batches)" 1 "(a) --publish native: batches written natively"
	assert_ge 8 "$(final_sum "$N_LOGS" function_batches)" "(a) --publish native: only the large-value and dead-letter batches through the function"
	[ -n "$same" ] || fail "(a) the two modes' Redis differ (above)"

	# Lookups predicted and sent with read 1, against lookups made from read 1's answers.
	same_state "(a) prediction" "127.0.0.1:$PP" "127.0.0.1:$PN" no-predict predicted ||
		fail "(a) native with and without --no-native-predict: the two Redis differ (above)"
	for x in published duplicates replays dead_lettered; do
		assert_eq "$(final_sum "$P_LOGS" $x)" "$(final_sum "$N_LOGS" $x)" "(a) $x: the same with and without --no-native-predict"
	done
	assert_ge "$(final_sum "$N_LOGS" native_predicted)" 1 "(a) native: units written with their predicted lookups"
	assert_eq 0 "$(final_sum "$P_LOGS" native_predicted)" "(a) --no-native-predict: no predicted lookups"
	assert_eq 0 "$(final_sum "$P_LOGS" predict_missed)" "(a) --no-native-predict: no predicted lookups dropped"
	# The id record's lookups left out, against every id looked up.
	same_state "(a) id record" "127.0.0.1:$PR" "127.0.0.1:$PN" no-record record ||
		fail "(a) native with and without --dedup-record 0: the two Redis differ (above)"
	for x in published duplicates replays dead_lettered; do
		assert_eq "$(final_sum "$R_LOGS" $x)" "$(final_sum "$N_LOGS" $x)" "(a) $x: the same with and without --dedup-record 0"
	done
	assert_ge "$skipped" 100 "(a) native: part 1's lookups left out by the id record (before the kill)"
	# After the kill the buckets of part 1 are read into the record, then lookups are left out.
	# After the kill the relay without predictions reads part 1's buckets into
	# its record, then leaves lookups out (its Redis holds what the native
	# one's does, and so does the one with --dedup-record 0's); the native
	# one, with --dedup-record-seed 0, reads nothing and so leaves nothing out.
	assert_ge "$(final_sum "$P_LOGS" record_ids_read)" 1000 "(a) native, --no-native-predict, after the kill: part 1's ids read into the record"
	assert_ge "$(final_sum "$P_LOGS" lookups_skipped)" 1 "(a) native, --no-native-predict, after the kill: lookups left out once the buckets were read"
	assert_eq 0 "$(final_sum "$N_LOGS" record_ids_read)" "(a) native, --dedup-record-seed 0: nothing read into the record"
	assert_eq 0 "$(final_sum "$N_LOGS" lookups_skipped)" "(a) native, --dedup-record-seed 0, after the kill: the buckets were made before it, so nothing left out"
	assert_eq 0 "$(final_sum "$R_LOGS" record_ids_read)" "(a) --dedup-record 0: nothing read into a record"
	assert_eq 0 "$(final_sum "$R_LOGS" lookups_skipped)" "(a) --dedup-record 0: no lookup left out"
	# Part 2 was committed before the drains began: each relay caught up, its batches waiting
	# for more events.
	for x in "$F_LOGS" "$N_LOGS" "$P_LOGS" "$R_LOGS"; do
		assert_ge "$(final_sum "$x" catchup_waits)" 1 "(a) $(basename "$x"): batches that waited for more events while catching up"
	done
	log "(a) native: $(grep -o 'native_groups=.*predict_missed=[0-9]*' "$N_LOGS" | tail -n 1)"
}

# ---------------------------------------------------------------------------
# (b) function, native, function on one Redis
# ---------------------------------------------------------------------------
case_b() {
	local nlog
	redis_start
	slot_create s_sw
	ins() { # FROM TO STREAM EVENT_TYPE: rows sw-FROM..sw-TO in one transaction
		psql_q "INSERT INTO ev (id, aggregate_type, aggregate_id, event_type, payload)
		        SELECT 'sw-' || g, '$3', g::text, '$4', '{}' FROM generate_series($1, $2) g"
	}
	ins 1 400 sw1 part1
	ins 401 800 sw2 part1
	psql_q "SELECT outbox_emit_message('sw1', 'msg', 'part1', '{}')" >/dev/null
	relay_drain --slot s_sw --publish function "${OPTS[@]}"
	ins 1 100 sw1 part2-dup
	ins 401 500 sw2 part2-dup
	ins 801 1200 sw1 part2
	psql_q "SELECT outbox_emit_message('sw2', 'msg', 'part2', '{}')" >/dev/null
	relay_drain --slot s_sw --publish native "${OPTS[@]}"
	nlog=$RELAY_LOG
	ins 1 50 sw1 part3-dup
	ins 801 900 sw1 part3-dup
	ins 1201 1500 sw2 part3
	ins 450 460 sw2 part3-dup
	relay_drain --slot s_sw --publish function "${OPTS[@]}"
	psql_q "SELECT DISTINCT id FROM ev WHERE id LIKE 'sw-%'" >"$T/b.exp"
	rx ids 'outbox:sw*' >"$T/b.got"
	grep -v '^sw-' "$T/b.got" >>"$T/b.exp" || true
	assert_eq 2 "$(grep -vc '^sw-' "$T/b.exp")" "(b) the two messages"
	ids_exactly_once "$T/b.exp" "$T/b.got" "(b) across function -> native -> function"
	assert_eq 0 "$(rx fields outbox:sw1 event_type | grep -c dup || true)" "(b) sw1: no duplicate row published"
	assert_eq 0 "$(rx fields outbox:sw2 event_type | grep -c dup || true)" "(b) sw2: no duplicate row published"
	assert_eq 200 "$(final_sum "$nlog" duplicates)" "(b) native: the 200 ids published by the function dropped"
	assert_ge "$(final_sum "$nlog" native_batches)" 1 "(b) native: batches written natively"
	assert_eq 161 "$(final_sum "$RELAY_LOG" duplicates)" "(b) function again: the 161 ids published before (by both modes) dropped"
}

# ---------------------------------------------------------------------------
# (c) a bad --publish
# ---------------------------------------------------------------------------
case_c() {
	REDIS_URL=unix://$T/none.sock
	relay_run --publish bogus || true
	assert_eq 2 "$RELAY_RC" "(c) --publish bogus: exit code"
	assert_eq 1 "$(grep -c . "$RELAY_LOG")" "(c) one line [$(head -c 300 "$RELAY_LOG")]"
	assert_contains "$(cat "$RELAY_LOG")" "--publish" "(c) the line names --publish"
	OUTBOX_RELAY_PUBLISH=bogus relay_run || true
	assert_eq 2 "$RELAY_RC" "(c) OUTBOX_RELAY_PUBLISH=bogus: exit code"
	assert_eq 1 "$(grep -c . "$RELAY_LOG")" "(c) one line [$(head -c 300 "$RELAY_LOG")]"
	assert_contains "$(cat "$RELAY_LOG")" "OUTBOX_RELAY_PUBLISH" "(c) the line names OUTBOX_RELAY_PUBLISH"
}

# ---------------------------------------------------------------------------
# (d) EXECs that fail with the next group read ahead
# ---------------------------------------------------------------------------
case_d() {
	local PF PN l noise flog nlog x
	PF=$(rnode_new)
	PN=$(rnode_new)
	slot_create d_f
	psql_q "SELECT 1 FROM pg_copy_logical_replication_slot('d_f', 'd_n')" >/dev/null
	# 12 rows a transaction; 5 of each transaction's ids are the next one's too.
	psql_q >/dev/null <<-'SQL'
		DO $$ BEGIN
		  FOR t IN 1..300 LOOP
		    INSERT INTO ev (id, aggregate_type, aggregate_id, event_type, payload)
		      SELECT 'd-' || (t * 7 + g), (ARRAY['da', 'db', 'dc'])[(t + g) % 3 + 1], g::text, 'e' || t,
		             jsonb_build_object('t', t, 'g', g)
		      FROM generate_series(1, 12) g;
		    COMMIT;
		  END LOOP;
		END $$;
	SQL
	l=$(current_lsn)
	REDIS_URL=redis://127.0.0.1:$PF
	relay_run_until "$l" --slot d_f --publish function "${OPTS[@]}" || fail "(d) function: the drain exited $RELAY_RC"
	flog=$RELAY_LOG
	redis-cli -h 127.0.0.1 -p "$PN" -r 1000000000 -i 0.0005 XADD outbox:dead-letter MAXLEN 0 '*' noise 1 >/dev/null 2>&1 &
	noise=$!
	REDIS_URL=redis://127.0.0.1:$PN
	relay_run_until "$l" --slot d_n --publish native "${OPTS[@]}" || x=$RELAY_RC
	nlog=$RELAY_LOG
	kill "$noise" 2>/dev/null || true
	wait "$noise" 2>/dev/null || true
	[ -z "${x:-}" ] || fail "(d) native: the drain exited $x"
	redis-cli -h 127.0.0.1 -p "$PN" DEL outbox:dead-letter >/dev/null
	REDIS_URL=unix://$REDIS_SOCK
	same_state "(d)" "127.0.0.1:$PF" "127.0.0.1:$PN" || fail "(d) the two modes' Redis differ (above)"
	ok "(d) both Redis hold the same streams and dedup state"
	# ids d-8 .. d-2112: 2105 of the 3600 rows; the rest duplicates.
	assert_eq "2105 1495" "$(final_sum "$flog" published) $(final_sum "$flog" duplicates)" "(d) function: published, duplicates"
	for x in published duplicates replays; do
		assert_eq "$(final_sum "$flog" $x)" "$(final_sum "$nlog" $x)" "(d) $x: the same in both modes"
	done
	log "(d) native: $(grep -o 'native_batches=.*' "$nlog" | tail -n 1)"
	assert_ge "$(final_sum "$nlog" watch_retries)" 1 "(d) native: EXECs answered nil (a watched key written)"
	assert_ge "$(final_sum "$nlog" native_ahead)" 1 "(d) native: groups read ahead"
	assert_ge "$(final_sum "$nlog" ahead_voided)" 1 "(d) native: reads ahead dropped after a failed EXEC"
	assert_ge "$(final_sum "$nlog" native_late)" 1 "(d) native: calls that joined their unit after its read 1"
}

# ---------------------------------------------------------------------------
# (e) another writer adds to a bucket the id record holds
# ---------------------------------------------------------------------------
case_e() {
	local la port n0 n1
	redis_start
	psql_q "CREATE TABLE public.ev2 (LIKE public.ev)"
	slot_create e_a
	slot_create e_b
	relay_start --slot e_a --publish native --http-addr 127.0.0.1:0 "${OPTS[@]}"
	la=$RELAY_LOG
	port=$(metrics_port "$la")
	psql_q "INSERT INTO ev (id, aggregate_type, aggregate_id, event_type, payload)
	        SELECT 'e-' || g, 'er', g::text, 'first', '{}' FROM generate_series(1, 20) g"
	wait_for "[ \"\$(xlen outbox:er)\" = 20 ]" 120 || fail "(e) the first 20 rows not published"
	psql_q "INSERT INTO ev (id, aggregate_type, aggregate_id, event_type, payload)
	        SELECT 'e-' || g, 'er', g::text, 'second', '{}' FROM generate_series(21, 40) g"
	wait_for "[ \"\$(xlen outbox:er)\" = 40 ]" 120 || fail "(e) the next 20 rows not published"
	n0=$(metric_value "$port" outbox_relay_redis_dedup_lookups_skipped_total)
	assert_ge "$n0" 20 "(e) the second transaction's lookups left out: its bucket holds only the relay's ids"
	# Relay B, on its own slot and table, writes e-a and e-b into the same stream and bucket.
	psql_q "INSERT INTO ev2 (id, aggregate_type, aggregate_id, event_type, payload)
	        VALUES ('e-a', 'er', 'a', 'other-writer', '{}'), ('e-b', 'er', 'b', 'other-writer', '{}')"
	relay_run_until "$(current_lsn)" --slot e_b --publish function --table public.ev2 \
		--dedup-window "$DW" || fail "(e) relay B exited $RELAY_RC"
	assert_eq 42 "$(xlen outbox:er)" "(e) relay B published e-a and e-b"
	# A's table: e-a and e-b (B's), 20 new ids.
	psql_q "INSERT INTO ev (id, aggregate_type, aggregate_id, event_type, payload)
	        SELECT x, 'er', x, 'third', '{}'::jsonb FROM unnest(ARRAY['e-a', 'e-b']) x
	        UNION ALL SELECT 'e-' || g, 'er', g::text, 'third', '{}' FROM generate_series(41, 60) g"
	wait_confirmed e_a "$(current_lsn)" 120 || fail "(e) relay A did not confirm the third transaction"
	assert_eq 62 "$(xlen outbox:er)" "(e) A's third transaction: its 20 new ids, not e-a or e-b again"
	n1=$(metric_value "$port" outbox_relay_redis_dedup_lookups_skipped_total)
	# Then 20 more new ids and e-1 again: the bucket is no longer recorded, everything looked up.
	psql_q "INSERT INTO ev (id, aggregate_type, aggregate_id, event_type, payload)
	        SELECT 'e-' || g, 'er', g::text, 'fourth', '{}'::jsonb FROM generate_series(61, 80) g
	        UNION ALL SELECT 'e-1', 'er', '1', 'fourth', '{}'"
	wait_confirmed e_a "$(current_lsn)" 120 || fail "(e) relay A did not confirm the fourth transaction"
	assert_eq 82 "$(xlen outbox:er)" "(e) A's fourth transaction: its 20 new ids, not e-1 again"
	relay_stop
	{
		seq 1 80 | sed 's/^/e-/'
		printf 'e-a\ne-b\n'
	} | sort >"$T/e.exp"
	rx ids outbox:er >"$T/e.got"
	ids_exactly_once "$T/e.exp" "$T/e.got" "(e) each id once"
	assert_eq "20 20" "$(rx fields outbox:er event_type | grep -c '^third$') $(rx fields outbox:er event_type | grep -c '^fourth$')" \
		"(e) A published its 20 new ids of each later transaction, not e-a, e-b or e-1 again"
	assert_eq 3 "$(final_sum "$la" duplicates)" "(e) A dropped e-a, e-b (B's) and e-1 as duplicates"
	assert_eq "$n1" "$(final_sum "$la" lookups_skipped)" "(e) nothing left out after the other writer's ids: the bucket's record was dropped"
	assert_eq "$n0" "$n1" "(e) the write after the other writer's ids looked everything up"
}

# one_then_all X N: (case X, slot X_a, stream outbox:Xr) X-N committed alone, then
# X-1..X-(N+10) in one transaction, each confirmed; the relay stopped, and each of
# the N + 10 ids must be in the stream once.
one_then_all() {
	local x=$1 n=$2
	psql_q "INSERT INTO ev (id, aggregate_type, aggregate_id, event_type, payload) VALUES ('$x-$n', '${x}r', '$n', 'one', '{}')"
	wait_confirmed "${x}_a" "$(current_lsn)" 120 || fail "($x) $x-$n not confirmed"
	psql_q "INSERT INTO ev (id, aggregate_type, aggregate_id, event_type, payload)
	        SELECT '$x-' || g, '${x}r', g::text, 'again', '{}' FROM generate_series(1, $((n + 10))) g"
	wait_confirmed "${x}_a" "$(current_lsn)" 120 || fail "($x) the last transaction not confirmed"
	relay_stop
	seq 1 $((n + 10)) | sed "s/^/$x-/" | sort >"$T/$x.exp"
	rx ids "outbox:${x}r" >"$T/$x.got"
	ids_exactly_once "$T/$x.exp" "$T/$x.got" "($x) each id once"
}

# ---------------------------------------------------------------------------
# (f) a bucket made before the start, read into the record while it splits
# ---------------------------------------------------------------------------
case_f() {
	local l1 l2 port
	redis_start
	slot_create f_a
	relay_start --slot f_a --publish native --dedup-record-seed 1 "${OPTS[@]}"
	l1=$RELAY_LOG
	psql_q "INSERT INTO ev (id, aggregate_type, aggregate_id, event_type, payload)
	        SELECT 'f-' || g, 'fr', g::text, 'first', '{}' FROM generate_series(1, 40) g"
	wait_confirmed f_a "$(current_lsn)" 120 || fail "(f) the first 40 rows not confirmed"
	relay_stop
	assert_eq 40 "$(xlen outbox:fr)" "(f) first run: 40 ids"
	assert_eq 0 "$(final_sum "$l1" record_ids_read)" "(f) first run: the bucket is its own, nothing read"
	assert_eq 2 "$(redis_cli HGETALL 'outbox-relay:dd:{outbox:fr}' |
		awk '/^[0-9]+:[0-9]+$/ { getline v; split(v, a, " "); print a[1] }')" \
		"(f) the bucket has two hashes (K) before the restart"
	# Committed before the start and held together (--linger): one group, whose
	# write grows K while its read 2 reads hash 0.
	psql_q "INSERT INTO ev (id, aggregate_type, aggregate_id, event_type, payload)
	        SELECT 'f-' || g, 'fr', g::text, 'grow', '{}' FROM generate_series(41, 140) g"
	relay_start --slot f_a --publish native --dedup-record-seed 1 --linger 300ms --http-addr 127.0.0.1:0 "${OPTS[@]}"
	l2=$RELAY_LOG
	port=$(metrics_port "$l2")
	wait_confirmed f_a "$(current_lsn)" 120 || fail "(f) the 100 rows not confirmed"
	assert_ge "$(metric_value "$port" outbox_relay_redis_dedup_record_ids_read_total)" 1 "(f) hash 0 read into the record"
	one_then_all f 141
	assert_eq 141 "$(final_sum "$l2" duplicates)" "(f) the second run dropped the 141 ids written before as duplicates"
	assert_ge "$(final_sum "$l2" record_ids_read)" 20 "(f) the second run read the bucket's ids into its record"
	assert_ge "$(final_sum "$l2" lookups_skipped)" 1 "(f) lookups left out once the bucket was read"
}

# ---------------------------------------------------------------------------
# (g) one hash per event of the group, at least 16
# ---------------------------------------------------------------------------
case_g() {
	local l k n h0 h1 i port
	# The earlier cases' slots are done with (max_replication_slots is 10).
	psql_q "SELECT count(pg_drop_replication_slot(slot_name)) FROM pg_replication_slots WHERE NOT active" >/dev/null
	redis_start
	slot_create g_a
	relay_start --slot g_a --publish native "${OPTS[@]}"
	psql_q "INSERT INTO ev (id, aggregate_type, aggregate_id, event_type, payload)
	        SELECT 'g-' || g, 'gr', g::text, 'first', '{}' FROM generate_series(1, 3000) g"
	wait_confirmed g_a "$(current_lsn)" 120 || fail "(g) the 3,000 rows not confirmed"
	relay_stop
	k=$(redis_cli HGETALL 'outbox-relay:dd:{outbox:gr}' |
		awk '/^[0-9]+:[0-9]+$/ { getline v; split(v, a, " "); print a[1] }')
	assert_ge "$k" 64 "(g) the bucket has at least 64 hashes (K) before the restart"
	# --linger: a transaction's events are one group, however slowly the relay decodes them
	# (a 40-row transaction takes ms; 1 s leaves a slow machine room).
	relay_start --slot g_a --publish native --linger 1s --http-addr 127.0.0.1:0 "${OPTS[@]}"
	l=$RELAY_LOG
	port=$(metrics_port "$l")
	h0=$(redis_calls hkeys)
	psql_q "INSERT INTO ev (id, aggregate_type, aggregate_id, event_type, payload) VALUES ('g-3001', 'gr', '3001', 'one', '{}')"
	wait_confirmed g_a "$(current_lsn)" 120 || fail "(g) g-3001 not confirmed"
	h1=$(redis_calls hkeys)
	assert_eq 16 "$((h1 - h0))" "(g) a group of one event read 16 hashes"
	psql_q "INSERT INTO ev (id, aggregate_type, aggregate_id, event_type, payload)
	        SELECT 'g-' || g, 'gr', g::text, 'forty', '{}' FROM generate_series(3002, 3041) g"
	wait_confirmed g_a "$(current_lsn)" 120 || fail "(g) the 40 rows not confirmed"
	h0=$h1
	h1=$(redis_calls hkeys)
	n=$((k - 16 < 40 ? k - 16 : 40))
	assert_eq "$n" "$((h1 - h0))" "(g) a group of 40 events read 40 hashes (or what was left of $k)"
	for i in $(seq 3042 3200); do
		[ "$h1" -lt "$k" ] || break
		psql_q "INSERT INTO ev (id, aggregate_type, aggregate_id, event_type, payload) VALUES ('g-$i', 'gr', '$i', 'one', '{}')"
		wait_confirmed g_a "$(current_lsn)" 120 || fail "(g) g-$i not confirmed"
		h0=$h1
		h1=$(redis_calls hkeys)
		assert_ge 16 "$((h1 - h0))" "(g) g-$i's group read at most 16 hashes"
	done
	assert_ge "$(metric_value "$port" outbox_relay_redis_dedup_record_ids_read_total)" 3000 "(g) the bucket's ids read into the record"
	n=$(metric_value "$port" outbox_relay_redis_dedup_lookups_skipped_total)
	psql_q "INSERT INTO ev (id, aggregate_type, aggregate_id, event_type, payload) VALUES ('g-3500', 'gr', '3500', 'last', '{}')"
	wait_confirmed g_a "$(current_lsn)" 120 || fail "(g) g-3500 not confirmed"
	assert_ge "$(metric_value "$port" outbox_relay_redis_dedup_lookups_skipped_total)" "$((n + 1))" "(g) once read, the lookup is left out"
	relay_stop
	assert_eq 0 "$RELAY_RC" "(g) the relay stopped cleanly"
}

# hr_index N: word N (1: K, 2: the count) of stream outbox:hr's live bucket in the dedup index.
hr_index() {
	redis_cli HGETALL 'outbox-relay:dd:{outbox:hr}' |
		awk -v n="$1" '/^[0-9]+:[0-9]+$/ { getline v; split(v, a, " "); print a[n] }'
}

# ---------------------------------------------------------------------------
# (h) another writer's split, with no id added, while the record is read
# ---------------------------------------------------------------------------
case_h() {
	local l2 port k
	psql_q "SELECT count(pg_drop_replication_slot(slot_name)) FROM pg_replication_slots WHERE NOT active" >/dev/null
	redis_start
	psql_q "CREATE TABLE IF NOT EXISTS public.ev2 (LIKE public.ev)"
	slot_create h_a
	slot_create h_b
	relay_start --slot h_a --publish native --dedup-record-seed 1 "${OPTS[@]}"
	psql_q "INSERT INTO ev (id, aggregate_type, aggregate_id, event_type, payload)
	        SELECT 'h-' || g, 'hr', g::text, 'first', '{}' FROM generate_series(1, 40) g"
	wait_confirmed h_a "$(current_lsn)" 120 || fail "(h) the first 40 rows not confirmed"
	relay_stop
	assert_eq 2 "$(hr_index 1)" "(h) the bucket has two hashes (K) before the restart"
	relay_start --slot h_a --publish native --dedup-record-seed 1 --http-addr 127.0.0.1:0 "${OPTS[@]}"
	l2=$RELAY_LOG
	port=$(metrics_port "$l2")
	psql_q "INSERT INTO ev (id, aggregate_type, aggregate_id, event_type, payload) VALUES ('h-41', 'hr', '41', 'one', '{}')"
	wait_confirmed h_a "$(current_lsn)" 120 || fail "(h) h-41 not confirmed"
	assert_ge "$(metric_value "$port" outbox_relay_redis_dedup_record_ids_read_total)" 1 "(h) hash 0 read into the record"
	# Relay B (the function, its own slot and table) publishes h-1..h-40 twice: all
	# duplicates, no id added, but its call expects 80 ids and grows K from 2 to 6:
	# hash 1, not read yet, splits into hashes 3 and 5, which the read never reaches.
	psql_q "INSERT INTO ev2 (id, aggregate_type, aggregate_id, event_type, payload)
	        SELECT 'h-' || (g % 40 + 1), 'hr', g::text, 'other-writer', '{}' FROM generate_series(0, 79) g"
	relay_run_until "$(current_lsn)" --slot h_b --publish function --table public.ev2 \
		--dedup-window "$DW" || fail "(h) relay B exited $RELAY_RC"
	assert_eq 80 "$(final_sum "$RELAY_LOG" duplicates)" "(h) relay B: all 80 duplicates"
	k=$(hr_index 1)
	assert_ge "$k" 4 "(h) relay B's call grew K past 3 (hash 1 split)"
	assert_eq 41 "$(hr_index 2)" "(h) and added no id: the bucket still counts 41"
	# A goes on: the next group would read hash 1, the last below the first read's K.
	one_then_all h 42
	assert_eq 42 "$(final_sum "$l2" duplicates)" "(h) the second run dropped the 42 ids written before as duplicates"
}

run_case a case_a
run_case b case_b
run_case c case_c
run_case d case_d
run_case e case_e
run_case f case_f
run_case g case_g
run_case h case_h
[ "${#CASES_FAILED[@]}" = 0 ] || fail "cases failed: ${CASES_FAILED[*]} (passed: ${CASES_OK[*]:-none})"
pass
