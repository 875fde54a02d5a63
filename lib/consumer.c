/*
 * consumer.c - outbox-consume: the reference XREADGROUP consumer for the
 * streams outbox-relay writes.
 *
 * The options are rows on the option engine, in consumer_config.c.
 * Rendering turns one stream entry into one JSON line with yajl; it is pure
 * and unit-tested.
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
 * In a Redis Cluster (consumer_cluster.h) each command goes to the master of
 * its stream's slot, MOVED and ASK are followed, step 1 scans every master,
 * and step 4 polls each stream without BLOCK (see read_new_cluster()).
 * Every entry is printed, stdout is flushed, and only then is it
 * acknowledged (XACK, one per batch and stream): at-least-once. A crash
 * between the two delivers the entry again, to this consumer name at its
 * next start (step 2) or to another consumer after --claim-min-idle (step 3).
 *
 * I/O uses hiredis's blocking context, but replies are awaited with poll()
 * on the socket and a self-pipe the signal handler writes to, so SIGTERM
 * ends a BLOCK wait at once instead of after up to --block-timeout. Only that
 * wait is interruptible; XACK and the rest always run to completion.
 */
#include "msg.h"
#include "consumer.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>
#include <yajl/yajl_gen.h>
#include <yajl/yajl_parse.h>

#include "buf.h"
#include "consumer_cluster.h"
#include "exitcode.h"
#include "log.h"
#include "lsn.h"
#include "redis_conn.h"
#include "redis_sentinel.h"
#include "redis_tls.h"
#include "relay_build.h"

#define PROGNAME "outbox-consume"

/* Timeouts and intervals of the loop. */
#define CMD_TIMEOUT_MS 10000      /* connect, and any reply beyond its BLOCK time */
#define RESCAN_INTERVAL_MS 5000   /* rediscovery of --stream-pattern streams */
#define CLAIM_INTERVAL_MIN_MS 100 /* XAUTOCLAIM rounds: --claim-min-idle / 2 within these */
#define CLAIM_INTERVAL_MAX_MS 10000
#define SCAN_COUNT "1000"
#define RETRY_BASE_MS 200 /* reconnect backoff: doubles up to RETRY_MAX_MS */
#define RETRY_MAX_MS 5000
/* Redis Cluster: the longest pause between two rounds of non-blocking reads
 * when the last round found nothing (--block-timeout caps it too). */
#define CLUSTER_POLL_MS 100

/* Longest stream entry id: two 20-digit numbers and a dash, plus slack. */
#define ENTRY_ID_MAX 64

/* ====================================================================== */
/* Rendering                                                              */
/* ====================================================================== */

/* JSON candidates beyond this ordinal in one entry are always strings. */
#define MAX_JSON_FIELDS 32

struct consumer_fmt {
	yajl_gen g;
	struct buf tmp; /* UTF-8-repaired copies of strings */
};

/* See consumer.h. */
bool consumer_is_json_field(const char *name, size_t len)
{
	return (len == 7 && memcmp(name, "payload", 7) == 0) ||
	       (len == 7 && memcmp(name, "headers", 7) == 0);
}

/* See consumer.h. */
struct consumer_fmt *consumer_fmt_create(void)
{
	struct consumer_fmt *f = calloc(1, sizeof(*f));

	if (!f)
		return NULL;
	f->g = yajl_gen_alloc(NULL);
	if (!f->g) {
		free(f);
		return NULL;
	}
	(void)yajl_gen_config(f->g, yajl_gen_beautify, 0);
	/* Belt and braces: gen_string() already hands over valid UTF-8 only. */
	(void)yajl_gen_config(f->g, yajl_gen_validate_utf8, 1);
	return f;
}

/* See consumer.h. */
void consumer_fmt_destroy(struct consumer_fmt *f)
{
	if (!f)
		return;
	yajl_gen_free(f->g);
	buf_finish(&f->tmp);
	free(f);
}

/*
 * Length of the well-formed UTF-8 sequence at s[0..n), or 0 when there is
 * none: stray continuation bytes, overlong forms, surrogates (U+D800..DFFF)
 * and code points above U+10FFFF are all rejected (RFC 3629).
 */
static size_t utf8_seq_len(const unsigned char *s, size_t n)
{
	unsigned char c = s[0];
	size_t need;

	if (c < 0x80)
		return 1;
	if (c < 0xC2) /* continuation byte, or C0/C1 (overlong 2-byte form) */
		return 0;
	if (c < 0xE0)
		need = 2;
	else if (c < 0xF0)
		need = 3;
	else if (c < 0xF5)
		need = 4;
	else
		return 0;
	if (n < need)
		return 0;
	for (size_t i = 1; i < need; i++) {
		if ((s[i] & 0xC0) != 0x80)
			return 0;
	}
	if (c == 0xE0 && s[1] < 0xA0) /* overlong 3-byte form */
		return 0;
	if (c == 0xED && s[1] >= 0xA0) /* UTF-16 surrogate */
		return 0;
	if (c == 0xF0 && s[1] < 0x90) /* overlong 4-byte form */
		return 0;
	if (c == 0xF4 && s[1] >= 0x90) /* above U+10FFFF */
		return 0;
	return need;
}

/*
 * Emit s[0..len) as a JSON string. Invalid UTF-8 is repaired first (each
 * offending byte becomes U+FFFD) in f->tmp. False on a generator error or
 * when out of memory.
 */
