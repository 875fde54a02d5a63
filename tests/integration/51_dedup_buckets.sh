#!/bin/bash
# 51_dedup_buckets: the dedup state of issue 11 §1 (per stream: time buckets of
# small hashes that expire whole; see README "Dedup state"), with
# --dedup-window 20 (buckets of 40 s; (c), (e), (f), (g), (k): a window of
# 30 min or more whose bucket lasts the test) and Redis on AOF (appendfsync
# always).
#   (a) An id published once is dropped when it comes again after a bucket
#       boundary, from a new relay process each time, and after Redis was
#       killed (SIGKILL) and restarted from its AOF: a UUID id (packed to 16
#       bytes) and a 12-byte text id (the escaped form).
#   (b) The same ids more than the window after they were published are
#       published again, while an id seen later within the window is still
#       dropped (the oldest bucket is checked to the second).
#   No check depends on the machine's speed (issue 21): each one's
#   precondition on Redis's clock (TIME read before and after a drain, or
#   around a call inside MULTI) is verified, and a run that missed it is
#   done again with a new stream, never failed.
#   (c) 3000 ids in one transaction committed while the relay streams: the
#       current bucket grows by splits to enough shards (a quarter of the ids
#       at least move between hashes), every one a listpack of at most 128
#       entries with a TTL; the same 3000 ids again are all dropped.
#   (e) 3000 ids in one transaction committed while no relay runs: the relay
#       that drains that backlog sizes the bucket from it (the calls' "ids to
#       come"; the bucket grows to them while it holds few ids), so few ids
#       move between hashes (a fifth at most); every shard a listpack with a
#       TTL; the same ids again all dropped.
#   (f) 300 ids followed by 20 MB of other WAL: the relay expects far more ids
#       than come (the WAL ahead is not outbox rows), sizes the bucket for
#       them, yet creates at most 1.25 shard keys per id; all are dropped
#       when they come again.
#   (g) A backlog of 200 streams of one id each: each id costs one key (a
#       stream's estimate goes by at least 64 of its events).
#   (o) (c)'s 3000 ids in one transaction committed while a pgoutput relay
#       streams: pgoutput holds the transaction until its commit, and the
#       calls expect their stream's share of its messages still to come, so
#       the bucket is sized at once (a fifth of the ids move at most).
#   (h) The split's prefix patterns: with the function library the relay
#       loaded, every pattern a split can send (HSCAN MATCH, up to 11 bits of
#       hash, every first byte of a field including the glob's own special
#       characters) selects exactly the fields the hash sends to the new
#       shard, in a hash large enough to scan in steps.
#   (k) Issue 21, finding 4: 20,000 UUIDv6 ids of one node (only their time
#       bytes vary; the shard hash used to read none of them), committed
#       while the relay streams: all published, spread over shards of at
#       most 128 (listpacks), all dropped when they come again.
#   (l) Upgrade from the bucket layout before issue 21 (buckets named
#       "<b>", fields without the 3-byte hash): ids in such a bucket, in
#       shards by the old hash, are still dropped.
#   (m) Issue 21, finding 7: two window lengths whose buckets have the same
#       number (86400 and 86401 mostly do) keep separate buckets: an id seen
#       with one is still a duplicate with the other, both ways.
#   (n) Issue 21, finding 4: 20,000 ids whose fields share the shard hash
#       (the worst case of any hash), through the function: splits that
#       move them all (more than Lua's unpack takes) do not fail, every id
#       is dropped when it comes again.
#   (i) Late in a bucket (more than a window after its start): an id of the
#       same bucket older than the window is published again (and its time
#       renewed, so it is dropped again right after), one inside it dropped.
#       Such an id whose entry the stream key refuses (dead-lettered) keeps
#       its old time: no id leaves a live bucket, its count never goes down.
#   (p) A command failing inside the call after an event was complete (a
#       shard that is a key of another type): the call still writes the
#       index's count and the watermark for that event, then the error.
#   (j) --dedup-window changed between runs: the buckets written with the old
#       one (each records its length) are still looked up, to the second, with
#       the new window.
#   (d) Upgrade: old-layout keys (one string key per id with a TTL, as the
#       previous release wrote, next to its watermark) for ids the new layout
#       never saw: the new relay drops those ids (UUID, text, 12-byte text)
#       and publishes the others; a stream that had no watermark needs no
#       transition (its "legacy" time is 0).
. "$(dirname "$0")/lib.sh"
setup_tmp
pg_start
load_schema
psql_q "CREATE TABLE public.outbox_loose (id text, aggregate_type text, aggregate_id text, event_type text,
                                          payload jsonb, headers jsonb, created_at timestamptz DEFAULT now())"
AOF=(--appendonly yes --appendfsync always)
redis_start "${AOF[@]}"
slot_create s1
W=20
ins() { psql_q "INSERT INTO outbox_loose (id, aggregate_type, aggregate_id, event_type, payload) VALUES ('$1', '$2', '$3', 'created', '{}')"; }
SLOT=s1
drain() { relay_drain --slot "$SLOT" --table public.outbox_loose --dedup-window $W; }
count() { rx fields "outbox:$1" id | grep -cx -- "$2" || true; }
buckets() { redis_cli HKEYS "outbox-relay:dd:{outbox:$1}" | grep -cv legacy || true; }
U1=6f1c2a34-8b9d-4e0f-a1b2-c3d4e5f60718
X12=abcdefghijkl

