/*
 * consumer_int.h - outbox-consume's state, shared by lib/consumer.c (the
 * loop and its list of streams), consumer_command.c (stop signals, its Redis
 * client's failures as steps) and consumer_read.c (reading, printing and
 * acknowledging entries). Private to those three files; the public API,
 * rendering included, is consumer.h; the Redis client is rclient.h.
 */
#ifndef RELAY_CONSUMER_INT_H
#define RELAY_CONSUMER_INT_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <hiredis/hiredis.h>

#include "consumer.h"
#include "consumer_metrics.h"
#include "consumer_render.h"
#include "rclient.h"

#define PROGNAME "outbox-consume"

/* Connect, and any reply beyond its BLOCK time. */
#define CMD_TIMEOUT_MS 10000

/* Outcome of one step of the loop. */
enum step {
	STEP_OK = 0, /* carry on */
	STEP_RETRY,  /* connection or server trouble: reconnect after a backoff (errmsg) */
	STEP_FATAL,  /* permanent: exit with exit_code (errmsg) */
	STEP_DONE,   /* --count reached */
	STEP_STOP    /* SIGTERM/SIGINT */
};

struct cstream {
	char *key;
	bool listed;  /* from --stream: a missing group is an error, not a skip */
	bool live;    /* own pending entries read; new ones are read with ">" */
	bool skipped; /* pattern stream without the group: left out until the next scan */
	bool warned;  /* that skip has been logged */
	bool seen;    /* found by the current scan */
};

struct consumer {
	const struct consumer_config *cf;
	/* One server, the Sentinels' master or a Redis Cluster; rclient_desc()
	 * names the node the last command went to, for messages. */
	struct rclient *rc;
	bool connected; /* rc connected; cleared after a failure, which disconnects */

	struct cstream *streams;
	size_t nstreams, capstreams;
	size_t rr; /* where the one-stream-at-a-time sweep of --count starts */

	struct consumer_fmt *fmt;
	struct consumer_field *fields; /* scratch for one entry */
	size_t capfields;
	const char **ack_argv; /* scratch for XACK */
	size_t *ack_lens;
	size_t capack;

	uint64_t printed;

	/* Worker mode (--exec, --handler; consumer_handler.h). */
	struct handler *handler;
	bool retry_due;  /* an event failed: its stream's pending entries are read again */
	int fail_streak; /* batches in a row with a failure: the backoff's exponent */
	uint64_t handled, failed, poisoned;
	int64_t next_scan_us, next_claim_us;
	/* --http-addr: NULL when off (consumer_metrics_* then do nothing). */
	struct consumer_metrics *metrics;
	int64_t next_lag_us;    /* the next lag refresh (consumer.c) */
	bool dead_letter_noted; /* said once that --stream-pattern skips it */

	int exit_code;     /* with STEP_FATAL */
	char errmsg[1024]; /* with STEP_RETRY and STEP_FATAL */
};

/* ---- consumer_command.c: stop signals, sleeping, the Redis client's outcomes ---- */

/* Set by the signal handler; the loop checks it between entries. */
extern volatile sig_atomic_t consumer_stop_requested;

/*
 * Handlers for SIGINT and SIGTERM (the first sets consumer_stop_requested and
 * wakes an interruptible wait, a second exits 1 at once); SIGPIPE ignored.
 * False with errno set when the self-pipe or a handler could not be set up.
 */
bool consumer_install_signals(void);

/* Sleep up to ms, waking early on a stop signal. */
void consumer_sleep(int64_t ms);

/* Record c->errmsg (and the exit code for STEP_FATAL); returns st. */
enum step consumer_fail(struct consumer *c, enum step st, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static inline bool consumer_reply_is_string(const redisReply *r)
{
	return r && (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS);
}

static inline bool consumer_reply_is_array(const redisReply *r)
{
	return r && r->type == REDIS_REPLY_ARRAY;
}

/*
 * The Redis client for t (CMD_TIMEOUT_MS to connect and for every reply but
 * a BLOCK read's), its interruptible waits woken by the stop signals, its
 * redirects logged. NULL when out of memory. Call after
 * consumer_install_signals().
 */
struct rclient *consumer_client_create(const struct redis_target *t);

/* A client call that failed with rst and err, as a step (c->errmsg, exit code). */
enum step consumer_client_failed(struct consumer *c, enum rclient_status rst, const char *err);

/*
 * rclient_command() on c->rc: one command about key (lens NULL:
 * NUL-terminated arguments) to the server holding it, MOVED and ASK followed,
 * the reply awaited at most timeout_ms. Returns the reply (caller frees; it
 * may be an error reply) or NULL with *st set: STEP_STOP when interruptible
 * and a stop signal came while no reply had started to arrive, otherwise
 * STEP_RETRY or STEP_FATAL with c->errmsg.
 */
redisReply *consumer_command(struct consumer *c, const char *key, int argc, const char **argv,
                             const size_t *lens, int64_t timeout_ms, bool interruptible,
                             enum step *st);

/* Classify an unexpected error reply to `what` on stream key (NULL: none). */
enum step consumer_error_reply(struct consumer *c, const char *what, const char *key,
                               const char *msg);

/* ---- consumer_read.c: entries read, printed and acknowledged ---- */

/* XGROUP CREATE key group 0 MKSTREAM; an existing group is fine. */
enum step consumer_create_group(struct consumer *c, struct cstream *s);
/* This consumer's own pending entries of s, until none are left; then s is live. */
enum step consumer_read_own_pending(struct consumer *c, struct cstream *s);
/* XAUTOCLAIM entries of s idle longer than --claim-min-idle, print and acknowledge them. */
enum step consumer_claim_stream(struct consumer *c, struct cstream *s);
/* New entries (XREADGROUP ... >) from every live stream, blocking at most until the
 * next scan or claim round is due. */
enum step consumer_read_new(struct consumer *c, int64_t now_us);

#endif
