/*
 * test_consumer.c - unit tests for the pure parts of outbox-consume: the
 * JSON line of a stream entry (lib/consumer_render.c: field order, payload
 * and headers embedded when they are JSON and kept as strings when not,
 * escaping, UTF-8 repair, exact numbers) and the option parser
 * (lib/consumer_config.c: defaults, environment vs flags, milliseconds,
 * errors that never show a password).
 */
#include "consumer.h"
#include "consumer_render.h"

#include <stdarg.h>
#include <stdbool.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test.h"

#define SECRET "Sup3rS3cret"

/* Render stream/id plus NUL-terminated name/value pairs (NULL-terminated list). */
static const char *render(struct consumer_fmt *f, const char *const *kv)
{
	static char out[65536];
	struct consumer_field fields[32];
	const char *line;
	size_t n = 0, len;

	for (; kv[2 * n]; n++)
		fields[n] = (struct consumer_field){kv[2 * n], strlen(kv[2 * n]), kv[2 * n + 1],
		                                    strlen(kv[2 * n + 1])};
	if (!consumer_fmt_line(f, "outbox:order", 12, "1700000000000-0", 15, fields, n, &line, &len))
		return "(render failed)";
	if (len == 0 || line[len - 1] != '\n' || memchr(line, '\n', len - 1) || len >= sizeof(out))
		return "(not exactly one line)";
	memcpy(out, line, len - 1);
	out[len - 1] = '\0';
	return out;
}

/* The line for a single field named name with value v (binary-safe). */
static const char *render_one(struct consumer_fmt *f, const char *name, const char *v, size_t vlen)
{
	static char out[65536];
	struct consumer_field fl = {name, strlen(name), v, vlen};
	const char *line;
	size_t len;

	if (!consumer_fmt_line(f, "s", 1, "1-0", 3, &fl, 1, &line, &len) || len >= sizeof(out))
		return "(render failed)";
	memcpy(out, line, len - 1);
	out[len - 1] = '\0';
	return out;
}

#define PREFIX "{\"stream\":\"s\",\"entry_id\":\"1-0\","

TEST(outbox_entry_field_order_and_embedding)
{
	struct consumer_fmt *f = consumer_fmt_create();
	const char *const kv[] = {
	    "id",
	    "9b2f0c1e-0000-4000-8000-000000000001",
	    "aggregate_type",
	    "order",
	    "aggregate_id",
	    "agg-1",
	    "event_type",
	    "created",
	    "payload",
	    "{\"n\": 1, \"s\": \"x\\\"y\", \"a\": [1, 2.5, true, null]}",
	    "headers",
	    "{\"trace\": \"t-1\"}",
	    "created_at",
	    "2024-01-02 03:04:05.123456+00",
	    "_lsn",
	    "0/16B3748",
	    "_xid",
	    "747",
	    "_committed_at",
	    "2024-01-02 03:04:05.2+00",
	    NULL,
	};

	CHECK(f != NULL);
	CHECK_STR(render(f, kv),
	          "{\"stream\":\"outbox:order\",\"entry_id\":\"1700000000000-0\","
	          "\"id\":\"9b2f0c1e-0000-4000-8000-000000000001\",\"aggregate_type\":\"order\","
	          "\"aggregate_id\":\"agg-1\",\"event_type\":\"created\","
	          "\"payload\":{\"n\":1,\"s\":\"x\\\"y\",\"a\":[1,2.5,true,null]},"
	          "\"headers\":{\"trace\":\"t-1\"},"
	          "\"created_at\":\"2024-01-02 03:04:05.123456+00\",\"_lsn\":\"0/16B3748\","
	          "\"_xid\":\"747\",\"_committed_at\":\"2024-01-02 03:04:05.2+00\"}");
	consumer_fmt_destroy(f);
}

TEST(no_fields)
{
	struct consumer_fmt *f = consumer_fmt_create();
	const char *const kv[] = {NULL};

	CHECK_STR(render(f, kv), "{\"stream\":\"outbox:order\",\"entry_id\":\"1700000000000-0\"}");
	consumer_fmt_destroy(f);
}

