/*
 * sink_redis.c - pipelined publishing to Redis Streams (a single server or a
 * Redis Cluster) through one atomic server-side function.
 *
 * Every command the relay queues (a batch of events for one stream, or an
 * XGROUP CREATE) gets a sequence number and keeps its RESP bytes in one
 * resend buffer until it is done. A command is routed to the connection of
 * the master owning its stream's hash slot (one connection when standalone),
 * written with write(2) from the poll loop, and its reply is matched in order
 * on that connection by hiredis's reader. acked_seq is the end of the done
 * prefix, so acknowledgements stay in sequence order however the masters
 * interleave their answers.
 *
 * Failures: ASK sends that command to the named master after ASKING; any
 * other error or I/O failure drops every connection (the caller backs off),
 * and the next connect refreshes the slot map and routes every command that
 * is not done again, in sequence order. The function's watermark makes
 * sending a command twice harmless.
 *
 * Durability: with --wait-replicas / --wait-aof, each write round on a
 * connection ends with WAIT (or WAITAOF); executed commands become done only
 * when that answers with enough replicas (or fsyncs).
 */
#include "sink_redis.h"

#include <errno.h>
#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

#include "buf.h"
#include "cluster_slots.h"
#include "redis_conn.h"
#include "redis_sentinel.h"
#include "redis_tls.h"
#include "sink_cluster.h"

#define FUNCTION_NAME "outbox_relay_publish"
#define TRIM_FUNCTION_NAME "outbox_relay_trim"
#define MAX_NODES CLUSTER_SLOTS_MAX_NODES
#define CLUSTER_SLOTS CLUSTER_SLOTS_COUNT
_Static_assert(MAX_NODES <= INT8_MAX, "node indexes are int8_t (slot_node, qent.node)");
#define WBUF_FILL (256 * 1024) /* bytes staged per write round */
/* Field values at least this large are sent from the event's memory, not copied. */
#define EXT_MIN_BYTES (64 * 1024)
#define EXT_MAX_SEGS 8

/*
 * One call publishes a batch: consecutive events of one stream.
 * KEYS: stream, watermark, legacy watermark (the pre-0.2 per-hash-tag key, or
 * the watermark again), dead-letter stream, dedup base (see below); all in
 * the stream's cluster slot.
 * ARGV: dedup window seconds ("0": no dedup), MAXLEN ("0": no trimming), owner
 * ("<system id>/<database>" of the PostgreSQL database the relay streams
 * from), expect (the position the previous call of this relay for this
 * stream left the watermark at, "" for none), slot name, the old layout's
 * dedup key prefix ("<prefix>:dedup:{tag}...:"), then per event: position
 * "<commit lsn hex16>:<index hex8>", dedup field (dedup_field()), field
 * count N, and N field/value pairs.
 *
 * The watermark's value is "<position> <owner>". The call refuses, writing
 * nothing, when the watermark belongs to another database (OUTBOX_FOREIGN) or
 * is behind expect (OUTBOX_BEHIND: an earlier call did not run, or Redis lost
 * it). Returns one result per event, in order: 0 for a replay (the watermark
 * is at or past its position), 1 for a duplicate id inside the window, 2 for
 * an entry the stream key cannot take (WRONGTYPE), written instead to the
 * dead-letter stream in the same call, or the new entry's id.
 *
 * Dedup state, per stream: ids seen within the window W, by Redis's clock
 * (TIME; functions replicate as effects, so AOF and replicas get the keys
 * written, not the clock). Time buckets of W seconds: bucket b = now / W is
 * K hashes "<base>:<b>:<j>" (field: dedup_field() of an id, value: seconds
 * since the bucket began), all expiring at the bucket's end + W (EXPIREAT),
 * so at most two are live; an id is looked up (HGET, then the value's age
 * is compared with W: exact to the second) in the previous bucket and
 * inserted with HSETNX (0: a duplicate) into the current one. K grows by
 * linear hashing (shard j = h mod 2^L, or h mod 2^(L+1) for the shards
 * already split; h from the field's first and last 4 bytes), one split per
 * 40 ids, so each hash stays far below hash-max-listpack-entries (128 by
 * default) in the compact listpack encoding. A new bucket starts with the K
 * the previous one ended with; its shards are created (holding an empty
 * field "", with their expiry) up to 256 per call, and an id inserted into a
 * shard not created yet sets that shard's expiry itself. The hash "<base>"
 * (no TTL) holds per live bucket "<K> <count> <shards created>", and
 * "legacy": until when the old layout (one string key "<old prefix><id>"
 * with a TTL per id) may still hold ids (its first call's time + W when the
 * stream had a watermark, else 0), which are then looked up too (EXISTS).
 * Those keys are in the stream's slot (its hash tag) but not in KEYS: a
 * cluster node that cannot serve one (slot migration) fails the call at
 * that command; every event before it is complete (XADD and its entry), so
 * the retry finds them as duplicates and publishes the rest. A split
 * copies first, records the new K, and only then deletes the moved ids
 * from the old shard, so an id is always where the recorded K says.
 * An entry whose XADD fails (or is dead-lettered) is removed again (HDEL;
 * every call first runs a no-op HDEL, so a user without that permission
 * fails the call before it wrote anything), so a failing XADD leaves nothing
 * behind: the watermark then covers the
 * events before it and the error is returned; a retry publishes exactly
 * what is missing.
 * The watermark is written by every call, so each call replicates a write
 * that WAIT can wait for even when all its events were replays.
 * expect "R" (outbox-relay republish): the watermark is neither read nor
 * written; only the dedup window drops what was published before.
 */
#define PUBLISH_BODY                                                                               \
	"local function fhash(f)\n"                                                                    \
	"  if #f < 4 then return #f end\n"                                                             \
	"  local a, b, c, d = string.byte(f, 1, 4)\n"                                                  \
	"  local e, g, i, j = string.byte(f, -4, -1)\n"                                                \
	"  return (((a + e) * 256 + b + g) * 256 + c + i) * 256 + d + j\n"                             \
	"end\n"                                                                                        \
	"local function setk(bk, k)\n"                                                                 \
	"  local m = 1\n"                                                                              \
	"  while m * 2 <= k do m = m * 2 end\n"                                                        \
	"  bk.k, bk.m = k, m\n"                                                                        \
	"end\n"                                                                                        \
	"local JS = {}\n"                                                                              \
	"local function shard(h, bk)\n"                                                                \
	"  local j = h % bk.m\n"                                                                       \
	"  if j < bk.k - bk.m then j = h % (2 * bk.m) end\n"                                           \
	"  local s = JS[j]\n"                                                                          \
	"  if not s then\n"                                                                            \
	"    s = tostring(j)\n"                                                                        \
	"    JS[j] = s\n"                                                                              \
	"  end\n"                                                                                      \
	"  return s, j\n"                                                                              \
	"end\n"                                                                                        \
	"local function idtext(f)\n"                                                                   \
	"  if #f == 16 then\n"                                                                         \
	"    return "                                                                                  \
	"string.format('%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x',\n"      \
	"      string.byte(f, 1, 16))\n"                                                               \
	"  end\n"                                                                                      \
	"  local r = string.sub(f, 5)\n"                                                               \
	"  if #r >= 13 and string.byte(r, -1) == 0 then r = string.sub(r, 1, -2) end\n"                \
	"  return r\n"                                                                                 \
	"end\n"                                                                                        \
	"local function publish(keys, args)\n"                                                         \
	"  local ttl, maxlen, owner, expect = args[1], args[2], args[3], args[4]\n"                    \
	"  local rep = expect == 'R'\n"                                                                \
	"  local raw = not rep and redis.call('GET', keys[2])\n"                                       \
	"  if not rep and not raw and keys[3] ~= keys[2] then raw = redis.call('GET', keys[3]) end\n"  \
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
	"  local win, base, LOAD = tonumber(ttl), keys[5], 40\n"                                       \
	"  local now, span, cur, bks, curb, c0, prevb, legacy, mset, stale, exp, cpre, off\n"          \
	"  if win > 0 then\n"                                                                          \
	"    now = tonumber(redis.call('TIME')[1])\n"                                                  \
	"    span = win\n"                                                                             \
	"    cur = math.floor(now / span)\n"                                                           \
	"    exp = (cur + 1) * span + win\n"                                                           \
	"    cpre, off = base .. ':' .. cur .. ':', tostring(now - cur * span)\n"                      \
	"    bks, mset, stale = {}, {}, {}\n"                                                          \
	"    local m = redis.call('HGETALL', base)\n"                                                  \
	"    redis.call('HDEL', base, '\\0')\n"                                                        \
	"    for i = 1, #m, 2 do\n"                                                                    \
	"      local f = m[i]\n"                                                                       \
	"      if f == 'legacy' then\n"                                                                \
	"        legacy = tonumber(m[i + 1])\n"                                                        \
	"      else\n"                                                                                 \
	"        local b = tonumber(f)\n"                                                              \
	"        local k, c, made = string.match(m[i + 1], '^(%d+) (%d+) (%d+)$')\n"                   \
	"        local bk = {b = b, c = tonumber(c), made = tonumber(made), old = b * span < now - "   \
	"win,\n"                                                                                       \
	"                    pre = base .. ':' .. f .. ':', age = now - b * span}\n"                   \
	"        setk(bk, tonumber(k))\n"                                                              \
	"        if b == cur then\n"                                                                   \
	"          curb, c0 = bk, bk.c\n"                                                              \
	"        elseif (b + 1) * span <= now - win then\n"                                            \
	"          stale[#stale + 1] = f\n"                                                            \
	"        else\n"                                                                               \
	"          if b == cur - 1 then prevb = bk end\n"                                              \
	"          bks[#bks + 1] = bk\n"                                                               \
	"        end\n"                                                                                \
	"      end\n"                                                                                  \
	"    end\n"                                                                                    \
	"    if #bks > 1 then table.sort(bks, function(x, y) return x.b > y.b end) end\n"              \
	"    if not legacy then\n"                                                                     \
	"      legacy = (rep or raw) and now + win or 0\n"                                             \
	"      mset[#mset + 1], mset[#mset + 2] = 'legacy', legacy\n"                                  \
	"    end\n"                                                                                    \
	"  end\n"                                                                                      \
	"  local function finish(top)\n"                                                               \
	"    if win > 0 then\n"                                                                        \
	"      if curb and curb.c ~= c0 then\n"                                                        \
	"        mset[#mset + 1], mset[#mset + 2] = cur, curb.k .. ' ' .. curb.c .. ' ' .. "           \
	"curb.made\n"                                                                                  \
	"      end\n"                                                                                  \
	"      if #mset > 0 then redis.call('HSET', base, unpack(mset)) end\n"                         \
	"      if #stale > 0 then redis.call('HDEL', base, unpack(stale)) end\n"                       \
	"    end\n"                                                                                    \
	"    if not rep and top then redis.call('SET', keys[2], top .. ' ' .. owner) end\n"            \
	"  end\n"                                                                                      \
	"  local res, top, a, chunk = {}, wm, 6, nil\n"                                                \
	"  while a < #args do\n"                                                                       \
	"    local pos, f, first = args[a + 1], args[a + 2], a + 4\n"                                  \
	"    a = a + 3 + 2 * tonumber(args[a + 3])\n"                                                  \
	"    local key, dup\n"                                                                         \
	"    if not rep and wm >= pos then\n"                                                          \
	"      res[#res + 1] = 0\n"                                                                    \
	"    else\n"                                                                                   \
	"      if win > 0 then\n"                                                                      \
	"        local h = fhash(f)\n"                                                                 \
	"        for i = 1, #bks do\n"                                                                 \
	"          local bk = bks[i]\n"                                                                \
	"          if bk.old then\n"                                                                   \
	"            local v = redis.call('HGET', bk.pre .. shard(h, bk), f)\n"                        \
	"            dup = v and bk.age - tonumber(v) <= win\n"                                        \
	"          else\n"                                                                             \
	"            dup = redis.call('HEXISTS', bk.pre .. shard(h, bk), f) == 1\n"                    \
	"          end\n"                                                                              \
	"          if dup then break end\n"                                                            \
	"        end\n"                                                                                \
	"        if not dup and now <= legacy then\n"                                                  \
	"          dup = redis.call('EXISTS', args[6] .. idtext(f)) == 1\n"                            \
	"        end\n"                                                                                \
	"        if not dup then\n"                                                                    \
	"          if not curb then\n"                                                                 \
	"            curb, c0 = {b = cur, c = 0, made = 0}, -1\n"                                      \
	"            setk(curb, prevb and math.max(1, math.min(1048576, math.ceil(prevb.c / LOAD))) "  \
	"or 1)\n"                                                                                      \
	"          end\n"                                                                              \
	"          if not chunk then\n"                                                                \
	"            chunk = math.min(curb.k, curb.made + 256)\n"                                      \
	"            for j = curb.made, chunk - 1 do\n"                                                \
	"              redis.call('HSET', cpre .. j, '', '')\n"                                        \
	"              redis.call('EXPIREAT', cpre .. j, exp)\n"                                       \
	"            end\n"                                                                            \
	"            if chunk > curb.made then curb.made, c0 = chunk, -1 end\n"                        \
	"          end\n"                                                                              \
	"          local s, j = shard(h, curb)\n"                                                      \
	"          key = cpre .. s\n"                                                                  \
	"          dup = redis.call('HSETNX', key, f, off) == 0\n"                                     \
	"          if not dup and j >= curb.made then redis.call('EXPIREAT', key, exp) end\n"          \
	"        end\n"                                                                                \
	"      end\n"                                                                                  \
	"      if dup then\n"                                                                          \
	"        res[#res + 1] = 1\n"                                                                  \
	"        top = pos\n"                                                                          \
	"      else\n"                                                                                 \
	"        local id\n"                                                                           \
	"        if maxlen ~= '0' then\n"                                                              \
	"          id = redis.pcall('XADD', keys[1], 'MAXLEN', '~', maxlen, '*', unpack(args, first, " \
	"a))\n"                                                                                        \
	"        else\n"                                                                               \
	"          id = redis.pcall('XADD', keys[1], '*', unpack(args, first, a))\n"                   \
	"        end\n"                                                                                \
	"        if type(id) == 'table' and id.err and string.sub(id.err, 1, 9) == 'WRONGTYPE' then\n" \
	"          local fs = {}\n"                                                                    \
	"          for j = first, a, 2 do fs[args[j]] = args[j + 1] end\n"                             \
	"          id = redis.pcall('XADD', keys[4], '*', 'reason', 'redis rejected the entry: ' ..\n" \
	"            id.err, 'stream', keys[1], 'slot', args[5], 'raw', cjson.encode(fs))\n"           \
	"          if type(id) ~= 'table' or not id.err then id = 2 end\n"                             \
	"        end\n"                                                                                \
	"        local failed = type(id) == 'table' and id.err\n"                                      \
	"        if key and (failed or id == 2) then\n"                                                \
	"          redis.call('HDEL', key, f)\n"                                                       \
	"        elseif key then\n"                                                                    \
	"          curb.c = curb.c + 1\n"                                                              \
	"        end\n"                                                                                \
	"        if failed then\n"                                                                     \
	"          finish(top ~= wm and top)\n"                                                        \
	"          return id\n"                                                                        \
	"        end\n"                                                                                \
	"        res[#res + 1] = id\n"                                                                 \
	"        top = pos\n"                                                                          \
	"      end\n"                                                                                  \
	"    end\n"                                                                                    \
	"  end\n"                                                                                      \
	"  while curb and curb.c > LOAD * curb.k do\n"                                                 \
	"    local p = curb.k - curb.m\n"                                                              \
	"    local src, dst = cpre .. p, cpre .. curb.k\n"                                             \
	"    local all, mv, del = redis.call('HGETALL', src), {'', ''}, {}\n"                          \
	"    for i = 1, #all, 2 do\n"                                                                  \
	"      local f = all[i]\n"                                                                     \
	"      if f ~= '' and fhash(f) % (2 * curb.m) ~= p then\n"                                     \
	"        mv[#mv + 1], mv[#mv + 2] = f, all[i + 1]\n"                                           \
	"        del[#del + 1] = f\n"                                                                  \
	"      end\n"                                                                                  \
	"    end\n"                                                                                    \
	"    redis.call('HSET', dst, unpack(mv))\n"                                                    \
	"    redis.call('EXPIREAT', dst, exp)\n"                                                       \
	"    if curb.made == curb.k then curb.made = curb.k + 1 end\n"                                 \
	"    setk(curb, curb.k + 1)\n"                                                                 \
	"    redis.call('HSET', base, cur, curb.k .. ' ' .. curb.c .. ' ' .. curb.made)\n"             \
	"    if #del > 0 then redis.call('HDEL', src, unpack(del)) end\n"                              \
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

