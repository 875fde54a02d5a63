/*
 * sink_script.c - the Lua source the relay loads into Redis: the function
 * library (FUNCTION LOAD, Redis 7+) with outbox_relay_publish and
 * outbox_relay_trim, and the same bodies as EVAL scripts for older servers.
 * Only text: the bytes are what Redis hashes (the EVALSHA digest), so any
 * change here changes the library every relay loads.
 */
#include "sink_script.h"

/*
 * One call publishes a batch: consecutive events of one stream.
 * KEYS: stream, watermark, legacy watermark (the pre-0.2 per-hash-tag key, or
 * the watermark again), dead-letter stream, dedup base (see below); all in
 * the stream's cluster slot.
 * ARGV: dedup window seconds ("0": no dedup), MAXLEN ("0": no trimming), owner
 * ("<system id>/<database>" of the PostgreSQL database the relay streams
 * from), expect (the position the previous call of this relay for this
 * stream left the watermark at, "" for none), slot name, the old layout's
 * dedup key prefix ("<prefix>:dedup:{tag}...:"), ids to come (how many ids of
 * this stream the relay expects to publish from this call on: the call's own,
 * and while it drains a backlog its estimate of the rest, sq_backlog_hint()),
 * then per event: position
 * "<commit lsn hex16>:<index hex8>", dedup field (dedup_field()), field
 * count N, and N field/value pairs.
 *
 * The watermark's value is "<position> <owner>". The call refuses, writing
 * nothing, when the watermark belongs to another database (OUTBOX_FOREIGN) or
 * is behind expect (OUTBOX_BEHIND: an earlier call did not run, or Redis lost
 * it). Returns one result per event, in order: 0 for a replay (the watermark,
 * or an event this call already wrote or found a duplicate, is at or past its
 * position: a call can carry events PostgreSQL streamed again after a
 * reconnect behind the ones it repeats), 1 for a duplicate id inside the
 * window, 2 for an entry the stream key cannot take (WRONGTYPE), written
 * instead to the dead-letter stream in the same call, or the new entry's id.
 *
 * Dedup state, per stream: ids seen within the window W, by Redis's clock
 * (TIME; functions replicate as effects, so AOF and replicas get the keys
 * written, not the clock). Time buckets of S = 2W seconds: bucket b = now / S
 * is K hashes "<base>:<S>:<b>:<j>" (field: dedup_field() of an id, value:
 * seconds since the bucket began), all expiring at the bucket's end + W
 * (EXPIREAT). S is in the name because two lengths can give the same b
 * (86400 and 86401 mostly do): buckets of two windows never share a key or
 * an index entry (issue 21, finding 7). Buckets named "<base>:<b>:<j>" (and
 * indexed "<b>") were written before: they are still looked up, never
 * written, and hold the field of that release, dedup_field() without its
 * first 3 bytes (the relay's hash), so they are read with that field and
 * its own shard hash (its first three bytes) until they expire.
 * An id is inserted with HSETNX into the current bucket; during the bucket's
 * first W seconds it is first looked up in the previous one (HGET, then the
 * value's age is compared with W: exact to the second), after that the
 * previous bucket is out of the window and not read at all (half the
 * lookups of buckets of W seconds, for ids kept 1 to 3 windows instead of 1
 * to 2: tests/bench/dedup_instr.sh's steady run, 1.07 -> 1.01 of the old
 * layout's instructions). HSETNX 0 is a duplicate, except in the bucket's
 * second window, where the id's age is checked (HGET) and an id older than
 * W gets its time renewed (HSET) and is published. Each bucket's index
 * entry records S, so buckets written with another --dedup-window are still
 * looked up by their own start and length. K grows by
 * linear hashing (shard j = h mod 2^L, or h mod 2^(L+1) for the shards
 * already split; h is the field's first three bytes, their bits read first
 * to last as h's from the lowest up: dedup_field() puts a hash of the whole
 * id there, so ids of every scheme spread over the shards), so
 * the ids a split moves share a prefix and Redis picks them (HSCAN MATCH:
 * escaped whole bytes, then one byte range), and none passes through Lua
 * that stays (those that move are written and deleted in commands of at
 * most 1000 arguments: Lua 5.1's unpack stops near 8000); one split per
 * 24 ids, so each hash stays far below hash-max-listpack-entries (128 by
 * default) in the compact listpack encoding (tests/bench/dedup_instr.sh:
 * one split per 16 to 32 ids costs Redis the same instructions, per 40
 * about 6 % more). redis.call, redis.pcall and string.byte are read once
 * per call into locals (each global read is a table lookup in Lua 5.1), the per-event
 * path computes the hash and the shard inline (a Lua function call costs more than the
 * arithmetic), and numbers become text once: shard numbers below 4096 through a cache
 * (bounded: the Lua heap is not in used_memory), the bucket and its expiry once per call
 * (a Lua number passed to redis.call is printed with %.17g each time). A new bucket
 * starts with the K that the larger of the previous bucket's count and the ids to come need, so a
 * backlog drained into an empty window fills it without a split; and while a bucket holds
 * at most 1024 ids, a call whose ids to come need more hashes first grows it to that many
 * (by splits, up to 256 a call, cheap while few ids move), since the first calls' estimates
 * are rough. A split creates the new hash only when ids move into it. Its shards are created
 * (holding an empty field "", with their expiry) up to 256 per call, and beyond what the
 * previous bucket's count needs only one per 4 ids already in the bucket, so ids to come that
 * never come (or a stream of one id) cost at most 1.25 keys per id, about the old layout's
 * one; an id inserted into a shard not created yet sets that shard's expiry itself. The hash
 * "<base>" (no TTL) holds per live bucket, field "<S>:<b>", "<K> <count> <shards created> <S>" (the
 * older field "<b>": an entry without S is a bucket of W seconds, as written before), and "legacy":
 * until when the old layout (one string key "<old prefix><id>" with a TTL per id) may still hold
 * ids (its first call's time + W when the stream had a watermark, else 0), which are then looked up
 * too (EXISTS). Those keys are in the stream's slot (its hash tag) but not in KEYS: a cluster node
 * that cannot serve one (slot migration) fails the command. Every event before it is complete (XADD
 * and its entry), and the call (pcall around the events) still writes the index's count and the
 * watermark for them before it returns the error, as when an XADD fails: the count stays the
 * number of ids the bucket holds (the native path's id record relies on it), and the retry
 * publishes the rest. A split copies first, records the new K, and only then deletes the moved ids
 * from the old shard, so an id is always where the recorded K says. An id whose XADD fails (or is
 * dead-lettered) is removed again if it was new (HDEL; every call first reads the index with HSCAN
 * and removes its buckets out of the window with HDEL, of at least a field that never exists, so a
 * user without those permissions fails the call before it wrote anything), or given back its old
 * time if it was renewed (HSET), so no id ever leaves a live bucket (the native path's id record
 * relies on that: a bucket's count only grows) and a failing XADD leaves nothing behind: the
 * watermark then covers the events before it and the error is returned; a retry publishes exactly
 * what is missing. The watermark is written by every call, so each call replicates a write that
 * WAIT can wait for even when all its events were replays. expect "R" (outbox-relay republish): the
 * watermark is neither read nor written; only the dedup window drops what was published before.
 */