TEST(invalid_json_kept_as_string)
{
	struct consumer_fmt *f = consumer_fmt_create();

	CHECK_STR(render_one(f, "payload", "not json", 8), PREFIX "\"payload\":\"not json\"}");
	CHECK_STR(render_one(f, "payload", "", 0), PREFIX "\"payload\":\"\"}");
	CHECK_STR(render_one(f, "payload", "{\"a\":1", 6), PREFIX "\"payload\":\"{\\\"a\\\":1\"}");
	/* Trailing garbage, two values, comments, single quotes: not one JSON text. */
	CHECK_STR(render_one(f, "payload", "{} x", 4), PREFIX "\"payload\":\"{} x\"}");
	CHECK_STR(render_one(f, "payload", "1 2", 3), PREFIX "\"payload\":\"1 2\"}");
	CHECK_STR(render_one(f, "payload", "/*c*/{}", 7), PREFIX "\"payload\":\"/*c*/{}\"}");
	CHECK_STR(render_one(f, "headers", "{'a':1}", 7), PREFIX "\"headers\":\"{'a':1}\"}");
	/* Broken in the middle, after some output went into the line already. */
	CHECK_STR(render_one(f, "payload", "{\"a\":[1,2,{\"b\":}]}", 18),
	          PREFIX "\"payload\":\"{\\\"a\\\":[1,2,{\\\"b\\\":}]}\"}");
	consumer_fmt_destroy(f);
}

TEST(json_scalars_and_whitespace)
{
	struct consumer_fmt *f = consumer_fmt_create();

	CHECK_STR(render_one(f, "payload", "42", 2), PREFIX "\"payload\":42}");
	CHECK_STR(render_one(f, "payload", "\"str\"", 5), PREFIX "\"payload\":\"str\"}");
	CHECK_STR(render_one(f, "payload", "null", 4), PREFIX "\"payload\":null}");
	CHECK_STR(render_one(f, "payload", " \n\t{ } \n", 8), PREFIX "\"payload\":{}}");
	CHECK_STR(render_one(f, "payload", "[]", 2), PREFIX "\"payload\":[]}");
	consumer_fmt_destroy(f);
}

TEST(numbers_exact)
{
	struct consumer_fmt *f = consumer_fmt_create();
	const char *big = "[123456789012345678901234567890,-0,1.0e-7,1E+400,0.1000]";

	CHECK_STR(render_one(f, "payload", big, strlen(big)),
	          PREFIX "\"payload\":[123456789012345678901234567890,-0,1.0e-7,1E+400,0.1000]}");
	consumer_fmt_destroy(f);
}

TEST(only_payload_and_headers_are_embedded)
{
	struct consumer_fmt *f = consumer_fmt_create();

	CHECK(consumer_is_json_field("payload", 7));
	CHECK(consumer_is_json_field("headers", 7));
	CHECK(!consumer_is_json_field("Payload", 7));
	CHECK(!consumer_is_json_field("payloads", 8));
	CHECK(!consumer_is_json_field("id", 2));
	CHECK_STR(render_one(f, "content", "{\"a\":1}", 7), PREFIX "\"content\":\"{\\\"a\\\":1}\"}");
	CHECK_STR(render_one(f, "id", "1", 1), PREFIX "\"id\":\"1\"}");
	consumer_fmt_destroy(f);
}

TEST(mixed_valid_and_invalid_candidates)
{
	struct consumer_fmt *f = consumer_fmt_create();
	const char *const kv[] = {"payload", "{\"ok\":true}", "headers", "{oops",
	                          "payload", "[1]",           NULL};

	CHECK_STR(render(f, kv), "{\"stream\":\"outbox:order\",\"entry_id\":\"1700000000000-0\","
	                         "\"payload\":{\"ok\":true},\"headers\":\"{oops\",\"payload\":[1]}");
	consumer_fmt_destroy(f);
}

