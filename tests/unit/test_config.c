/*
 * test_config.c - unit tests for lib/config.c: defaults, precedence of
 * flags over OUTBOX_RELAY_* variables, every value kind, the error messages,
 * --help/--version, and that secrets never reach an error message.
 *
 * Run under AddressSanitizer: every test ends with config_finish(), also
 * after failed loads, so a leak on any error path fails the run.
 */
#include "config.h"
#include "redis_tls.h"

#include <ctype.h>
#include <sys/stat.h>
#include <unistd.h>

#include <libpq-fe.h>
#include <yajl/yajl_version.h>

#include "test.h"

/* meson generates relay_build.h; standalone builds pass -DOUTBOX_RELAY_VERSION. */
#if defined(__has_include)
#if __has_include("relay_build.h")
#include "relay_build.h"
#endif
#endif
#ifndef OUTBOX_RELAY_VERSION
#error "OUTBOX_RELAY_VERSION is not defined: build with meson or pass -DOUTBOX_RELAY_VERSION"
#endif

#define MAXARGS 64
#define DSN "host=db dbname=app user=relay"

/* NULL-terminated lists of string literals. */
#define ARGS(...) ((const char *const[]){"outbox-relay", __VA_ARGS__, NULL})
#define ENV(...) ((const char *const[]){__VA_ARGS__, NULL})
#define NOENV ((const char *const[]){NULL})

static char errbuf[512];

/* The argv strings of the last load(), writable: config_load scrubs passwords in them. */
static char argbuf[MAXARGS + 1][1024];
static char *last_argv[MAXARGS + 1];

/* config_load with literal argv/envp lists; argv is copied to argbuf/last_argv. */
static enum config_result load(struct relay_config *cf, const char *const *args,
                               const char *const *env)
{
	char *envp[MAXARGS + 1];
	int argc = 0, n = 0;

	for (; args[argc] && argc < MAXARGS; argc++) {
		(void)snprintf(argbuf[argc], sizeof(argbuf[argc]), "%s", args[argc]);
		last_argv[argc] = argbuf[argc];
	}
	last_argv[argc] = NULL;
	for (; env[n] && n < MAXARGS; n++)
		envp[n] = (char *)env[n];
	envp[n] = NULL;
	memset(errbuf, 0, sizeof(errbuf));
	return config_load(cf, argc, last_argv, envp, errbuf, sizeof(errbuf));
}

/*
 * Expect CONFIG_ERROR with an err that contains want, is one line, and
 * holds none of the forbidden strings (e.g. a password). cf is finished.
 */
static bool load_fails(const char *const *args, const char *const *env, const char *want,
                       const char *forbidden)
{
	struct relay_config cf;
	enum config_result r = load(&cf, args, env);
	bool ok = true;

	if (r != CONFIG_ERROR) {
		printf("# expected CONFIG_ERROR, got %d\n", (int)r);
		ok = false;
	} else if (!strstr(errbuf, want)) {
		printf("# err \"%s\" lacks \"%s\"\n", errbuf, want);
		ok = false;
	}
	if (strchr(errbuf, '\n')) {
		printf("# err spans lines: \"%s\"\n", errbuf);
		ok = false;
	}
	if (forbidden && strstr(errbuf, forbidden)) {
		printf("# err \"%s\" leaks \"%s\"\n", errbuf, forbidden);
		ok = false;
	}
	/* config_load leaves *cf zeroed on failure; finishing it is safe. */
	if (cf.slot || cf.pg_dsn || cf.redis.host || cf.groups) {
		printf("# cf not zeroed after an error\n");
		ok = false;
	}
	config_finish(&cf);
	return ok;
}

/* Expect exactly this err text. */
static bool load_fails_exactly(const char *const *args, const char *const *env, const char *want)
{
	if (!load_fails(args, env, want, NULL))
		return false;
	if (strcmp(errbuf, want) != 0) {
		printf("# err \"%s\", want exactly \"%s\"\n", errbuf, want);
		return false;
	}
	return true;
}

TEST(defaults)
{
	struct relay_config cf;

	CHECK_INT(load(&cf, ARGS("--pg-dsn", DSN), NOENV), CONFIG_OK);
	CHECK_STR(errbuf, "");
	CHECK_STR(cf.pg_dsn, DSN);
	CHECK_STR(cf.slot, "outbox_relay");
	CHECK(cf.create_slot);
	CHECK_STR(cf.table, "public.outbox");
	CHECK_STR(cf.message_prefix, "outbox");
	CHECK_STR(cf.id_column, "id");
	CHECK_INT(cf.status_interval_ms, 10000);
	CHECK(cf.endpos == LSN_INVALID);
	CHECK_STR(cf.redis_url, "redis://127.0.0.1:6379");
	CHECK_STR(cf.redis.host, "127.0.0.1");
	CHECK_INT(cf.redis.port, 6379);
	CHECK_INT(cf.redis.db, 0);
	CHECK(cf.redis.password == NULL);
	CHECK_STR(cf.stream, "outbox:{aggregate_type}");
	CHECK_STR(cf.dead_letter_stream, "outbox:dead-letter");
	CHECK_INT(cf.dedup_window_s, 3600);
	CHECK_INT(cf.maxlen, 0);
	CHECK_STR(cf.trim, "none");
	CHECK_INT(cf.trim_interval_ms, 60000);
	CHECK(cf.groups == NULL);
	CHECK_INT(cf.ngroups, 0);
	CHECK_STR(cf.key_prefix, "outbox-relay");
	CHECK(cf.redis_functions);
	CHECK_INT(cf.redis_timeout_ms, 5000);
	CHECK_INT(cf.max_inflight_events, 10000);
	CHECK_INT(cf.max_inflight_bytes, 8 * 1024 * 1024);
	CHECK_INT(cf.shutdown_timeout_ms, 10000);
	CHECK_INT(cf.retry_max_ms, 30000);
	CHECK_INT(cf.log_level, LOG_LEVEL_INFO);
	CHECK_INT(cf.log_format, LOG_FORMAT_TEXT);
	config_finish(&cf);
	CHECK(cf.pg_dsn == NULL && cf.slot == NULL && cf.ngroups == 0);
}

TEST(every_option_from_argv)
{
	struct relay_config cf;

	CHECK_INT(
	    load(&cf,
	         ARGS("--pg-dsn", "postgresql://relay@db/app", "--slot", "s1", "--no-create-slot",
	              "--table", "app.events", "--message-prefix", "evt", "--id-column", "event_id",
	              "--status-interval", "250ms", "--endpos", "1/A0", "--redis-url",
	              "redis://:pw@r:6380/2", "--stream", "s:{x}", "--dead-letter-stream", "dl",
	              "--dedup-window", "2m", "--maxlen", "5000", "--group", "g1", "--key-prefix", "kp",
	              "--no-redis-functions", "--redis-timeout", "1s", "--max-inflight-events", "7",
	              "--max-inflight-bytes", "1MiB", "--shutdown-timeout", "0", "--retry-max", "1m",
	              "--log-level", "debug", "--log-format", "json"),
	         NOENV),
	    CONFIG_OK);
	CHECK_STR(errbuf, "");
	CHECK_STR(cf.pg_dsn, "postgresql://relay@db/app");
	CHECK_STR(cf.slot, "s1");
	CHECK(!cf.create_slot);
	CHECK_STR(cf.table, "app.events");
	CHECK_STR(cf.message_prefix, "evt");
	CHECK_STR(cf.id_column, "event_id");
	CHECK_INT(cf.status_interval_ms, 250);
	CHECK(cf.endpos == UINT64_C(0x1000000A0));
	CHECK_STR(cf.redis_url, "redis://:pw@r:6380/2");
	CHECK_STR(cf.redis.host, "r");
	CHECK_INT(cf.redis.port, 6380);
	CHECK_INT(cf.redis.db, 2);
	CHECK_STR(cf.redis.password, "pw");
	CHECK_STR(cf.stream, "s:{x}");
	CHECK_STR(cf.dead_letter_stream, "dl");
	CHECK_INT(cf.dedup_window_s, 120);
	CHECK_INT(cf.maxlen, 5000);
	CHECK_INT(cf.ngroups, 1);
	CHECK_STR(cf.ngroups == 1 ? cf.groups[0] : NULL, "g1");
	CHECK_STR(cf.key_prefix, "kp");
	CHECK(!cf.redis_functions);
	CHECK_INT(cf.redis_timeout_ms, 1000);
	CHECK_INT(cf.max_inflight_events, 7);
	CHECK_INT(cf.max_inflight_bytes, 1024 * 1024);
	CHECK_INT(cf.shutdown_timeout_ms, 0);
	CHECK_INT(cf.retry_max_ms, 60000);
	CHECK_INT(cf.log_level, LOG_LEVEL_DEBUG);
	CHECK_INT(cf.log_format, LOG_FORMAT_JSON);
	config_finish(&cf);
}

