/*
 * consumer_read.c - outbox-consume's reads: this consumer's own pending
 * entries (XREADGROUP ... 0), entries claimed from others (XAUTOCLAIM), new
 * entries (XREADGROUP ... BLOCK ... >, or non-blocking rounds in a Redis
 * Cluster), each batch printed as JSON lines (consumer_fmt_line()), stdout
 * flushed, and only then acknowledged (XACK, one per batch and stream):
 * at-least-once. A missing consumer group is an error for a --stream, a
 * skipped stream for a --stream-pattern match, or created with
 * --create-group. --count is never overshot: no read asks for more entries
 * than are left to print.
 */
#include "consumer_int.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "consumer_handler.h"
#include "exitcode.h"
#include "log.h"
#include "lsn.h"

/* Redis Cluster: the longest pause between two rounds of non-blocking reads
 * when the last round found nothing (--block-timeout caps it too). */
#define CLUSTER_POLL_MS 100

/* Longest stream entry id: two 20-digit numbers and a dash, plus slack. */
#define ENTRY_ID_MAX 64

static bool is_nogroup(const redisReply *r)
{
	return r->type == REDIS_REPLY_ERROR && strncmp(r->str, "NOGROUP", 7) == 0;
}

/* The group is missing on s (or s itself is). */
static enum step no_group(struct consumer *c, struct cstream *s, const char *msg)
{
	const struct consumer_config *cf = c->cf;

	s->live = false;
	if (s->listed && !cf->create_group)
		return consumer_fail(c, STEP_FATAL, EXIT_REDIS_SETUP,
		                     "consumer group \"%s\" does not exist on stream \"%s\" (%s); create "
		                     "it (outbox-relay --group %s does) or pass --create-group",
		                     cf->group, s->key, msg, cf->group);
	if (cf->create_group)
		return consumer_fail(c, STEP_RETRY, 0,
		                     "consumer group \"%s\" on stream \"%s\" vanished right after it was "
		                     "created (%s)",
		                     cf->group, s->key, msg);
	if (!s->warned)
		log_warn("stream \"%s\" has no consumer group \"%s\", skipping it; pass "
		         "--create-group to create it",
		         s->key, cf->group);
	s->warned = true;
	s->skipped = true;
	return STEP_OK;
}

/* How many entries to ask for: --batch, but never past --count. */
static uint64_t want(const struct consumer *c)
{
	uint64_t batch = (uint64_t)c->cf->batch, left;

	if (c->cf->count == 0)
		return batch;
	left = (uint64_t)c->cf->count - c->printed;
	return left < batch ? left : batch;
}

static bool grow_scratch(struct consumer *c, size_t nfields, size_t nack)
{
	if (nfields > c->capfields) {
		struct consumer_field *f = realloc(c->fields, nfields * sizeof(*f));

		if (!f)
			return false;
		c->fields = f;
		c->capfields = nfields;
	}
	if (nack > c->capack) {
		const char **a = realloc(c->ack_argv, nack * sizeof(*a));
		size_t *l;

		if (!a)
			return false;
		c->ack_argv = a;
		l = realloc(c->ack_lens, nack * sizeof(*l));
		if (!l)
			return false;
		c->ack_lens = l;
		c->capack = nack;
	}
	return true;
}

/* XACK the ids collected in c->ack_argv[3..3+n). */
static enum step xack(struct consumer *c, const char *key, size_t n)
{
	enum step st = STEP_OK;
	redisReply *r;

	c->ack_argv[0] = "XACK";
	c->ack_lens[0] = 4;
	c->ack_argv[1] = key;
	c->ack_lens[1] = strlen(key);
	c->ack_argv[2] = c->cf->group;
	c->ack_lens[2] = strlen(c->cf->group);
	r = consumer_command(c, key, (int)(n + 3), c->ack_argv, c->ack_lens, CMD_TIMEOUT_MS, false,
	                     &st);
	if (!r)
		return st;
	if (r->type == REDIS_REPLY_ERROR)
		st = consumer_error_reply(c, "XACK", key, r->str);
	else if (r->type != REDIS_REPLY_INTEGER)
		st = consumer_fail(c, STEP_RETRY, 0, "unexpected reply to XACK on stream \"%s\"", key);
	freeReplyObject(r);
	return st;
}

