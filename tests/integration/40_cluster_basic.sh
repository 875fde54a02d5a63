#!/bin/bash
# 40_cluster_basic: a Redis Cluster of 3 masters (loopback TCP), relay with
# --redis-url redis-cluster://P1,P2 (two seeds) and --stream
# 'outbox:{aggregate_id}': 5000 events over 50 aggregate ids (50 streams), in
# transactions of 1 to 200 rows that each touch many streams.
#   - every event exactly once across the masters, per stream in commit order;
#   - the streams are spread over all 3 masters;
#   - the function library outbox_relay is loaded on every master;
#   - each stream's watermark key (and dedup state and bucket hashes) hash to the stream's slot
#     and live on the master that holds the stream;
#   - --group creates the group on every stream (XGROUP routed per slot);
#   - a second run publishes nothing again.
. "$(dirname "$0")/lib.sh"
setup_tmp
pg_start
load_schema
cluster_start 3
slot_create outbox_relay
# shellcheck disable=SC2034 # REDIS_URL is read by lib.sh's _relay_args
REDIS_URL=$CLUSTER_URL
STREAM=(--stream 'outbox:{aggregate_id}')

# 5000 rows; n = 1..5000 in commit order; aggregate id agg-(n*7 % 50), so
# every transaction of 50+ rows writes to every stream. Transaction sizes
# cycle over 1, 7, 50, 200 rows.
psql_q "DO \$\$
DECLARE n int := 0; sizes int[] := ARRAY[1, 7, 50, 200]; k int := 0; s int;
BEGIN
  WHILE n < 5000 LOOP
    s := least(sizes[k % 4 + 1], 5000 - n);
    INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
      SELECT 'order', 'agg-' || (i * 7 % 50), 'created', jsonb_build_object('n', i)
      FROM generate_series(n + 1, n + s) i;
    COMMIT;
    n := n + s;
    k := k + 1;
  END LOOP;
END \$\$;"
assert_eq 5000 "$(psql_q "SELECT count(*) FROM outbox")" "rows written"
assert_eq 50 "$(psql_q "SELECT count(DISTINCT aggregate_id) FROM outbox")" "distinct aggregate ids"

t0=$(date +%s%N)
relay_drain "${STREAM[@]}" --group g
ms=$((($(date +%s%N) - t0) / 1000000))
log "relay drained 5000 events into the cluster in $ms ms"
assert_contains "$(cat "$RELAY_LOG")" "published=5000" "the relay reports 5000 events published"

# Exactly once, over all masters.
psql_q "SELECT id FROM outbox" >"$T/expected"
cluster_ids_exactly_once "$T/expected"

# Order per stream: commit order = n order.
psql_q "SELECT 'outbox:' || aggregate_id || E'\t' || id FROM outbox ORDER BY (payload->>'n')::int" >"$T/order"
cluster_assert_order "$T/order"

# Spread: which master holds which stream.
cluster_streams 'outbox:*' >"$T/where"
assert_eq 50 "$(wc -l <"$T/where")" "50 streams found over the masters (SCAN TYPE stream on each)"
for p in $CLUSTER_MASTER_PORTS; do
	n=$(awk -v p="$p" '$1 == p' "$T/where" | wc -l)
	assert_ge "$n" 1 "master $p holds some streams ($n)"
done

# The function library on every master.
for p in $CLUSTER_MASTER_PORTS; do
	lib=$(rcli "$p" FUNCTION LIST LIBRARYNAME outbox_relay)
	assert_contains "$lib" "outbox_relay_publish" "master $p: FUNCTION LIST shows outbox_relay_publish"
done

# Watermark and dedup keys co-located with their streams: asked on the
# stream's master without following redirections (a MOVED is a failure).
bad=$(python3 - "$_LIB_DIR" "$T/where" "$T/order" <<'PY'
import sys
sys.path.insert(0, sys.argv[1])
import rx
first = {}
for line in open(sys.argv[3]):
    s, i = line.rstrip("\n").split("\t")
    first.setdefault(s, i)
clients, bad = {}, []
for line in open(sys.argv[2]):
    port, s = line.split()
    c = clients.get(port)
    if c is None:
        c = clients[port] = rx.Client("127.0.0.1:" + port)
        c.follow_moved = False
    wm = "outbox-relay:wm:{%s}:outbox_relay" % s
    dd = "outbox-relay:dd:{%s}" % s
    try:
        meta = c.call("HGETALL", dd) or []
        buckets = [f for f in meta[::2] if f != "legacy"]
        sh = "%s:%s:0" % (dd, buckets[0] if buckets else "none")
        ks, kw, kd, kh = (c.call("CLUSTER", "KEYSLOT", k) for k in (s, wm, dd, sh))
        if not ks == kw == kd == kh:
            bad.append("%s: slot %s, watermark key slot %s, dedup keys' slots %s %s" % (s, ks, kw, kd, kh))
        elif c.call("EXISTS", wm) != 1 or c.call("EXISTS", dd) != 1 or c.call("EXISTS", sh) != 1:
            bad.append("%s: watermark, dedup state or bucket hash %s missing on %s" % (s, sh, port))
        elif "g" not in [dict(zip(g[::2], g[1::2]))["name"] for g in c.call("XINFO", "GROUPS", s)]:
            bad.append("%s: no consumer group g" % s)
    except rx.RespError as e:
        bad.append("%s on %s: %s" % (s, port, e))
print("; ".join(bad[:5]))
PY
) || fail "could not check the keys"
[ -z "$bad" ] || fail "keys not co-located with their streams: $bad"
ok "each of the 50 streams: its watermark key, dedup state and a bucket hash hash to its slot and live on its master; group g exists"
assert_eq "$(rcli "${CLUSTER_MASTER_PORTS%% *}" CLUSTER KEYSLOT 'outbox:agg-7')" \
	"$(rcli "${CLUSTER_MASTER_PORTS%% *}" CLUSTER KEYSLOT 'outbox-relay:wm:{outbox:agg-7}:outbox_relay')" \
	"CLUSTER KEYSLOT outbox:agg-7 = CLUSTER KEYSLOT outbox-relay:wm:{outbox:agg-7}:outbox_relay"

# A second run from the confirmed position publishes nothing.
relay_drain "${STREAM[@]}" --group g
cluster_ids_exactly_once "$T/expected"
pass
