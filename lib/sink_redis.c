/*
 * sink_redis.c - pipelined publishing to Redis Streams through one atomic
 * server-side function.
 *
 * Connection setup uses hiredis's blocking API with a timeout. After that the
 * socket is switched to non-blocking and driven by the relay's poll loop:
 * commands are RESP-encoded straight into one contiguous buffer (no per-event
 * allocation), written with write(2), and replies are parsed by hiredis's
 * reader and matched in order against the queue of in-flight commands.
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

#define FUNCTION_NAME "outbox_relay_publish"

/*
 * One call publishes a batch: consecutive events of one stream.
 * KEYS: stream, watermark key, then one dedup key per event (all in the
 * stream's cluster slot). ARGV: dedup TTL seconds ("0": no dedup), MAXLEN
 * ("0": no trimming), then per event: position "<commit lsn hex16>:<index
 * hex8>", field count N, and N field/value pairs.
 * Returns one result per event, in order: 0 for a replay (the watermark is at
 * or past its position), 1 for a duplicate id inside the window, or the new
 * entry's id. The watermark is read once and written once per batch.
 * Redis does not undo a script's writes when a later command fails, so a
 * failing XADD (e.g. WRONGTYPE) is caught: that event's dedup key is removed
 * and the watermark covers only the events before it, then the error is
 * returned. A retry then publishes exactly what is missing.
 */
#define PUBLISH_BODY                                                                               \
	"local function publish(keys, args)\n"                                                     \
	"  local ttl, maxlen = args[1], args[2]\n"                                                 \
	"  local wm = redis.call('GET', keys[2])\n"                                                \
	"  local res, last, a = {}, nil, 3\n"                                                      \
	"  for i = 3, #keys do\n"                                                                  \
	"    local pos, first = args[a], a + 2\n"                                                  \
	"    a = first + 2 * tonumber(args[a + 1])\n"                                              \
	"    if wm and wm >= pos then\n"                                                           \
	"      res[#res + 1] = 0\n"                                                                \
	"    elseif ttl ~= '0' and not redis.call('SET', keys[i], '1', 'NX', 'EX', ttl) then\n"    \
	"      res[#res + 1] = 1\n"                                                                \
	"      wm, last = pos, pos\n"                                                              \
	"    else\n"                                                                               \
	"      local id\n"                                                                         \
	"      if maxlen ~= '0' then\n"                                                            \
	"        id = redis.pcall('XADD', keys[1], 'MAXLEN', '~', maxlen, '*',\n"                  \
	"                         unpack(args, first, a - 1))\n"                                   \
	"      else\n"                                                                             \
	"        id = redis.pcall('XADD', keys[1], '*', unpack(args, first, a - 1))\n"             \
	"      end\n"                                                                              \
	"      if type(id) == 'table' and id.err then\n"                                           \
	"        if ttl ~= '0' then redis.call('DEL', keys[i]) end\n"                              \
	"        if last then redis.call('SET', keys[2], last) end\n"                              \
	"        return id\n"                                                                      \
	"      end\n"                                                                              \
	"      res[#res + 1] = id\n"                                                               \
	"      wm, last = pos, pos\n"                                                              \
	"    end\n"                                                                                \
	"  end\n"                                                                                  \
	"  if last then redis.call('SET', keys[2], last) end\n"                                    \
	"  return res\n"                                                                           \
	"end\n"

const char sink_redis_function_library[] = "#!lua name=outbox_relay\n" PUBLISH_BODY
					   "redis.register_function('" FUNCTION_NAME
					   "', publish)\n";

static const char eval_script[] = PUBLISH_BODY "return publish(KEYS, ARGV)\n";

enum qkind { Q_PUBLISH, Q_DEAD, Q_GROUP };

/* Most events in one function call, and the size at which a batch is closed. */
#define BATCH_MAX_EVENTS 64
#define BATCH_MAX_BYTES (256 * 1024)

struct qent {
	uint64_t seq;
	size_t len;         /* encoded bytes */
	uint32_t nevents;   /* events in a publish batch; 0 for XGROUP */
	int64_t commit_us;  /* commit time, for the latency histogram (0: unknown) */
	uint32_t stream_id; /* metrics label id */
	uint8_t kind;       /* enum qkind */
	uint8_t dead_reason;
};