/*
 * How many times the group delivered entry id of key (XPENDING's extended
 * form); 0 when it is not pending or the reply says nothing.
 */
static int64_t deliveries(struct consumer *c, const char *key, const char *id, enum step *st)
{
	const char *argv[7] = {"XPENDING", key, c->cf->group, id, id, "1", c->cf->consumer};
	redisReply *r = consumer_command(c, key, 7, argv, NULL, CMD_TIMEOUT_MS, false, st);
	int64_t n = 0;

	if (!r)
		return -1;
	if (consumer_reply_is_array(r) && r->elements == 1 && consumer_reply_is_array(r->element[0]) &&
	    r->element[0]->elements == 4 && r->element[0]->element[3]->type == REDIS_REPLY_INTEGER)
		n = r->element[0]->element[3]->integer;
	freeReplyObject(r);
	return n;
}

/*
 * Move entry id of key (fields kv) to its poison stream and acknowledge it,
 * in one script: it is never acknowledged without being moved, nor moved
 * twice (a retry after a lost reply finds it acknowledged: XACK 0, no XADD).
 */
static enum step poison(struct consumer *c, const char *key, const redisReply *id,
                        const redisReply *kv, int64_t delivered, const char *why)
{
	static const char script[] =
	    "if redis.call('XACK', KEYS[1], ARGV[1], ARGV[2]) == 0 then return 0 end "
	    "redis.call('XADD', KEYS[2], '*', unpack(ARGV, 3)) return 1";
	char pkey[1024], ndel[24];
	size_t n = 7 + 12 + kv->elements, k = 0;
	const char **argv = calloc(n, sizeof(*argv));
	size_t *lens = calloc(n, sizeof(*lens));
	enum step st = STEP_OK;
	redisReply *r;

	if (!argv || !lens) {
		free(argv);
		free(lens);
		return consumer_fail(c, STEP_FATAL, EXIT_FAILURE_RUNTIME, "out of memory");
	}
	if (!consumer_poison_key(c->cf->poison_prefix, key, pkey, sizeof(pkey))) {
		free(argv);
		free(lens);
		return consumer_fail(c, STEP_FATAL, EXIT_USAGE,
		                     "the poison stream name of %s is too long: shorten --poison-prefix",
		                     key);
	}
	(void)snprintf(ndel, sizeof(ndel), "%" PRId64, delivered);
#define ARG(p, l) (argv[k] = (p), lens[k++] = (l))
	ARG("EVAL", 4);
	ARG(script, sizeof(script) - 1);
	ARG("2", 1);
	ARG(key, strlen(key));
	ARG(pkey, strlen(pkey));
	ARG(c->cf->group, strlen(c->cf->group));
	ARG(id->str, id->len);
	ARG("poison_stream", 13);
	ARG(key, strlen(key));
	ARG("poison_entry_id", 15);
	ARG(id->str, id->len);
	ARG("poison_group", 12);
	ARG(c->cf->group, strlen(c->cf->group));
	ARG("poison_consumer", 15);
	ARG(c->cf->consumer, strlen(c->cf->consumer));
	ARG("poison_deliveries", 17);
	ARG(ndel, strlen(ndel));
	ARG("poison_error", 12);
	ARG(why, strlen(why));
	for (size_t j = 0; j < kv->elements; j++)
		ARG(kv->element[j]->str, kv->element[j]->len);
#undef ARG
	r = consumer_command(c, key, (int)k, argv, lens, CMD_TIMEOUT_MS, false, &st);
	free(argv);
	free(lens);
	if (!r)
		return st;
	if (r->type == REDIS_REPLY_ERROR)
		st = consumer_error_reply(c, "EVAL (moving a poison entry)", key, r->str);
	else if (r->type == REDIS_REPLY_INTEGER && r->integer == 1) {
		c->poisoned++;
		consumer_metrics_count(c->metrics, key, CONSUMER_EV_POISONED, 1);
		log_warn("entry %s of stream \"%s\" failed %" PRId64 " deliver%s (last: %s): moved to "
		         "\"%s\" and acknowledged",
		         id->str, key, delivered, delivered == 1 ? "y" : "ies", why, pkey);
	}
	freeReplyObject(r);
	return st;
}