TEST(env_then_flags)
{
	struct relay_config cf;

	/* Environment alone. */
	CHECK_INT(load(&cf, ARGS("--slot", "from_flag"),
	               ENV("PATH=/usr/bin", "OUTBOX_RELAY_PG_DSN=" DSN, "OUTBOX_RELAY_SLOT=from_env",
	                   "OUTBOX_RELAY_MAXLEN=100", "OUTBOX_RELAY_LOG_LEVEL=warn",
	                   "OUTBOX_RELAY_DEDUP_WINDOW=90s")),
	          CONFIG_OK);
	CHECK_STR(cf.pg_dsn, DSN);
	CHECK_STR(cf.slot, "from_flag"); /* flags win */
	CHECK_INT(cf.maxlen, 100);
	CHECK_INT(cf.log_level, LOG_LEVEL_WARN);
	CHECK_INT(cf.dedup_window_s, 90);
	config_finish(&cf);

	/* The last flag wins among repeats. */
	CHECK_INT(load(&cf, ARGS("--pg-dsn", DSN, "--maxlen", "1", "--maxlen=2"),
	               ENV("OUTBOX_RELAY_MAXLEN=3")),
	          CONFIG_OK);
	CHECK_INT(cf.maxlen, 2);
	config_finish(&cf);

	/* A broken variable that a flag overrides is not an error. */
	CHECK_INT(load(&cf, ARGS("--pg-dsn", DSN, "--dedup-window", "5"),
	               ENV("OUTBOX_RELAY_DEDUP_WINDOW=abc")),
	          CONFIG_OK);
	CHECK_INT(cf.dedup_window_s, 5);
	config_finish(&cf);

	/* Variables are read from envp, not the process environment. */
	CHECK_INT(setenv("OUTBOX_RELAY_SLOT", "from_getenv", 1), 0);
	CHECK_INT(load(&cf, ARGS("--pg-dsn", DSN), NOENV), CONFIG_OK);
	CHECK_STR(cf.slot, "outbox_relay");
	config_finish(&cf);
	CHECK_INT(unsetenv("OUTBOX_RELAY_SLOT"), 0);

	/* envp may be NULL. */
	{
		char *argv[] = {"outbox-relay", "--pg-dsn", DSN, NULL};

		CHECK_INT(config_load(&cf, 3, argv, NULL, errbuf, sizeof(errbuf)), CONFIG_OK);
		config_finish(&cf);
	}
}

TEST(env_errors_name_the_variable)
{
	CHECK(load_fails_exactly(
	    ARGS("--pg-dsn", DSN), ENV("OUTBOX_RELAY_DEDUP_WINDOW=abc"),
	    "invalid value \"abc\" in OUTBOX_RELAY_DEDUP_WINDOW: expected a duration such as "
	    "3600, 90s or 1h (a bare number means seconds; units ms, s, m, h, d)"));
	CHECK(load_fails(ARGS("--pg-dsn", DSN), ENV("OUTBOX_RELAY_MAXLEN=-1"),
	                 "invalid value \"-1\" in OUTBOX_RELAY_MAXLEN: must be between 0 and "
	                 "1000000000000",
	                 NULL));
	CHECK(load_fails(ARGS("--pg-dsn", DSN), ENV("OUTBOX_RELAY_CREATE_SLOT=maybe"),
	                 "invalid value \"maybe\" in OUTBOX_RELAY_CREATE_SLOT: expected true or false",
	                 NULL));
	/* Unknown OUTBOX_RELAY_* names are ignored (Kubernetes service variables). */
	{
		struct relay_config cf;

		CHECK_INT(load(&cf, ARGS("--pg-dsn", DSN),
		               ENV("OUTBOX_RELAY_SERVICE_HOST=10.0.0.1", "OUTBOX_RELAY_PORT=tcp://x:9")),
		          CONFIG_OK);
		config_finish(&cf);
	}
	CHECK(load_fails(ARGS("--pg-dsn", DSN),
	                 ENV("OUTBOX_RELAY_REDIS_URL=redis://:"
	                     "hunter2"
	                     "@h:x"),
	                 "invalid OUTBOX_RELAY_REDIS_URL: invalid port", "hunter2"));
}

TEST(equals_form)
{
	struct relay_config cf;

	CHECK_INT(load(&cf,
	               ARGS("--pg-dsn=host=db password=x=y", "--slot=abc", "--stream=a=b",
	                    "--maxlen=10", "--log-format=json"),
	               NOENV),
	          CONFIG_OK);
	CHECK_STR(cf.pg_dsn, "host=db password=x=y");
	CHECK_STR(cf.slot, "abc");
	CHECK_STR(cf.stream, "a=b"); /* only the first '=' splits */
	CHECK_INT(cf.maxlen, 10);
	CHECK_INT(cf.log_format, LOG_FORMAT_JSON);
	config_finish(&cf);

	/* --name= gives an empty value, which the option then judges. */
	CHECK(load_fails_exactly(ARGS("--pg-dsn", DSN, "--stream="), NOENV,
	                         "invalid value \"\" for --stream: must not be empty"));
	CHECK(load_fails(ARGS("--pg-dsn", DSN, "--message-prefix="), NOENV, "must not be empty", NULL));
	CHECK(load_fails(ARGS("--pg-dsn", DSN, "--id-column", ""), NOENV,
	                 "invalid value \"\" for --id-column: must not be empty", NULL));
}

TEST(bools)
{
	struct relay_config cf;
	static const char *const truthy[] = {"true", "1", "yes", "on", "TRUE", "Yes"};
	static const char *const falsy[] = {"false", "0", "no", "off", "FALSE", "Off"};

	CHECK_INT(load(&cf, ARGS("--pg-dsn", DSN, "--no-create-slot", "--no-redis-functions"), NOENV),
	          CONFIG_OK);
	CHECK(!cf.create_slot);
	CHECK(!cf.redis_functions);
	config_finish(&cf);

	CHECK_INT(
	    load(&cf, ARGS("--pg-dsn", DSN, "--create-slot"), ENV("OUTBOX_RELAY_CREATE_SLOT=false")),
	    CONFIG_OK);
	CHECK(cf.create_slot);
	config_finish(&cf);

	CHECK_INT(
	    load(&cf, ARGS("--pg-dsn", DSN, "--create-slot=false", "--redis-functions=on"), NOENV),
	    CONFIG_OK);
	CHECK(!cf.create_slot);
	CHECK(cf.redis_functions);
	config_finish(&cf);

	for (size_t i = 0; i < sizeof(truthy) / sizeof(truthy[0]); i++) {
		char t[64], f[64];

		(void)snprintf(t, sizeof(t), "OUTBOX_RELAY_CREATE_SLOT=%s", truthy[i]);
		(void)snprintf(f, sizeof(f), "OUTBOX_RELAY_REDIS_FUNCTIONS=%s", falsy[i]);
		CHECK_INT(load(&cf, ARGS("--pg-dsn", DSN), ENV(t, f)), CONFIG_OK);
		CHECK(cf.create_slot);
		CHECK(!cf.redis_functions);
		config_finish(&cf);
	}

	CHECK(load_fails_exactly(ARGS("--pg-dsn", DSN, "--create-slot=maybe"), NOENV,
	                         "invalid value \"maybe\" for --create-slot: expected true or false "
	                         "(or 1/0, yes/no, on/off)"));
	CHECK(load_fails(ARGS("--pg-dsn", DSN, "--no-create-slot=1"), NOENV,
	                 "option --no-create-slot does not take a value", NULL));
	/* A bool flag does not consume the next argument. */
	CHECK(load_fails(ARGS("--pg-dsn", DSN, "--create-slot", "false"), NOENV,
	                 "write --create-slot=false, or --no-create-slot", NULL));
	/* --no- works only for bools. */
	CHECK(load_fails(ARGS("--pg-dsn", DSN, "--no-slot"), NOENV, "unknown option \"--no-slot\"",
	                 NULL));
}

TEST(parse_duration)
{
	static const struct {
		const char *s;
		int64_t ms;
	} good[] = {
	    {"0", 0},          {"250ms", 250},
	    {"10s", 10000},    {"5m", 300000},
	    {"1h", 3600000},   {"2d", 172800000},
	    {"3600", 3600000}, {"0ms", 0},
	    {"007s", 7000},    {"9223372036854775807ms", INT64_MAX},
	};
	static const char *const bad[] = {
	    "",
	    "s",
	    "ms",
	    "-1",
	    "-5s",
	    "+5s",
	    " 5s",
	    "5s ",
	    "5 s",
	    "1.5s",
	    "5x",
	    "5sec",
	    "5S",
	    "1h30m",
	    "0x10",
	    "abc",
	    "9223372036854775808ms",
	    "9223372036854775807s",
	    "99999999999999999999",
	    "106751991167301d",
	};

	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		int64_t ms = -1;

		CHECK(opt_parse_duration_ms(good[i].s, &ms));
		if (ms != good[i].ms)
			printf("# \"%s\" -> %lld\n", good[i].s, (long long)ms);
		CHECK(ms == good[i].ms);
	}
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		int64_t ms = 42;

		if (opt_parse_duration_ms(bad[i], &ms))
			printf("# accepted \"%s\"\n", bad[i]);
		CHECK(!opt_parse_duration_ms(bad[i], &ms));
		CHECK(ms == 42);
	}
	CHECK(!opt_parse_duration_ms(NULL, &(int64_t){0}));
}

