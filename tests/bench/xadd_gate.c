/*
 * xadd_gate.c - bare XADDs paced by a decoder (bench.sh's contender xadd_live).
 *
 *   pg_recvlogical ... -f - | xadd_gate RESP REDIS_SOCKET
 *
 * RESP holds one command per event (bench.py bare wrote it), RESP.idx where
 * each ends (native 8-byte integers). The gate reads wal2json's output
 * (format-version 2, one action per line) from stdin; each complete line of an
 * insert makes the next command ready. It sends them to Redis the way the
 * relay sends its groups: with nothing in flight, every ready command (up to
 * 1 MiB, the relay's largest group) goes out in one write, and the next group
 * waits until Redis has answered all of this one. Commands sent one by one as
 * they become ready would cost Redis a read each, which neither the relay nor
 * a pipelined bare XADD pays.
 *
 * Prints "replies: N, errors: E" at the end; exits 0 only when every event of
 * RESP was decoded, sent and answered without an error, so a run that
 * published less than the backlog cannot pass for one that did.
 */
#include <errno.h>
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

/* Inserts among the complete lines of buf[0, n): the count, and in *used
 * where the last complete line ends. */
static size_t count_inserts(const char *buf, size_t n, size_t *used)
{
	const char *end = buf, *p = buf, *nl;
	size_t k = 0;

	while ((nl = memchr(p, '\n', n - (size_t)(p - buf))) != NULL) {
		if ((size_t)(nl - p) >= sizeof MARK - 1 && memcmp(p, MARK, sizeof MARK - 1) == 0)
			k++;
		p = nl + 1;
		end = p;
	}
	*used = (size_t)(end - buf);
	return k;
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
	size_t have = 0, cap = 1 << 20, rhave = 0, rcap = 1 << 20, used;
	const char *resp;
	const uint64_t *ends;
	char idx[4096], *buf, *rbuf;
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	int rs, in_open = 1;

	if (argc != 3) {
		fprintf(stderr, "usage: xadd_gate RESP REDIS_SOCKET < wal2json lines\n");
		return 2;
	}
	snprintf(idx, sizeof idx, "%s.idx", argv[1]);
	resp = map_file(argv[1], &rlen);
	ends = map_file(idx, &ilen);
	ncmd = ilen / sizeof *ends;
	if (ilen % sizeof *ends != 0 || ends[ncmd - 1] != rlen)
		die(idx, "does not match the commands");
	rs = socket(AF_UNIX, SOCK_STREAM, 0);
	snprintf(sa.sun_path, sizeof sa.sun_path, "%s", argv[2]);
	if (rs < 0 || connect(rs, (struct sockaddr *)&sa, sizeof sa) != 0)
		die(argv[2], strerror(errno));
	buf = malloc(cap);
	rbuf = malloc(rcap);
	if (!buf || !rbuf)
		die("malloc", "out of memory");
	while (in_open || answered < sent || sent < ready) {
		struct pollfd pf[2] = {{.fd = in_open ? 0 : -1, .events = POLLIN},
		                       {.fd = rs, .events = POLLIN}};
		ssize_t r;

		if (answered == sent && sent < ready) { /* nothing in flight: send what is ready */
			size_t last = ready, from = sent ? ends[sent - 1] : 0;

			while (last > sent + 1 && ends[last - 1] - from > GROUP_BYTES)
				last--;
			write_all(rs, resp + from, (size_t)(ends[last - 1] - from));
			sent = last;
			continue;
		}
		if (poll(pf, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			die("poll", strerror(errno));
		}
		if (pf[1].revents) {
			r = read(rs, rbuf + rhave, rcap - rhave);
			if (r <= 0)
				die("read from Redis", r == 0 ? "the connection closed" : strerror(errno));
			rhave += (size_t)r;
			answered += count_replies(rbuf, rhave, &used, &errors);
			memmove(rbuf, rbuf + used, rhave - used);
			rhave -= used;
			if (answered > sent)
				die("Redis", "more replies than commands");
		}
		if (pf[0].revents) {
			r = read(0, buf + have, cap - have);
			if (r < 0 && errno != EINTR)
				die("read", strerror(errno));
			if (r == 0) {
				in_open = 0;
				continue;
			}
			if (r < 0)
				continue;
			have += (size_t)r;
			ready += count_inserts(buf, have, &used);
			if (ready > ncmd) {
				fprintf(stderr, "xadd_gate: %zu inserts decoded, %s has %zu commands\n", ready,
				        argv[1], ncmd);
				return 1;
			}
			memmove(buf, buf + used, have - used);
			have -= used;
			if (have == cap) { /* one line longer than the buffer: grow it */
				char *nb = realloc(buf, cap * 2);

				if (!nb)
					die("realloc", "out of memory");
				buf = nb;
				cap *= 2;
			}
		}
	}
	printf("replies: %zu, errors: %zu\n", answered, errors);
	if (have > 0 || ready != ncmd || errors > 0) {
		fprintf(stderr,
		        "xadd_gate: %zu inserts decoded (%zu bytes left without a newline), %s has %zu "
		        "commands, %zu errors\n",
		        ready, have, argv[1], ncmd, errors);
		return 1;
	}
	return 0;
}
