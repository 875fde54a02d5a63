/*
 * txn_spool.c - one transaction's messages in order: memory, then a file
 * (see txn_spool.h). A record is a 12-byte header (the LSN, 8 bytes, and the
 * length, 4, in the machine's order: the file never outlives the process)
 * followed by the message.
 *
 * The file is written and read in blocks of up to BLOCK bytes, not a system
 * call per message: a spilled transaction of 100,000 small messages took
 * one pwritev() and two pread()s each, on the path from its Commit to its
 * first XADD. Records that fit are gathered in wr and written when it fills
 * (or before anything is read); reading fills rd_block with the next BLOCK
 * bytes of the file and hands out pointers into it. A message of OWN bytes
 * or more is written straight from the caller's bytes and read back into an
 * allocation of its own (rd), which txn_spool_take_buffer() can hand over:
 * only such a message can hold a value large enough for a sink to keep by
 * pointer (sink_redis.h), so what sinks keep is unchanged.
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
#include "pgoutput.h"

#define HDR 12
#define BLOCK (256 * 1024)
/* A message of this many bytes or more bypasses the blocks: it may hold a value the
 * pgoutput decoder leaves where it lies (PGO_BY_REFERENCE), for a sink to keep. */
#define OWN PGO_BY_REFERENCE

struct txn_spool {
	size_t mem_cap;
	char *dir;
	struct buf mem;    /* records kept in memory */
	int fd;            /* -1 until a record did not fit */
	uint64_t file_len; /* records spilled, those still in wr included */
	struct buf wr;     /* the file's last wr.len bytes, not yet written */
	size_t count;
	/* reading */
	size_t rd_mem;
	uint64_t rd_file;
	struct buf rd_block; /* the file's bytes from offset rd_block_at */
	uint64_t rd_block_at;
	struct buf rd; /* one large record read back from the file */
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
	buf_finish(&s->wr);
	buf_finish(&s->rd_block);
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

/* Write the header h and len bytes of data at off, whole. */
static bool write_at(struct txn_spool *s, const char *h, const char *data, size_t len, uint64_t off)
{
	struct iovec iov[2] = {{(void *)h, h ? HDR : 0}, {(void *)data, len}};
	size_t want = iov[0].iov_len + len, done = 0;

	while (done < want) {
		ssize_t n = pwritev(s->fd, iov, 2, (off_t)(off + done));

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
	return true;
}

/* The gathered records to the file, where they end it. */
static bool flush_wr(struct txn_spool *s)
{
	if (s->wr.len == 0)
		return true;
	if (!write_at(s, NULL, s->wr.data, s->wr.len, s->file_len - s->wr.len))
		return false;
	buf_reset(&s->wr);
	return true;
}

/* Header h and the message into b (the memory part, or the next block of the file). */
static bool append_record(struct txn_spool *s, struct buf *b, const char *h, const char *data,
                          size_t len)
{
	buf_append(b, h, HDR);
	buf_append(b, data, len);
	if (b->failed) {
		snprintf(s->err, sizeof(s->err), "out of memory holding a transaction");
		s->failed = true;
		return false;
	}
	return true;
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
		if (!append_record(s, &s->mem, h, data, len))
			return false;
	} else {
		if (!open_file(s))
			return false;
		if (len >= OWN) {
			if (!flush_wr(s) || !write_at(s, h, data, len, s->file_len))
				return false;
		} else {
			if (s->wr.len + HDR + len > BLOCK && !flush_wr(s))
				return false;
			if (!append_record(s, &s->wr, h, data, len))
				return false;
		}
		s->file_len += HDR + len;
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

/*
 * rd_block holds the file's bytes from rd_file on, want of them at least
 * (want <= BLOCK): read the next block when it does not.
 */
static bool block_has(struct txn_spool *s, size_t want)
{
	uint64_t left = s->file_len - s->rd_file;
	size_t take;

	if (s->rd_file >= s->rd_block_at && s->rd_file + want <= s->rd_block_at + s->rd_block.len)
		return true;
	if (want > left) {
		snprintf(s->err, sizeof(s->err), "the transaction's spool file ends inside a record");
		s->failed = true;
		return false;
	}
	take = left < BLOCK ? (size_t)left : BLOCK;
	buf_reset(&s->rd_block);
	if (!buf_reserve(&s->rd_block, BLOCK)) {
		snprintf(s->err, sizeof(s->err), "out of memory reading back a transaction");
		s->failed = true;
		return false;
	}
	if (!read_at(s, s->rd_block.data, take, s->rd_file))
		return false;
	s->rd_block.len = take;
	s->rd_block_at = s->rd_file;
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
		const char *h;

		if (!flush_wr(s) || !block_has(s, HDR))
			return -1;
		h = s->rd_block.data + (s->rd_file - s->rd_block_at);
		memcpy(&l, h, 8);
		memcpy(&n, h + 8, 4);
		if ((size_t)n >= OWN) {
			/* Written on its own: read into an allocation it may keep, starting with
			 * what the block holds of it already. */
			size_t have = (size_t)(s->rd_block_at + s->rd_block.len - s->rd_file) - HDR;

			if (have > n)
				have = n;
			buf_reset(&s->rd);
			if (!buf_reserve(&s->rd, n)) {
				snprintf(s->err, sizeof(s->err), "out of memory reading back a message of %u bytes",
				         n);
				s->failed = true;
				return -1;
			}
			memcpy(s->rd.data, h + HDR, have);
			if (!read_at(s, s->rd.data + have, n - have, s->rd_file + HDR + have))
				return -1;
			s->rd.len = n;
			*data = s->rd.data;
			s->rd_last = true;
		} else {
			if (!block_has(s, HDR + (size_t)n))
				return -1;
			*data = s->rd_block.data + (s->rd_file - s->rd_block_at) + HDR;
		}
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
	return !s->failed && flush_wr(s);
}

void txn_spool_clear(struct txn_spool *s)
{
	s->rd_last = false;
	buf_reset(&s->mem);
	s->count = 0;
	s->rd_mem = 0;
	s->rd_file = 0;
	buf_reset(&s->wr);
	buf_reset(&s->rd_block);
	s->rd_block_at = 0;
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
	/* A large message read back and not taken (dead-lettered, copied) is not kept either. */
	buf_finish(&s->rd);
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