TEST(duration_options)
{
	struct relay_config cf;

	/* Range edges are inclusive. */
	CHECK_INT(load(&cf,
	               ARGS("--pg-dsn", DSN, "--status-interval", "100ms", "--redis-timeout", "10m",
	                    "--shutdown-timeout", "2", "--retry-max", "600s", "--dedup-window", "30d"),
	               NOENV),
	          CONFIG_OK);
	CHECK_INT(cf.status_interval_ms, 100);
	CHECK_INT(cf.redis_timeout_ms, 600000);
	CHECK_INT(cf.shutdown_timeout_ms, 2000);
	CHECK_INT(cf.retry_max_ms, 600000);
	CHECK_INT(cf.dedup_window_s, 30 * 86400);
	config_finish(&cf);

	CHECK_INT(load(&cf, ARGS("--pg-dsn", DSN, "--status-interval=1h", "--dedup-window=0"), NOENV),
	          CONFIG_OK);
	CHECK_INT(cf.status_interval_ms, 3600000);
	CHECK_INT(cf.dedup_window_s, 0);
	config_finish(&cf);

	/* Whole seconds given in ms are fine for --dedup-window. */
	CHECK_INT(load(&cf, ARGS("--pg-dsn", DSN, "--dedup-window", "2000ms"), NOENV), CONFIG_OK);
	CHECK_INT(cf.dedup_window_s, 2);
	config_finish(&cf);

	CHECK(
	    load_fails_exactly(ARGS("--pg-dsn", DSN, "--dedup-window", "abc"), NOENV,
	                       "invalid value \"abc\" for --dedup-window: expected a duration such as "
	                       "3600, 90s or 1h (a bare number means seconds; units ms, s, m, h, d)"));
	CHECK(load_fails(ARGS("--pg-dsn", DSN, "--status-interval", "1.5s"), NOENV,
	                 "invalid value \"1.5s\" for --status-interval: expected a duration", NULL));
	CHECK(load_fails(ARGS("--pg-dsn", DSN, "--retry-max", ""), NOENV,
	                 "invalid value \"\" for --retry-max: expected a duration", NULL));
	CHECK(
	    load_fails_exactly(ARGS("--pg-dsn", DSN, "--dedup-window", "500ms"), NOENV,
	                       "invalid value \"500ms\" for --dedup-window: must be a whole number of "
	                       "seconds, such as 90s or 3600"));
	CHECK(load_fails(ARGS("--pg-dsn", DSN, "--dedup-window", "1500ms"), NOENV,
	                 "must be a whole number of seconds", NULL));
	CHECK(load_fails_exactly(ARGS("--pg-dsn", DSN, "--status-interval", "99ms"), NOENV,
	                         "invalid value \"99ms\" for --status-interval: must be between 100ms "
	                         "and 1h"));
	CHECK(load_fails(ARGS("--pg-dsn", DSN, "--status-interval", "3601"), NOENV,
	                 "must be between 100ms and 1h", NULL));
	CHECK(load_fails(ARGS("--pg-dsn", DSN, "--dedup-window", "31d"), NOENV,
	                 "invalid value \"31d\" for --dedup-window: must be between 0 and 30d", NULL));
	/* A negative duration is out of range, not junk. */
	CHECK(load_fails(ARGS("--pg-dsn", DSN, "--dedup-window", "-5"), NOENV,
	                 "invalid value \"-5\" for --dedup-window: must be between 0 and 30d", NULL));
	CHECK(load_fails(ARGS("--pg-dsn", DSN, "--shutdown-timeout", "-1s"), NOENV,
	                 "must be between 0 and 10m", NULL));
	CHECK(load_fails(ARGS("--pg-dsn", DSN, "--redis-timeout", "99999999999999999999999h"), NOENV,
	                 "for --redis-timeout: must be between 100ms and 10m", NULL));
	CHECK(load_fails(ARGS("--pg-dsn", DSN, "--retry-max", "11m"), NOENV,
	                 "for --retry-max: must be between 100ms and 10m", NULL));
}

TEST(sizes)
{
	static const struct {
		const char *s;
		int64_t bytes;
	} good[] = {
	    {"65536", 65536},
	    {"64k", 65536},
	    {"64K", 65536},
	    {"64KB", 65536},
	    {"64KiB", 65536},
	    {"64kib", 65536},
	    {"1M", 1048576},
	    {"1MB", 1048576},
	    {"1MiB", 1048576},
	    {"2G", 2147483648LL},
	    {"2GB", 2147483648LL},
	    {"16GiB", 17179869184LL},
	    {"17179869184", 17179869184LL},
	};
	struct relay_config cf;

	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		CHECK_INT(load(&cf, ARGS("--pg-dsn", DSN, "--max-inflight-bytes", good[i].s), NOENV),
		          CONFIG_OK);
		if (cf.max_inflight_bytes != good[i].bytes)
			printf("# \"%s\" -> %lld (%s)\n", good[i].s, (long long)cf.max_inflight_bytes, errbuf);
		CHECK(cf.max_inflight_bytes == good[i].bytes);
		config_finish(&cf);
	}

	CHECK(load_fails_exactly(ARGS("--pg-dsn", DSN, "--max-inflight-bytes", "17G"), NOENV,
	                         "invalid value \"17G\" for --max-inflight-bytes: must be between "
	                         "64KiB and 16GiB"));
	CHECK(load_fails(ARGS("--pg-dsn", DSN, "--max-inflight-bytes", "65535"), NOENV,
	                 "must be between 64KiB and 16GiB", NULL));
	CHECK(load_fails(ARGS("--pg-dsn", DSN, "--max-inflight-bytes", "-1"), NOENV,
	                 "must be between 64KiB and 16GiB", NULL));
	CHECK(load_fails(ARGS("--pg-dsn", DSN, "--max-inflight-bytes", "99999999999999999999G"), NOENV,
	                 "must be between 64KiB and 16GiB", NULL));
	CHECK(load_fails(ARGS("--pg-dsn", DSN, "--max-inflight-bytes", "8589934592G"), NOENV,
	                 "must be between 64KiB and 16GiB", NULL));
	static const char *const junk[] = {"",    "1x",    "1.5M",    "M", " 1M",
	                                   "1 M", "1MiBs", "0x10000", "1T"};
	for (size_t i = 0; i < sizeof(junk) / sizeof(junk[0]); i++)
		CHECK(load_fails(ARGS("--pg-dsn", DSN, "--max-inflight-bytes", junk[i]), NOENV,
		                 "for --max-inflight-bytes: expected a size such as 1048576, 512KiB, "
		                 "64MiB or 1GiB",
		                 NULL));
}

TEST(ints)
{
	struct relay_config cf;

	CHECK_INT(load(&cf,
	               ARGS("--pg-dsn", DSN, "--maxlen", "1000000000000", "--max-inflight-events",
	                    "10000000"),
	               NOENV),
	          CONFIG_OK);
	CHECK(cf.maxlen == INT64_C(1000000000000));
	CHECK_INT(cf.max_inflight_events, 10000000);
	config_finish(&cf);

	CHECK(load_fails_exactly(ARGS("--pg-dsn", DSN, "--maxlen", "-5"), NOENV,
	                         "invalid value \"-5\" for --maxlen: must be between 0 and "
	                         "1000000000000"));
	CHECK(load_fails(ARGS("--pg-dsn", DSN, "--maxlen", "1000000000001"), NOENV,
	                 "must be between 0 and 1000000000000", NULL));
	CHECK(load_fails(ARGS("--pg-dsn", DSN, "--maxlen", "99999999999999999999999999"), NOENV,
	                 "must be between 0 and 1000000000000", NULL));
	CHECK(load_fails(ARGS("--pg-dsn", DSN, "--maxlen", "-99999999999999999999999999"), NOENV,
	                 "must be between 0 and 1000000000000", NULL));
	CHECK(load_fails(
	    ARGS("--pg-dsn", DSN, "--max-inflight-events", "0"), NOENV,
	    "invalid value \"0\" for --max-inflight-events: must be between 1 and 10000000", NULL));
	CHECK(load_fails(ARGS("--pg-dsn", DSN, "--max-inflight-events", "10000001"), NOENV,
	                 "must be between 1 and 10000000", NULL));
	static const char *const junk[] = {"", "abc", "12x", "1e6", " 5", "5 ", "0x10", "-", "1k"};
	for (size_t i = 0; i < sizeof(junk) / sizeof(junk[0]); i++)
		CHECK(load_fails(ARGS("--pg-dsn", DSN, "--maxlen", junk[i]), NOENV,
		                 "for --maxlen: expected a whole number", NULL));
}

TEST(unknown_options)
{
	CHECK(load_fails_exactly(ARGS("--pg-dsn", DSN, "--foo"), NOENV,
	                         "unknown option \"--foo\"; run outbox-relay --help for the list"));
	/* The value of a misspelt flag is never echoed: it may be a password. */
	CHECK(load_fails_exactly(ARGS("--pg-dns=host=db password=hunter2", "--pg-dsn", DSN), NOENV,
	                         "unknown option \"--pg-dns\"; run outbox-relay --help for the list"));
	CHECK(load_fails(ARGS("--pg-dsn", DSN, "-x"), NOENV, "unknown option \"-x\"", NULL));
	CHECK(load_fails(ARGS("--pg-dsn", DSN, "---slot", "x"), NOENV, "unknown option", NULL));
	CHECK(
	    load_fails(ARGS("--pg-dsn", DSN, "--SLOT", "x"), NOENV, "unknown option \"--SLOT\"", NULL));
	CHECK(load_fails(ARGS("--pg-dsn", DSN, "--help=1"), NOENV,
	                 "option --help does not take a value", NULL));
}

