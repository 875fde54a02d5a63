#!/usr/bin/env python3
"""redis_designs.py - command streams of candidate publish designs (issue 24, item 2).

Each design publishes the same entries (the ones the relay wrote, read back with
XRANGE) in batches of BATCH consecutive events, as the relay would send them, so
that redis_designs.sh can count Redis's instructions per event for each under
callgrind, next to a bare XADD of the same entries. These are prototypes of the
Redis side only: they do the commands a design needs per batch (lookups, XADDs,
dedup inserts, the watermark), not its error paths (a foreign watermark, a
failed XADD, bucket splits), which cost nothing per event while nothing fails.

  redis_designs.py lua                             the candidate function library
  redis_designs.py gen DESIGN SOCK STREAM OUT      RESP commands into OUT, prints events
  redis_designs.py pace SOCK FILE BYTES MS         send FILE's commands BYTES at a time, MS
                                                   ms apart; prints "errors: E, replies: R"
                                                   as redis-cli --pipe does
  redis_designs.py sync SOCK FILE TRIPS            send FILE's commands a round trip at a
                                                   time: TRIPS 2, each batch's reads, then
                                                   its MULTI ... EXEC; TRIPS 1, both in one
                                                   trip (bare: BATCH XADDs a trip)

Designs (K dedup shards of a bucket, sized for 24 ids each as the relay sizes them,
or DESIGN_LOAD from the environment, or N for a design named DESIGN@N; shard = the
dedup field's first three bytes mod K):

  bare     XADD per entry, nothing else (the reference).
  watch    WATCH watermark base; FCALL_RO cand_check (watermark, then one HEXISTS per
           id: the duplicates' indexes); MULTI; XADD per new entry (native: the
           entry's bytes never enter Lua); FCALL cand_commit (one HSETNX per id,
           the watermark); EXEC. A concurrent writer of the stream's watermark or
           dedup index makes EXEC fail and the relay repeat the batch.
  native   WATCH watermark base; GET watermark; HMGET per shard the batch touches;
           MULTI; XADD per new entry; HSET per shard (its ids); SET watermark; EXEC.
           No Lua at all: the relay computes the shards (it knows K from the index).
  guard    MULTI; FCALL cand_guard (watermark check and HSETNX per id, in Lua, with
           only the ids as arguments); XADD per entry; EXEC. The lower bound of
           "ids through Lua, entries native": it cannot skip a duplicate's XADD.
  filter   native, with a filter in front of the hashes: a string of FILTER_BITS bits
           per id of the bucket (a Bloom filter, FILTER_PROBES bits per id). One
           BITFIELD_RO per batch reads every id's bits; only an id whose bits are
           all set (a duplicate, or a false positive) is looked up with HMGET; the
           write sets the batch's bits with one BITFIELD. Exact, since the hashes
           decide every positive; FILTER_BITS / 8 bytes more per id. A prototype:
           the relay does not keep such a filter. FILTER_BITS (16) and
           FILTER_PROBES (2) in the environment size it.
  known    native without the HMGETs: what Redis would do if the relay knew that no id
           of the batch is in the window (an exact record, or a filter, of the ids its own
           writes put there, valid while read 1 answers what its last write left: the
           --native-predict check). The lower bound of that design: an id the relay's
           record says may be there would still be looked up. A prototype: the relay
           keeps no such record.
  strings  native, with each shard a string of fixed records (the 19-byte dedup field
           and 2 bytes of time, REC bytes per id) instead of a hash: one MGET per
           batch reads every shard it touches (the relay would scan them for its
           ids), the write APPENDs each shard's new records (APPEND keeps the key's
           TTL; a shard the batch creates gets its EXPIREAT). 21 bytes per id, no
           listpack scan in Redis. A prototype: the relay has no such layout.

  gen      known, with the window's ids kept in generations of DESIGN_GEN (65536) ids in
           the order they are written, each generation a bucket of its own of
           DESIGN_GEN / 24 hashes ("<base>:g:<g>:<j>"): a batch's ids land in the
           hashes of the one or two generations being filled, not anywhere in the
           window. Writes only: the lower bound of a layout that keeps the ids written
           together in the same memory, for a relay that knows its own ids (the id
           record). A prototype: the relay has no such layout.
  genlook  gen, with every id looked up in every generation (an HMGET per shard a
           batch touches, per generation): what a writer without the record (the
           function, a second writer, a restarted relay before its seed) would pay
           to find an id in that layout, since the id alone no longer says where
           it is.
  genid    gen, with each id looked up in the one generation it names itself: the lookup
           a time-ordered id (UUID v7, ULID) would allow, its generation taken from the
           time in its own bytes, so that every writer finds it with one HMGET, record or
           not. The ids here are random; their generations are their places in the order
           written, which is what time-ordered ids would give. A prototype.
  genbit   gen, with an index of where each id went beside the generations: a string
           of GENBIT_BITS (64) bits per slot, a slot per id of the bucket, and one
           SETBIT per id in the write (the bit of its generation, mod GENBIT_BITS, in
           the slot its random bytes pick). Writes only, for a relay with the record;
           what it adds to gen is the price of the index. GENBIT_WRITE=bitfield: one
           BITFIELD (SET u1 per id) per batch instead.
  genbitlook  genbit, with every id looked up through the index: one BITFIELD_RO per
           batch reads each id's slot (GET i64), then an HMGET per (generation, hash) for
           the generations its slot names (its own, if there, and any other id's that
           share the slot). What a writer without the record would pay in that layout:
           the function, a second writer, a restarted relay before its seed. The index
           is a hint (the hashes decide), so a stale or shared bit costs a lookup, never
           a wrong answer; GENBIT_BITS / 8 bytes more per id. A prototype.

With PREFILL_GROWN=1 too, the prefill of native, known and the gen designs is written
as those designs write a backlog, DESIGN_BATCH ids at a time, one HSET per hash the
batch touches, so each hash grows an id or two at a time, as the relay's hashes do
during a drain, instead of being written whole.

With PREFILL_STREAM=1 instead, the prefill of bare, native, known and the gen designs is
written as a drain writes it: each batch of DESIGN_BATCH ids after the XADDs of as
many entries (the events', over and over), and the stream trimmed to nothing at the
end (XTRIM MAXLEN 0), so the hashes sit among the memory the entries took and freed,
as in a Redis that has been publishing for a while; bare gets the entries alone.

DESIGN_BATCH (126) in the environment sets the events per batch: the relay's
groups during a drain hold 1-12 events in some shapes (RESULTS.md, issue 24).

With PREFILL=N in the environment, gen also writes OUT.pre: N ids of other events
already in the window (in the design's dedup layout: the hashes, and the filter's
bits), which redis_designs.sh loads before it counts. The shards are sized for
N + the events, as the relay sizes a bucket for the backlog it expects.
"""
import os
import sys
import threading
import time
import uuid
import zlib