const char sink_redis_function_library[] =
    "#!lua name=outbox_relay\n" PUBLISH_BODY TRIM_BODY "redis.register_function('" FUNCTION_NAME
    "', publish)\n"
    "redis.register_function{function_name='" TRIM_FUNCTION_NAME "', callback=trim, "
    "flags={'allow-oom'}}\n";

static const char eval_script[] = PUBLISH_BODY "return publish(KEYS, ARGV)\n";
static const char eval_trim_script[] = TRIM_BODY "return trim(KEYS, ARGV)\n";

enum qkind { Q_PUBLISH, Q_DEAD, Q_GROUP, Q_RECORD, Q_GETREC };
enum qstate { QS_QUEUED = 0, QS_ROUTED, QS_EXECUTED, QS_DONE };

/* Most events in one function call, and the size at which a batch is closed. */
#define BATCH_MAX_EVENTS 128
/* Calls awaiting replies below which an open batch is sent at once. */
#define BATCH_PIPELINE_DEPTH 2
#define BATCH_MAX_BYTES (256 * 1024)

struct qent {
	uint64_t seq;
	uint64_t off;       /* absolute offset of its bytes (see out_base) */
	size_t len;         /* encoded bytes */
	int64_t commit_us;  /* commit time, for the latency histogram (0: unknown) */
	uint32_t nevents;   /* events in a publish batch; 0 for XGROUP */
	uint32_t stream_id; /* metrics label id */
	uint16_t slot;      /* cluster hash slot of its stream */
	int8_t node;        /* connection it is routed to, -1 none */
	uint8_t kind;       /* enum qkind */
	uint8_t state;      /* enum qstate */
	uint8_t dead_reason;
	bool asking;       /* send ASKING first (after an ASK redirect) */
	uint64_t prev_seq; /* this relay's previous call for the same stream, 0 none */
	struct ext *ext;   /* large values sent from the event's own memory, NULL none */
	size_t max_value;  /* its largest field value, for messages */
};

/*
 * A command whose large field values are not copied into out: its bytes are
 * out[off, off + len) with seg[i].len bytes from seg[i].p inserted at offset
 * seg[i].at (ascending). hold is the memory the segments point into (the
 * relay's copy of the WAL message), released with hold_free once the command
 * is acknowledged.
 */
struct ext {
	void *hold;
	void (*hold_free)(void *);
	size_t total; /* sum of seg[].len */
	size_t nseg;
	struct {
		size_t at;
		const char *p;
		size_t len;
	} seg[EXT_MAX_SEGS];
};

/* A FIFO of 64-bit values: sequence numbers, or the markers below. */
struct u64q {
	uint64_t *v;
	size_t cap, head, len;
};

#define WAIT_MARK UINT64_MAX         /* the reply answers WAIT / WAITAOF */
#define ASKING_MARK (UINT64_MAX - 1) /* the reply answers ASKING */
#define INFO_MARK (UINT64_MAX - 2)   /* the reply answers INFO memory */
#define TRIM_MARK (UINT64_MAX - 3)   /* the reply answers a --trim acked call */

/* One connection: the single server, or one cluster master. */
struct node {
	char *host;
	int port;
	char *unix_path;
	const struct redis_conn_ops *io; /* plain or TLS reads and writes, chosen at connect */
	redisContext *c;
	struct u64q sendq; /* seqs routed here, not yet staged */
	struct buf wbuf;   /* staged bytes, written from wsent */
	size_t wsent;
	uint64_t part_seq; /* command staged only up to part_off (0: none) */
	size_t part_off;
	struct u64q waitq;   /* what each coming reply answers */
	struct u64q durable; /* executed seqs that the next WAIT must cover */
	bool staged_publish; /* a publish was staged since the last WAIT */
	bool wblocked;       /* the socket was full: write again only after POLLOUT */
	void *ssl;           /* TLS session (owned by c), NULL for plain sockets */
	bool w_wants_read;   /* TLS: the blocked write waits for the socket to be readable */
	bool r_wants_write;  /* TLS: a read waits for the socket to be writable */
	int64_t wait_since_us;
	bool info_due;  /* stage INFO memory with the next write */
	bool info_sent; /* its reply is still to come */
	bool mem_known; /* used_memory and maxmemory were read */
	uint64_t used_memory, maxmemory;
	struct buf trimq; /* --trim acked calls to stage with the next write */
	uint32_t trimq_n;
	uint64_t max_bulk; /* proto-max-bulk-len, 0 unknown */
};

struct strset {
	char **slots;
	size_t cap; /* power of two */
	size_t used;
};

/*
 * Per stream: where this relay's last queued call for it leaves the
 * watermark, and that call's seq. The next call for the stream states that
 * position as the watermark it expects, so a call that runs while an earlier
 * one for the same stream was rejected (OOM, BUSY, a cluster redirect) is
 * refused instead of moving the watermark past events never written.
 */
struct lastpos {
	char *stream; /* NULL: free */
	size_t len;
	uint64_t seq;
	char pos[26]; /* "<lsn hex16>:<index hex8>" */
};

struct posmap {
	struct lastpos *v;
	size_t cap; /* power of two */
	size_t used;
};

struct sink_redis {
	const struct relay_config *cf;
	struct metrics *m;
	bool use_functions;
	char sha[41];    /* EVALSHA digest when functions are unavailable */
	bool wait_mode;  /* --wait-replicas or --wait-aof */
	char policy[32]; /* maxmemory-policy of the node connected last ("" unknown) */

	struct node nodes[MAX_NODES];
	int nnodes;
	int8_t *slot_node; /* cluster: slot -> node, -1 unknown */
	bool connected;
	bool sentinel_found; /* Sentinel mode: a master was found once (later failures are retried) */
	int poll_node[MAX_NODES]; /* node of each pollfd handed out */
	int npoll;

	/* Encoded commands in seq order; out.data[0] is absolute offset out_base. */
	struct buf out;
	uint64_t out_base;

	/* Ring of commands by seq, oldest (lowest seq) at q_head. */
	struct qent *q;
	size_t q_cap, q_head, q_len;

	uint64_t next_seq;        /* seq of the next command */
	uint64_t acked_seq;       /* every command up to here is done */
	uint64_t inflight_events; /* events queued (open batch included), not yet done */

	/*
	 * The open batch: consecutive events for one stream, not yet encoded into
	 * out. It takes its seq when opened; any other command closes it first,
	 * so seqs in the ring stay consecutive.
	 */
	bool b_open;
	bool b_dead;
	uint64_t b_seq;
	uint32_t b_n;
	struct buf b_stream;
	struct buf b_args; /* RESP bulk strings: pos, nfields, fields per event */
	int64_t b_commit_us;
	uint32_t b_stream_id;
	uint8_t b_dead_reason;
	uint64_t b_args_count;  /* ARGV entries after ttl and maxlen */
	struct ext *b_ext;      /* segments of the open batch (at: offsets in b_args) */
	uint64_t refused_value; /* SINK_ERR_TOO_BIG: the largest value of the refused call */
	uint64_t max_value;     /* sink_redis_max_value(), 0 while disconnected */
	size_t b_max_value;     /* largest field value in the open batch */
	uint64_t ext_bytes;     /* bytes of live commands' segments */
	struct buf b_prefix;    /* old-layout dedup key prefix of the open batch */
	uint64_t b_prev_seq;    /* previous call for the batch's stream, 0 none */
	char b_expect[26];      /* where that call leaves the watermark, "" none */
	char b_last[26];        /* position of the batch's last event */
	struct posmap last_pos;
	char owner[160];  /* "<system id>/<database>": whose positions the watermarks hold */
	bool republish;   /* sink_redis_set_republish */
	bool record_read; /* the slot record was read (first connect) */
	bool record_found;
	struct slot_record record;
	uint64_t record_gen; /* counts record reads */

	struct strset streams; /* streams that got XGROUP CREATE on this connection set */
	bool trim;             /* --trim acked */
	char trim_sha[41];     /* EVALSHA digest of the trim script when functions are unavailable */
	struct strset trim_streams; /* streams published to, for --trim acked */
	uint32_t trim_pending;      /* calls of the current round still to answer */
	bool trim_done;             /* a round finished: trim_res is to be taken */
	struct sink_trim_result trim_res;
	struct buf key; /* scratch for key names */
	struct buf tag;
	struct buf wait_cmd; /* encoded WAIT or WAITAOF */
	struct sink_stats stats;
	enum sink_error_kind errkind;
	char errmsg[1024];
};

/* ---- small string set (streams already given their consumer groups) ---- */

static uint64_t hash_bytes(const char *s, size_t n)
{
	uint64_t h = 1469598103934665603ULL; /* FNV-1a */

	for (size_t i = 0; i < n; i++) {
		h ^= (unsigned char)s[i];
		h *= 1099511628211ULL;
	}
	return h;
}

static void strset_clear(struct strset *set)
{
	for (size_t i = 0; i < set->cap; i++) {
		free(set->slots[i]);
		set->slots[i] = NULL;
	}
	set->used = 0;
}

static void strset_finish(struct strset *set)
{
	strset_clear(set);
	free(set->slots);
	*set = (struct strset){0};
}

/* Insert s; returns 1 when added, 0 when present, -1 when out of memory. */
static int strset_add(struct strset *set, const char *s, size_t n)
{
	size_t i;

	if (!set->slots) {
		set->cap = 1024;
		set->slots = calloc(set->cap, sizeof(char *));
		if (!set->slots)
			return -1;
	}
	/* Bounded: forget everything rather than grow without limit; the cost is
	 * a few redundant XGROUP CREATE calls that answer BUSYGROUP. */
	if (set->used * 2 >= set->cap) {
		if (set->cap < 65536) {
			struct strset bigger = {calloc(set->cap * 2, sizeof(char *)), set->cap * 2, 0};

			if (!bigger.slots)
				return -1;
			strset_finish(set);
			*set = bigger;
		} else {
			strset_clear(set);
		}
	}
	i = hash_bytes(s, n) & (set->cap - 1);
	while (set->slots[i]) {
		if (strlen(set->slots[i]) == n && memcmp(set->slots[i], s, n) == 0)
			return 0;
		i = (i + 1) & (set->cap - 1);
	}
	set->slots[i] = strndup(s, n);
	if (!set->slots[i])
		return -1;
	set->used++;
	return 1;
}

/* ---- last position per stream ---- */

#define POSMAP_MAX 65536 /* streams remembered before done ones are forgotten */

static struct lastpos *posmap_find(const struct posmap *pm, const char *s, size_t n)
{
	size_t i;

	if (!pm->v)
		return NULL;
	for (i = hash_bytes(s, n) & (pm->cap - 1); pm->v[i].stream; i = (i + 1) & (pm->cap - 1))
		if (pm->v[i].len == n && memcmp(pm->v[i].stream, s, n) == 0)
			return &pm->v[i];
	return NULL;
}

static void posmap_finish(struct posmap *pm)
{
	for (size_t i = 0; i < pm->cap; i++)
		free(pm->v[i].stream);
	free(pm->v);
	*pm = (struct posmap){0};
}

/*
 * Rebuild into cap slots, keeping the entries whose call is not yet done
 * (seq > acked), or all of them when acked is UINT64_MAX. Forgetting a done
 * call is safe: Redis already moved the watermark to its position, so the
 * next call for that stream simply states no expectation.
 */