TEST(positional_arguments)
{
	struct relay_config cf;

	CHECK(load_fails(ARGS("--pg-dsn", DSN, "--slot", "x", "extra"), NOENV,
	                 "unexpected argument \"extra\"; outbox-relay takes no positional arguments",
	                 NULL));
	CHECK(load_fails(ARGS("-", "--pg-dsn", DSN), NOENV, "unexpected argument \"-\"", NULL));
	CHECK(load_fails(ARGS("--pg-dsn", DSN, "--", "x"), NOENV, "unexpected argument \"x\"", NULL));
	/* An unquoted conninfo spills into positional arguments: do not echo it. */
	CHECK(load_fails(ARGS("--pg-dsn", "host=db", "password=hunter2"), NOENV,
	                 "unexpected argument #3 (not shown: it may hold a secret)", "hunter2"));
	CHECK(load_fails(ARGS("--redis-url", "redis://:pw@h", "hunter2"), NOENV,
	                 "unexpected argument #3", "hunter2"));
	/* After a secret option's value even a plain word is not shown. */
	CHECK(load_fails(ARGS("--pg-dsn", DSN, "hunter2"), NOENV, "unexpected argument #3", "hunter2"));
	CHECK(load_fails(ARGS("--pg-dsn=host=db", "password=hunter2"), NOENV, "unexpected argument #2",
	                 "hunter2"));
	/* A trailing "--" alone is fine. */
	CHECK_INT(load(&cf, ARGS("--pg-dsn", DSN, "--"), NOENV), CONFIG_OK);
	config_finish(&cf);
}

TEST(missing_value)
{
	CHECK(
	    load_fails_exactly(ARGS("--pg-dsn", DSN, "--slot"), NOENV, "option --slot needs a value"));
	/* The next flag is not taken as the value. */
	CHECK(
	    load_fails_exactly(ARGS("--slot", "--pg-dsn", DSN), NOENV, "option --slot needs a value"));
	CHECK(load_fails_exactly(ARGS("--pg-dsn"), NOENV, "option --pg-dsn needs a value"));
	CHECK(load_fails_exactly(ARGS("--pg-dsn", DSN, "--group"), NOENV,
	                         "option --group needs a value"));
}

TEST(missing_pg_dsn)
{
	static const char *const want =
	    "missing --pg-dsn (or OUTBOX_RELAY_PG_DSN): set it to a libpq connection string, "
	    "e.g. \"host=db dbname=app user=relay\"";
	struct relay_config cf;

	CHECK(load_fails_exactly(ARGS("--slot", "x"), NOENV, want));
	CHECK(load_fails_exactly(ARGS("--pg-dsn="), NOENV, want));
	CHECK(load_fails_exactly(ARGS("--slot", "x"), ENV("OUTBOX_RELAY_PG_DSN="), want));
	{
		char *argv[] = {"outbox-relay", NULL};

		CHECK_INT(config_load(&cf, 1, argv, NULL, errbuf, sizeof(errbuf)), CONFIG_ERROR);
		CHECK_STR(errbuf, want);
		config_finish(&cf);
	}
	CHECK_INT(load(&cf, ARGS("--slot", "x"), ENV("OUTBOX_RELAY_PG_DSN=" DSN)), CONFIG_OK);
	CHECK_STR(cf.pg_dsn, DSN);
	config_finish(&cf);
}

TEST(pg_dsn_forms)
{
	static const char *const good[] = {
	    "host=db dbname=app user=relay",
	    "host=/var/run/postgresql dbname=app",
	    "dbname = 'my app' password='se cret'",
	    "postgresql://relay:pw@db:5432/app?sslmode=require",
	    "postgres://db/app",
	    "postgresql:///app?host=/tmp",
	};
	struct relay_config cf;

	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		CHECK_INT(load(&cf, ARGS("--pg-dsn", good[i]), NOENV), CONFIG_OK);
		CHECK_STR(cf.pg_dsn, good[i]);
		config_finish(&cf);
	}
}

TEST(malformed_pg_dsn_hides_password)
{
	static const struct {
		const char *dsn;
		const char *want;
	} bad[] = {
	    {"host=x password=s3cret =", "invalid --pg-dsn: invalid connection option \"\""},
	    {"host=x password='s3cret", "invalid --pg-dsn: unterminated quoted string"},
	    {"host=x password=s3cret junk", "invalid --pg-dsn: missing \"=\" after \"...\""},
	    {"host=x passwrd=s3cret", "invalid --pg-dsn: invalid connection option \"...\""},
	    {"host=x s3cret=1", "invalid --pg-dsn: invalid connection option \"...\""},
	    {"host=x password s3cret", "invalid --pg-dsn: missing \"=\" after \"password\""},
	    {"postgresql://u:s3cret@[::1/db", "invalid --pg-dsn: end of string reached"},
	    {"postgresql://u:s3cret%zz@h/db", "invalid --pg-dsn: invalid percent-encoded token"},
	    {"postgresql://u:s3cret@h/db?s3cret", "invalid --pg-dsn: missing key/value separator"},
	    {"postgresql://u:s3cret@h/db?a=s3cret=1", "invalid --pg-dsn: extra key/value"},
	    {"postgresql://u:s3\"cr\"et@[::1/db", "invalid --pg-dsn: end of string"},
	    {"postgresql://u:s3cret@h/db?x=%00", "invalid --pg-dsn:"},
	    {"host=x password=s3cret\n junk", "invalid --pg-dsn:"},
	};

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		/* "s3" catches the secret even when quotes split it. */
		if (!load_fails(ARGS("--pg-dsn", bad[i].dsn), NOENV, bad[i].want, "s3"))
			printf("# dsn #%zu\n", i);
		CHECK(!strstr(errbuf, "s3"));
	}
	/* From the environment the variable is named, and the value still hidden. */
	CHECK(load_fails_exactly(ARGS("--slot", "x"),
	                         ENV("OUTBOX_RELAY_PG_DSN=host=x password=s3cret ="),
	                         "invalid OUTBOX_RELAY_PG_DSN: invalid connection option \"\""));
}

TEST(redis_url_option)
{
	struct relay_config cf;
	char buf[128];

	CHECK_INT(load(&cf, ARGS("--pg-dsn", DSN),
	               ENV("OUTBOX_RELAY_REDIS_URL=unix://:pw@/run/redis.sock?db=3")),
	          CONFIG_OK);
	CHECK_STR(cf.redis.unix_path, "/run/redis.sock");
	CHECK_INT(cf.redis.db, 3);
	CHECK_STR(cf.redis.password, "pw");
	CHECK_STR(redis_target_describe(&cf.redis, buf, sizeof(buf)), "unix:/run/redis.sock?db=3");
	config_finish(&cf);

	CHECK_INT(load(&cf, ARGS("--pg-dsn", DSN, "--redis-url", "rediss://[::1]:7000/1"), NOENV),
	          CONFIG_OK);
	CHECK(cf.redis.tls);
	CHECK_STR(cf.redis.host, "::1");
	config_finish(&cf);

	CHECK(load_fails_exactly(ARGS("--pg-dsn", DSN, "--redis-url", "http://x"), NOENV,
	                         "invalid --redis-url: unsupported scheme \"http\": use redis://, "
	                         "rediss://, unix://, redis-cluster://, rediss-cluster://, "
	                         "redis-sentinel:// or rediss-sentinel://"));
	CHECK(load_fails(ARGS("--pg-dsn", DSN, "--redis-url", "redis://u:hunter2@h:99999"), NOENV,
	                 "invalid --redis-url: invalid port", "hunter2"));
	CHECK(load_fails(ARGS("--pg-dsn", DSN, "--redis-url", "redis://u:hunter2"), NOENV,
	                 "invalid --redis-url: invalid port", "hunter2"));
	CHECK(load_fails(ARGS("--pg-dsn", DSN, "--redis-url", "redis://u:hunter2%zz@h"), NOENV,
	                 "invalid --redis-url: invalid percent-encoding", "hunter2"));
	CHECK(load_fails(ARGS("--pg-dsn", DSN, "--redis-url", ""), NOENV,
	                 "invalid --redis-url: empty URL", NULL));
}

/* The list helpers both option engines (relay and outbox-consume) use. */
TEST(sentinel_password)
{
	struct relay_config cf;
	char path[] = "/tmp/test_config_sentinel_XXXXXX";
	int fd = mkstemp(path);

	CHECK(fd >= 0);
	CHECK(write(fd, "from-file\n", 10) == 10);
	close(fd);
	chmod(path, 0600);

	/* Flag: the target gets it, argv keeps "***" and nothing of the password. */
	CHECK_INT(
	    load(&cf,
	         ARGS("--pg-dsn", DSN, "--redis-url", "redis-sentinel://:m@s1:26379,s2:26380#mymaster",
	              "--redis-sentinel-password", "s3cret-sentinel"),
	         NOENV),
	    CONFIG_OK);
	CHECK(cf.redis.sentinel);
	CHECK_STR(cf.redis.sentinel_password, "s3cret-sentinel");
	CHECK_STR(cf.redis.password, "m");
	CHECK_STR(cf.redis.master_name, "mymaster");
	CHECK_STR(last_argv[6], "***");
	config_finish(&cf);
	CHECK_INT(load(&cf,
	               ARGS("--pg-dsn", DSN, "--redis-url", "redis-sentinel://s1:26379#m",
	                    "--redis-sentinel-password=ab"),
	               NOENV),
	          CONFIG_OK);
	CHECK_STR(last_argv[5], "--redis-sentinel-password=**");
	config_finish(&cf);

	/* The file wins over the flag and the environment. */
	CHECK_INT(load(&cf,
	               ARGS("--pg-dsn", DSN, "--redis-url", "redis-sentinel://s1:26379#m",
	                    "--redis-sentinel-password-file", path),
	               ENV("OUTBOX_RELAY_REDIS_SENTINEL_PASSWORD=from-env")),
	          CONFIG_OK);
	CHECK_STR(cf.redis.sentinel_password, "from-file");
	config_finish(&cf);
	CHECK_INT(load(&cf, ARGS("--pg-dsn", DSN, "--redis-url", "redis-sentinel://s1:26379#m"),
	               ENV("OUTBOX_RELAY_REDIS_SENTINEL_PASSWORD=from-env")),
	          CONFIG_OK);
	CHECK_STR(cf.redis.sentinel_password, "from-env");
	config_finish(&cf);

	/* An ACL user on the Sentinels goes with a password. */
	CHECK_INT(load(&cf,
	               ARGS("--pg-dsn", DSN, "--redis-url", "redis-sentinel://s1:26379#m",
	                    "--redis-sentinel-user", "watcher", "--redis-sentinel-password-file", path),
	               NOENV),
	          CONFIG_OK);
	CHECK_STR(cf.redis.sentinel_user, "watcher");
	CHECK_STR(cf.redis.sentinel_password, "from-file");
	config_finish(&cf);
	CHECK(load_fails(ARGS("--pg-dsn", DSN, "--redis-url", "redis-sentinel://s1:26379#m",
	                      "--redis-sentinel-user", "watcher"),
	                 NOENV, "--redis-sentinel-user needs the user's password", NULL));
	CHECK(load_fails(ARGS("--pg-dsn", DSN, "--redis-sentinel-user", "watcher"), NOENV,
	                 "--redis-sentinel-user applies only to a redis-sentinel://", NULL));

	/* Only for Sentinel URLs; never quoted back. */
	CHECK(load_fails_exactly(ARGS("--pg-dsn", DSN, "--redis-sentinel-password", "hunter2"), NOENV,
	                         "--redis-sentinel-password applies only to a redis-sentinel:// (or "
	                         "rediss-sentinel://) --redis-url: drop it, or name the Sentinels in "
	                         "--redis-url"));
	CHECK(load_fails(ARGS("--pg-dsn", DSN, "--redis-sentinel-password-file", path), NOENV,
	                 "--redis-sentinel-password-file applies only", "from-file"));
	CHECK(load_fails(
	    ARGS("--pg-dsn", DSN, "--redis-url", "redis-sentinel://s1:26379#m", "--redis-cluster"),
	    NOENV, "--redis-cluster and a redis-sentinel:// --redis-url exclude each other", NULL));
	CHECK(load_fails(ARGS("--pg-dsn", DSN, "--redis-url", "redis-sentinel://u:hunter2@s1:26379"),
	                 NOENV, "missing master name", "hunter2"));
	unlink(path);
}