# (a) first publication 3 s before a bucket boundary (Redis's clock; buckets
# are two windows long), then the same ids after it, then after a Redis
# restart. Each drain's second is bracketed by TIME: a run whose first drain
# crossed the boundary, or whose later drains ended more than the window after
# the first began (a slow machine), is done again with a new stream.
rnow() { redis_cli TIME | head -n 1; }
n=0
while :; do
	n=$((n + 1))
	ORD=order$n
	while [ $(($(rnow) % (2 * W))) -ne $((2 * W - 4)) ]; do sleep 0.2; done
	tb=$(rnow)
	ins "$U1" "$ORD" first
	ins "$X12" "$ORD" first
	drain
	if [ $(($(rnow) / (2 * W))) -ne $((tb / (2 * W))) ]; then
		log "(a) the first drain ended after the bucket boundary: again with another stream"
		continue
	fi
	assert_eq 1 "$(count "$ORD" "$U1")" "(a) $U1 published"
	assert_eq 1 "$(count "$ORD" "$X12")" "(a) $X12 published"
	assert_eq 0 "$(redis_cli HGET "outbox-relay:dd:{outbox:$ORD}" legacy)" "(d) a stream without a watermark needs no transition from the old layout"
	while [ $(($(rnow) % (2 * W))) -ge $((2 * W - 4)) ]; do sleep 0.2; done
	ins "$U1" "$ORD" again
	ins "$X12" "$ORD" again
	ins n-1 "$ORD" first
	drain
	if [ $(($(rnow) - tb)) -gt "$W" ]; then
		log "(a) the second drain ended $(($(rnow) - tb)) s after the first began (window $W s): again with another stream"
		continue
	fi
	assert_eq 1 "$(count "$ORD" "$U1")" "(a) $U1 again after a bucket boundary, new relay: dropped"
	assert_eq 1 "$(count "$ORD" "$X12")" "(a) $X12 again after a bucket boundary: dropped"
	assert_eq 1 "$(count "$ORD" n-1)" "(a) a new id in the next bucket: published"
	assert_ge "$(buckets "$ORD")" 2 "(a) the ids are in two buckets"

	# Redis killed and restarted from its AOF.
	redis_kill9 "${AOF[@]}"
	assert_eq 3 "$(xlen "outbox:$ORD")" "(a) the stream came back from the AOF"
	ins "$U1" "$ORD" after-restart
	ins "$X12" "$ORD" after-restart
	ins n-1 "$ORD" after-restart
	drain
	age=$(($(rnow) - tb))
	if [ "$age" -gt "$W" ]; then
		log "(a) the drain after the restart ended $age s after the first began (window $W s): again with another stream"
		continue
	fi
	assert_eq 1 "$(count "$ORD" "$U1")" "(a) $U1 after a Redis restart from AOF (at most $age s later): dropped"
	assert_eq 1 "$(count "$ORD" "$X12")" "(a) $X12 after a Redis restart from AOF: dropped"
	assert_eq 1 "$(count "$ORD" n-1)" "(a) n-1 after a Redis restart from AOF: dropped"
	break
done

# (b), first part: ids published now, looked up again at the end (below),
# more than the window later.
m=0
aged() {
	m=$((m + 1))
	AGED=aged$m
	ins "$U1" "$AGED" first
	ins "$X12" "$AGED" first
	drain
	t_old=$(rnow) # they were published at this second or before
}
aged