static bool posmap_rebuild(struct posmap *pm, size_t cap, uint64_t acked)
{
	struct posmap n = {calloc(cap, sizeof(struct lastpos)), cap, 0};

	if (!n.v)
		return false;
	for (size_t i = 0; i < pm->cap; i++) {
		struct lastpos *e = &pm->v[i];
		size_t j;

		if (!e->stream)
			continue;
		if (acked != UINT64_MAX && e->seq <= acked) {
			free(e->stream);
			continue;
		}
		for (j = hash_bytes(e->stream, e->len) & (cap - 1); n.v[j].stream; j = (j + 1) & (cap - 1))
			;
		n.v[j] = *e;
		n.used++;
	}
	free(pm->v);
	*pm = n;
	return true;
}

/* The entry for stream s, created empty when absent; NULL when out of memory. */
static struct lastpos *posmap_get(struct posmap *pm, const char *s, size_t n, uint64_t acked)
{
	struct lastpos *e = posmap_find(pm, s, n);
	size_t i;

	if (e)
		return e;
	if (!pm->v && !posmap_rebuild(pm, 1024, UINT64_MAX))
		return NULL;
	if ((pm->used + 1) * 2 > pm->cap) {
		size_t cap = pm->cap < POSMAP_MAX ? pm->cap * 2 : pm->cap;

		if (!posmap_rebuild(pm, cap, pm->cap < POSMAP_MAX ? UINT64_MAX : acked))
			return NULL;
		if ((pm->used + 1) * 2 > pm->cap && !posmap_rebuild(pm, pm->cap * 2, UINT64_MAX))
			return NULL;
	}
	for (i = hash_bytes(s, n) & (pm->cap - 1); pm->v[i].stream; i = (i + 1) & (pm->cap - 1))
		;
	pm->v[i].stream = malloc(n ? n : 1);
	if (!pm->v[i].stream)
		return NULL;
	memcpy(pm->v[i].stream, s, n);
	pm->v[i].len = n;
	pm->v[i].seq = 0;
	pm->v[i].pos[0] = '\0';
	pm->used++;
	return &pm->v[i];
}

/* ---- RESP encoding ---- */

static void resp_array(struct buf *b, size_t n)
{
	buf_putc(b, '*');
	buf_put_u64(b, n);
	buf_append(b, "\r\n", 2);
}

static void resp_bulk(struct buf *b, const char *s, size_t n)
{
	buf_putc(b, '$');
	buf_put_u64(b, n);
	buf_append(b, "\r\n", 2);
	buf_append(b, s, n);
	buf_append(b, "\r\n", 2);
}

static void resp_str(struct buf *b, const char *s)
{
	resp_bulk(b, s, strlen(s));
}

/* ---- u64 FIFO ---- */

static bool u64q_push(struct u64q *q, uint64_t v)
{
	if (q->len == q->cap) {
		size_t cap = q->cap ? q->cap * 2 : 64;
		uint64_t *n = malloc(cap * sizeof(*n));

		if (!n)
			return false;
		for (size_t i = 0; i < q->len; i++)
			n[i] = q->v[(q->head + i) % q->cap];
		free(q->v);
		q->v = n;
		q->cap = cap;
		q->head = 0;
	}
	q->v[(q->head + q->len) % q->cap] = v;
	q->len++;
	return true;
}

static uint64_t u64q_pop(struct u64q *q)
{
	uint64_t v = q->v[q->head];

	q->head = (q->head + 1) % q->cap;
	q->len--;
	return v;
}

static void u64q_finish(struct u64q *q)
{
	free(q->v);
	*q = (struct u64q){0};
}

/* ---- the command ring ---- */

static struct qent *ent_of(struct sink_redis *s, uint64_t seq)
{
	uint64_t first;

	if (s->q_len == 0)
		return NULL;
	first = s->q[s->q_head].seq;
	if (seq < first || seq >= first + s->q_len)
		return NULL;
	return &s->q[(s->q_head + (size_t)(seq - first)) % s->q_cap];
}

static const char *ent_bytes(const struct sink_redis *s, const struct qent *e)
{
	return s->out.data + (e->off - s->out_base);
}

static bool queue_push(struct sink_redis *s, const struct qent *ent)
{
	if (s->q_len == s->q_cap) {
		size_t cap = s->q_cap ? s->q_cap * 2 : 1024;
		struct qent *q = malloc(cap * sizeof(*q));

		if (!q)
			return false;
		for (size_t i = 0; i < s->q_len; i++)
			q[i] = s->q[(s->q_head + i) % s->q_cap];
		free(s->q);
		s->q = q;
		s->q_cap = cap;
		s->q_head = 0;
	}
	s->q[(s->q_head + s->q_len) % s->q_cap] = *ent;
	s->q_len++;
	return true;
}

static void ext_free(struct sink_redis *s, struct ext **x)
{
	if (!*x)
		return;
	if ((*x)->hold_free)
		(*x)->hold_free((*x)->hold);
	s->ext_bytes -= (*x)->total;
	free(*x);
	*x = NULL;
}

/* Bytes on the wire: out's plus the segments'. */
static size_t cmd_len(const struct qent *e)
{
	return e->len + (e->ext ? e->ext->total : 0);
}

/* Pop the done prefix: it is acknowledged. Reclaim its bytes now and then. */
static void advance_head(struct sink_redis *s)
{
	while (s->q_len > 0 && s->q[s->q_head].state == QS_DONE) {
		struct qent *e = &s->q[s->q_head];

		ext_free(s, &e->ext);
		s->acked_seq = e->seq;
		s->inflight_events -= e->nevents;
		s->q_head = (s->q_head + 1) % s->q_cap;
		s->q_len--;
	}
	if (s->q_len == 0) {
		s->out_base += s->out.len;
		s->out.len = 0;
	} else {
		size_t dead = (size_t)(s->q[s->q_head].off - s->out_base);

		if (dead > (1u << 20) && dead * 2 > s->out.len) {
			memmove(s->out.data, s->out.data + dead, s->out.len - dead);
			s->out.len -= dead;
			s->out_base += dead;
		}
	}
}

/* ---- cluster hash slots ---- */

/* Slot of stream s: stream_hash_tag() gives "{x}" where x is what Redis hashes. */
static uint16_t stream_slot(struct sink_redis *s, const char *stream, size_t len)
{
	if (!stream_hash_tag(stream, len, &s->tag) || s->tag.len < 2)
		return (uint16_t)(cluster_slots_crc16(stream, len) & (CLUSTER_SLOTS - 1));
	return (uint16_t)(cluster_slots_crc16(s->tag.data + 1, s->tag.len - 2) & (CLUSTER_SLOTS - 1));
}

/* ---- lifecycle ---- */

/* "<key-prefix>:slot:<slot>": the slot record's key (no hash tag: its own cluster slot). */
static void record_key(const struct relay_config *cf, struct buf *b)
{
	buf_reset(b);
	buf_puts(b, cf->key_prefix);
	buf_puts(b, ":slot:");
	buf_puts(b, cf->slot);
}

bool slot_record_parse(const char *v, size_t len, struct slot_record *rec)
{
	unsigned long long conf, commit;
	long long us;
	int used = 0;
	char text[256];

	if (len >= sizeof(text))
		return false;
	memcpy(text, v, len);
	text[len] = '\0';
	memset(rec, 0, sizeof(*rec));
	if (sscanf(text, "%16llx %16llx %lld %n", &conf, &commit, &us, &used) != 3 || used == 0 ||
	    (size_t)used >= len || strlen(text + used) >= sizeof(rec->owner))
		return false;
	rec->confirmed = (lsn_t)conf;
	rec->commit_lsn = (lsn_t)commit;
	rec->commit_us = us;
	memcpy(rec->owner, text + used, strlen(text + used) + 1);
	return true;
}

struct sink_redis *sink_redis_create(const struct relay_config *cf, struct metrics *m)
{
	struct sink_redis *s = calloc(1, sizeof(*s));

	if (!s)
		return NULL;
	s->cf = cf;
	s->m = m;
	s->use_functions = cf->redis_functions;
	s->trim = cf->trim && strcmp(cf->trim, "acked") == 0;
	s->next_seq = 1;
	s->wait_mode = cf->wait_replicas > 0 || (cf->wait_aof && strcmp(cf->wait_aof, "none") != 0);
	if (s->wait_mode) {
		char n[24], t[24];

		snprintf(t, sizeof(t), "%d", cf->wait_timeout_ms);
		if (cf->wait_aof && strcmp(cf->wait_aof, "none") != 0) {
			snprintf(n, sizeof(n), "%" PRId64,
			         strcmp(cf->wait_aof, "local,replicas") == 0 ? cf->wait_replicas : 0);
			resp_array(&s->wait_cmd, 4);
			resp_str(&s->wait_cmd, "WAITAOF");
			resp_str(&s->wait_cmd, "1");
		} else {
			snprintf(n, sizeof(n), "%" PRId64, cf->wait_replicas);
			resp_array(&s->wait_cmd, 3);
			resp_str(&s->wait_cmd, "WAIT");
		}
		resp_str(&s->wait_cmd, n);
		resp_str(&s->wait_cmd, t);
	}
	if (cf->redis.cluster) {
		s->slot_node = malloc(CLUSTER_SLOTS);
		if (!s->slot_node) {
			buf_finish(&s->wait_cmd);
			free(s);
			return NULL;
		}
		memset(s->slot_node, -1, CLUSTER_SLOTS);
	}
	return s;
}

static void node_close(struct node *n)
{
	if (n->c) {
		redisFree(n->c);
		n->c = NULL;
	}
	n->sendq.len = n->waitq.len = n->durable.len = 0;
	buf_reset(&n->wbuf);
	n->wsent = 0;
	n->part_seq = 0;
	n->part_off = 0;
	n->staged_publish = false;
	n->wblocked = false;
	n->ssl = NULL;
	n->io = NULL;
	n->w_wants_read = n->r_wants_write = false;
	n->info_due = n->info_sent = n->mem_known = false;
	buf_reset(&n->trimq);
	n->trimq_n = 0;
}

/* n's connection as redis_conn.h has it (n->io reads and writes through it). */
static struct redis_conn node_conn(const struct node *n)
{
	return (struct redis_conn){.c = n->c, .ssl = n->ssl, .ops = n->io};
}

/* "host:port" or the unix socket path, for messages. */
static const char *node_addr(const struct node *n, char *buf, size_t len)
{
	if (n->unix_path)
		snprintf(buf, len, "%s", n->unix_path);
	else
		snprintf(buf, len, "%s:%d", n->host, n->port);
	return buf;
}

static void node_finish(struct node *n)
{
	node_close(n);
	u64q_finish(&n->sendq);
	u64q_finish(&n->waitq);
	u64q_finish(&n->durable);
	buf_finish(&n->wbuf);
	buf_finish(&n->trimq);
	free(n->host);
	free(n->unix_path);
	memset(n, 0, sizeof(*n));
}

void sink_redis_destroy(struct sink_redis *s)
{
	if (!s)
		return;
	for (int i = 0; i < s->nnodes; i++)
		node_finish(&s->nodes[i]);
	for (size_t i = 0; i < s->q_len; i++)
		ext_free(s, &s->q[(s->q_head + i) % s->q_cap].ext);
	ext_free(s, &s->b_ext);
	free(s->slot_node);
	buf_finish(&s->out);
	buf_finish(&s->key);
	buf_finish(&s->tag);
	buf_finish(&s->wait_cmd);
	buf_finish(&s->b_stream);
	buf_finish(&s->b_args);
	buf_finish(&s->b_prefix);
	strset_finish(&s->streams);
	strset_finish(&s->trim_streams);
	posmap_finish(&s->last_pos);
	free(s->q);
	free(s);
}

bool sink_redis_set_owner(struct sink_redis *s, const char *system_id, const char *dbname)
{
	int n = snprintf(s->owner, sizeof(s->owner), "%s/%s", system_id, dbname);

	return n > 0 && (size_t)n < sizeof(s->owner);
}

const char *sink_redis_errmsg(const struct sink_redis *s)
{
	return s->errmsg;
}

enum sink_error_kind sink_redis_errkind(const struct sink_redis *s)
{
	return s->errkind;
}

size_t sink_redis_event_size(const struct event *ev)
{
	size_t n = ev->stream_len + ev->id_len;

	for (size_t i = 0; i < ev->nfields; i++)
		n += ev->fields[i].name_len + ev->fields[i].value_len;
	return n;
}

/*
 * An ACL refusal: "NOPERM ..." for a command the relay sends, "ERR The user
 * executing the script can't ..." for one the function or script sends.
 */
static bool noperm_reply(const char *msg)
{
	return strncmp(msg, "NOPERM", 6) == 0 || strstr(msg, "user executing the script can't");
}

/*
 * One line for an ACL refusal of what: the permission to grant, from the
 * reply's "'wait' command" when it names one, else fix (NULL: say which keys).
 */
static void noperm_message(struct sink_redis *s, const char *what, const char *fix, const char *msg)
{
	const char *q = strchr(msg, '\'');
	const char *e = q ? strchr(q + 1, '\'') : NULL;
	char perm[64];

	s->errkind = SINK_ERR_NOPERM;
	if (strncmp(msg, "NOPERM", 6) != 0 || !strstr(msg, "command"))
		fix = NULL; /* a key, or a command the function sends */
	if (q && e && e > q + 1 && (size_t)(e - q - 1) < sizeof(perm)) {
		snprintf(perm, sizeof(perm), "%.*s", (int)(e - q - 1), q + 1);
		fix = perm;
	}
	if (fix)
		snprintf(s->errmsg, sizeof(s->errmsg),
		         "%s refused by the Redis ACL (%s): grant +%s to the relay's Redis user "
		         "(see deploy/redis/users.acl)",
		         what, msg, fix);
	else
		snprintf(s->errmsg, sizeof(s->errmsg),
		         "%s refused by the Redis ACL (%s): grant the relay's Redis user the commands "
		         "and key patterns of deploy/redis/users.acl (~outbox:* ~outbox-relay:*, or "
		         "your --key-prefix and stream names)",
		         what, msg);
}

