/*
 * consumer_command.c - outbox-consume's one Redis command at a time, and the
 * stop signals that may cut a wait short.
 *
 * I/O uses hiredis's blocking context, but replies are awaited with poll()
 * on the socket and a self-pipe the signal handler writes to, so SIGTERM
 * ends a BLOCK wait at once instead of after up to --block-timeout. Only that
 * wait is interruptible; XACK and the rest always run to completion. In a
 * Redis Cluster (consumer_cluster.h) each command goes to the master of its
 * stream's slot and MOVED and ASK replies are followed. Error replies no
 * retry fixes end the program (consumer_error_reply()).
 */
#include "consumer_int.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "exitcode.h"
#include "log.h"
#include "lsn.h"
#include "redis_conn.h"
#include "redis_tls.h"

/* See consumer_int.h. */
volatile sig_atomic_t consumer_stop_requested;
/* Self-pipe: the handler writes a byte so an interruptible poll() wakes up. */
static int wake_pipe[2] = {-1, -1};

static void on_stop_signal(int sig)
{
	static const char msg[] = PROGNAME ": second signal, exiting now\n";
	int saved = errno;

	(void)sig;
	if (consumer_stop_requested) {
		(void)!write(STDERR_FILENO, msg, sizeof(msg) - 1);
		_exit(EXIT_FAILURE_RUNTIME);
	}
	consumer_stop_requested = 1;
	if (wake_pipe[1] >= 0)
		(void)!write(wake_pipe[1], "x", 1);
	errno = saved;
}

/* See consumer_int.h. */
bool consumer_install_signals(void)
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

/* Record errmsg (and the exit code for STEP_FATAL); returns st. */
enum step consumer_fail(struct consumer *c, enum step st, int code, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	(void)vsnprintf(c->errmsg, sizeof(c->errmsg), fmt, ap);
	va_end(ap);
	c->exit_code = code;
	return st;
}

/* Sleep up to ms, waking early on a stop signal. */
void consumer_sleep(int64_t ms)
{
	int64_t deadline = time_mono_us() + ms * 1000;

	while (!consumer_stop_requested) {
		int64_t left = consumer_ms_until(deadline, time_mono_us());
		struct pollfd p = {.fd = wake_pipe[0], .events = POLLIN};

		if (left <= 0)
			break;
		(void)poll(&p, 1, left > INT_MAX ? INT_MAX : (int)left);
	}
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
		*st = consumer_fail(c, STEP_RETRY, 0, "could not queue %s: %s", argv[0], ctx->errstr);
		return NULL;
	}
	do {
		if (redisBufferWrite(ctx, &done) != REDIS_OK) {
			*st = consumer_fail(c, STEP_RETRY, 0, "could not send %s to Redis at %s: %s", argv[0],
			                    c->desc, ctx->errstr);
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
			*st = consumer_fail(c, STEP_RETRY, 0, "bad reply to %s from Redis at %s: %s", argv[0],
			                    c->desc, ctx->reader->errstr);
			return NULL;
		}
		if (reply)
			return reply;
		/* TLS may hold bytes it already read off the socket: poll() cannot see them. */
		if (c->ssl && redis_tls_pending(c->ssl)) {
			if (redisBufferRead(ctx) != REDIS_OK) {
				*st = consumer_fail(c, STEP_RETRY, 0, "lost the connection to Redis at %s: %s",
				                    c->desc, ctx->errstr);
				return NULL;
			}
			continue;
		}
		left = consumer_ms_until(deadline, time_mono_us());
		if (left <= 0) {
			*st = consumer_fail(c, STEP_RETRY, 0,
			                    "no reply to %s from Redis at %s within %" PRId64 " ms", argv[0],
			                    c->desc, timeout_ms);
			return NULL;
		}
		rc = poll(p, interruptible ? 2 : 1, left > INT_MAX ? INT_MAX : (int)left);
		if (rc < 0 && errno != EINTR) {
			*st = consumer_fail(c, STEP_RETRY, 0, "poll: %s", strerror(errno));
			return NULL;
		}
		if (rc > 0 && (p[0].revents & (POLLIN | POLLHUP | POLLERR))) {
			if (redisBufferRead(ctx) != REDIS_OK) {
				*st = consumer_fail(c, STEP_RETRY, 0, "lost the connection to Redis at %s: %s",
				                    c->desc, ctx->errstr);
				return NULL;
			}
			continue;
		}
		if (interruptible && consumer_stop_requested) {
			*st = STEP_STOP;
			return NULL;
		}
	}
}