TEST(list_helpers)
{
	const char *cursor = " a ,b,\t, c d ", *item;
	const char *want[] = {"a", "b", "", "c d"};
	char **v = NULL;
	size_t len, n = 0, k = 0;

	while (opt_list_next(&cursor, &item, &len)) {
		CHECK(k < 4);
		if (k < 4)
			CHECK(len == strlen(want[k]) && memcmp(item, want[k], len) == 0);
		CHECK(opt_strv_push(&v, &n, item, len));
		k++;
	}
	CHECK_INT(k, 4);
	CHECK_INT(n, 4);
	CHECK_STR(v[3], "c d");
	CHECK_STR(v[2], "");
	for (size_t i = 0; i < n; i++)
		free(v[i]);
	free(v);
	cursor = "";
	CHECK(opt_list_next(&cursor, &item, &len) && len == 0); /* one empty item */
	CHECK(!opt_list_next(&cursor, &item, &len));
}

TEST(groups)
{
	struct relay_config cf;

	CHECK_INT(load(&cf, ARGS("--pg-dsn", DSN, "--group", "billing", "--group=audit"), NOENV),
	          CONFIG_OK);
	CHECK_INT(cf.ngroups, 2);
	if (cf.ngroups == 2) {
		CHECK_STR(cf.groups[0], "billing");
		CHECK_STR(cf.groups[1], "audit");
	}
	config_finish(&cf);

	CHECK_INT(load(&cf, ARGS("--pg-dsn", DSN), ENV("OUTBOX_RELAY_GROUP=a, b ,c")), CONFIG_OK);
	CHECK_INT(cf.ngroups, 3);
	if (cf.ngroups == 3) {
		CHECK_STR(cf.groups[0], "a");
		CHECK_STR(cf.groups[1], "b");
		CHECK_STR(cf.groups[2], "c");
	}
	config_finish(&cf);

	/* Any --group replaces the environment list. */
	CHECK_INT(load(&cf, ARGS("--pg-dsn", DSN, "--group", "x"), ENV("OUTBOX_RELAY_GROUP=a,b")),
	          CONFIG_OK);
	CHECK_INT(cf.ngroups, 1);
	CHECK_STR(cf.ngroups == 1 ? cf.groups[0] : NULL, "x");
	config_finish(&cf);

	/* An empty variable means no groups. */
	CHECK_INT(load(&cf, ARGS("--pg-dsn", DSN), ENV("OUTBOX_RELAY_GROUP=")), CONFIG_OK);
	CHECK_INT(cf.ngroups, 0);
	CHECK(cf.groups == NULL);
	config_finish(&cf);

	CHECK(load_fails_exactly(ARGS("--pg-dsn", DSN, "--group", ""), NOENV,
	                         "invalid value \"\" for --group: must not be empty"));
	CHECK(load_fails_exactly(ARGS("--pg-dsn", DSN), ENV("OUTBOX_RELAY_GROUP=a,,b"),
	                         "invalid value \"a,,b\" in OUTBOX_RELAY_GROUP: names in the list must "
	                         "not be empty"));
	CHECK(
	    load_fails(ARGS("--pg-dsn", DSN), ENV("OUTBOX_RELAY_GROUP=a,"), "must not be empty", NULL));
	CHECK(load_fails(ARGS("--pg-dsn", DSN, "--group", "a", "--group", "a"), NOENV,
	                 "invalid value \"a\" for --group: \"a\" is listed twice", NULL));
	CHECK(load_fails(ARGS("--pg-dsn", DSN), ENV("OUTBOX_RELAY_GROUP=a,b,a"),
	                 "in OUTBOX_RELAY_GROUP: \"a\" is listed twice", NULL));
	/* Failing after some names were copied must not leak them (ASan). */
	CHECK(load_fails(ARGS("--pg-dsn", DSN, "--group", "a", "--group", "b", "--group", ""), NOENV,
	                 "must not be empty", NULL));
}

