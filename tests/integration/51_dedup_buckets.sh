#!/bin/bash
# 51_dedup_buckets: the dedup state of issue 11 §1 (per stream: time buckets of
# small hashes that expire whole; see README "Dedup state"), with
# --dedup-window 20 (buckets of 40 s) and Redis on AOF (appendfsync always).
#   (a) An id published once is dropped when it comes again after a bucket
#       boundary, from a new relay process each time, and after Redis was
#       killed (SIGKILL) and restarted from its AOF: a UUID id (packed to 16
#       bytes) and a 12-byte text id (the escaped form).
#   (b) The same ids more than the window after they were published are
#       published again, while an id seen later within the window is still
#       dropped (the oldest bucket is checked to the second).
#   (c) 3000 ids in one transaction committed while the relay streams: the
#       current bucket grows by splits to enough shards, every one a listpack
#       of at most 128 entries with a TTL; the same 3000 ids again are all
#       dropped.
#   (e) 3000 ids in one transaction committed while no relay runs: the relay
#       that drains that backlog sizes the bucket from it (the calls' "ids to
#       come"; the bucket grows to them while it holds few ids), so few ids
#       move between hashes (1500 in (c)); every shard a listpack with a
#       TTL; the same ids again all dropped.
#   (f) 300 ids followed by 20 MB of other WAL: the relay expects far more ids
#       than come (the WAL ahead is not outbox rows), sizes the bucket for
#       them, yet creates at most 1.25 shard keys per id; all are dropped
#       when they come again.
#   (g) A backlog of 200 streams of one id each: each id costs one key (a
#       stream's estimate goes by at least 64 of its events).
#   (h) The split's prefix patterns: with the function library the relay
#       loaded, every pattern a split can send (HSCAN MATCH, up to 11 bits of
#       hash, every first byte of a field including the glob's own special
#       characters) selects exactly the fields the hash sends to the new
#       shard, in a hash large enough to scan in steps.
#   (i) Late in a bucket (more than a window after its start): an id of the
#       same bucket older than the window is published again (and its time
#       renewed, so it is dropped again right after), one inside it dropped.
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
# are two windows long), then the same ids after it.
rnow() { redis_cli TIME | head -n 1; }
while [ $(($(rnow) % (2 * W))) -ne $((2 * W - 4)) ]; do sleep 0.2; done
ins "$U1" order first
ins "$X12" order first
drain
t0=$(date +%s)
assert_eq 1 "$(count order "$U1")" "(a) $U1 published"
assert_eq 1 "$(count order "$X12")" "(a) $X12 published"
assert_eq 0 "$(redis_cli HGET "outbox-relay:dd:{outbox:order}" legacy)" "(d) a stream without a watermark needs no transition from the old layout"
while [ $(($(rnow) % (2 * W))) -ge $((2 * W - 4)) ]; do sleep 0.2; done
ins "$U1" order again
ins "$X12" order again
ins n-1 order first
drain
t1=$(date +%s)
assert_eq 1 "$(count order "$U1")" "(a) $U1 again after a bucket boundary, new relay: dropped"
assert_eq 1 "$(count order "$X12")" "(a) $X12 again after a bucket boundary: dropped"
assert_eq 1 "$(count order n-1)" "(a) a new id in the next bucket: published"
assert_ge "$(buckets order)" 2 "(a) the ids are in two buckets"

# Redis killed and restarted from its AOF.
kill -9 "$REDIS_PID"
wait_for redis_down 10 || fail "redis-server survives SIGKILL"
REDIS_PID=
redis_start "${AOF[@]}"
assert_eq 3 "$(xlen outbox:order)" "(a) the stream came back from the AOF"
ins "$U1" order after-restart
ins "$X12" order after-restart
ins n-1 order after-restart
drain
age=$(($(date +%s) - t0))
[ "$age" -lt "$W" ] || fail "(a) the machine was too slow: $age s since the first publication, window $W s"
assert_eq 1 "$(count order "$U1")" "(a) $U1 after a Redis restart from AOF ($age s later): dropped"
assert_eq 1 "$(count order "$X12")" "(a) $X12 after a Redis restart from AOF: dropped"
assert_eq 1 "$(count order n-1)" "(a) n-1 after a Redis restart from AOF: dropped"

