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

int main(void)
{
	alarm(20); /* the old doubling loop never ended */
	RUN(grows);
	RUN(size_wraps);
	RUN(doubling_wraps);
	return test_done();
}
