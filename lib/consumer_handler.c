/*
 * consumer_handler.c - outbox-consume's worker mode (consumer_handler.h):
 * the handler program as a child process per event, or as one co-process.
 */
#include "consumer_handler.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#define ANSWER_MAX 1024 /* the longest answer line kept; longer ones are cut */

struct handler {
	char *cmd;
	bool coproc;
	pid_t pid;  /* the co-process, 0 when not running */
	int to_fd;  /* its stdin */
	FILE *from; /* its stdout */
};

struct handler *handler_create(const char *exec_cmd, const char *coproc_cmd)
{
	struct handler *h = calloc(1, sizeof(*h));

	if (!h)
		return NULL;
	h->coproc = coproc_cmd != NULL;
	h->cmd = strdup(h->coproc ? coproc_cmd : exec_cmd);
	h->to_fd = -1;
	if (!h->cmd) {
		free(h);
		return NULL;
	}
	return h;
}

/* The exit status of pid as a reason; waits through signals (the event in hand is finished). */
static int wait_child(pid_t pid, char *why, size_t whylen)
{
	int status;

	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR) {
			snprintf(why, whylen, "waitpid: %s", strerror(errno));
			return -1;
		}
	if (WIFEXITED(status)) {
		snprintf(why, whylen, "exited with status %d", WEXITSTATUS(status));
		return WEXITSTATUS(status);
	}
	snprintf(why, whylen, "killed by signal %d", WIFSIGNALED(status) ? WTERMSIG(status) : 0);
	return -1;
}

/* All of buf to fd, through signals; false on a closed pipe (EPIPE: SIGPIPE is ignored). */
static bool write_all(int fd, const char *buf, size_t len)
{
	while (len > 0) {
		ssize_t n = write(fd, buf, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return false;
		buf += n;
		len -= (size_t)n;
	}
	return true;
}

/*
 * /bin/sh -c cmd with stdin from a new pipe (*to_fd: its write end) and, when
 * from is not NULL, stdout to another (*from: its read end); else stdout goes
 * to stderr. 0 when it could not be started.
 */
static pid_t spawn(const char *cmd, int *to_fd, FILE **from, char *why, size_t whylen)
{
	int in[2], out[2] = {-1, -1};
	pid_t pid;

	if (pipe(in) != 0 || (from && pipe(out) != 0)) {
		snprintf(why, whylen, "pipe: %s", strerror(errno));
		return 0;
	}
	pid = fork();
	if (pid < 0) {
		snprintf(why, whylen, "fork: %s", strerror(errno));
		close(in[0]);
		close(in[1]);
		if (from) {
			close(out[0]);
			close(out[1]);
		}
		return 0;
	}
	if (pid == 0) {
		dup2(in[0], 0);
		dup2(from ? out[1] : 2, 1);
		close(in[0]);
		close(in[1]);
		if (from) {
			close(out[0]);
			close(out[1]);
		}
		/* Nothing of the consumer's: its Redis socket, its signal pipe, SIGPIPE ignored. */
		closefrom(3);
		signal(SIGPIPE, SIG_DFL);
		execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
		_exit(127);
	}
	close(in[0]);
	(void)fcntl(in[1], F_SETFD, FD_CLOEXEC);
	*to_fd = in[1];
	if (from) {
		close(out[1]);
		(void)fcntl(out[0], F_SETFD, FD_CLOEXEC);
		*from = fdopen(out[0], "r");
		if (!*from) {
			snprintf(why, whylen, "fdopen: %s", strerror(errno));
			close(out[0]);
			close(in[1]);
			(void)wait_child(pid, why, 0);
			return 0;
		}
	}
	return pid;
}

static void coproc_stop(struct handler *h)
{
	char ignored[64];

	if (!h->pid)
		return;
	close(h->to_fd);
	fclose(h->from);
	(void)wait_child(h->pid, ignored, sizeof(ignored));
	h->pid = 0;
	h->to_fd = -1;
	h->from = NULL;
}

void handler_destroy(struct handler *h)
{
	if (!h)
		return;
	coproc_stop(h);
	free(h->cmd);
	free(h);
}

static enum handler_result run_exec(struct handler *h, const char *line, size_t len, char *why,
                                    size_t whylen)
{
	int to = -1;
	pid_t pid = spawn(h->cmd, &to, NULL, why, whylen);

	if (!pid)
		return HANDLER_RETRY;
	/* A handler that does not read its stdin is fine: its exit status decides. */
	(void)(write_all(to, line, len) && write_all(to, "\n", 1));
	close(to);
	return wait_child(pid, why, whylen) == 0 ? HANDLER_DONE : HANDLER_RETRY;
}

static enum handler_result run_coproc(struct handler *h, const char *line, size_t len, char *why,
                                      size_t whylen)
{
	char answer[ANSWER_MAX];
	size_t n;

	if (!h->pid) {
		h->pid = spawn(h->cmd, &h->to_fd, &h->from, why, whylen);
		if (!h->pid)
			return HANDLER_RETRY;
	}
	if (!write_all(h->to_fd, line, len) || !write_all(h->to_fd, "\n", 1)) {
		snprintf(why, whylen, "the handler closed its stdin");
		coproc_stop(h);
		return HANDLER_RETRY;
	}
	for (;;) {
		errno = 0;
		if (fgets(answer, sizeof(answer), h->from))
			break;
		if (errno == EINTR) {
			clearerr(h->from);
			continue;
		}
		coproc_stop(h);
		snprintf(why, whylen, "the handler exited without answering");
		return HANDLER_RETRY;
	}
	n = strcspn(answer, "\r\n");
	if (answer[n] == '\0' && n == sizeof(answer) - 1) {
		int ch;

		/* The rest of an overlong answer line is read and dropped. */
		while ((ch = getc(h->from)) != EOF && ch != '\n')
			;
	}
	answer[n] = '\0';
	if (strcmp(answer, "done") == 0)
		return HANDLER_DONE;
	if (strncmp(answer, "retry", 5) == 0 && (answer[5] == '\0' || answer[5] == ' ')) {
		snprintf(why, whylen, "%s", answer[5] ? answer + 6 : "the handler answered retry");
		return HANDLER_RETRY;
	}
	if (strncmp(answer, "dead", 4) == 0 && (answer[4] == '\0' || answer[4] == ' ')) {
		snprintf(why, whylen, "%s", answer[4] ? answer + 5 : "the handler answered dead");
		return HANDLER_DEAD;
	}
	snprintf(why, whylen, "the handler answered \"%.200s\", not done, retry or dead", answer);
	return HANDLER_RETRY;
}

enum handler_result handler_run(struct handler *h, const char *line, size_t len, char *why,
                                size_t whylen)
{
	why[0] = '\0';
	return h->coproc ? run_coproc(h, line, len, why, whylen) : run_exec(h, line, len, why, whylen);
}