/*
 * Worker mode: one entry to the handler. *ack is set when it may be
 * acknowledged with the batch; a poison entry is moved and acknowledged here.
 * redelivered: read again (own pending, claimed), whose earlier deliveries
 * may already have reached --max-deliveries.
 */
static enum step handle_entry(struct consumer *c, const char *key, const redisReply *id,
                              const redisReply *kv, const char *line, size_t linelen,
                              bool redelivered, bool *ack)
{
	int64_t max = c->cf->max_deliveries, n = 1;
	enum step st = STEP_OK;
	enum handler_result hr;
	int64_t t0;
	char why[512];

	*ack = false;
	if (max > 0 && redelivered) {
		n = deliveries(c, key, id->str, &st);
		if (n < 0)
			return st;
		if (n - 1 >= max) /* this delivery is past the limit: the earlier ones all failed */
			return poison(c, key, id, kv, n - 1, "delivered without success (consumers died?)");
	}
	t0 = time_mono_us();
	hr = handler_run(c->handler, line, linelen, why, sizeof(why));
	consumer_metrics_observe_handler(c->metrics, time_mono_us() - t0);
	consumer_metrics_heartbeat(c->metrics, c->connected);
	if (hr == HANDLER_DONE) {
		c->handled++;
		consumer_metrics_count(c->metrics, key, CONSUMER_EV_HANDLED, 1);
		*ack = true;
		return STEP_OK;
	}
	c->failed++;
	consumer_metrics_count(c->metrics, key, CONSUMER_EV_FAILED, 1);
	if (hr == HANDLER_DEAD)
		return poison(c, key, id, kv, n, why);
	if (n < 1)
		n = 1; /* not pending any more (acknowledged elsewhere): this one delivery */
	if (max > 0 && n >= max)
		return poison(c, key, id, kv, n, why);
	log_warn("handler failed on entry %s of stream \"%s\" (delivery %" PRId64 "): %s; it stays "
	         "pending and is delivered again",
	         id->str, key, n, why);
	consumer_metrics_count(c->metrics, key, CONSUMER_EV_RETRIED, 1);
	c->retry_due = true;
	return STEP_OK;
}

/*
 * Print the entries of one stream (an XREADGROUP or XAUTOCLAIM entry list:
 * [id, [field, value, ...] or nil] each), flush stdout, then XACK what was
 * printed. Entries deleted before they could be read (nil fields) are
 * acknowledged without a line. Stops after the entry that reaches --count
 * (STEP_DONE) or during which a stop signal came (STEP_STOP); the rest stay
 * pending for this consumer. When last is not NULL it receives the id of
 * the last entry handled.
 */