/* An ACL refusal of a key (not of a command). */
static bool key_refusal(const char *msg)
{
	return noperm_reply(msg) && strstr(msg, "access") && strstr(msg, "key");
}

/*
 * The idx-th argument of an encoded command (RESP array of bulk strings):
 * its length in *len, or NULL when the command has fewer arguments.
 */
static const char *resp_arg(const char *p, size_t n, size_t idx, size_t *len)
{
	const char *end = p + n;
	size_t argc = 0;

	if (n < 4 || p[0] != '*')
		return NULL;
	argc = strtoul(p + 1, NULL, 10);
	if (idx >= argc || !(p = memchr(p, '\n', n)))
		return NULL;
	for (size_t i = 0; ++p < end && *p == '$'; i++) {
		size_t l = strtoul(p + 1, NULL, 10);
		const char *d = memchr(p, '\n', (size_t)(end - p));

		if (!d || (size_t)(end - d - 1) < l)
			return NULL;
		if (i == idx) {
			*len = l;
			return d + 1;
		}
		p = d + 1 + l + 1; /* past the data's \r\n */
	}
	return NULL;
}

static const char *kind_name(unsigned k);

/*
 * One line for an ACL refusal of a key of e's call: which key the call was
 * for (Redis does not say which of its keys it refused) and the patterns to
 * grant. No retry can get past it.
 */
static void key_noperm_message(struct sink_redis *s, const struct qent *e, const char *msg)
{
	size_t klen = 0;
	const char *key = resp_arg(ent_bytes(s, e), e->len,
	                           e->kind == Q_PUBLISH || e->kind == Q_DEAD ? 3
	                           : e->kind == Q_GROUP                      ? 2
	                                                                     : 1,
	                           &klen);

	s->errkind = SINK_ERR_NOPERM;
	if (!key)
		key = "?";
	if (e->kind == Q_PUBLISH || e->kind == Q_DEAD)
		snprintf(s->errmsg, sizeof(s->errmsg),
		         "%s to stream \"%.*s\" refused by the Redis ACL (%s): the relay's Redis "
		         "user may not access a key of this call (the stream, the dead-letter stream "
		         "\"%s\", or the \"%s:*\" watermark and dedup keys): add their patterns to "
		         "its ACL (~outbox:* ~outbox-relay:* in deploy/redis/users.acl, or your "
		         "stream names and --key-prefix)",
		         kind_name(e->kind), (int)(klen < 200 ? klen : 200), key, msg,
		         s->cf->dead_letter_stream, s->cf->key_prefix);
	else
		snprintf(s->errmsg, sizeof(s->errmsg),
		         "%s of key \"%.*s\" refused by the Redis ACL (%s): add the key's pattern to "
		         "the relay's Redis user (~outbox:* ~outbox-relay:* in deploy/redis/users.acl, "
		         "or your stream names and --key-prefix)",
		         kind_name(e->kind), (int)(klen < 200 ? klen : 200), key, msg);
}

/* Classify an error reply by its first word. */
static enum sink_error_kind classify_reply_error(const char *msg)
{
	if (noperm_reply(msg))
		return SINK_ERR_NOPERM;

	static const struct {
		const char *prefix;
		enum sink_error_kind kind;
	} map[] = {
	    {"OOM", SINK_ERR_OOM},
	    {"WRONGTYPE", SINK_ERR_WRONGTYPE},
	    {"NOSCRIPT", SINK_ERR_NOSCRIPT},
	    {"READONLY", SINK_ERR_READONLY},
	    {"BUSY", SINK_ERR_BUSY},
	    {"LOADING", SINK_ERR_BUSY},
	    {"MASTERDOWN", SINK_ERR_BUSY},
	    {"TRYAGAIN", SINK_ERR_CLUSTER},
	    {"MOVED", SINK_ERR_CLUSTER},
	    {"ASK", SINK_ERR_CLUSTER},
	    {"CLUSTERDOWN", SINK_ERR_CLUSTER},
	};

	for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++)
		if (strncmp(msg, map[i].prefix, strlen(map[i].prefix)) == 0)
			return map[i].kind;
	if (strstr(msg, "OUTBOX_BEHIND"))
		return SINK_ERR_ORDER;
	if (strstr(msg, "OUTBOX_FOREIGN"))
		return SINK_ERR_FOREIGN;
	if (strstr(msg, "Function not found") || strstr(msg, "NOSCRIPT"))
		return SINK_ERR_NOSCRIPT;
	if (strstr(msg, "WRONGTYPE"))
		return SINK_ERR_WRONGTYPE; /* raised inside the function: "... script: ..." */
	if (strstr(msg, "OOM command not allowed"))
		return SINK_ERR_OOM;
	return SINK_ERR_OTHER;
}

bool sink_redis_connected(const struct sink_redis *s)
{
	return s->connected;
}

static bool node_wants_write(const struct node *n)
{
	if (!n->c)
		return false;
	if (n->r_wants_write)
		return true;
	if ((n->info_due || n->trimq_n) && !n->w_wants_read && n->wsent == n->wbuf.len)
		return true;
	if (n->w_wants_read)
		return false; /* POLLIN wakes the blocked TLS write */
	return n->sendq.len > 0 || n->part_seq || n->wsent < n->wbuf.len;
}

bool sink_redis_want_write(const struct sink_redis *s)
{
	for (int i = 0; i < s->nnodes; i++)
		if (node_wants_write(&s->nodes[i]))
			return true;
	return false;
}

int sink_redis_pollfds(struct sink_redis *s, struct pollfd *pfd, int max)
{
	s->npoll = 0;
	for (int i = 0; i < s->nnodes && s->npoll < max; i++) {
		struct node *n = &s->nodes[i];

		if (!n->c)
			continue;
		pfd[s->npoll] = (struct pollfd){
		    .fd = n->c->fd,
		    .events = (short)(POLLIN | (node_wants_write(n) ? POLLOUT : 0)),
		};
		s->poll_node[s->npoll++] = i;
	}
	return s->npoll;
}

bool sink_redis_full(const struct sink_redis *s)
{
	if (s->inflight_events == 0)
		return false; /* always admit one event, however large */
	return (int64_t)s->inflight_events >= s->cf->max_inflight_events ||
	       (int64_t)sink_redis_inflight_bytes(s) >= s->cf->max_inflight_bytes;
}

uint64_t sink_redis_acked_seq(const struct sink_redis *s)
{
	return s->acked_seq;
}

uint64_t sink_redis_last_seq(const struct sink_redis *s)
{
	return s->next_seq - 1;
}

uint64_t sink_redis_inflight_events(const struct sink_redis *s)
{
	return s->inflight_events;
}

uint64_t sink_redis_inflight_bytes(const struct sink_redis *s)
{
	size_t live = s->q_len ? s->out.len - (size_t)(s->q[s->q_head].off - s->out_base) : 0;

	return live + s->ext_bytes + (s->b_open ? s->b_args.len : 0);
}

const struct sink_stats *sink_redis_stats(const struct sink_redis *s)
{
	return &s->stats;
}

void sink_redis_disconnect(struct sink_redis *s)
{
	for (int i = 0; i < s->nnodes; i++)
		node_close(&s->nodes[i]);
	/* Everything not done is routed and sent again after the next connect. */
	for (size_t i = 0; i < s->q_len; i++) {
		struct qent *e = &s->q[(s->q_head + i) % s->q_cap];

		if (e->state != QS_DONE) {
			e->state = QS_QUEUED;
			e->node = -1;
			e->asking = false;
		}
	}
	s->trim_pending = 0; /* an unfinished trim round is dropped */
	s->max_value = 0;
	s->connected = false;
}

/*
 * Run one setup command synchronously on n. Returns the reply (caller frees)
 * or NULL with errmsg set; *status says whether retrying can help.
 */
static redisReply *setup_command(struct sink_redis *s, struct node *n, enum sink_status *status,
                                 const char *what, int argc, const char **argv)
{
	redisReply *r = redisCommandArgv(n->c, argc, argv, NULL);

	if (!r) {
		snprintf(s->errmsg, sizeof(s->errmsg), "%s failed: %s", what,
		         n->c->errstr[0] ? n->c->errstr : "connection lost");
		*status = SINK_RETRY;
		return NULL;
	}
	if (r->type == REDIS_REPLY_ERROR) {
		*status = redis_conn_error_permanent(r->str) ? SINK_FATAL : SINK_RETRY;
		if (noperm_reply(r->str)) {
			*status = SINK_FATAL;
			noperm_message(s, what, NULL, r->str);
			return r;
		}
		snprintf(s->errmsg, sizeof(s->errmsg), "%s failed: %s%s%s%s", what, r->str,
		         *status == SINK_FATAL ? " (" : "",
		         *status == SINK_FATAL ? redis_conn_error_hint(r->str) : "",
		         *status == SINK_FATAL ? ")" : "");
		return r;
	}
	return r;
}

/* SCRIPT LOAD script on n; its SHA1 into sha (41 bytes). */
static enum sink_status script_load(struct sink_redis *s, struct node *n, const char *what,
                                    const char *script, char *sha)
{
	const char *argv[] = {"SCRIPT", "LOAD", script};
	enum sink_status st = SINK_OK;
	redisReply *r = setup_command(s, n, &st, what, 3, argv);

	if (!r)
		return st;
	if (r->type != REDIS_REPLY_STRING || r->len != 40) {
		if (r->type != REDIS_REPLY_ERROR)
			snprintf(s->errmsg, sizeof(s->errmsg), "%s returned an unexpected reply", what);
		freeReplyObject(r);
		return st == SINK_OK ? SINK_RETRY : st;
	}
	memcpy(sha, r->str, 40);
	sha[40] = '\0';
	freeReplyObject(r);
	return SINK_OK;
}

/*
 * On the first connect, on the node that serves its key: read the slot
 * record (sink_redis_record). A value that is not a record is an error the
 * relay cannot decide on: permanent, naming the key.
 */
static enum sink_status read_record(struct sink_redis *s, struct node *n)
{
	enum sink_status st = SINK_OK;
	const char *argv[2] = {"GET", NULL};
	char what[260];
	redisReply *r;

	record_key(s->cf, &s->key);
	if (s->record_read || s->key.failed ||
	    (s->slot_node && s->slot_node[stream_slot(s, s->key.data, s->key.len)] != n - s->nodes))
		return s->key.failed ? SINK_RETRY : SINK_OK;
	argv[1] = s->key.data;
	snprintf(what, sizeof(what), "GET of the slot record \"%.200s\"", s->key.data);
	r = setup_command(s, n, &st, what, 2, argv);
	if (!r || r->type == REDIS_REPLY_ERROR) {
		freeReplyObject(r);
		return st == SINK_OK ? SINK_RETRY : st;
	}
	s->record_found = r->type == REDIS_REPLY_STRING;
	if (s->record_found && !slot_record_parse(r->str, r->len, &s->record)) {
		snprintf(s->errmsg, sizeof(s->errmsg),
		         "the key \"%s\" does not hold a slot record of outbox-relay; delete it or "
		         "give the relay another --key-prefix",
		         s->key.data);
		freeReplyObject(r);
		return SINK_FATAL;
	}
	freeReplyObject(r);
	s->record_read = true;
	s->record_gen++;
	return SINK_OK;
}

void sink_redis_set_republish(struct sink_redis *s)
{
	s->republish = true;
}

uint64_t sink_redis_record_gen(const struct sink_redis *s)
{
	return s->record_gen;
}

const struct slot_record *sink_redis_record(const struct sink_redis *s)
{
	return s->record_read && s->record_found ? &s->record : NULL;
}

bool sink_redis_record_read(const struct sink_redis *s)
{
	return s->record_read;
}

static enum sink_status load_function(struct sink_redis *s, struct node *n)
{
	enum sink_status st = SINK_OK;
	redisReply *r;

	if (s->use_functions) {
		const char *argv[] = {"FUNCTION", "LOAD", "REPLACE", sink_redis_function_library};

		r = setup_command(s, n, &st, "FUNCTION LOAD", 4, argv);
		if (!r)
			return st;
		if (r->type != REDIS_REPLY_ERROR) {
			freeReplyObject(r);
			return SINK_OK;
		}
		/* Servers before 7.0 have no functions: fall back to scripts. */
		if (strstr(r->str, "unknown command") == NULL) {
			freeReplyObject(r);
			return st;
		}
		freeReplyObject(r);
		s->use_functions = false;
	}
	st = script_load(s, n, "SCRIPT LOAD", eval_script, s->sha);
	if (st == SINK_OK && s->trim)
		st = script_load(s, n, "SCRIPT LOAD (--trim acked)", eval_trim_script, s->trim_sha);
	return st;
}

/*
 * Refuse servers without the commands the relay needs, with the version in
 * the message: COMMAND INFO answers nil for an unknown (or renamed) command.
 * With --wait-aof, also refuse servers without WAITAOF or without AOF.
 */
static enum sink_status check_server(struct sink_redis *s, struct node *n)
{
	const char *argv[] = {"COMMAND", "INFO", "XADD", "XGROUP", "EVALSHA", "WAITAOF"};
	bool want_aof = s->cf->wait_aof && strcmp(s->cf->wait_aof, "none") != 0;
	enum sink_status st = SINK_OK;
	redisReply *r = setup_command(s, n, &st, "COMMAND INFO", want_aof ? 6 : 5, argv);
	size_t missing;
	char why[160];

