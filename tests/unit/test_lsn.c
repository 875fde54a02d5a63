/*
 * test_lsn.c - unit tests for lib/lsn.c: LSN parsing and formatting,
 * big-endian helpers and PostgreSQL protocol time.
 */
#include "lsn.h"

#include <stdint.h>
#include <stdio.h>

#include "test.h"

/* Parse a NUL-terminated string; the whole string must be consumed. */
static bool parse(const char *s, lsn_t *ret)
{
	return lsn_parse(s, strlen(s), ret);
}

TEST(parse_basic)
{
	lsn_t v = 1;

	CHECK(parse("0/0", &v));
	CHECK(v == 0);
	CHECK(v == LSN_INVALID);
	CHECK(parse("0/16B3748", &v));
	CHECK(v == UINT64_C(0x16B3748));
	CHECK(parse("16/B374D848", &v));
	CHECK(v == UINT64_C(0x16B374D848));
	CHECK(parse("FFFFFFFF/FFFFFFFF", &v));
	CHECK(v == UINT64_MAX);
	CHECK(parse("00000001/00000000", &v));
	CHECK(v == UINT64_C(0x100000000));
}

TEST(parse_lower_case)
{
	lsn_t v = 0;
	char buf[LSN_STRLEN];

	CHECK(parse("ab/cdef0", &v));
	CHECK(v == UINT64_C(0xAB000CDEF0));
	CHECK_STR(lsn_format(v, buf), "AB/CDEF0");
	CHECK(parse("fFfFfFfF/0", &v));
	CHECK(v == UINT64_C(0xFFFFFFFF00000000));
}

TEST(parse_rejects)
{
	static const char *const bad[] = {
	    "",     "/",    "1/",   "/1",   "123456789/0", "0/123456789", "g/0",  "0/g", "1/2x",
	    "x1/2", " 1/2", "1/2 ", "1//2", "1/2/3",       "-1/2",        "+1/2", "1",   "0x1/2",
	};

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		lsn_t v = 42;

		if (parse(bad[i], &v))
			printf("# accepted \"%s\"\n", bad[i]);
		CHECK(!parse(bad[i], &v));
		CHECK(v == 42); /* not written on failure */
	}
	CHECK(!lsn_parse(NULL, 0, &(lsn_t){0}));
}

TEST(parse_uses_len)
{
	lsn_t v = 0;

	/* Only s[0..len) counts: a larger buffer need not be NUL-terminated. */
	CHECK(lsn_parse("1/2xyz", 3, &v));
	CHECK(v == UINT64_C(0x100000002));
	CHECK(!lsn_parse("1/2xyz", 4, &v));
	CHECK(!lsn_parse("1/2", 2, &v));
	CHECK(!lsn_parse("1/2", 0, &v));
}

TEST(format)
{
	char buf[LSN_STRLEN];

	CHECK_STR(lsn_format(0, buf), "0/0");
	CHECK_STR(lsn_format(UINT64_C(0x16B3748), buf), "0/16B3748");
	CHECK_STR(lsn_format(UINT64_C(0x100000000), buf), "1/0");
	CHECK_STR(lsn_format(UINT64_MAX, buf), "FFFFFFFF/FFFFFFFF");
	CHECK_INT(strlen(lsn_format(UINT64_MAX, buf)), LSN_STRLEN - 1);
	CHECK(lsn_format(1, buf) == buf);
}

/* lsn_format writes what printf's "%X/%X" did before it, for values of every width. */
TEST(format_matches_printf)
{
	uint64_t x = UINT64_C(0x9E3779B97F4A7C15);
	char buf[LSN_STRLEN], want[LSN_STRLEN];

	for (int i = 0; i < 20000; i++) {
		int sh = i % 33, sl = (i / 33) % 33; /* each half 0 to 32 bits wide */
		uint32_t hi, lo;
		lsn_t v;

		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		hi = sh == 32 ? 0 : (uint32_t)(x >> 32) >> sh;
		lo = sl == 32 ? 0 : (uint32_t)x >> sl;
		v = (lsn_t)hi << 32 | lo;
		snprintf(want, sizeof(want), "%X/%X", (unsigned)(v >> 32), (unsigned)(v & 0xffffffffu));
		CHECK_STR(lsn_format(v, buf), want);
	}
}

TEST(round_trip)
{
	static const lsn_t values[] = {
	    0,
	    1,
	    UINT64_C(0xFFFFFFFF),
	    UINT64_C(0x100000000),
	    UINT64_C(0x16B374D848),
	    UINT64_C(0x8000000000000000),
	    UINT64_C(0xDEADBEEFCAFEBABE),
	    UINT64_MAX - 1,
	    UINT64_MAX,
	};

	for (size_t i = 0; i < sizeof(values) / sizeof(values[0]); i++) {
		char buf[LSN_STRLEN];
		lsn_t back = 0;

		CHECK(parse(lsn_format(values[i], buf), &back));
		CHECK(back == values[i]);
	}

	/* And text -> value -> text, which normalises case and zero padding. */
	{
		char buf[LSN_STRLEN];
		lsn_t v = 0;

		CHECK(parse("0000000A/000000bc", &v));
		CHECK_STR(lsn_format(v, buf), "A/BC");
	}
}

TEST(be64)
{
	unsigned char b[8];
	static const unsigned char want[8] = {0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08};
	static const uint64_t values[] = {
	    0, 1, 0xFF, UINT64_C(0x0102030405060708), UINT64_C(0x8000000000000000), UINT64_MAX};

	put_be64(b, UINT64_C(0x0102030405060708));
	CHECK(memcmp(b, want, 8) == 0);
	CHECK(get_be64(want) == UINT64_C(0x0102030405060708));

	for (size_t i = 0; i < sizeof(values) / sizeof(values[0]); i++) {
		put_be64(b, values[i]);
		CHECK(get_be64(b) == values[i]);
	}

	/* Writes exactly 8 bytes, no alignment needed. */
	{
		unsigned char buf[10];

		memset(buf, 0xAA, sizeof(buf));
		put_be64(buf + 1, UINT64_MAX);
		CHECK(buf[0] == 0xAA);
		CHECK(buf[9] == 0xAA);
		CHECK(get_be64(buf + 1) == UINT64_MAX);
	}
}

TEST(pg_time)
{
	/* 2000-01-01 00:00:00 UTC is 946684800 s after the Unix epoch. */
	CHECK(time_unix_to_pg(INT64_C(946684800000000)) == 0);
	CHECK(time_unix_to_pg(0) == -INT64_C(946684800000000));
	CHECK(time_unix_to_pg(INT64_C(946684800000001)) == 1);
	/* 2024-01-01 00:00:00 UTC = 1704067200 s. */
	CHECK(time_unix_to_pg(INT64_C(1704067200000000)) ==
	      (INT64_C(1704067200) - INT64_C(946684800)) * 1000000);
}

TEST(clocks)
{
	int64_t now = time_now_us();
	int64_t m1 = time_mono_us(), m2 = time_mono_us();

	/* After 2020-01-01 and before 2100-01-01. */
	CHECK(now > INT64_C(1577836800000000));
	CHECK(now < INT64_C(4102444800000000));
	CHECK(m2 >= m1);
	CHECK(time_unix_to_pg(now) > 0);
}

int main(void)
{
	RUN(parse_basic);
	RUN(parse_lower_case);
	RUN(parse_rejects);
	RUN(parse_uses_len);
	RUN(format);
	RUN(format_matches_printf);
	RUN(round_trip);
	RUN(be64);
	RUN(pg_time);
	RUN(clocks);
	return test_done();
}
