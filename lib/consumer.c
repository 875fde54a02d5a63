/*
 * consumer.c - outbox-consume: the reference XREADGROUP consumer for the
 * streams outbox-relay writes.
 *
 * The loop (consumer_run) is the program's main loop and, like relay.c, logs
 * through log.h. Per connection it:
 *   1. discovers --stream-pattern streams (SCAN MATCH ... TYPE stream),
 *      again every RESCAN_INTERVAL_MS;
 *   2. per stream, optionally creates the group (XGROUP CREATE ... 0
 *      MKSTREAM), then reads this consumer's own pending entries
 *      (XREADGROUP ... ID 0, then after the last id seen) until none are
 *      left: entries delivered to an earlier run of the same consumer name
 *      that never acknowledged them;
 *   3. every so often claims entries other consumers left pending longer
 *      than --claim-min-idle (XAUTOCLAIM);
 *   4. reads new entries (XREADGROUP ... BLOCK ... >) from all streams.
 * Redis is reached through rclient.h: in a Redis Cluster each command goes
 * to the master of its stream's slot, MOVED and ASK are followed, step 1
 * scans every master, and step 4 polls each stream without BLOCK (see
 * read_new_cluster() in consumer_read.c).
 * Every entry is printed, stdout is flushed, and only then is it
 * acknowledged (XACK, one per batch and stream): at-least-once. A crash
 * between the two delivers the entry again, to this consumer name at its
 * next start (step 2) or to another consumer after --claim-min-idle (step 3).
 *
 * Files: consumer_command.c handles the stop signals (which cut the client's
 * BLOCK wait short) and turns the client's failures into steps;
 * consumer_read.c reads, prints and acknowledges entries (steps 2 to 4);
 * consumer_render.c renders an entry as a JSON line; consumer_config.c holds
 * the options. Their shared state is struct consumer (consumer_int.h).
 */
#include "consumer_int.h"

#include "consumer_handler.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "exitcode.h"
#include "log.h"
#include "lsn.h"

/* Intervals of the loop. */
#define RESCAN_INTERVAL_MS 5000   /* rediscovery of --stream-pattern streams */
#define CLAIM_INTERVAL_MIN_MS 100 /* XAUTOCLAIM rounds: --claim-min-idle / 2 within these */
#define CLAIM_INTERVAL_MAX_MS 10000
#define RETRY_BASE_MS 200 /* reconnect backoff: doubles up to RETRY_MAX_MS */
#define RETRY_MAX_MS 5000
#define LAG_REFRESH_MS 3000 /* --http-addr: the lag gauges read again */
/* /healthz: the loop waits up to --block-timeout per turn; a turn this much later is stuck. */
#define STUCK_AFTER_MS 60000

static struct cstream *find_stream(struct consumer *c, const char *key, size_t len)
{
	for (size_t i = 0; i < c->nstreams; i++) {
		if (strlen(c->streams[i].key) == len && memcmp(c->streams[i].key, key, len) == 0)
			return &c->streams[i];
	}
	return NULL;
}

static struct cstream *add_stream(struct consumer *c, const char *key, size_t len, bool listed)
{
	struct cstream *s;

	if (c->nstreams == c->capstreams) {
		size_t cap = c->capstreams ? 2 * c->capstreams : 8;
		struct cstream *grown = realloc(c->streams, cap * sizeof(*grown));

		if (!grown)
			return NULL;
		c->streams = grown;
		c->capstreams = cap;
	}
	s = &c->streams[c->nstreams];
	memset(s, 0, sizeof(*s));
	s->key = strndup(key, len);
	if (!s->key)
		return NULL;
	s->listed = listed;
	s->seen = true;
	c->nstreams++;
	return s;
}

/* A key the scan found: mark a known stream seen, add a new one (false: out of memory). */
static bool scan_found(void *arg, const char *key, size_t len)
{
	struct consumer *c = arg;
	struct cstream *s = find_stream(c, key, len);

	if (s) {
		s->seen = true;
		return true;
	}
	if (!c->cf->include_dead_letter && c->cf->dead_letter_stream &&
	    strlen(c->cf->dead_letter_stream) == len &&
	    memcmp(c->cf->dead_letter_stream, key, len) == 0) {
		if (!c->dead_letter_noted)
			log_info("not reading the dead-letter stream \"%s\" (matches \"%s\"): "
			         "its entries are not events; --include-dead-letter reads it",
			         c->cf->dead_letter_stream, c->cf->stream_pattern);
		c->dead_letter_noted = true;
		return true;
	}
	if (!add_stream(c, key, len, false))
		return false;
	/* Its series appear at 0, so that an alert on their increase sees the first one. */
	consumer_metrics_count(c->metrics, c->streams[c->nstreams - 1].key, CONSUMER_EV_HANDLED, 0);
	log_info("reading stream \"%s\" (matches \"%s\")", c->streams[c->nstreams - 1].key,
	         c->cf->stream_pattern);
	return true;
}

