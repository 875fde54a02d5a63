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
 * routing by hash slot, group commit. Each file of the sink owns one part
 * of its data (sink_int.h lists them).
 */
#include "sink_redis.h"

#include <hiredis/hiredis.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "sink_int.h"

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
	s->drec_budget.limit = (size_t)cf->dedup_record;
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

void sink_redis_set_timeline(struct sink_redis *s, uint32_t tli)
{
	s->tli = tli;
}

void sink_redis_backlog_start(struct sink_redis *s, lsn_t from, lsn_t end)
{
	sq_backlog_start(&s->q, from, end);
}

void sink_redis_backlog_at(struct sink_redis *s, lsn_t at)
{
	sq_backlog_at(&s->q, at);
}

void sink_redis_held(struct sink_redis *s, uint64_t total)
{
	sq_held(&s->q, total);
}

void sink_redis_held_next(struct sink_redis *s)
{
	sq_held_next(&s->q);
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

/*
 * Catching up: the open batch's first event committed more than
 * SINK_CATCHUP_LAG_US ago (by the server's commit timestamp), so the relay
 * reads a backlog. Then the batch waits for more events, up to
 * SINK_COALESCE_US from its opening (or until it is full: SQ_BATCH_MAX_*),
 * before it goes to an idle Redis. A backlog then goes out in full batches,
 * each group paying its reads, WATCH and MULTI/EXEC once for up to 128
 * events, not for the few the relay decoded while Redis answered the last
 * one. A relay that is caught up sends every batch at once, unless --linger
 * asks it to wait that long (then at a steady rate too a group holds the
 * events of that long, each paying a share of its round trips).
 */
static bool catching_up(const struct sink_redis *s)
{
	return s->q.b_commit_us > 0 && time_now_us() - s->q.b_commit_us > SINK_CATCHUP_LAG_US;
}

/*
 * --linger: an event that opens a batch outside a window opens a window of
 * that length. Until it ends, the open batch stays open and the calls closed
 * meanwhile (another stream's events close a batch) are not written either,
 * so they all go out together when it ends: one group for their reads and
 * one for their write. A group already under way goes on (its reads, its
 * write). The window ends early when the in-flight window is full or the
 * relay stops (a forced flush).
 */
bool sink_linger_gate(const struct sink_redis *s)
{
	return s->linger_until_us > 0 && time_mono_us() < s->linger_until_us && !sink_redis_full(s);
}

bool sink_linger_close(struct sink_redis *s)
{
	if (s->linger_until_us == 0 || sink_linger_gate(s))
		return true;
	s->linger_until_us = 0;
	return !s->q.b_open || sq_close_batch(&s->q);
}

/* Until when the open batch may wait for more events (mono µs; 0: not at all). */
static int64_t hold_until_us(const struct sink_redis *s)
{
	int64_t until = sink_linger_gate(s) ? s->linger_until_us : 0;

	if (catching_up(s) && s->q.b_open_us + SINK_COALESCE_US > until)
		until = s->q.b_open_us + SINK_COALESCE_US;
	return until;
}

static bool coalescing(const struct sink_redis *s)
{
	return s->q.b_open && !s->q.b_dead && !sink_redis_full(s) && time_mono_us() < hold_until_us(s);
}

/* coalescing(), counted once per batch that waits while catching up (catchup_waits). */
static bool waits(struct sink_redis *s)
{
	if (!coalescing(s))
		return false;
	if (!s->q.b_waited) {
		s->q.b_waited = true;
		if (catching_up(s))
			s->stats.catchup_waits++;
	}
	return true;
}

/* Whether the open batch keeps growing: Redis is busy (group commit) or it waits (coalescing). */
static bool keeps_open(struct sink_redis *s)
{
	return calls_pending(s) >= BATCH_PIPELINE_DEPTH || waits(s);
}

bool sink_redis_owes_replies(const struct sink_redis *s)
{
	return calls_pending(s) > 0 && !sink_linger_gate(s);
}

int64_t sink_redis_hold_left_us(const struct sink_redis *s)
{
	int64_t now = time_mono_us(), left = 0;

	if (!s->connected)
		return 0;
	if (sink_linger_gate(s))
		left = s->linger_until_us - now;
	/* hold_until_us() is never before the window's end */
	if (calls_pending(s) < BATCH_PIPELINE_DEPTH && coalescing(s))
		left = hold_until_us(s) - now;
	return left;
}

bool sink_redis_flush(struct sink_redis *s, bool force)
{
	/*
	 * Group commit: while earlier calls still await their replies, Redis is
	 * busy anyway, so the open batch keeps growing and goes out when a reply
	 * comes back (sink_redis_io) or when it is full. An idle pipeline sends
	 * it at once, so this adds no latency at low load.
	 */
	if (force)
		s->linger_until_us = 0;
	if (!force && s->connected && keeps_open(s))
		return true;
	return sq_close_batch(&s->q);
}

bool sink_send_grown_batch(struct sink_redis *s)
{
	return !s->q.b_open || keeps_open(s) || sq_close_batch(&s->q);
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
	/* A window over but not yet closed (sink_redis_io) lets what it held go first. */
	if (!s->q.b_open && s->cf->linger_ms > 0 && s->linger_until_us == 0) {
		s->linger_until_us = time_mono_us() + (int64_t)s->cf->linger_ms * 1000;
		s->stats.linger_windows++;
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
