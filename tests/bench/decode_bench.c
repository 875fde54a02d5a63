/*
 * decode_bench.c - time w2j_decode() on wal2json INSERT lines like the ones an
 * outbox row produces, with the fast tokenizer and with yajl alone.
 *
 *   build-bench/tests/decode_bench [ITERATIONS]
 *
 * Prints one line per payload size and path: ns per line, MB/s of input and
 * the speed-up of the fast path. For instruction counts (repeatable, whatever
 * else the machine does) run it under valgrind --tool=callgrind with a small
 * ITERATIONS and divide.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "wal2json.h"

/* An outbox INSERT as wal2json 2.5 prints it, with a jsonb payload of about payload bytes. */
static char *make_line(size_t payload, size_t *len)
{
	size_t cap = payload * 2 + 1024, n;
	char *s = malloc(cap);

	if (!s)
		exit(1);
	n = (size_t)snprintf(
	    s, cap,
	    "{\"action\":\"I\",\"xid\":742,\"lsn\":\"0/16B3748\",\"timestamp\":\"2026-11-22 "
	    "03:10:11.123456+00\",\"schema\":\"public\",\"table\":\"outbox\",\"columns\":["
	    "{\"name\":\"id\",\"type\":\"uuid\",\"value\":\"5b4f1e0c-8a8e-4c33-9d0e-2f6f0f3c1a77\"},"
	    "{\"name\":\"aggregate_type\",\"type\":\"text\",\"value\":\"order\"},"
	    "{\"name\":\"aggregate_id\",\"type\":\"text\",\"value\":\"48213\"},"
	    "{\"name\":\"event_type\",\"type\":\"text\",\"value\":\"created\"},"
	    "{\"name\":\"payload\",\"type\":\"jsonb\",\"value\":\"{\\\"n\\\": 48213, \\\"blob\\\": "
	    "\\\"");
	for (size_t i = 0; i < payload; i++)
		s[n++] = (char)('a' + i % 26);
	n +=
	    (size_t)snprintf(s + n, cap - n,
	                     "\\\"}\"},{\"name\":\"headers\",\"type\":\"jsonb\",\"value\":\"{}\"},"
	                     "{\"name\":\"created_at\",\"type\":\"timestamp with time zone\",\"value\":"
	                     "\"2026-11-22 03:10:11.123456+00\"}]}");
	*len = n;
	return s;
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Seconds for iters decodes of line; exits when a decode fails. */
static double run(bool fast, const char *line, size_t len, long iters)
{
	struct w2j_decoder *d = w2j_create();
	struct w2j_change ch;
	double t0;

	if (!d)
		exit(1);
	w2j_set_fast_path(d, fast);
	t0 = now_s();
	for (long i = 0; i < iters; i++) {
		if (!w2j_decode(d, line, len, &ch) || ch.ncolumns != 7) {
			fprintf(stderr, "decode failed: %s\n", w2j_errmsg(d));
			exit(1);
		}
	}
	t0 = now_s() - t0;
	w2j_destroy(d);
	return t0;
}

int main(int argc, char **argv)
{
	static const size_t sizes[] = {64, 1024, 16384};
	long iters = argc > 1 ? atol(argv[1]) : 200000;

	if (iters < 1) {
		fprintf(stderr, "usage: decode_bench [ITERATIONS >= 1]\n");
		return 2;
	}
	printf("%-9s %-6s %12s %10s %8s\n", "payload", "path", "ns/line", "MB/s", "speedup");
	for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
		size_t len;
		char *line = make_line(sizes[k], &len);
		long n = sizes[k] > 4096 ? iters / 10 : iters;
		double slow = run(false, line, len, n), fast = run(true, line, len, n);

		printf("%-9zu %-6s %12.0f %10.0f\n", sizes[k], "yajl", slow / (double)n * 1e9,
		       (double)len * (double)n / slow / 1e6);
		printf("%-9zu %-6s %12.0f %10.0f %7.1fx\n", sizes[k], "fast", fast / (double)n * 1e9,
		       (double)len * (double)n / fast / 1e6, slow / fast);
		free(line);
	}
	return 0;
}