# Redis's count of calls of a command (functions' calls included).
calls() { redis_cli INFO commandstats | sed -n "s/^cmdstat_$1:calls=\([0-9]*\),.*/\1/p" | grep . || echo 0; }
# splits: HSCANs beyond the one per call that reads the state's index.
splits() { echo $(($(calls hscan) - $(calls fcall))); }
# monitor / moved STREAM: watch Redis's commands (the function's too), then
# count the ids a split moved out of a hash of the stream's dedup state.
monitor() {
	redis_cli MONITOR >"$T/monitor" &
	MONITOR_PID=$!
	wait_for "[ -s '$T/monitor' ]" 10 || fail "MONITOR did not start"
}
moved() {
	kill "$MONITOR_PID" 2>/dev/null || true
	wait "$MONITOR_PID" 2>/dev/null || true
	grep -a "\[0 lua\] \"HDEL\" \"outbox-relay:dd:{outbox:$1}:" "$T/monitor" |
		awk -F'" "' '{ n += NF - 2 } END { print n + 0 }'
}
# shards STREAM IDS WHAT: every shard of the stream's state is a listpack of at
# most 128 entries with a TTL within three windows (its two-window bucket's
# end + one window), and they hold IDS ids.
shards() {
	local k n ids=0 maxlen=0 bad=
	SHARDS=$(redis_cli --scan --pattern "outbox-relay:dd:{outbox:$1}:*")
	NSHARDS=$(echo "$SHARDS" | wc -l)
	for k in $SHARDS; do
		n=$(redis_cli HLEN "$k")
		ids=$((ids + n - $(redis_cli HEXISTS "$k" "")))
		[ "$n" -le "$maxlen" ] || maxlen=$n
		[ "$(redis_cli OBJECT ENCODING "$k")" = listpack ] || bad="$bad $k"
		ttl=$(redis_cli TTL "$k")
		[ "$ttl" -ge 1 ] && [ "$ttl" -le $((3 * W)) ] || bad="$bad $k(ttl $ttl)"
	done
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

# (c) a burst into another stream while the window of (a) runs out, committed
# while the relay streams: no backlog says how many ids come.
relay_start --slot s1 --table public.outbox_loose --dedup-window $W
wait_for "grep -q 'streaming slot' '$RELAY_LOG'" 30 || fail "(c) the relay did not start streaming"
redis_cli CONFIG RESETSTAT >/dev/null
monitor
psql_q "INSERT INTO outbox_loose (id, aggregate_type, aggregate_id, event_type, payload)
        SELECT gen_random_uuid()::text, 'burst', g::text, 'created', '{}' FROM generate_series(1, 3000) g"
wait_for '[ "$(xlen outbox:burst)" = 3000 ]' 60 || fail "(c) the burst was not published: $(xlen outbox:burst) of 3000"
relay_stop
assert_eq 0 "$RELAY_RC" "(c) the relay stopped cleanly"
assert_ge "$(splits)" 100 "(c) the bucket grew by splits"
assert_ge "$(moved burst)" 1000 "(c) ids moved from hash to hash"
assert_ge "$(k burst)" $((3000 / 100)) "(c) to $(k burst) hashes"
shards burst 3000 "(c)"
again burst
drain
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
drain
assert_eq 3000 "$(xlen outbox:backlog)" "(e) 3000 ids published"
assert_ge 600 "$(moved backlog)" "(e) the bucket was sized from the backlog: ids moved (a fifth of the ids at most)"
assert_ge "$(k backlog)" $((3000 / 48)) "(e) $(k backlog) hashes"
assert_ge $((3000 / 12)) "$(k backlog)" "(e) not too many"
shards backlog 3000 "(e)"
again backlog
drain
assert_eq 3000 "$(xlen outbox:backlog)" "(e) the same 3000 ids again: all dropped"
SLOT=s1
drain
assert_eq 3000 "$(xlen outbox:backlog)" "(e) the relay of the first slot finds them all as duplicates"

# (f) 300 ids, then 20 MB of WAL that are no outbox rows.
psql_q "CREATE TABLE filler (v text); ALTER TABLE filler ALTER v SET STORAGE EXTERNAL"
slot_create s3
SLOT=s3
psql_q "INSERT INTO outbox_loose (id, aggregate_type, aggregate_id, event_type, payload)
        SELECT gen_random_uuid()::text, 'over', g::text, 'created', '{}' FROM generate_series(1, 300) g"
psql_q "INSERT INTO filler SELECT repeat(md5(g::text), 32) FROM generate_series(1, 20000) g"
drain
assert_eq 300 "$(xlen outbox:over)" "(f) 300 ids published"
assert_ge "$(k over)" $((10 * 300 / 24)) "(f) the relay expected far more ids than came"
shards over 300 "(f)"
assert_ge $((300 * 5 / 4)) "$NSHARDS" "(f) at most 1.25 shard keys per id"
again over
drain
assert_eq 300 "$(xlen outbox:over)" "(f) the same 300 ids again: all dropped"
SLOT=s1
drain
assert_eq 300 "$(xlen outbox:over)" "(f) the relay of the first slot finds them all as duplicates"

# (g) 200 streams of one id each, as a backlog.
slot_create s4
SLOT=s4
psql_q "INSERT INTO outbox_loose (id, aggregate_type, aggregate_id, event_type, payload)
        SELECT gen_random_uuid()::text, 'tiny' || g, g::text, 'created', '{}' FROM generate_series(1, 200) g"
drain
assert_eq 200 "$(redis_cli --scan --pattern 'outbox:tiny*' | wc -l)" "(g) 200 streams"
assert_eq 200 "$(redis_cli --scan --pattern 'outbox-relay:dd:{outbox:tiny*}:*' | wc -l)" "(g) one shard key per id"
SLOT=s1
drain

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

# (d) upgrade: the old layout's keys, as the previous release left them.
owner=$(redis_cli GET "outbox-relay:wm:{outbox:order}:s1" | cut -d' ' -f2-)
redis_cli SET "outbox-relay:wm:{outbox:legacy}:s1" "0000000000000000:00000000 $owner" >/dev/null
U2=0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d
for id in "$U2" legacy-text-1 legacytext12; do
	assert_eq OK "$(redis_cli SET "outbox-relay:dedup:{outbox:legacy}:$id" 1 EX 3600)" "(d) old-layout key for $id"
done
for id in "$U2" legacy-text-1 legacytext12 fresh-1 "$U1"; do ins "$id" legacy upgraded; done
drain
assert_eq "fresh-1 $U1" "$(rx fields outbox:legacy id | tr '\n' ' ' | sed 's/ $//')" "(d) ids in old-layout keys dropped, the others published"
legacy=$(redis_cli HGET "outbox-relay:dd:{outbox:legacy}" legacy)
assert_ge "$legacy" "$(($(date +%s) + W - 10))" "(d) old-layout keys are looked up until a window after the upgrade"

# (b) the window of (a) has passed.
while [ $(($(date +%s) - t0)) -le $((W + 1)) ]; do sleep 0.5; done
ins "$U1" order late
ins "$X12" order late
ins n-1 order late
drain
[ $(($(date +%s) - t1)) -lt "$W" ] || fail "(b) the machine was too slow: n-1 is out of the window already"
assert_eq 2 "$(count order "$U1")" "(b) $U1 more than $W s later: published again"
assert_eq 2 "$(count order "$X12")" "(b) $X12 more than $W s later: published again"
assert_eq 1 "$(count order n-1)" "(b) n-1, published within the last $W s: still dropped"

# (i) late in a bucket, and (j) a changed --dedup-window: the function called
# directly (as the relay calls it), so each call runs at a known second of
# Redis's clock. call WINDOW FIELD...: one call publishing one event per field
# into outbox:late; prints the results, one per line ("dup" for a duplicate).
python3 - "$REDIS_SOCK" "$TESTS_DIR/integration" <<'PY' || fail "(i)/(j) the window is not exact in the function"
import sys, time
sys.path.insert(0, sys.argv[2])
from rx import Client
c = Client(sys.argv[1])
seq = [0]
def call(window, *fields):
    keys = ["outbox:late", "outbox-relay:wm:{outbox:late}:t", "outbox-relay:wm:{outbox:late}:t",
            "outbox:dead-letters", "outbox-relay:dd:{outbox:late}"]
    args = [str(window), "0", "test/late", "", "t", "outbox-relay:dedup:{outbox:late}:", "1"]
    for f in fields:
        seq[0] += 1
        args += ["%016X:00000000" % seq[0], f, "1", "id", f]
    r = c.call("FCALL", "outbox_relay_publish", str(len(keys)), *keys, *args)
    return ["dup" if x == 1 else "new" if isinstance(x, str) else repr(x) for x in r]
def at(span, second):
    """Sleep until Redis's clock is SECOND seconds into a bucket of SPAN."""
    while int(c.call("TIME")[0]) % span != second:
        time.sleep(0.05)
def check(what, got, want):
    if got != want:
        sys.exit("%s: %s, want %s" % (what, " ".join(got), " ".join(want)))
    print("[51_dedup_buckets] ok - %s: %s" % (what, " ".join(got)))
W = 5  # buckets of 10 s
at(2 * W, 0)
check("(i) A at second 0 of a bucket", call(W, "AAAA-a"), ["new"])
at(2 * W, 3)
check("(i) A at second 3 (first window of the bucket): dropped", call(W, "AAAA-a"), ["dup"])
at(2 * W, 6)
check("(i) B at second 6", call(W, "BBBB-b"), ["new"])
at(2 * W, 7)
check("(i) A at second 7, 6-7 s after it was seen: published again; B: dropped",
      call(W, "AAAA-a", "BBBB-b"), ["new", "dup"])
check("(i) A again at once: dropped (its time was renewed)", call(W, "AAAA-a"), ["dup"])
at(2 * W, 0)
check("(i) A and B in the next bucket, within the window: dropped",
      call(W, "AAAA-a", "BBBB-b"), ["dup", "dup"])
# (j) C seen with a window of 30 s (buckets of 60 s), then looked up with 4 s.
check("(j) C with --dedup-window 30", call(30, "CCCC-c"), ["new"])
check("(j) C with --dedup-window 4 at once: dropped", call(4, "CCCC-c"), ["dup"])
time.sleep(5.2)
check("(j) C with --dedup-window 4, 5 s later: published", call(4, "CCCC-c"), ["new"])
check("(j) C with --dedup-window 4 at once: dropped", call(4, "CCCC-c"), ["dup"])
PY
pass