/*
 * SCAN for --stream-pattern streams (rclient_scan_streams(): every master of
 * a cluster): add new ones, drop vanished ones. A stream whose slot moves
 * meanwhile may be missed; it is found again at the next scan, its pending
 * entries with it.
 */
static enum step scan_streams(struct consumer *c)
{
	size_t kept = 0;
	enum rclient_status rst;
	char err[sizeof(c->errmsg)];

	for (size_t i = 0; i < c->nstreams; i++)
		c->streams[i].seen = c->streams[i].listed;
	rst = rclient_scan_streams(c->rc, c->cf->stream_pattern, scan_found, c, err, sizeof(err));
	if (rst == RCLIENT_ABORTED)
		return consumer_fail(c, STEP_FATAL, EXIT_FAILURE_RUNTIME, "out of memory");
	if (rst == RCLIENT_REFUSED)
		return consumer_error_reply(c, "SCAN ... TYPE", NULL, err);
	if (rst != RCLIENT_OK)
		return consumer_client_failed(c, rst, err);

	for (size_t i = 0; i < c->nstreams; i++) {
		struct cstream *s = &c->streams[i];

		if (!s->seen) {
			log_info("stream \"%s\" is gone", s->key);
			free(s->key);
			continue;
		}
		s->skipped = false; /* try a group-less stream again */
		c->streams[kept++] = *s;
	}
	c->nstreams = kept;
	return STEP_OK;
}

/*
 * Worker mode: after a batch in which the handler failed, pause (100 ms,
 * doubling per batch in a row with a failure, up to --retry-max, full
 * jitter), then read this consumer's pending entries again: each failed one
 * is delivered again (its delivery count grows, for --max-deliveries).
 */
static void retry_failed(struct consumer *c)
{
	int64_t ms = 100;

	for (int i = 0; i < c->fail_streak && ms < c->cf->retry_max_ms; i++)
		ms *= 2;
	if (ms > c->cf->retry_max_ms)
		ms = c->cf->retry_max_ms;
	if (c->fail_streak < 30)
		c->fail_streak++;
	consumer_sleep(ms / 2 + (int64_t)(random() % (ms / 2 + 1)));
	c->retry_due = false;
	for (size_t i = 0; i < c->nstreams; i++)
		c->streams[i].live = false;
}

/*
 * One group of stream key into the lag table: XINFO GROUPS' lag (Redis 7.0;
 * nil when it cannot tell), XPENDING's summary and the server's TIME for the
 * pending count and the oldest one's age. An error reply (the group or the
 * stream deleted meanwhile) leaves the row out.
 */
static enum step lag_of_group(struct consumer *c, const char *key, const redisReply *g,
                              const redisReply *now)
{
	const redisReply *name = rclient_map_get(g, "name"), *lag = rclient_map_get(g, "lag");
	const char *argv[3] = {"XPENDING", key, NULL};
	enum step st = STEP_OK;
	uint64_t pending;
	int64_t age;
	redisReply *r;

	if (!consumer_reply_is_string(name))
		return STEP_OK;
	argv[2] = name->str;
	r = consumer_command(c, key, 3, argv, NULL, CMD_TIMEOUT_MS, false, &st);
	if (!r)
		return st;
	age = consumer_metrics_oldest_pending_ms(r, now, &pending);
	if (age >= -1)
		consumer_metrics_lag_add(c->metrics, key, name->str,
		                         lag && lag->type == REDIS_REPLY_INTEGER ? lag->integer : -1,
		                         pending, age);
	else
		log_debug("lag of group \"%s\" on stream \"%s\" left out: XPENDING answered %s", name->str,
		          key, r->type == REDIS_REPLY_ERROR ? r->str : "an unexpected reply");
	freeReplyObject(r);
	return STEP_OK;
}

/*
 * --http-addr: read the lag of every group of every stream this consumer
 * reads (its own group and the others) and hand the table to the metrics.
 * Done by the loop through its own client, never by the HTTP thread.
 */
static enum step refresh_lag(struct consumer *c)
{
	enum step st = STEP_OK;

