/*
 * txn_spool.c - one transaction's messages in order: memory, then a file
 * (see txn_spool.h). A record is a 12-byte header (the LSN, 8 bytes, and the
 * length, 4, in the machine's order: the file never outlives the process)
 * followed by the message.
 */
#include "txn_spool.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "buf.h"

#define HDR 12

struct txn_spool {
	size_t mem_cap;
	char *dir;
	struct buf mem; /* records kept in memory */
	int fd;         /* -1 until a record did not fit */
	uint64_t file_len;
	size_t count;
	/* reading */
	size_t rd_mem;
	uint64_t rd_file;
	struct buf rd; /* one record read back from the file */
	bool rd_last;  /* the last txn_spool_next() returned rd's bytes */
	bool failed;
	char err[512];
};

static bool fail(struct txn_spool *s, const char *what, int e)
{
	snprintf(s->err, sizeof(s->err), "%s: %s", what, strerror(e));
	s->failed = true;
	return false;
}

struct txn_spool *txn_spool_create(size_t mem_cap, const char *dir)
{
	struct txn_spool *s = calloc(1, sizeof(*s));
	const char *d = dir && *dir ? dir : getenv("TMPDIR");

	if (!s)
		return NULL;
	s->mem_cap = mem_cap;
	s->fd = -1;
	s->dir = strdup(d && *d ? d : "/tmp");
	if (!s->dir) {
		free(s);
		return NULL;
	}
	return s;
}

void txn_spool_destroy(struct txn_spool *s)
{
	if (!s)
		return;
	if (s->fd >= 0)
		(void)close(s->fd);
	buf_finish(&s->mem);
	buf_finish(&s->rd);
	free(s->dir);
	free(s);
}

/* The file, created and unlinked on first use: only this process can see it. */
static bool open_file(struct txn_spool *s)
{
	char path[4200];

	if (s->fd >= 0)
		return true;
	if ((size_t)snprintf(path, sizeof(path), "%s/outbox-relay-txn-XXXXXX", s->dir) >=
	    sizeof(path)) {
		snprintf(s->err, sizeof(s->err), "spool directory name too long: %.200s...", s->dir);
		s->failed = true;
		return false;
	}
	s->fd = mkstemp(path);
	if (s->fd < 0) {
		char what[300];

		snprintf(what, sizeof(what), "creating a file in %.200s for a transaction over %zu bytes",
		         s->dir, s->mem_cap);
		return fail(s, what, errno);
	}
	(void)unlink(path);
	(void)fcntl(s->fd, F_SETFD, FD_CLOEXEC);
	return true;
}

static void header(char *h, lsn_t wal_start, uint32_t len)
{
	uint64_t l = wal_start;

	memcpy(h, &l, 8);
	memcpy(h + 8, &len, 4);
}

bool txn_spool_add(struct txn_spool *s, const char *data, size_t len, lsn_t wal_start)
{
	char h[HDR];

	if (s->failed)
		return false;
	if (len > UINT32_MAX) {
		snprintf(s->err, sizeof(s->err), "a message of %zu bytes is over 4 GiB", len);
		s->failed = true;
		return false;
	}
	header(h, wal_start, (uint32_t)len);
	/* Once one record went to the file, the rest follow it there: order is kept. */
	if (s->file_len == 0 && s->mem.len + HDR + len <= s->mem_cap) {
		buf_append(&s->mem, h, HDR);
		buf_append(&s->mem, data, len);
		if (s->mem.failed) {
			snprintf(s->err, sizeof(s->err), "out of memory holding a transaction");
			s->failed = true;
			return false;
		}
	} else {
		struct iovec iov[2] = {{h, HDR}, {(void *)data, len}};
		size_t want = HDR + len, done = 0;

		if (!open_file(s))
			return false;
		while (done < want) {
			ssize_t n = pwritev(s->fd, iov, 2, (off_t)(s->file_len + done));

			if (n < 0 && errno == EINTR)
				continue;
			if (n <= 0)
				return fail(s, "writing the transaction's spool file", n < 0 ? errno : ENOSPC);
			done += (size_t)n;
			/* A short write: move the vectors past what went out. */
			for (int i = 0; i < 2 && n > 0; i++) {
				size_t k = (size_t)n < iov[i].iov_len ? (size_t)n : iov[i].iov_len;

				iov[i].iov_base = (char *)iov[i].iov_base + k;
				iov[i].iov_len -= k;
				n -= (ssize_t)k;
			}
		}
		s->file_len += want;
	}
	s->count++;
	return true;
}