BATCH = int(os.environ.get("DESIGN_BATCH", "126"))  # redis_breakdown.sh's mean events per FCALL
REC = 21  # strings: bytes per id (19-byte field, 2 bytes of time); redis_designs.sh divides by it
LOAD = int(os.environ.get("DESIGN_LOAD", "24"))  # ids per dedup shard
FILTER_BITS = int(os.environ.get("FILTER_BITS", "16"))  # filter bits per id of the bucket
FILTER_PROBES = int(os.environ.get("FILTER_PROBES", "2"))  # 1 to 4
GEN = int(os.environ.get("DESIGN_GEN", "65536"))  # gen, genlook, genid: ids per generation
GENBIT_BITS = int(os.environ.get("GENBIT_BITS", "64"))  # genbit: index bits per slot
GENBIT_WRITE = os.environ.get("GENBIT_WRITE", "setbit")  # or bitfield: one per batch
GENS = ("gen", "genlook", "genid", "genbit", "genbitlook")  # the designs that keep ids in generations

LUA = r"""#!lua name=cand
local function shard(f, k)
  local x, y, z = string.byte(f, 1, 3)
  return (x + y * 256 + z * 65536) % k
end
redis.register_function{function_name = 'cand_check', flags = {'no-writes'},
  callback = function(keys, args)
    local call = redis.call
    local wm = call('GET', keys[1]) or ''
    local k, pre = tonumber(args[1]), keys[2] .. ':'
    local res = {wm}
    for i = 2, #args do
      local f = args[i]
      if call('HEXISTS', pre .. shard(f, k), f) == 1 then res[#res + 1] = i - 1 end
    end
    return res
  end}
redis.register_function('cand_commit', function(keys, args)
  local call = redis.call
  local k, pre = tonumber(args[3]), keys[2] .. ':'
  for i = 4, #args do
    local f = args[i]
    call('HSETNX', pre .. shard(f, k), f, '1')
  end
  call('SET', keys[1], args[1] .. ' ' .. args[2])
  call('HSET', keys[2], 'k', args[3])
  return 1
end)
redis.register_function('cand_guard', function(keys, args)
  local call = redis.call
  local wm = call('GET', keys[1]) or ''
  if wm > args[1] then return redis.error_reply('OUTBOX_BEHIND') end
  local k, pre = tonumber(args[3]), keys[2] .. ':'
  local n = 0
  for i = 4, #args do
    local f = args[i]
    n = n + call('HSETNX', pre .. shard(f, k), f, '1')
  end
  call('SET', keys[1], args[1] .. ' ' .. args[2])
  return n
end)
"""


