/*
 * config.h - outbox-relay configuration: one table of rows for the option
 * engine (opt.h) drives parsing of flags and OUTBOX_RELAY_* environment
 * variables, range checks, defaults and --help, for the relay, `status`
 * and `republish`.
 *
 * Precedence: built-in default < environment variable < command-line flag.
 */
#ifndef RELAY_CONFIG_H
#define RELAY_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "log.h"
#include "opt.h"
#include "lsn.h"
#include "redis_url.h"

/* Warnings config_load has for cmd/ to log (the library never logs). */
#define CONFIG_WARNINGS_MAX 4
#define CONFIG_WARNING_LEN 512
/* The commands that take these options (struct opt_def's cmds). */
#define CONFIG_CMD_RELAY 0x1u
#define CONFIG_CMD_STATUS 0x2u    /* outbox-relay status */
#define CONFIG_CMD_REPUBLISH 0x4u /* outbox-relay republish */

struct relay_config {
	/* PostgreSQL */
	char *pg_dsn;       /* --pg-dsn / OUTBOX_RELAY_PG_DSN: conninfo or URI (required) */
	char *slot;         /* --slot, default "outbox_relay" */
	char *plugin;       /* --plugin wal2json|pgoutput: of a slot the relay creates */
	char *publication;  /* --publication (pgoutput), NULL: the slot's name */
	int64_t txn_memory; /* --txn-memory (pgoutput), default 8MiB: a held transaction in memory */
	bool pgoutput_streaming; /* --[no-]pgoutput-streaming: protocol 2 with streaming (14+) */
	bool create_slot;        /* --create-slot / --no-create-slot, default true */
	bool failover_slot;      /* --[no-]failover-slot, default true: FAILOVER on PostgreSQL 17+ */
	char *table;             /* --table, default "public.outbox" (schema-qualified) */
	char *message_prefix;    /* --message-prefix, default "outbox" */
	char *id_column;         /* --id-column, default "id" */
	char *id_format;         /* --id-format any|uuid, default "any" */
	int status_interval_ms;  /* --status-interval, default 10s */
	int pg_timeout_ms; /* --pg-timeout, default 0 = off: reconnect when the server is silent that
	                      long */
	lsn_t endpos;      /* --endpos LSN, LSN_INVALID when unset */
	lsn_t accept_gap;  /* --accept-gap LSN: the refused gap to accept, LSN_INVALID when unset */

	/* Redis */
	char *redis_url;           /* --redis-url, default "redis://127.0.0.1:6379" */
	struct redis_target redis; /* parsed from redis_url */
	char *stream;              /* --stream template, default "outbox:{aggregate_type}" */
	char *dead_letter_stream;  /* --dead-letter-stream, default "outbox:dead-letter" */
	int64_t dedup_window_s;    /* --dedup-window, default 3600 s, 0 disables */
	int64_t maxlen;            /* --maxlen, default 0 = no trimming */
	char *publish;        /* --publish native|function: how batches are written, default native */
	char *trim;           /* --trim none|acked: trim streams to what consumer groups still need */
	int trim_interval_ms; /* --trim-interval, default 60s */
	char **groups;        /* --group NAME (repeatable; env: comma list) */
	size_t ngroups;
	char *key_prefix;          /* --key-prefix for auxiliary keys, default "outbox-relay" */
	int linger_ms;             /* --linger: how long a batch waits for more events, default 0 */
	bool native_predict;       /* --native-predict (lookups sent with read 1), default true */
	int64_t dedup_record;      /* --dedup-record: bytes for the native path's id records, 0 none */
	int64_t dedup_record_seed; /* --dedup-record-seed: hashes of a bucket read per group, 0 none */
	bool redis_functions; /* --redis-functions / --no-redis-functions (EVAL fallback), default true
	                       */
	int redis_timeout_ms; /* --redis-timeout, default 5s: connect and reply timeout */
	bool redis_cluster;   /* --redis-cluster: treat --redis-url's host as a cluster seed */
	bool allow_eviction;  /* --allow-eviction: accept maxmemory-policy allkeys-* */
	char *redis_tls_ca_file;     /* --redis-tls-ca-file: copied into redis.tls_ca_file */
	char *redis_tls_cert_file;   /* --redis-tls-cert-file */
	char *redis_tls_key_file;    /* --redis-tls-key-file */
	char *redis_tls_server_name; /* --redis-tls-server-name */
	int64_t wait_replicas;       /* --wait-replicas N, default 0: WAIT N after each write round */
	int wait_timeout_ms;         /* --wait-timeout, default 1s */
	char *wait_aof;              /* --wait-aof none|local|local,replicas (WAITAOF, Redis >= 7.2) */

