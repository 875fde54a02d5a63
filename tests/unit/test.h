/*
 * test.h - a tiny TAP-producing unit test harness for the lib/ modules.
 *
 *   TEST(name) { CHECK(expr); CHECK_STR(got, want); CHECK_INT(got, want); }
 *   int main(void) { RUN(name); ...; return test_done(); }
 *
 * Each RUN prints one TAP line ("ok N - name" / "not ok N - name"); failed
 * checks print a diagnostic with file:line. meson runs these with protocol tap.
 */
#ifndef RELAY_TEST_H
#define RELAY_TEST_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int test_count, test_failed, test_cur_failed;

#define TEST(name) static void test_##name(void)

#define RUN(name)                                                                                  \
	do {                                                                                           \
		test_cur_failed = 0;                                                                       \
		test_##name();                                                                             \
		test_count++;                                                                              \
		if (test_cur_failed)                                                                       \
			test_failed++;                                                                         \
		printf("%sok %d - %s\n", test_cur_failed ? "not " : "", test_count, #name);                \
		fflush(stdout);                                                                            \
	} while (0)

#define CHECK(expr)                                                                                \
	do {                                                                                           \
		if (!(expr)) {                                                                             \
			printf("# %s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #expr);                      \
			test_cur_failed = 1;                                                                   \
		}                                                                                          \
	} while (0)

#define CHECK_STR(got, want)                                                                       \
	do {                                                                                           \
		const char *g_ = (got), *w_ = (want);                                                      \
		if (!g_ || !w_ || strcmp(g_, w_) != 0) {                                                   \
			printf("# %s:%d: %s = \"%s\", want \"%s\"\n", __FILE__, __LINE__, #got,                \
			       g_ ? g_ : "(null)", w_ ? w_ : "(null)");                                        \
			test_cur_failed = 1;                                                                   \
		}                                                                                          \
	} while (0)

#define CHECK_MEM(got, gotlen, want)                                                               \
	do {                                                                                           \
		const char *g_ = (got), *w_ = (want);                                                      \
		size_t gl_ = (gotlen), wl_ = strlen(w_);                                                   \
		if (!g_ || gl_ != wl_ || memcmp(g_, w_, wl_) != 0) {                                       \
			printf("# %s:%d: %s = \"%.*s\", want \"%s\"\n", __FILE__, __LINE__, #got,              \
			       g_ ? (int)gl_ : 6, g_ ? g_ : "(null)", w_);                                     \
			test_cur_failed = 1;                                                                   \
		}                                                                                          \
	} while (0)

#define CHECK_INT(got, want)                                                                       \
	do {                                                                                           \
		long long g_ = (long long)(got), w_ = (long long)(want);                                   \
		if (g_ != w_) {                                                                            \
			printf("# %s:%d: %s = %lld, want %lld\n", __FILE__, __LINE__, #got, g_, w_);           \
			test_cur_failed = 1;                                                                   \
		}                                                                                          \
	} while (0)

static inline int test_done(void)
{
	printf("1..%d\n", test_count);
	return test_failed ? 1 : 0;
}

#endif