struct strset {
	char **slots;
	size_t cap; /* power of two */
	size_t used;
};

struct sink_redis {
	const struct relay_config *cf;
	struct metrics *m;
	redisContext *c;
	bool use_functions;
	char sha[41]; /* EVALSHA digest when functions are unavailable */

	/* Encoded commands from head_off to out.len; sent up to sent_off. */
	struct buf out;
	size_t head_off;
	size_t sent_off;

	/* Ring of queued commands, oldest at q_head. */
	struct qent *q;
	size_t q_cap, q_head, q_len;

	uint64_t next_seq;  /* seq of the next queued command */
	uint64_t inflight_events; /* events queued (open batch included), not yet acknowledged */

	/*
	 * The open batch: consecutive events for one stream, not yet encoded into
	 * out. It takes its seq when opened; any other command closes it first,
	 * so seqs in the queue stay increasing.
	 */
	bool b_open;
	bool b_dead;
	uint64_t b_seq;
	uint32_t b_n;
	struct buf b_stream;
	struct buf b_keys; /* RESP bulk strings: one dedup key per event */
	struct buf b_args; /* RESP bulk strings: pos, nfields, fields per event */
	int64_t b_commit_us;
	uint32_t b_stream_id;
	uint8_t b_dead_reason;
	uint64_t b_args_count; /* ARGV entries after ttl and maxlen */
	struct buf b_prefix;   /* "<prefix>:dedup:{tag}:" of the open batch */
	uint64_t acked_seq; /* every command up to here has its reply */
	int64_t wait_since_us; /* when we started waiting for the oldest reply */

	struct strset streams; /* streams that got XGROUP CREATE on this connection */
	struct buf key;        /* scratch for key names */
	struct buf tag;
	struct sink_stats stats;
	enum sink_error_kind errkind;
	char errmsg[512];
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

/* ---- queue ---- */

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
	if (s->q_len == 0)
		s->wait_since_us = time_mono_us();
	s->q[(s->q_head + s->q_len) % s->q_cap] = *ent;
	s->q_len++;
	return true;
}

static void queue_pop(struct sink_redis *s)
{
	struct qent *e = &s->q[s->q_head];

	s->head_off += e->len;
	s->acked_seq = e->seq;
	s->inflight_events -= e->nevents;
	s->q_head = (s->q_head + 1) % s->q_cap;
	s->q_len--;
	s->wait_since_us = time_mono_us();
	/* Reclaim the acknowledged prefix once it dominates the buffer. */
	if (s->q_len == 0 && s->sent_off == s->out.len) {
		s->out.len = s->head_off = s->sent_off = 0;
	} else if (s->head_off > (1u << 20) && s->head_off * 2 > s->out.len) {
		memmove(s->out.data, s->out.data + s->head_off, s->out.len - s->head_off);
		s->out.len -= s->head_off;
		s->sent_off -= s->head_off;
		s->head_off = 0;
	}
}

/* ---- lifecycle ---- */

struct sink_redis *sink_redis_create(const struct relay_config *cf, struct metrics *m)
{
	struct sink_redis *s = calloc(1, sizeof(*s));

	if (!s)
		return NULL;
	s->cf = cf;
	s->m = m;
	s->use_functions = cf->redis_functions;
	s->next_seq = 1;
	return s;
}