TEST(escaping)
{
	struct consumer_fmt *f = consumer_fmt_create();
	static const char ctl[] = "q\"b\\s/t\tn\nr\rb\bf\fx\x01y\x1f"
	                          "z\x7f";
	static const char nul[] = {'a', '\0', 'b'};

	CHECK_STR(render_one(f, "v", ctl, sizeof(ctl) - 1),
	          PREFIX "\"v\":\"q\\\"b\\\\s/t\\tn\\nr\\rb\\bf\\fx\\u0001y\\u001Fz\x7f\"}");
	CHECK_STR(render_one(f, "v", nul, sizeof(nul)), PREFIX "\"v\":\"a\\u0000b\"}");
	/* Field names are escaped the same way. */
	CHECK_STR(render_one(f, "we\"ird\n", "1", 1), PREFIX "\"we\\\"ird\\n\":\"1\"}");
	consumer_fmt_destroy(f);
}

TEST(escaping_inside_embedded_json)
{
	struct consumer_fmt *f = consumer_fmt_create();
	const char *in = "{\"k\\\"ey\":\"a\\u0001b\\u00e9\\n\\/\\ud83d\\ude00\"}";

	/* Re-encoded: \u escapes of printable characters become UTF-8. */
	CHECK_STR(render_one(f, "payload", in, strlen(in)),
	          PREFIX "\"payload\":{\"k\\\"ey\":\"a\\u0001b\xC3\xA9\\n/\xF0\x9F\x98\x80\"}}");
	consumer_fmt_destroy(f);
}

TEST(unicode)
{
	struct consumer_fmt *f = consumer_fmt_create();
	const char *ok = "caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80 \xE2\x80\xA8";

	/* Valid UTF-8, including U+2028, passes through unchanged. */
	CHECK_STR(render_one(f, "v", ok, strlen(ok)),
	          PREFIX "\"v\":\"caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80 \xE2\x80\xA8\"}");
	/* Invalid bytes: each becomes U+FFFD; what is valid around them stays. */
	CHECK_STR(render_one(f, "v",
	                     "a\xFF"
	                     "b",
	                     3),
	          PREFIX "\"v\":\"a\xEF\xBF\xBD"
	                 "b\"}");
	CHECK_STR(render_one(f, "v", "\xC3", 1), PREFIX "\"v\":\"\xEF\xBF\xBD\"}");
	CHECK_STR(render_one(f, "v", "\xC0\xAF", 2), /* overlong "/" */
	          PREFIX "\"v\":\"\xEF\xBF\xBD\xEF\xBF\xBD\"}");
	CHECK_STR(render_one(f, "v", "\xED\xA0\x80", 3), /* surrogate U+D800 */
	          PREFIX "\"v\":\"\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\"}");
	CHECK_STR(render_one(f, "v", "\xF4\x90\x80\x80", 4), /* above U+10FFFF */
	          PREFIX "\"v\":\"\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\"}");
	CHECK_STR(render_one(f, "v", "\xE2\x82", 2), /* truncated */
	          PREFIX "\"v\":\"\xEF\xBF\xBD\xEF\xBF\xBD\"}");
	/* A payload with invalid UTF-8 is not JSON: kept as a repaired string. */
	CHECK_STR(render_one(f, "payload", "\"\xFF\"", 3),
	          PREFIX "\"payload\":\"\\\"\xEF\xBF\xBD\\\"\"}");
	consumer_fmt_destroy(f);
}

TEST(too_deep_is_a_string)
{
	struct consumer_fmt *f = consumer_fmt_create();
	char deep[402], want[1024];
	const char *got;

	memset(deep, '[', 200);
	memset(deep + 200, ']', 200);
	deep[400] = '\0';
	got = render_one(f, "payload", deep, 400);
	(void)snprintf(want, sizeof(want), PREFIX "\"payload\":\"%s\"}", deep);
	CHECK_STR(got, want);
	/* 100 levels still fit. */
	memset(deep, '[', 100);
	memset(deep + 100, ']', 100);
	deep[200] = '\0';
	got = render_one(f, "payload", deep, 200);
	(void)snprintf(want, sizeof(want), PREFIX "\"payload\":%s}", deep);
	CHECK_STR(got, want);
	consumer_fmt_destroy(f);
}

