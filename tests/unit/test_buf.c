/*
 * test_buf.c - unit tests for lib/buf.h: growth, and that a request whose
 * size would wrap size_t fails cleanly (buf.failed) instead of succeeding
 * with a wrapped, too small size or doubling forever.
 */
#include "buf.h"

#include <stdint.h>
#include <unistd.h>

#include "test.h"

TEST(grows)
{
	struct buf b = {0};

	for (int i = 0; i < 1000; i++)
		buf_puts(&b, "0123456789");
	CHECK(!b.failed);
	CHECK_INT(b.len, 10000);
	CHECK(b.cap > b.len);
	CHECK_INT(b.data[b.len], 0);
	buf_finish(&b);
}

/* len + extra + 1 wraps around: must fail, not report "fits". */
TEST(size_wraps)
{
	struct buf b = {0};

	buf_puts(&b, "0123456789");
	CHECK(!buf_reserve(&b, SIZE_MAX - 5));
	CHECK(b.failed);
	CHECK_INT(b.len, 10);
	/* Sticky: later appends are no-ops. */
	buf_puts(&b, "x");
	CHECK_INT(b.len, 10);
	buf_finish(&b);

	buf_puts(&b, "0123456789");
	CHECK(!buf_reserve(&b, SIZE_MAX));
	CHECK(b.failed);
	buf_finish(&b);
}

/* need above SIZE_MAX / 2: doubling the capacity would wrap to 0. */
TEST(doubling_wraps)
{
	struct buf b = {0};

	buf_puts(&b, "0123456789");
	CHECK(!buf_reserve(&b, SIZE_MAX / 2 + 16));
	CHECK(b.failed);
	CHECK_INT(b.len, 10);
	buf_finish(&b);
}

/* buf_printf: short and longer than its first reservation, appended in order. */
TEST(printf_appends)
{
	struct buf b = {0};
	char big[300];

	memset(big, 'x', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	buf_printf(&b, "%s=%d;", "a", 1);
	buf_printf(&b, "%s|", big);
	buf_printf(&b, "%llu", 18446744073709551615ULL);
	CHECK(!b.failed);
	CHECK_INT(b.len, 4 + 299 + 1 + 20);
	CHECK(strncmp(b.data, "a=1;xxx", 7) == 0);
	CHECK(strcmp(b.data + 4 + 299, "|18446744073709551615") == 0);
	buf_finish(&b);
}

/* A ring keeps FIFO order through growth and through its head wrapping. */
TEST(ring_fifo)
{
	struct ring r = {.item = sizeof(uint64_t)};
	uint64_t next_in = 0, next_out = 0;

	for (int round = 0; round < 50; round++) {
		for (int i = 0; i < 37 + round; i++) {
			uint64_t *p = ring_push(&r);

			CHECK(p != NULL);
			if (p)
				*p = next_in++;
		}
		for (int i = 0; i < 30 + round && r.len > 0; i++) {
			CHECK_INT(*(uint64_t *)ring_at(&r, 0), next_out);
			next_out++;
			ring_pop(&r);
		}
		if (r.len > 0)
			CHECK_INT(*(uint64_t *)ring_at(&r, r.len - 1), next_in - 1);
	}
	CHECK_INT(r.len, next_in - next_out);
	ring_finish(&r);
	CHECK(r.v == NULL && r.len == 0);
}

/* The uint64_t helpers on a zeroed ring, and a ring emptied by len = 0 (a closed connection). */
TEST(ring_u64)
{
	struct ring r = {0};

	for (uint64_t v = 1; v <= 100; v++)
		CHECK(ring_push_u64(&r, v));
	for (uint64_t v = 1; v <= 60; v++)
		CHECK_INT(ring_pop_u64(&r), v);
	CHECK_INT(r.len, 40);
	r.len = 0;
	CHECK(ring_push_u64(&r, UINT64_MAX));
	CHECK_INT(r.len, 1);
	CHECK(ring_pop_u64(&r) == UINT64_MAX);
	ring_finish(&r);
}

int main(void)
{
	alarm(20); /* the old doubling loop never ended */
	RUN(grows);
	RUN(size_wraps);
	RUN(doubling_wraps);
	RUN(printf_appends);
	RUN(ring_fifo);
	RUN(ring_u64);
	return test_done();
}