	if (!r)
		return st;
	if (cluster_slots_command_info(r, (size_t)(want_aof ? 4 : 3), &missing, why, sizeof(why)) ==
	    CMDINFO_MISSING) {
		if (missing == 3) { /* WAITAOF */
			const char *iv[] = {"INFO", "server"};
			redisReply *info = setup_command(s, n, &st, "INFO", 2, iv);
			char ver[32] = "";

			if (info && info->type == REDIS_REPLY_STRING)
				redis_info_field(info->str, "redis_version:", ver, sizeof(ver));
			freeReplyObject(info);
			snprintf(s->errmsg, sizeof(s->errmsg),
			         "--wait-aof needs WAITAOF, which Redis 7.2 introduced; this server "
			         "is %s: upgrade Redis or drop --wait-aof",
			         ver[0] ? ver : "older");
		} else {
			snprintf(s->errmsg, sizeof(s->errmsg),
			         "the server does not provide %s: outbox-relay needs Redis 5 or "
			         "newer with streams and scripting (7.0+ recommended for functions)",
			         argv[missing + 2]);
		}
		freeReplyObject(r);
		return SINK_FATAL;
	}
	/*
	 * Another error here or an unreadable answer is not a verdict: carry on;
	 * a missing command then fails where it is used. An ACL refusal is.
	 */
	freeReplyObject(r);
	if (st == SINK_FATAL)
		return st;
	if (want_aof) {
		const char *iv[] = {"INFO", "persistence"};
		redisReply *info = setup_command(s, n, &st, "INFO", 2, iv);
		char on[8] = "";

		if (st == SINK_FATAL) {
			freeReplyObject(info);
			return st;
		}
		if (info && info->type == REDIS_REPLY_STRING)
			redis_info_field(info->str, "aof_enabled:", on, sizeof(on));
		freeReplyObject(info);
		if (strcmp(on, "0") == 0) {
			char a[300];

			snprintf(s->errmsg, sizeof(s->errmsg),
			         "--wait-aof needs AOF, but appendonly is off on %s: set appendonly "
			         "yes or drop --wait-aof",
			         node_addr(n, a, sizeof(a)));
			return SINK_FATAL;
		}
	}
	return SINK_OK;
}

/*
 * proto-max-bulk-len into n->max_bulk when CONFIG GET is allowed. Many
 * deployments deny CONFIG (it shows requirepass): any error is no verdict.
 */
static enum sink_status read_bulk_limit(struct sink_redis *s, struct node *n)
{
	const char *argv[] = {"CONFIG", "GET", "proto-max-bulk-len"};
	redisReply *r = redisCommandArgv(n->c, 3, argv, NULL);

	n->max_bulk = 0;
	if (!r) {
		snprintf(s->errmsg, sizeof(s->errmsg), "CONFIG GET failed: %s",
		         n->c->errstr[0] ? n->c->errstr : "connection lost");
		return SINK_RETRY;
	}
	if (r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
	    r->element[1]->type == REDIS_REPLY_STRING) {
		char *end;
		unsigned long long v = strtoull(r->element[1]->str, &end, 10);

		if (*end == '\0' && end != r->element[1]->str)
			n->max_bulk = v;
	}
	freeReplyObject(r);
	return SINK_OK;
}

void sink_redis_void_record(struct sink_redis *s, uint64_t seq)
{
	struct qent *e = ent_of(s, seq);

	if (!e || e->kind != Q_RECORD || e->state == QS_DONE)
		return;
	e->state = QS_DONE;
	advance_head(s);
}

uint64_t sink_redis_refused_value(const struct sink_redis *s)
{
	return s->refused_value;
}

uint64_t sink_redis_max_value(const struct sink_redis *s)
{
	return s->max_value;
}

/* used_memory and maxmemory from an INFO memory reply into n. */
static void read_memory(struct node *n, const char *info)
{
	char used[32], max[32];

	redis_info_field(info, "used_memory:", used, sizeof(used));
	redis_info_field(info, "maxmemory:", max, sizeof(max));
	if (!used[0] || !max[0])
		return;
	n->used_memory = strtoull(used, NULL, 10);
	n->maxmemory = strtoull(max, NULL, 10);
	n->mem_known = true;
}

/*
 * maxmemory-policy: allkeys-* may evict the streams, the watermarks and the
 * dedup keys, so the relay refuses it unless --allow-eviction. INFO memory
 * needs no CONFIG permission. A server that does not answer is not refused.
 */
static enum sink_status check_memory(struct sink_redis *s, struct node *n)
{
	const char *iv[] = {"INFO", "memory"};
	enum sink_status st = SINK_OK;
	redisReply *info = setup_command(s, n, &st, "INFO memory", 2, iv);
	char a[300];

	if (st == SINK_FATAL) {
		freeReplyObject(info);
		return st;
	}
	if (!info || info->type != REDIS_REPLY_STRING) {
		freeReplyObject(info);
		return SINK_OK;
	}
	redis_info_field(info->str, "maxmemory_policy:", s->policy, sizeof(s->policy));
	read_memory(n, info->str);
	freeReplyObject(info);
	if (strncmp(s->policy, "allkeys-", 8) == 0 && !s->cf->allow_eviction) {
		snprintf(s->errmsg, sizeof(s->errmsg),
		         "maxmemory-policy %s (on %s) may evict stream entries, watermarks and "
		         "dedup keys (events lost or published twice); set maxmemory-policy "
		         "noeviction, or pass --allow-eviction to run anyway",
		         s->policy, node_addr(n, a, sizeof(a)));
		return SINK_FATAL;
	}
	return SINK_OK;
}

/*
 * Sentinel mode: the address a Sentinel gave must be the master now (it
 * may be a demoted one, or the failover may not have finished): ROLE.
 * Anything else is retried, and the retry asks the Sentinels again.
 */
static enum sink_status check_role(struct sink_redis *s, struct node *n)
{
	struct redis_conn rc = node_conn(n);
	char a[300];

	switch (redis_conn_check_master(&rc, &s->cf->redis, node_addr(n, a, sizeof(a)), s->errmsg,
	                                sizeof(s->errmsg))) {
	case REDIS_CONN_OK:
		return SINK_OK;
	case REDIS_CONN_PERMANENT:
		return SINK_FATAL;
	case REDIS_CONN_RETRY:
		break;
	}
	s->errkind = SINK_ERR_READONLY;
	return SINK_RETRY;
}

static int add_node(struct sink_redis *s, const char *host, int port, const char *unix_path);

/*
 * Sentinel mode: ask the Sentinels where the master is and make it the one
 * node. A permanent refusal (credentials, an unknown master name) is fatal
 * only before the first success: a running relay keeps retrying.
 */
static enum sink_status discover_master(struct sink_redis *s)
{
	const struct redis_target *t = &s->cf->redis;
	char *host = NULL;
	int port = 0;
	bool permanent = false;

	if (!redis_sentinel_discover(t, s->cf->redis_timeout_ms, &host, &port, &permanent, s->errmsg,
	                             sizeof(s->errmsg)))
		return permanent && !s->sentinel_found ? SINK_FATAL : SINK_RETRY;
	s->sentinel_found = true;
	if (s->nnodes == 1 && s->nodes[0].port == port && strcmp(s->nodes[0].host, host) == 0) {
		free(host);
		return SINK_OK;
	}
	for (int i = 0; i < s->nnodes; i++)
		node_finish(&s->nodes[i]);
	s->nnodes = 0;
	if (add_node(s, host, port, NULL) < 0) {
		free(host);
		snprintf(s->errmsg, sizeof(s->errmsg), "out of memory");
		return SINK_RETRY;
	}
	free(host);
	return SINK_OK;
}

/*
 * Connect n (redis_conn.h: keepalive, TLS, AUTH, SELECT) and prepare it:
 * checks, function library, the slot record, non-blocking.
 */
static enum sink_status node_connect(struct sink_redis *s, struct node *n)
{
	const struct redis_target *t = &s->cf->redis;
	enum sink_status st = SINK_OK;
	struct redis_conn rc;
	enum redis_conn_status cst;
	char why[700], a[300];

	node_close(n);
	cst = redis_conn_open(&rc, t, n->host, n->port, n->unix_path, s->cf->redis_timeout_ms, why,
	                      sizeof(why));
	if (cst != REDIS_CONN_OK) {
		/* A cluster node or the master a Sentinel named: say which server. */
		if (t->cluster || t->sentinel)
			snprintf(s->errmsg, sizeof(s->errmsg), "%s: %s", node_addr(n, a, sizeof(a)), why);
		else
			snprintf(s->errmsg, sizeof(s->errmsg), "%s", why);
		return cst == REDIS_CONN_PERMANENT ? SINK_FATAL : SINK_RETRY;
	}
	n->c = rc.c;
	n->ssl = rc.ssl;
	n->io = rc.ops;
	if (t->sentinel) {
		st = check_role(s, n);
		if (st != SINK_OK)
			goto fail;
	}
	st = check_server(s, n);
	if (st != SINK_OK)
		goto fail;
	st = check_memory(s, n);
	if (st != SINK_OK)
		goto fail;
	st = read_bulk_limit(s, n);
	if (st != SINK_OK)
		goto fail;
	st = load_function(s, n);
	if (st != SINK_OK)
		goto fail;
	st = read_record(s, n);
	if (st != SINK_OK)
		goto fail;

	/* From here on the relay's poll loop drives the socket. */
	rc = node_conn(n);
	if (!redis_conn_set_nonblocking(&rc, s->errmsg, sizeof(s->errmsg))) {
		st = SINK_RETRY;
		goto fail;
	}
	n->wait_since_us = time_mono_us();
	return SINK_OK;
fail:
	if (st == SINK_OK)
		st = SINK_RETRY;
	node_close(n);
	return st;
}

static int add_node(struct sink_redis *s, const char *host, int port, const char *unix_path)
{
	struct node *n;

	for (int i = 0; i < s->nnodes; i++) {
		n = &s->nodes[i];
		if (unix_path ? (n->unix_path && strcmp(n->unix_path, unix_path) == 0)
		              : (n->host && strcmp(n->host, host) == 0 && n->port == port))
			return i;
	}
	if (s->nnodes == MAX_NODES)
		return -1;
	n = &s->nodes[s->nnodes];
	memset(n, 0, sizeof(*n));
	n->host = host ? strdup(host) : NULL;
	n->unix_path = unix_path ? strdup(unix_path) : NULL;
	n->port = port;
	if ((host && !n->host) || (unix_path && !n->unix_path)) {
		node_finish(n);
		return -1;
	}
	return s->nnodes++;
}

/*
 * Take a checked slot map (see cluster_slots_parse) as the node list and slot
 * map. On failure (out of memory) the node list is left empty.
 */
static bool use_map(struct sink_redis *s, const struct cluster_slots_map *map, char *err,
                    size_t errlen)
{
	int8_t idx[CLUSTER_SLOTS_MAX_NODES];

	for (int i = 0; i < map->nnodes; i++) {
		int k = add_node(s, map->nodes[i].host, map->nodes[i].port, NULL);

		if (k < 0) {
			for (int j = 0; j < s->nnodes; j++)
				node_finish(&s->nodes[j]);
			s->nnodes = 0;
			snprintf(err, errlen, "out of memory");
			return false;
		}
		idx[i] = (int8_t)k;
	}
	for (int sl = 0; sl < CLUSTER_SLOTS; sl++)
		s->slot_node[sl] = map->slot_node[sl] < 0 ? -1 : idx[map->slot_node[sl]];
	return true;
}

/*
 * Rebuild the node list and slot map from the seeds' CLUSTER SLOTS
 * (sink_cluster.c).
 */
static enum sink_status discover_cluster(struct sink_redis *s)
{
	struct cluster_slots_map *map = NULL;
	enum redis_conn_status st;
	bool ok;

	for (int i = 0; i < s->nnodes; i++)
		node_finish(&s->nodes[i]);
	s->nnodes = 0;
	memset(s->slot_node, -1, CLUSTER_SLOTS);
	st = sink_cluster_discover(&s->cf->redis, s->cf->redis_timeout_ms, &map, s->errmsg,
	                           sizeof(s->errmsg));
	if (st != REDIS_CONN_OK)
		return st == REDIS_CONN_PERMANENT ? SINK_FATAL : SINK_RETRY;
	ok = use_map(s, map, s->errmsg, sizeof(s->errmsg));
	cluster_slots_map_free(map);
	return ok ? SINK_OK : SINK_RETRY;
}

/* Route e to the connection of its slot and queue it there for writing. */
static bool route(struct sink_redis *s, struct qent *e)
{
	int idx = s->slot_node ? s->slot_node[e->slot] : 0;

	if (idx < 0 || idx >= s->nnodes || !s->nodes[idx].c) {
		snprintf(s->errmsg, sizeof(s->errmsg), "no connected master serves hash slot %u",
		         (unsigned)e->slot);
		s->errkind = SINK_ERR_CLUSTER;
		return false;
	}
	if (!u64q_push(&s->nodes[idx].sendq, e->seq)) {
		snprintf(s->errmsg, sizeof(s->errmsg), "out of memory");
		return false;
	}
	e->node = (int8_t)idx;
	e->state = QS_ROUTED;
	return true;
}

enum sink_status sink_redis_connect(struct sink_redis *s)
{
	const struct redis_target *t = &s->cf->redis;
	bool first = s->stats.reconnects == 0 && s->acked_seq == 0 && s->inflight_events == 0;
	enum sink_status st;

	sink_redis_disconnect(s);
	s->errmsg[0] = '\0';
	if (t->tls && !redis_tls_available()) {
		void *none;
		bool permanent;

		(void)redis_tls_start(NULL, t, t->host, &none, &permanent, s->errmsg, sizeof(s->errmsg));
		return SINK_FATAL;
	}
	if (t->cluster) {
		st = discover_cluster(s);
		if (st != SINK_OK)
			return st;
	} else if (t->sentinel) {
		st = discover_master(s);
		if (st != SINK_OK)
			return st;
	} else if (s->nnodes == 0 && add_node(s, t->host, t->port, t->unix_path) < 0) {
		snprintf(s->errmsg, sizeof(s->errmsg), "out of memory");
		return SINK_RETRY;
	}
	for (int i = 0; i < s->nnodes; i++) {
		st = node_connect(s, &s->nodes[i]);
		if (st != SINK_OK) {
			sink_redis_disconnect(s);
			return st;
		}
	}
	strset_clear(&s->streams); /* groups are created again on this connection set */
	for (size_t i = 0; i < s->q_len; i++) {
		struct qent *e = &s->q[(s->q_head + i) % s->q_cap];

		if (e->state == QS_QUEUED && !route(s, e)) {
			sink_redis_disconnect(s);
			return SINK_RETRY;
		}
	}
	/* The smallest proto-max-bulk-len of the connected nodes, once per connect
	 * (the relay asks for it with every event). */
	s->max_value = 0;
	for (int i = 0; i < s->nnodes; i++)
		if (s->nodes[i].c && s->nodes[i].max_bulk &&
		    (!s->max_value || s->nodes[i].max_bulk < s->max_value))
			s->max_value = s->nodes[i].max_bulk;
	s->connected = true;
	if (!first)
		s->stats.reconnects++;
	return SINK_OK;
}

