/*
 * consumer_config.c - outbox-consume's options: its rows on the option
 * engine (opt.h), flags and OUTBOX_CONSUME_* variables, the checks across
 * options and the password files.
 *
 * Durations follow the one rule of every outbox-relay command: a bare
 * number means seconds. --block and --claim-idle took milliseconds; they
 * are now --block-timeout and --claim-min-idle. The old names stay accepted
 * (OPT_F_LEGACY_MS): a value with a unit means what it always did, and so
 * does a bare number (milliseconds), with a warning naming the new option,
 * so that no deployment's timing changes a thousandfold unnoticed.
 */
#include "msg.h"
#include "consumer.h"
#include "consumer_render.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "opt.h"
#include "redis_url.h"
#include "relay_build.h"

#define PROGNAME "outbox-consume"
#define ENV_PREFIX "OUTBOX_CONSUME_"
#define CMD CONSUMER_CMD_RUN
#define BOTH (CONSUMER_CMD_RUN | CONSUMER_CMD_POISON) /* rows `poison` shares */

#define F(f) offsetof(struct consumer_config, f), sizeof(((struct consumer_config *)0)->f)
/* "" leaves a string unset, as an empty variable in a manifest does. */
#define STR(n, fl, f, def, mv, h)                                                                  \
	OPT_ROW(n, OPT_STRING, OPT_F_EMPTY_UNSET | (fl), CMD, F(f), 0, def, 0, 0, NULL, mv, h, NULL)
#define SHR(n, fl, f, def, mv, h)                                                                  \
	OPT_ROW(n, OPT_STRING, OPT_F_EMPTY_UNSET | (fl), BOTH, F(f), 0, def, 0, 0, NULL, mv, h, NULL)
#define BOOL(n, f, h) OPT_ROW(n, OPT_BOOL, 0, CMD, F(f), 0, "false", 0, 0, NULL, NULL, h, NULL)
#define NUM(n, k, fl, f, def, lo, hi, mv, h, alias)                                                \
	OPT_ROW(n, k, fl, CMD, F(f), 0, def, lo, hi, NULL, mv, h, alias)