def dedup_field(eid):
    """A 19-byte field like the relay's for a UUID: 3 bytes of hash, 16 of UUID."""
    try:
        u = uuid.UUID(eid).bytes
    except ValueError:
        u = eid.encode()[:16].ljust(16, b"\0")
    h = (zlib.crc32(eid.encode()) & 0xFFFFFF).to_bytes(3, "big")
    return h + u


def probes(d, m):
    """The filter's bit offsets for dedup field d in a filter of m bits (the UUID's random bytes)."""
    return [int.from_bytes(d[3 + 4 * i:7 + 4 * i], "big") % m for i in range(FILTER_PROBES)]


def shard_of(d, k):
    return (d[0] + d[1] * 256 + d[2] * 65536) % k


def resp(f, *args):
    f.write(b"*%d\r\n" % len(args))
    for a in args:
        if isinstance(a, str):
            a = a.encode("utf-8", "surrogateescape")
        elif isinstance(a, int):
            a = b"%d" % a
        f.write(b"$%d\r\n%s\r\n" % (len(a), a))


def client(sock):
    """A connection to the redis-server at sock (tests/integration/rx.py)."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
    import rx  # noqa: E402
    return rx.Client(sock)


def records(fields):
    """The strings design's records of dedup fields: each field, then 2 bytes of time (REC bytes)."""
    out = b"".join(d + b"\0\1" for d in fields)
    assert len(out) == REC * len(fields)
    return out


def by_shard(ids, k):
    """The dedup fields ids by shard: j -> fields, in the order they come."""
    shards = {}
    for d in ids:
        shards.setdefault(shard_of(d, k), []).append(d)
    return shards


def multi_xadds(f, key, batch):
    """MULTI, then an XADD per entry of batch."""
    resp(f, "MULTI")
    for _, flat in batch:
        resp(f, "XADD", key, "*", *flat)


def hset_shards(f, base, shards):
    """One HSET per shard j of base with its ids (shards: j -> dedup fields)."""
    for j, fs in shards.items():
        args = []
        for d in fs:
            args += [d, b"1"]
        resp(f, "HSET", "%s:%d" % (base, j), *args)


