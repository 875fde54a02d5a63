/*
 * sink_redis.c - pipelined publishing to Redis Streams (a single server or a
 * Redis Cluster) through one atomic server-side function.
 *
 * Every command the relay queues (a batch of events for one stream, or an
 * XGROUP CREATE) gets a sequence number and keeps its RESP bytes in one
 * resend buffer until it is done (the ring, the batch encoder and which
 * command a reply answers: lib/sink_queue.c). A command is routed to the
 * connection of the master owning its stream's hash slot (one connection
 * when standalone), written with write(2) from the poll loop, and its reply
 * is matched in order on that connection by hiredis's reader. acked_seq is
 * the end of the done prefix, so acknowledgements stay in sequence order
 * however the masters interleave their answers.
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
#include "sink_queue.h"
#include "sink_script.h"

#define MAX_NODES CLUSTER_SLOTS_MAX_NODES
#define CLUSTER_SLOTS CLUSTER_SLOTS_COUNT
_Static_assert(MAX_NODES <= INT8_MAX, "node indexes are int8_t (slot_node, sq_ent.node)");
#define WBUF_FILL (256 * 1024) /* bytes staged per write round */

/* Calls awaiting replies below which an open batch is sent at once. */
#define BATCH_PIPELINE_DEPTH 2

/* One connection: the single server, or one cluster master. */
struct node {
	char *host;
	int port;
	char *unix_path;
	const struct redis_conn_ops *io; /* plain or TLS reads and writes, chosen at connect */
	redisContext *c;
	struct ring sendq; /* seqs routed here, not yet staged */
	struct buf wbuf;   /* staged bytes, written from wsent */
	size_t wsent;
	uint64_t part_seq; /* command staged only up to part_off (0: none) */
	size_t part_off;
	struct ring waitq;   /* what each coming reply answers (a seq or an SQ_*_MARK) */
	struct ring durable; /* executed seqs that the next WAIT must cover */
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

	struct sink_queue q;    /* the command ring, the open batch (sink_queue.h) */
	uint64_t refused_value; /* SINK_ERR_TOO_BIG: the largest value of the refused call */
	uint64_t max_value;     /* sink_redis_max_value(), 0 while disconnected */
	bool record_read;       /* the slot record was read (first connect) */
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
	i = sq_hash(s, n) & (set->cap - 1);
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

/* ---- cluster hash slots ---- */

/* Cluster hash slot of stream s. */
static uint16_t stream_slot(struct sink_redis *s, const char *stream, size_t len)
{
	return sq_stream_slot(stream, len, &s->tag);
}

/* ---- lifecycle ---- */

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

static void route_new(void *ctx, struct sq_ent *e);

struct sink_redis *sink_redis_create(const struct relay_config *cf, struct metrics *m)
{
	struct sink_redis *s = calloc(1, sizeof(*s));