/* Read exactly len bytes at off of the file into p. */
static bool read_at(struct txn_spool *s, char *p, size_t len, uint64_t off)
{
	while (len > 0) {
		ssize_t n = pread(s->fd, p, len, (off_t)off);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return fail(s, "reading the transaction's spool file", n < 0 ? errno : EIO);
		p += n;
		len -= (size_t)n;
		off += (uint64_t)n;
	}
	return true;
}

int txn_spool_next(struct txn_spool *s, const char **data, size_t *len, lsn_t *wal_start)
{
	uint64_t l;
	uint32_t n;

	if (s->failed)
		return -1;
	s->rd_last = false;
	if (s->rd_mem < s->mem.len) {
		const char *h = s->mem.data + s->rd_mem;

		memcpy(&l, h, 8);
		memcpy(&n, h + 8, 4);
		*data = h + HDR;
		s->rd_mem += HDR + n;
	} else if (s->rd_file < s->file_len) {
		char h[HDR];

		if (!read_at(s, h, HDR, s->rd_file))
			return -1;
		memcpy(&l, h, 8);
		memcpy(&n, h + 8, 4);
		buf_reset(&s->rd);
		if (!buf_reserve(&s->rd, n)) {
			snprintf(s->err, sizeof(s->err), "out of memory reading back a message of %u bytes", n);
			s->failed = true;
			return -1;
		}
		if (!read_at(s, s->rd.data, n, s->rd_file + HDR))
			return -1;
		s->rd.len = n;
		*data = s->rd.data;
		s->rd_last = true;
		s->rd_file += HDR + (uint64_t)n;
	} else {
		return 0;
	}
	*len = n;
	*wal_start = (lsn_t)l;
	return 1;
}

void *txn_spool_buffer(const struct txn_spool *s)
{
	return s->rd_last ? s->rd.data : NULL;
}

void *txn_spool_take_buffer(struct txn_spool *s)
{
	void *p = txn_spool_buffer(s);

	if (p) {
		s->rd = (struct buf){0};
		s->rd_last = false;
	}
	return p;
}

bool txn_spool_rewind(struct txn_spool *s)
{
	s->rd_mem = 0;
	s->rd_file = 0;
	return !s->failed;
}

void txn_spool_clear(struct txn_spool *s)
{
	s->rd_last = false;
	buf_reset(&s->mem);
	s->count = 0;
	s->rd_mem = 0;
	s->rd_file = 0;
	s->failed = false;
	s->err[0] = '\0';
	if (s->fd >= 0 && s->file_len > 0 && ftruncate(s->fd, 0) != 0) {
		/* Keep nothing of an unknown state: the next spill opens a new file. */
		(void)close(s->fd);
		s->fd = -1;
	}
	s->file_len = 0;
	/* A spill usually means more large transactions; the memory part starts small again. */
	if (s->mem.cap > s->mem_cap && s->mem_cap > 0) {
		buf_finish(&s->mem);
		s->mem = (struct buf){0};
	}
}

size_t txn_spool_count(const struct txn_spool *s)
{
	return s->count;
}

uint64_t txn_spool_bytes(const struct txn_spool *s)
{
	return s->mem.len + s->file_len;
}

uint64_t txn_spool_spilled(const struct txn_spool *s)
{
	return s->file_len;
}

const char *txn_spool_errmsg(const struct txn_spool *s)
{
	return s->err[0] ? s->err : "no error";
}