/* Redis Cluster: send the next commands to node n. */
void consumer_use_node(struct consumer *c, struct ccluster_conn *n)
{
	c->node = n;
	c->ctx = n->c;
	c->ssl = n->ssl;
	(void)snprintf(c->desc, sizeof(c->desc), "%s", n->desc);
}

/* A failed node lookup or connection: permanent (credentials, ACL) or retried. */
enum step consumer_node_failed(struct consumer *c, bool permanent, const char *err)
{
	if (permanent)
		return consumer_fail(c, STEP_FATAL, EXIT_REDIS_SETUP, "%s", err);
	return consumer_fail(c, STEP_RETRY, 0, "%s", err);
}

/* Redis Cluster: send the next commands to the master of key's slot. No-op on one server. */
enum step consumer_route_key(struct consumer *c, const char *key)
{
	struct ccluster_conn *n;
	char err[600];
	bool permanent;

	if (!c->cl)
		return STEP_OK;
	n = ccluster_for_key(c->cl, key, strlen(key), &permanent, err, sizeof(err));
	if (!n)
		return consumer_node_failed(c, permanent, err);
	consumer_use_node(c, n);
	return STEP_OK;
}

/*
 * command_once(), and in a cluster the redirections: a MOVED reply reads the
 * slot map again and sends the command to the node it names (later commands
 * on that key follow the new map), an ASK reply sends ASKING and the command
 * to the node it names (the map stays: the slot is still being migrated).
 */
redisReply *consumer_command(struct consumer *c, int argc, const char **argv, const size_t *lens,
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
			*st = consumer_fail(c, STEP_RETRY, 0, "%s: still redirected after %d hops (%s)",
			                    argv[0], CCLUSTER_MAX_REDIRECTS, r->str);
			freeReplyObject(r);
			return NULL;
		}
		if (!host[0]) /* "MOVED 12 :6379": the node that answered */
			(void)snprintf(host, sizeof(host), "%s", c->node->host);
		log_info("%s: %s from %s; following it", argv[0], r->str, c->desc);
		freeReplyObject(r);
		if (!ask && !ccluster_refresh(c->cl, &permanent, err, sizeof(err))) {
			*st = consumer_node_failed(c, permanent, err);
			return NULL;
		}
		n = ccluster_for_addr(c->cl, host, port, &permanent, err, sizeof(err));
		if (!n) {
			*st = consumer_node_failed(c, permanent, err);
			return NULL;
		}
		consumer_use_node(c, n);
		if (ask) {
			const char *asking[1] = {"ASKING"};

			r = command_once(c, 1, asking, NULL, CMD_TIMEOUT_MS, false, st);
			if (!r)
				return NULL;
			if (r->type == REDIS_REPLY_ERROR) {
				*st = consumer_fail(c, STEP_RETRY, 0, "ASKING on %s failed: %s", c->desc, r->str);
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
enum step consumer_error_reply(struct consumer *c, const char *what, const char *key,
                               const char *msg)
{
	if (redis_conn_error_permanent(msg))
		return consumer_fail(c, STEP_FATAL, EXIT_REDIS_SETUP, "Redis at %s refused %s: %s", c->desc,
		                     what, msg);
	if (strstr(msg, "unknown command") || strstr(msg, "unknown subcommand") ||
	    strstr(msg, "syntax error"))
		return consumer_fail(c, STEP_FATAL, EXIT_REDIS_SETUP,
		                     "Redis at %s does not support %s (%s); %s needs Redis 6.2 or later%s",
		                     c->desc, what, msg, PROGNAME,
		                     strcmp(what, "XAUTOCLAIM") == 0 ? ", or pass --claim-min-idle 0" : "");
	if (strncmp(msg, "WRONGTYPE", 9) == 0)
		return consumer_fail(c, STEP_FATAL, EXIT_REDIS_SETUP, "key \"%s\" is not a stream (%s)",
		                     key ? key : "?", msg);
	return consumer_fail(c, STEP_RETRY, 0, "%s%s%s%s failed: %s", what, key ? " on stream \"" : "",
	                     key ? key : "", key ? "\"" : "", msg);
}