static const struct opt_def copt_table[] = {
    OPT_ROW("redis-url", OPT_REDIS_URL, OPT_F_SECRET, BOTH, F(redis_url),
            offsetof(struct consumer_config, redis), "redis://127.0.0.1:6379", 0, 0, NULL, "URL",
            "Redis server, as for outbox-relay: redis://[[user]:password@]host[:port][/db], "
            "unix:///path/to/redis.sock[?db=N] or /path/to/redis.sock, Redis Cluster seeds "
            "redis-cluster://host:port[,host:port...], or Redis Sentinels "
            "redis-sentinel://[[user]:password@]host:port[,host:port...][/db]#master (rediss://, "
            "rediss-cluster:// and rediss-sentinel:// for TLS)",
            NULL),
    SHR("redis-password-file", 0, redis_password_file, NULL, "PATH",
        "read the Redis password from the first line of this file; it overrides a password in "
        "--redis-url"),
    SHR("redis-sentinel-user", 0, redis_sentinel_user, NULL, "NAME",
        "redis-sentinel:// only: the Sentinels' ACL user (needs a Sentinel password)"),
    SHR("redis-sentinel-password", OPT_F_SECRET | OPT_F_PASSWORD, redis_sentinel_password, NULL,
        "PASSWORD",
        "redis-sentinel:// only: the Sentinels' password (the one in --redis-url is the "
        "master's); prefer the -file option or the variable"),
    SHR("redis-sentinel-password-file", 0, redis_sentinel_password_file, NULL, "PATH",
        "redis-sentinel:// only: read the Sentinels' password from the first line of this file; "
        "it overrides --redis-sentinel-password"),
    SHR("redis-tls-ca-file", 0, tls_ca_file, NULL, "PATH",
        "rediss:// only: CA bundle (PEM) for the server's certificate; default: the system's "
        "trust store"),
    SHR("redis-tls-cert-file", 0, tls_cert_file, NULL, "PATH",
        "rediss:// only: client certificate (PEM); needs --redis-tls-key-file"),
    SHR("redis-tls-key-file", 0, tls_key_file, NULL, "PATH",
        "rediss:// only: private key (PEM) of --redis-tls-cert-file"),
    SHR("redis-tls-server-name", 0, tls_server_name, NULL, "NAME",
        "rediss:// only: the name the certificate must carry; default: the URL's host"),
    OPT_ROW("stream", OPT_LIST, OPT_F_DEDUP, BOTH, F(streams),
            offsetof(struct consumer_config, nstreams), NULL, 0, 0, NULL, "KEY",
            "stream to read; repeat the flag for more (the variable takes a comma-separated list; "
            "flags replace it)",
            NULL),
    SHR("stream-pattern", 0, stream_pattern, NULL, "GLOB",
        "also read every stream whose key matches this pattern (SCAN MATCH syntax, e.g. "
        "'outbox:*'); looked for again every 5 s"),
    STR("dead-letter-stream", 0, dead_letter_stream, "outbox:dead-letter", "KEY",
        "the relay's dead-letter stream (its --dead-letter-stream): --stream-pattern skips it, "
        "since its entries are not events; name it with --stream, or pass "
        "--include-dead-letter, to read it"),
    BOOL("include-dead-letter", include_dead_letter,
         "let --stream-pattern read the dead-letter stream too"),
    OPT_ROW("group", OPT_STRING, OPT_F_REQUIRED | OPT_F_ONLY, CMD, F(group), 0, NULL, 0, 0, NULL,
            "NAME", "consumer group to read as",
            "name the consumer group to read as, e.g. --group workers"),
    STR("consumer", 0, consumer, NULL, "NAME",
        "consumer name within the group (default: HOSTNAME-PID); a stable name, such as a pod "
        "name, lets a restarted consumer pick up its own pending entries at once"),
    OPT_ROW("count", OPT_INT, 0, BOTH, F(count), 0, "0", 0, INT64_MAX, NULL, "N",
            "exit 0 after printing N events (poison list: print at most N entries); 0 reads until "
            "stopped (lists all)",
            NULL),
    NUM("block-timeout", OPT_DURATION, 0, block_ms, "5s", 1, OPT_MS_DAY, "DURATION",
        "longest XREADGROUP BLOCK wait for new entries; in a Redis Cluster the pause between "
        "polling rounds, at most 100 ms",
        NULL),
    NUM("block", OPT_DURATION, OPT_F_LEGACY_MS, block_ms, NULL, 1, OPT_MS_DAY, "MS",
        "the old name of --block-timeout, kept working: a bare number here means milliseconds, "
        "as it always did (with a warning), a value with a unit the same as there",
        "block-timeout"),
    NUM("batch", OPT_INT, 0, batch, "100", 1, 100000, "N",
        "entries fetched per stream and call (XREADGROUP/XAUTOCLAIM COUNT)", NULL),
    NUM("claim-min-idle", OPT_DURATION, 0, claim_idle_ms, "1m", 0, 30 * OPT_MS_DAY, "DURATION",
        "claim (XAUTOCLAIM) and print entries that other consumers have left pending for longer "
        "than this; 0 disables",
        NULL),
    NUM("claim-idle", OPT_DURATION, OPT_F_LEGACY_MS, claim_idle_ms, NULL, 0, 30 * OPT_MS_DAY, "MS",
        "the old name of --claim-min-idle, kept working: a bare number here means milliseconds, "
        "as it always did (with a warning), a value with a unit the same as there",
        "claim-min-idle"),
    BOOL("create-group", create_group,
         "create the group on each stream when missing (XGROUP CREATE KEY GROUP 0 MKSTREAM), so "
         "it starts at the stream's first entry"),
    STR("exec", 0, exec_cmd, NULL, "CMD",
        "worker mode: run CMD (with /bin/sh -c) once per event, its JSON line on stdin; exit "
        "status 0 acknowledges the event, any other leaves it pending, to be delivered again"),
    STR("handler", 0, handler_cmd, NULL, "CMD",
        "worker mode: run CMD once and keep it: each event goes to its stdin as one line, and it "
        "answers one line on its stdout, done, retry or dead (an optional reason after a space)"),
    NUM("max-deliveries", OPT_INT, 0, max_deliveries, "0", 0, 1000000, "N",
        "worker mode: an event delivered N times without success (to any consumer of the group) "
        "is moved to the poison stream and acknowledged, atomically; 0 never moves one",
        NULL),
    SHR("poison-prefix", 0, poison_prefix, "outbox-consume:poison", "PREFIX",
        "the poison stream of stream S is PREFIX:{S} (or PREFIX:{T} when S has the hash tag {T}), "
        "in S's cluster slot"),
    OPT_ROW("entry", OPT_LIST, OPT_F_DEDUP | OPT_F_ONLY, CONSUMER_CMD_POISON, F(entries),
            offsetof(struct consumer_config, nentries), NULL, 0, 0, NULL, "ID",
            "poison replay: the poison entry to move back to its stream (as poison list shows "
            "it); repeat the flag for more",
            NULL),
    OPT_ROW("all", OPT_BOOL, OPT_F_ONLY, CONSUMER_CMD_POISON, F(all), 0, "false", 0, 0, NULL, NULL,
            "poison replay: move back every poison entry of the streams chosen", NULL),
    NUM("retry-max", OPT_DURATION, 0, retry_max_ms, "30s", 1, OPT_MS_DAY, "DURATION",
        "worker mode: a failed event is delivered again after 100 ms, doubling up to this, with "
        "jitter",
        NULL),
    STR("http-addr", 0, http_addr, NULL, "ADDR",
        "serve /metrics (Prometheus) and /healthz on host:port, :port or [ipv6]:port (port 0: "
        "any free one, logged); unset or empty: off"),
};