TEST(reuse_after_failure)
{
	struct consumer_fmt *f = consumer_fmt_create();

	CHECK_STR(render_one(f, "payload", "{\"a\":[", 6), PREFIX "\"payload\":\"{\\\"a\\\":[\"}");
	CHECK_STR(render_one(f, "payload", "{\"a\":[]}", 8), PREFIX "\"payload\":{\"a\":[]}}");
	CHECK_STR(render_one(f, "payload", "{\"a\":[]}", 8), PREFIX "\"payload\":{\"a\":[]}}");
	consumer_fmt_destroy(f);
	consumer_fmt_destroy(NULL);
}

/* ---- Options ---- */

/* Collect the NULL-terminated arguments after env into argv (argv[0] set). */
/* Writable copies of the last arguments: consumer_config_load scrubs passwords in argv. */
static char argbuf[32][512];

static int collect(char **argv, size_t max, va_list ap)
{
	int argc = 1;
	const char *a;

	argv[0] = "outbox-consume";
	while ((size_t)argc + 1 < max && argc < 32 && (a = va_arg(ap, const char *)) != NULL) {
		(void)snprintf(argbuf[argc], sizeof(argbuf[argc]), "%s", a);
		argv[argc] = argbuf[argc];
		argc++;
	}
	argv[argc] = NULL;
	return argc;
}

/* consumer_config_load() over the NULL-terminated arguments. */
static enum config_result load(struct consumer_config *cf, char **env, char *err, size_t len, ...)
{
	char *argv[32];
	va_list ap;
	int argc;

	va_start(ap, len);
	argc = collect(argv, 32, ap);
	va_end(ap);
	return consumer_config_load(cf, argc, argv, env, err, len);
}

TEST(config_defaults)
{
	struct consumer_config cf;
	char err[512], want[300], host[256];

	CHECK_INT(load(&cf, NULL, err, sizeof(err), "--group", "g", "--stream", "s", NULL), CONFIG_OK);
	CHECK_STR(cf.redis_url, "redis://127.0.0.1:6379");
	CHECK_STR(cf.redis.host, "127.0.0.1");
	CHECK_INT(cf.redis.port, 6379);
	CHECK_INT(cf.nstreams, 1);
	CHECK_STR(cf.streams[0], "s");
	CHECK(cf.stream_pattern == NULL);
	CHECK_STR(cf.group, "g");
	CHECK_INT(cf.count, 0);
	CHECK_INT(cf.block_ms, 5000);
	CHECK_INT(cf.batch, 100);
	CHECK_INT(cf.claim_idle_ms, 60000);
	CHECK(!cf.create_group);
	CHECK(gethostname(host, sizeof(host)) == 0);
	(void)snprintf(want, sizeof(want), "%s-%ld", host, (long)getpid());
	CHECK_STR(cf.consumer, want);
	consumer_config_finish(&cf);
	consumer_config_finish(NULL);
}

TEST(config_flags)
{
	struct consumer_config cf;
	char err[512];

	CHECK_INT(load(&cf, NULL, err, sizeof(err), "--redis-url", "unix:///tmp/r.sock?db=2",
	               "--stream-pattern", "outbox:*", "--group=workers", "--consumer", "c1", "--count",
	               "10", "--block", "250", "--batch=7", "--claim-idle", "2s", "--create-group",
	               NULL),
	          CONFIG_OK);
	CHECK_STR(cf.redis.unix_path, "/tmp/r.sock");
	CHECK_INT(cf.redis.db, 2);
	CHECK_STR(cf.stream_pattern, "outbox:*");
	CHECK_INT(cf.nstreams, 0);
	CHECK_STR(cf.group, "workers");
	CHECK_STR(cf.consumer, "c1");
	CHECK_INT(cf.count, 10);
	CHECK_INT(cf.block_ms, 250);
	CHECK_INT(cf.batch, 7);
	CHECK_INT(cf.claim_idle_ms, 2000);
	CHECK(cf.create_group);
	consumer_config_finish(&cf);

	CHECK_INT(load(&cf, NULL, err, sizeof(err), "--group", "g", "--stream", "a", "--stream", "b",
	               "--claim-idle=0", NULL),
	          CONFIG_OK);
	CHECK_INT(cf.nstreams, 2);
	CHECK_STR(cf.streams[1], "b");
	CHECK_INT(cf.claim_idle_ms, 0);
	consumer_config_finish(&cf);
}