static enum step print_entries(struct consumer *c, const char *key, const redisReply *entries,
                               char *last, size_t lastlen, bool redelivered)
{
	enum step st = STEP_OK, ack_st;
	size_t nack = 0;

	if (!grow_scratch(c, 0, entries->elements + 3))
		return consumer_fail(c, STEP_FATAL, EXIT_FAILURE_RUNTIME, "out of memory");
	for (size_t i = 0; i < entries->elements && st == STEP_OK; i++) {
		const redisReply *e = entries->element[i], *id, *kv;
		const char *line;
		size_t linelen, nf;

		if (e->type == REDIS_REPLY_NIL)
			continue; /* Redis 6.2 XAUTOCLAIM: deleted entry, no id to acknowledge */
		if (!consumer_reply_is_array(e) || e->elements != 2 ||
		    !consumer_reply_is_string(e->element[0]) || e->element[0]->len >= ENTRY_ID_MAX) {
			st = consumer_fail(c, STEP_RETRY, 0, "malformed stream entry from stream \"%s\"", key);
			break;
		}
		id = e->element[0];
		kv = e->element[1];
		if (last)
			(void)snprintf(last, lastlen, "%s", id->str);
		if (kv->type == REDIS_REPLY_NIL) {
			log_warn("entry %s of stream \"%s\" was deleted before it was read; "
			         "acknowledging it",
			         id->str, key);
			c->ack_argv[3 + nack] = id->str;
			c->ack_lens[3 + nack++] = id->len;
			continue;
		}
		if (!consumer_reply_is_array(kv) || kv->elements % 2 != 0) {
			st = consumer_fail(c, STEP_RETRY, 0, "malformed fields of entry %s of stream \"%s\"",
			                   id->str, key);
			break;
		}
		nf = kv->elements / 2;
		if (!grow_scratch(c, nf, 0)) {
			st = consumer_fail(c, STEP_FATAL, EXIT_FAILURE_RUNTIME, "out of memory");
			break;
		}
		for (size_t j = 0; j < nf; j++) {
			const redisReply *n = kv->element[2 * j], *v = kv->element[2 * j + 1];

			if (!consumer_reply_is_string(n) || !consumer_reply_is_string(v)) {
				st = consumer_fail(c, STEP_RETRY, 0,
				                   "malformed fields of entry %s of stream \"%s\"", id->str, key);
				break;
			}
			c->fields[j] = (struct consumer_field){n->str, n->len, v->str, v->len};
		}
		if (st != STEP_OK)
			break;
		if (!consumer_fmt_line(c->fmt, key, strlen(key), id->str, id->len, c->fields, nf, &line,
		                       &linelen)) {
			st = consumer_fail(c, STEP_FATAL, EXIT_FAILURE_RUNTIME, "out of memory");
			break;
		}
		if (c->handler) {
			bool ack;

			/* The line without its newline: the handler gets one line per event. */
			st = handle_entry(c, key, id, kv, line, linelen - 1, redelivered, &ack);
			if (st != STEP_OK)
				break;
			if (!ack)
				continue;
		} else if (fwrite(line, 1, linelen, stdout) != linelen) {
			st = consumer_fail(c, STEP_FATAL, EXIT_FAILURE_RUNTIME,
			                   "could not write to standard output: %s", strerror(errno));
			break;
		}
		c->ack_argv[3 + nack] = id->str;
		c->ack_lens[3 + nack++] = id->len;
		c->printed++;
		if (!c->handler)
			consumer_metrics_count(c->metrics, key, CONSUMER_EV_HANDLED, 1);
		if (c->cf->count > 0 && c->printed >= (uint64_t)c->cf->count)
			st = STEP_DONE;
		else if (consumer_stop_requested)
			st = STEP_STOP;
	}
	if (nack == 0 || st == STEP_FATAL)
		return st;
	/* At-least-once: the lines must be out before their entries are acknowledged. */
	if (fflush(stdout) != 0)
		return consumer_fail(c, STEP_FATAL, EXIT_FAILURE_RUNTIME,
		                     "could not write to standard output: %s", strerror(errno));
	ack_st = xack(c, key, nack);
	return ack_st != STEP_OK ? ack_st : st;
}

/* XGROUP CREATE key group 0 MKSTREAM; an existing group is fine. */
enum step consumer_create_group(struct consumer *c, struct cstream *s)
{
	const char *argv[6] = {"XGROUP", "CREATE", s->key, c->cf->group, "0", "MKSTREAM"};
	enum step st = STEP_OK;
	redisReply *r = consumer_command(c, s->key, 6, argv, NULL, CMD_TIMEOUT_MS, false, &st);

	if (!r)
		return st;
	if (r->type == REDIS_REPLY_ERROR && strncmp(r->str, "BUSYGROUP", 9) != 0)
		st = consumer_error_reply(c, "XGROUP CREATE", s->key, r->str);
	else if (r->type != REDIS_REPLY_ERROR)
		log_info("created consumer group \"%s\" on stream \"%s\"", c->cf->group, s->key);
	freeReplyObject(r);
	return st;
}

/*
 * The entry list of the one stream in an XREADGROUP reply, or NULL for a
 * nil reply or an empty list. *bad is set when the reply has another shape.
 */
static const redisReply *single_stream_entries(const redisReply *r, bool *bad)
{
	const redisReply *s;

	*bad = false;
	if (r->type == REDIS_REPLY_NIL)
		return NULL;
	if (!consumer_reply_is_array(r)) {
		*bad = true;
		return NULL;
	}
	if (r->elements == 0)
		return NULL;
	s = r->element[0];
	if (!consumer_reply_is_array(s) || s->elements != 2 ||
	    !consumer_reply_is_array(s->element[1])) {
		*bad = true;
		return NULL;
	}
	return s->element[1]->elements > 0 ? s->element[1] : NULL;
}