static bool gen_string(struct consumer_fmt *f, const void *str, size_t len)
{
	static const char replacement[] = "\xEF\xBF\xBD"; /* U+FFFD */
	const unsigned char *s = str;
	size_t i = 0, k;

	while (i < len && (k = utf8_seq_len(s + i, len - i)) > 0)
		i += k;
	if (i == len)
		return yajl_gen_string(f->g, s, len) == yajl_gen_status_ok;

	buf_reset(&f->tmp);
	buf_append(&f->tmp, s, i);
	while (i < len) {
		k = utf8_seq_len(s + i, len - i);
		if (k > 0) {
			buf_append(&f->tmp, s + i, k);
			i += k;
		} else {
			buf_append(&f->tmp, replacement, 3);
			i++;
		}
	}
	if (f->tmp.failed)
		return false;
	return yajl_gen_string(f->g, (const unsigned char *)f->tmp.data, f->tmp.len) ==
	       yajl_gen_status_ok;
}

/* yajl_parse callbacks copying a JSON text into the generator (ctx: the fmt). */
static int cb_null(void *ctx)
{
	return yajl_gen_null(((struct consumer_fmt *)ctx)->g) == yajl_gen_status_ok;
}

static int cb_boolean(void *ctx, int value)
{
	return yajl_gen_bool(((struct consumer_fmt *)ctx)->g, value) == yajl_gen_status_ok;
}

/* Numbers arrive as their text and are copied digit for digit. */
static int cb_number(void *ctx, const char *s, size_t len)
{
	return yajl_gen_number(((struct consumer_fmt *)ctx)->g, s, len) == yajl_gen_status_ok;
}

static int cb_string(void *ctx, const unsigned char *s, size_t len)
{
	return gen_string(ctx, s, len);
}

static int cb_start_map(void *ctx)
{
	return yajl_gen_map_open(((struct consumer_fmt *)ctx)->g) == yajl_gen_status_ok;
}

static int cb_end_map(void *ctx)
{
	return yajl_gen_map_close(((struct consumer_fmt *)ctx)->g) == yajl_gen_status_ok;
}

static int cb_start_array(void *ctx)
{
	return yajl_gen_array_open(((struct consumer_fmt *)ctx)->g) == yajl_gen_status_ok;
}

static int cb_end_array(void *ctx)
{
	return yajl_gen_array_close(((struct consumer_fmt *)ctx)->g) == yajl_gen_status_ok;
}

static const yajl_callbacks embed_callbacks = {
    .yajl_null = cb_null,
    .yajl_boolean = cb_boolean,
    .yajl_number = cb_number,
    .yajl_string = cb_string,
    .yajl_start_map = cb_start_map,
    .yajl_map_key = cb_string,
    .yajl_end_map = cb_end_map,
    .yajl_start_array = cb_start_array,
    .yajl_end_array = cb_end_array,
};

/*
 * Parse s[0..len) as one JSON text straight into the generator. Returns
 * false when it is not one (or nests deeper than yajl_gen allows); the
 * generator then holds half a value and the line must be started over.
 * *oom is set when the parser could not be allocated.
 */
static bool embed_json(struct consumer_fmt *f, const char *s, size_t len, bool *oom_ret)
{
	yajl_handle h = yajl_alloc(&embed_callbacks, NULL, f);
	bool ok;

	if (!h) {
		*oom_ret = true;
		return false;
	}
	ok = yajl_parse(h, (const unsigned char *)s, len) == yajl_status_ok &&
	     yajl_complete_parse(h) == yajl_status_ok;
	yajl_free(h);
	return ok;
}

/*
 * See consumer.h. A JSON candidate is parsed directly into the line; when
 * it turns out not to be JSON, the line is started over with that candidate
 * (by ordinal, a bit in forced) rendered as a string. Valid JSON, the
 * common case, is therefore parsed once.
 */
bool consumer_fmt_line(struct consumer_fmt *f, const char *stream, size_t stream_len,
                       const char *entry_id, size_t entry_id_len,
                       const struct consumer_field *fields, size_t nfields, const char **ret_line,
                       size_t *ret_len)
{
	uint32_t forced = 0;

	for (;;) {
		const unsigned char *out;
		unsigned candidate = 0;
		bool restart = false, oom_hit = false;
		size_t outlen;

		yajl_gen_reset(f->g, NULL);
		yajl_gen_clear(f->g);
		if (yajl_gen_map_open(f->g) != yajl_gen_status_ok ||
		    !gen_string(f, CONSUMER_KEY_STREAM, strlen(CONSUMER_KEY_STREAM)) ||
		    !gen_string(f, stream, stream_len) ||
		    !gen_string(f, CONSUMER_KEY_ENTRY_ID, strlen(CONSUMER_KEY_ENTRY_ID)) ||
		    !gen_string(f, entry_id, entry_id_len))
			return false;
		for (size_t i = 0; i < nfields && !restart; i++) {
			const struct consumer_field *fl = &fields[i];

			if (!gen_string(f, fl->name, fl->name_len))
				return false;
			if (consumer_is_json_field(fl->name, fl->name_len)) {
				unsigned k = candidate++;

				if (k < MAX_JSON_FIELDS && !(forced & (UINT32_C(1) << k))) {
					if (embed_json(f, fl->value, fl->value_len, &oom_hit))
						continue;
					if (oom_hit)
						return false;
					forced |= UINT32_C(1) << k;
					restart = true;
					continue;
				}
			}
			if (!gen_string(f, fl->value, fl->value_len))
				return false;
		}
		if (restart)
			continue;
		if (yajl_gen_map_close(f->g) != yajl_gen_status_ok)
			return false;
		yajl_gen_reset(f->g, "\n"); /* appends the separator to the buffer now */
		if (yajl_gen_get_buf(f->g, &out, &outlen) != yajl_gen_status_ok)
			return false;
		*ret_line = (const char *)out;
		*ret_len = outlen;
		return true;
	}
}