# splits: HSCANs beyond the one per call that reads the state's index; with
# --publish native (OUTBOX_RELAY_PUBLISH=native), the hashes read whole to be
# split: HGETALLs beyond the one per batch (one WATCH each) that reads the index.
splits() {
	if [ "${OUTBOX_RELAY_PUBLISH:-native}" = native ]; then
		echo $(($(redis_calls hgetall) - $(redis_calls watch)))
	else
		echo $(($(redis_calls hscan) - $(redis_calls fcall)))
	fi
}
# monitor / moved STREAM: watch Redis's commands (the function's too), then
# count the ids a split moved out of a hash of the stream's dedup state.
monitor() {
	redis_cli MONITOR >"$T/monitor" &
	MONITOR_PID=$!
	wait_for "[ -s '$T/monitor' ]" 60 || fail "MONITOR did not start"
}
moved() {
	kill "$MONITOR_PID" 2>/dev/null || true
	wait "$MONITOR_PID" 2>/dev/null || true
	grep -a "\] \"HDEL\" \"outbox-relay:dd:{outbox:$1}:" "$T/monitor" |
		awk -F'" "' '{ n += NF - 2 } END { print n + 0 }'
}
# shards STREAM IDS WHAT: every shard of the stream's state is a listpack of at
# most 128 entries with a TTL within three windows (its two-window bucket's
# end + one window), and they hold IDS ids.
shards() {
	local k ids maxlen bad
	SHARDS=$(redis_cli --scan --pattern "outbox-relay:dd:{outbox:$1}:*")
	NSHARDS=$(echo "$SHARDS" | wc -l)
	# One redis-cli for all shards: HLEN, HEXISTS of the "" marker field,
	# OBJECT ENCODING and TTL, four reply lines per shard in order.
	read -r ids maxlen bad < <(
		for k in $SHARDS; do printf 'HLEN %s\nHEXISTS %s ""\nOBJECT ENCODING %s\nTTL %s\n' "$k" "$k" "$k" "$k"; done |
		redis_cli | paste - - - - | paste <(echo "$SHARDS") - |
		awk -F'\t' -v max=$((3 * DW)) '
			{ ids += $2 - $3; if ($2 > maxlen) maxlen = $2
			  if ($4 != "listpack") bad = bad " " $1
			  if ($5 < 1 || $5 > max) bad = bad " " $1 "(ttl " $5 ")" }
			END { printf "%d %d%s\n", ids, maxlen, bad }')
	assert_eq "$2" "$ids" "$3 $2 ids in $NSHARDS shards"
	assert_eq "" "$bad" "$3 every shard is a listpack with a TTL within three windows"
	assert_ge 128 "$maxlen" "$3 largest shard: $maxlen entries (hash-max-listpack-entries 128)"
}
# k STREAM: the current bucket's number of hashes (its index entry
# "<K> <count> <made> <length in seconds>").
k() { redis_cli HGETALL "outbox-relay:dd:{outbox:$1}" | grep -E '^[0-9]+ [0-9]+ [0-9]+ [0-9]+$' | sort -n | tail -n 1 | cut -d' ' -f1; }
again() {
	psql_q "INSERT INTO outbox_loose (id, aggregate_type, aggregate_id, event_type, payload)
	        SELECT id, '$1', 'again', 'created', '{}' FROM outbox_loose WHERE aggregate_type = '$1'"
}

# (c), (e), (f), (g), (k) count ids and shards, and look the same ids up
# again later: with a window DW of at least 30 minutes whose bucket lasts the
# next hour, every id stays in one bucket, and in the window, however slow the
# machine.
DW=1800
t=$(rnow)
while [ $((t / (2 * DW))) -ne $(((t + 3600) / (2 * DW))) ]; do DW=$((DW + 1)); done
bdrain() { relay_drain --slot "$SLOT" --table public.outbox_loose --dedup-window $DW; }

# live_burst WHAT STREAM RELAY_ARGS...: a relay streams, Redis's counters and
# MONITOR start, and 3000 ids of STREAM are committed in one transaction; once
# all are published the relay stops. Each row carries 1.5 kB, so the burst
# (about 5 MB of calls) takes at least five native groups (NATIVE_GROUP_BYTES,
# 1 MiB) however the timing falls.
live_burst() {
	local what=$1 stream=$2
	shift 2
	relay_start "$@" --table public.outbox_loose --dedup-window $DW
	wait_for "grep -q 'streaming slot' '$RELAY_LOG'" 120 || fail "$what the relay did not start streaming"
	redis_cli CONFIG RESETSTAT >/dev/null
	monitor
	psql_q "INSERT INTO outbox_loose (id, aggregate_type, aggregate_id, event_type, payload)
	        SELECT gen_random_uuid()::text, '$stream', g::text, 'created',
	               jsonb_build_object('pad', repeat('p', 1500)) FROM generate_series(1, 3000) g"
	wait_for '[ "$(xlen outbox:'"$stream"')" = 3000 ]' 300 ||
		fail "$what the burst was not published: $(xlen "outbox:$stream") of 3000"
	relay_stop
	assert_eq 0 "$RELAY_RC" "$what the relay stopped cleanly"
}

# (c) a burst into another stream, committed while the relay streams: no
# backlog says how many ids come. When a group grows the bucket, about half of
# the ids already in it move: at least some 1,200 in all when every group is as
# large as it may be, more when they are smaller (the function: a call of 128
# ids at a time).
live_burst "(c)" burst --slot s1
# The function reads one hash per split; --publish native reads a hash once per
# group of batches however often that group splits it (a hash split again after
# K doubled), so its count is lower for the same growth (k and moved below).
if [ "${OUTBOX_RELAY_PUBLISH:-native}" = native ]; then min_splits=50; else min_splits=100; fi
assert_ge "$(splits)" "$min_splits" "(c) the bucket grew by splits"
assert_ge "$(moved burst)" 750 "(c) ids moved from hash to hash (a quarter of the ids at least)"
assert_ge "$(k burst)" $((3000 / 100)) "(c) to $(k burst) hashes"
shards burst 3000 "(c)"
again burst
bdrain
assert_eq 3000 "$(xlen outbox:burst)" "(c) the same 3000 ids again: all dropped"

# (e) the same burst as a backlog: committed before the relay starts. A slot
# of its own, so that the WAL the relay reads first is this stream's (what it
# expects per stream is the stream's events per WAL byte read so far: (c)'s
# rows replayed first would make it expect fewer).
slot_create s2
SLOT=s2
psql_q "INSERT INTO outbox_loose (id, aggregate_type, aggregate_id, event_type, payload)
        SELECT gen_random_uuid()::text, 'backlog', g::text, 'created', '{}' FROM generate_series(1, 3000) g"
monitor
bdrain
assert_eq 3000 "$(xlen outbox:backlog)" "(e) 3000 ids published"
assert_ge 600 "$(moved backlog)" "(e) the bucket was sized from the backlog: ids moved (a fifth of the ids at most)"
assert_ge "$(k backlog)" $((3000 / 48)) "(e) $(k backlog) hashes"
assert_ge $((3000 / 12)) "$(k backlog)" "(e) not too many"
shards backlog 3000 "(e)"
again backlog
bdrain
assert_eq 3000 "$(xlen outbox:backlog)" "(e) the same 3000 ids again: all dropped"
SLOT=s1
bdrain
assert_eq 3000 "$(xlen outbox:backlog)" "(e) the relay of the first slot finds them all as duplicates"

# (f) 300 ids, then 20 MB of WAL that are no outbox rows.
psql_q "CREATE TABLE filler (v text); ALTER TABLE filler ALTER v SET STORAGE EXTERNAL"
slot_create s3
SLOT=s3
psql_q "INSERT INTO outbox_loose (id, aggregate_type, aggregate_id, event_type, payload)
        SELECT gen_random_uuid()::text, 'over', g::text, 'created', '{}' FROM generate_series(1, 300) g"
psql_q "INSERT INTO filler SELECT repeat(md5(g::text), 32) FROM generate_series(1, 20000) g"
bdrain
assert_eq 300 "$(xlen outbox:over)" "(f) 300 ids published"
assert_ge "$(k over)" $((10 * 300 / 24)) "(f) the relay expected far more ids than came"
shards over 300 "(f)"
assert_ge $((300 * 5 / 4)) "$NSHARDS" "(f) at most 1.25 shard keys per id"
again over
bdrain
assert_eq 300 "$(xlen outbox:over)" "(f) the same 300 ids again: all dropped"
SLOT=s1
bdrain
assert_eq 300 "$(xlen outbox:over)" "(f) the relay of the first slot finds them all as duplicates"

# (g) 200 streams of one id each, as a backlog.
slot_create s4
SLOT=s4
psql_q "INSERT INTO outbox_loose (id, aggregate_type, aggregate_id, event_type, payload)
        SELECT gen_random_uuid()::text, 'tiny' || g, g::text, 'created', '{}' FROM generate_series(1, 200) g"
bdrain
assert_eq 200 "$(redis_cli --scan --pattern 'outbox:tiny*' | wc -l)" "(g) 200 streams"
assert_eq 200 "$(redis_cli --scan --pattern 'outbox-relay:dd:{outbox:tiny*}:*' | wc -l)" "(g) one shard key per id"
SLOT=s1
bdrain

# (o) (c)'s burst again, committed while a pgoutput relay streams: pgoutput
# holds a transaction until its commit, so the relay knows how many of its
# messages are still to come, and the calls say so (their stream's share):
# the bucket is made large enough at once, as from a backlog in (e).
slot_create s5 pgoutput public.outbox_loose
live_burst "(o)" held --slot s5 --plugin pgoutput
assert_ge 600 "$(moved held)" "(o) the bucket was sized from the held transaction: ids moved (a fifth of the ids at most)"
assert_ge "$(k held)" $((3000 / 48)) "(o) $(k held) hashes"
assert_ge $((3000 / 12)) "$(k held)" "(o) not too many"
shards held 3000 "(o)"
again held
SLOT=s5
bdrain
assert_eq 3000 "$(xlen outbox:held)" "(o) the same 3000 ids again: all dropped"
SLOT=s1
bdrain
assert_eq 3000 "$(xlen outbox:held)" "(o) the relay of the first slot finds them all as duplicates"

# (h) the split's prefix patterns, checked against the hash in Redis itself.
python3 - "$REDIS_SOCK" "$TESTS_DIR/integration" <<'PY' || fail "(h) a split pattern selects the wrong fields"
import sys
sys.path.insert(0, sys.argv[2])
from rx import Client
c = Client(sys.argv[1])
lib = c.call("FUNCTION", "LIST", "LIBRARYNAME", "outbox_relay", "WITHCODE")[0]
code = lib[lib.index("library_code") + 1]
body = "\n".join(l for l in code.split("\n")[1:] if not l.startswith("redis.register_function"))
test = """
byte = string.byte
revs()
-- the shard hash as the publish loop computes it inline
local function fhash(f)
  local x, y, z = byte(f, 1, 3)
  return REV[x] + REV[y] * 256 + REV[z] * 65536
end
local key = KEYS[1]
redis.call('DEL', key)
local fields = {}
for a = 0, 255 do
  for b = 0, 7 do
    local f = string.char(a, (b * 37 + a) % 256, (a * 7 + b * 3) % 256) .. 'rest-of-the-id'
    fields[#fields + 1] = f
    redis.call('HSET', key, f, '1')
  end
end
local checked = 0
for nb = 1, 11 do
  local step = nb <= 9 and 1 or 7
  for v = 0, 2 ^ nb - 1, step do
    local want, n = {}, 0
    for _, f in ipairs(fields) do
      if fhash(f) % 2 ^ nb == v then want[f], n = true, n + 1 end
    end
    local got, cursor = 0, '0'
    repeat
      local r = redis.call('HSCAN', key, cursor, 'MATCH', movedpat(v, nb), 'COUNT', '1000')
      cursor = r[1]
      for i = 1, #r[2], 2 do
        if not want[r[2][i]] then
          return redis.error_reply('nb ' .. nb .. ' v ' .. v .. ': matched a field of another shard')
        end
        want[r[2][i]] = nil
        got = got + 1
      end
    until cursor == '0'
    if next(want) then
      return redis.error_reply('nb ' .. nb .. ' v ' .. v .. ': missed a field (' .. got .. ' of ' .. n .. ')')
    end
    checked = checked + 1
  end
end
redis.call('DEL', key)
return checked
"""
n = c.call("EVAL", body + "\n" + test, "1", "outbox-relay:dd:{outbox:patterns}:test")
if not isinstance(n, int) or n < 1000:
    sys.exit("(h) %s" % n)
print("[51_dedup_buckets] ok - (h) %d split patterns select exactly the fields of their shard" % n)
PY

# (k) 20,000 UUIDv6 ids of one node (60-bit time in 100 ns ticks, high bits
# first, then a fixed clock sequence and node), committed while the relay
# streams.
V6T=$((0x1ef0c0a1b2c3d4e))
v6ids() {
	psql_q "INSERT INTO outbox_loose (id, aggregate_type, aggregate_id, event_type, payload)
	        SELECT substr(h, 1, 8) || '-' || substr(h, 9, 4) || '-6' || lpad(to_hex(t & 4095), 3, '0')
	               || '-8023-0242ac110002', 'v6', t::text, 'created', '{}'
	        FROM (SELECT t, lpad(to_hex(t >> 12), 12, '0') AS h
	              FROM (SELECT $V6T + g AS t FROM generate_series(1, 20000) g) a) b"
}
relay_start --slot s1 --table public.outbox_loose --dedup-window $DW
wait_for "grep -q 'streaming slot' '$RELAY_LOG'" 120 || fail "(k) the relay did not start streaming"
v6ids
wait_for '[ "$(xlen outbox:v6)" = 20000 ] || grep -q unpack "$RELAY_LOG"' 300 ||
	fail "(k) 20,000 UUIDv6 ids were not published: $(xlen outbox:v6)"
grep -q unpack "$RELAY_LOG" && fail "(k) the function failed: $(grep -m 1 unpack "$RELAY_LOG")"
assert_eq 20000 "$(xlen outbox:v6)" "(k) 20,000 UUIDv6 ids of one node published"
relay_stop
assert_eq 0 "$RELAY_RC" "(k) the relay stopped cleanly"
python3 - "$REDIS_SOCK" "$TESTS_DIR/integration" <<'PY' || fail "(k) the UUIDv6 ids are not spread over the shards"
import sys
sys.path.insert(0, sys.argv[2])
from rx import Client
c = Client(sys.argv[1])
keys, cursor = [], "0"
while True:
    cursor, batch = c.call("SCAN", cursor, "MATCH", "outbox-relay:dd:{outbox:v6}:*", "COUNT", "1000")
    keys += batch
    if cursor == "0":
        break
ids, sizes, bad = 0, [], []
for k in keys:
    n = c.call("HLEN", k)
    ids += n - c.call("HEXISTS", k, "")
    sizes.append(n)
    if c.call("OBJECT", "ENCODING", k) != "listpack":
        bad.append(k)
print("[51_dedup_buckets] (k) %d ids in %d shards, largest %d" % (ids, len(keys), max(sizes)))
if ids != 20000 or max(sizes) > 128 or bad:
    sys.exit("(k) %d ids (want 20000), largest shard %d (want <= 128), not listpacks: %s" % (ids, max(sizes), bad[:5]))
print("[51_dedup_buckets] ok - (k) 20,000 UUIDv6 ids in %d shards of at most 128, all listpacks" % len(keys))
PY
v6ids
bdrain
assert_eq 20000 "$(xlen outbox:v6)" "(k) the same 20,000 ids again: all dropped"

# (l) upgrade from the bucket layout before issue 21: a bucket "<b>" of
# --dedup-window 3600 written as that release did (its index entry, 4 shards
# by the old field's own first three bytes, the old fields).
UPG=$(python3 - "$REDIS_SOCK" "$TESTS_DIR/integration" <<'PY'
import sys, re
sys.path.insert(0, sys.argv[2])
from rx import Client
c = Client(sys.argv[1])
def rev8(x):
    return int("{:08b}".format(x)[::-1], 2)
def old_field(i):
    b = i.encode()
    if re.fullmatch(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", i):
        u = bytes.fromhex(i.replace("-", ""))
        return bytes(u[3 - k] ^ rev8(u[15 - k]) for k in range(4)) + u[4:]
    h = 2166136261
    for x in b:
        h = ((h ^ x) * 16777619) & 0xFFFFFFFF
    esc = len(b) == 12 or (len(b) > 12 and b[-1] == 0)
    return h.to_bytes(4, "big") + b + (b"\0" if esc else b"")
ids = ["0a1b2c3d-4e5f-%04x-8c7d-9e0f1a2b3c4d" % (0x4a00 + k) for k in range(8)]
ids += ["old-text-%d" % k for k in range(6)] + ["oldtext12abc", "a-rather-long-order-id-0001"]
now = int(c.call("TIME")[0])
span = 7200
b = now // span
base = "outbox-relay:dd:{outbox:upg}"
for i in ids:
    f = old_field(i)
    h = rev8(f[0]) + rev8(f[1]) * 256 + rev8(f[2]) * 65536
    key = "%s:%d:%d" % (base, b, h % 4)
    c.call("HSET", key, f, str(now - b * span))
    c.call("EXPIREAT", key, str((b + 1) * span + 3600))
c.call("HSET", base, str(b), "4 %d 4 %d" % (len(ids), span))
print(" ".join(ids))
PY
) || fail "(l) could not write the old bucket"
for id in $UPG fresh-2; do ins "$id" upg upgraded; done
relay_drain --slot s1 --table public.outbox_loose --dedup-window 3600
assert_eq fresh-2 "$(rx fields outbox:upg id)" "(l) the 16 ids in the old bucket (8 UUIDs, 8 text ids) dropped, a new one published"

# (d) upgrade: the old layout's keys, as the previous release left them.
owner=$(redis_cli GET "outbox-relay:wm:{outbox:$ORD}:s1" | cut -d' ' -f2-)
redis_cli SET "outbox-relay:wm:{outbox:legacy}:s1" "0000000000000000:00000000 $owner" >/dev/null
U2=0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d
for id in "$U2" legacy-text-1 legacytext12; do
	assert_eq OK "$(redis_cli SET "outbox-relay:dedup:{outbox:legacy}:$id" 1 EX 3600)" "(d) old-layout key for $id"
done
for id in "$U2" legacy-text-1 legacytext12 fresh-1 "$U1"; do ins "$id" legacy upgraded; done
tb=$(rnow)
drain
ta=$(rnow)
assert_eq "fresh-1 $U1" "$(rx fields outbox:legacy id | tr '\n' ' ' | sed 's/ $//')" "(d) ids in old-layout keys dropped, the others published"
legacy=$(redis_cli HGET "outbox-relay:dd:{outbox:legacy}" legacy)
assert_ge "$legacy" $((tb + W)) "(d) old-layout keys are looked up until a window after the upgrade"
assert_ge $((ta + W)) "$legacy" "(d) (that is, the first call's time + the window)"

# (b), second part: n-1 published at least half a window after the ids of the
# first part, then all three again once those are more than the window old.
# A run whose last drain ended more than the window after n-1's began (a slow
# machine: n-1 may be out of the window) is done again with a new stream.
while :; do
	while [ "$(rnow)" -lt $((t_old + W / 2)) ]; do sleep 0.5; done
	t_young=$(rnow)
	ins n-1 "$AGED" first
	drain
	while [ "$(rnow)" -le $((t_old + W)) ]; do sleep 0.5; done
	ins "$U1" "$AGED" late
	ins "$X12" "$AGED" late
	ins n-1 "$AGED" late
	drain
	age=$(($(rnow) - t_young))
	[ "$age" -gt "$W" ] || break
	log "(b) the last drain ended $age s after n-1's began (window $W s): again with another stream"
	aged
done
assert_eq 2 "$(count "$AGED" "$U1")" "(b) $U1 more than $W s later: published again"
assert_eq 2 "$(count "$AGED" "$X12")" "(b) $X12 more than $W s later: published again"
assert_eq 1 "$(count "$AGED" n-1)" "(b) n-1, published at most $age s before: still dropped"

# (i) late in a bucket, (p) a call failing part-way, (j) a changed
# --dedup-window, (m) two windows with one bucket number, (n) a split moving
# 20,000 ids: the function called directly (as the relay calls it). Each call of (i) and (j) runs inside MULTI
# between two TIMEs, so its second of Redis's clock is known: a scenario one
# of whose calls did not run at the second it was meant for (a slow machine)
# is done again on a new stream, and only calls at their second are checked.
python3 - "$REDIS_SOCK" "$TESTS_DIR/integration" <<'PY' || fail "(i)/(p)/(j)/(m)/(n) the function called directly"
import sys, time
sys.path.insert(0, sys.argv[2])
from rx import Client, RespError
c = Client(sys.argv[1])
seq = [0]
def request(stream, window, fields, hint):
    keys = ["outbox:" + stream, "outbox-relay:wm:{outbox:%s}:t" % stream,
            "outbox-relay:wm:{outbox:%s}:t" % stream, "outbox:dead-letters",
            "outbox-relay:dd:{outbox:%s}" % stream]
    args = [str(window), "0", "test/late", "", "t", "outbox-relay:dedup:{outbox:%s}:" % stream, str(hint)]
    for f in fields:
        seq[0] += 1
        args += ["%016X:00000000" % seq[0], f, "1", "id", f]
    return ["FCALL", "outbox_relay_publish", str(len(keys))] + keys + args
def results(what, r):
    if isinstance(r, RespError) or not isinstance(r, list):
        sys.exit("%s: the function answered %r" % (what, r))
    return ["dup" if x == 1 else "new" if isinstance(x, str) else repr(x) for x in r]
def call(stream, window, *fields, hint=1):
    try:
        r = c.call(*request(stream, window, fields, hint))
    except RespError as e:
        r = e
    return results("%s %s" % (stream, window), r)
class Slipped(Exception):
    pass
def now():
    return int(c.call("TIME")[0])
def check(what, got, want):
    if got != want:
        sys.exit("%s: %s, want %s" % (what, " ".join(got), " ".join(want)))
    print("[51_dedup_buckets] ok - %s: %s" % (what, " ".join(got)))
def step(at, stream, window, fields, what, want):
    """Wait for second AT of Redis's clock, then one call inside MULTI between two TIMEs;
    checked only when both TIMEs are AT (the call ran at AT), else Slipped."""
    while now() < at:
        time.sleep(0.05)
    c.call("MULTI")
    c.call("TIME")
    c.call(*request(stream, window, fields, 1))
    c.call("TIME")
    t0, r, t1 = c.call("EXEC")
    if int(t0[0]) != at or int(t1[0]) != at:
        raise Slipped("%s ran at second %s-%s, not %d" % (what, t0[0], t1[0], at))
    check(what, results(what, r), want)
def scenario(name, run):
    for attempt in range(1, 1000):
        try:
            return run("%s%d" % (name, attempt))
        except Slipped as e:
            print("[51_dedup_buckets] (%s) %s: again with another stream" % (name, e))
    sys.exit("(%s) never ran at the seconds it needs" % name)

def late(st):
    W = 5  # buckets of 10 s
    T = (now() // (2 * W) + 1) * 2 * W  # the next bucket's first second
    step(T, st, W, ["AAAA-a"], "(i) A at second 0 of a bucket", ["new"])
    step(T + 3, st, W, ["AAAA-a"], "(i) A at second 3 (first window of the bucket): dropped", ["dup"])
    step(T + 6, st, W, ["BBBB-b"], "(i) B at second 6", ["new"])
    step(T + 7, st, W, ["AAAA-a", "BBBB-b"],
         "(i) A at second 7, 7 s after it was seen: published again; B: dropped", ["new", "dup"])
    step(T + 7, st, W, ["AAAA-a"], "(i) A again at once: dropped (its time was renewed)", ["dup"])
    step(T + 10, st, W, ["AAAA-a", "BBBB-b"],
         "(i) A and B in the next bucket, within the window: dropped", ["dup", "dup"])
scenario("late", late)

def refused(st):
    # A renewed id whose entry the stream key refuses (a key of another type:
    # dead-lettered) gets its old time back: it stays in the bucket and the
    # bucket's count does not go down (before, it was taken out and the count
    # fell, which another writer's id could bring back to a count the native
    # path's id record had vouched for).
    W = 5
    T = (now() // (2 * W) + 1) * 2 * W
    b = T // (2 * W)
    shard = "outbox-relay:dd:{outbox:%s}:%d:%d:0" % (st, 2 * W, b)
    def count():
        v = c.call("HGET", "outbox-relay:dd:{outbox:%s}" % st, "%d:%d" % (2 * W, b))
        return int(v.split()[1])
    step(T, st, W, ["AAAA-a", "BBBB-b"], "(i) A and B at second 0 of a bucket", ["new", "new"])
    check("(i) the bucket counts 2", [str(count())], ["2"])
    c.call("DEL", "outbox:" + st)
    c.call("SET", "outbox:" + st, "not a stream")
    step(T + 7, st, W, ["AAAA-a"], "(i) A at second 7 into a key of another type: dead-lettered", ["2"])
    check("(i) A keeps its time of second 0", [str(c.call("HGET", shard, "AAAA-a"))], ["0"])
    check("(i) the bucket still counts 2", [str(count())], ["2"])
    c.call("DEL", "outbox:" + st)
    step(T + 8, st, W, ["AAAA-a", "BBBB-b"],
         "(i) A at second 8 into a stream: published (older than the window); B too", ["new", "new"])
    check("(i) A renewed at second 8", [str(c.call("HGET", shard, "AAAA-a"))], ["8"])
    check("(i) the bucket counts 2 still", [str(count())], ["2"])
scenario("refused", refused)

def partial(st):
    # A command that fails inside the call after some events are complete (here
    # an HSETNX into a shard that is a key of another type; in a cluster, a
    # shard key a slot migration moved): the call still writes the index's
    # count and the watermark for the events before it, then answers the error.
    # Before, it wrote neither: the bucket held an id its count did not, so
    # another writer's id could bring the count to where a native relay's id
    # record had vouched for it without that id.
    W = 3600
    t = now()
    b = t // (2 * W)
    if (t + 5) // (2 * W) != b:
        raise Slipped("a bucket begins within 5 s")
    base = "outbox-relay:dd:{outbox:%s}" % st
    pre = "%s:%d:%d:" % (base, 2 * W, b)
    def index():
        return c.call("HGET", base, "%d:%d" % (2 * W, b)).split()
    def held():
        n = 0
        for j in range(int(index()[0])):
            if c.call("TYPE", pre + str(j)) == "hash":
                n += len([f for f in c.call("HKEYS", pre + str(j)) if f != ""])
        return n
    c.call("SET", pre + "1", "not a hash")
    # 48 ids to come: K 2. "A..." goes to shard 0, a field whose first byte
    # has its high bit set to shard 1.
    try:
        r = c.call(*request(st, W, ["AAAA-a", b"\xc1XXX-x"], 48))
    except RespError as e:
        r = e
    if not isinstance(r, RespError) or "WRONGTYPE" not in str(r):
        sys.exit("(p) the call answered %r, want a WRONGTYPE error" % (r,))
    if (now()) // (2 * W) != b:
        raise Slipped("the bucket ended during the call")
    check("(p) after the error: K 2, the bucket counts the 1 id it holds",
          [index()[0], index()[1], str(held())], ["2", "1", "1"])
    check("(p) A's entry is in the stream", [str(c.call("XLEN", "outbox:" + st))], ["1"])
    check("(p) the watermark is at A", [c.call("GET", "outbox-relay:wm:{outbox:%s}:t" % st).split()[0]],
          ["%016X:00000000" % (seq[0] - 1)])
    c.call("DEL", pre + "1")
    got = call(st, W, "AAAA-a", b"\xc1XXX-x")
    check("(p) both again once the shard is a hash: A dropped, X published", got, ["dup", "new"])
    check("(p) the bucket counts the 2 ids it holds", [index()[1], str(held())], ["2", "2"])
scenario("partial", partial)

def changed(st):
    # C seen with a window of 30 s (buckets of 60 s), then looked up with 4 s.
    T = now() + 1
    step(T, st, 30, ["CCCC-c"], "(j) C with --dedup-window 30", ["new"])
    step(T, st, 4, ["CCCC-c"], "(j) C with --dedup-window 4 at once: dropped", ["dup"])
    step(T + 5, st, 4, ["CCCC-c"], "(j) C with --dedup-window 4, 5 s later: published", ["new"])
    step(T + 5, st, 4, ["CCCC-c"], "(j) C with --dedup-window 4 at once: dropped", ["dup"])
scenario("changed", changed)

# (m) windows W1 and W1 + 1 whose buckets have the same number for the next
# hour (of 86400 and on, most do). X is seen with W1 while that bucket expects
# many ids (42 shards), Y with W1 + 1 (one shard). Before, the second bucket
# took the first's keys and index entry: X was then looked up in one shard.
# Each window is longer than the test: nothing here depends on the clock.
t = now()
W1 = next(w for w in range(86400, 90000)
          if t // (2 * w) == t // (2 * w + 2) == (t + 3600) // (2 * w) == (t + 3600) // (2 * w + 2))
check("(m) X with --dedup-window %d (ids to come: 1000)" % W1, call("twowin", W1, "XXXX-x", hint=1000), ["new"])
check("(m) Y with --dedup-window %d" % (W1 + 1), call("twowin", W1 + 1, "YYYY-y"), ["new"])
check("(m) X with --dedup-window %d: dropped" % (W1 + 1), call("twowin", W1 + 1, "XXXX-x"), ["dup"])
check("(m) Y with --dedup-window %d: dropped" % W1, call("twowin", W1, "YYYY-y"), ["dup"])
check("(m) X with --dedup-window %d: dropped" % W1, call("twowin", W1, "XXXX-x"), ["dup"])

# (n) 20,000 ids whose fields all begin with the same three bytes: one shard
# holds them all, and every split of it moves them all (up to 40,000
# arguments), in calls of 128 ids as the relay makes them.
# A window whose bucket lasts the next hour: all in one bucket.
t = now()
Wn = next(w for w in range(3600, 7200) if t // (2 * w) == (t + 3600) // (2 * w))
ids = [b"\xff\xff\xff" + b"wide-%05d" % i for i in range(20000)]
for what, want in (("published", "new"), ("dropped when they come again", "dup")):
    bad = 0
    for i in range(0, len(ids), 128):
        bad += sum(1 for x in call("wide", Wn, *ids[i:i + 128]) if x != want)
    if bad:
        sys.exit("(n) %d of 20000 ids not %s" % (bad, what))
    print("[51_dedup_buckets] ok - (n) 20,000 ids of one shard hash %s" % what)
keys, cursor = [], "0"
while True:
    cursor, batch = c.call("SCAN", cursor, "MATCH", "outbox-relay:dd:{outbox:wide}:*", "COUNT", "1000")
    keys += batch
    if cursor == "0":
        break
largest = max(c.call("HLEN", k) for k in keys)
if largest < 20000:
    sys.exit("(n) the largest shard holds %d ids, not all 20000: the worst case was not reached" % largest)
print("[51_dedup_buckets] ok - (n) all in one shard (%d entries with its marker), %d shard keys" % (largest, len(keys)))
PY
pass