/*
 * One round of a read command on s (argv, whose COUNT argument is the
 * buffer count, 24 bytes): NULL with *st set when a stop was requested, the
 * stream's node cannot be reached or the command failed; else the reply.
 */
static redisReply *stream_command(struct consumer *c, const struct cstream *s, int argc,
                                  const char **argv, char *count, enum step *st)
{
	if (consumer_stop_requested) {
		*st = STEP_STOP;
		return NULL;
	}
	(void)snprintf(count, 24, "%" PRIu64, want(c));
	return consumer_command(c, s->key, argc, argv, NULL, CMD_TIMEOUT_MS, false, st);
}

/*
 * Read this consumer's own pending entries of s (delivered to this consumer
 * name earlier but never acknowledged): XREADGROUP with ID 0, then after the
 * last id seen, until none are left. Then s is live.
 */
enum step consumer_read_own_pending(struct consumer *c, struct cstream *s)
{
	char last[ENTRY_ID_MAX] = "0", count[24];
	const char *argv[9] = {"XREADGROUP", "GROUP", c->cf->group, c->cf->consumer, "COUNT", count,
	                       "STREAMS",    s->key,  last};

	for (;;) {
		enum step st = STEP_OK;
		const redisReply *entries;
		redisReply *r;
		bool bad;

		r = stream_command(c, s, 9, argv, count, &st);
		if (!r)
			return st;
		if (is_nogroup(r)) {
			st = no_group(c, s, r->str);
			freeReplyObject(r);
			return st;
		}
		if (r->type == REDIS_REPLY_ERROR) {
			st = consumer_error_reply(c, "XREADGROUP", s->key, r->str);
			freeReplyObject(r);
			return st;
		}
		entries = single_stream_entries(r, &bad);
		if (bad) {
			freeReplyObject(r);
			return consumer_fail(c, STEP_RETRY, 0, "unexpected reply to XREADGROUP on \"%s\"",
			                     s->key);
		}
		if (!entries) {
			freeReplyObject(r);
			s->live = true;
			return STEP_OK;
		}
		log_info("re-reading %zu pending entr%s of stream \"%s\" delivered earlier to "
		         "consumer \"%s\"",
		         entries->elements, entries->elements == 1 ? "y" : "ies", s->key, c->cf->consumer);
		st = print_entries(c, s->key, entries, last, sizeof(last), true);
		freeReplyObject(r);
		if (st != STEP_OK)
			return st;
	}
}

/* XAUTOCLAIM entries of s idle longer than --claim-min-idle, print and acknowledge them. */
enum step consumer_claim_stream(struct consumer *c, struct cstream *s)
{
	char start[ENTRY_ID_MAX] = "0-0", idle[24], count[24];
	const char *argv[8] = {"XAUTOCLAIM", s->key, c->cf->group, c->cf->consumer,
	                       idle,         start,  "COUNT",      count};

	(void)snprintf(idle, sizeof(idle), "%" PRId64, c->cf->claim_idle_ms);
	do {
		enum step st = STEP_OK;
		const redisReply *entries;
		redisReply *r;

		r = stream_command(c, s, 8, argv, count, &st);
		if (!r)
			return st;
		if (is_nogroup(r)) {
			s->live = false; /* read_own_pending() sorts it out next step */
			freeReplyObject(r);
			return STEP_OK;
		}
		if (r->type == REDIS_REPLY_ERROR) {
			st = consumer_error_reply(c, "XAUTOCLAIM", s->key, r->str);
			freeReplyObject(r);
			return st;
		}
		/* [next start, entries] (6.2), plus [deleted ids] since 7.0. */
		if (!consumer_reply_is_array(r) || r->elements < 2 ||
		    !consumer_reply_is_string(r->element[0]) || r->element[0]->len >= ENTRY_ID_MAX ||
		    !consumer_reply_is_array(r->element[1])) {
			freeReplyObject(r);
			return consumer_fail(c, STEP_RETRY, 0, "unexpected reply to XAUTOCLAIM on \"%s\"",
			                     s->key);
		}
		(void)snprintf(start, sizeof(start), "%s", r->element[0]->str);
		entries = r->element[1];
		if (entries->elements > 0) {
			log_info("claimed %zu entr%s of stream \"%s\" pending for more than %" PRId64 " ms",
			         entries->elements, entries->elements == 1 ? "y" : "ies", s->key,
			         c->cf->claim_idle_ms);
			st = print_entries(c, s->key, entries, NULL, 0, true);
		}
		freeReplyObject(r);
		if (st != STEP_OK)
			return st;
	} while (strcmp(start, "0-0") != 0);
	return STEP_OK;
}