TEST(config_env_and_precedence)
{
	struct consumer_config cf;
	char err[512];
	char *env[] = {"OUTBOX_CONSUME_GROUP=envgroup",
	               "OUTBOX_CONSUME_STREAM= a , b,c",
	               "OUTBOX_CONSUME_COUNT=5",
	               "OUTBOX_CONSUME_BLOCK=1m",
	               "OUTBOX_CONSUME_CREATE_GROUP=yes",
	               "OUTBOX_CONSUME_SERVICE_HOST=10.0.0.1", /* Kubernetes: ignored */
	               "OUTBOX_RELAY_GROUP=other",
	               NULL};

	CHECK_INT(load(&cf, env, err, sizeof(err), NULL), CONFIG_OK);
	CHECK_STR(cf.group, "envgroup");
	CHECK_INT(cf.nstreams, 3);
	CHECK_STR(cf.streams[0], "a");
	CHECK_STR(cf.streams[2], "c");
	CHECK_INT(cf.count, 5);
	CHECK_INT(cf.block_ms, 60000);
	CHECK(cf.create_group);
	consumer_config_finish(&cf);

	/* Flags win, and --stream flags replace the variable's list. */
	CHECK_INT(load(&cf, env, err, sizeof(err), "--group", "flaggroup", "--stream", "x", "--count",
	               "0", "--no-create-group", NULL),
	          CONFIG_OK);
	CHECK_STR(cf.group, "flaggroup");
	CHECK_INT(cf.nstreams, 1);
	CHECK_STR(cf.streams[0], "x");
	CHECK_INT(cf.count, 0);
	CHECK(!cf.create_group);
	consumer_config_finish(&cf);
}

/* Expect CONFIG_ERROR with want in err, one line, no secret, *cf zeroed. */
static bool fails_with(const char *want, char **env, ...)
{
	struct consumer_config cf;
	char *argv[32], err[512];
	va_list ap;
	bool ok = true;
	int argc;

	va_start(ap, env);
	argc = collect(argv, 32, ap);
	va_end(ap);
	memset(&cf, 0xAB, sizeof(cf));
	if (consumer_config_load(&cf, argc, argv, env, err, sizeof(err)) != CONFIG_ERROR) {
		printf("# expected an error containing \"%s\"\n", want);
		consumer_config_finish(&cf);
		return false;
	}
	if (!strstr(err, want)) {
		printf("# err \"%s\" lacks \"%s\"\n", err, want);
		ok = false;
	}
	if (strstr(err, SECRET) || strchr(err, '\n')) {
		printf("# err \"%s\" leaks the secret or spans lines\n", err);
		ok = false;
	}
	if (cf.group || cf.streams || cf.redis_url || cf.count) {
		printf("# cf not zeroed on error\n");
		ok = false;
	}
	return ok;
}

