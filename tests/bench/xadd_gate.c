/*
 * xadd_gate.c - bare XADDs paced by a replication stream (bench.sh's
 * contender xadd_live): the least a relay could do with the same backlog.
 *
 *   xadd_gate DSN SLOT OPTIONS RESP REDIS_SOCKET GROUP
 *
 * RESP holds one command per event (bench.py bare wrote it: the entries the
 * relay wrote in that round), RESP.idx where each ends (native 8-byte
 * integers). The gate streams SLOT over a replication connection (DSN, with
 * replication=database added; OPTIONS is START_REPLICATION's option list, the
 * relay's wal2json options) and decodes nothing: each message that begins as
 * an insert ({"action":"I") makes the next command ready. It sends them to
 * Redis in groups of the relay's size: with nothing in flight, once GROUP
 * commands are ready (bench.sh passes the relay's own events per EXEC in the
 * same round), or the stream has been quiet for 1 ms, or the last one is
 * ready, the ready ones (up to 1 MiB, the relay's largest group) go out in one
 * write, and the next group waits until Redis has answered all of this one.
 * Sent as soon as they are ready, the commands reach Redis 1-8 at a time where
 * the relay's drain gives it 2-26 events a read, and each read costs Redis a
 * round of its event loop: that would compare the relay with a worse-batched
 * bare XADD, not with the XADD's own cost.
 *
 * It stops once every command is answered, and prints "replies: N, errors: E";
 * it exits 0 only when every event of RESP was streamed, sent and answered
 * without an error, so a run that published less than the backlog cannot pass
 * for one that did. It confirms nothing to the slot.
 */
#include <errno.h>
#include <libpq-fe.h>
#include <fcntl.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

static const char MARK[] = "{\"action\":\"I\"";
#define GROUP_BYTES (1u << 20)

static void die(const char *what, const char *detail)
{
	fprintf(stderr, "xadd_gate: %s: %s\n", what, detail);
	exit(1);
}

static void *map_file(const char *path, size_t *len)
{
	struct stat st;
	int fd = open(path, O_RDONLY);
	void *p;

	if (fd < 0 || fstat(fd, &st) != 0 || st.st_size == 0)
		die(path, fd < 0 ? strerror(errno) : "empty");
	p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
	close(fd);
	if (p == MAP_FAILED)
		die(path, strerror(errno));
	*len = (size_t)st.st_size;
	return p;
}

static void write_all(int fd, const char *p, size_t n)
{
	while (n > 0) {
		ssize_t w = write(fd, p, n);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			die("write to Redis", strerror(errno));
		p += w;
		n -= (size_t)w;
	}
}

/* A keepalive that asks for a reply gets a standby status update with no
 * position: the gate confirms nothing. */
static void keepalive_reply(PGconn *pg)
{
	char m[34] = {'r'};

	if (PQputCopyData(pg, m, sizeof m) < 0 || PQflush(pg) < 0)
		die("standby status update", PQerrorMessage(pg));
}

/* The replies complete in r[0, n) (RESP2: an XADD answers with a bulk
 * string, or an error line): their count, errors in *err, and in *used where
 * the last complete one ends. */
static size_t count_replies(const char *r, size_t n, size_t *used, size_t *err)
{
	size_t i = 0, k = 0;

	for (;;) {
		const char *nl = i < n ? memchr(r + i, '\n', n - i) : NULL;
		size_t next;

		if (!nl)
			break;
		next = (size_t)(nl - r) + 1;
		if (r[i] == '$') {
			long len = strtol(r + i + 1, NULL, 10);

			if (len >= 0)
				next += (size_t)len + 2;
			if (next > n)
				break;
		} else if (r[i] == '-') {
			fprintf(stderr, "xadd_gate: Redis: %.*s\n", (int)(nl - r - (long)i), r + i);
			(*err)++;
		} else if (r[i] != '+' && r[i] != ':') {
			die("Redis", "a reply that is not an XADD's");
		}
		k++;
		i = next;
	}
	*used = i;
	return k;
}