	consumer_metrics_lag_begin(c->metrics);
	for (size_t i = 0; i < c->nstreams && st == STEP_OK; i++) {
		const char *key = c->streams[i].key;
		const char *groups_argv[3] = {"XINFO", "GROUPS", key}, *time_argv[1] = {"TIME"};
		redisReply *gr, *now;

		gr = consumer_command(c, key, 3, groups_argv, NULL, CMD_TIMEOUT_MS, false, &st);
		if (!gr)
			return st;
		/* TIME of the server holding the stream, the clock its entry ids come from. */
		now = consumer_reply_is_array(gr) && gr->elements > 0
		          ? consumer_command(c, key, 1, time_argv, NULL, CMD_TIMEOUT_MS, false, &st)
		          : NULL;
		for (size_t j = 0; st == STEP_OK && now && j < gr->elements; j++)
			st = lag_of_group(c, key, gr->element[j], now);
		freeReplyObject(now);
		freeReplyObject(gr);
	}
	if (st == STEP_OK)
		consumer_metrics_lag_commit(c->metrics);
	return st;
}

/* One round: discovery, own pending entries, claims, new entries. */
static enum step step_once(struct consumer *c)
{
	const struct consumer_config *cf = c->cf;
	int64_t now;
	enum step st;

	if (c->retry_due)
		retry_failed(c);
	else
		c->fail_streak = 0; /* the last step had no failure: the streak is over */
	if (consumer_stop_requested)
		return STEP_STOP;
	now = time_mono_us();

	if (cf->stream_pattern && now >= c->next_scan_us) {
		st = scan_streams(c);
		if (st != STEP_OK)
			return st;
		c->next_scan_us = now + RESCAN_INTERVAL_MS * 1000;
	}
	for (size_t i = 0; i < c->nstreams; i++) {
		struct cstream *s = &c->streams[i];

		if (s->live || s->skipped)
			continue;
		if (cf->create_group) {
			st = consumer_create_group(c, s);
			if (st != STEP_OK)
				return st;
		}
		st = consumer_read_own_pending(c, s);
		if (st != STEP_OK)
			return st;
	}
	if (cf->claim_idle_ms > 0 && now >= c->next_claim_us) {
		int64_t every = cf->claim_idle_ms / 2;

		if (every < CLAIM_INTERVAL_MIN_MS)
			every = CLAIM_INTERVAL_MIN_MS;
		if (every > CLAIM_INTERVAL_MAX_MS)
			every = CLAIM_INTERVAL_MAX_MS;
		for (size_t i = 0; i < c->nstreams; i++) {
			if (!c->streams[i].live || c->streams[i].skipped)
				continue;
			st = consumer_claim_stream(c, &c->streams[i]);
			if (st != STEP_OK)
				return st;
		}
		c->next_claim_us = now + every * 1000;
	}
	if (c->metrics && now >= c->next_lag_us) {
		st = refresh_lag(c);
		if (st != STEP_OK)
			return st;
		c->next_lag_us = now + LAG_REFRESH_MS * 1000;
	}
	return consumer_read_new(c, time_mono_us());
}

static int64_t backoff_ms(int attempt)
{
	int64_t ms = RETRY_BASE_MS;

	for (int i = 0; i < attempt && ms < RETRY_MAX_MS; i++)
		ms *= 2;
	return ms < RETRY_MAX_MS ? ms : RETRY_MAX_MS;
}

static void consumer_finish(struct consumer *c, struct consumer_metrics_server *http)
{
	consumer_metrics_server_stop(http);
	consumer_metrics_destroy(c->metrics);
	rclient_destroy(c->rc);
	for (size_t i = 0; i < c->nstreams; i++)
		free(c->streams[i].key);
	free(c->streams);
	free(c->fields);
	free(c->ack_argv);
	free(c->ack_lens);
	consumer_fmt_destroy(c->fmt);
	handler_destroy(c->handler);
}