void sink_redis_destroy(struct sink_redis *s)
{
	if (!s)
		return;
	sink_redis_disconnect(s);
	buf_finish(&s->out);
	buf_finish(&s->key);
	buf_finish(&s->tag);
	buf_finish(&s->b_stream);
	buf_finish(&s->b_keys);
	buf_finish(&s->b_args);
	buf_finish(&s->b_prefix);
	strset_finish(&s->streams);
	free(s->q);
	free(s);
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

/* Classify an error reply by its first word. */
static enum sink_error_kind classify_reply_error(const char *msg)
{
	static const struct {
		const char *prefix;
		enum sink_error_kind kind;
	} map[] = {
		{"OOM", SINK_ERR_OOM},           {"WRONGTYPE", SINK_ERR_WRONGTYPE},
		{"NOSCRIPT", SINK_ERR_NOSCRIPT}, {"READONLY", SINK_ERR_READONLY},
		{"BUSY", SINK_ERR_BUSY},         {"LOADING", SINK_ERR_BUSY},
		{"MASTERDOWN", SINK_ERR_BUSY},   {"TRYAGAIN", SINK_ERR_BUSY},
	};

	for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++)
		if (strncmp(msg, map[i].prefix, strlen(map[i].prefix)) == 0)
			return map[i].kind;
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
	return s->c != NULL;
}

int sink_redis_fd(const struct sink_redis *s)
{
	return s->c ? s->c->fd : -1;
}

bool sink_redis_want_write(const struct sink_redis *s)
{
	return s->c && s->sent_off < s->out.len;
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
	return s->out.len - s->head_off + (s->b_open ? s->b_keys.len + s->b_args.len : 0);
}

const struct sink_stats *sink_redis_stats(const struct sink_redis *s)
{
	return &s->stats;
}

void sink_redis_disconnect(struct sink_redis *s)
{
	if (s->c) {
		redisFree(s->c);
		s->c = NULL;
	}
	s->sent_off = s->head_off; /* everything unacknowledged goes again */
}

/* Is this error reply one that no retry can fix (credentials, ACLs)? */
static bool permanent_error(const char *msg)
{
	return strncmp(msg, "WRONGPASS", 9) == 0 || strncmp(msg, "NOAUTH", 6) == 0 ||
	       strncmp(msg, "NOPERM", 6) == 0 || strstr(msg, "invalid password") != NULL ||
	       strstr(msg, "invalid username-password") != NULL;
}

/*
 * Run one setup command synchronously. Returns the reply (caller frees) or
 * NULL with errmsg set; *status says whether retrying can help.
 */
static redisReply *setup_command(struct sink_redis *s, enum sink_status *status, const char *what,
				 int argc, const char **argv)
{
	redisReply *r = redisCommandArgv(s->c, argc, argv, NULL);

	if (!r) {
		snprintf(s->errmsg, sizeof(s->errmsg), "%s failed: %s", what,
			 s->c->errstr[0] ? s->c->errstr : "connection lost");
		*status = SINK_RETRY;
		return NULL;
	}
	if (r->type == REDIS_REPLY_ERROR) {
		*status = permanent_error(r->str) ? SINK_FATAL : SINK_RETRY;
		snprintf(s->errmsg, sizeof(s->errmsg), "%s failed: %s%s", what, r->str,
			 strncmp(r->str, "NOPERM", 6) == 0
				 ? " (the Redis ACL user lacks a permission: see deploy/redis/users.acl)"
			 : *status == SINK_FATAL
				 ? " (check the user and password in --redis-url or --redis-password-file)"
				 : "");
		return r;
	}
	return r;
}

static enum sink_status load_function(struct sink_redis *s)
{
	enum sink_status st = SINK_OK;
	redisReply *r;

	if (s->use_functions) {
		const char *argv[] = {"FUNCTION", "LOAD", "REPLACE", sink_redis_function_library};

		r = setup_command(s, &st, "FUNCTION LOAD", 4, argv);
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
	{
		const char *argv[] = {"SCRIPT", "LOAD", eval_script};

		r = setup_command(s, &st, "SCRIPT LOAD", 3, argv);
		if (!r)
			return st;
		if (r->type != REDIS_REPLY_STRING || r->len != 40) {
			if (r->type != REDIS_REPLY_ERROR)
				snprintf(s->errmsg, sizeof(s->errmsg),
					 "SCRIPT LOAD returned an unexpected reply");
			freeReplyObject(r);
			return st == SINK_OK ? SINK_RETRY : st;
		}
		memcpy(s->sha, r->str, 40);
		s->sha[40] = '\0';
		freeReplyObject(r);
	}
	return SINK_OK;
}

/*
 * Refuse servers without the commands the relay needs, with the version in
 * the message: COMMAND INFO answers nil for an unknown (or renamed) command.
 */
static enum sink_status check_server(struct sink_redis *s)
{
	const char *argv[] = {"COMMAND", "INFO", "XADD", "XGROUP", "EVALSHA"};
	enum sink_status st = SINK_OK;
	redisReply *r = setup_command(s, &st, "COMMAND INFO", 5, argv);