#define PUBLISH_BODY                                                                               \
	"local byte\n"                                                                                 \
	"local REV = {}\n"                                                                             \
	"local function revs()\n"                                                                      \
	"  for x = 0, 255 do\n"                                                                        \
	"    local r, v = 0, x\n"                                                                      \
	"    for _ = 1, 8 do r, v = r * 2 + v % 2, math.floor(v / 2) end\n"                            \
	"    REV[x] = r\n"                                                                             \
	"  end\n"                                                                                      \
	"end\n"                                                                                        \
	"local function movedpat(v, nb)\n"                                                             \
	"  local pat = {}\n"                                                                           \
	"  while nb >= 8 do\n"                                                                         \
	"    pat[#pat + 1] = '\\\\' .. string.char(REV[v % 256])\n"                                    \
	"    v, nb = math.floor(v / 256), nb - 8\n"                                                    \
	"  end\n"                                                                                      \
	"  if nb > 0 then\n"                                                                           \
	"    local lo = REV[v % 2 ^ nb]\n"                                                             \
	"    local hi = lo + 2 ^ (8 - nb) - 1\n"                                                       \
	"    local cls = {'['}\n"                                                                      \
	"    while lo <= hi and lo >= 92 and lo <= 94 do\n"                                            \
	"      cls[#cls + 1] = '\\\\' .. string.char(lo)\n"                                            \
	"      lo = lo + 1\n"                                                                          \
	"    end\n"                                                                                    \
	"    if lo <= hi then cls[#cls + 1] = string.char(lo) .. '-' .. string.char(hi) end\n"         \
	"    cls[#cls + 1] = ']'\n"                                                                    \
	"    pat[#pat + 1] = table.concat(cls)\n"                                                      \
	"  end\n"                                                                                      \
	"  pat[#pat + 1] = '*'\n"                                                                      \
	"  return table.concat(pat)\n"                                                                 \
	"end\n"                                                                                        \
	"local function setk(bk, k)\n"                                                                 \
	"  local m, l = 1, 0\n"                                                                        \
	"  while m * 2 <= k do m, l = m * 2, l + 1 end\n"                                              \
	"  bk.k, bk.m, bk.l, bk.x = k, m, l, k - m\n"                                                  \
	"end\n"                                                                                        \
	"local JS = {}\n"                                                                              \
	"local function sname(j)\n"                                                                    \
	"  local s = JS[j]\n"                                                                          \
	"  if not s then\n"                                                                            \
	"    s = tostring(j)\n"                                                                        \
	"    if j < 4096 then JS[j] = s end\n"                                                         \
	"  end\n"                                                                                      \
	"  return s\n"                                                                                 \
	"end\n"                                                                                        \
	"local function idtext(f)\n"                                                                   \
	"  if #f == 16 then\n"                                                                         \
	"    local u = {string.byte(f, 1, 16)}\n"                                                      \
	"    for i = 0, 3 do u[i + 1] = bit.bxor(u[i + 1], REV[u[16 - i]]) end\n"                      \
	"    return "                                                                                  \
	"string.format('%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x',\n"      \
	"      u[4], u[3], u[2], u[1], unpack(u, 5, 16))\n"                                            \
	"  end\n"                                                                                      \
	"  local r = string.sub(f, 5)\n"                                                               \
	"  if #r >= 13 and string.byte(r, -1) == 0 then r = string.sub(r, 1, -2) end\n"                \
	"  return r\n"                                                                                 \
	"end\n"                                                                                        \
	"local function publish(keys, args)\n"                                                         \
	"  local rcall, rpcall = redis.call, redis.pcall\n"                                            \
	"  byte = byte or string.byte\n"                                                               \
	"  if not REV[255] then revs() end\n"                                                          \
	"  local ttl, maxlen, owner, expect = args[1], args[2], args[3], args[4]\n"                    \
	"  local rep = expect == 'R'\n"                                                                \
	"  local raw = not rep and rcall('GET', keys[2])\n"                                            \
	"  if not rep and not raw and keys[3] ~= keys[2] then raw = rcall('GET', keys[3]) end\n"       \
	"  local wm = ''\n"                                                                            \
	"  if raw then\n"                                                                              \
	"    wm = string.sub(raw, 1, 25)\n"                                                            \
	"    local o = string.sub(raw, 27)\n"                                                          \
	"    if o ~= '' and o ~= owner then\n"                                                         \
	"      return redis.error_reply('OUTBOX_FOREIGN ' .. keys[2] .. ' belongs to ' .. o)\n"        \
	"    end\n"                                                                                    \
	"  end\n"                                                                                      \
	"  if not rep and wm < expect then\n"                                                          \
	"    return redis.error_reply('OUTBOX_BEHIND ' .. keys[2] .. ' is at ' ..\n"                   \
	"      (wm == '' and 'nothing' or wm) .. ', expected ' .. expect)\n"                           \
	"  end\n"                                                                                      \
	"  local win, base, LOAD = tonumber(ttl), keys[5], 24\n"                                       \
	"  local now, span, cur, curs, bks, curb, c0, prevb, legacy, mset, exps, cpre, off, late\n"    \
	"  local hint = tonumber(args[7]) or 0\n"                                                      \
	"  local function record()\n"                                                                  \
	"    return sname(curb.k) .. ' ' .. tostring(curb.c) .. ' ' .. sname(curb.made) .. ' ' .. "    \
	"sname(span)\n"                                                                                \
	"  end\n"                                                                                      \
	"  local function sliced(cmd, key, list, n)\n"                                                 \
	"    for i = 1, n, 1000 do rcall(cmd, key, unpack(list, i, math.min(n, i + 999))) end\n"       \
	"  end\n"                                                                                      \
	"  local function split()\n"                                                                   \
	"    local p = curb.k - curb.m\n"                                                              \
	"    local src, dst = cpre .. sname(p), cpre .. sname(curb.k)\n"                               \
	"    local pat, mv, del, nm, nd, cursor = movedpat(curb.k, curb.l + 1), {'', ''}, {}, 2, 0, "  \
	"'0'\n"                                                                                        \
	"    repeat\n"                                                                                 \
	"      local r = rcall('HSCAN', src, cursor, 'MATCH', pat, 'COUNT', '1000')\n"                 \
	"      local all = r[2]\n"                                                                     \
	"      cursor = r[1]\n"                                                                        \
	"      for i = 1, #all, 2 do\n"                                                                \
	"        mv[nm + 1], mv[nm + 2] = all[i], all[i + 1]\n"                                        \
	"        nm, nd = nm + 2, nd + 1\n"                                                            \
	"        del[nd] = all[i]\n"                                                                   \
	"      end\n"                                                                                  \
	"    until cursor == '0'\n"                                                                    \
	"    if nd > 0 then\n"                                                                         \
	"      sliced('HSET', dst, mv, nm)\n"                                                          \
	"      rcall('EXPIREAT', dst, exps)\n"                                                         \
	"      if curb.made == curb.k then curb.made = curb.k + 1 end\n"                               \
	"    end\n"                                                                                    \
	"    setk(curb, curb.k + 1)\n"                                                                 \
	"    rcall('HSET', base, curs, record())\n"                                                    \
	"    if nd > 0 then sliced('HDEL', src, del, nd) end\n"                                        \
	"    if nd > 0 and p < curb.made and rcall('EXISTS', src) == 0 then\n"                         \
	"      curb.made, c0 = p, -1\n"                                                                \
	"    end\n"                                                                                    \
	"  end\n"                                                                                      \
	"  if win > 0 then\n"                                                                          \
	"    now = tonumber(rcall('TIME')[1])\n"                                                       \
	"    span = 2 * win\n"                                                                         \
	"    cur = math.floor(now / span)\n"                                                           \
	"    local into = now - cur * span\n"                                                          \
	"    curs, exps, off = span .. ':' .. cur, tostring((cur + 1) * span + win), tostring(into)\n" \
	"    late = into > win and into\n"                                                             \
	"    cpre = base .. ':' .. curs .. ':'\n"                                                      \
	"    bks, mset = {}, {}\n"                                                                     \
	"    local stale, cursor = {'\\0'}, '0'\n"                                                     \
	"    repeat\n"                                                                                 \
	"      local r = rcall('HSCAN', base, cursor, 'COUNT', '1000')\n"                              \
	"      local m = r[2]\n"                                                                       \
	"      cursor = r[1]\n"                                                                        \
	"      for i = 1, #m, 2 do\n"                                                                  \
	"        local f = m[i]\n"                                                                     \
	"        if f == 'legacy' then\n"                                                              \
	"          legacy = tonumber(m[i + 1])\n"                                                      \
	"        else\n"                                                                               \
	"          local s2, b = string.match(f, '^(%d+):(%d+)$')\n"                                   \
	"          b = tonumber(b or f)\n"                                                             \
	"          local k, c, made, sp = string.match(m[i + 1], '^(%d+) (%d+) (%d+) ?(%d*)$')\n"      \
	"          sp = tonumber(s2 or sp) or win\n"                                                   \
	"          local bk = {c = tonumber(c), made = tonumber(made), old = b * sp < now - win,\n"    \
	"                      pre = base .. ':' .. f .. ':', age = now - b * sp}\n"                   \
	"          if not s2 then bk.v1 = true end\n"                                                  \
	"          setk(bk, tonumber(k))\n"                                                            \
	"          if f == curs then\n"                                                                \
	"            curb, c0 = bk, bk.c\n"                                                            \
	"          elseif (b + 1) * sp <= now - win then\n"                                            \
	"            stale[#stale + 1] = f\n"                                                          \
	"          else\n"                                                                             \
	"            if b == cur - 1 and sp == span then prevb = bk end\n"                             \
	"            bks[#bks + 1] = bk\n"                                                             \
	"          end\n"                                                                              \
	"        end\n"                                                                                \
	"      end\n"                                                                                  \
	"    until cursor == '0'\n"                                                                    \
	"    sliced('HDEL', base, stale, #stale)\n"                                                    \
	"    if #bks > 1 then table.sort(bks, function(x, y) return x.age < y.age end) end\n"          \
	"    if curb and curb.c <= 1024 then\n"                                                        \
	"      local to = math.min(1048576, curb.k + 256, math.ceil((curb.c + hint) / LOAD))\n"        \
	"      while curb.k < to do split() end\n"                                                     \
	"    end\n"                                                                                    \
	"    if not legacy then\n"                                                                     \
	"      legacy = (rep or raw) and now + win or 0\n"                                             \
	"      mset[#mset + 1], mset[#mset + 2] = 'legacy', legacy\n"                                  \
	"    end\n"                                                                                    \
	"  end\n"                                                                                      \
	"  local function finish(top)\n"                                                               \
	"    if win > 0 then\n"                                                                        \
	"      if curb and curb.c ~= c0 then\n"                                                        \
	"        mset[#mset + 1], mset[#mset + 2] = curs, record()\n"                                  \
	"      end\n"                                                                                  \
	"      if #mset > 0 then rcall('HSET', base, unpack(mset)) end\n"                              \
	"    end\n"                                                                                    \
	"    if not rep and top then rcall('SET', keys[2], top .. ' ' .. owner) end\n"                 \
	"  end\n"                                                                                      \
	"  local res, top, a, chunk = {}, wm, 7, nil\n"                                                \
	"  local nargs, nres, nbk = #args, 0, bks and #bks or 0\n"                                     \
	"  local cm, cx, cmade\n"                                                                      \
	"  local function events()\n"                                                                  \
	"  while a < nargs do\n"                                                                       \
	"    local pos, f, first = args[a + 1], args[a + 2], a + 4\n"                                  \
	"    a = a + 3 + 2 * tonumber(args[a + 3])\n"                                                  \
	"    if not rep and top >= pos then\n"                                                         \
	"      nres = nres + 1\n"                                                                      \
	"      res[nres] = 0\n"                                                                        \
	"    else\n"                                                                                   \
	"      local key, dup, fresh, old\n"                                                           \
	"      if win > 0 then\n"                                                                      \
	"        local x, y, z = byte(f, 1, 3)\n"                                                      \
	"        local h = z and REV[x] + REV[y] * 256 + REV[z] * 65536 or #f\n"                       \
	"        for i = 1, nbk do\n"                                                                  \
	"          local bk, g, hb = bks[i], f, h\n"                                                   \
	"          if bk.v1 then\n"                                                                    \
	"            g = string.sub(f, 4)\n"                                                           \
	"            local p, q, r = byte(g, 1, 3)\n"                                                  \
	"            hb = r and REV[p] + REV[q] * 256 + REV[r] * 65536 or #g\n"                        \
	"          end\n"                                                                              \
	"          local j = hb % bk.m\n"                                                              \
	"          if j < bk.x then j = hb % (2 * bk.m) end\n"                                         \
	"          if bk.old then\n"                                                                   \
	"            local v = rcall('HGET', bk.pre .. (JS[j] or sname(j)), g)\n"                      \
	"            dup = v and bk.age - tonumber(v) <= win\n"                                        \
	"          else\n"                                                                             \
	"            dup = rcall('HEXISTS', bk.pre .. (JS[j] or sname(j)), g) == 1\n"                  \
	"          end\n"                                                                              \
	"          if dup then break end\n"                                                            \
	"        end\n"                                                                                \
	"        if not dup and now <= legacy then\n"                                                  \
	"          dup = rcall('EXISTS', args[6] .. idtext(string.sub(f, 4))) == 1\n"                  \
	"        end\n"                                                                                \
	"        if not dup then\n"                                                                    \
	"          if not chunk then\n"                                                                \
	"            if not curb then\n"                                                               \
	"              curb, c0 = {c = 0, made = 0}, -1\n"                                             \
	"              local n = math.max(prevb and prevb.c or 0, hint)\n"                             \
	"              setk(curb, math.max(1, math.min(1048576, math.ceil(n / LOAD))))\n"              \
	"            end\n"                                                                            \
	"            local kp = prevb and math.ceil(prevb.c / LOAD) or 0\n"                            \
	"            chunk = math.min(curb.k, curb.made + 256, math.max(kp, math.floor(curb.c / "      \
	"4)))\n"                                                                                       \
	"            for j = curb.made, chunk - 1 do\n"                                                \
	"              local kj = cpre .. sname(j)\n"                                                  \
	"              rcall('HSET', kj, '', '')\n"                                                    \
	"              rcall('EXPIREAT', kj, exps)\n"                                                  \
	"            end\n"                                                                            \
	"            if chunk > curb.made then curb.made, c0 = chunk, -1 end\n"                        \
	"            cm, cx, cmade = curb.m, curb.x, curb.made\n"                                      \
	"          end\n"                                                                              \
	"          local j = h % cm\n"                                                                 \
	"          if j < cx then j = h % (2 * cm) end\n"                                              \
	"          key = cpre .. (JS[j] or sname(j))\n"                                                \
	"          fresh = rcall('HSETNX', key, f, off) == 1\n"                                        \
	"          if fresh then\n"                                                                    \
	"            if j >= cmade then rcall('EXPIREAT', key, exps) end\n"                            \
	"          else\n"                                                                             \
	"            old = late and rcall('HGET', key, f)\n"                                           \
	"            if old and late - tonumber(old) > win then\n"                                     \
	"              rcall('HSET', key, f, off)\n"                                                   \
	"              c0 = -1\n"                                                                      \
	"            else\n"                                                                           \
	"              dup, key = true, nil\n"                                                         \
	"            end\n"                                                                            \
	"          end\n"                                                                              \
	"        end\n"                                                                                \
	"      end\n"                                                                                  \
	"      if dup then\n"                                                                          \
	"        nres = nres + 1\n"                                                                    \
	"        res[nres] = 1\n"                                                                      \
	"        top = pos\n"                                                                          \
	"      else\n"                                                                                 \
	"        local id\n"                                                                           \
	"        if maxlen ~= '0' then\n"                                                              \
	"          id = rpcall('XADD', keys[1], 'MAXLEN', '~', maxlen, '*', unpack(args, first, a))\n" \
	"        else\n"                                                                               \
	"          id = rpcall('XADD', keys[1], '*', unpack(args, first, a))\n"                        \
	"        end\n"                                                                                \
	"        if type(id) == 'table' then\n"                                                        \
	"          if id.err and string.sub(id.err, 1, 9) == 'WRONGTYPE' then\n"                       \
	"            local fs = {}\n"                                                                  \
	"            for j = first, a, 2 do fs[args[j]] = args[j + 1] end\n"                           \
	"            id = rpcall('XADD', keys[4], '*', 'reason', 'redis rejected the entry: ' ..\n"    \
	"              id.err, 'stream', keys[1], 'slot', args[5], 'raw', cjson.encode(fs))\n"         \
	"            if type(id) ~= 'table' or not id.err then id = 2 end\n"                           \
	"          end\n"                                                                              \
	"          if fresh then\n"                                                                    \
	"            rcall('HDEL', key, f)\n"                                                          \
	"          elseif key then\n"                                                                  \
	"            rcall('HSET', key, f, old)\n"                                                     \
	"          end\n"                                                                              \
	"          if id ~= 2 then return id end\n"                                                    \
	"        elseif fresh then\n"                                                                  \
	"          curb.c = curb.c + 1\n"                                                              \
	"        end\n"                                                                                \
	"        nres = nres + 1\n"                                                                    \
	"        res[nres] = id\n"                                                                     \
	"        top = pos\n"                                                                          \
	"      end\n"                                                                                  \
	"    end\n"                                                                                    \
	"  end\n"                                                                                      \
	"  while curb and curb.c > LOAD * curb.k do split() end\n"                                     \
	"  end\n"                                                                                      \
	"  local ok, e = pcall(events)\n"                                                              \
	"  if not ok or e then\n"                                                                      \
	"    finish(top ~= wm and top)\n"                                                              \
	"    return type(e) == 'table' and e or redis.error_reply(tostring(e))\n"                      \
	"  end\n"                                                                                      \
	"  finish(top)\n"                                                                              \
	"  return res\n"                                                                               \
	"end\n"