TEST(config_errors)
{
	char *env_bad[] = {"OUTBOX_CONSUME_COUNT=abc", NULL};

	CHECK(fails_with("missing --group", NULL, "--stream", "s", NULL));
	CHECK(fails_with("missing --stream or --stream-pattern", NULL, "--group", "g", NULL));
	CHECK(fails_with("--count", NULL, "--group", "g", "--stream", "s", "--count", "-1", NULL));
	CHECK(fails_with("\"abc\" in OUTBOX_CONSUME_COUNT", env_bad, "--group", "g", "--stream", "s",
	                 NULL));
	CHECK(fails_with("--block", NULL, "--group", "g", "--stream", "s", "--block", "0", NULL));
	CHECK(fails_with("--batch", NULL, "--group", "g", "--stream", "s", "--batch", "0", NULL));
	CHECK(fails_with("--claim-idle", NULL, "--group", "g", "--stream", "s", "--claim-idle", "soon",
	                 NULL));
	CHECK(fails_with("--create-group", NULL, "--group", "g", "--stream", "s",
	                 "--create-group=maybe", NULL));
	CHECK(fails_with("unknown option \"--nope\"", NULL, "--group", "g", "--stream", "s",
	                 "--nope=" SECRET, NULL));
	CHECK(fails_with("needs a value", NULL, "--stream", "s", "--group", NULL));
	CHECK(fails_with("no positional arguments", NULL, "--group", "g", "--stream", "s",
	                 "redis://:" SECRET "@h", NULL));
	/* The argument after a secret option's value may be the rest of the secret. */
	CHECK(fails_with("argument #7 (not shown", NULL, "--group", "g", "--stream", "s",
	                 "--redis-sentinel-password", "pass", SECRET, NULL));
	CHECK(fails_with("unexpected argument \"extra\"", NULL, "--group", "g", "--stream", "s", "--",
	                 "extra", NULL));
	CHECK(fails_with("must be between 1ms and 1d", NULL, "--group", "g", "--stream", "s",
	                 "--block-timeout", "0", NULL));
	CHECK(fails_with("a bare number means seconds", NULL, "--group", "g", "--stream", "s",
	                 "--claim-min-idle", "soon", NULL));
	CHECK(fails_with("--redis-url", NULL, "--group", "g", "--stream", "s", "--redis-url",
	                 "http://:" SECRET "@h", NULL));
	CHECK(fails_with("--redis-password-file", NULL, "--group", "g", "--stream", "s",
	                 "--redis-password-file", "/nonexistent/pw", NULL));
}

/*
 * One rule for durations: a bare number means seconds (--block-timeout,
 * --claim-min-idle). The old names still read a bare number as milliseconds,
 * with one warning each; with a unit they mean the same; the new name wins.
 */
TEST(config_durations)
{
	struct consumer_config cf;
	char err[512];
	char *env_new[] = {"OUTBOX_CONSUME_BLOCK_TIMEOUT=2", "OUTBOX_CONSUME_CLAIM_IDLE=30000", NULL};

	CHECK_INT(load(&cf, NULL, err, sizeof(err), "--group", "g", "--stream", "s", "--block-timeout",
	               "2", "--claim-min-idle=90", "--", NULL),
	          CONFIG_OK);
	CHECK_INT(cf.block_ms, 2000);
	CHECK_INT(cf.claim_idle_ms, 90000);
	CHECK_INT(cf.nwarnings, 0);
	consumer_config_finish(&cf);

	CHECK_INT(load(&cf, NULL, err, sizeof(err), "--group", "g", "--stream", "s", "--block", "250",
	               "--claim-idle", "2s", NULL),
	          CONFIG_OK);
	CHECK_INT(cf.block_ms, 250);
	CHECK_INT(cf.claim_idle_ms, 2000);
	CHECK_INT(cf.nwarnings, 1); /* "2s" means what it always did: no warning */
	CHECK(strstr(cf.warnings[0], "--block 250: a bare number here still means milliseconds"));
	CHECK(strstr(cf.warnings[0], "write --block-timeout 250ms"));
	consumer_config_finish(&cf);

	/* The new name wins over the old one from the same source; a flag over a variable. */
	CHECK_INT(load(&cf, env_new, err, sizeof(err), "--group", "g", "--stream", "s",
	               "--block-timeout", "3s", "--block", "100", NULL),
	          CONFIG_OK);
	CHECK_INT(cf.block_ms, 3000);
	CHECK_INT(cf.claim_idle_ms, 30000);
	CHECK_INT(cf.nwarnings, 1);
	CHECK(strstr(cf.warnings[0], "OUTBOX_CONSUME_CLAIM_IDLE=30000:"));
	CHECK(strstr(cf.warnings[0], "write OUTBOX_CONSUME_CLAIM_MIN_IDLE=30000ms"));
	consumer_config_finish(&cf);
	CHECK_INT(load(&cf, env_new, err, sizeof(err), "--group", "g", "--stream", "s", "--block",
	               "100", NULL),
	          CONFIG_OK);
	CHECK_INT(cf.block_ms, 100);
	consumer_config_finish(&cf);
}