def gen(design, sock, stream, out):
    c = client(sock)
    entries = []
    for _, kv in c.xrange(stream):
        eid = dict(kv).get("id", "")
        flat = []
        for name, value in kv:
            flat += [name, value]
        entries.append((dedup_field(eid), flat))
    key = stream
    wm, base = "outbox-relay:wm:{%s}" % key, "outbox-relay:dedup:{%s}" % key
    fkey = base + ":filter"
    prefill = int(os.environ.get("PREFILL", "0") or 0)
    grown = os.environ.get("PREFILL_GROWN", "0") == "1"  # the prefill in batches, as written
    stream_too = os.environ.get("PREFILL_STREAM", "0") == "1"  # and the entries between them
    design, _, load = design.partition("@")
    k = max(1, -(-(prefill + len(entries)) // (int(load) if load else LOAD)))
    m = FILTER_BITS * (prefill + len(entries))
    bits = bytearray(-(-m // 8))  # the filter as Redis holds it, to know the positives
    owner = "7000000000000000000/bench"

    def set_bits(ds):
        ops = []
        for d in ds:
            for o in probes(d, m):
                bits[o // 8] |= 0x80 >> (o % 8)
                ops += ["SET", "u1", o, 1]
        return ops

    made = set()  # strings: the shards that exist

    def skey(j):
        return "%s:s:%d" % (base, j)

    kg = max(1, -(-GEN // (int(load) if load else LOAD)))  # gen: hashes per generation

    def gen_shards(ids, first):
        """gen: the HSETs' keys for ids written from position first on: key -> fields."""
        out = {}
        for i, d in enumerate(ids):
            out.setdefault("%s:g:%d:%d" % (base, (first + i) // GEN, shard_of(d, kg)), []).append(d)
        return out

    def hset_keys(f, shards):
        for key_, fs in shards.items():
            args = []
            for d in fs:
                args += [d, b"1"]
            resp(f, "HSET", key_, *args)

    ikey = base + ":gi"  # genbit: the index
    islots = prefill + len(entries)  # a slot per id of the bucket
    imask = {}  # genbit: slot -> generations set (as Redis holds them), to know the lookups

    def islot(d):
        return int.from_bytes(d[11:15], "big") % islots

    def ibits(ids, first):
        """genbit: the index bit of each id written from position first on (and noted)."""
        offs = []
        for i, d in enumerate(ids):
            g = ((first + i) // GEN) % GENBIT_BITS
            imask[islot(d)] = imask.get(islot(d), 0) | (1 << g)
            offs.append(islot(d) * GENBIT_BITS + g)
        return offs

    def index_prefill(f, ids, first):
        ops = []
        for o in ibits(ids, first):
            ops += ["SET", "u1", o, 1]
        resp(f, "BITFIELD", ikey, *ops)

    def index_presize(f):
        resp(f, "SETBIT", ikey, islots * GENBIT_BITS - 1, 0)

    if prefill and stream_too and design in ("bare", "native", "known") + GENS:
        # the window written as a drain writes it: a batch's entries, then its ids
        rng = uuid.UUID(int=0x5EED).int
        with open(out + ".pre", "wb") as f:
            if design in ("genbit", "genbitlook"):
                index_presize(f)
            for c in range(0, prefill, BATCH):
                olds = []
                for i in range(c, min(prefill, c + BATCH)):
                    rng = (rng * 6364136223846793005 + 1442695040888963407) % (1 << 128)
                    olds.append(dedup_field(str(uuid.UUID(int=rng, version=4))))
                    resp(f, "XADD", key, "*", *entries[i % len(entries)][1])
                if design in ("native", "known"):
                    hset_shards(f, base, by_shard(olds, k))
                elif design != "bare":
                    hset_keys(f, gen_shards(olds, c))
                    if design in ("genbit", "genbitlook"):
                        index_prefill(f, olds, c)
            resp(f, "XTRIM", key, "MAXLEN", 0)
    elif prefill and design in ("watch", "native", "known", "guard", "filter", "strings") + GENS:
        rng = uuid.UUID(int=0x5EED).int
        with open(out + ".pre", "wb") as f:
            olds = []
            for i in range(prefill):
                rng = (rng * 6364136223846793005 + 1442695040888963407) % (1 << 128)
                olds.append(dedup_field(str(uuid.UUID(int=rng, version=4))))
            shards = by_shard(olds, k)
            if design in ("genbit", "genbitlook"):
                index_presize(f)
                for c in range(0, len(olds), 1000):
                    index_prefill(f, olds[c:c + 1000], c)
            if grown and design in ("native", "known"):
                for c in range(0, len(olds), BATCH):
                    hset_shards(f, base, by_shard(olds[c:c + BATCH], k))
            elif grown and design in GENS:
                for c in range(0, len(olds), BATCH):
                    hset_keys(f, gen_shards(olds[c:c + BATCH], c))
            elif design in GENS:
                hset_keys(f, gen_shards(olds, 0))
            elif design == "strings":
                for j, fs in shards.items():
                    resp(f, "SET", skey(j), records(fs))
                    made.add(j)
            else:
                hset_shards(f, base, shards)
            if design == "filter":
                for c in range(0, len(olds), 1000):
                    resp(f, "BITFIELD", fkey, *set_bits(olds[c:c + 1000]))
    with open(out, "wb") as f:
        if design == "bare":
            for _, flat in entries:
                resp(f, "XADD", key, "*", *flat)
        for b in range(0, len(entries) if design != "bare" else 0, BATCH):
            batch = entries[b:b + BATCH]
            top = "%016X:%08X" % (b + len(batch), 0)
            ids = [d for d, _ in batch]
            if design == "watch":
                resp(f, "WATCH", wm, base)
                resp(f, "FCALL_RO", "cand_check", 2, wm, base, k, *ids)
                multi_xadds(f, key, batch)
                resp(f, "FCALL", "cand_commit", 2, wm, base, top, owner, k, *ids)
                resp(f, "EXEC")
            elif design in ("native", "known"):
                shards = by_shard(ids, k)
                resp(f, "WATCH", wm, base)
                resp(f, "GET", wm)
                if design == "native":
                    for j, fs in shards.items():
                        resp(f, "HMGET", "%s:%d" % (base, j), *fs)
                multi_xadds(f, key, batch)
                hset_shards(f, base, shards)
                resp(f, "SET", wm, top + " " + owner)
                resp(f, "EXEC")
            elif design in GENS:
                first = prefill + b
                resp(f, "WATCH", wm, base)
                resp(f, "GET", wm)
                if design == "genlook":
                    looked = by_shard(ids, kg)
                    for g in range((first + len(ids) - 1) // GEN + 1):
                        for j, fs in looked.items():
                            resp(f, "HMGET", "%s:g:%d:%d" % (base, g, j), *fs)
                placed = gen_shards(ids, first)
                if design == "genid":
                    for key_, fs in placed.items():
                        resp(f, "HMGET", key_, *fs)
                if design == "genbitlook":
                    ops, looks = [], {}
                    for d in ids:
                        ops += ["GET", "i64", islot(d) * GENBIT_BITS]
                        m_ = imask.get(islot(d), 0)
                        for g in range(GENBIT_BITS):
                            if m_ >> g & 1:
                                looks.setdefault("%s:g:%d:%d" % (base, g, shard_of(d, kg)), []).append(d)
                    resp(f, "BITFIELD_RO", ikey, *ops)
                    for key_, fs in looks.items():
                        resp(f, "HMGET", key_, *fs)
                multi_xadds(f, key, batch)
                hset_keys(f, placed)
                if design in ("genbit", "genbitlook") and GENBIT_WRITE == "bitfield":
                    index_prefill(f, ids, first)  # one BITFIELD for the batch
                elif design in ("genbit", "genbitlook"):
                    for o in ibits(ids, first):
                        resp(f, "SETBIT", ikey, o, 1)
                resp(f, "SET", wm, top + " " + owner)
                resp(f, "EXEC")
            elif design == "strings":
                shards = by_shard(ids, k)
                resp(f, "WATCH", wm, base)
                resp(f, "GET", wm)
                resp(f, "MGET", *[skey(j) for j in shards])
                multi_xadds(f, key, batch)
                for j, fs in shards.items():
                    resp(f, "APPEND", skey(j), records(fs))
                    if j not in made:
                        resp(f, "EXPIREAT", skey(j), 4102444800)
                        made.add(j)
                resp(f, "SET", wm, top + " " + owner)
                resp(f, "EXEC")
            elif design == "filter":
                resp(f, "WATCH", wm, base)
                resp(f, "GET", wm)
                ops = []
                for d in ids:
                    for o in probes(d, m):
                        ops += ["GET", "u1", o]
                resp(f, "BITFIELD_RO", fkey, *ops)
                for d in ids:
                    if all(bits[o // 8] & (0x80 >> (o % 8)) for o in probes(d, m)):
                        # a duplicate or a false positive
                        resp(f, "HMGET", "%s:%d" % (base, shard_of(d, k)), d)
                shards = by_shard(ids, k)
                multi_xadds(f, key, batch)
                hset_shards(f, base, shards)
                resp(f, "BITFIELD", fkey, *set_bits(ids))
                resp(f, "SET", wm, top + " " + owner)
                resp(f, "EXEC")
            elif design == "guard":
                resp(f, "MULTI")
                resp(f, "FCALL", "cand_guard", 2, wm, base, top, owner, k, *ids)
                for _, flat in batch:
                    resp(f, "XADD", key, "*", *flat)
                resp(f, "EXEC")
            else:
                sys.stderr.write("redis_designs: unknown design %s\n" % design)
                sys.exit(2)
    print(len(entries))


def errors_in(r):
    """Error replies in reply r, at any depth (inside EXEC's array too)."""
    if isinstance(r, list):
        return sum(errors_in(x) for x in r)
    return 1 if r.__class__.__name__ == "RespError" else 0


def pace(sock, path, nbytes, ms):
    """Send path's commands nbytes at a time, ms apart, then a PING; read every reply."""
    data = open(path, "rb").read()
    c = client(sock)
    counts = [0, 0]  # replies, errors
    failed = []

    def reader():
        try:
            while True:
                r = c._reply()
                if r == "PONG":
                    return
                counts[0] += 1
                counts[1] += errors_in(r)
        except Exception as e:  # noqa: BLE001  (reported after the join)
            failed.append(e)

    t = threading.Thread(target=reader)
    t.start()
    for i in range(0, len(data), nbytes):
        c.s.sendall(data[i:i + nbytes])
        if ms > 0:
            time.sleep(ms / 1000.0)
    c.s.sendall(b"*1\r\n$4\r\nPING\r\n")
    t.join()
    if failed:
        sys.exit("redis_designs: pace: reading the replies failed: %s" % failed[0])
    print("errors: %d, replies: %d" % (counts[1], counts[0]))


def commands(data):
    """Split RESP data into (name, bytes) per command."""
    out, i = [], 0
    while i < len(data):
        e = data.index(b"\r\n", i)
        n, j, name = int(data[i + 1:e]), e + 2, None
        for a in range(n):
            e = data.index(b"\r\n", j)
            ln = int(data[j + 1:e])
            if a == 0:
                name = data[e + 2:e + 2 + ln].upper()
            j = e + 2 + ln + 2
        out.append((name, data[i:j]))
        i = j
    return out


def sync(sock, path, trips_per_batch):
    """Send path's commands a round trip at a time, as the relay does: a batch's
    reads, then (after their replies) its MULTI ... EXEC; the bare design's
    XADDs BATCH at a time. trips_per_batch=1: a batch's reads and its MULTI ...
    EXEC in one trip, as a relay would send them that knew the reads' answers
    ahead. Prints "errors: E, replies: R, round trips: T"."""
    c = client(sock)
    cmds = commands(open(path, "rb").read())
    trips, replies, errors, seg = 0, 0, 0, []

    def flush():
        nonlocal trips, replies, errors
        if not seg:
            return
        c.s.sendall(b"".join(seg))
        for _ in seg:
            errors += errors_in(c._reply())
            replies += 1
        trips += 1
        seg.clear()

    in_multi = False
    for name, raw in cmds:
        if name == b"MULTI":
            if trips_per_batch == 2:
                flush()  # the batch's reads
            in_multi = True
        seg.append(raw)
        if name == b"EXEC" or (not in_multi and name == b"XADD" and len(seg) >= BATCH):
            flush()
            in_multi = False
    flush()
    print("errors: %d, replies: %d, round trips: %d" % (errors, replies, trips))


def main(argv):
    if len(argv) == 2 and argv[1] == "lua":
        sys.stdout.write(LUA)
        return 0
    if len(argv) == 6 and argv[1] == "gen":
        gen(*argv[2:6])
        return 0
    if len(argv) == 5 and argv[1] == "sync" and argv[4] in ("1", "2"):
        sync(argv[2], argv[3], int(argv[4]))
        return 0
    if len(argv) == 6 and argv[1] == "pace":
        pace(argv[2], argv[3], int(argv[4]), float(argv[5]))
        return 0
    sys.stderr.write(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
