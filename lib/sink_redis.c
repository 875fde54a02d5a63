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
 * KEYS: stream, watermark key, dedup key (all in the stream's hash slot).
 * ARGV: position "<commit lsn hex16>:<index hex8>", dedup TTL seconds ("0":
 * no dedup), MAXLEN ("0": no trimming), then field/value pairs.
 * Returns 0 for a replay (watermark at or past position), 1 for a duplicate
 * event id inside the window, or the new entry's id.
 */
#define PUBLISH_BODY                                                                               \
	"local function publish(keys, args)\n"                                                     \
	"  local wm = redis.call('GET', keys[2])\n"                                                \
	"  if wm and wm >= args[1] then return 0 end\n"                                            \
	"  if args[2] ~= '0' then\n"                                                               \
	"    if not redis.call('SET', keys[3], '1', 'NX', 'EX', args[2]) then\n"                   \
	"      redis.call('SET', keys[2], args[1])\n"                                              \
	"      return 1\n"                                                                         \
	"    end\n"                                                                                \
	"  end\n"                                                                                  \
	"  local x\n"                                                                              \
	"  if args[3] ~= '0' then x = {keys[1], 'MAXLEN', '~', args[3], '*'}\n"                    \
	"  else x = {keys[1], '*'} end\n"                                                          \
	"  for i = 4, #args do x[#x + 1] = args[i] end\n"                                          \
	"  local id = redis.call('XADD', unpack(x))\n"                                             \
	"  redis.call('SET', keys[2], args[1])\n"                                                  \
	"  return id\n"                                                                            \
	"end\n"

const char sink_redis_function_library[] = "#!lua name=outbox_relay\n" PUBLISH_BODY
					   "redis.register_function('" FUNCTION_NAME
					   "', publish)\n";

static const char eval_script[] = PUBLISH_BODY "return publish(KEYS, ARGV)\n";

enum qkind { Q_PUBLISH, Q_DEAD, Q_GROUP };

struct qent {
	uint64_t seq;
	size_t len;         /* encoded bytes */
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

static bool queue_push(struct sink_redis *s, enum qkind kind, size_t len, const struct event *ev)
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
	s->q[(s->q_head + s->q_len) % s->q_cap] = (struct qent){
		.seq = s->next_seq++,
		.len = len,
		.kind = (uint8_t)kind,
		.commit_us = ev ? ev->committed_unix_us : 0,
		.dead_reason = ev ? (uint8_t)ev->dead_reason : 0,
		.stream_id = ev && kind == Q_PUBLISH && s->m
				     ? metrics_stream_id(s->m, ev->stream, ev->stream_len)
				     : 0,
	};
	s->q_len++;
	return true;
}

static void queue_pop(struct sink_redis *s)
{
	struct qent *e = &s->q[s->q_head];

	s->head_off += e->len;
	s->acked_seq = e->seq;
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
	if (s->q_len == 0)
		return false; /* always admit one event, however large */
	return (int64_t)s->q_len >= s->cf->max_inflight_events ||
	       (int64_t)(s->out.len - s->head_off) >= s->cf->max_inflight_bytes;
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
	return s->q_len;
}

uint64_t sink_redis_inflight_bytes(const struct sink_redis *s)
{
	return s->out.len - s->head_off;
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
		snprintf(s->errmsg, sizeof(s->errmsg), "%s failed: %s", what, r->str);
		*status = permanent_error(r->str) ? SINK_FATAL : SINK_RETRY;
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
	bool first = s->stats.reconnects == 0 && s->acked_seq == 0 && s->q_len == 0;
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

/* Encode the publish call for ev into s->out. */
static void encode_publish(struct sink_redis *s, const struct event *ev, bool dead_letter)
{
	const struct relay_config *cf = s->cf;
	char pos[32], ttl[24], maxlen[24];
	struct buf *b = &s->out;

	(void)stream_hash_tag(ev->stream, ev->stream_len, &s->tag); /* checked when routed */
	snprintf(pos, sizeof(pos), "%016" PRIX64 ":%08" PRIX32, (uint64_t)ev->commit_lsn, ev->index);
	snprintf(ttl, sizeof(ttl), "%" PRId64, dead_letter || !ev->id ? (int64_t)0 : cf->dedup_window_s);
	snprintf(maxlen, sizeof(maxlen), "%" PRId64, dead_letter ? (int64_t)0 : cf->maxlen);

	resp_array(b, 9 + 2 * ev->nfields);
	if (s->use_functions) {
		resp_str(b, "FCALL");
		resp_str(b, FUNCTION_NAME);
	} else {
		resp_str(b, "EVALSHA");
		resp_str(b, s->sha);
	}
	resp_str(b, "3");
	resp_bulk(b, ev->stream, ev->stream_len);

	buf_reset(&s->key); /* watermark: <prefix>:wm:{tag}:<slot> */
	buf_puts(&s->key, cf->key_prefix);
	buf_puts(&s->key, ":wm:");
	buf_append(&s->key, s->tag.data, s->tag.len);
	buf_putc(&s->key, ':');
	buf_puts(&s->key, cf->slot);
	resp_bulk(b, s->key.data, s->key.len);

	buf_reset(&s->key); /* dedup: <prefix>:dedup:{tag}:<event id> */
	buf_puts(&s->key, cf->key_prefix);
	buf_puts(&s->key, ":dedup:");
	buf_append(&s->key, s->tag.data, s->tag.len);
	buf_putc(&s->key, ':');
	if (ev->id)
		buf_append(&s->key, ev->id, ev->id_len);
	resp_bulk(b, s->key.data, s->key.len);

	resp_str(b, pos);
	resp_str(b, ttl);
	resp_str(b, maxlen);
	for (size_t i = 0; i < ev->nfields; i++) {
		resp_bulk(b, ev->fields[i].name, ev->fields[i].name_len);
		resp_bulk(b, ev->fields[i].value, ev->fields[i].value_len);
	}
}

bool sink_redis_publish(struct sink_redis *s, const struct event *ev, bool dead_letter)
{
	size_t start;

	if (!dead_letter && s->cf->ngroups > 0) {
		int added = strset_add(&s->streams, ev->stream, ev->stream_len);

		if (added < 0)
			return false;
		for (size_t g = 0; added == 1 && g < s->cf->ngroups; g++) {
			start = s->out.len;
			resp_array(&s->out, 6);
			resp_str(&s->out, "XGROUP");
			resp_str(&s->out, "CREATE");
			resp_bulk(&s->out, ev->stream, ev->stream_len);
			resp_str(&s->out, s->cf->groups[g]);
			resp_str(&s->out, "0");
			resp_str(&s->out, "MKSTREAM");
			if (s->out.failed || !queue_push(s, Q_GROUP, s->out.len - start, NULL))
				return false;
		}
	}
	start = s->out.len;
	encode_publish(s, ev, dead_letter);
	if (s->out.failed || s->key.failed || s->tag.failed)
		return false;
	return queue_push(s, dead_letter ? Q_DEAD : Q_PUBLISH, s->out.len - start, ev);
}

static const char *kind_name(enum qkind k)
{
	return k == Q_GROUP ? "XGROUP CREATE" : k == Q_DEAD ? "dead-letter publish" : "publish";
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
				 "Redis answered %s with an error: %s (a key the relay writes holds "
				 "another type: rename or delete it; the relay retries until then)",
				 kind_name(e->kind), r->str);
		else
			snprintf(s->errmsg, sizeof(s->errmsg), "Redis answered %s with an error: %s",
				 kind_name(e->kind), r->str);
		return false;
	}
	if (e->kind == Q_GROUP) {
		/* OK, or a BUSYGROUP handled above */
	} else if (r->type == REDIS_REPLY_INTEGER && r->integer == 0) {
		s->stats.replays++;
		if (s->m)
			atomic_fetch_add_explicit(&s->m->replays_skipped, 1, memory_order_relaxed);
	} else if (r->type == REDIS_REPLY_INTEGER && r->integer == 1) {
		s->stats.duplicates++;
		if (s->m)
			atomic_fetch_add_explicit(&s->m->duplicates_skipped, 1, memory_order_relaxed);
	} else if (r->type == REDIS_REPLY_STRING) {
		if (e->kind == Q_DEAD) {
			s->stats.dead_lettered++;
			if (s->m && e->dead_reason < DEAD_NREASONS)
				atomic_fetch_add_explicit(&s->m->dead_lettered[e->dead_reason], 1,
							  memory_order_relaxed);
		} else {
			s->stats.published++;
			if (s->m) {
				atomic_fetch_add_explicit(&s->m->published[e->stream_id], 1,
							  memory_order_relaxed);
				if (e->commit_us > 0)
					metrics_observe_latency(s->m, time_now_us() - e->commit_us);
			}
		}
	} else {
		snprintf(s->errmsg, sizeof(s->errmsg), "unexpected reply type %d to %s", r->type,
			 kind_name(e->kind));
		return false;
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