/* Append the decimal or fixed-width hex rendering of v (no printf on the hot path). */
static void put_hex(char *out, uint64_t v, int width)
{
	static const char hex[] = "0123456789ABCDEF";

	for (int i = width - 1; i >= 0; i--, v >>= 4)
		out[i] = hex[v & 0xf];
}

static void resp_u64(struct buf *b, uint64_t v)
{
	char tmp[20];
	char *d = u64_to_dec(tmp + sizeof(tmp), v);

	resp_bulk(b, d, (size_t)(tmp + sizeof(tmp) - d));
}

/* Queue a command whose bytes are out[start..], and route it when connected. */
static bool push_command(struct sink_redis *s, struct qent *ent, size_t start)
{
	struct qent *e;

	ent->off = s->out_base + start;
	ent->len = s->out.len - start;
	ent->node = -1;
	ent->state = QS_QUEUED;
	if (s->out.failed || !queue_push(s, ent)) {
		ext_free(s, &ent->ext);
		return false;
	}
	e = ent_of(s, ent->seq);
	if (s->connected && !route(s, e)) {
		/* No master for the slot right now: the caller reconnects and routes it. */
		s->connected = false;
	}
	return true;
}

/* Encode the open batch as one function call into s->out and queue it. */
static bool close_batch(struct sink_redis *s)
{
	const struct relay_config *cf = s->cf;
	struct buf *b = &s->out;
	size_t start = b->len, dl_len = strlen(cf->dead_letter_stream);
	uint16_t slot;
	struct lastpos *lp;
	struct qent ent;

	if (!s->b_open)
		return true;
	s->b_open = false;
	(void)stream_hash_tag(s->b_stream.data, s->b_stream.len, &s->tag); /* checked when opened */
	slot = stream_slot(s, s->b_stream.data, s->b_stream.len);
	/* FCALL name numkeys | stream wm legacy-wm dead-letter dedup-base |
	 * ttl maxlen owner expect slot old-dedup-prefix args... */
	resp_array(b, 3 + 5 + 6 + s->b_args_count);
	if (s->use_functions) {
		resp_str(b, "FCALL");
		resp_str(b, FUNCTION_NAME);
	} else {
		resp_str(b, "EVALSHA");
		resp_str(b, s->sha);
	}
	resp_u64(b, 5);
	resp_bulk(b, s->b_stream.data, s->b_stream.len);
	buf_reset(&s->key); /* watermark: <prefix>:wm:{tag}[#<len>:<stream>]:<slot> */
	(void)stream_key_base(&s->key, cf->key_prefix, "wm", s->b_stream.data, s->b_stream.len, true,
	                      &s->tag);
	buf_putc(&s->key, ':');
	buf_puts(&s->key, cf->slot);
	resp_bulk(b, s->key.data, s->key.len);
	buf_reset(&s->key); /* legacy (per tag) watermark: <prefix>:wm:{tag}:<slot> */
	(void)stream_key_base(&s->key, cf->key_prefix, "wm", s->b_stream.data, s->b_stream.len, false,
	                      &s->tag);
	buf_putc(&s->key, ':');
	buf_puts(&s->key, cf->slot);
	resp_bulk(b, s->key.data, s->key.len);
	/* Where entries the stream key refuses go, in the same call: the
	 * dead-letter stream, or in a cluster where that lives in another slot,
	 * "<dead-letter stream>{tag}" beside the stream ("{tag}<dead-letter
	 * stream>" when that name carries a tag of its own). */
	buf_reset(&s->key);
	if (s->slot_node && stream_slot(s, cf->dead_letter_stream, dl_len) != slot) {
		bool own_tag = !(s->tag.len == dl_len + 2 &&
		                 memcmp(s->tag.data + 1, cf->dead_letter_stream, dl_len) == 0);

		(void)stream_hash_tag(s->b_stream.data, s->b_stream.len, &s->tag);
		if (own_tag)
			buf_append(&s->key, s->tag.data, s->tag.len);
		buf_append(&s->key, cf->dead_letter_stream, dl_len);
		if (!own_tag)
			buf_append(&s->key, s->tag.data, s->tag.len);
	} else {
		buf_append(&s->key, cf->dead_letter_stream, dl_len);
	}
	resp_bulk(b, s->key.data, s->key.len);
	buf_reset(&s->key); /* dedup state: <prefix>:dd:{tag}[#<len>:<stream>] */
	(void)stream_key_base(&s->key, cf->key_prefix, "dd", s->b_stream.data, s->b_stream.len, true,
	                      &s->tag);
	resp_bulk(b, s->key.data, s->key.len);
	resp_u64(b, s->b_dead ? 0 : (uint64_t)cf->dedup_window_s);
	resp_u64(b, s->b_dead ? 0 : (uint64_t)cf->maxlen);
	resp_str(b, s->owner);
	resp_str(b, s->b_expect);
	resp_str(b, cf->slot);
	resp_bulk(b, s->b_prefix.data, s->b_prefix.len);
	if (s->b_ext) /* segment offsets: from b_args to the command */
		for (size_t i = 0; i < s->b_ext->nseg; i++)
			s->b_ext->seg[i].at += b->len - start;
	buf_append(b, s->b_args.data, s->b_args.len);
	if (s->key.failed || s->tag.failed)
		return false;
	if (!s->republish) {
		lp = posmap_get(&s->last_pos, s->b_stream.data, s->b_stream.len, s->acked_seq);
		if (!lp)
			return false;
		memcpy(lp->pos, s->b_last, sizeof(lp->pos));
		lp->seq = s->b_seq;
	}
	ent = (struct qent){
	    .seq = s->b_seq,
	    .nevents = s->b_n,
	    .commit_us = s->b_commit_us,
	    .stream_id = s->b_stream_id,
	    .slot = slot,
	    .kind = s->b_dead ? Q_DEAD : Q_PUBLISH,
	    .dead_reason = s->b_dead_reason,
	    .prev_seq = s->b_prev_seq,
	    .ext = s->b_ext,
	    .max_value = s->b_max_value,
	};
	s->b_ext = NULL;
	return push_command(s, &ent, start);
}

/* Calls sent or routed but not yet answered, over every connection. */
static size_t calls_pending(const struct sink_redis *s)
{
	size_t n = 0;

	for (int i = 0; i < s->nnodes; i++)
		n += s->nodes[i].waitq.len + s->nodes[i].sendq.len;
	return n;
}

bool sink_redis_flush(struct sink_redis *s, bool force)
{
	/*
	 * Group commit: while earlier calls still await their replies, Redis is
	 * busy anyway, so the open batch keeps growing and goes out when a reply
	 * comes back (sink_redis_io) or when it is full. An idle pipeline sends
	 * it at once, so this adds no latency at low load.
	 */
	if (!force && s->connected && calls_pending(s) >= BATCH_PIPELINE_DEPTH)
		return true;
	return close_batch(s);
}

/* Queue XGROUP CREATE <stream> <group> 0 MKSTREAM for every --group. */
static bool queue_groups(struct sink_redis *s, const char *stream, size_t len)
{
	uint16_t slot = stream_slot(s, stream, len);

	for (size_t g = 0; g < s->cf->ngroups; g++) {
		size_t start = s->out.len;
		struct qent ent = {.seq = s->next_seq++, .slot = slot, .kind = Q_GROUP};

		resp_array(&s->out, 6);
		resp_str(&s->out, "XGROUP");
		resp_str(&s->out, "CREATE");
		resp_bulk(&s->out, stream, len);
		resp_str(&s->out, s->cf->groups[g]);
		resp_str(&s->out, "0");
		resp_str(&s->out, "MKSTREAM");
		if (!push_command(s, &ent, start))
			return false;
	}
	return true;
}

/* Queue GET (val NULL) or SET val of the slot record's key as a command of kind k. */
static bool queue_record_cmd(struct sink_redis *s, enum qkind k, const char *val, size_t vlen)
{
	size_t start;
	struct qent ent = {.kind = k};

	if (!close_batch(s))
		return false;
	record_key(s->cf, &s->key);
	if (s->key.failed)
		return false;
	start = s->out.len;
	ent.seq = s->next_seq++;
	ent.slot = stream_slot(s, s->key.data, s->key.len);
	resp_array(&s->out, val ? 3 : 2);
	resp_str(&s->out, val ? "SET" : "GET");
	resp_bulk(&s->out, s->key.data, s->key.len);
	if (val)
		resp_bulk(&s->out, val, vlen);
	return push_command(s, &ent, start);
}

bool sink_redis_queue_record_read(struct sink_redis *s)
{
	return queue_record_cmd(s, Q_GETREC, NULL, 0);
}

bool sink_redis_queue_record(struct sink_redis *s, lsn_t confirmed, lsn_t commit_lsn,
                             int64_t commit_us)
{
	char val[256];
	int n = snprintf(val, sizeof(val), "%016llX %016llX %lld %s", (unsigned long long)confirmed,
	                 (unsigned long long)commit_lsn, (long long)commit_us, s->owner);

	return n > 0 && (size_t)n < sizeof(val) && queue_record_cmd(s, Q_RECORD, val, (size_t)n);
}

/* Does ev have a value worth sending from its own memory (see struct ext)? */
static bool has_large_value(const struct event *ev)
{
	for (size_t i = 0; i < ev->nfields; i++)
		if (ev->fields[i].value_len >= EXT_MIN_BYTES)
			return true;
	return false;
}

/* Whether id[0..len) is a UUID in PostgreSQL's output form (lowercase, 8-4-4-4-12). */
static bool uuid_canonical(const char *id, size_t len)
{
	if (len != 36)
		return false;
	for (size_t i = 0; i < 36; i++) {
		unsigned char c = (unsigned char)id[i];

		if (i == 8 || i == 13 || i == 18 || i == 23) {
			if (c != '-')
				return false;
		} else if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) {
			return false;
		}
	}
	return true;
}

static unsigned hexval(char c)
{
	return c <= '9' ? (unsigned)(c - '0') : (unsigned)(c - 'a' + 10);
}

/*
 * Append the dedup field of event id[0..len) as a RESP bulk string: a UUID
 * in PostgreSQL's form packs to its 16 bytes; any other id is 4 bytes of
 * FNV-1a of it (the shard hash), the id, and a 0 byte when the id is 12
 * bytes long or (at least 12 bytes long and) ends in a 0 byte. So no other
 * id gives 16 bytes, and the mapping is one-to-one: two different ids never
 * share a field (an uppercase UUID is another id, as it always was).
 */
static void put_dedup_field(struct buf *b, const char *id, size_t len)
{
	unsigned char f[16];
	uint32_t h = 2166136261u;
	bool esc;

	if (uuid_canonical(id, len)) {
		for (size_t i = 0, o = 0; i < 36; i++) {
			if (id[i] == '-')
				continue;
			f[o / 2] = (unsigned char)(o % 2 ? f[o / 2] | hexval(id[i]) : hexval(id[i]) << 4);
			o++;
		}
		resp_bulk(b, (const char *)f, 16);
		return;
	}
	for (size_t i = 0; i < len; i++)
		h = (h ^ (unsigned char)id[i]) * 16777619u;
	esc = len == 12 || (len > 12 && id[len - 1] == '\0');
	buf_putc(b, '$');
	buf_put_u64(b, 4 + len + esc);
	buf_append(b, "\r\n", 2);
	f[0] = (unsigned char)(h >> 24);
	f[1] = (unsigned char)(h >> 16);
	f[2] = (unsigned char)(h >> 8);
	f[3] = (unsigned char)h;
	buf_append(b, (const char *)f, 4);
	if (len)
		buf_append(b, id, len);
	if (esc)
		buf_putc(b, '\0');
	buf_append(b, "\r\n", 2);
}

bool sink_redis_publish(struct sink_redis *s, const struct event *ev, bool dead_letter)
{
	return sink_redis_publish_held(s, ev, dead_letter, NULL);
}

bool sink_redis_publish_held(struct sink_redis *s, const struct event *ev, bool dead_letter,
                             struct sink_hold *hold)
{
	struct lastpos *lp;
	char pos[26];
	bool large = hold && hold->p && !dead_letter && has_large_value(ev);

