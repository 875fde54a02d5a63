/*
 * sink_reply.c - what each Redis reply means for the sink.
 *
 * Replies arrive in order on each connection; sink_queue.c says which
 * command (or mark: WAIT, INFO, ASKING, a --trim acked call) each one
 * answers. Here: a publish's result per event (new entry, replay, duplicate,
 * dead-lettered), WAIT / WAITAOF counted against --wait-replicas and
 * --wait-aof, ASK followed, a slot record read, and for an error reply its
 * kind (sink_error.c) and the one-line message that says what to fix. Any
 * error reply drops the connections: every command not done is sent again.
 */
#include "sink_redis.h"

#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sink_int.h"

/* errmsg for an ACL refusal of what (see sink_error_noperm_text). */
void sink_noperm_message(struct sink_redis *s, const char *what, const char *fix, const char *msg)
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

/* The reply to WAIT / WAITAOF: every command in n->durable is done, or nothing is. */
static bool wait_reply(struct sink_redis *s, struct node *n, const redisReply *r)
{
	bool aof = s->cf->wait_aof && strcmp(s->cf->wait_aof, "none") != 0;
	long long want = aof ? 1 : s->cf->wait_replicas, got = -1, got_repl = -1;

	if (r->type == REDIS_REPLY_ERROR && sink_error_noperm(r->str)) {
		/* Not a shortfall: no retry gets past the ACL. */
		sink_noperm_message(s, aof ? "WAITAOF" : "WAIT", aof ? "waitaof" : "wait", r->str);
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
	if (what == SQ_NATIVE_MARK)
		return sink_native_reply(s, n, r);
	if (what == SQ_UNWATCH_MARK)
		return true; /* the function call after it answers for the batch */
	if (what == SQ_INFO_MARK) {
		n->info_sent = false;
		if (r->type == REDIS_REPLY_STRING)
			sink_read_memory(n, r->str);
		return true; /* only for the metrics: an error changes nothing */
	}
	if (what == SQ_ASKING_MARK) {
		if (r->type == REDIS_REPLY_ERROR && sink_error_noperm(r->str)) {
			sink_noperm_message(s, "ASKING", "asking", r->str);
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
		sink_noperm_message(s, sq_kind_name(e->kind),
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

bool sink_publish_error(struct sink_redis *s, const struct sq_ent *e, const char *msg)
{
	return error_reply(s, e, msg);
}

bool sink_follow_ask(struct sink_redis *s, struct sq_ent *e, const char *msg)
{
	if (follow_ask(s, e, msg)) {
		s->stats.error_replies++;
		s->stats.ask_redirects++;
		if (s->m)
			atomic_fetch_add_explicit(&s->m->redis_errors[SINK_ERR_CLUSTER], 1,
			                          memory_order_relaxed);
		return true;
	}
	return error_reply(s, e, msg);
}

bool sink_publish_done(struct sink_redis *s, struct node *n, struct sq_ent *e, const redisReply *r)
{
	int64_t now = time_now_us();

	if (!sq_executed(&n->durable, s->wait_mode, e)) {
		snprintf(s->errmsg, sizeof(s->errmsg), "out of memory");
		return false;
	}
	for (size_t i = 0; i < r->elements; i++)
		count_result(s, e, r->element[i], now);
	return true;
}

/* Match one reply against what n's oldest outstanding request was. */
bool sink_handle_reply(struct sink_redis *s, struct node *n, redisReply *r)
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
		return sink_follow_ask(s, e, r->str);
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
		return sink_record_reply(s, e, r);
	case SQ_A_ANSWERED:
		return sink_trim_reply(s, r);
	case SQ_A_EXECUTED:
		break;
	}
	if (e->kind == SQ_PUBLISH || e->kind == SQ_DEAD) {
		int64_t now = time_now_us();

		s->stats.function_batches++;
		if (s->m)
			atomic_fetch_add_explicit(&s->m->batches_function, 1, memory_order_relaxed);

		for (size_t i = 0; i < r->elements; i++)
			count_result(s, e, r->element[i], now);
	}
	return true;
}