/*
 * --trim acked, on one stream (KEYS[1]): remove the entries no consumer group
 * needs any more. A group needs every entry after its last-delivered-id (all
 * of them when that is 0-0) and every entry still pending (the XPENDING
 * summary's smallest id), so the stream keeps everything from the smallest of
 * those over all groups on (XTRIM MINID ~: whole macro nodes only, never
 * past that id). A stream without groups, or no stream, is left alone.
 * XTRIM, unlike XDEL, leaves XINFO's entries-read and lag exact. Returns the
 * number of entries removed. allow-oom: trimming is what frees memory.
 */
#define TRIM_BODY                                                                                  \
	"local function idlt(a, b)\n"                                                                  \
	"  local am, as = string.match(a, '^(%d+)-(%d+)$')\n"                                          \
	"  local bm, bs = string.match(b, '^(%d+)-(%d+)$')\n"                                          \
	"  if #am ~= #bm then return #am < #bm end\n"                                                  \
	"  if am ~= bm then return am < bm end\n"                                                      \
	"  if #as ~= #bs then return #as < #bs end\n"                                                  \
	"  return as < bs\n"                                                                           \
	"end\n"                                                                                        \
	"local function trim(keys, args)\n"                                                            \
	"  if redis.call('EXISTS', keys[1]) == 0 then return 0 end\n"                                  \
	"  local keep\n"                                                                               \
	"  for _, g in ipairs(redis.call('XINFO', 'GROUPS', keys[1])) do\n"                            \
	"    local name, need\n"                                                                       \
	"    for i = 1, #g, 2 do\n"                                                                    \
	"      if g[i] == 'name' then name = g[i + 1]\n"                                               \
	"      elseif g[i] == 'last-delivered-id' then need = g[i + 1] end\n"                          \
	"    end\n"                                                                                    \
	"    local ms, seq = string.match(need, '^(%d+)-(%d+)$')\n"                                    \
	"    if #seq < 15 then need = ms .. '-' .. string.format('%d', tonumber(seq) + 1) end\n"       \
	"    local p = redis.call('XPENDING', keys[1], name)\n"                                        \
	"    if p[1] > 0 and idlt(p[2], need) then need = p[2] end\n"                                  \
	"    if not keep or idlt(need, keep) then keep = need end\n"                                   \
	"  end\n"                                                                                      \
	"  if not keep then return 0 end\n"                                                            \
	"  return redis.call('XTRIM', keys[1], 'MINID', '~', keep)\n"                                  \
	"end\n"

const char sink_script_library[] =
    "#!lua name=outbox_relay\n" PUBLISH_BODY TRIM_BODY
    "redis.register_function('" SINK_SCRIPT_PUBLISH "', publish)\n"
    "redis.register_function{function_name='" SINK_SCRIPT_TRIM "', callback=trim, "
    "flags={'allow-oom'}}\n";

const char sink_script_eval_publish[] = PUBLISH_BODY "return publish(KEYS, ARGV)\n";
const char sink_script_eval_trim[] = TRIM_BODY "return trim(KEYS, ARGV)\n";