	if (s->b_open &&
	    (large || dead_letter || s->b_dead || s->b_n >= BATCH_MAX_EVENTS ||
	     s->b_args.len >= BATCH_MAX_BYTES || s->b_stream.len != ev->stream_len ||
	     memcmp(s->b_stream.data, ev->stream, ev->stream_len) != 0) &&
	    !close_batch(s))
		return false;
	if (!dead_letter && s->cf->ngroups > 0) {
		int added = strset_add(&s->streams, ev->stream, ev->stream_len);

		if (added < 0 ||
		    (added == 1 && (!close_batch(s) || !queue_groups(s, ev->stream, ev->stream_len))))
			return false;
	}
	if (!s->b_open) {
		s->b_open = true;
		s->b_dead = dead_letter;
		s->b_seq = s->next_seq++;
		s->b_n = 0;
		s->b_args_count = 0;
		s->b_max_value = 0;
		buf_reset(&s->b_stream);
		buf_append(&s->b_stream, ev->stream, ev->stream_len);
		buf_reset(&s->b_args);
		s->b_commit_us = ev->committed_unix_us;
		s->b_dead_reason = (uint8_t)ev->dead_reason;
		s->b_stream_id =
		    !dead_letter && s->m ? metrics_stream_id(s->m, ev->stream, ev->stream_len) : 0;
		if (s->trim && !dead_letter && strset_add(&s->trim_streams, ev->stream, ev->stream_len) < 0)
			return false;
		/* old-layout dedup key prefix: <prefix>:dedup:{tag}[#<len>:<stream>]: */
		buf_reset(&s->b_prefix);
		if (!stream_key_base(&s->b_prefix, s->cf->key_prefix, "dedup", ev->stream, ev->stream_len,
		                     true, &s->tag))
			return false;
		buf_putc(&s->b_prefix, ':');
		lp = s->republish ? NULL : posmap_find(&s->last_pos, ev->stream, ev->stream_len);
		s->b_prev_seq = lp ? lp->seq : 0;
		if (s->republish)
			memcpy(s->b_expect, "R", 2);
		else
			memcpy(s->b_expect, lp ? lp->pos : "", lp ? sizeof(s->b_expect) : 1);
	}
	/* ARGV: position, dedup field, field count, fields. */
	put_hex(pos, ev->commit_lsn, 16);
	pos[16] = ':';
	put_hex(pos + 17, ev->index, 8);
	pos[25] = '\0';
	memcpy(s->b_last, pos, sizeof(s->b_last));
	resp_bulk(&s->b_args, pos, 25);
	put_dedup_field(&s->b_args, ev->id, ev->id ? ev->id_len : 0);
	resp_u64(&s->b_args, ev->nfields);
	if (large && !(s->b_ext = calloc(1, sizeof(*s->b_ext))))
		return false;
	for (size_t i = 0; i < ev->nfields; i++) {
		const struct event_field *f = &ev->fields[i];
		struct ext *x = s->b_ext;

		resp_bulk(&s->b_args, f->name, f->name_len);
		if (f->value_len > s->b_max_value)
			s->b_max_value = f->value_len;
		if (large && f->value_len >= EXT_MIN_BYTES && x->nseg < EXT_MAX_SEGS) {
			/* Header and trailer here, the value itself from the event's memory. */
			buf_putc(&s->b_args, '$');
			buf_put_u64(&s->b_args, f->value_len);
			buf_append(&s->b_args, "\r\n", 2);
			x->seg[x->nseg].at = s->b_args.len;
			x->seg[x->nseg].p = f->value;
			x->seg[x->nseg].len = f->value_len;
			x->nseg++;
			x->total += f->value_len;
			buf_append(&s->b_args, "\r\n", 2);
		} else {
			resp_bulk(&s->b_args, f->value, f->value_len);
		}
	}
	s->b_args_count += 3 + 2 * ev->nfields;
	s->b_n++;
	s->inflight_events++;
	if (s->b_args.failed || s->b_stream.failed || s->b_prefix.failed)
		return false;
	if (large) {
		/* The call now owns the event's memory; it goes out alone. */
		s->b_ext->hold = hold->p;
		s->b_ext->hold_free = hold->free_fn;
		s->ext_bytes += s->b_ext->total;
		hold->p = NULL;
		return close_batch(s);
	}
	/* Dead letters are rare and each has its own reason: one per call. */
	return dead_letter ? close_batch(s) : true;
}

static const char *kind_name(unsigned k)
{
	return k == Q_GROUP    ? "XGROUP CREATE"
	       : k == Q_DEAD   ? "dead-letter publish"
	       : k == Q_RECORD ? "slot record write"
	       : k == Q_GETREC ? "slot record read"
	                       : "publish";
}

/* Count one event's result from a publish reply (0 replay, 1 duplicate, entry id). */
static void count_result(struct sink_redis *s, const struct qent *e, const redisReply *r,
                         int64_t now_us)
{
	_Atomic uint64_t *c = NULL;

	if (r->type == REDIS_REPLY_INTEGER && r->integer == 0) {
		s->stats.replays++;
		c = s->m ? &s->m->replays_skipped : NULL;
	} else if (r->type == REDIS_REPLY_INTEGER && r->integer == 2) {
		/* The stream key refused it (WRONGTYPE): the function wrote it to
		 * the dead-letter stream instead. */
		s->stats.dead_lettered++;
		s->stats.rejected++;
		c = s->m ? &s->m->dead_lettered[DEAD_REDIS_REJECTED] : NULL;
	} else if (r->type == REDIS_REPLY_INTEGER) {
		s->stats.duplicates++;
		c = s->m ? &s->m->duplicates_skipped : NULL;
	} else if (e->kind == Q_DEAD) {
		s->stats.dead_lettered++;
		c = s->m && e->dead_reason < DEAD_NREASONS ? &s->m->dead_lettered[e->dead_reason] : NULL;
	} else {
		s->stats.published++;
		c = s->m ? &s->m->published[e->stream_id] : NULL;
		/* The batch's first commit time: an upper bound for the later events. */
		if (s->m && e->commit_us > 0)
			metrics_observe_latency(s->m, now_us - e->commit_us);
	}
	if (c)
		atomic_fetch_add_explicit(c, 1, memory_order_relaxed);
}

/* An executed command: done now, or when the connection's next WAIT succeeds. */
static bool executed(struct sink_redis *s, struct node *n, struct qent *e)
{
	if (s->wait_mode && e->kind != Q_GROUP) {
		e->state = QS_EXECUTED;
		if (!u64q_push(&n->durable, e->seq)) {
			snprintf(s->errmsg, sizeof(s->errmsg), "out of memory");
			return false;
		}
		return true;
	}
	e->state = QS_DONE;
	return true;
}

/* "ASK <slot> <host>:<port>": resend e to that master after ASKING. */
static bool follow_ask(struct sink_redis *s, struct qent *e, const char *msg)
{
	const char *addr = strrchr(msg, ' ');
	const char *colon = addr ? strrchr(addr, ':') : NULL;
	char host[256];
	int idx = -1;

	if (colon && colon > addr + 1 && (size_t)(colon - addr - 1) < sizeof(host)) {
		snprintf(host, sizeof(host), "%.*s", (int)(colon - addr - 1), addr + 1);
		for (int i = 0; i < s->nnodes; i++)
			if (s->nodes[i].host && strcmp(s->nodes[i].host, host) == 0 &&
			    s->nodes[i].port == atoi(colon + 1) && s->nodes[i].c)
				idx = i;
	}
	if (idx < 0)
		return false; /* unknown target: refresh everything instead */
	if (!u64q_push(&s->nodes[idx].sendq, e->seq))
		return false;
	e->asking = true;
	e->node = (int8_t)idx;
	e->state = QS_ROUTED;
	return true;
}

/*
 * The function refused e because its stream's watermark is behind where this
 * relay's previous call for the stream should have left it. While that call
 * is not done (rejected, or not yet run), resending everything in order
 * fixes it. When it is done, Redis acknowledged writes it no longer has.
 */
static bool refused_behind(struct sink_redis *s, const struct qent *e, const char *msg)
{
	const struct qent *prev = e->prev_seq ? ent_of(s, e->prev_seq) : NULL;

	if (e->prev_seq && e->prev_seq > s->acked_seq && (!prev || prev->state != QS_DONE)) {
		snprintf(s->errmsg, sizeof(s->errmsg),
		         "%s refused (%s): an earlier call for the same stream did not run; sending "
		         "both again in order",
		         kind_name(e->kind), msg);
		return false;
	}
	s->errkind = SINK_ERR_LOST;
	snprintf(s->errmsg, sizeof(s->errmsg),
	         "Redis lost acknowledged writes: %s (a failover without --wait-replicas, a restart "
	         "without persistence, or a deleted key). Events acknowledged since are not in "
	         "Redis: those not yet confirmed to PostgreSQL are sent again when the relay "
	         "restarts; confirmed ones must be republished from the outbox table",
	         msg);
	return false;
}

