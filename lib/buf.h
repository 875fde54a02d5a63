/*
 * buf.h - growable byte buffer with a sticky failure flag (pgbouncer's pktbuf
 * habit): appends after an allocation failure are no-ops, and the caller
 * checks buf.failed once at the end.
 */
#ifndef RELAY_BUF_H
#define RELAY_BUF_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Largest buffer: far above any event (--max-event-bytes), below what
 * allocators refuse outright (ASan aborts past 1 TiB instead of failing). */
#define BUF_MAX ((size_t)1 << 39)

struct buf {
	char *data;
	size_t len;
	size_t cap;
	bool failed;
};

static inline bool buf_reserve(struct buf *b, size_t extra)
{
	size_t need, cap;
	char *p;

	if (b->failed)
		return false;
	/* Always room for a terminating NUL; a request that wraps size_t, or
	 * asks for more than BUF_MAX, fails without asking the allocator. */
	if (extra > BUF_MAX - 1 || b->len > BUF_MAX - 1 - extra) {
		b->failed = true;
		return false;
	}
	need = b->len + extra + 1;
	if (need <= b->cap)
		return true;
	cap = b->cap ? b->cap : 256;
	while (cap < need) {
		if (cap > BUF_MAX / 2) {
			cap = need; /* doubling would wrap: ask for exactly what is needed */
			break;
		}
		cap *= 2;
	}
	p = realloc(b->data, cap);
	if (!p) {
		b->failed = true;
		return false;
	}
	b->data = p;
	b->cap = cap;
	return true;
}

static inline void buf_append(struct buf *b, const void *p, size_t n)
{
	if (!buf_reserve(b, n))
		return;
	if (n)
		memcpy(b->data + b->len, p, n);
	b->len += n;
	b->data[b->len] = '\0';
}

static inline void buf_puts(struct buf *b, const char *s)
{
	buf_append(b, s, strlen(s));
}

static inline void buf_putc(struct buf *b, char c)
{
	buf_append(b, &c, 1);
}

/* Write v in decimal so that it ends just before end; returns its first digit (at most 20 bytes
 * back). */
static inline char *u64_to_dec(char *end, uint64_t v)
{
	do {
		*--end = (char)('0' + v % 10);
		v /= 10;
	} while (v);
	return end;
}

/* Append the decimal rendering of v. */
static inline void buf_put_u64(struct buf *b, uint64_t v)
{
	char tmp[20];
	char *s = u64_to_dec(tmp + sizeof(tmp), v);

	buf_append(b, s, (size_t)(tmp + sizeof(tmp) - s));
}

/* The value of hex digit c, or -1. */
static inline int hex_value(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* s as a single-quoted SQL string literal (quotes doubled). */
static inline void buf_put_sql_literal(struct buf *b, const char *s)
{
	buf_putc(b, '\'');
	for (; *s; s++) {
		if (*s == '\'')
			buf_putc(b, '\'');
		buf_putc(b, *s);
	}
	buf_putc(b, '\'');
}

/* s as a double-quoted SQL identifier (quotes doubled). */
static inline void buf_put_sql_ident(struct buf *b, const char *s)
{
	buf_putc(b, '"');
	for (; *s; s++) {
		if (*s == '"')
			buf_putc(b, '"');
		buf_putc(b, *s);
	}
	buf_putc(b, '"');
}

/* printf into the buffer (the sticky failure flag on OOM or an encoding error). */
static inline void buf_printf(struct buf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static inline void buf_printf(struct buf *b, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (!buf_reserve(b, 64))
		return;
	va_start(ap, fmt);
	n = vsnprintf(b->data + b->len, b->cap - b->len, fmt, ap);
	va_end(ap);
	if (n < 0) {
		b->failed = true;
		return;
	}
	if ((size_t)n >= b->cap - b->len) {
		if (!buf_reserve(b, (size_t)n))
			return;
		va_start(ap, fmt);
		(void)vsnprintf(b->data + b->len, b->cap - b->len, fmt, ap);
		va_end(ap);
	}
	b->len += (size_t)n;
}

static inline void buf_reset(struct buf *b)
{
	b->len = 0;
	b->failed = false;
	if (b->data)
		b->data[0] = '\0';
}

static inline void buf_finish(struct buf *b)
{
	free(b->data);
	b->data = NULL;
	b->len = b->cap = 0;
	b->failed = false;
}

/*
 * A FIFO of fixed-size items in one growable array, used as a ring: the
 * confirm marks, the sink's command ring and its sequence queues. Set item
 * (the item size) before the first push; a zeroed ring is empty.
 */
struct ring {
	char *v;
	size_t item, cap, head, len;
};

/* The i-th item from the oldest (i < len). */
static inline void *ring_at(const struct ring *r, size_t i)
{
	return r->v + ((r->head + i) % r->cap) * r->item;
}

/* Room for one more item at the end: its address, or NULL when out of memory. */
static inline void *ring_push(struct ring *r)
{
	if (r->len == r->cap) {
		size_t cap = r->cap ? r->cap * 2 : 64;
		char *n;

		if (cap > SIZE_MAX / r->item || !(n = malloc(cap * r->item)))
			return NULL;
		for (size_t i = 0; i < r->len; i++)
			memcpy(n + i * r->item, ring_at(r, i), r->item);
		free(r->v);
		r->v = n;
		r->cap = cap;
		r->head = 0;
	}
	r->len++;
	return ring_at(r, r->len - 1);
}

/* Drop the oldest item (len > 0). */
static inline void ring_pop(struct ring *r)
{
	r->head = (r->head + 1) % r->cap;
	r->len--;
}

/* A ring of uint64_t (item set by the first push): push v (false when out of memory), or pop
 * the oldest (len > 0). */
static inline bool ring_push_u64(struct ring *r, uint64_t v)
{
	uint64_t *p;

	r->item = sizeof(uint64_t);
	p = ring_push(r);
	if (!p)
		return false;
	*p = v;
	return true;
}

static inline uint64_t ring_pop_u64(struct ring *r)
{
	uint64_t v = *(const uint64_t *)ring_at(r, 0);

	ring_pop(r);
	return v;
}

static inline void ring_finish(struct ring *r)
{
	free(r->v);
	r->v = NULL;
	r->cap = r->head = r->len = 0;
}

/* FNV-1a of s[0..n): 32 bits (also on the wire: the dedup field's hash prefix) and 64. */
static inline uint32_t fnv1a32(const char *s, size_t n)
{
	uint32_t h = 2166136261u;

	for (size_t i = 0; i < n; i++)
		h = (h ^ (unsigned char)s[i]) * 16777619u;
	return h;
}

static inline uint64_t fnv1a64(const char *s, size_t n)
{
	uint64_t h = 1469598103934665603ULL;

	for (size_t i = 0; i < n; i++)
		h = (h ^ (unsigned char)s[i]) * 1099511628211ULL;
	return h;
}

#endif