TEST(table_names)
{
	struct relay_config cf;

	CHECK_INT(load(&cf, ARGS("--pg-dsn", DSN, "--table", "events"), NOENV), CONFIG_OK);
	CHECK_STR(cf.table, "public.events");
	config_finish(&cf);
	CHECK_INT(load(&cf, ARGS("--pg-dsn", DSN), ENV("OUTBOX_RELAY_TABLE=app.outbox")), CONFIG_OK);
	CHECK_STR(cf.table, "app.outbox");
	config_finish(&cf);

	static const char *const bad[] = {"", ".", "app.", ".outbox", "a.b.c", "a..b"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		CHECK(load_fails(ARGS("--pg-dsn", DSN, "--table", bad[i]), NOENV,
		                 "for --table: use schema.table or a bare table name, e.g. public.outbox",
		                 NULL));
}

TEST(slot_names)
{
	struct relay_config cf;
	char max[64], over[65];

	memset(max, 'a', 63);
	max[63] = '\0';
	memset(over, 'a', 64);
	over[64] = '\0';

	static const char *const good[] = {"a", "outbox_relay", "slot_2", "_", "0"};
	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		CHECK_INT(load(&cf, ARGS("--pg-dsn", DSN, "--slot", good[i]), NOENV), CONFIG_OK);
		CHECK_STR(cf.slot, good[i]);
		config_finish(&cf);
	}
	CHECK_INT(load(&cf, ARGS("--pg-dsn", DSN, "--slot", max), NOENV), CONFIG_OK);
	config_finish(&cf);

	CHECK(load_fails_exactly(ARGS("--pg-dsn", DSN, "--slot", "Outbox"), NOENV,
	                         "invalid value \"Outbox\" for --slot: use 1-63 lower-case letters, "
	                         "digits or underscores"));
	static const char *const bad[] = {"", "my-slot", "my slot", "slot.x", "é"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		CHECK(load_fails(ARGS("--pg-dsn", DSN, "--slot", bad[i]), NOENV,
		                 "for --slot: use 1-63 lower-case letters, digits or underscores", NULL));
	CHECK(load_fails(ARGS("--pg-dsn", DSN, "--slot", over), NOENV, "for --slot: use 1-63", NULL));
	CHECK(load_fails(ARGS("--pg-dsn", DSN), ENV("OUTBOX_RELAY_SLOT=A"),
	                 "invalid value \"A\" in OUTBOX_RELAY_SLOT: use 1-63", NULL));
}

TEST(other_strings)
{
	CHECK(
	    load_fails_exactly(ARGS("--pg-dsn", DSN, "--key-prefix", "a{b}"), NOENV,
	                       "invalid value \"a{b}\" for --key-prefix: must not contain { or } (the "
	                       "relay adds its own hash tags)"));
	CHECK(load_fails(ARGS("--pg-dsn", DSN, "--key-prefix", "x}"), NOENV, "must not contain", NULL));
	CHECK(load_fails(ARGS("--pg-dsn", DSN, "--key-prefix", ""), NOENV,
	                 "invalid value \"\" for --key-prefix: must not be empty", NULL));
	CHECK(load_fails(ARGS("--pg-dsn", DSN, "--dead-letter-stream="), NOENV,
	                 "for --dead-letter-stream: must not be empty", NULL));
}

TEST(dead_letter_stream)
{
	struct relay_config cf;
	char big[600];

	static const char *const good[] = {"outbox:dead-letter", "dl:{orders}", "a{b", "dead letters"};
	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		CHECK_INT(load(&cf, ARGS("--pg-dsn", DSN, "--dead-letter-stream", good[i]), NOENV),
		          CONFIG_OK);
		CHECK_STR(cf.dead_letter_stream, good[i]);
		config_finish(&cf);
	}
	/* "}" outside a tag: no key could share its cluster slot (it used to end
	 * in "out of memory" at the first dead letter). */
	CHECK(load_fails_exactly(
	    ARGS("--pg-dsn", DSN, "--dead-letter-stream", "dl}x"), NOENV,
	    "invalid value \"dl}x\" for --dead-letter-stream: the stream name contains \"}\" outside "
	    "a {hash tag}: no key could share its Redis Cluster slot; drop the \"}\" or wrap a "
	    "non-empty tag in braces, e.g. outbox:{dead-letter}"));
	CHECK(load_fails(ARGS("--pg-dsn", DSN, "--dead-letter-stream", "dl:{}"), NOENV,
	                 "outside a {hash tag}", NULL));
	CHECK(load_fails(ARGS("--pg-dsn", DSN), ENV("OUTBOX_RELAY_DEAD_LETTER_STREAM=a}"),
	                 "in OUTBOX_RELAY_DEAD_LETTER_STREAM: the stream name contains", NULL));
	static const char *const ctrl[] = {"dl\tx", "dl\n", "\x7f", "\x01dl"};
	for (size_t i = 0; i < sizeof(ctrl) / sizeof(ctrl[0]); i++)
		CHECK(load_fails(ARGS("--pg-dsn", DSN, "--dead-letter-stream", ctrl[i]), NOENV,
		                 "for --dead-letter-stream: the stream name contains a control byte "
		                 "(below 0x20, or 0x7f): use printable characters only",
		                 NULL));
	memset(big, 'x', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	CHECK(load_fails(ARGS("--pg-dsn", DSN, "--dead-letter-stream", big), NOENV,
	                 "for --dead-letter-stream: the stream name is longer than 512 bytes", NULL));
}

TEST(endpos)
{
	struct relay_config cf;

	CHECK_INT(load(&cf, ARGS("--pg-dsn", DSN, "--endpos", "0/16b3748"), NOENV), CONFIG_OK);
	CHECK(cf.endpos == UINT64_C(0x16B3748));
	config_finish(&cf);
	CHECK_INT(load(&cf, ARGS("--pg-dsn", DSN), ENV("OUTBOX_RELAY_ENDPOS=FFFFFFFF/FFFFFFFF")),
	          CONFIG_OK);
	CHECK(cf.endpos == UINT64_MAX);
	config_finish(&cf);

	CHECK(load_fails_exactly(ARGS("--pg-dsn", DSN, "--endpos", "123"), NOENV,
	                         "invalid value \"123\" for --endpos: expected an LSN such as "
	                         "0/16B3748, as pg_current_wal_lsn() prints it"));
	CHECK(load_fails(ARGS("--pg-dsn", DSN, "--endpos", "1/2x"), NOENV, "expected an LSN", NULL));
	CHECK(load_fails(ARGS("--pg-dsn", DSN, "--endpos="), NOENV, "expected an LSN", NULL));
}

TEST(logging)
{
	struct relay_config cf;

	CHECK_INT(load(&cf, ARGS("--pg-dsn", DSN, "--log-level", "error"),
	               ENV("OUTBOX_RELAY_LOG_FORMAT=json")),
	          CONFIG_OK);
	CHECK_INT(cf.log_level, LOG_LEVEL_ERROR);
	CHECK_INT(cf.log_format, LOG_FORMAT_JSON);
	config_finish(&cf);

	CHECK(
	    load_fails_exactly(ARGS("--pg-dsn", DSN, "--log-level", "loud"), NOENV,
	                       "invalid value \"loud\" for --log-level: expected error, warn, info or "
	                       "debug"));
	CHECK(load_fails_exactly(ARGS("--pg-dsn", DSN, "--log-format", "xml"), NOENV,
	                         "invalid value \"xml\" for --log-format: expected text or json"));
}

TEST(quoted_values_are_one_bounded_line)
{
	char big[300];

	memset(big, 'x', sizeof(big));
	big[sizeof(big) - 1] = '\0';
	CHECK(load_fails(ARGS("--pg-dsn", DSN, "--slot", "a\nb"), NOENV,
	                 "invalid value \"a?b\" for --slot", NULL));
	CHECK(load_fails(ARGS("--pg-dsn", DSN, "--log-level", big), NOENV, "...\" for --log-level",
	                 NULL));
	CHECK(strlen(errbuf) < 200);

	/* A tiny buffer is truncated, not overrun. */
	{
		struct relay_config cf;
		char *argv[] = {"outbox-relay", "--bogus", NULL};
		char small[8];

		CHECK_INT(config_load(&cf, 2, argv, NULL, small, sizeof(small)), CONFIG_ERROR);
		CHECK_STR(small, "unknown");
		config_finish(&cf);
		CHECK_INT(config_load(&cf, 2, argv, NULL, NULL, 0), CONFIG_ERROR);
		config_finish(&cf);
	}
}

/*
 * Run config_load with stdout redirected to a temporary file; returns the
 * captured text (malloc'd) and the result in *ret.
 */
static char *capture_stdout(const char *const *args, enum config_result *ret)
{
	struct relay_config cf;
	FILE *tmp = tmpfile();
	int saved;
	long len;
	char *text;

	if (!tmp)
		return NULL;
	fflush(stdout);
	saved = dup(STDOUT_FILENO);
	if (saved < 0 || dup2(fileno(tmp), STDOUT_FILENO) < 0) {
		fclose(tmp);
		return NULL;
	}
	*ret = load(&cf, args, NOENV);
	fflush(stdout);
	(void)dup2(saved, STDOUT_FILENO);
	close(saved);
	config_finish(&cf);

	len = ftell(tmp);
	text = calloc(1, (size_t)(len > 0 ? len : 0) + 1);
	if (text && len > 0) {
		rewind(tmp);
		if (fread(text, 1, (size_t)len, tmp) != (size_t)len)
			text[0] = '\0';
	}
	fclose(tmp);
	return text;
}

TEST(help_and_version)
{
	enum config_result r = CONFIG_ERROR;
	char *out;

	out = capture_stdout(ARGS("--help"), &r);
	CHECK_INT(r, CONFIG_HELP);
	CHECK(out && strncmp(out, "Usage: outbox-relay [OPTIONS]\n", 30) == 0);
	CHECK(out && strstr(out, "Every option can also be set with its OUTBOX_RELAY_* environment "
	                         "variable; flags win.\n"));
	free(out);

	/* -h wins even without --pg-dsn and with a bad variable elsewhere. */
	out = capture_stdout(ARGS("--slot", "x", "-h"), &r);
	CHECK_INT(r, CONFIG_HELP);
	CHECK(out && strstr(out, "--pg-dsn CONNINFO"));
	free(out);

	out = capture_stdout(ARGS("--version"), &r);
	CHECK_INT(r, CONFIG_VERSION);
	/* The version, then the hiredis it was built with and whether TLS is in,
	 * then the libpq and yajl it runs with. */
	CHECK(out && strncmp(out, "outbox-relay " OUTBOX_RELAY_VERSION "\nhiredis ",
	                     strlen("outbox-relay " OUTBOX_RELAY_VERSION "\nhiredis ")) == 0);
	CHECK(out && strstr(out, redis_tls_available() ? "Redis TLS: yes" : "Redis TLS: no"));
	{
		char want[64];

		snprintf(want, sizeof(want), "\nlibpq %d.%d\n", PQlibVersion() / 10000,
		         PQlibVersion() % 10000);
		CHECK(out && strstr(out, want));
		snprintf(want, sizeof(want), "\nyajl %d.%d.%d\n", yajl_version() / 10000,
		         yajl_version() / 100 % 100, yajl_version() % 100);
		CHECK(out && strstr(out, want));
	}
	free(out);

	out = capture_stdout(ARGS("-V"), &r);
	CHECK_INT(r, CONFIG_VERSION);
	/* The version, then the hiredis it was built with and whether TLS is in. */
	CHECK(out && strncmp(out, "outbox-relay " OUTBOX_RELAY_VERSION "\nhiredis ",
	                     strlen("outbox-relay " OUTBOX_RELAY_VERSION "\nhiredis ")) == 0);
	CHECK(out && strstr(out, redis_tls_available() ? "Redis TLS: yes" : "Redis TLS: no"));
	free(out);

	/* Nothing is printed on errors. */
	out = capture_stdout(ARGS("--bogus"), &r);
	CHECK_INT(r, CONFIG_ERROR);
	CHECK_STR(out, "");
	free(out);
}

/* Every flag in --help names its variable by the OUTBOX_RELAY_ rule. */
TEST(usage_lists_every_option)
{
	static const char *const flags[] = {
	    "pg-dsn",
	    "slot",
	    "create-slot",
	    "table",
	    "message-prefix",
	    "id-column",
	    "status-interval",
	    "endpos",
	    "redis-url",
	    "stream",
	    "dead-letter-stream",
	    "dedup-window",
	    "maxlen",
	    "group",
	    "key-prefix",
	    "redis-functions",
	    "redis-timeout",
	    "max-inflight-events",
	    "max-inflight-bytes",
	    "shutdown-timeout",
	    "retry-max",
	    "log-level",
	    "log-format",
	};
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);
	int lines = 0;

	CHECK(f != NULL);
	if (!f)
		return;
	config_usage(f);
	fclose(f);

	CHECK(strstr(text, "\nPostgreSQL:\n") != NULL);
	CHECK(strstr(text, "\nRedis:\n") != NULL);
	CHECK(strstr(text, "\nFlow control:\n") != NULL);
	CHECK(strstr(text, "\nLogging:\n") != NULL);
	CHECK(strstr(text, "(default: 64MiB)") != NULL);
	CHECK(strstr(text, "(default: redis://127.0.0.1:6379)") != NULL);
	CHECK(strstr(text, "(required)") != NULL);

	for (size_t i = 0; i < sizeof(flags) / sizeof(flags[0]); i++) {
		char want_flag[64], want_env[64], *line;
		size_t n;

		(void)snprintf(want_env, sizeof(want_env), "env OUTBOX_RELAY_");
		n = strlen(want_env);
		for (const char *p = flags[i]; *p && n + 1 < sizeof(want_env); p++)
			want_env[n++] = *p == '-' ? '_' : (char)toupper((unsigned char)*p);
		want_env[n] = '\0';

		(void)snprintf(want_flag, sizeof(want_flag), "  --%s ", flags[i]);
		line = strstr(text, want_flag);
		if (!line) {
			(void)snprintf(want_flag, sizeof(want_flag), "  --[no-]%s ", flags[i]);
			line = strstr(text, want_flag);
		}
		CHECK(line != NULL);
		if (!line)
			continue;
		lines++;
		*strchrnul(line, '\n') = '\0';
		if (!strstr(line, want_env) || strlen(strstr(line, want_env)) != strlen(want_env))
			printf("# \"%s\" lacks \"%s\"\n", line, want_env);
		CHECK(strstr(line, want_env) != NULL);
		*strchrnul(line, '\0') = '\n';
	}
	CHECK_INT(lines, sizeof(flags) / sizeof(flags[0]));
	free(text);
}