/*
 * One XREADGROUP ... > over the streams idx[0..n), COUNT per, BLOCK block_ms
 * (no BLOCK when block_ms < 0), interruptible by a stop signal while blocked.
 * *got tells whether any entry came back.
 */
static enum step read_streams(struct consumer *c, const size_t *idx, size_t n, uint64_t per,
                              int64_t block_ms, bool *got)
{
	size_t argc = 0, fixed = block_ms >= 0 ? 9 : 7;
	const char **argv = calloc(fixed + 2 * n, sizeof(*argv));
	char count[24], block[24];
	enum step st = STEP_OK;
	redisReply *r;

	*got = false;
	if (!argv)
		return consumer_fail(c, STEP_FATAL, EXIT_FAILURE_RUNTIME, "out of memory");
	(void)snprintf(count, sizeof(count), "%" PRIu64, per);
	(void)snprintf(block, sizeof(block), "%" PRId64, block_ms);
	argv[argc++] = "XREADGROUP";
	argv[argc++] = "GROUP";
	argv[argc++] = c->cf->group;
	argv[argc++] = c->cf->consumer;
	argv[argc++] = "COUNT";
	argv[argc++] = count;
	if (block_ms >= 0) {
		argv[argc++] = "BLOCK";
		argv[argc++] = block;
	}
	argv[argc++] = "STREAMS";
	for (size_t i = 0; i < n; i++)
		argv[argc++] = c->streams[idx[i]].key;
	for (size_t i = 0; i < n; i++)
		argv[argc++] = ">";

	/* In a cluster consumer_read_new() reads one stream per call: the key routes it. */
	r = consumer_command(c, c->streams[idx[0]].key, (int)argc, argv, NULL,
	                     (block_ms > 0 ? block_ms : 0) + CMD_TIMEOUT_MS, block_ms > 0, &st);
	free(argv);
	if (!r)
		return st;
	if (is_nogroup(r)) {
		/* A group or stream went away: check each stream on its own next step. */
		log_debug("XREADGROUP: %s", r->str);
		for (size_t i = 0; i < n; i++)
			c->streams[idx[i]].live = false;
		freeReplyObject(r);
		return STEP_OK;
	}
	if (r->type == REDIS_REPLY_ERROR) {
		st = consumer_error_reply(c, "XREADGROUP", n == 1 ? c->streams[idx[0]].key : NULL, r->str);
		freeReplyObject(r);
		return st;
	}
	if (r->type == REDIS_REPLY_NIL) { /* BLOCK timed out */
		freeReplyObject(r);
		return STEP_OK;
	}
	if (!consumer_reply_is_array(r)) {
		freeReplyObject(r);
		return consumer_fail(c, STEP_RETRY, 0, "unexpected reply to XREADGROUP");
	}
	for (size_t i = 0; i < r->elements && st == STEP_OK; i++) {
		const redisReply *s = r->element[i];
		char key[1024];

		if (!consumer_reply_is_array(s) || s->elements != 2 ||
		    !consumer_reply_is_string(s->element[0]) || !consumer_reply_is_array(s->element[1])) {
			st = consumer_fail(c, STEP_RETRY, 0, "unexpected reply to XREADGROUP");
			break;
		}
		if (s->element[1]->elements == 0)
			continue;
		*got = true;
		/* The key as a C string for messages and XACK; stream keys are short. */
		if (s->element[0]->len >= sizeof(key) ||
		    memchr(s->element[0]->str, '\0', s->element[0]->len)) {
			st = consumer_fail(c, STEP_FATAL, EXIT_FAILURE_RUNTIME,
			                   "stream key of %zu bytes is not supported", s->element[0]->len);
			break;
		}
		memcpy(key, s->element[0]->str, s->element[0]->len);
		key[s->element[0]->len] = '\0';
		st = print_entries(c, key, s->element[1], NULL, 0, false);
	}
	freeReplyObject(r);
	return st;
}

