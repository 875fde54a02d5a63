/*
 * consumer_command.c - outbox-consume's side of its Redis client
 * (rclient.h): the stop signals, whose self-pipe wakes the client's
 * interruptible wait so SIGTERM ends a BLOCK wait at once instead of after up
 * to --block-timeout (only that wait is interruptible; XACK and the rest
 * always run to completion), the sleeps between rounds, the client's
 * failures and redirects turned into steps and log lines, and which error
 * replies no retry fixes end the program (consumer_error_reply()).
 */
#include "consumer_int.h"

#include <errno.h>
#include <fcntl.h>
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
		int64_t left = rclient_ms_until(deadline, time_mono_us());
		struct pollfd p = {.fd = wake_pipe[0], .events = POLLIN};

		if (left <= 0)
			break;
		(void)poll(&p, 1, left > INT_MAX ? INT_MAX : (int)left);
	}
}

/* rclient's redirect hook: say which node a command is sent on to. */
static void log_redirect(void *arg, const char *cmd, const char *reply, const char *desc)
{
	(void)arg;
	log_info("%s: %s from %s; following it", cmd, reply, desc);
}

/* See consumer_int.h. */
struct rclient *consumer_client_create(const struct redis_target *t)
{
	struct rclient *rc = rclient_create(t, CMD_TIMEOUT_MS);

	if (!rc)
		return NULL;
	rclient_set_interrupt(rc, wake_pipe[0], &consumer_stop_requested);
	rclient_set_redirect_hook(rc, log_redirect, NULL);
	return rc;
}

/* See consumer_int.h. */
enum step consumer_client_failed(struct consumer *c, enum rclient_status rst, const char *err)
{
	switch (rst) {
	case RCLIENT_STOP:
		return STEP_STOP;
	case RCLIENT_PERMANENT:
		return consumer_fail(c, STEP_FATAL, EXIT_REDIS_SETUP, "%s", err);
	default:
		return consumer_fail(c, STEP_RETRY, 0, "%s", err);
	}
}

/* rclient_command(), its failures as steps. */
redisReply *consumer_command(struct consumer *c, const char *key, int argc, const char **argv,
                             const size_t *lens, int64_t timeout_ms, bool interruptible,
                             enum step *st)
{
	enum rclient_status rst;
	char err[sizeof(c->errmsg)];
	redisReply *r = rclient_command(c->rc, key, argc, argv, lens, timeout_ms, interruptible, &rst,
	                                err, sizeof(err));

	if (!r)
		*st = consumer_client_failed(c, rst, err);
	return r;
}

/* Classify an unexpected error reply to `what` on stream key. */
enum step consumer_error_reply(struct consumer *c, const char *what, const char *key,
                               const char *msg)
{
	if (redis_conn_error_permanent(msg))
		return consumer_fail(c, STEP_FATAL, EXIT_REDIS_SETUP, "Redis at %s refused %s: %s",
		                     rclient_desc(c->rc), what, msg);
	if (strstr(msg, "unknown command") || strstr(msg, "unknown subcommand") ||
	    strstr(msg, "syntax error"))
		return consumer_fail(c, STEP_FATAL, EXIT_REDIS_SETUP,
		                     "Redis at %s does not support %s (%s); %s needs Redis 6.2 or later%s",
		                     rclient_desc(c->rc), what, msg, PROGNAME,
		                     strcmp(what, "XAUTOCLAIM") == 0 ? ", or pass --claim-min-idle 0" : "");
	if (strncmp(msg, "WRONGTYPE", 9) == 0)
		return consumer_fail(c, STEP_FATAL, EXIT_REDIS_SETUP, "key \"%s\" is not a stream (%s)",
		                     key ? key : "?", msg);
	return consumer_fail(c, STEP_RETRY, 0, "%s%s%s%s failed: %s", what, key ? " on stream \"" : "",
	                     key ? key : "", key ? "\"" : "", msg);
}