TEST(finish_is_safe)
{
	struct relay_config cf;

	config_finish(NULL);
	memset(&cf, 0, sizeof(cf));
	config_finish(&cf);

	/* Fails on the last option, after every string was allocated. */
	CHECK(load_fails(ARGS("--pg-dsn", DSN, "--group", "a", "--redis-url", "redis://:pw@h",
	                      "--log-format", "yaml"),
	                 NOENV, "for --log-format", "pw"));
	/* Help/version leave cf finishable too. */
	{
		enum config_result r;
		char *out = capture_stdout(ARGS("--pg-dsn", DSN, "--help"), &r);

		CHECK_INT(r, CONFIG_HELP);
		free(out);
	}
	/* Success, then finish twice. */
	CHECK_INT(load(&cf, ARGS("--pg-dsn", DSN, "--group", "a"), NOENV), CONFIG_OK);
	config_finish(&cf);
	config_finish(&cf);
	CHECK(cf.groups == NULL && cf.ngroups == 0 && cf.pg_dsn == NULL);
}

/* opt_scrub_secret on a copy of in; the result must be want. */
static bool scrubs_to(const char *in, const char *want)
{
	char buf[512];
	size_t len = strlen(in);

	memset(buf, 'Z', sizeof(buf));
	memcpy(buf, in, len + 1);
	opt_scrub_secret(buf);
	if (strcmp(buf, want) != 0) {
		printf("# scrub(\"%s\") = \"%s\", want \"%s\"\n", in, buf, want);
		return false;
	}
	/* The bytes freed at the end are NUL, nothing after the old end is touched. */
	for (size_t i = strlen(buf); i <= len; i++) {
		if (buf[i] != '\0') {
			printf("# scrub(\"%s\"): byte %zu not cleared\n", in, i);
			return false;
		}
	}
	return buf[len + 1] == 'Z';
}

TEST(scrub_secret_forms)
{
	/* conninfo */
	CHECK(scrubs_to("host=db password=hunter2 user=relay", "host=db password=*** user=relay"));
	CHECK(scrubs_to("password=hunter2", "password=***"));
	CHECK(scrubs_to("host=db password = 'hun ter\\'2' dbname=app",
	                "host=db password = '***' dbname=app"));
	CHECK(scrubs_to("host=db password=hu\\ nter2 port=5", "host=db password=*** port=5"));
	CHECK(scrubs_to("sslpassword=keypass password=pw", "sslpassword=*** password=**"));
	CHECK(scrubs_to("password=", "password="));
	CHECK(scrubs_to("password='' host=x", "password='' host=x"));
	CHECK(scrubs_to("host=db dbname=app user=relay", "host=db dbname=app user=relay"));
	CHECK(scrubs_to("application_name='a password=x'", "application_name='a password=x'"));
	/* postgresql URIs */
	CHECK(
	    scrubs_to("postgresql://relay:hunter2@db:5432/app", "postgresql://relay:***@db:5432/app"));
	CHECK(scrubs_to("postgres://:hunter2@db/app", "postgres://:***@db/app"));
	CHECK(scrubs_to("postgresql://relay@db/app?password=hunter2&sslmode=disable",
	                "postgresql://relay@db/app?password=***&sslmode=disable"));
	CHECK(scrubs_to("postgresql://db/app?sslmode=disable&pass%77ord=hunter2",
	                "postgresql://db/app?sslmode=disable&pass%77ord=***"));
	CHECK(scrubs_to("postgresql://db:5432/app?application_name=a@b",
	                "postgresql://db:5432/app?application_name=a@b"));
	CHECK(scrubs_to("postgresql://relay@db/app", "postgresql://relay@db/app"));
	/* Redis URLs, as redis_url_parse splits them */
	CHECK(scrubs_to("redis://relay:hunter2@h:6379/1", "redis://relay:***@h:6379/1"));
	CHECK(scrubs_to("redis://:hunter2@h", "redis://:***@h"));
	CHECK(scrubs_to("redis://u:a:b@c/d@h:1/2", "redis://u:***@h:1/2"));
	CHECK(scrubs_to("rediss-cluster://u:pw1@h1:1,h2:2", "rediss-cluster://u:***@h1:1,h2:2"));
	CHECK(scrubs_to("unix://:hunter2@/run/redis@main/redis.sock",
	                "unix://:***@/run/redis@main/redis.sock"));
	CHECK(scrubs_to("unix:///run/redis@main/redis.sock", "unix:///run/redis@main/redis.sock"));
	CHECK(scrubs_to("redis://:@h", "redis://:@h"));
	CHECK(scrubs_to("redis://127.0.0.1:6379", "redis://127.0.0.1:6379"));
	CHECK(scrubs_to("/tmp/redis.sock", "/tmp/redis.sock"));
	CHECK(scrubs_to("", ""));
	opt_scrub_secret(NULL);
}

/* /proc/PID/cmdline is argv: the passwords go once config_load copied them. */
TEST(argv_scrubbed)
{
	struct relay_config cf;

	CHECK_INT(load(&cf,
	               ARGS("--pg-dsn", "host=db password=hunter2 user=relay",
	                    "--redis-url=redis://relay:s3cret@h:6379/1", "--slot", "s"),
	               NOENV),
	          CONFIG_OK);
	CHECK_STR(last_argv[2], "host=db password=*** user=relay");
	CHECK_STR(last_argv[3], "--redis-url=redis://relay:***@h:6379/1");
	CHECK_STR(last_argv[5], "s");
	/* The configuration keeps its own copies. */
	CHECK_STR(cf.pg_dsn, "host=db password=hunter2 user=relay");
	CHECK_STR(cf.redis.password, "s3cret");
	CHECK_STR(cf.redis.user, "relay");
	config_finish(&cf);

	/* Given twice: both occurrences go, the last one wins. */
	CHECK_INT(
	    load(&cf,
	         ARGS("--pg-dsn=password=first1 host=a", "--pg-dsn", "postgresql://u:second2@b/app"),
	         NOENV),
	    CONFIG_OK);
	CHECK_STR(last_argv[1], "--pg-dsn=password=*** host=a");
	CHECK_STR(last_argv[3], "postgresql://u:***@b/app");
	CHECK_STR(cf.pg_dsn, "postgresql://u:second2@b/app");
	config_finish(&cf);
}

/* Write n bytes of content (plus extra) to a new temp file with mode; its path in path. */
static bool secret_file(char *path, const char *content, size_t n, const char *extra, mode_t mode)
{
	int fd = mkstemp(path);
	bool ok = fd >= 0;

	ok = ok && write(fd, content, n) == (ssize_t)n;
	ok = ok && write(fd, extra, strlen(extra)) == (ssize_t)strlen(extra);
	ok = ok && fchmod(fd, mode) == 0;
	if (fd >= 0)
		close(fd);
	return ok;
}