TEST(config_password_file)
{
	struct consumer_config cf;
	char path[] = "/tmp/test_consumer_pw.XXXXXX", err[512];
	int fd = mkstemp(path);

	CHECK(fd >= 0);
	CHECK(write(fd, SECRET "\nsecond line\n", strlen(SECRET) + 13) > 0);
	close(fd);
	CHECK_INT(load(&cf, NULL, err, sizeof(err), "--group", "g", "--stream", "s", "--redis-url",
	               "redis://:old@h", "--redis-password-file", path, NULL),
	          CONFIG_OK);
	CHECK_STR(cf.redis.password, SECRET);
	consumer_config_finish(&cf);
	unlink(path);
}

/* The password in --redis-url leaves argv (so /proc/PID/cmdline) once copied. */
TEST(config_argv_scrubbed)
{
	struct consumer_config cf;
	char err[512];

	CHECK_INT(load(&cf, NULL, err, sizeof(err), "--group", "g", "--stream", "s", "--redis-url",
	               "redis://relay:" SECRET "@h:6379/2", NULL),
	          CONFIG_OK);
	CHECK_STR(argbuf[6], "redis://relay:***@h:6379/2");
	CHECK_STR(cf.redis.password, SECRET);
	CHECK_STR(cf.redis_url, "redis://relay:" SECRET "@h:6379/2");
	consumer_config_finish(&cf);
	CHECK_INT(load(&cf, NULL, err, sizeof(err), "--group", "g", "--stream", "s",
	               "--redis-url=redis://:" SECRET "@h", NULL),
	          CONFIG_OK);
	CHECK_STR(argbuf[5], "--redis-url=redis://:***@h");
	consumer_config_finish(&cf);
}

TEST(config_user_without_password_and_file_mode)
{
	struct consumer_config cf;
	char path[] = "/tmp/test_consumer_pw.XXXXXX", err[512];
	int fd;

	CHECK(fails_with("--redis-url names a user but its password is empty", NULL, "--group", "g",
	                 "--stream", "s", "--redis-url", "redis://relay:@h", NULL));
	fd = mkstemp(path);
	CHECK(fd >= 0);
	CHECK(write(fd, SECRET "\n", strlen(SECRET) + 1) > 0);
	CHECK_INT(fchmod(fd, 0604), 0);
	close(fd);
	CHECK_INT(load(&cf, NULL, err, sizeof(err), "--group", "g", "--stream", "s", "--redis-url",
	               "redis://relay:@h", "--redis-password-file", path, NULL),
	          CONFIG_OK);
	CHECK_STR(cf.redis.user, "relay");
	CHECK_STR(cf.redis.password, SECRET);
	CHECK_INT(cf.nwarnings, 1);
	CHECK(strstr(cf.warnings[0], path) && strstr(cf.warnings[0], "chmod 600"));
	consumer_config_finish(&cf);
	unlink(path);
}

int main(void)
{
	RUN(outbox_entry_field_order_and_embedding);
	RUN(no_fields);
	RUN(invalid_json_kept_as_string);
	RUN(json_scalars_and_whitespace);
	RUN(numbers_exact);
	RUN(only_payload_and_headers_are_embedded);
	RUN(mixed_valid_and_invalid_candidates);
	RUN(escaping);
	RUN(escaping_inside_embedded_json);
	RUN(unicode);
	RUN(too_deep_is_a_string);
	RUN(reuse_after_failure);
	RUN(config_defaults);
	RUN(config_flags);
	RUN(config_env_and_precedence);
	RUN(config_errors);
	RUN(config_durations);
	RUN(config_password_file);
	RUN(config_argv_scrubbed);
	RUN(config_user_without_password_and_file_mode);
	return test_done();
}