#undef NUM
#undef BOOL
#undef SHR
#undef STR
#undef F

static void print_version(FILE *out)
{
	fprintf(out, "%s %s\n", PROGNAME, OUTBOX_RELAY_VERSION);
}

/* A line for cmd/ to log; see consumer.h. */
static void add_warning(void *p, const char *line)
{
	struct consumer_config *cf = p;

	if (line[0] && cf->nwarnings < CONFIG_WARNINGS_MAX)
		(void)snprintf(cf->warnings[cf->nwarnings++], CONFIG_WARNING_LEN, "%s", line);
}

static const struct opt_spec spec = {
    PROGNAME, ENV_PREFIX,     copt_table,    sizeof(copt_table) / sizeof(copt_table[0]),
    CMD,      consumer_usage, print_version, add_warning,
};

/* "<hostname>-<pid>" into *ret. */
static bool default_consumer_name(char **ret, char *err, size_t errlen)
{
	char host[256], name[300];

	if (gethostname(host, sizeof(host)) != 0 || !host[0])
		(void)snprintf(host, sizeof(host), "localhost");
	host[sizeof(host) - 1] = '\0';
	(void)snprintf(name, sizeof(name), "%s-%ld", host, (long)getpid());
	*ret = strdup(name);
	return *ret ? true : msg_oom(err, errlen);
}

/* The spec of command cmd (CONSUMER_CMD_*), named prog in errors, its --help usage. */
static struct opt_spec spec_of(unsigned cmd, const char *prog, void (*usage)(FILE *))
{
	struct opt_spec s = spec;

	s.cmd = cmd;
	s.prog = prog;
	s.usage = usage;
	return s;
}

/* Checks across options, defaults computed at run time, the password files. */
static bool finish_config(const struct opt_spec *sp, struct consumer_config *cf, char *err,
                          size_t errlen)
{
	/* poison list and replay without a stream: every poison stream. */
	if (sp->cmd == CMD && cf->nstreams == 0 && !cf->stream_pattern) {
		msg_set(err, errlen,
		        "missing --stream or --stream-pattern (or %sSTREAM, %sSTREAM_PATTERN): say "
		        "which streams to read, e.g. --stream-pattern 'outbox:*'",
		        ENV_PREFIX, ENV_PREFIX);
		return false;
	}
	if (cf->exec_cmd && cf->handler_cmd) {
		msg_set(err, errlen, "--exec and --handler are two forms of one worker mode: give one");
		return false;
	}
	if (cf->max_deliveries > 0 && !cf->exec_cmd && !cf->handler_cmd) {
		msg_set(err, errlen,
		        "--max-deliveries needs a handler that can fail: add --exec CMD or --handler CMD");
		return false;
	}
	if (!cf->consumer && !default_consumer_name(&cf->consumer, err, errlen))
		return false;
	if (cf->redis_password_file &&
	    !opt_replace_secret(sp, cf, "redis-password-file", cf->redis_password_file,
	                        &cf->redis.password, err, errlen))
		return false;
	if (cf->redis_sentinel_password_file &&
	    !opt_replace_secret(sp, cf, "redis-sentinel-password-file",
	                        cf->redis_sentinel_password_file, &cf->redis_sentinel_password, err,
	                        errlen))
		return false;
	if (!redis_target_take_sentinel_auth(&cf->redis, &cf->redis_sentinel_user,
	                                     &cf->redis_sentinel_password,
	                                     cf->redis_sentinel_password_file != NULL, err, errlen))
		return false;
	if (!redis_target_check_auth(&cf->redis, err, errlen))
		return false;
	return redis_target_set_tls(&cf->redis, cf->tls_ca_file, cf->tls_cert_file, cf->tls_key_file,
	                            cf->tls_server_name, err, errlen);
}

