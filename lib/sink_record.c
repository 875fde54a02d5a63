/*
 * sink_record.c - the slot record as the sink holds it (slot_record.h has
 * its key, value and the refusal rule): read once on the first connect, read
 * again and written through the command ring in sequence with the events,
 * the answers to those commands, and what the relay asks of it.
 */
#include "sink_redis.h"

#include <hiredis/hiredis.h>
#include <stdio.h>
#include <string.h>

#include "sink_int.h"

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

bool sink_redis_queue_record_read(struct sink_redis *s)
{
	return sq_queue_record(&s->q, SQ_GETREC, NULL, 0);
}

bool sink_redis_queue_record(struct sink_redis *s, lsn_t confirmed, lsn_t commit_lsn,
                             int64_t commit_us)
{
	struct slot_record rec = {
	    .confirmed = confirmed, .commit_lsn = commit_lsn, .commit_us = commit_us, .tli = s->tli};
	char val[SLOT_RECORD_MAX];
	size_t n;

	_Static_assert(sizeof(rec.owner) == sizeof(s->q.owner), "the queue's owner is the record's");
	memcpy(rec.owner, s->q.owner, sizeof(rec.owner));
	n = slot_record_format(&rec, val, sizeof(val));
	return n > 0 && sq_queue_record(&s->q, SQ_RECORD, val, n);
}

/* A slot record read answered (nil or a record): the record as Redis has it now. */
bool sink_record_reply(struct sink_redis *s, struct sq_ent *e, const redisReply *r)
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

/*
 * On the first connect, on the node that serves its key: read the slot
 * record (sink_redis_record). A value that is not a record is an error the
 * relay cannot decide on: permanent, naming the key.
 */
enum sink_status sink_record_read_at_connect(struct sink_redis *s, struct node *n)
{
	enum sink_status st = SINK_OK;
	const char *argv[2] = {"GET", NULL};
	char what[260];
	redisReply *r;

	slot_record_key(&s->key, s->cf->key_prefix, s->cf->slot);
	if (s->record_read || s->key.failed ||
	    (s->slot_node &&
	     s->slot_node[sink_stream_slot(s, s->key.data, s->key.len)] != n - s->nodes))
		return s->key.failed ? SINK_RETRY : SINK_OK;
	argv[1] = s->key.data;
	snprintf(what, sizeof(what), "GET of the slot record \"%.200s\"", s->key.data);
	r = sink_setup_command(s, n, &st, what, 2, argv);
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
