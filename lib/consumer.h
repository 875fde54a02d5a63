/*
 * consumer.h - outbox-consume, the reference Redis Streams consumer for the
 * streams outbox-relay writes.
 *
 * It reads one consumer group with XREADGROUP (its own pending entries
 * first, then new ones), claims entries that other consumers left pending
 * for too long (XAUTOCLAIM), prints every entry as one JSON line on stdout
 * and acknowledges it (XACK) only after the line has been flushed: delivery
 * is at-least-once.
 *
 * Here: the configuration (flags and OUTBOX_CONSUME_* environment
 * variables, consumer_config.c) and consumer_run(), the program's main loop
 * (consumer.c, with consumer_read.c and consumer_command.c; their shared
 * state is in consumer_int.h). Like relay_run() it is the one part of this
 * module that logs (to stderr, through log.h). Rendering an entry as a JSON
 * line is consumer_render.h.
 */
#ifndef RELAY_CONSUMER_H
#define RELAY_CONSUMER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "config.h"
#include "redis_url.h"

/* The commands of the option rows (opt.h): reading, and `outbox-consume poison`. */
#define CONSUMER_CMD_RUN 0x1u
#define CONSUMER_CMD_POISON 0x2u /* outbox-consume poison list|replay */

struct consumer_config {
	char *redis_url;                    /* --redis-url, default "redis://127.0.0.1:6379" */
	struct redis_target redis;          /* parsed from redis_url (password file applied) */
	char *redis_password_file;          /* --redis-password-file */
	char *redis_sentinel_password;      /* --redis-sentinel-password (moved into redis) */
	char *redis_sentinel_password_file; /* --redis-sentinel-password-file */
	char *redis_sentinel_user;          /* --redis-sentinel-user (moved into redis) */
	char *tls_ca_file;                  /* --redis-tls-ca-file (copied into redis) */
	char *tls_cert_file;                /* --redis-tls-cert-file */
	char *tls_key_file;                 /* --redis-tls-key-file */
	char *tls_server_name;              /* --redis-tls-server-name */
	char **streams;                     /* --stream KEY (repeatable; env: comma list) */
	size_t nstreams;
	char *stream_pattern;     /* --stream-pattern GLOB (SCAN MATCH ... TYPE stream) */
	char *dead_letter_stream; /* --dead-letter-stream KEY, default "outbox:dead-letter" */
	bool include_dead_letter; /* --include-dead-letter: the pattern may match it */
	char *group;              /* --group NAME (required) */
	char *consumer;           /* --consumer NAME, default "<hostname>-<pid>" */
	int64_t count;            /* --count N: exit 0 after N events; 0 = unlimited */
	int64_t block_ms;         /* --block-timeout (old: --block), default 5s, in ms */
	int64_t batch;            /* --batch N (XREADGROUP COUNT), default 100 */
	int64_t claim_idle_ms;    /* --claim-min-idle (old: --claim-idle), 1m, in ms; 0 off */
	bool create_group;        /* --create-group */
	char *exec_cmd;           /* --exec CMD: worker mode, one process per event */
	char *handler_cmd;        /* --handler CMD: worker mode, one co-process */
	int64_t max_deliveries;   /* --max-deliveries N: then to the poison stream; 0 = never */
	char *poison_prefix;      /* --poison-prefix, default "outbox-consume:poison" */
	int64_t retry_max_ms;     /* --retry-max: the longest pause before a failed event again */
	char *http_addr;          /* --http-addr: /metrics and /healthz; NULL = off */
	char **entries;           /* poison replay --entry ID (repeatable) */
	size_t nentries;
	bool all; /* poison replay --all */
	/* Lines for cmd/ to log (a password file open to others); see config.h. */
	char warnings[CONFIG_WARNINGS_MAX][CONFIG_WARNING_LEN];
	size_t nwarnings;
};

/*
 * Fill *cf from defaults, then envp (OUTBOX_CONSUME_* entries of a
 * NULL-terminated "NAME=value" array), then argv (flags win). Prints only
 * for --help/--version (to stdout). On CONFIG_ERROR err holds one line
 * naming the option and the fix (never a password) and *cf is zeroed; on
 * CONFIG_HELP/CONFIG_VERSION *cf is zeroed too. Unknown OUTBOX_CONSUME_*
 * variables are ignored.
 */
enum config_result consumer_config_load(struct consumer_config *cf, int argc, char **argv,
                                        char **envp, char *err, size_t errlen);
/*
 * consumer_config_load() for command cmd (CONSUMER_CMD_*): the rows it
 * accepts, prog named in errors, usage printed for --help. Without --stream
 * and --stream-pattern, CONSUMER_CMD_POISON means every poison stream.
 */
enum config_result consumer_config_load_as(struct consumer_config *cf, unsigned cmd,
                                           const char *prog, void (*usage)(FILE *), int argc,
                                           char **argv, char **envp, char *err, size_t errlen);
/* --help's option list of command cmd (CONSUMER_CMD_*). */
void consumer_print_options(unsigned cmd, FILE *out);
/* Print the usage text (every option, its variable and default) to out. */
void consumer_usage(FILE *out);
/* Free everything consumer_config_load allocated; NULL-safe; zeroes *cf. */
void consumer_config_finish(struct consumer_config *cf);

/* ---- Main loop ---- */

/*
 * Run the consumer until --count events were printed, SIGTERM/SIGINT (the
 * entry being printed is finished and acknowledged first) or a permanent
 * failure. Installs handlers for SIGINT, SIGTERM (a second one exits 1 at
 * once) and ignores SIGPIPE. Connection losses are retried with a capped
 * backoff. Returns the process exit code: 0, 1 (stdout failed, or an
 * internal error), or 5 (Redis setup: credentials, missing group without
 * --create-group, unsupported server).
 */
int consumer_run(const struct consumer_config *cf);

/* ---- Poison streams (consumer_poison.c) ---- */

/*
 * `outbox-consume poison list|replay [OPTIONS]`: argv[0] is "poison". Lists
 * the poison entries of the chosen streams, or moves chosen ones back to
 * their streams (one script each: XADD of the event's own fields, XDEL of
 * the poison entry). Prints to stdout, errors as one line on stderr. Returns
 * the exit code: 0; 2 for bad options (a replay without --entry or --all);
 * 5 when Redis fails or refuses; 7 when an --entry is not a poison entry.
 */
int consumer_poison_main(int argc, char **argv, char **envp);

/*
 * The poison stream of stream key into buf: PREFIX:{T} when key has the hash
 * tag {T}, else PREFIX:{key}, so that it is in the stream's cluster slot.
 * False when it does not fit.
 */
bool consumer_poison_key(const char *prefix, const char *key, char *buf, size_t len);

#endif
