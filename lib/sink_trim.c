/*
 * sink_trim.c - --trim acked rounds, the sink's part of the relay's
 * housekeeping step: one outbox_relay_trim call per stream published to, on
 * the master of its slot, removing the entries no consumer group still
 * needs; the round's results for the relay's log and metrics.
 *
 * A trim call is a command like any other: queued into the sink's command
 * ring (sq_queue_trim), routed to the master of its stream's slot, resent
 * after a lost connection, answered in order (sink_reply.c hands the answer
 * here). A failed trim call is tried again the next round; only an ACL
 * refusal of --trim acked is fatal, like any NOPERM.
 */
#include "sink_redis.h"

#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sink_int.h"

/* The answer to one --trim acked call: entries removed, or why not. */
bool sink_trim_reply(struct sink_redis *s, const redisReply *r)
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

int sink_redis_trim_start(struct sink_redis *s)
{
	int queued = 0;

	if (!s->trim || !s->connected || s->trim_pending > 0 || s->trim_done)
		return 0;
	s->trim_res = (struct sink_trim_result){0};
	for (size_t i = 0; i < s->trim_streams.cap; i++) {
		const char *stream = s->trim_streams.slots[i];
		size_t len = stream ? strlen(stream) : 0;
		int idx;

		if (!stream)
			continue;
		idx = s->slot_node ? s->slot_node[sink_stream_slot(s, stream, len)] : 0;
		if (idx < 0 || idx >= s->nnodes || !s->nodes[idx].c)
			continue; /* no master for the slot now: next round */
		/* Into the command ring like any command: routed, resent, answered in order. */
		if (!sq_queue_trim(&s->q, stream, len))
			return -1;
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