	/* Flow control and lifecycle */
	int64_t max_inflight_events; /* --max-inflight-events, default 10000 */
	int64_t max_inflight_bytes;  /* --max-inflight-bytes, default 8 MiB */
	int shutdown_timeout_ms;     /* --shutdown-timeout, default 10s */
	int retry_max_ms;            /* --retry-max, default 30s: backoff cap */

	int64_t
	    max_event_bytes; /* --max-event-bytes, default 64 MiB: larger events are dead-lettered */

	/* outbox-relay republish */
	char *since;        /* --since TIME (timestamptz text), NULL when unset */
	char *until;        /* --until TIME, NULL when unset */
	char *time_column;  /* --time-column, default "created_at" */
	int64_t fetch_size; /* --fetch-size, default 1000 */
	int clock_skew_ms;  /* --clock-skew (verify), default 5m */

	/* outbox-relay status */
	char *stream_pattern; /* --stream-pattern GLOB, default "outbox:*" */

	/* Secrets from files (read by config_load; the file wins over the DSN/URL). */
	char *pg_password_file;    /* --pg-password-file */
	char *pg_password;         /* its content (first line), NULL when unset */
	char *redis_password_file; /* --redis-password-file: replaces redis.password */
	/* --redis-sentinel-password and its -file: moved to redis.sentinel_password */
	char *redis_sentinel_password;
	char *redis_sentinel_user; /* --redis-sentinel-user: moved to redis.sentinel_user */
	char *redis_sentinel_password_file;

	/* Operations */
	char *http_addr;           /* --http-addr, default ":9187"; "" disables the HTTP endpoint */
	bool check_config;         /* --check-config: validate, print, check the prerequisites */
	bool check_config_offline; /* --check-config-offline: validate and print only, exit 0 */

	/* Logging */
	enum log_level log_level;   /* --log-level, default info */
	enum log_format log_format; /* --log-format text|json, default text */

	/* Lines for cmd/ to log once logging is set up (e.g. a password file open to others). */
	char warnings[CONFIG_WARNINGS_MAX][CONFIG_WARNING_LEN];
	size_t nwarnings;
};

enum config_result {
	CONFIG_OK = OPT_OK,           /* cf filled, run */
	CONFIG_HELP = OPT_HELP,       /* --help printed to stdout, exit 0 */
	CONFIG_VERSION = OPT_VERSION, /* --version printed to stdout, exit 0 */
	CONFIG_ERROR = OPT_ERROR      /* err holds one line naming the option and the fix; exit 2 */
};

/*
 * Fill *cf from defaults, then envp (OUTBOX_RELAY_* entries, NULL-terminated
 * "NAME=value" array), then argv. Never prints except for --help/--version
 * (to stdout). On CONFIG_ERROR, err holds one line such as
 * `invalid value "abc" for --dedup-window: expected a duration like 3600, 90s or 1h`.
 * Secrets never appear in err. Passwords in the argv values of --pg-dsn and
 * --redis-url are overwritten in place (opt_scrub_secret) once copied, so
 * argv must be writable; cf keeps its own copies. cf->warnings holds lines
 * for the caller to log.
 */
enum config_result config_load(struct relay_config *cf, int argc, char **argv, char **envp,
                               char *err, size_t errlen);
/*
 * config_load() for command cmd (CONFIG_CMD_*): the options only it takes
 * (OPT_F_ONLY rows) are known, errors name prog ("run PROG --help"), and
 * --help calls usage.
 */
enum config_result config_load_as(struct relay_config *cf, unsigned cmd, const char *prog,
                                  void (*usage)(FILE *), int argc, char **argv, char **envp,
                                  char *err, size_t errlen);
/* Print the usage text (every option, its env var and default) to out. */
void config_usage(FILE *out);
/* Print the options the --help of command cmd lists, by section, then -h and -V. */
void config_print_options(unsigned cmd, FILE *out);

/*
 * Print what --version prints: the relay's version, then the libraries it
 * runs with: hiredis (the version it was built against: hiredis has no
 * run-time version call) and whether Redis TLS is built in, libpq
 * (PQlibVersion) and yajl (yajl_version), both as loaded at run time.
 */
void config_print_version(FILE *out);
/* Free everything config_load allocated; NULL-safe; zeroes *cf. */
void config_finish(struct relay_config *cf);

#endif