/* See consumer.h. */
enum config_result consumer_config_load(struct consumer_config *cf, int argc, char **argv,
                                        char **envp, char *err, size_t errlen)
{
	return consumer_config_load_as(cf, CMD, PROGNAME, consumer_usage, argc, argv, envp, err,
	                               errlen);
}

/* See consumer.h. */
enum config_result consumer_config_load_as(struct consumer_config *cf, unsigned cmd,
                                           const char *prog, void (*usage)(FILE *), int argc,
                                           char **argv, char **envp, char *err, size_t errlen)
{
	struct opt_spec sp = spec_of(cmd, prog, usage);
	struct consumer_config built;
	enum opt_result r;

	memset(cf, 0, sizeof(*cf));
	memset(&built, 0, sizeof(built));
	r = opt_load(&sp, &built, argc, argv, envp, err, errlen);
	if (r == OPT_OK && !finish_config(&sp, &built, err, errlen))
		r = OPT_ERROR;
	if (r == OPT_OK) {
		*cf = built;
		memset(&built, 0, sizeof(built));
	}
	consumer_config_finish(&built);
	return (enum config_result)r;
}

/* See consumer.h. */
void consumer_usage(FILE *out)
{
	fprintf(out,
	        "Usage: %s --group NAME (--stream KEY... | --stream-pattern GLOB) [OPTIONS]\n"
	        "Read outbox events from Redis Streams as a consumer group member and print each\n"
	        "as one JSON line on stdout:\n"
	        "  {\"%s\":\"outbox:order\",\"%s\":\"1700000000000-0\",\"id\":\"...\",...,"
	        "\"payload\":{...}}\n"
	        "Fields follow in entry order; payload and headers are embedded as JSON when\n"
	        "they parse. An entry is acknowledged (XACK) only after its line is flushed:\n"
	        "at-least-once. Pending entries of this consumer are read first.\n"
	        "Worker mode (--exec or --handler): each event goes to a program instead, and is\n"
	        "acknowledged when the program succeeded; see --max-deliveries for poison events.\n"
	        "List them, or move them back to their streams: outbox-consume poison list|replay\n"
	        "(outbox-consume poison --help).\n"
	        "\n"
	        "Every option can also be set with its %s* environment variable; flags win.\n"
	        "Durations, as for outbox-relay: 500ms, 90s, 5m, 1h, 2d, or a bare number of\n"
	        "seconds (under the old names --block and --claim-idle a bare number still means\n"
	        "milliseconds, with a warning).\n"
	        "\n"
	        "Options:\n",
	        PROGNAME, CONSUMER_KEY_STREAM, CONSUMER_KEY_ENTRY_ID, ENV_PREFIX);
	opt_print_options(&spec, out);
	fprintf(out, "  -h, --help\n"
	             "      print this help and exit\n"
	             "  -V, --version\n"
	             "      print the version and exit\n"
	             "\n"
	             "Exit status: 0 after --count events or on SIGTERM/SIGINT (the current entry is\n"
	             "finished first), 1 when stdout fails, 2 for bad options, 5 when Redis refuses\n"
	             "the setup (credentials, missing group without --create-group). Lost connections\n"
	             "are retried.\n");
}

/* See consumer.h. */
void consumer_print_options(unsigned cmd, FILE *out)
{
	struct opt_spec sp = spec_of(cmd, PROGNAME, consumer_usage);

	opt_print_options(&sp, out);
}

/* See consumer.h. */
void consumer_config_finish(struct consumer_config *cf)
{
	if (!cf)
		return;
	opt_free(&spec, cf);
	memset(cf, 0, sizeof(*cf));
}