TEST(password_file_long)
{
	struct relay_config cf;
	char path[] = "/tmp/test_config_pw.XXXXXX";
	static char big[OPT_SECRET_FILE_MAX + 1];

	/* 5000 bytes: the old reader kept the first 4095. */
	memset(big, 'k', sizeof(big));
	CHECK(secret_file(path, big, 5000, "\n", 0600));
	CHECK_INT(load(&cf,
	               ARGS("--pg-dsn", DSN, "--pg-password-file", path, "--redis-password-file", path),
	               NOENV),
	          CONFIG_OK);
	CHECK(cf.pg_password && strlen(cf.pg_password) == 5000);
	CHECK(cf.redis.password && strlen(cf.redis.password) == 5000);
	CHECK_INT(cf.nwarnings, 0);
	config_finish(&cf);
	unlink(path);

	/* Exactly the limit, CRLF: fine. */
	strcpy(path, "/tmp/test_config_pw.XXXXXX");
	CHECK(secret_file(path, big, OPT_SECRET_FILE_MAX - 2, "\r\n", 0600));
	CHECK_INT(load(&cf, ARGS("--pg-dsn", DSN, "--pg-password-file", path), NOENV), CONFIG_OK);
	CHECK(cf.pg_password && strlen(cf.pg_password) == OPT_SECRET_FILE_MAX - 2);
	config_finish(&cf);
	unlink(path);

	/* One byte over: a clear error naming the option and the file, no content. */
	strcpy(path, "/tmp/test_config_pw.XXXXXX");
	CHECK(secret_file(path, big, OPT_SECRET_FILE_MAX + 1, "", 0600));
	CHECK(load_fails(ARGS("--pg-dsn", DSN, "--pg-password-file", path), NOENV, "--pg-password-file",
	                 "kkkk"));
	CHECK(strstr(errbuf, path) && strstr(errbuf, "larger than 64 KiB"));
	unlink(path);

	/* A NUL byte in the first line would cut the password short. */
	strcpy(path, "/tmp/test_config_pw.XXXXXX");
	CHECK(secret_file(path, "ab\0cd", 5, "\n", 0600));
	CHECK(load_fails(ARGS("--pg-dsn", DSN, "--redis-password-file", path), NOENV,
	                 "--redis-password-file", NULL));
	CHECK(strstr(errbuf, "NUL byte") != NULL);
	unlink(path);

	/* Lines after the first are ignored, as documented. */
	strcpy(path, "/tmp/test_config_pw.XXXXXX");
	CHECK(secret_file(path, "pw1", 3, "\nsecond line\n", 0600));
	CHECK_INT(load(&cf, ARGS("--pg-dsn", DSN, "--pg-password-file", path), NOENV), CONFIG_OK);
	CHECK_STR(cf.pg_password, "pw1");
	config_finish(&cf);
	unlink(path);
}

TEST(password_file_mode_warning)
{
	struct relay_config cf;
	char path[] = "/tmp/test_config_pw.XXXXXX", dir[] = "/tmp/test_config_k8s.XXXXXX";
	char sub[128], link[256], file[256];

	CHECK(secret_file(path, "pw", 2, "\n", 0644));
	CHECK_INT(load(&cf, ARGS("--pg-dsn", DSN, "--pg-password-file", path), NOENV), CONFIG_OK);
	CHECK_INT(cf.nwarnings, 1);
	CHECK(strstr(cf.warnings[0], "--pg-password-file") && strstr(cf.warnings[0], path) &&
	      strstr(cf.warnings[0], "chmod 600") && strstr(cf.warnings[0], "0644") &&
	      !strstr(cf.warnings[0], "pw\n") && !strchr(cf.warnings[0], '\n'));
	config_finish(&cf);

	CHECK_INT(chmod(path, 0640), 0);
	CHECK_INT(load(&cf, ARGS("--pg-dsn", DSN, "--redis-password-file", path), NOENV), CONFIG_OK);
	CHECK_INT(cf.nwarnings, 1);
	CHECK(strstr(cf.warnings[0], "--redis-password-file") && strstr(cf.warnings[0], "its group"));
	config_finish(&cf);

	CHECK_INT(chmod(path, 0400), 0);
	CHECK_INT(load(&cf, ARGS("--pg-dsn", DSN, "--pg-password-file", path), NOENV), CONFIG_OK);
	CHECK_INT(cf.nwarnings, 0);
	config_finish(&cf);
	unlink(path);

	/* A Kubernetes Secret volume: KEY -> ..data/KEY, ..data -> ..<timestamp>, 0644. */
	CHECK(mkdtemp(dir) != NULL);
	(void)snprintf(sub, sizeof(sub), "%s/..2026_11_24_12_00_00.1", dir);
	CHECK_INT(mkdir(sub, 0755), 0);
	(void)snprintf(file, sizeof(file), "%s/password", sub);
	(void)snprintf(link, sizeof(link), "%s/..data", dir);
	CHECK_INT(symlink("..2026_11_24_12_00_00.1", link), 0);
	{
		FILE *f = fopen(file, "w");

		CHECK(f != NULL);
		if (f) {
			fputs("pw\n", f);
			fclose(f);
		}
	}
	CHECK_INT(chmod(file, 0644), 0);
	(void)snprintf(link, sizeof(link), "%s/password", dir);
	CHECK_INT(symlink("..data/password", link), 0);
	CHECK_INT(load(&cf, ARGS("--pg-dsn", DSN, "--pg-password-file", link), NOENV), CONFIG_OK);
	CHECK_STR(cf.pg_password, "pw");
	CHECK_INT(cf.nwarnings, 0);
	config_finish(&cf);
	unlink(link);
	(void)snprintf(link, sizeof(link), "%s/..data", dir);
	unlink(link);
	unlink(file);
	rmdir(sub);
	rmdir(dir);
}

TEST(redis_user_without_password)
{
	struct relay_config cf;
	char path[] = "/tmp/test_config_pw.XXXXXX";

	/* A user with an empty password no longer skips AUTH silently. */
	CHECK(load_fails(ARGS("--pg-dsn", DSN, "--redis-url", "redis://relay:@h"), NOENV,
	                 "--redis-url names a user but its password is empty", NULL));
	CHECK(load_fails(ARGS("--pg-dsn", DSN), ENV("OUTBOX_RELAY_REDIS_URL=unix://relay:@/tmp/r.sock"),
	                 "--redis-password-file", NULL));
	/* With the password from a file it is the way to name the user. */
	CHECK(secret_file(path, "filepw", 6, "\n", 0600));
	CHECK_INT(load(&cf,
	               ARGS("--pg-dsn", DSN, "--redis-url", "redis://relay:@h", "--redis-password-file",
	                    path),
	               NOENV),
	          CONFIG_OK);
	CHECK_STR(cf.redis.user, "relay");
	CHECK_STR(cf.redis.password, "filepw");
	config_finish(&cf);
	unlink(path);
	/* Neither user nor password: no AUTH, as before. */
	CHECK_INT(load(&cf, ARGS("--pg-dsn", DSN, "--redis-url", "redis://:@h"), NOENV), CONFIG_OK);
	CHECK(cf.redis.user == NULL && cf.redis.password == NULL);
	config_finish(&cf);
}

static void status_usage_stub(FILE *out)
{
	(void)out;
}

/*
 * One table, three commands: --stream-pattern is a row only `status`
 * accepts (unknown to the relay, its variable ignored there), and errors
 * name the command that was run.
 */
TEST(command_rows)
{
	struct relay_config cf;
	char *argv[] = {"status", "--pg-dsn", DSN, "--stream-pattern", "orders:*", NULL};
	char *bad[] = {"status", "--slot", "s1", "extra", NULL};
	char *env[] = {"OUTBOX_RELAY_STREAM_PATTERN=env:*", NULL};
	char err[512];

	CHECK(load_fails(ARGS("--pg-dsn", DSN, "--stream-pattern", "x"), NOENV,
	                 "unknown option \"--stream-pattern\"; run outbox-relay --help", NULL));
	CHECK_INT(load(&cf, ARGS("--pg-dsn", DSN), ARGS("OUTBOX_RELAY_STREAM_PATTERN=x")), CONFIG_OK);
	CHECK(cf.stream_pattern == NULL);
	config_finish(&cf);

	CHECK_INT(config_load_as(&cf, CONFIG_CMD_STATUS, "outbox-relay status", status_usage_stub, 5,
	                         argv, env, err, sizeof(err)),
	          CONFIG_OK);
	CHECK_STR(cf.stream_pattern, "orders:*");
	config_finish(&cf);
	CHECK_INT(config_load_as(&cf, CONFIG_CMD_STATUS, "outbox-relay status", status_usage_stub, 3,
	                         argv, env, err, sizeof(err)),
	          CONFIG_OK);
	CHECK_STR(cf.stream_pattern, "env:*");
	config_finish(&cf);
	CHECK_INT(config_load_as(&cf, CONFIG_CMD_STATUS, "outbox-relay status", status_usage_stub, 3,
	                         argv, NULL, err, sizeof(err)),
	          CONFIG_OK);
	CHECK_STR(cf.stream_pattern, "outbox:*");
	config_finish(&cf);
	CHECK_INT(config_load_as(&cf, CONFIG_CMD_STATUS, "outbox-relay status", status_usage_stub, 4,
	                         bad, NULL, err, sizeof(err)),
	          CONFIG_ERROR);
	CHECK(strstr(err, "outbox-relay status takes no positional arguments, run outbox-relay "
	                  "status --help"));
}

int main(void)
{
	RUN(defaults);
	RUN(every_option_from_argv);
	RUN(env_then_flags);
	RUN(env_errors_name_the_variable);
	RUN(equals_form);
	RUN(bools);
	RUN(parse_duration);
	RUN(duration_options);
	RUN(sizes);
	RUN(ints);
	RUN(unknown_options);
	RUN(positional_arguments);
	RUN(missing_value);
	RUN(missing_pg_dsn);
	RUN(pg_dsn_forms);
	RUN(malformed_pg_dsn_hides_password);
	RUN(redis_url_option);
	RUN(sentinel_password);
	RUN(list_helpers);
	RUN(groups);
	RUN(table_names);
	RUN(slot_names);
	RUN(other_strings);
	RUN(dead_letter_stream);
	RUN(endpos);
	RUN(logging);
	RUN(quoted_values_are_one_bounded_line);
	RUN(help_and_version);
	RUN(usage_lists_every_option);
	RUN(finish_is_safe);
	RUN(scrub_secret_forms);
	RUN(argv_scrubbed);
	RUN(password_file_long);
	RUN(password_file_mode_warning);
	RUN(redis_user_without_password);
	RUN(command_rows);
	return test_done();
}