/*
 * Redis Cluster: one XREADGROUP can only name keys of one hash slot
 * (CROSSSLOT otherwise), and a BLOCK on one node cannot wake for entries on
 * another. So every live stream is read on its own, without BLOCK, COUNT
 * what --batch and --count leave, round robin; when a whole round found
 * nothing the consumer sleeps min(--block-timeout, CLUSTER_POLL_MS) and polls again.
 * The trade-off: a new entry waits up to CLUSTER_POLL_MS (plus one round)
 * instead of being handed over at once by a blocked read, and an idle
 * consumer sends (streams x 1000 / CLUSTER_POLL_MS) cheap XREADGROUPs a
 * second.
 */
static enum step read_new_cluster(struct consumer *c, const size_t *idx, size_t n, int64_t block)
{
	bool any = false, got;

	for (size_t j = 0; j < n; j++) {
		size_t one = idx[(c->rr + j) % n];
		enum step st = read_streams(c, &one, 1, want(c), -1, &got);

		any = any || got;
		if (st != STEP_OK)
			return st;
	}
	c->rr = (c->rr + 1) % n;
	if (!any)
		consumer_sleep(block < CLUSTER_POLL_MS ? block : CLUSTER_POLL_MS);
	return consumer_stop_requested ? STEP_STOP : STEP_OK;
}

/*
 * Read new entries from every live stream. Without --count this is the
 * textbook call: one XREADGROUP over all streams, COUNT --batch, BLOCK.
 * With --count a read must never hand this consumer more entries than it
 * will print (the rest would sit in its pending list), and COUNT applies per
 * stream: so the streams are first read one at a time without BLOCK, COUNT
 * what is left; only when none has anything does one blocking read over all
 * streams wait, with COUNT what is left divided by the number of streams
 * (at least 1: with fewer events left than streams, Redis 7.0 still answers
 * a blocked read with the one stream that got an entry).
 */
enum step consumer_read_new(struct consumer *c, int64_t now_us)
{
	const struct consumer_config *cf = c->cf;
	int64_t block = cf->block_ms;
	size_t n = 0, *idx;
	uint64_t per;
	enum step st;
	bool got;

	if (cf->stream_pattern && rclient_ms_until(c->next_scan_us, now_us) < block)
		block = rclient_ms_until(c->next_scan_us, now_us);
	if (cf->claim_idle_ms > 0 && rclient_ms_until(c->next_claim_us, now_us) < block)
		block = rclient_ms_until(c->next_claim_us, now_us);
	if (c->metrics && rclient_ms_until(c->next_lag_us, now_us) < block)
		block = rclient_ms_until(c->next_lag_us, now_us); /* the lag refresh, consumer.c */
	if (block < 1)
		block = 1; /* BLOCK 0 would wait forever */

	idx = malloc((c->nstreams ? c->nstreams : 1) * sizeof(*idx));
	if (!idx)
		return consumer_fail(c, STEP_FATAL, EXIT_FAILURE_RUNTIME, "out of memory");
	for (size_t i = 0; i < c->nstreams; i++) {
		if (c->streams[i].live && !c->streams[i].skipped)
			idx[n++] = i;
	}
	if (n == 0) {
		free(idx);
		consumer_sleep(block);
		return consumer_stop_requested ? STEP_STOP : STEP_OK;
	}
	if (rclient_is_cluster(c->rc)) {
		st = read_new_cluster(c, idx, n, block);
		free(idx);
		return st;
	}
	per = want(c);
	if (cf->count > 0) {
		bool any = false;

		for (size_t j = 0; j < n; j++) {
			size_t one = idx[(c->rr + j) % n];

			st = read_streams(c, &one, 1, want(c), -1, &got);
			any = any || got;
			if (st != STEP_OK) {
				free(idx);
				return st;
			}
		}
		c->rr = (c->rr + 1) % n;
		if (any) {
			free(idx);
			return STEP_OK;
		}
		per = ((uint64_t)cf->count - c->printed) / n;
		if (per < 1)
			per = 1;
		if (per > (uint64_t)cf->batch)
			per = (uint64_t)cf->batch;
	}
	st = read_streams(c, idx, n, per, block, &got);
	free(idx);
	return st;
}