	if (!r)
		return st;
	if (r->type == REDIS_REPLY_ARRAY) {
		for (size_t i = 0; i < r->elements; i++) {
			if (r->element[i]->type == REDIS_REPLY_NIL) {
				snprintf(s->errmsg, sizeof(s->errmsg),
					 "the server does not provide %s: outbox-relay needs Redis 5 or "
					 "newer with streams and scripting (7.0+ recommended for functions)",
					 argv[i + 2]);
				freeReplyObject(r);
				return SINK_FATAL;
			}
		}
	}
	/* An error here (e.g. ACL without COMMAND) is not a verdict: carry on. */
	freeReplyObject(r);
	return SINK_OK;
}

enum sink_status sink_redis_connect(struct sink_redis *s)
{
	const struct redis_target *t = &s->cf->redis;
	struct timeval tv = {s->cf->redis_timeout_ms / 1000, (s->cf->redis_timeout_ms % 1000) * 1000};
	enum sink_status st = SINK_OK;
	bool first = s->stats.reconnects == 0 && s->acked_seq == 0 && s->inflight_events == 0;
	redisReply *r;
	int flags;

	sink_redis_disconnect(s);
	if (t->tls) {
		snprintf(s->errmsg, sizeof(s->errmsg),
			 "rediss:// (TLS) is not supported by this build: it was built with hiredis "
			 "%d.%d without hiredis_ssl; use redis:// or build against hiredis >= 1.0 "
			 "with TLS",
			 HIREDIS_MAJOR, HIREDIS_MINOR);
		return SINK_FATAL;
	}
	if (t->unix_path)
		s->c = redisConnectUnixWithTimeout(t->unix_path, tv);
	else
		s->c = redisConnectWithTimeout(t->host, t->port, tv);
	if (!s->c) {
		snprintf(s->errmsg, sizeof(s->errmsg), "could not allocate a Redis context");
		return SINK_RETRY;
	}
	if (s->c->err) {
		snprintf(s->errmsg, sizeof(s->errmsg), "could not connect: %s", s->c->errstr);
		goto fail;
	}
	if (redisSetTimeout(s->c, tv) != REDIS_OK || (!t->unix_path && redisEnableKeepAlive(s->c) != REDIS_OK)) {
		snprintf(s->errmsg, sizeof(s->errmsg), "could not set socket options: %s",
			 s->c->errstr);
		goto fail;
	}
	if (t->password) {
		const char *argv[] = {"AUTH", t->user ? t->user : t->password, t->password};

		r = setup_command(s, &st, "AUTH", t->user ? 3 : 2, argv);
		if (!r)
			goto fail;
		freeReplyObject(r);
		if (st != SINK_OK)
			goto fail;
	}
	if (t->db != 0) {
		char db[16];
		const char *argv[] = {"SELECT", db};

		snprintf(db, sizeof(db), "%d", t->db);
		r = setup_command(s, &st, "SELECT", 2, argv);
		if (!r)
			goto fail;
		freeReplyObject(r);
		if (st != SINK_OK)
			goto fail;
	}
	st = check_server(s);
	if (st != SINK_OK)
		goto fail;
	st = load_function(s);
	if (st != SINK_OK)
		goto fail;

	/* From here on the relay's poll loop drives the socket. */
	flags = fcntl(s->c->fd, F_GETFL);
	if (flags < 0 || fcntl(s->c->fd, F_SETFL, flags | O_NONBLOCK) < 0) {
		snprintf(s->errmsg, sizeof(s->errmsg), "could not make the socket non-blocking: %s",
			 strerror(errno));
		st = SINK_RETRY;
		goto fail;
	}
	s->c->flags &= ~REDIS_BLOCK;
	strset_clear(&s->streams);
	s->sent_off = s->head_off;
	s->wait_since_us = time_mono_us();
	if (!first)
		s->stats.reconnects++;
	return SINK_OK;
fail:
	if (st == SINK_OK)
		st = SINK_RETRY;
	redisFree(s->c);
	s->c = NULL;
	return st;
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
	char tmp[24];
	int i = (int)sizeof(tmp);