/* See consumer.h. */
int consumer_run(const struct consumer_config *cf)
{
	struct consumer c;
	struct consumer_metrics_server *http = NULL;
	int rc = EXIT_OK, attempt = 0;

	memset(&c, 0, sizeof(c));
	c.cf = cf;
	if (!consumer_install_signals()) {
		log_error("could not install signal handlers: %s", strerror(errno));
		return EXIT_FAILURE_RUNTIME;
	}
	c.fmt = consumer_fmt_create();
	if (!c.fmt) {
		log_error("out of memory");
		return EXIT_FAILURE_RUNTIME;
	}
	if (cf->exec_cmd || cf->handler_cmd) {
		c.handler = handler_create(cf->exec_cmd, cf->handler_cmd);
		if (!c.handler) {
			log_error("out of memory");
			consumer_finish(&c, http);
			return EXIT_FAILURE_RUNTIME;
		}
		srandom((unsigned)(time_mono_us() ^ getpid()));
	}
	c.rc = consumer_client_create(&cf->redis);
	if (!c.rc) {
		log_error("out of memory");
		consumer_finish(&c, http);
		return EXIT_FAILURE_RUNTIME;
	}
	for (size_t i = 0; i < cf->nstreams; i++) {
		if (!add_stream(&c, cf->streams[i], strlen(cf->streams[i]), true)) {
			log_error("out of memory");
			consumer_finish(&c, http);
			return EXIT_FAILURE_RUNTIME;
		}
	}

	if (cf->http_addr) {
		char err[1024];

		c.metrics = consumer_metrics_create(cf->group);
		if (!c.metrics) {
			log_error("out of memory");
			consumer_finish(&c, http);
			return EXIT_FAILURE_RUNTIME;
		}
		for (size_t i = 0; i < c.nstreams; i++)
			consumer_metrics_count(c.metrics, c.streams[i].key, CONSUMER_EV_HANDLED, 0);
		http = consumer_metrics_serve(c.metrics, cf->http_addr, STUCK_AFTER_MS + cf->block_ms, err,
		                              sizeof(err));
		if (!http) {
			log_error("%s", err);
			consumer_finish(&c, http);
			return EXIT_USAGE;
		}
		log_info("serving /metrics and /healthz on %s (port %d)", cf->http_addr,
		         consumer_metrics_server_port(http));
	}

	while (!consumer_stop_requested) {
		enum step st;

		consumer_metrics_heartbeat(c.metrics, c.connected);

		if (!c.connected) {
			char err[1024];
			bool permanent;
			int64_t delay;

			/* A cluster: the slot map, then its first master, as the one server is. */
			c.connected = rclient_connect(c.rc, &permanent, err, sizeof(err)) &&
			              rclient_connect_master(c.rc, 0, &permanent, err, sizeof(err));
			if (!c.connected) {
				if (permanent) {
					log_error("%s", err);
					rc = EXIT_REDIS_SETUP;
					break;
				}
				delay = backoff_ms(attempt++);
				log_warn("%s; retrying in %" PRId64 " ms", err, delay);
				consumer_sleep(delay);
				continue;
			}
			if (rclient_is_cluster(c.rc)) {
				char where[300];

				log_info("connected to Redis %s: %d masters, as consumer \"%s\" of group "
				         "\"%s\"",
				         redis_target_describe(&cf->redis, where, sizeof(where)),
				         rclient_nmasters(c.rc), cf->consumer, cf->group);
			} else
				log_info("connected to Redis at %s as consumer \"%s\" of group \"%s\"",
				         rclient_desc(c.rc), cf->consumer, cf->group);
			/* Entries may have been delivered whose replies were lost: read this
			 * consumer's pending entries again before anything new. */
			for (size_t i = 0; i < c.nstreams; i++)
				c.streams[i].live = false;
			c.next_scan_us = c.next_claim_us = c.next_lag_us = time_mono_us();
			consumer_metrics_heartbeat(c.metrics, true);
		}

		st = step_once(&c);
		if (st == STEP_OK) {
			attempt = 0;
			continue;
		}
		if (st == STEP_DONE || st == STEP_STOP)
			break;
		if (st == STEP_FATAL) {
			log_error("%s", c.errmsg);
			rc = c.exit_code;
			break;
		}
		/* STEP_RETRY */
		rclient_disconnect(c.rc);
		c.connected = false;
		{
			int64_t delay = backoff_ms(attempt++);

			log_warn("%s; reconnecting in %" PRId64 " ms", c.errmsg, delay);
			consumer_sleep(delay);
		}
	}
	if (c.handler)
		log_info("worker: handled=%" PRIu64 " failed=%" PRIu64 " poisoned=%" PRIu64, c.handled,
		         c.failed, c.poisoned);
	if (rc == EXIT_OK)
		log_info("exiting after %" PRIu64 " event%s printed: %s", c.printed,
		         c.printed == 1 ? "" : "s",
		         consumer_stop_requested ? "stopped by a signal" : "--count reached");
	consumer_finish(&c, http);
	return rc;
}