/* The answer to one --trim acked call: entries removed, or why not. */
static bool trim_reply(struct sink_redis *s, const redisReply *r)
{
	struct sink_trim_result *t = &s->trim_res;

	if (r->type == REDIS_REPLY_ERROR && noperm_reply(r->str)) {
		s->errkind = SINK_ERR_NOPERM;
		snprintf(s->errmsg, sizeof(s->errmsg),
		         "--trim acked refused by the Redis ACL (%s): grant +xinfo|groups +xpending "
		         "+xtrim (and +%s) to the relay's Redis user (see deploy/redis/users.acl), or "
		         "drop --trim acked",
		         r->str, s->use_functions ? "fcall" : "evalsha");
		return false;
	}
	if (r->type == REDIS_REPLY_INTEGER) {
		t->removed += r->integer > 0 ? (uint64_t)r->integer : 0;
		t->trimmed += r->integer > 0;
	} else {
		/* Not fatal: the stream keeps its entries until the next round. */
		t->failed++;
		snprintf(t->err, sizeof(t->err), "%s",
		         r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply type");
	}
	if (s->trim_pending > 0 && --s->trim_pending == 0)
		s->trim_done = true;
	return true;
}

/* Match one reply against what n's oldest outstanding request was. */
static bool handle_reply(struct sink_redis *s, struct node *n, redisReply *r)
{
	uint64_t what;
	struct qent *e;

	if (n->waitq.len == 0) {
		snprintf(s->errmsg, sizeof(s->errmsg),
		         "unexpected reply from Redis with nothing in flight");
		return false;
	}
	what = u64q_pop(&n->waitq);
	n->wait_since_us = time_mono_us();
	if (what == INFO_MARK) {
		n->info_sent = false;
		if (r->type == REDIS_REPLY_STRING)
			read_memory(n, r->str);
		return true; /* only for the metrics: an error changes nothing */
	}
	if (what == TRIM_MARK)
		return trim_reply(s, r);
	if (what == ASKING_MARK) {
		if (r->type == REDIS_REPLY_ERROR && noperm_reply(r->str)) {
			noperm_message(s, "ASKING", "asking", r->str);
			return false;
		}
		if (r->type == REDIS_REPLY_ERROR) {
			snprintf(s->errmsg, sizeof(s->errmsg), "ASKING failed: %s", r->str);
			s->errkind = SINK_ERR_CLUSTER;
			return false;
		}
		return true;
	}
	if (what == WAIT_MARK) {
		bool aof = s->cf->wait_aof && strcmp(s->cf->wait_aof, "none") != 0;
		long long want = aof ? 1 : s->cf->wait_replicas, got = -1, got_repl = -1;

		if (r->type == REDIS_REPLY_ERROR && noperm_reply(r->str)) {
			/* Not a shortfall: no retry gets past the ACL. */
			noperm_message(s, aof ? "WAITAOF" : "WAIT", aof ? "waitaof" : "wait", r->str);
			return false;
		}
		if (r->type == REDIS_REPLY_INTEGER)
			got = r->integer;
		else if (r->type == REDIS_REPLY_ARRAY && r->elements == 2) {
			got = r->element[0]->integer;
			got_repl = r->element[1]->integer;
		}
		if (got < want || (aof && strcmp(s->cf->wait_aof, "local,replicas") == 0 &&
		                   got_repl < s->cf->wait_replicas)) {
			s->errkind = SINK_ERR_WAIT;
			if (r->type == REDIS_REPLY_ERROR)
				snprintf(s->errmsg, sizeof(s->errmsg), "%s failed: %s", aof ? "WAITAOF" : "WAIT",
				         r->str);
			else if (aof)
				snprintf(s->errmsg, sizeof(s->errmsg),
				         "WAITAOF: %lld local and %lld replica fsync(s) within %d ms, fewer "
				         "than asked",
				         got, got_repl, s->cf->wait_timeout_ms);
			else
				snprintf(s->errmsg, sizeof(s->errmsg),
				         "WAIT: %lld of %lld replica(s) acknowledged within %d ms", got, want,
				         s->cf->wait_timeout_ms);
			return false;
		}
		while (n->durable.len > 0) {
			e = ent_of(s, u64q_pop(&n->durable));
			if (e && e->state == QS_EXECUTED)
				e->state = QS_DONE;
		}
		return true;
	}
	e = ent_of(s, what);
	if (!e) {
		snprintf(s->errmsg, sizeof(s->errmsg), "reply for an unknown command");
		return false;
	}
	e->asking = false;
	if (r->type == REDIS_REPLY_ERROR) {
		if (e->kind == Q_GROUP && strncmp(r->str, "BUSYGROUP", 9) == 0)
			return executed(s, n, e);
		if (strncmp(r->str, "ASK ", 4) == 0 && follow_ask(s, e, r->str)) {
			s->stats.error_replies++;
			s->stats.ask_redirects++;
			if (s->m)
				atomic_fetch_add_explicit(&s->m->redis_errors[RERR_CLUSTER], 1,
				                          memory_order_relaxed);
			return true;
		}
		s->stats.error_replies++;
		s->errkind = classify_reply_error(r->str);
		if (strstr(r->str, "Protocol error") && e->max_value >= 1024 * 1024) {
			/* The server drops the connection: the same call would fail forever. */
			s->errkind = SINK_ERR_TOO_BIG;
			s->refused_value = e->max_value;
			snprintf(s->errmsg, sizeof(s->errmsg),
			         "%s refused (%s): a value of %zu bytes in it is over the server's "
			         "proto-max-bulk-len",
			         kind_name(e->kind), r->str, e->max_value);
			return false;
		}
		if (s->errkind == SINK_ERR_ORDER)
			return refused_behind(s, e, r->str);
		if (s->errkind == SINK_ERR_NOPERM && key_refusal(r->str)) {
			key_noperm_message(s, e, r->str);
			return false;
		}
		if (s->errkind == SINK_ERR_NOPERM) {
			noperm_message(s, kind_name(e->kind),
			               e->kind == Q_GROUP    ? "xgroup|create"
			               : e->kind == Q_RECORD ? "set"
			               : e->kind == Q_GETREC ? "get"
			               : s->use_functions    ? "fcall"
			                                     : "evalsha",
			               r->str);
			return false;
		}
		if (s->errkind == SINK_ERR_FOREIGN)
			snprintf(s->errmsg, sizeof(s->errmsg),
			         "%s refused: the watermark %s, not to this database (%s): another "
			         "database publishes through this Redis with the same --slot and "
			         "--key-prefix; give this relay its own --key-prefix or --slot (if this "
			         "database replaced that one on purpose, delete that database's "
			         "\"%s:wm:*\" keys)",
			         kind_name(e->kind), r->str + strlen("OUTBOX_FOREIGN "), s->owner,
			         s->cf->key_prefix);
		else if (s->errkind == SINK_ERR_WRONGTYPE)
			snprintf(s->errmsg, sizeof(s->errmsg),
			         "%s failed: %s (a watermark, dedup or dead-letter key the relay writes "
			         "holds another type: rename or delete it; the relay retries until then)",
			         kind_name(e->kind), r->str);
		else
			snprintf(s->errmsg, sizeof(s->errmsg), "%s failed: %s", kind_name(e->kind), r->str);
		return false;
	}
	if ((e->kind == Q_RECORD && r->type != REDIS_REPLY_STATUS) ||
	    (e->kind == Q_GETREC && r->type != REDIS_REPLY_STRING && r->type != REDIS_REPLY_NIL)) {
		snprintf(s->errmsg, sizeof(s->errmsg), "unexpected reply to %s: type %d",
		         kind_name(e->kind), r->type);
		return false;
	}
	if (e->kind == Q_GETREC) {
		struct slot_record rec;

		if (r->type == REDIS_REPLY_STRING && !slot_record_parse(r->str, r->len, &rec)) {
			snprintf(s->errmsg, sizeof(s->errmsg),
			         "the slot record key of --slot %s does not hold a slot record of "
			         "outbox-relay",
			         s->cf->slot);
			return false;
		}
		s->record_found = r->type == REDIS_REPLY_STRING;
		if (s->record_found)
			s->record = rec;
		s->record_read = true;
		s->record_gen++;
		e->state = QS_DONE; /* a read: nothing for WAIT to make durable */
		return true;
	}
	if (e->kind != Q_GROUP && e->kind != Q_RECORD) {
		int64_t now = time_now_us();

		if (r->type != REDIS_REPLY_ARRAY || r->elements != e->nevents) {
			snprintf(s->errmsg, sizeof(s->errmsg),
			         "unexpected reply to %s: type %d with %zu element(s) for %u event(s)",
			         kind_name(e->kind), r->type,
			         r->type == REDIS_REPLY_ARRAY ? (size_t)r->elements : (size_t)0, e->nevents);
			return false;
		}
		for (size_t i = 0; i < r->elements; i++)
			count_result(s, e, r->element[i], now);
	}
	return executed(s, n, e);
}

/* Stage commands from n's send queue (ASKING and WAIT included) into its write buffer. */
/*
 * Append the part of p[0..len) that lies in the command's window: *pos is
 * where p starts in the command, *cur the next byte wanted, *left how many
 * more fit.
 */
static void stage_piece(struct buf *dst, const char *p, size_t len, size_t *pos, size_t *cur,
                        size_t *left)
{
	if (*left > 0 && *cur < *pos + len) {
		size_t skip = *cur - *pos, take = len - skip;

		if (take > *left)
			take = *left;
		buf_append(dst, p + skip, take);
		*cur += take;
		*left -= take;
	}
	*pos += len;
}

/*
 * Stage e's bytes from offset from into n->wbuf until WBUF_FILL: a large
 * command goes out in slices, never copied whole. n->part_seq says where the
 * next round resumes.
 */
static void stage_cmd(const struct sink_redis *s, struct node *n, const struct qent *e, size_t from)
{
	const char *base = ent_bytes(s, e);
	size_t nseg = e->ext ? e->ext->nseg : 0, pos = 0, raw = 0, cur = from;
	size_t left = n->wbuf.len < WBUF_FILL ? WBUF_FILL - n->wbuf.len : 0;

	for (size_t i = 0; i <= nseg && left > 0; i++) {
		size_t at = i < nseg ? e->ext->seg[i].at : e->len;

		stage_piece(&n->wbuf, base + raw, at - raw, &pos, &cur, &left);
		raw = at;
		if (i < nseg)
			stage_piece(&n->wbuf, e->ext->seg[i].p, e->ext->seg[i].len, &pos, &cur, &left);
	}
	if (cur < cmd_len(e)) {
		n->part_seq = e->seq;
		n->part_off = cur;
	} else {
		n->part_seq = 0;
		n->part_off = 0;
	}
}

static bool stage(struct sink_redis *s, struct node *n)
{
	static const char asking[] = "*1\r\n$6\r\nASKING\r\n";

	buf_reset(&n->wbuf);
	n->wsent = 0;
	if (n->part_seq) {
		/* Not done before its reply, and the connection it is on is open. */
		const struct qent *e = ent_of(s, n->part_seq);

		if (!e)
			return false;
		stage_cmd(s, n, e, n->part_off);
	}
	while (!n->part_seq && n->sendq.len > 0 && n->wbuf.len < WBUF_FILL) {
		struct qent *e = ent_of(s, u64q_pop(&n->sendq));

		if (!e || e->state != QS_ROUTED)
			continue; /* re-routed meanwhile */
		if (e->asking) {
			buf_append(&n->wbuf, asking, sizeof(asking) - 1);
			if (!u64q_push(&n->waitq, ASKING_MARK))
				return false;
		}
		if (!u64q_push(&n->waitq, e->seq))
			return false;
		stage_cmd(s, n, e, 0);
		if (e->kind != Q_GROUP)
			n->staged_publish = true;
	}
	if (n->part_seq)
		return !n->wbuf.failed; /* WAIT and INFO only between commands */
	if (s->wait_mode && n->staged_publish) {
		buf_append(&n->wbuf, s->wait_cmd.data, s->wait_cmd.len);
		if (!u64q_push(&n->waitq, WAIT_MARK))
			return false;
		n->staged_publish = false;
	}
	if (n->info_due) {
		static const char info[] = "*2\r\n$4\r\nINFO\r\n$6\r\nmemory\r\n";

		buf_append(&n->wbuf, info, sizeof(info) - 1);
		if (!u64q_push(&n->waitq, INFO_MARK))
			return false;
		n->info_due = false;
		n->info_sent = true;
	}
	if (n->trimq_n) {
		buf_append(&n->wbuf, n->trimq.data, n->trimq.len);
		for (; n->trimq_n > 0; n->trimq_n--)
			if (!u64q_push(&n->waitq, TRIM_MARK))
				return false;
		buf_reset(&n->trimq);
	}
	return !n->wbuf.failed;
}

static bool node_write(struct sink_redis *s, struct node *n)
{
	const struct redis_conn rc = node_conn(n);

	for (;;) {
		ssize_t w;

		if (n->wsent == n->wbuf.len) {
			bool was_idle = n->waitq.len == 0;

			if (n->sendq.len == 0 && !n->info_due && !n->trimq_n && !n->part_seq)
				return true;
			if (!stage(s, n)) {
				snprintf(s->errmsg, sizeof(s->errmsg), "out of memory");
				return false;
			}
			if (was_idle)
				n->wait_since_us = time_mono_us();
			if (n->wbuf.len == 0)
				return true;
		}
		w = n->io->write(&rc, n->wbuf.data + n->wsent, n->wbuf.len - n->wsent, &n->w_wants_read,
		                 s->errmsg, sizeof(s->errmsg));
		if (w > 0) {
			n->wsent += (size_t)w;
			continue;
		}
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			n->wblocked = true; /* poll() says when there is room again */
			return true;
		}
		return false; /* errmsg says why */
	}
}

static bool node_read(struct sink_redis *s, struct node *n)
{
	const struct redis_conn rc = node_conn(n);

	for (;;) {
		char rbuf[65536];
		ssize_t got;
		void *reply;

		got = n->io->read(&rc, rbuf, sizeof(rbuf), &n->r_wants_write, s->errmsg, sizeof(s->errmsg));

		if (got == 0) {
			snprintf(s->errmsg, sizeof(s->errmsg), "connection closed by Redis");
			return false;
		}
		if (got < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				return true;
			return false; /* errmsg says why */
		}
		if (redisReaderFeed(n->c->reader, rbuf, (size_t)got) != REDIS_OK) {
			snprintf(s->errmsg, sizeof(s->errmsg), "Redis protocol error: %s",
			         n->c->reader->errstr);
			return false;
		}
		for (;;) {
			bool ok;

			if (redisReaderGetReply(n->c->reader, &reply) != REDIS_OK) {
				snprintf(s->errmsg, sizeof(s->errmsg), "Redis protocol error: %s",
				         n->c->reader->errstr);
				return false;
			}
			if (!reply)
				break;
			ok = handle_reply(s, n, reply);
			freeReplyObject(reply);
			if (!ok)
				return false;
		}
		advance_head(s);
		/* Replies came back: send what accumulated meanwhile. */
		if (s->b_open && calls_pending(s) < BATCH_PIPELINE_DEPTH && !close_batch(s)) {
			snprintf(s->errmsg, sizeof(s->errmsg), "out of memory");
			return false;
		}
		/* TLS hands out one record per read: read on until it would block. */
		if (n->io->short_read_drains && (size_t)got < sizeof(rbuf))
			return true;
	}
}

bool sink_redis_io(struct sink_redis *s, const struct pollfd *pfd, int npfd)
{
	if (!s->connected) {
		snprintf(s->errmsg, sizeof(s->errmsg), "not connected");
		return false;
	}
	s->errkind = SINK_ERR_IO; /* unless a reply says otherwise */
	for (int i = 0; pfd && i < npfd && i < s->npoll; i++) {
		struct node *n = &s->nodes[s->poll_node[i]];

		short ev = pfd[i].revents;

		if (n->c && (ev & POLLOUT) && !n->w_wants_read)
			n->wblocked = false;
		if (n->c && n->w_wants_read && (ev & (POLLIN | POLLERR | POLLHUP))) {
			n->w_wants_read = false;
			n->wblocked = false;
		}
		if (n->c && ((ev & (POLLIN | POLLERR | POLLHUP)) || (n->r_wants_write && (ev & POLLOUT))) &&
		    !node_read(s, n))
			return false;
	}
	for (int i = 0; i < s->nnodes; i++)
		if (s->nodes[i].c && !s->nodes[i].wblocked && !node_write(s, &s->nodes[i]))
			return false;
	advance_head(s);
	return true;
}

void sink_redis_poll_memory(struct sink_redis *s)
{
	for (int i = 0; i < s->nnodes; i++) {
		struct node *n = &s->nodes[i];

		if (n->c && !n->info_sent)
			n->info_due = true;
	}
}

bool sink_redis_memory(const struct sink_redis *s, uint64_t *used, uint64_t *max)
{
	double best = 0;
	bool found = false;

	/* The node closest to its maxmemory; one without a limit scores -1. */
	for (int i = 0; i < s->nnodes; i++) {
		const struct node *n = &s->nodes[i];
		double score;

		if (!n->c || !n->mem_known)
			continue;
		score = n->maxmemory ? (double)n->used_memory / (double)n->maxmemory : -1.0;
		if (!found || score > best || (score == best && n->used_memory > *used)) {
			*used = n->used_memory;
			*max = n->maxmemory;
			best = score;
			found = true;
		}
	}
	return found;
}

const char *sink_redis_sentinel_master(const struct sink_redis *s, char *buf, size_t len)
{
	if (!s->cf->redis.sentinel || s->nnodes != 1)
		return NULL;
	return node_addr(&s->nodes[0], buf, len);
}

const char *sink_redis_maxmemory_policy(const struct sink_redis *s)
{
	return s->policy;
}

bool sink_redis_check_stall(struct sink_redis *s, int64_t now_us)
{
	int64_t limit = (int64_t)s->cf->redis_timeout_ms * 1000;

	if (s->wait_mode)
		limit += (int64_t)s->cf->wait_timeout_ms * 1000; /* WAIT may block that long */
	for (int i = 0; i < s->nnodes; i++) {
		struct node *n = &s->nodes[i];

		if (!n->c || n->waitq.len == 0)
			continue;
		if (now_us - n->wait_since_us > limit) {
			char a[300];

			snprintf(s->errmsg, sizeof(s->errmsg), "no reply from Redis within %d ms (%s)",
			         s->cf->redis_timeout_ms, node_addr(n, a, sizeof(a)));
			s->errkind = SINK_ERR_TIMEOUT;
			return false;
		}
	}
	return true;
}

int sink_redis_trim_start(struct sink_redis *s)
{
	int queued = 0;

	if (!s->trim || !s->connected || s->trim_pending > 0 || s->trim_done)
		return 0;
	s->trim_res = (struct sink_trim_result){0};
	for (size_t i = 0; i < s->trim_streams.cap; i++) {
		const char *stream = s->trim_streams.slots[i];
		size_t len = stream ? strlen(stream) : 0;
		struct node *n;
		int idx;

		if (!stream)
			continue;
		idx = s->slot_node ? s->slot_node[stream_slot(s, stream, len)] : 0;
		if (idx < 0 || idx >= s->nnodes || !s->nodes[idx].c)
			continue; /* no master for the slot now: next round */
		n = &s->nodes[idx];
		resp_array(&n->trimq, 4);
		resp_str(&n->trimq, s->use_functions ? "FCALL" : "EVALSHA");
		resp_str(&n->trimq, s->use_functions ? TRIM_FUNCTION_NAME : s->trim_sha);
		resp_str(&n->trimq, "1");
		resp_bulk(&n->trimq, stream, len);
		if (n->trimq.failed)
			return -1;
		n->trimq_n++;
		queued++;
	}
	s->trim_res.streams = (uint32_t)queued;
	s->trim_pending = (uint32_t)queued;
	return queued;
}

bool sink_redis_trim_result(struct sink_redis *s, struct sink_trim_result *res)
{
	if (!s->trim_done)
		return false;
	*res = s->trim_res;
	s->trim_done = false;
	return true;
}