	do {
		tmp[--i] = (char)('0' + v % 10);
		v /= 10;
	} while (v);
	resp_bulk(b, tmp + i, sizeof(tmp) - (size_t)i);
}

/* Encode the open batch as one function call into s->out and queue it. */
static bool close_batch(struct sink_redis *s)
{
	const struct relay_config *cf = s->cf;
	struct buf *b = &s->out;
	size_t start = b->len;
	struct qent ent;

	if (!s->b_open)
		return true;
	s->b_open = false;
	(void)stream_hash_tag(s->b_stream.data, s->b_stream.len, &s->tag); /* checked when routed */
	/* FCALL name numkeys | stream wm dedup... | ttl maxlen args... */
	resp_array(b, 3 + (2 + s->b_n) + 2 + s->b_args_count);
	if (s->use_functions) {
		resp_str(b, "FCALL");
		resp_str(b, FUNCTION_NAME);
	} else {
		resp_str(b, "EVALSHA");
		resp_str(b, s->sha);
	}
	resp_u64(b, 2 + s->b_n);
	resp_bulk(b, s->b_stream.data, s->b_stream.len);
	buf_reset(&s->key); /* watermark: <prefix>:wm:{tag}:<slot> */
	buf_puts(&s->key, cf->key_prefix);
	buf_puts(&s->key, ":wm:");
	buf_append(&s->key, s->tag.data, s->tag.len);
	buf_putc(&s->key, ':');
	buf_puts(&s->key, cf->slot);
	resp_bulk(b, s->key.data, s->key.len);
	buf_append(b, s->b_keys.data, s->b_keys.len);
	resp_u64(b, s->b_dead ? 0 : (uint64_t)cf->dedup_window_s);
	resp_u64(b, s->b_dead ? 0 : (uint64_t)cf->maxlen);
	buf_append(b, s->b_args.data, s->b_args.len);
	if (b->failed || s->key.failed || s->tag.failed)
		return false;
	ent = (struct qent){
		.seq = s->b_seq,
		.len = b->len - start,
		.nevents = s->b_n,
		.commit_us = s->b_commit_us,
		.stream_id = s->b_stream_id,
		.kind = s->b_dead ? Q_DEAD : Q_PUBLISH,
		.dead_reason = s->b_dead_reason,
	};
	return queue_push(s, &ent);
}

bool sink_redis_flush(struct sink_redis *s)
{
	return close_batch(s);
}

/* Queue XGROUP CREATE <stream> <group> 0 MKSTREAM for every --group. */
static bool queue_groups(struct sink_redis *s, const char *stream, size_t len)
{
	for (size_t g = 0; g < s->cf->ngroups; g++) {
		size_t start = s->out.len;
		struct qent ent;

		resp_array(&s->out, 6);
		resp_str(&s->out, "XGROUP");
		resp_str(&s->out, "CREATE");
		resp_bulk(&s->out, stream, len);
		resp_str(&s->out, s->cf->groups[g]);
		resp_str(&s->out, "0");
		resp_str(&s->out, "MKSTREAM");
		if (s->out.failed)
			return false;
		ent = (struct qent){.seq = s->next_seq++, .len = s->out.len - start, .kind = Q_GROUP};
		if (!queue_push(s, &ent))
			return false;
	}
	return true;
}

bool sink_redis_publish(struct sink_redis *s, const struct event *ev, bool dead_letter)
{
	char pos[26];

	if (s->b_open && (dead_letter || s->b_dead || s->b_n >= BATCH_MAX_EVENTS ||
			  s->b_args.len >= BATCH_MAX_BYTES || s->b_stream.len != ev->stream_len ||
			  memcmp(s->b_stream.data, ev->stream, ev->stream_len) != 0) &&
	    !close_batch(s))
		return false;
	if (!dead_letter && s->cf->ngroups > 0) {
		int added = strset_add(&s->streams, ev->stream, ev->stream_len);

		if (added < 0 || (added == 1 && (!close_batch(s) || !queue_groups(s, ev->stream,
										    ev->stream_len))))
			return false;
	}
	if (!s->b_open) {
		s->b_open = true;
		s->b_dead = dead_letter;
		s->b_seq = s->next_seq++;
		s->b_n = 0;
		s->b_args_count = 0;
		buf_reset(&s->b_stream);
		buf_append(&s->b_stream, ev->stream, ev->stream_len);
		buf_reset(&s->b_keys);
		buf_reset(&s->b_args);
		s->b_commit_us = ev->committed_unix_us;
		s->b_dead_reason = (uint8_t)ev->dead_reason;
		s->b_stream_id = !dead_letter && s->m
					 ? metrics_stream_id(s->m, ev->stream, ev->stream_len)
					 : 0;
		if (!stream_hash_tag(ev->stream, ev->stream_len, &s->tag))
			return false;
		buf_reset(&s->key); /* dedup key prefix: <prefix>:dedup:{tag}: */
		buf_puts(&s->key, s->cf->key_prefix);
		buf_puts(&s->key, ":dedup:");
		buf_append(&s->key, s->tag.data, s->tag.len);
		buf_putc(&s->key, ':');
		buf_reset(&s->b_prefix);
		buf_append(&s->b_prefix, s->key.data, s->key.len);
	}
	/* KEYS: the dedup key; ARGV: position, field count, fields. */
	buf_putc(&s->b_keys, '$');
	buf_put_u64(&s->b_keys, s->b_prefix.len + ev->id_len);
	buf_append(&s->b_keys, "\r\n", 2);
	buf_append(&s->b_keys, s->b_prefix.data, s->b_prefix.len);
	if (ev->id)
		buf_append(&s->b_keys, ev->id, ev->id_len);
	buf_append(&s->b_keys, "\r\n", 2);

	put_hex(pos, ev->commit_lsn, 16);
	pos[16] = ':';
	put_hex(pos + 17, ev->index, 8);
	resp_bulk(&s->b_args, pos, 25);
	resp_u64(&s->b_args, ev->nfields);
	for (size_t i = 0; i < ev->nfields; i++) {
		resp_bulk(&s->b_args, ev->fields[i].name, ev->fields[i].name_len);
		resp_bulk(&s->b_args, ev->fields[i].value, ev->fields[i].value_len);
	}
	s->b_args_count += 2 + 2 * ev->nfields;
	s->b_n++;
	s->inflight_events++;
	if (s->b_keys.failed || s->b_args.failed || s->b_stream.failed || s->key.failed)
		return false;
	/* Dead letters are rare and each has its own reason: one per call. */
	return dead_letter ? close_batch(s) : true;
}

static const char *kind_name(enum qkind k)
{
	return k == Q_GROUP ? "XGROUP CREATE" : k == Q_DEAD ? "dead-letter publish" : "publish";
}

/* Count one event's result from a publish reply (0 replay, 1 duplicate, entry id). */
static void count_result(struct sink_redis *s, const struct qent *e, const redisReply *r,
			 int64_t now_us)
{
	_Atomic uint64_t *c = NULL;

	if (r->type == REDIS_REPLY_INTEGER && r->integer == 0) {
		s->stats.replays++;
		c = s->m ? &s->m->replays_skipped : NULL;
	} else if (r->type == REDIS_REPLY_INTEGER) {
		s->stats.duplicates++;
		c = s->m ? &s->m->duplicates_skipped : NULL;
	} else if (e->kind == Q_DEAD) {
		s->stats.dead_lettered++;
		c = s->m && e->dead_reason < DEAD_NREASONS ? &s->m->dead_lettered[e->dead_reason]
							   : NULL;
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

/* Match one reply against the oldest queued command. */
static bool handle_reply(struct sink_redis *s, redisReply *r)
{
	struct qent *e;

	if (s->q_len == 0) {
		snprintf(s->errmsg, sizeof(s->errmsg), "unexpected reply from Redis with nothing in flight");
		return false;
	}
	e = &s->q[s->q_head];
	if (r->type == REDIS_REPLY_ERROR) {
		if (e->kind == Q_GROUP && strncmp(r->str, "BUSYGROUP", 9) == 0) {
			queue_pop(s);
			return true;
		}
		s->stats.error_replies++;
		s->errkind = classify_reply_error(r->str);
		if (s->errkind == SINK_ERR_WRONGTYPE)
			snprintf(s->errmsg, sizeof(s->errmsg),
				 "%s failed: %s (a key the relay writes holds another type: rename or "
				 "delete it; the relay retries until then)",
				 kind_name(e->kind), r->str);
		else
			snprintf(s->errmsg, sizeof(s->errmsg), "%s failed: %s",
				 kind_name(e->kind), r->str);
		return false;
	}
	if (e->kind != Q_GROUP) {
		int64_t now = time_now_us();

		if (r->type != REDIS_REPLY_ARRAY || r->elements != e->nevents) {
			snprintf(s->errmsg, sizeof(s->errmsg),
				 "unexpected reply to %s: type %d with %zu element(s) for %u event(s)",
				 kind_name(e->kind), r->type,
				 r->type == REDIS_REPLY_ARRAY ? (size_t)r->elements : (size_t)0,
				 e->nevents);
			return false;
		}
		for (size_t i = 0; i < r->elements; i++)
			count_result(s, e, r->element[i], now);
	}
	queue_pop(s);
	return true;
}

bool sink_redis_io(struct sink_redis *s, bool readable, bool writable)
{
	(void)writable; /* we always try: the socket is non-blocking */
	s->errkind = SINK_ERR_IO; /* unless a reply says otherwise */
	if (!s->c) {
		snprintf(s->errmsg, sizeof(s->errmsg), "not connected");
		return false;
	}
	while (s->sent_off < s->out.len) {
		ssize_t n = write(s->c->fd, s->out.data + s->sent_off, s->out.len - s->sent_off);

		if (n > 0) {
			s->sent_off += (size_t)n;
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			break;
		snprintf(s->errmsg, sizeof(s->errmsg), "could not send to Redis: %s",
			 n == 0 ? "short write" : strerror(errno));
		return false;
	}
	if (!readable)
		return true;
	for (;;) {
		char rbuf[65536];
		ssize_t n = read(s->c->fd, rbuf, sizeof(rbuf));
		void *reply;

		if (n == 0) {
			snprintf(s->errmsg, sizeof(s->errmsg), "connection closed by Redis");
			return false;
		}
		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				return true;
			snprintf(s->errmsg, sizeof(s->errmsg), "could not read from Redis: %s",
				 strerror(errno));
			return false;
		}
		if (redisReaderFeed(s->c->reader, rbuf, (size_t)n) != REDIS_OK) {
			snprintf(s->errmsg, sizeof(s->errmsg), "Redis protocol error: %s",
				 s->c->reader->errstr);
			return false;
		}
		for (;;) {
			bool ok;

			if (redisReaderGetReply(s->c->reader, &reply) != REDIS_OK) {
				snprintf(s->errmsg, sizeof(s->errmsg), "Redis protocol error: %s",
					 s->c->reader->errstr);
				return false;
			}
			if (!reply)
				break;
			ok = handle_reply(s, reply);
			freeReplyObject(reply);
			if (!ok)
				return false;
		}
		if ((size_t)n < sizeof(rbuf))
			return true;
	}
}

bool sink_redis_check_stall(struct sink_redis *s, int64_t now_us)
{
	if (!s->c || s->q_len == 0 || s->sent_off == s->head_off)
		return true;
	if (now_us - s->wait_since_us > (int64_t)s->cf->redis_timeout_ms * 1000) {
		snprintf(s->errmsg, sizeof(s->errmsg), "no reply from Redis within %d ms",
			 s->cf->redis_timeout_ms);
		s->errkind = SINK_ERR_TIMEOUT;
		return false;
	}
	return true;
}