/* ====================================================================== */
/* The loop                                                               */
/* ====================================================================== */

/* Set by the signal handler; the loop checks it between entries. */
static volatile sig_atomic_t stop_requested;
/* Self-pipe: the handler writes a byte so an interruptible poll() wakes up. */
static int wake_pipe[2] = {-1, -1};

static void on_stop_signal(int sig)
{
	static const char msg[] = PROGNAME ": second signal, exiting now\n";
	int saved = errno;

	(void)sig;
	if (stop_requested) {
		(void)!write(STDERR_FILENO, msg, sizeof(msg) - 1);
		_exit(EXIT_FAILURE_RUNTIME);
	}
	stop_requested = 1;
	if (wake_pipe[1] >= 0)
		(void)!write(wake_pipe[1], "x", 1);
	errno = saved;
}

static bool install_signals(void)
{
	struct sigaction sa;

	if (wake_pipe[0] < 0 && pipe2(wake_pipe, O_NONBLOCK | O_CLOEXEC) != 0)
		return false;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_stop_signal;
	sigemptyset(&sa.sa_mask);
	sa.sa_flags = SA_RESTART; /* stdout writes resume; poll() still wakes on the pipe */
	if (sigaction(SIGINT, &sa, NULL) != 0 || sigaction(SIGTERM, &sa, NULL) != 0)
		return false;
	sa.sa_handler = SIG_IGN;
	sa.sa_flags = 0;
	return sigaction(SIGPIPE, &sa, NULL) == 0;
}

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
	redisContext *ctx;
	void *ssl;      /* ctx's TLS session, NULL for plain connections */
	char desc[300]; /* Redis target without credentials, for messages */
	/* Redis Cluster (cf->redis.cluster): the slot map and node connections;
	 * ctx, ssl and desc are then those of node, the one the next command goes to. */
	struct ccluster *cl;
	struct ccluster_conn *node;

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
	int64_t next_scan_us, next_claim_us;
	bool dead_letter_noted; /* said once that --stream-pattern skips it */

	int exit_code;     /* with STEP_FATAL */
	char errmsg[1024]; /* with STEP_RETRY and STEP_FATAL */
};