	if (!s)
		return NULL;
	s->cf = cf;
	s->m = m;
	s->use_functions = cf->redis_functions;
	s->trim = cf->trim && strcmp(cf->trim, "acked") == 0;
	sq_init(&s->q, cf, cf->redis.cluster);
	s->q.use_functions = &s->use_functions;
	s->q.sha = s->sha;
	s->q.on_push = route_new;
	s->q.ctx = s;
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
	ring_finish(&n->sendq);
	ring_finish(&n->waitq);
	ring_finish(&n->durable);
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
	sq_finish(&s->q);
	free(s->slot_node);
	buf_finish(&s->key);
	buf_finish(&s->tag);
	buf_finish(&s->wait_cmd);
	strset_finish(&s->streams);
	strset_finish(&s->trim_streams);
	free(s);
}

bool sink_redis_set_owner(struct sink_redis *s, const char *system_id, const char *dbname)
{
	int n = snprintf(s->q.owner, sizeof(s->q.owner), "%s/%s", system_id, dbname);

	return n > 0 && (size_t)n < sizeof(s->q.owner);
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

/* errmsg for an ACL refusal of what (see sink_error_noperm_text). */
static void noperm_message(struct sink_redis *s, const char *what, const char *fix, const char *msg)
{
	s->errkind = SINK_ERR_NOPERM;
	sink_error_noperm_text(s->errmsg, sizeof(s->errmsg), what, fix, msg);
}

/*
 * One line for an ACL refusal of a key of e's call: which key the call was
 * for (Redis does not say which of its keys it refused) and the patterns to
 * grant. No retry can get past it.
 */
static void key_noperm_message(struct sink_redis *s, const struct sq_ent *e, const char *msg)
{
	size_t klen = 0;
	const char *key = sq_arg(&s->q, e,
	                         e->kind == SQ_PUBLISH || e->kind == SQ_DEAD ? 3
	                         : e->kind == SQ_GROUP                       ? 2
	                                                                     : 1,
	                         &klen);

	s->errkind = SINK_ERR_NOPERM;
	if (!key)
		key = "?";
	if (e->kind == SQ_PUBLISH || e->kind == SQ_DEAD)
		snprintf(s->errmsg, sizeof(s->errmsg),
		         "%s to stream \"%.*s\" refused by the Redis ACL (%s): the relay's Redis "
		         "user may not access a key of this call (the stream, the dead-letter stream "
		         "\"%s\", or the \"%s:*\" watermark and dedup keys): add their patterns to "
		         "its ACL (~outbox:* ~outbox-relay:* in deploy/redis/users.acl, or your "
		         "stream names and --key-prefix)",
		         sq_kind_name(e->kind), (int)(klen < 200 ? klen : 200), key, msg,
		         s->cf->dead_letter_stream, s->cf->key_prefix);
	else
		snprintf(s->errmsg, sizeof(s->errmsg),
		         "%s of key \"%.*s\" refused by the Redis ACL (%s): add the key's pattern to "
		         "the relay's Redis user (~outbox:* ~outbox-relay:* in deploy/redis/users.acl, "
		         "or your stream names and --key-prefix)",
		         sq_kind_name(e->kind), (int)(klen < 200 ? klen : 200), key, msg);
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
	if (s->q.inflight_events == 0)
		return false; /* always admit one event, however large */
	return (int64_t)s->q.inflight_events >= s->cf->max_inflight_events ||
	       (int64_t)sink_redis_inflight_bytes(s) >= s->cf->max_inflight_bytes;
}

uint64_t sink_redis_acked_seq(const struct sink_redis *s)
{
	return s->q.acked_seq;
}

uint64_t sink_redis_last_seq(const struct sink_redis *s)
{
	return s->q.next_seq - 1;
}

uint64_t sink_redis_inflight_events(const struct sink_redis *s)
{
	return s->q.inflight_events;
}

uint64_t sink_redis_inflight_bytes(const struct sink_redis *s)
{
	return sq_inflight_bytes(&s->q);
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
	sq_requeue(&s->q);
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
		if (sink_error_noperm(r->str)) {
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

	sq_record_key(s->cf, &s->key);
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
	s->q.republish = true;
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
		const char *argv[] = {"FUNCTION", "LOAD", "REPLACE", sink_script_library};

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
	st = script_load(s, n, "SCRIPT LOAD", sink_script_eval_publish, s->sha);
	if (st == SINK_OK && s->trim)
		st = script_load(s, n, "SCRIPT LOAD (--trim acked)", sink_script_eval_trim, s->trim_sha);
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
	(void)sq_void_record(&s->q, seq);
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
static bool route(struct sink_redis *s, struct sq_ent *e)
{
	int idx = s->slot_node ? s->slot_node[e->slot] : 0;

	if (idx < 0 || idx >= s->nnodes || !s->nodes[idx].c) {
		snprintf(s->errmsg, sizeof(s->errmsg), "no connected master serves hash slot %u",
		         (unsigned)e->slot);
		s->errkind = SINK_ERR_CLUSTER;
		return false;
	}
	if (!sq_route(&s->q, e, &s->nodes[idx].sendq, idx, false)) {
		snprintf(s->errmsg, sizeof(s->errmsg), "out of memory");
		return false;
	}
	return true;
}

/* A command just queued: routed at once when connected (sink_queue's on_push). */
static void route_new(void *ctx, struct sq_ent *e)
{
	struct sink_redis *s = ctx;

	if (s->connected && !route(s, e))
		s->connected = false; /* no master for the slot right now: reconnect and route it */
}

enum sink_status sink_redis_connect(struct sink_redis *s)
{
	const struct redis_target *t = &s->cf->redis;
	bool first = s->stats.reconnects == 0 && s->q.acked_seq == 0 && s->q.inflight_events == 0;
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
	for (size_t i = 0; i < s->q.q.len; i++) {
		struct sq_ent *e = ring_at(&s->q.q, i);

		if (e->state == SQ_QUEUED && !route(s, e)) {
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
	return sq_close_batch(&s->q);
}

bool sink_redis_queue_record_read(struct sink_redis *s)
{
	return sq_queue_record(&s->q, SQ_GETREC, NULL, 0);
}

bool sink_redis_queue_record(struct sink_redis *s, lsn_t confirmed, lsn_t commit_lsn,
                             int64_t commit_us)
{
	char val[256];
	int n = snprintf(val, sizeof(val), "%016llX %016llX %lld %s", (unsigned long long)confirmed,
	                 (unsigned long long)commit_lsn, (long long)commit_us, s->q.owner);

	return n > 0 && (size_t)n < sizeof(val) && sq_queue_record(&s->q, SQ_RECORD, val, (size_t)n);
}

bool sink_redis_publish(struct sink_redis *s, const struct event *ev, bool dead_letter)
{
	return sink_redis_publish_held(s, ev, dead_letter, NULL);
}

bool sink_redis_publish_held(struct sink_redis *s, const struct event *ev, bool dead_letter,
                             struct sink_hold *hold)
{
	bool large = hold && hold->p && !dead_letter && sq_has_large_value(ev);

	if (sq_batch_breaks(&s->q, ev, dead_letter, large) && !sq_close_batch(&s->q))
		return false;
	if (!dead_letter && s->cf->ngroups > 0) {
		int added = strset_add(&s->streams, ev->stream, ev->stream_len);

		if (added < 0 || (added == 1 && (!sq_close_batch(&s->q) ||
		                                 !sq_queue_groups(&s->q, ev->stream, ev->stream_len))))
			return false;
	}
	if (!s->q.b_open) {
		uint32_t id =
		    !dead_letter && s->m ? metrics_stream_id(s->m, ev->stream, ev->stream_len) : 0;

		if (!sq_batch_open(&s->q, ev, dead_letter, id))
			return false;
		if (s->trim && !dead_letter && strset_add(&s->trim_streams, ev->stream, ev->stream_len) < 0)
			return false;
	}
	return sq_batch_add(&s->q, ev, dead_letter, large ? hold : NULL);
}

/* Count one event's result from a publish reply (0 replay, 1 duplicate, entry id). */
static void count_result(struct sink_redis *s, const struct sq_ent *e, const redisReply *r,
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
	} else if (e->kind == SQ_DEAD) {
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

/* "ASK <slot> <host>:<port>": resend e to that master after ASKING. */
static bool follow_ask(struct sink_redis *s, struct sq_ent *e, const char *msg)
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
	return sq_route(&s->q, e, &s->nodes[idx].sendq, idx, true);
}

/*
 * The function refused e because its stream's watermark is behind where this
 * relay's previous call for the stream should have left it. While that call
 * is not done (rejected, or not yet run), resending everything in order
 * fixes it. When it is done, Redis acknowledged writes it no longer has.
 */
static bool refused_behind(struct sink_redis *s, const struct sq_ent *e, const char *msg)
{
	if (sq_prev_pending(&s->q, e)) {
		snprintf(s->errmsg, sizeof(s->errmsg),
		         "%s refused (%s): an earlier call for the same stream did not run; sending "
		         "both again in order",
		         sq_kind_name(e->kind), msg);
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

	if (r->type == REDIS_REPLY_ERROR && sink_error_noperm(r->str)) {
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

/* The reply to WAIT / WAITAOF: every command in n->durable is done, or nothing is. */
static bool wait_reply(struct sink_redis *s, struct node *n, const redisReply *r)
{
	bool aof = s->cf->wait_aof && strcmp(s->cf->wait_aof, "none") != 0;
	long long want = aof ? 1 : s->cf->wait_replicas, got = -1, got_repl = -1;

	if (r->type == REDIS_REPLY_ERROR && sink_error_noperm(r->str)) {
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
	sq_wait_done(&s->q, &n->durable);
	return true;
}

/* The reply to a mark (see sink_queue.h): not a command of the ring. */
static bool mark_reply(struct sink_redis *s, struct node *n, uint64_t what, const redisReply *r)
{
	if (what == SQ_INFO_MARK) {
		n->info_sent = false;
		if (r->type == REDIS_REPLY_STRING)
			read_memory(n, r->str);
		return true; /* only for the metrics: an error changes nothing */
	}
	if (what == SQ_TRIM_MARK)
		return trim_reply(s, r);
	if (what == SQ_ASKING_MARK) {
		if (r->type == REDIS_REPLY_ERROR && sink_error_noperm(r->str)) {
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
	return wait_reply(s, n, r);
}

/* An error reply to e: why, in errkind and errmsg (always false: the connection fails). */
static bool error_reply(struct sink_redis *s, const struct sq_ent *e, const char *msg)
{
	s->stats.error_replies++;
	s->errkind = sink_error_classify(msg);
	if (strstr(msg, "Protocol error") && e->max_value >= 1024 * 1024) {
		/* The server drops the connection: the same call would fail forever. */
		s->errkind = SINK_ERR_TOO_BIG;
		s->refused_value = e->max_value;
		snprintf(s->errmsg, sizeof(s->errmsg),
		         "%s refused (%s): a value of %zu bytes in it is over the server's "
		         "proto-max-bulk-len",
		         sq_kind_name(e->kind), msg, e->max_value);
		return false;
	}
	if (s->errkind == SINK_ERR_ORDER)
		return refused_behind(s, e, msg);
	if (s->errkind == SINK_ERR_NOPERM && sink_error_key_refusal(msg)) {
		key_noperm_message(s, e, msg);
		return false;
	}
	if (s->errkind == SINK_ERR_NOPERM) {
		noperm_message(s, sq_kind_name(e->kind),
		               e->kind == SQ_GROUP    ? "xgroup|create"
		               : e->kind == SQ_RECORD ? "set"
		               : e->kind == SQ_GETREC ? "get"
		               : s->use_functions     ? "fcall"
		                                      : "evalsha",
		               msg);
		return false;
	}
	if (s->errkind == SINK_ERR_FOREIGN)
		snprintf(s->errmsg, sizeof(s->errmsg),
		         "%s refused: the watermark %s, not to this database (%s): another "
		         "database publishes through this Redis with the same --slot and "
		         "--key-prefix; give this relay its own --key-prefix or --slot (if this "
		         "database replaced that one on purpose, delete that database's "
		         "\"%s:wm:*\" keys)",
		         sq_kind_name(e->kind), msg + strlen("OUTBOX_FOREIGN "), s->q.owner,
		         s->cf->key_prefix);
	else if (s->errkind == SINK_ERR_WRONGTYPE)
		snprintf(s->errmsg, sizeof(s->errmsg),
		         "%s failed: %s (a watermark, dedup or dead-letter key the relay writes "
		         "holds another type: rename or delete it; the relay retries until then)",
		         sq_kind_name(e->kind), msg);
	else
		snprintf(s->errmsg, sizeof(s->errmsg), "%s failed: %s", sq_kind_name(e->kind), msg);
	return false;
}

/* A slot record read answered (nil or a record): the record as Redis has it now. */
static bool record_reply(struct sink_redis *s, struct sq_ent *e, const redisReply *r)
{
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
	e->state = SQ_DONE;
	return true;
}

/* Match one reply against what n's oldest outstanding request was. */
static bool handle_reply(struct sink_redis *s, struct node *n, redisReply *r)
{
	uint64_t what = 0;
	struct sq_ent *e;
	enum sq_answer a;

	if (n->waitq.len == 0) {
		snprintf(s->errmsg, sizeof(s->errmsg),
		         "unexpected reply from Redis with nothing in flight");
		return false;
	}
	a = sq_take_reply(&s->q, &n->waitq, &n->durable, s->wait_mode, r, &what, &e);
	n->wait_since_us = time_mono_us();
	switch (a) {
	case SQ_A_MARK:
		return mark_reply(s, n, what, r);
	case SQ_A_UNKNOWN:
		snprintf(s->errmsg, sizeof(s->errmsg), "reply for an unknown command");
		return false;
	case SQ_A_NOMEM:
		snprintf(s->errmsg, sizeof(s->errmsg), "out of memory");
		return false;
	case SQ_A_ASK:
		if (follow_ask(s, e, r->str)) {
			s->stats.error_replies++;
			s->stats.ask_redirects++;
			if (s->m)
				atomic_fetch_add_explicit(&s->m->redis_errors[SINK_ERR_CLUSTER], 1,
				                          memory_order_relaxed);
			return true;
		}
		return error_reply(s, e, r->str);
	case SQ_A_ERROR:
		return error_reply(s, e, r->str);
	case SQ_A_MALFORMED:
		if (e->kind == SQ_RECORD || e->kind == SQ_GETREC)
			snprintf(s->errmsg, sizeof(s->errmsg), "unexpected reply to %s: type %d",
			         sq_kind_name(e->kind), r->type);
		else
			snprintf(s->errmsg, sizeof(s->errmsg),
			         "unexpected reply to %s: type %d with %zu element(s) for %u event(s)",
			         sq_kind_name(e->kind), r->type,
			         r->type == REDIS_REPLY_ARRAY ? (size_t)r->elements : (size_t)0, e->nevents);
		return false;
	case SQ_A_READ:
		return record_reply(s, e, r);
	case SQ_A_EXECUTED:
		break;
	}
	if (e->kind == SQ_PUBLISH || e->kind == SQ_DEAD) {
		int64_t now = time_now_us();

		for (size_t i = 0; i < r->elements; i++)
			count_result(s, e, r->element[i], now);
	}
	return true;
}

static bool stage(struct sink_redis *s, struct node *n)
{
	buf_reset(&n->wbuf);
	n->wsent = 0;
	if (!sq_stage(&s->q, &n->sendq, &n->waitq, &n->wbuf, WBUF_FILL, &n->part_seq, &n->part_off,
	              &n->staged_publish))
		return false;
	if (n->part_seq)
		return !n->wbuf.failed; /* WAIT and INFO only between commands */
	if (s->wait_mode && n->staged_publish) {
		buf_append(&n->wbuf, s->wait_cmd.data, s->wait_cmd.len);
		if (!ring_push_u64(&n->waitq, SQ_WAIT_MARK))
			return false;
		n->staged_publish = false;
	}
	if (n->info_due) {
		static const char info[] = "*2\r\n$4\r\nINFO\r\n$6\r\nmemory\r\n";

		buf_append(&n->wbuf, info, sizeof(info) - 1);
		if (!ring_push_u64(&n->waitq, SQ_INFO_MARK))
			return false;
		n->info_due = false;
		n->info_sent = true;
	}
	if (n->trimq_n) {
		buf_append(&n->wbuf, n->trimq.data, n->trimq.len);
		for (; n->trimq_n > 0; n->trimq_n--)
			if (!ring_push_u64(&n->waitq, SQ_TRIM_MARK))
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
		sq_advance(&s->q);
		/* Replies came back: send what accumulated meanwhile. */
		if (s->q.b_open && calls_pending(s) < BATCH_PIPELINE_DEPTH && !sq_close_batch(&s->q)) {
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
	sq_advance(&s->q);
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
		resp_str(&n->trimq, s->use_functions ? SINK_SCRIPT_TRIM : s->trim_sha);
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