int main(int argc, char **argv)
{
	size_t rlen, ilen, ncmd, ready = 0, sent = 0, answered = 0, errors = 0;
	size_t rhave = 0, rcap = 1 << 20, used, group;
	int quiet = 0;
	const char *resp;
	const uint64_t *ends;
	char path[4096], *rbuf, *sql;
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	int rs;
	PGconn *pg;
	PGresult *res;

	if (argc != 7 || (group = strtoul(argv[6], NULL, 10)) < 1) {
		fprintf(stderr, "usage: xadd_gate DSN SLOT OPTIONS RESP REDIS_SOCKET GROUP (GROUP >= 1)\n");
		return 2;
	}
	snprintf(path, sizeof path, "%s.idx", argv[4]);
	resp = map_file(argv[4], &rlen);
	ends = map_file(path, &ilen);
	ncmd = ilen / sizeof *ends;
	if (ilen % sizeof *ends != 0 || ends[ncmd - 1] != rlen)
		die(path, "does not match the commands");
	rs = socket(AF_UNIX, SOCK_STREAM, 0);
	snprintf(sa.sun_path, sizeof sa.sun_path, "%s", argv[5]);
	if (rs < 0 || connect(rs, (struct sockaddr *)&sa, sizeof sa) != 0)
		die(argv[5], strerror(errno));
	snprintf(path, sizeof path, "%s replication=database", argv[1]);
	pg = PQconnectdb(path);
	if (PQstatus(pg) != CONNECTION_OK)
		die("PostgreSQL", PQerrorMessage(pg));
	sql = malloc(strlen(argv[2]) + strlen(argv[3]) + 64);
	rbuf = malloc(rcap);
	if (!sql || !rbuf)
		die("malloc", "out of memory");
	sprintf(sql, "START_REPLICATION SLOT %s LOGICAL 0/0 (%s)", argv[2], argv[3]);
	res = PQexec(pg, sql);
	if (PQresultStatus(res) != PGRES_COPY_BOTH)
		die("START_REPLICATION", PQerrorMessage(pg));
	PQclear(res);
	if (PQsetnonblocking(pg, 1) != 0)
		die("PQsetnonblocking", PQerrorMessage(pg));
	while (answered < ncmd) {
		struct pollfd pf[2] = {{.fd = ready < ncmd ? PQsocket(pg) : -1, .events = POLLIN},
		                       {.fd = rs, .events = POLLIN}};
		char *m;
		int n = 0;

		if (answered == sent && sent < ready && (ready - sent >= group || ready == ncmd || quiet)) {
			/* nothing in flight and a group ready: send it */
			size_t last = ready, from = sent ? ends[sent - 1] : 0;

			while (last > sent + 1 && ends[last - 1] - from > GROUP_BYTES)
				last--;
			write_all(rs, resp + from, (size_t)(ends[last - 1] - from));
			sent = last;
			quiet = 0;
		}
		/* every message libpq has read already, before waiting */
		while (ready < ncmd && (n = PQgetCopyData(pg, &m, 1)) > 0) {
			if (m[0] == 'w' && n > 25 && (size_t)n - 25 >= sizeof MARK - 1 &&
			    memcmp(m + 25, MARK, sizeof MARK - 1) == 0)
				ready++;
			else if (m[0] == 'k' && n >= 18 && m[17])
				keepalive_reply(pg);
			PQfreemem(m);
		}
		if (ready < ncmd && n < 0)
			die("replication stream",
			    n == -1 ? "ended before the last insert" : PQerrorMessage(pg));
		if (answered == sent && sent < ready && (ready - sent >= group || ready == ncmd))
			continue;
		/* a group not full yet waits at most 1 ms for the stream's next message */
		n = poll(pf, 2, answered == sent && sent < ready ? 1 : -1);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			die("poll", strerror(errno));
		}
		if (n == 0) {
			quiet = 1;
			continue;
		}
		if (pf[0].revents && PQconsumeInput(pg) != 1)
			die("replication stream", PQerrorMessage(pg));
		if (pf[1].revents) {
			ssize_t r = read(rs, rbuf + rhave, rcap - rhave);

			if (r <= 0)
				die("read from Redis", r == 0 ? "the connection closed" : strerror(errno));
			rhave += (size_t)r;
			answered += count_replies(rbuf, rhave, &used, &errors);
			memmove(rbuf, rbuf + used, rhave - used);
			rhave -= used;
			if (answered > sent)
				die("Redis", "more replies than commands");
		}
	}
	PQfinish(pg);
	printf("replies: %zu, errors: %zu\n", answered, errors);
	if (errors > 0) {
		fprintf(stderr, "xadd_gate: %zu of %zu commands answered with an error\n", errors, ncmd);
		return 1;
	}
	return 0;
}