static enum step fail(struct consumer *c, enum step st, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Record errmsg (and the exit code for STEP_FATAL); returns st. */
static enum step fail(struct consumer *c, enum step st, int code, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	(void)vsnprintf(c->errmsg, sizeof(c->errmsg), fmt, ap);
	va_end(ap);
	c->exit_code = code;
	return st;
}

static int64_t ms_until(int64_t when_us, int64_t now_us)
{
	return when_us > now_us ? (when_us - now_us + 999) / 1000 : 0;
}

/* Sleep up to ms, waking early on a stop signal. */
static void sleep_interruptible(int64_t ms)
{
	int64_t deadline = time_mono_us() + ms * 1000;

	while (!stop_requested) {
		int64_t left = ms_until(deadline, time_mono_us());
		struct pollfd p = {.fd = wake_pipe[0], .events = POLLIN};

		if (left <= 0)
			break;
		(void)poll(&p, 1, left > INT_MAX ? INT_MAX : (int)left);
	}
}

static bool is_string(const redisReply *r)
{
	return r && (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS);
}

static bool is_array(const redisReply *r)
{
	return r && r->type == REDIS_REPLY_ARRAY;
}

/*
 * Send one command and wait at most timeout_ms for its reply. Returns the
 * reply (caller frees; it may be an error reply) or NULL with *st set:
 * STEP_STOP when interruptible and a stop signal came while no reply had
 * started to arrive, otherwise STEP_RETRY with errmsg (the connection is
 * then unusable). A reply already on its way is read even after a signal,
 * so entries Redis handed over are still printed.
 */
static redisReply *command_once(struct consumer *c, int argc, const char **argv, const size_t *lens,
                                int64_t timeout_ms, bool interruptible, enum step *st)
{
	redisContext *ctx = c->ctx;
	int64_t deadline = time_mono_us() + timeout_ms * 1000;
	int done = 0;

	if (redisAppendCommandArgv(ctx, argc, argv, lens) != REDIS_OK) {
		*st = fail(c, STEP_RETRY, 0, "could not queue %s: %s", argv[0], ctx->errstr);
		return NULL;
	}
	do {
		if (redisBufferWrite(ctx, &done) != REDIS_OK) {
			*st = fail(c, STEP_RETRY, 0, "could not send %s to Redis at %s: %s", argv[0], c->desc,
			           ctx->errstr);
			return NULL;
		}
	} while (!done);

	for (;;) {
		struct pollfd p[2] = {{.fd = ctx->fd, .events = POLLIN},
		                      {.fd = wake_pipe[0], .events = POLLIN}};
		void *reply = NULL;
		int64_t left;
		int rc;

		if (redisReaderGetReply(ctx->reader, &reply) != REDIS_OK) {
			*st = fail(c, STEP_RETRY, 0, "bad reply to %s from Redis at %s: %s", argv[0], c->desc,
			           ctx->reader->errstr);
			return NULL;
		}
		if (reply)
			return reply;
		/* TLS may hold bytes it already read off the socket: poll() cannot see them. */
		if (c->ssl && redis_tls_pending(c->ssl)) {
			if (redisBufferRead(ctx) != REDIS_OK) {
				*st = fail(c, STEP_RETRY, 0, "lost the connection to Redis at %s: %s", c->desc,
				           ctx->errstr);
				return NULL;
			}
			continue;
		}
		left = ms_until(deadline, time_mono_us());
		if (left <= 0) {
			*st = fail(c, STEP_RETRY, 0, "no reply to %s from Redis at %s within %" PRId64 " ms",
			           argv[0], c->desc, timeout_ms);
			return NULL;
		}
		rc = poll(p, interruptible ? 2 : 1, left > INT_MAX ? INT_MAX : (int)left);
		if (rc < 0 && errno != EINTR) {
			*st = fail(c, STEP_RETRY, 0, "poll: %s", strerror(errno));
			return NULL;
		}
		if (rc > 0 && (p[0].revents & (POLLIN | POLLHUP | POLLERR))) {
			if (redisBufferRead(ctx) != REDIS_OK) {
				*st = fail(c, STEP_RETRY, 0, "lost the connection to Redis at %s: %s", c->desc,
				           ctx->errstr);
				return NULL;
			}
			continue;
		}
		if (interruptible && stop_requested) {
			*st = STEP_STOP;
			return NULL;
		}
	}
}

/* Redis Cluster: send the next commands to node n. */
static void use_node(struct consumer *c, struct ccluster_conn *n)
{
	c->node = n;
	c->ctx = n->c;
	c->ssl = n->ssl;
	(void)snprintf(c->desc, sizeof(c->desc), "%s", n->desc);
}

/* A failed node lookup or connection: permanent (credentials, ACL) or retried. */
static enum step node_failed(struct consumer *c, bool permanent, const char *err)
{
	if (permanent)
		return fail(c, STEP_FATAL, EXIT_REDIS_SETUP, "%s", err);
	return fail(c, STEP_RETRY, 0, "%s", err);
}

/* Redis Cluster: send the next commands to the master of key's slot. No-op on one server. */
static enum step route_key(struct consumer *c, const char *key)
{
	struct ccluster_conn *n;
	char err[600];
	bool permanent;

	if (!c->cl)
		return STEP_OK;
	n = ccluster_for_key(c->cl, key, strlen(key), &permanent, err, sizeof(err));
	if (!n)
		return node_failed(c, permanent, err);
	use_node(c, n);
	return STEP_OK;
}

/*
 * command_once(), and in a cluster the redirections: a MOVED reply reads the
 * slot map again and sends the command to the node it names (later commands
 * on that key follow the new map), an ASK reply sends ASKING and the command
 * to the node it names (the map stays: the slot is still being migrated).
 */
static redisReply *command(struct consumer *c, int argc, const char **argv, const size_t *lens,
                           int64_t timeout_ms, bool interruptible, enum step *st)
{
	redisReply *r = command_once(c, argc, argv, lens, timeout_ms, interruptible, st);

	for (int hop = 0; c->cl && r && r->type == REDIS_REPLY_ERROR; hop++) {
		char host[CLUSTER_SLOTS_HOST_MAX + 1], err[600];
		struct ccluster_conn *n;
		bool ask, permanent;
		unsigned slot;
		int port;

		if (!cluster_slots_redirect(r->str, &ask, &slot, host, sizeof(host), &port))
			break;
		if (hop == CCLUSTER_MAX_REDIRECTS) {
			*st = fail(c, STEP_RETRY, 0, "%s: still redirected after %d hops (%s)", argv[0],
			           CCLUSTER_MAX_REDIRECTS, r->str);
			freeReplyObject(r);
			return NULL;
		}
		if (!host[0]) /* "MOVED 12 :6379": the node that answered */
			(void)snprintf(host, sizeof(host), "%s", c->node->host);
		log_info("%s: %s from %s; following it", argv[0], r->str, c->desc);
		freeReplyObject(r);
		if (!ask && !ccluster_refresh(c->cl, &permanent, err, sizeof(err))) {
			*st = node_failed(c, permanent, err);
			return NULL;
		}
		n = ccluster_for_addr(c->cl, host, port, &permanent, err, sizeof(err));
		if (!n) {
			*st = node_failed(c, permanent, err);
			return NULL;
		}
		use_node(c, n);
		if (ask) {
			const char *asking[1] = {"ASKING"};

			r = command_once(c, 1, asking, NULL, CMD_TIMEOUT_MS, false, st);
			if (!r)
				return NULL;
			if (r->type == REDIS_REPLY_ERROR) {
				*st = fail(c, STEP_RETRY, 0, "ASKING on %s failed: %s", c->desc, r->str);
				freeReplyObject(r);
				return NULL;
			}
			freeReplyObject(r);
		}
		r = command_once(c, argc, argv, lens, timeout_ms, interruptible, st);
	}
	return r;
}

/* Classify an unexpected error reply to `what` on stream key. */
static enum step error_reply(struct consumer *c, const char *what, const char *key, const char *msg)
{
	if (redis_conn_error_permanent(msg))
		return fail(c, STEP_FATAL, EXIT_REDIS_SETUP, "Redis at %s refused %s: %s", c->desc, what,
		            msg);
	if (strstr(msg, "unknown command") || strstr(msg, "unknown subcommand") ||
	    strstr(msg, "syntax error"))
		return fail(c, STEP_FATAL, EXIT_REDIS_SETUP,
		            "Redis at %s does not support %s (%s); %s needs Redis 6.2 or later%s", c->desc,
		            what, msg, PROGNAME,
		            strcmp(what, "XAUTOCLAIM") == 0 ? ", or pass --claim-min-idle 0" : "");
	if (strncmp(msg, "WRONGTYPE", 9) == 0)
		return fail(c, STEP_FATAL, EXIT_REDIS_SETUP, "key \"%s\" is not a stream (%s)",
		            key ? key : "?", msg);
	return fail(c, STEP_RETRY, 0, "%s%s%s%s failed: %s", what, key ? " on stream \"" : "",
	            key ? key : "", key ? "\"" : "", msg);
}

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
		return fail(c, STEP_FATAL, EXIT_REDIS_SETUP,
		            "consumer group \"%s\" does not exist on stream \"%s\" (%s); create "
		            "it (outbox-relay --group %s does) or pass --create-group",
		            cf->group, s->key, msg, cf->group);
	if (cf->create_group)
		return fail(c, STEP_RETRY, 0,
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
	enum step st = route_key(c, key);
	redisReply *r;

	if (st != STEP_OK)
		return st;
	c->ack_argv[0] = "XACK";
	c->ack_lens[0] = 4;
	c->ack_argv[1] = key;
	c->ack_lens[1] = strlen(key);
	c->ack_argv[2] = c->cf->group;
	c->ack_lens[2] = strlen(c->cf->group);
	r = command(c, (int)(n + 3), c->ack_argv, c->ack_lens, CMD_TIMEOUT_MS, false, &st);
	if (!r)
		return st;
	if (r->type == REDIS_REPLY_ERROR)
		st = error_reply(c, "XACK", key, r->str);
	else if (r->type != REDIS_REPLY_INTEGER)
		st = fail(c, STEP_RETRY, 0, "unexpected reply to XACK on stream \"%s\"", key);
	freeReplyObject(r);
	return st;
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
                               char *last, size_t lastlen)
{
	enum step st = STEP_OK, ack_st;
	size_t nack = 0;

	if (!grow_scratch(c, 0, entries->elements + 3))
		return fail(c, STEP_FATAL, EXIT_FAILURE_RUNTIME, "out of memory");
	for (size_t i = 0; i < entries->elements && st == STEP_OK; i++) {
		const redisReply *e = entries->element[i], *id, *kv;
		const char *line;
		size_t linelen, nf;

		if (e->type == REDIS_REPLY_NIL)
			continue; /* Redis 6.2 XAUTOCLAIM: deleted entry, no id to acknowledge */
		if (!is_array(e) || e->elements != 2 || !is_string(e->element[0]) ||
		    e->element[0]->len >= ENTRY_ID_MAX) {
			st = fail(c, STEP_RETRY, 0, "malformed stream entry from stream \"%s\"", key);
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
		if (!is_array(kv) || kv->elements % 2 != 0) {
			st = fail(c, STEP_RETRY, 0, "malformed fields of entry %s of stream \"%s\"", id->str,
			          key);
			break;
		}
		nf = kv->elements / 2;
		if (!grow_scratch(c, nf, 0)) {
			st = fail(c, STEP_FATAL, EXIT_FAILURE_RUNTIME, "out of memory");
			break;
		}
		for (size_t j = 0; j < nf; j++) {
			const redisReply *n = kv->element[2 * j], *v = kv->element[2 * j + 1];

			if (!is_string(n) || !is_string(v)) {
				st = fail(c, STEP_RETRY, 0, "malformed fields of entry %s of stream \"%s\"",
				          id->str, key);
				break;
			}
			c->fields[j] = (struct consumer_field){n->str, n->len, v->str, v->len};
		}
		if (st != STEP_OK)
			break;
		if (!consumer_fmt_line(c->fmt, key, strlen(key), id->str, id->len, c->fields, nf, &line,
		                       &linelen)) {
			st = fail(c, STEP_FATAL, EXIT_FAILURE_RUNTIME, "out of memory");
			break;
		}
		if (fwrite(line, 1, linelen, stdout) != linelen) {
			st = fail(c, STEP_FATAL, EXIT_FAILURE_RUNTIME, "could not write to standard output: %s",
			          strerror(errno));
			break;
		}
		c->ack_argv[3 + nack] = id->str;
		c->ack_lens[3 + nack++] = id->len;
		c->printed++;
		if (c->cf->count > 0 && c->printed >= (uint64_t)c->cf->count)
			st = STEP_DONE;
		else if (stop_requested)
			st = STEP_STOP;
	}
	if (nack == 0 || st == STEP_FATAL)
		return st;
	/* At-least-once: the lines must be out before their entries are acknowledged. */
	if (fflush(stdout) != 0)
		return fail(c, STEP_FATAL, EXIT_FAILURE_RUNTIME, "could not write to standard output: %s",
		            strerror(errno));
	ack_st = xack(c, key, nack);
	return ack_st != STEP_OK ? ack_st : st;
}

/* XGROUP CREATE key group 0 MKSTREAM; an existing group is fine. */
static enum step create_group(struct consumer *c, struct cstream *s)
{
	const char *argv[6] = {"XGROUP", "CREATE", s->key, c->cf->group, "0", "MKSTREAM"};
	enum step st = route_key(c, s->key);
	redisReply *r;

	if (st != STEP_OK)
		return st;
	r = command(c, 6, argv, NULL, CMD_TIMEOUT_MS, false, &st);
	if (!r)
		return st;
	if (r->type == REDIS_REPLY_ERROR && strncmp(r->str, "BUSYGROUP", 9) != 0)
		st = error_reply(c, "XGROUP CREATE", s->key, r->str);
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
	if (!is_array(r)) {
		*bad = true;
		return NULL;
	}
	if (r->elements == 0)
		return NULL;
	s = r->element[0];
	if (!is_array(s) || s->elements != 2 || !is_array(s->element[1])) {
		*bad = true;
		return NULL;
	}
	return s->element[1]->elements > 0 ? s->element[1] : NULL;
}

/*
 * Read this consumer's own pending entries of s (delivered to this consumer
 * name earlier but never acknowledged): XREADGROUP with ID 0, then after the
 * last id seen, until none are left. Then s is live.
 */
static enum step read_own_pending(struct consumer *c, struct cstream *s)
{
	char last[ENTRY_ID_MAX] = "0", count[24];
	const char *argv[9] = {"XREADGROUP", "GROUP", c->cf->group, c->cf->consumer, "COUNT", count,
	                       "STREAMS",    s->key,  last};

	for (;;) {
		enum step st = STEP_OK;
		const redisReply *entries;
		redisReply *r;
		bool bad;

		if (stop_requested)
			return STEP_STOP;
		(void)snprintf(count, sizeof(count), "%" PRIu64, want(c));
		st = route_key(c, s->key);
		if (st != STEP_OK)
			return st;
		r = command(c, 9, argv, NULL, CMD_TIMEOUT_MS, false, &st);
		if (!r)
			return st;
		if (is_nogroup(r)) {
			st = no_group(c, s, r->str);
			freeReplyObject(r);
			return st;
		}
		if (r->type == REDIS_REPLY_ERROR) {
			st = error_reply(c, "XREADGROUP", s->key, r->str);
			freeReplyObject(r);
			return st;
		}
		entries = single_stream_entries(r, &bad);
		if (bad) {
			freeReplyObject(r);
			return fail(c, STEP_RETRY, 0, "unexpected reply to XREADGROUP on \"%s\"", s->key);
		}
		if (!entries) {
			freeReplyObject(r);
			s->live = true;
			return STEP_OK;
		}
		log_info("re-reading %zu pending entr%s of stream \"%s\" delivered earlier to "
		         "consumer \"%s\"",
		         entries->elements, entries->elements == 1 ? "y" : "ies", s->key, c->cf->consumer);
		st = print_entries(c, s->key, entries, last, sizeof(last));
		freeReplyObject(r);
		if (st != STEP_OK)
			return st;
	}
}

/* XAUTOCLAIM entries of s idle longer than --claim-min-idle, print and acknowledge them. */
static enum step claim_stream(struct consumer *c, struct cstream *s)
{
	char start[ENTRY_ID_MAX] = "0-0", idle[24], count[24];
	const char *argv[8] = {"XAUTOCLAIM", s->key, c->cf->group, c->cf->consumer,
	                       idle,         start,  "COUNT",      count};

	(void)snprintf(idle, sizeof(idle), "%" PRId64, c->cf->claim_idle_ms);
	do {
		enum step st = STEP_OK;
		const redisReply *entries;
		redisReply *r;

		if (stop_requested)
			return STEP_STOP;
		(void)snprintf(count, sizeof(count), "%" PRIu64, want(c));
		st = route_key(c, s->key);
		if (st != STEP_OK)
			return st;
		r = command(c, 8, argv, NULL, CMD_TIMEOUT_MS, false, &st);
		if (!r)
			return st;
		if (is_nogroup(r)) {
			s->live = false; /* read_own_pending() sorts it out next step */
			freeReplyObject(r);
			return STEP_OK;
		}
		if (r->type == REDIS_REPLY_ERROR) {
			st = error_reply(c, "XAUTOCLAIM", s->key, r->str);
			freeReplyObject(r);
			return st;
		}
		/* [next start, entries] (6.2), plus [deleted ids] since 7.0. */
		if (!is_array(r) || r->elements < 2 || !is_string(r->element[0]) ||
		    r->element[0]->len >= ENTRY_ID_MAX || !is_array(r->element[1])) {
			freeReplyObject(r);
			return fail(c, STEP_RETRY, 0, "unexpected reply to XAUTOCLAIM on \"%s\"", s->key);
		}
		(void)snprintf(start, sizeof(start), "%s", r->element[0]->str);
		entries = r->element[1];
		if (entries->elements > 0) {
			log_info("claimed %zu entr%s of stream \"%s\" pending for more than %" PRId64 " ms",
			         entries->elements, entries->elements == 1 ? "y" : "ies", s->key,
			         c->cf->claim_idle_ms);
			st = print_entries(c, s->key, entries, NULL, 0);
		}
		freeReplyObject(r);
		if (st != STEP_OK)
			return st;
	} while (strcmp(start, "0-0") != 0);
	return STEP_OK;
}

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

/* One full SCAN of the current connection's server: add new streams, mark the known ones seen. */
static enum step scan_node(struct consumer *c)
{
	char cursor[32] = "0";
	const char *argv[8] = {"SCAN", cursor,   "MATCH", c->cf->stream_pattern,
	                       "TYPE", "stream", "COUNT", SCAN_COUNT};

	do {
		enum step st = STEP_OK;
		redisReply *r = command(c, 8, argv, NULL, CMD_TIMEOUT_MS, false, &st), *keys;

		if (!r)
			return st;
		if (r->type == REDIS_REPLY_ERROR) {
			st = error_reply(c, "SCAN ... TYPE", NULL, r->str);
			freeReplyObject(r);
			return st;
		}
		if (!is_array(r) || r->elements != 2 || !is_string(r->element[0]) ||
		    r->element[0]->len >= sizeof(cursor) || !is_array(r->element[1])) {
			freeReplyObject(r);
			return fail(c, STEP_RETRY, 0, "unexpected reply to SCAN");
		}
		(void)snprintf(cursor, sizeof(cursor), "%s", r->element[0]->str);
		keys = r->element[1];
		for (size_t i = 0; i < keys->elements; i++) {
			const redisReply *k = keys->element[i];
			struct cstream *s;

			if (!is_string(k))
				continue;
			s = find_stream(c, k->str, k->len);
			if (s) {
				s->seen = true;
				continue;
			}
			if (!c->cf->include_dead_letter && c->cf->dead_letter_stream &&
			    strlen(c->cf->dead_letter_stream) == k->len &&
			    memcmp(c->cf->dead_letter_stream, k->str, k->len) == 0) {
				if (!c->dead_letter_noted)
					log_info("not reading the dead-letter stream \"%s\" (matches \"%s\"): "
					         "its entries are not events; --include-dead-letter reads it",
					         c->cf->dead_letter_stream, c->cf->stream_pattern);
				c->dead_letter_noted = true;
				continue;
			}
			if (!add_stream(c, k->str, k->len, false)) {
				freeReplyObject(r);
				return fail(c, STEP_FATAL, EXIT_FAILURE_RUNTIME, "out of memory");
			}
			log_info("reading stream \"%s\" (matches \"%s\")", c->streams[c->nstreams - 1].key,
			         c->cf->stream_pattern);
		}
		freeReplyObject(r);
	} while (strcmp(cursor, "0") != 0);
	return STEP_OK;
}

/*
 * SCAN for --stream-pattern streams: add new ones, drop vanished ones. In a
 * cluster every master holds some of the keys: each is scanned in turn (a
 * stream whose slot moves meanwhile may be missed by both; it is found again
 * at the next scan, its pending entries with it).
 */
static enum step scan_streams(struct consumer *c)
{
	size_t kept = 0;
	enum step st;

	for (size_t i = 0; i < c->nstreams; i++)
		c->streams[i].seen = c->streams[i].listed;
	if (!c->cl) {
		st = scan_node(c);
		if (st != STEP_OK)
			return st;
	}
	for (int m = 0; c->cl && m < ccluster_nmasters(c->cl); m++) {
		struct ccluster_conn *n;
		char err[600];
		bool permanent;

		n = ccluster_master(c->cl, m, &permanent, err, sizeof(err));
		if (!n)
			return node_failed(c, permanent, err);
		use_node(c, n);
		st = scan_node(c);
		if (st != STEP_OK)
			return st;
	}

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
		return fail(c, STEP_FATAL, EXIT_FAILURE_RUNTIME, "out of memory");
	if (c->cl) { /* in a cluster read_new() reads one stream per call */
		st = route_key(c, c->streams[idx[0]].key);
		if (st != STEP_OK) {
			free(argv);
			return st;
		}
	}
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

	r = command(c, (int)argc, argv, NULL, (block_ms > 0 ? block_ms : 0) + CMD_TIMEOUT_MS,
	            block_ms > 0, &st);
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
		st = error_reply(c, "XREADGROUP", n == 1 ? c->streams[idx[0]].key : NULL, r->str);
		freeReplyObject(r);
		return st;
	}
	if (r->type == REDIS_REPLY_NIL) { /* BLOCK timed out */
		freeReplyObject(r);
		return STEP_OK;
	}
	if (!is_array(r)) {
		freeReplyObject(r);
		return fail(c, STEP_RETRY, 0, "unexpected reply to XREADGROUP");
	}
	for (size_t i = 0; i < r->elements && st == STEP_OK; i++) {
		const redisReply *s = r->element[i];
		char key[1024];

		if (!is_array(s) || s->elements != 2 || !is_string(s->element[0]) ||
		    !is_array(s->element[1])) {
			st = fail(c, STEP_RETRY, 0, "unexpected reply to XREADGROUP");
			break;
		}
		if (s->element[1]->elements == 0)
			continue;
		*got = true;
		/* The key as a C string for messages and XACK; stream keys are short. */
		if (s->element[0]->len >= sizeof(key) ||
		    memchr(s->element[0]->str, '\0', s->element[0]->len)) {
			st = fail(c, STEP_FATAL, EXIT_FAILURE_RUNTIME,
			          "stream key of %zu bytes is not supported", s->element[0]->len);
			break;
		}
		memcpy(key, s->element[0]->str, s->element[0]->len);
		key[s->element[0]->len] = '\0';
		st = print_entries(c, key, s->element[1], NULL, 0);
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
		sleep_interruptible(block < CLUSTER_POLL_MS ? block : CLUSTER_POLL_MS);
	return stop_requested ? STEP_STOP : STEP_OK;
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
static enum step read_new(struct consumer *c, int64_t now_us)
{
	const struct consumer_config *cf = c->cf;
	int64_t block = cf->block_ms;
	size_t n = 0, *idx;
	uint64_t per;
	enum step st;
	bool got;

	if (cf->stream_pattern && ms_until(c->next_scan_us, now_us) < block)
		block = ms_until(c->next_scan_us, now_us);
	if (cf->claim_idle_ms > 0 && ms_until(c->next_claim_us, now_us) < block)
		block = ms_until(c->next_claim_us, now_us);
	if (block < 1)
		block = 1; /* BLOCK 0 would wait forever */

	idx = malloc((c->nstreams ? c->nstreams : 1) * sizeof(*idx));
	if (!idx)
		return fail(c, STEP_FATAL, EXIT_FAILURE_RUNTIME, "out of memory");
	for (size_t i = 0; i < c->nstreams; i++) {
		if (c->streams[i].live && !c->streams[i].skipped)
			idx[n++] = i;
	}
	if (n == 0) {
		free(idx);
		sleep_interruptible(block);
		return stop_requested ? STEP_STOP : STEP_OK;
	}
	if (c->cl) {
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

/* One round: discovery, own pending entries, claims, new entries. */
static enum step step_once(struct consumer *c)
{
	const struct consumer_config *cf = c->cf;
	int64_t now = time_mono_us();
	enum step st;

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
			st = create_group(c, s);
			if (st != STEP_OK)
				return st;
		}
		st = read_own_pending(c, s);
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
			st = claim_stream(c, &c->streams[i]);
			if (st != STEP_OK)
				return st;
		}
		c->next_claim_us = now + every * 1000;
	}
	return read_new(c, time_mono_us());
}

static void disconnect(struct consumer *c)
{
	if (c->cl) {
		ccluster_disconnect(c->cl);
		c->ctx = NULL;
		c->ssl = NULL;
		c->node = NULL;
		return;
	}
	if (c->ctx) {
		redisFree(c->ctx);
		c->ctx = NULL;
		c->ssl = NULL;
	}
}

/* Redis Cluster: read the slot map and connect to its first master. */
static bool connect_cluster(struct consumer *c, bool *ret_permanent, char *err, size_t errlen)
{
	struct ccluster_conn *n;

	if (!ccluster_refresh(c->cl, ret_permanent, err, errlen))
		return false;
	n = ccluster_master(c->cl, 0, ret_permanent, err, errlen);
	if (!n)
		return false;
	use_node(c, n);
	return true;
}

static int64_t backoff_ms(int attempt)
{
	int64_t ms = RETRY_BASE_MS;

	for (int i = 0; i < attempt && ms < RETRY_MAX_MS; i++)
		ms *= 2;
	return ms < RETRY_MAX_MS ? ms : RETRY_MAX_MS;
}

static void consumer_finish(struct consumer *c)
{
	disconnect(c);
	ccluster_destroy(c->cl);
	for (size_t i = 0; i < c->nstreams; i++)
		free(c->streams[i].key);
	free(c->streams);
	free(c->fields);
	free(c->ack_argv);
	free(c->ack_lens);
	consumer_fmt_destroy(c->fmt);
}

/* See consumer.h. */
int consumer_run(const struct consumer_config *cf)
{
	struct consumer c;
	int rc = EXIT_OK, attempt = 0;

	memset(&c, 0, sizeof(c));
	c.cf = cf;
	(void)redis_target_describe(&cf->redis, c.desc, sizeof(c.desc));
	if (!install_signals()) {
		log_error("could not install signal handlers: %s", strerror(errno));
		return EXIT_FAILURE_RUNTIME;
	}
	c.fmt = consumer_fmt_create();
	if (!c.fmt) {
		log_error("out of memory");
		return EXIT_FAILURE_RUNTIME;
	}
	if (cf->redis.cluster) {
		c.cl = ccluster_create(&cf->redis, CMD_TIMEOUT_MS);
		if (!c.cl) {
			log_error("out of memory");
			consumer_finish(&c);
			return EXIT_FAILURE_RUNTIME;
		}
	}
	for (size_t i = 0; i < cf->nstreams; i++) {
		if (!add_stream(&c, cf->streams[i], strlen(cf->streams[i]), true)) {
			log_error("out of memory");
			consumer_finish(&c);
			return EXIT_FAILURE_RUNTIME;
		}
	}

	while (!stop_requested) {
		enum step st;

		if (!c.ctx) {
			char err[1024];
			bool permanent;
			int64_t delay;

			if (c.cl)
				(void)connect_cluster(&c, &permanent, err, sizeof(err));
			else {
				struct redis_conn one;

				permanent = redis_conn_connect(&one, &cf->redis, CMD_TIMEOUT_MS, err,
				                               sizeof(err)) == REDIS_CONN_PERMANENT;
				c.ctx = one.c;
				c.ssl = one.ssl;
			}
			if (!c.ctx) {
				if (permanent) {
					log_error("%s", err);
					rc = EXIT_REDIS_SETUP;
					break;
				}
				delay = backoff_ms(attempt++);
				log_warn("%s; retrying in %" PRId64 " ms", err, delay);
				sleep_interruptible(delay);
				continue;
			}
			if (c.cl) {
				char where[300];

				log_info("connected to Redis %s: %d masters, as consumer \"%s\" of group "
				         "\"%s\"",
				         redis_target_describe(&cf->redis, where, sizeof(where)),
				         ccluster_nmasters(c.cl), cf->consumer, cf->group);
			} else
				log_info("connected to Redis at %s as consumer \"%s\" of group \"%s\"", c.desc,
				         cf->consumer, cf->group);
			/* Entries may have been delivered whose replies were lost: read this
			 * consumer's pending entries again before anything new. */
			for (size_t i = 0; i < c.nstreams; i++)
				c.streams[i].live = false;
			c.next_scan_us = c.next_claim_us = time_mono_us();
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
		disconnect(&c);
		{
			int64_t delay = backoff_ms(attempt++);

			log_warn("%s; reconnecting in %" PRId64 " ms", c.errmsg, delay);
			sleep_interruptible(delay);
		}
	}
	if (rc == EXIT_OK)
		log_info("exiting after %" PRIu64 " event%s printed: %s", c.printed,
		         c.printed == 1 ? "" : "s",
		         stop_requested ? "stopped by a signal" : "--count reached");
	consumer_finish(&c);
	return rc;
}
