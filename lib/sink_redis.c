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
 *
 * This file: the sink's life, publishing (batches through sink_queue.c),
 * routing by hash slot, staging each connection's write round and the
 * non-blocking reads and writes, the stall check. Connecting is
 * sink_setup.c, the meaning of each reply sink_reply.c, --trim acked and
 * INFO memory polling sink_housekeeping.c (their shared state: sink_int.h).
 */
#include "sink_redis.h"

#include <errno.h>
#include <hiredis/hiredis.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "sink_int.h"

#define WBUF_FILL (256 * 1024) /* bytes staged per write round */

/* Calls awaiting replies below which an open batch is sent at once. */
#define BATCH_PIPELINE_DEPTH 2

/* ---- small string set (streams already given their consumer groups) ---- */

void sink_strset_clear(struct strset *set)
{
	for (size_t i = 0; i < set->cap; i++) {
		free(set->slots[i]);
		set->slots[i] = NULL;
	}
	set->used = 0;
}

static void strset_finish(struct strset *set)
{
	sink_strset_clear(set);
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
			sink_strset_clear(set);
		}
	}
	i = fnv1a64(s, n) & (set->cap - 1);
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
	s->q.trim_sha = s->trim_sha;
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

void sink_node_close(struct node *n)
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
}

/* "host:port" or the unix socket path, for messages. */
const char *sink_node_addr(const struct node *n, char *buf, size_t len)
{
	if (n->unix_path)
		snprintf(buf, len, "%s", n->unix_path);
	else
		snprintf(buf, len, "%s:%d", n->host, n->port);
	return buf;
}

void sink_node_finish(struct node *n)
{
	sink_node_close(n);
	ring_finish(&n->sendq);
	ring_finish(&n->waitq);
	ring_finish(&n->durable);
	buf_finish(&n->wbuf);
	free(n->host);
	free(n->unix_path);
	memset(n, 0, sizeof(*n));
}

void sink_redis_destroy(struct sink_redis *s)
{
	if (!s)
		return;
	for (int i = 0; i < s->nnodes; i++)
		sink_node_finish(&s->nodes[i]);
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

void sink_redis_backlog_start(struct sink_redis *s, lsn_t from, lsn_t end)
{
	sq_backlog_start(&s->q, from, end);
}

void sink_redis_backlog_at(struct sink_redis *s, lsn_t at)
{
	sq_backlog_at(&s->q, at);
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
	if (n->info_due && !n->w_wants_read && n->wsent == n->wbuf.len)
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
		sink_node_close(&s->nodes[i]);
	/* Everything not done is routed and sent again after the next connect. */
	sq_requeue(&s->q);
	s->max_value = 0;
	s->connected = false;
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

/* Route e to the connection of its slot and queue it there for writing. */
bool sink_route(struct sink_redis *s, struct sq_ent *e)
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

	if (s->connected && !sink_route(s, e))
		s->connected = false; /* no master for the slot right now: reconnect and route it */
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
	struct slot_record rec = {confirmed, commit_lsn, commit_us, ""};
	char val[SLOT_RECORD_MAX];
	size_t n;

	if (strlen(s->q.owner) >= sizeof(rec.owner))
		return false;
	memcpy(rec.owner, s->q.owner, strlen(s->q.owner) + 1);
	n = slot_record_format(&rec, val, sizeof(val));
	return n > 0 && sq_queue_record(&s->q, SQ_RECORD, val, n);
}

bool sink_redis_publish(struct sink_redis *s, const struct event *ev, bool dead_letter)
{
	return sink_redis_publish_held(s, ev, dead_letter, NULL);
}

bool sink_redis_publish_held(struct sink_redis *s, const struct event *ev, bool dead_letter,
                             struct sink_hold *hold)
{
	bool large = hold && hold->p && !dead_letter && sq_has_held_value(ev, hold);

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

static bool stage(struct sink_redis *s, struct node *n)
{
	buf_reset(&n->wbuf);
	n->wsent = 0;
	if (!sq_stage(&s->q, &n->sendq, &n->waitq, &n->wbuf, WBUF_FILL, &n->part_seq, &n->part_off,
	              &n->staged_publish))
		return false;
	if (n->part_seq)
		return !n->wbuf.failed; /* WAIT and INFO (connection probes) only between commands */
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
	return !n->wbuf.failed;
}

static bool node_write(struct sink_redis *s, struct node *n)
{
	const struct redis_conn rc = sink_node_conn(n);

	for (;;) {
		ssize_t w;

		if (n->wsent == n->wbuf.len) {
			bool was_idle = n->waitq.len == 0;

			if (n->sendq.len == 0 && !n->info_due && !n->part_seq)
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
	const struct redis_conn rc = sink_node_conn(n);

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
			ok = sink_handle_reply(s, n, reply);
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
			         s->cf->redis_timeout_ms, sink_node_addr(n, a, sizeof(a)));
			s->errkind = SINK_ERR_TIMEOUT;
			return false;
		}
	}
	return true;
}
