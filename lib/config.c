/*
 * config.c - outbox-relay configuration from flags and OUTBOX_RELAY_*
 * environment variables.
 *
 * Every option is one row of option_table below: long name, environment
 * variable, kind, field, string default, range and help text. That one table
 * drives argv parsing, the environment, defaults, range checks, --help and
 * config_finish(), so adding an option means adding a row (and the field in
 * config.h).
 *
 * Loading happens in two passes. The first collects raw strings: the last
 * value given on the command line and the environment value, per option.
 * The second converts, for each option, only the value that wins
 * (flag > environment > default), so a broken environment variable that a
 * flag overrides is never an error.
 *
 * Library code: nothing is logged. Errors are one line in the caller's
 * buffer, naming the flag or variable and the fix. The values of --pg-dsn and
 * --redis-url may hold passwords and are never quoted back.
 */
#include "msg.h"
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include <hiredis/hiredis.h>
#include <libpq-fe.h>
#include <yajl/yajl_version.h>

#include "buf.h"
#include "event.h"
#include "redis_tls.h"

#if defined(__has_include)
#if __has_include("relay_build.h")
#include "relay_build.h"
#endif
#endif
#ifndef OUTBOX_RELAY_VERSION
#error "OUTBOX_RELAY_VERSION is not defined: build with meson or pass -DOUTBOX_RELAY_VERSION"
#endif

#define PROGNAME "outbox-relay"
#define ENV_PREFIX "OUTBOX_RELAY_"

/* Milliseconds per duration unit, bytes per size unit. */
#define MS_SECOND INT64_C(1000)
#define MS_MINUTE (60 * MS_SECOND)
#define MS_HOUR (60 * MS_MINUTE)
#define MS_DAY (24 * MS_HOUR)
#define KIB INT64_C(1024)
#define MIB (1024 * KIB)
#define GIB (1024 * MIB)

/* Longest user value quoted back in an error message, in bytes. */
#define QUOTE_MAX MSG_QUOTE_MAX
/* Column where the environment variable starts in --help. */
#define USAGE_ENV_COL 32
#define USAGE_WIDTH 80
#define USAGE_INDENT 6
#define NBSP '\x01'

enum opt_kind {
	OPT_STRING,     /* char *, strdup'd */
	OPT_BOOL,       /* bool; --name, --no-name, --name=false */
	OPT_DURATION,   /* int or int64_t milliseconds (seconds with OPT_F_SECONDS) */
	OPT_INT,        /* int64_t */
	OPT_SIZE,       /* int64_t bytes */
	OPT_LSN,        /* lsn_t */
	OPT_LIST,       /* char ** plus a size_t count at aux_offset */
	OPT_LOG_LEVEL,  /* enum log_level */
	OPT_LOG_FORMAT, /* enum log_format */
	OPT_REDIS_URL   /* char * plus struct redis_target at aux_offset */
};

enum opt_group { GROUP_PG, GROUP_REDIS, GROUP_FLOW, GROUP_OPS, GROUP_LOG, GROUP_REPUBLISH };

static const char *const group_titles[] = {
    [GROUP_PG] = "PostgreSQL",     [GROUP_REDIS] = "Redis",
    [GROUP_FLOW] = "Flow control", [GROUP_OPS] = "Operations",
    [GROUP_LOG] = "Logging",       [GROUP_REPUBLISH] = "Republish (outbox-relay republish only)",
};

/* Option flags. */
#define OPT_F_REQUIRED 0x01 /* no default; an empty value counts as missing */
#define OPT_F_SECRET 0x02   /* value may hold a password: never quoted in errors */
#define OPT_F_NONEMPTY 0x04 /* "" is rejected */
#define OPT_F_SECONDS 0x08  /* OPT_DURATION stored in whole seconds */
#define OPT_F_QUALIFY 0x10  /* OPT_STRING table name: "name" becomes "public.name" */
#define OPT_F_PASSWORD 0x20 /* with OPT_F_SECRET: the whole value is a password */

/*
 * Extra validation for OPT_STRING values. Returns false and writes a reason
 * (the part after "invalid value ... for --x: ") to why.
 */
typedef bool (*check_fn)(const char *value, char *why, size_t whylen);

struct option_def {
	const char *name; /* long flag without "--" */
	const char *env;  /* ENV_PREFIX + name upper-cased, '-' as '_' */
	enum opt_kind kind;
	enum opt_group group;
	unsigned flags;      /* OPT_F_* */
	size_t offset;       /* field in struct relay_config */
	size_t size;         /* sizeof that field */
	size_t aux_offset;   /* OPT_LIST: count field; OPT_REDIS_URL: parsed target */
	const char *defval;  /* default as it would be typed; NULL: none */
	int64_t min, max;    /* OPT_DURATION (ms), OPT_INT, OPT_SIZE */
	check_fn check;      /* OPT_STRING only; NULL: none */
	const char *metavar; /* placeholder in --help; NULL for OPT_BOOL */
	const char *help;
	const char *missing; /* OPT_F_REQUIRED: how to fix a missing value */
};

static bool check_conninfo(const char *value, char *why, size_t whylen);
static bool check_slot(const char *value, char *why, size_t whylen);
static bool check_table(const char *value, char *why, size_t whylen);
static bool check_key_prefix(const char *value, char *why, size_t whylen);
static bool check_stream_name(const char *value, char *why, size_t whylen);
static bool check_id_format(const char *value, char *why, size_t whylen);
static bool check_wait_aof(const char *value, char *why, size_t whylen);
static bool check_trim(const char *value, char *why, size_t whylen);

#define FIELD(f)                                                                                   \
	.offset = offsetof(struct relay_config, f), .size = sizeof(((struct relay_config *)0)->f)

static const struct option_def option_table[] = {
    /* PostgreSQL */
    {
        .name = "pg-dsn",
        .env = "OUTBOX_RELAY_PG_DSN",
        .kind = OPT_STRING,
        .group = GROUP_PG,
        .flags = OPT_F_REQUIRED | OPT_F_SECRET,
        FIELD(pg_dsn),
        .check = check_conninfo,
        .metavar = "CONNINFO",
        .help = "libpq connection string or URI of the database holding the outbox, "
                "e.g. \"host=db dbname=app user=relay\" or postgresql://relay@db/app; "
                "keep the password in ~/.pgpass or PGPASSWORD",
        .missing = "set it to a libpq connection string, e.g. \"host=db dbname=app user=relay\"",
    },
    {
        .name = "slot",
        .env = "OUTBOX_RELAY_SLOT",
        .kind = OPT_STRING,
        .group = GROUP_PG,
        FIELD(slot),
        .defval = "outbox_relay",
        .check = check_slot,
        .metavar = "NAME",
        .help = "logical replication slot (plugin wal2json) to stream from; "
                "1-63 lower-case letters, digits or underscores",
    },
    {
        .name = "create-slot",
        .env = "OUTBOX_RELAY_CREATE_SLOT",
        .kind = OPT_BOOL,
        .group = GROUP_PG,
        FIELD(create_slot),
        .defval = "true",
        .help = "create the slot when it does not exist; with --no-create-slot a "
                "missing slot is an error (exit code 4)",
    },
    {
        .name = "failover-slot",
        .env = "OUTBOX_RELAY_FAILOVER_SLOT",
        .kind = OPT_BOOL,
        .group = GROUP_PG,
        FIELD(failover_slot),
        .defval = "true",
        .help = "PostgreSQL 17+: create the slot with FAILOVER (and switch an existing one "
                "on), so standbys with sync_replication_slots keep a copy and the relay goes "
                "on after a promotion; PostgreSQL 15 and 16 have no failover slots (a "
                "failover loses the slot: the relay then stops with exit 8)",
    },
    {
        .name = "table",
        .env = "OUTBOX_RELAY_TABLE",
        .kind = OPT_STRING,
        .group = GROUP_PG,
        .flags = OPT_F_QUALIFY,
        FIELD(table),
        .defval = "public.outbox",
        .check = check_table,
        .metavar = "TABLE",
        .help = "outbox table whose INSERTs are published, as schema.table; "
                "a bare name means public.NAME",
    },
    {
        .name = "message-prefix",
        .env = "OUTBOX_RELAY_MESSAGE_PREFIX",
        .kind = OPT_STRING,
        .group = GROUP_PG,
        .flags = OPT_F_NONEMPTY,
        FIELD(message_prefix),
        .defval = "outbox",
        .metavar = "PREFIX",
        .help = "prefix of the pg_logical_emit_message() messages that carry events "
                "(see outbox_emit_message() in sql/outbox.sql)",
    },
    {
        .name = "id-column",
        .env = "OUTBOX_RELAY_ID_COLUMN",
        .kind = OPT_STRING,
        .group = GROUP_PG,
        .flags = OPT_F_NONEMPTY,
        FIELD(id_column),
        .defval = "id",
        .metavar = "COLUMN",
        .help = "column of the outbox table holding the event id",
    },
    {
        .name = "id-format",
        .env = "OUTBOX_RELAY_ID_FORMAT",
        .kind = OPT_STRING,
        .group = GROUP_PG,
        FIELD(id_format),
        .defval = "any",
        .check = check_id_format,
        .metavar = "FORMAT",
        .help = "what an event id must look like: any (any non-empty value) or uuid "
                "(8-4-4-4-12 hex digits); other ids go to the dead-letter stream",
    },
    {
        .name = "status-interval",
        .env = "OUTBOX_RELAY_STATUS_INTERVAL",
        .kind = OPT_DURATION,
        .group = GROUP_PG,
        FIELD(status_interval_ms),
        .defval = "10s",
        .min = 100,
        .max = MS_HOUR,
        .metavar = "DURATION",
        .help = "how often to report the confirmed position to PostgreSQL",
    },
    {
        .name = "pg-timeout",
        .env = "OUTBOX_RELAY_PG_TIMEOUT",
        .kind = OPT_DURATION,
        .group = GROUP_PG,
        FIELD(pg_timeout_ms),
        .defval = "0",
        .min = 0,
        .max = 24 * MS_HOUR,
        .metavar = "DURATION",
        .help = "reconnect when PostgreSQL sends nothing for this long although asked to "
                "answer (a hung server or a network that drops packets silently); 0 turns it "
                "off. Keep it above the longest time PostgreSQL spends decoding a big "
                "transaction that touches no outbox row (wal2json 2.5 sends nothing meanwhile)",
    },
    {
        .name = "endpos",
        .env = "OUTBOX_RELAY_ENDPOS",
        .kind = OPT_LSN,
        .group = GROUP_PG,
        FIELD(endpos),
        .metavar = "LSN",
        .help = "exit 0 once the relay has confirmed this WAL position (e.g. 0/16B3748) "
                "to PostgreSQL; by default the relay runs until stopped",
    },
    {
        .name = "accept-gap",
        .env = "OUTBOX_RELAY_ACCEPT_GAP",
        .kind = OPT_LSN,
        .group = GROUP_PG,
        FIELD(accept_gap),
        .metavar = "LSN",
        .help = "after the relay refused to start (exit 8) because its slot is missing, "
                "invalidated or recreated: the position that refusal printed, to accept the "
                "gap and stream from the slot's new position (republish the gap first). It "
                "matches only that gap, so leaving it set cannot hide a later one",
    },

    /* Redis */
    {
        .name = "redis-url",
        .env = "OUTBOX_RELAY_REDIS_URL",
        .kind = OPT_REDIS_URL,
        .group = GROUP_REDIS,
        .flags = OPT_F_SECRET,
        FIELD(redis_url),
        .aux_offset = offsetof(struct relay_config, redis),
        .defval = "redis://127.0.0.1:6379",
        .metavar = "URL",
        .help = "Redis server: redis://[[user]:password@]host[:port][/db], rediss://... "
                "for TLS, unix:///path/to/redis.sock[?db=N] or /path/to/redis.sock, or "
                "Redis Cluster seeds redis-cluster://host:port[,host:port...] "
                "(rediss-cluster:// for TLS), or Redis Sentinels "
                "redis-sentinel://[[user]:password@]host:port[,host:port...][/db]#master "
                "(rediss-sentinel:// for TLS to Sentinels and master; the credentials are "
                "the master's); percent-encode @ and : in credentials (%40, %3A)",
    },
    {
        .name = "stream",
        .env = "OUTBOX_RELAY_STREAM",
        .kind = OPT_STRING,
        .group = GROUP_REDIS,
        .flags = OPT_F_NONEMPTY,
        FIELD(stream),
        .defval = "outbox:{aggregate_type}",
        .metavar = "TEMPLATE",
        .help = "stream key for each event; {field} is replaced by that event field",
    },
    {
        .name = "dead-letter-stream",
        .env = "OUTBOX_RELAY_DEAD_LETTER_STREAM",
        .kind = OPT_STRING,
        .group = GROUP_REDIS,
        .flags = OPT_F_NONEMPTY,
        FIELD(dead_letter_stream),
        .defval = "outbox:dead-letter",
        .check = check_stream_name,
        .metavar = "KEY",
        .help = "stream that receives events which cannot be published as they are",
    },
    {
        .name = "dedup-window",
        .env = "OUTBOX_RELAY_DEDUP_WINDOW",
        .kind = OPT_DURATION,
        .group = GROUP_REDIS,
        .flags = OPT_F_SECONDS,
        FIELD(dedup_window_s),
        .defval = "1h",
        .min = 0,
        .max = 30 * MS_DAY,
        .metavar = "DURATION",
        .help = "how long published event ids are remembered so that a second event "
                "with the same id is dropped; whole seconds, 0 disables (replays of "
                "already published WAL are dropped by the LSN watermark regardless)",
    },
    {
        .name = "maxlen",
        .env = "OUTBOX_RELAY_MAXLEN",
        .kind = OPT_INT,
        .group = GROUP_REDIS,
        FIELD(maxlen),
        .defval = "0",
        .min = 0,
        .max = INT64_C(1000000000000),
        .metavar = "N",
        .help = "trim each stream to about N entries (XADD MAXLEN ~ N); 0 never trims",
    },
    {
        .name = "trim",
        .env = "OUTBOX_RELAY_TRIM",
        .kind = OPT_STRING,
        .group = GROUP_REDIS,
        FIELD(trim),
        .defval = "none",
        .check = check_trim,
        .metavar = "MODE",
        .help = "none; acked: every --trim-interval, trim each stream the relay published "
                "to up to the oldest entry a consumer group has not yet been delivered or "
                "acknowledged (XTRIM MINID ~); a stream without a group is not trimmed; "
                "--maxlen stays a hard cap",
    },
    {
        .name = "trim-interval",
        .env = "OUTBOX_RELAY_TRIM_INTERVAL",
        .kind = OPT_DURATION,
        .group = GROUP_REDIS,
        FIELD(trim_interval_ms),
        .defval = "60s",
        .min = 100,
        .max = 7 * MS_DAY,
        .metavar = "DURATION",
        .help = "how often --trim acked trims the streams",
    },
    {
        .name = "group",
        .env = "OUTBOX_RELAY_GROUP",
        .kind = OPT_LIST,
        .group = GROUP_REDIS,
        FIELD(groups),
        .aux_offset = offsetof(struct relay_config, ngroups),
        .metavar = "NAME",
        .help = "consumer group to create on each stream; repeat the flag for more "
                "(the variable takes a comma-separated list; flags replace it)",
    },
    {
        .name = "key-prefix",
        .env = "OUTBOX_RELAY_KEY_PREFIX",
        .kind = OPT_STRING,
        .group = GROUP_REDIS,
        FIELD(key_prefix),
        .defval = "outbox-relay",
        .check = check_key_prefix,
        .metavar = "PREFIX",
        .help = "prefix of the relay's own bookkeeping keys; must not contain { or }",
    },
    {
        .name = "redis-functions",
        .env = "OUTBOX_RELAY_REDIS_FUNCTIONS",
        .kind = OPT_BOOL,
        .group = GROUP_REDIS,
        FIELD(redis_functions),
        .defval = "true",
        .help = "load the relay's script as a Redis function (Redis 7+); "
                "--no-redis-functions loads it with SCRIPT LOAD and calls it with EVALSHA "
                "instead",
    },
    {
        .name = "redis-timeout",
        .env = "OUTBOX_RELAY_REDIS_TIMEOUT",
        .kind = OPT_DURATION,
        .group = GROUP_REDIS,
        FIELD(redis_timeout_ms),
        .defval = "5s",
        .min = 100,
        .max = 10 * MS_MINUTE,
        .metavar = "DURATION",
        .help = "timeout for connecting to Redis and for each reply",
    },
    {
        .name = "redis-tls-ca-file",
        .env = "OUTBOX_RELAY_REDIS_TLS_CA_FILE",
        .kind = OPT_STRING,
        .group = GROUP_REDIS,
        FIELD(redis_tls_ca_file),
        .metavar = "PATH",
        .help = "rediss:// only: PEM bundle of the CA(s) that signed the Redis server's "
                "certificate; by default the system's trust store",
    },
    {
        .name = "redis-tls-cert-file",
        .env = "OUTBOX_RELAY_REDIS_TLS_CERT_FILE",
        .kind = OPT_STRING,
        .group = GROUP_REDIS,
        FIELD(redis_tls_cert_file),
        .metavar = "PATH",
        .help = "rediss:// only: client certificate (PEM) for servers with tls-auth-clients "
                "yes; needs --redis-tls-key-file",
    },
    {
        .name = "redis-tls-key-file",
        .env = "OUTBOX_RELAY_REDIS_TLS_KEY_FILE",
        .kind = OPT_STRING,
        .group = GROUP_REDIS,
        FIELD(redis_tls_key_file),
        .metavar = "PATH",
        .help = "rediss:// only: private key (PEM, unencrypted) of --redis-tls-cert-file",
    },
    {
        .name = "redis-tls-server-name",
        .env = "OUTBOX_RELAY_REDIS_TLS_SERVER_NAME",
        .kind = OPT_STRING,
        .group = GROUP_REDIS,
        FIELD(redis_tls_server_name),
        .metavar = "NAME",
        .help = "rediss:// only: the name the server's certificate must carry (also sent "
                "as SNI); by default the host of --redis-url (or each cluster node's "
                "address)",
    },

    /* Flow control and lifecycle */
    {
        .name = "redis-cluster",
        .env = "OUTBOX_RELAY_REDIS_CLUSTER",
        .kind = OPT_BOOL,
        .group = GROUP_REDIS,
        FIELD(redis_cluster),
        .defval = "false",
        .help = "treat the --redis-url host as a seed of a Redis Cluster (the same as a "
                "redis-cluster://host:port[,host:port...] URL): one pipelined connection "
                "per master, MOVED and ASK followed",
    },
    {
        .name = "allow-eviction",
        .env = "OUTBOX_RELAY_ALLOW_EVICTION",
        .kind = OPT_BOOL,
        .group = GROUP_REDIS,
        FIELD(allow_eviction),
        .defval = "false",
        .help = "run even when Redis's maxmemory-policy is allkeys-* (it may evict stream "
                "entries, watermarks and dedup keys: events lost or published twice); by "
                "default the relay refuses with exit code 5",
    },
    {
        .name = "wait-replicas",
        .env = "OUTBOX_RELAY_WAIT_REPLICAS",
        .kind = OPT_INT,
        .group = GROUP_REDIS,
        FIELD(wait_replicas),
        .defval = "0",
        .min = 0,
        .max = 16,
        .metavar = "N",
        .help = "count events as acknowledged (and confirm their LSN) only after WAIT N says "
                "N replicas have them; fewer within --wait-timeout means no confirm and a "
                "resend; 0 turns it off",
    },
    {
        .name = "wait-timeout",
        .env = "OUTBOX_RELAY_WAIT_TIMEOUT",
        .kind = OPT_DURATION,
        .group = GROUP_REDIS,
        FIELD(wait_timeout_ms),
        .defval = "1s",
        .min = 10,
        .max = 60 * MS_SECOND,
        .metavar = "DURATION",
        .help = "how long WAIT / WAITAOF may block for the replicas or the fsync",
    },
    {
        .name = "wait-aof",
        .env = "OUTBOX_RELAY_WAIT_AOF",
        .kind = OPT_STRING,
        .group = GROUP_REDIS,
        FIELD(wait_aof),
        .defval = "none",
        .check = check_wait_aof,
        .metavar = "MODE",
        .help = "none; local: count events as acknowledged only once Redis fsynced them to "
                "its AOF (WAITAOF 1 0, Redis 7.2+ with appendonly yes); local,replicas: also "
                "on --wait-replicas replicas (WAITAOF 1 N)",
    },
    {
        .name = "since",
        .env = "OUTBOX_RELAY_SINCE",
        .kind = OPT_STRING,
        .group = GROUP_REPUBLISH,
        FIELD(since),
        .metavar = "TIME",
        .help = "republish the outbox rows whose --time-column is at or after this time "
                "(a PostgreSQL timestamptz, e.g. 2026-11-24T12:00:00Z: the commit time an "
                "exit 8 line printed, or earlier)",
    },
    {
        .name = "until",
        .env = "OUTBOX_RELAY_UNTIL",
        .kind = OPT_STRING,
        .group = GROUP_REPUBLISH,
        FIELD(until),
        .metavar = "TIME",
        .help = "and before this time; by default up to the newest row",
    },
    {
        .name = "time-column",
        .env = "OUTBOX_RELAY_TIME_COLUMN",
        .kind = OPT_STRING,
        .group = GROUP_REPUBLISH,
        FIELD(time_column),
        .defval = "created_at",
        .metavar = "COLUMN",
        .help = "the outbox table's column that --since and --until compare",
    },
    {
        .name = "fetch-size",
        .env = "OUTBOX_RELAY_FETCH_SIZE",
        .kind = OPT_INT,
        .group = GROUP_REPUBLISH,
        FIELD(fetch_size),
        .defval = "1000",
        .min = 1,
        .max = 100000,
        .metavar = "N",
        .help = "rows read from the server-side cursor at a time",
    },
    {
        .name = "max-inflight-events",
        .env = "OUTBOX_RELAY_MAX_INFLIGHT_EVENTS",
        .kind = OPT_INT,
        .group = GROUP_FLOW,
        FIELD(max_inflight_events),
        .defval = "10000",
        .min = 1,
        .max = 10000000,
        .metavar = "N",
        .help = "stop reading WAL while this many events wait for Redis",
    },
    {
        .name = "max-inflight-bytes",
        .env = "OUTBOX_RELAY_MAX_INFLIGHT_BYTES",
        .kind = OPT_SIZE,
        .group = GROUP_FLOW,
        FIELD(max_inflight_bytes),
        .defval = "8MiB",
        .min = 64 * KIB,
        .max = 16 * GIB,
        .metavar = "SIZE",
        .help = "stop reading WAL while this many bytes of events wait for Redis",
    },
    {
        .name = "shutdown-timeout",
        .env = "OUTBOX_RELAY_SHUTDOWN_TIMEOUT",
        .kind = OPT_DURATION,
        .group = GROUP_FLOW,
        FIELD(shutdown_timeout_ms),
        .defval = "10s",
        .min = 0,
        .max = 10 * MS_MINUTE,
        .metavar = "DURATION",
        .help = "on SIGTERM or SIGINT, how long to wait for in-flight events to reach "
                "Redis before exiting",
    },
    {
        .name = "retry-max",
        .env = "OUTBOX_RELAY_RETRY_MAX",
        .kind = OPT_DURATION,
        .group = GROUP_FLOW,
        FIELD(retry_max_ms),
        .defval = "30s",
        .min = 100,
        .max = 10 * MS_MINUTE,
        .metavar = "DURATION",
        .help = "longest wait between reconnect attempts (cap of the exponential backoff)",
    },

    /* Logging */
    {
        .name = "log-level",
        .env = "OUTBOX_RELAY_LOG_LEVEL",
        .kind = OPT_LOG_LEVEL,
        .group = GROUP_LOG,
        FIELD(log_level),
        .defval = "info",
        .metavar = "LEVEL",
        .help = "error, warn, info or debug",
    },
    {
        .name = "max-event-bytes",
        .env = "OUTBOX_RELAY_MAX_EVENT_BYTES",
        .kind = OPT_SIZE,
        .group = GROUP_FLOW,
        FIELD(max_event_bytes),
        .defval = "64MiB",
        .min = 1 * KIB,
        .max = 512 * MIB,
        .metavar = "SIZE",
        .help = "largest event (its row as wal2json prints it, and the sum of its field "
                "names and values) published as it is; larger ones go to the dead-letter "
                "stream with the reason, undecoded",
    },

    /* Operations */
    {
        .name = "http-addr",
        .env = "OUTBOX_RELAY_HTTP_ADDR",
        .kind = OPT_STRING,
        .group = GROUP_OPS,
        FIELD(http_addr),
        .defval = ":9187",
        .metavar = "ADDR",
        .help = "serve /metrics (Prometheus), /healthz and /readyz on host:port, :port or "
                "[ipv6]:port; an empty value turns the endpoint off",
    },
    {
        .name = "pg-password-file",
        .env = "OUTBOX_RELAY_PG_PASSWORD_FILE",
        .kind = OPT_STRING,
        .group = GROUP_OPS,
        FIELD(pg_password_file),
        .metavar = "PATH",
        .help = "read the PostgreSQL password from the first line of this file (e.g. a "
                "mounted Secret); it overrides a password in --pg-dsn",
    },
    {
        .name = "redis-password-file",
        .env = "OUTBOX_RELAY_REDIS_PASSWORD_FILE",
        .kind = OPT_STRING,
        .group = GROUP_OPS,
        FIELD(redis_password_file),
        .metavar = "PATH",
        .help = "read the Redis password from the first line of this file; it overrides "
                "a password in --redis-url",
    },
    {
        .name = "redis-sentinel-user",
        .env = "OUTBOX_RELAY_REDIS_SENTINEL_USER",
        .kind = OPT_STRING,
        .group = GROUP_OPS,
        FIELD(redis_sentinel_user),
        .metavar = "NAME",
        .help = "redis-sentinel:// only: the Sentinels' ACL user (AUTH NAME PASSWORD); "
                "needs a Sentinel password; by default AUTH PASSWORD (the default user)",
    },
    {
        .name = "redis-sentinel-password",
        .env = "OUTBOX_RELAY_REDIS_SENTINEL_PASSWORD",
        .kind = OPT_STRING,
        .group = GROUP_OPS,
        .flags = OPT_F_SECRET | OPT_F_PASSWORD,
        FIELD(redis_sentinel_password),
        .metavar = "PASSWORD",
        .help = "redis-sentinel:// only: the Sentinels' password (AUTH to each Sentinel; "
                "the password in --redis-url is the master's); prefer "
                "--redis-sentinel-password-file or the environment to keep it out of ps",
    },
    {
        .name = "redis-sentinel-password-file",
        .env = "OUTBOX_RELAY_REDIS_SENTINEL_PASSWORD_FILE",
        .kind = OPT_STRING,
        .group = GROUP_OPS,
        FIELD(redis_sentinel_password_file),
        .metavar = "PATH",
        .help = "redis-sentinel:// only: read the Sentinels' password from the first line "
                "of this file; it overrides --redis-sentinel-password",
    },
    {
        .name = "check-config",
        .env = "OUTBOX_RELAY_CHECK_CONFIG",
        .kind = OPT_BOOL,
        .group = GROUP_OPS,
        FIELD(check_config),
        .defval = "false",
        .help = "validate the options and print them (without secrets), then check the "
                "prerequisites and list every problem found, one line each naming the fix: "
                "PostgreSQL reachable and authenticated, REPLICATION, wal_level, free slots "
                "and WAL senders, wal2json installed and allowed (by creating and dropping a "
                "TEMPORARY slot), the outbox table and its columns, the slot; Redis reachable, "
                "AUTH, the commands the relay uses, a master, maxmemory-policy. Exit 0 when "
                "all is fine, 9 when a problem was found",
    },
    {
        .name = "check-config-offline",
        .env = "OUTBOX_RELAY_CHECK_CONFIG_OFFLINE",
        .kind = OPT_BOOL,
        .group = GROUP_OPS,
        FIELD(check_config_offline),
        .defval = "false",
        .help = "validate the options, print them (without secrets) and exit 0 without "
                "connecting anywhere (--check-config without the prerequisite checks)",
    },
    {
        .name = "log-format",
        .env = "OUTBOX_RELAY_LOG_FORMAT",
        .kind = OPT_LOG_FORMAT,
        .group = GROUP_LOG,
        FIELD(log_format),
        .defval = "text",
        .metavar = "FORMAT",
        .help = "text, or json for one JSON object per line",
    },
};

#undef FIELD

#define NOPTS (sizeof(option_table) / sizeof(option_table[0]))

/* Raw strings collected in the first pass; all borrowed from argv/envp. */
struct raw_value {
	const char *arg;   /* last command-line value, NULL when not given */
	char *secret;      /* OPT_F_SECRET: arg as a writable part of argv, scrubbed after loading */
	const char *env;   /* environment value, NULL when not set */
	const char **list; /* OPT_LIST: every command-line value, in order */
	size_t nlist;
};

/* Where a value came from, for error messages. */
struct source {
	bool env;
	char label[64]; /* "--slot" or "OUTBOX_RELAY_SLOT" */
};

static struct source source_of(const struct option_def *o, bool env)
{
	struct source src;

	src.env = env;
	if (env)
		(void)snprintf(src.label, sizeof(src.label), "%s", o->env);
	else
		(void)snprintf(src.label, sizeof(src.label), "--%s", o->name);
	return src;
}

/*
 * `invalid value "V" for --x: why` (or `in OUTBOX_RELAY_X`); for secret
 * options `invalid --x: why`, without the value.
 */
static void bad_value(char *err, size_t errlen, const struct option_def *o,
                      const struct source *src, const char *value, const char *why)
{
	char q[QUOTE_MAX + 8];

	if (o->flags & OPT_F_SECRET)
		msg_set(err, errlen, "invalid %s: %s", src->label, why);
	else
		msg_set(err, errlen, "invalid value \"%s\" %s %s: %s",
		        msg_quote(value, strlen(value), q, sizeof(q)), src->env ? "in" : "for", src->label,
		        why);
}

/* Write a duration in ms with the largest unit that divides it ("90s", "1h"). */
static void format_duration(int64_t ms, char *buf, size_t len)
{
	static const struct {
		const char *unit;
		int64_t ms;
	} units[] = {{"d", MS_DAY}, {"h", MS_HOUR}, {"m", MS_MINUTE}, {"s", MS_SECOND}};

	if (ms == 0) {
		(void)snprintf(buf, len, "0");
		return;
	}
	for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
		if (ms % units[i].ms == 0) {
			(void)snprintf(buf, len, "%lld%s", (long long)(ms / units[i].ms), units[i].unit);
			return;
		}
	}
	(void)snprintf(buf, len, "%lldms", (long long)ms);
}

/* Write a byte count with the largest binary unit that divides it ("64MiB"). */
static void format_size(int64_t bytes, char *buf, size_t len)
{
	if (bytes != 0 && bytes % GIB == 0)
		(void)snprintf(buf, len, "%lldGiB", (long long)(bytes / GIB));
	else if (bytes != 0 && bytes % MIB == 0)
		(void)snprintf(buf, len, "%lldMiB", (long long)(bytes / MIB));
	else if (bytes != 0 && bytes % KIB == 0)
		(void)snprintf(buf, len, "%lldKiB", (long long)(bytes / KIB));
	else
		(void)snprintf(buf, len, "%lld", (long long)bytes);
}

static void format_bound(const struct option_def *o, int64_t v, char *buf, size_t len)
{
	if (o->kind == OPT_DURATION)
		format_duration(v, buf, len);
	else if (o->kind == OPT_SIZE)
		format_size(v, buf, len);
	else
		(void)snprintf(buf, len, "%lld", (long long)v);
}

static void out_of_range(char *err, size_t errlen, const struct option_def *o,
                         const struct source *src, const char *value)
{
	char lo[32], hi[32], why[96];

	format_bound(o, o->min, lo, sizeof(lo));
	format_bound(o, o->max, hi, sizeof(hi));
	(void)snprintf(why, sizeof(why), "must be between %s and %s", lo, hi);
	bad_value(err, errlen, o, src, value, why);
}

enum num_result { NUM_OK, NUM_JUNK, NUM_RANGE };

/* A suffix such as "ms" or "MiB" and what it multiplies by. */
struct unit {
	const char *suffix;
	int64_t mult;
};

/*
 * Parse s as digits followed by a unit from units[] (matched exactly, or
 * case-insensitively when nocase). A bare number uses bare_mult. Signs,
 * spaces and fractions are junk; results above INT64_MAX are NUM_RANGE.
 * *ret is written only on NUM_OK.
 */
static enum num_result parse_scaled(const char *s, const struct unit *units, size_t nunits,
                                    bool nocase, int64_t bare_mult, int64_t *ret)
{
	int64_t v = 0, mult = 0;
	bool overflow = false;
	const char *p = s;

	if (!s || !isdigit((unsigned char)*p))
		return NUM_JUNK;
	for (; isdigit((unsigned char)*p); p++) {
		int d = *p - '0';

		if (v > (INT64_MAX - d) / 10)
			overflow = true;
		else
			v = v * 10 + d;
	}
	if (*p == '\0') {
		mult = bare_mult;
	} else {
		for (size_t i = 0; i < nunits; i++) {
			if (nocase ? strcasecmp(p, units[i].suffix) == 0 : strcmp(p, units[i].suffix) == 0) {
				mult = units[i].mult;
				break;
			}
		}
		if (mult == 0)
			return NUM_JUNK;
	}
	if (overflow || v > INT64_MAX / mult)
		return NUM_RANGE;
	*ret = v * mult;
	return NUM_OK;
}

static const struct unit duration_units[] = {
    {"ms", 1}, {"s", MS_SECOND}, {"m", MS_MINUTE}, {"h", MS_HOUR}, {"d", MS_DAY},
};

static const struct unit size_units[] = {
    {"k", KIB},   {"kb", KIB}, {"kib", KIB}, {"m", MIB},   {"mb", MIB},
    {"mib", MIB}, {"g", GIB},  {"gb", GIB},  {"gib", GIB},
};

static enum num_result parse_duration(const char *s, int64_t *ret_ms)
{
	return parse_scaled(s, duration_units, sizeof(duration_units) / sizeof(duration_units[0]),
	                    false, MS_SECOND, ret_ms);
}

static enum num_result parse_size(const char *s, int64_t *ret_bytes)
{
	return parse_scaled(s, size_units, sizeof(size_units) / sizeof(size_units[0]), true, 1,
	                    ret_bytes);
}

/* See config.h. */
bool config_parse_duration_ms(const char *s, int64_t *ret_ms)
{
	return parse_duration(s, ret_ms) == NUM_OK;
}

/* Parse an optionally signed decimal integer; the whole string must be used. */
static enum num_result parse_int(const char *s, int64_t *ret)
{
	bool neg = false;
	int64_t v = 0;
	const char *p = s;

	if (*p == '-' || *p == '+')
		neg = *p++ == '-';
	if (!isdigit((unsigned char)*p))
		return NUM_JUNK;
	for (; isdigit((unsigned char)*p); p++) {
		int d = *p - '0';

		/* Accumulate negatively so INT64_MIN still fits. */
		if (v < (INT64_MIN + d) / 10)
			return strspn(p, "0123456789") == strlen(p) ? NUM_RANGE : NUM_JUNK;
		v = v * 10 - d;
	}
	if (*p != '\0')
		return NUM_JUNK;
	if (!neg && v == INT64_MIN)
		return NUM_RANGE;
	*ret = neg ? v : -v;
	return NUM_OK;
}

bool config_parse_bool(const char *s, bool *ret)
{
	static const char *const yes[] = {"true", "1", "yes", "on"};
	static const char *const no[] = {"false", "0", "no", "off"};

	for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++) {
		if (strcasecmp(s, yes[i]) == 0) {
			*ret = true;
			return true;
		}
		if (strcasecmp(s, no[i]) == 0) {
			*ret = false;
			return true;
		}
	}
	return false;
}

static void *field_ptr(struct relay_config *cf, size_t offset)
{
	return (char *)cf + offset;
}

/* Store v into the int or int64_t field of o. */
static bool store_int(struct relay_config *cf, const struct option_def *o, int64_t v)
{
	void *p = field_ptr(cf, o->offset);

	if (o->size == sizeof(int64_t)) {
		memcpy(p, &v, sizeof(v));
		return true;
	}
	if (o->size == sizeof(int) && v >= INT_MIN && v <= INT_MAX) {
		int iv = (int)v;

		memcpy(p, &iv, sizeof(iv));
		return true;
	}
	return false;
}

/* ---- String checks ---- */

static bool allowed_in_libpq_message(const char *s, size_t len, const PQconninfoOption *kw)
{
	if (len == 0)
		return true;
	if (len == 1 && !isalnum((unsigned char)s[0]))
		return true;
	for (; kw && kw->keyword; kw++) {
		if (strlen(kw->keyword) == len && memcmp(kw->keyword, s, len) == 0)
			return true;
	}
	return false;
}

/*
 * Copy the first line of a PQconninfoParse() error into out, replacing
 * quoted text with "..." unless it is a conninfo keyword or a single
 * punctuation character: libpq quotes pieces of the input, for URIs the
 * whole URI, password included. From an unrecognised quote to the line's
 * last quote everything goes, so quotes inside the secret cannot re-open
 * the output. Translated (non-ASCII) messages are replaced wholesale.
 */
static void redact_libpq_message(const char *msg, char *out, size_t outlen)
{
	PQconninfoOption *kw = PQconndefaults();
	const char *end = strchr(msg, '\n');
	const char *p, *lastq = NULL;
	size_t n = 0;

	if (!end)
		end = msg + strlen(msg);
	for (p = msg; p < end; p++) {
		if ((unsigned char)*p >= 0x80) {
			(void)snprintf(out, outlen,
			               "could not parse it (check the key=value syntax and quoting)");
			PQconninfoFree(kw);
			return;
		}
		if (*p == '"')
			lastq = p;
	}
	for (p = msg; p < end && n + 6 < outlen; p++) {
		const char *close;

		if (*p != '"') {
			out[n++] = (unsigned char)*p < 0x20 ? '?' : *p;
			continue;
		}
		close = memchr(p + 1, '"', (size_t)(end - p - 1));
		if (close && allowed_in_libpq_message(p + 1, (size_t)(close - p - 1), kw)) {
			size_t len = (size_t)(close - p + 1);

			if (n + len + 1 > outlen)
				break;
			memcpy(out + n, p, len);
			n += len;
			p = close;
			continue;
		}
		memcpy(out + n, "\"...\"", 5);
		n += 5;
		if (!close)
			break;
		p = lastq;
	}
	out[n] = '\0';
	PQconninfoFree(kw);
}

/* --pg-dsn: must parse as a libpq conninfo string or URI. */
static bool check_conninfo(const char *value, char *why, size_t whylen)
{
	char *pqerr = NULL;
	PQconninfoOption *opts = PQconninfoParse(value, &pqerr);

	if (opts) {
		PQconninfoFree(opts);
		return true;
	}
	if (!pqerr) {
		(void)snprintf(why, whylen, "out of memory");
		return false;
	}
	redact_libpq_message(pqerr, why, whylen);
	PQfreemem(pqerr);
	return false;
}

/* --slot: PostgreSQL's slot name rule, [a-z0-9_]{1,63}. */
static bool check_slot(const char *value, char *why, size_t whylen)
{
	size_t len = strlen(value);

	if (len >= 1 && len <= 63 && strspn(value, "abcdefghijklmnopqrstuvwxyz0123456789_") == len)
		return true;
	(void)snprintf(why, whylen, "use 1-63 lower-case letters, digits or underscores");
	return false;
}

/* --table: "schema.table" or "table", both parts non-empty. */
static bool check_table(const char *value, char *why, size_t whylen)
{
	const char *dot = strchr(value, '.');

	if (*value && (!dot || (dot != value && dot[1] && !strchr(dot + 1, '.'))))
		return true;
	(void)snprintf(why, whylen, "use schema.table or a bare table name, e.g. public.outbox");
	return false;
}

/* --key-prefix: non-empty; braces would clash with the relay's hash tags. */
static bool check_key_prefix(const char *value, char *why, size_t whylen)
{
	if (!*value) {
		(void)snprintf(why, whylen, "must not be empty");
		return false;
	}
	if (strpbrk(value, "{}")) {
		(void)snprintf(why, whylen, "must not contain { or } (the relay adds its own hash tags)");
		return false;
	}
	return true;
}

/*
 * --dead-letter-stream: the rule rendered stream names follow
 * (stream_name_check): otherwise the first dead letter would fail to be
 * queued, or corrupt /metrics, long after startup.
 */
static bool check_stream_name(const char *value, char *why, size_t whylen)
{
	const char *problem = stream_name_check(value, strlen(value));

	if (!problem)
		return true;
	(void)snprintf(why, whylen, "the stream name %s", problem);
	return false;
}

/* ---- Conversion of one winning value ---- */

static bool apply_string(struct relay_config *cf, const struct option_def *o, const char *v,
                         const struct source *src, char *err, size_t errlen)
{
	char why[256];
	char **field = field_ptr(cf, o->offset);
	char *copy;

	if ((o->flags & OPT_F_NONEMPTY) && !*v) {
		bad_value(err, errlen, o, src, v, "must not be empty");
		return false;
	}
	if (o->check && !o->check(v, why, sizeof(why))) {
		bad_value(err, errlen, o, src, v, why);
		return false;
	}
	if ((o->flags & OPT_F_QUALIFY) && !strchr(v, '.')) {
		size_t len = strlen("public.") + strlen(v) + 1;

		copy = malloc(len);
		if (copy)
			(void)snprintf(copy, len, "public.%s", v);
	} else {
		copy = strdup(v);
	}
	if (!copy)
		return msg_oom(err, errlen);
	*field = copy;
	return true;
}

static bool apply_redis_url(struct relay_config *cf, const struct option_def *o, const char *v,
                            const struct source *src, char *err, size_t errlen)
{
	char why[256];
	char **field = field_ptr(cf, o->offset);
	struct redis_target *target = field_ptr(cf, o->aux_offset);

	if (!redis_url_parse(v, target, why, sizeof(why))) {
		bad_value(err, errlen, o, src, v, why);
		return false;
	}
	*field = strdup(v);
	if (!*field)
		return msg_oom(err, errlen);
	return true;
}

static bool apply_number(struct relay_config *cf, const struct option_def *o, const char *v,
                         const struct source *src, char *err, size_t errlen)
{
	enum num_result r;
	int64_t n = 0, ignored;

	switch (o->kind) {
	case OPT_DURATION:
		r = parse_duration(v, &n);
		/* "-5s" is a well-formed duration out of range, not junk. */
		if (r == NUM_JUNK && v[0] == '-' && parse_duration(v + 1, &ignored) != NUM_JUNK)
			r = NUM_RANGE;
		if (r == NUM_JUNK) {
			bad_value(err, errlen, o, src, v,
			          "expected a duration such as 3600, 90s or 1h (a bare number "
			          "means seconds; units ms, s, m, h, d)");
			return false;
		}
		break;
	case OPT_SIZE:
		r = parse_size(v, &n);
		if (r == NUM_JUNK && v[0] == '-' && parse_size(v + 1, &ignored) != NUM_JUNK)
			r = NUM_RANGE;
		if (r == NUM_JUNK) {
			bad_value(err, errlen, o, src, v,
			          "expected a size such as 1048576, 512KiB, 64MiB or 1GiB");
			return false;
		}
		break;
	default:
		r = parse_int(v, &n);
		if (r == NUM_JUNK) {
			bad_value(err, errlen, o, src, v, "expected a whole number");
			return false;
		}
		break;
	}
	if (r == NUM_RANGE || n < o->min || n > o->max) {
		out_of_range(err, errlen, o, src, v);
		return false;
	}
	if (o->flags & OPT_F_SECONDS) {
		if (n % MS_SECOND != 0) {
			bad_value(err, errlen, o, src, v,
			          "must be a whole number of seconds, such as 90s or 3600");
			return false;
		}
		n /= MS_SECOND;
	}
	if (!store_int(cf, o, n)) {
		msg_set(err, errlen, "internal error: --%s does not fit its field", o->name);
		return false;
	}
	return true;
}

/* Append a copy of item[0..len) to the list field of o, rejecting repeats. */
static bool list_append(struct relay_config *cf, const struct option_def *o, const char *item,
                        size_t len, const char *whole, const struct source *src, char *err,
                        size_t errlen)
{
	char ***items = field_ptr(cf, o->offset);
	size_t *count = field_ptr(cf, o->aux_offset);

	if (len == 0) {
		bad_value(err, errlen, o, src, whole,
		          src->env ? "names in the list must not be empty" : "must not be empty");
		return false;
	}
	for (size_t i = 0; i < *count; i++) {
		if (strlen((*items)[i]) == len && memcmp((*items)[i], item, len) == 0) {
			char why[QUOTE_MAX + 48], q[QUOTE_MAX + 8];

			(void)snprintf(why, sizeof(why), "\"%s\" is listed twice",
			               msg_quote((*items)[i], strlen((*items)[i]), q, sizeof(q)));
			bad_value(err, errlen, o, src, whole, why);
			return false;
		}
	}
	return config_strv_push(items, count, item, len) || msg_oom(err, errlen);
}

/* See config.h. */
bool config_strv_push(char ***items, size_t *count, const char *item, size_t len)
{
	char **grown;
	char *copy = strndup(item, len);

	if (!copy)
		return false;
	grown = realloc(*items, (*count + 1) * sizeof(**items));
	if (!grown) {
		free(copy);
		return false;
	}
	grown[*count] = copy;
	*items = grown;
	(*count)++;
	return true;
}

/* See config.h. */
bool config_list_next(const char **cursor, const char **item, size_t *len)
{
	const char *p = *cursor, *comma, *end;

	if (!p)
		return false;
	comma = strchr(p, ',');
	end = comma ? comma : p + strlen(p);
	while (p < end && (*p == ' ' || *p == '\t'))
		p++;
	while (end > p && (end[-1] == ' ' || end[-1] == '\t'))
		end--;
	*item = p;
	*len = (size_t)(end - p);
	*cursor = comma ? comma + 1 : NULL;
	return true;
}

/*
 * OPT_LIST: every command-line occurrence, else the environment's
 * comma-separated list (blanks around names are ignored; "" means none),
 * else the default (same syntax as the environment).
 */
static bool apply_list(struct relay_config *cf, const struct option_def *o,
                       const struct raw_value *raw, char *err, size_t errlen)
{
	struct source src;
	const char *list;
	size_t len;

	if (raw->nlist > 0) {
		src = source_of(o, false);
		for (size_t i = 0; i < raw->nlist; i++) {
			if (!list_append(cf, o, raw->list[i], strlen(raw->list[i]), raw->list[i], &src, err,
			                 errlen))
				return false;
		}
		return true;
	}
	src = source_of(o, raw->env != NULL);
	list = raw->env ? raw->env : o->defval;
	if (!list || list[strspn(list, " \t")] == '\0')
		return true;
	for (const char *cursor = list, *item; config_list_next(&cursor, &item, &len);)
		if (!list_append(cf, o, item, len, list, &src, err, errlen))
			return false;
	return true;
}

/* Convert the winning value of o (flag > environment > default) into cf. */
static bool apply_option(struct relay_config *cf, const struct option_def *o,
                         const struct raw_value *raw, char *err, size_t errlen)
{
	struct source src;
	const char *v;

	if (o->kind == OPT_LIST)
		return apply_list(cf, o, raw, err, errlen);

	v = raw->arg ? raw->arg : raw->env ? raw->env : o->defval;
	src = source_of(o, !raw->arg && raw->env);
	if (o->flags & OPT_F_REQUIRED) {
		if (!v || !*v) {
			msg_set(err, errlen, "missing --%s (or %s): %s", o->name, o->env, o->missing);
			return false;
		}
	}
	if (!v)
		return true; /* no default: the zeroed field means "unset" */

	switch (o->kind) {
	case OPT_STRING:
		return apply_string(cf, o, v, &src, err, errlen);
	case OPT_REDIS_URL:
		return apply_redis_url(cf, o, v, &src, err, errlen);
	case OPT_DURATION:
	case OPT_INT:
	case OPT_SIZE:
		return apply_number(cf, o, v, &src, err, errlen);
	case OPT_BOOL: {
		bool b;

		if (!config_parse_bool(v, &b)) {
			bad_value(err, errlen, o, &src, v, "expected true or false (or 1/0, yes/no, on/off)");
			return false;
		}
		memcpy(field_ptr(cf, o->offset), &b, sizeof(b));
		return true;
	}
	case OPT_LSN: {
		lsn_t lsn;

		if (!lsn_parse(v, strlen(v), &lsn)) {
			bad_value(err, errlen, o, &src, v,
			          "expected an LSN such as 0/16B3748, as pg_current_wal_lsn() prints it");
			return false;
		}
		memcpy(field_ptr(cf, o->offset), &lsn, sizeof(lsn));
		return true;
	}
	case OPT_LOG_LEVEL: {
		enum log_level level;

		if (!log_level_parse(v, &level)) {
			bad_value(err, errlen, o, &src, v, "expected error, warn, info or debug");
			return false;
		}
		memcpy(field_ptr(cf, o->offset), &level, sizeof(level));
		return true;
	}
	case OPT_LOG_FORMAT: {
		enum log_format format;

		if (!log_format_parse(v, &format)) {
			bad_value(err, errlen, o, &src, v, "expected text or json");
			return false;
		}
		memcpy(field_ptr(cf, o->offset), &format, sizeof(format));
		return true;
	}
	case OPT_LIST:
		break;
	}
	msg_set(err, errlen, "internal error: --%s has an unknown kind", o->name);
	return false;
}

/* ---- First pass: collect raw strings ---- */

static const struct option_def *find_option(const char *name, size_t len)
{
	for (size_t i = 0; i < NOPTS; i++) {
		if (strlen(option_table[i].name) == len && memcmp(option_table[i].name, name, len) == 0)
			return &option_table[i];
	}
	return NULL;
}

static bool is_bool_word(const char *s)
{
	bool ignored;

	return config_parse_bool(s, &ignored);
}

/*
 * `unexpected argument "X"`. prev is the option of the argument before
 * (flag or its value), bare_bool whether that was a bool flag without a
 * value. X is not quoted when it may be the tail of an unquoted connection
 * string or URL ("--pg-dsn host=db password=x").
 */
static void positional_error(const char *a, int i, const struct option_def *prev, bool bare_bool,
                             char *err, size_t errlen)
{
	char q[QUOTE_MAX + 8];

	if (bare_bool && is_bool_word(a)) {
		msg_set(err, errlen,
		        "unexpected argument \"%s\" after --%s: write --%s=%s, or --no-%s for false",
		        msg_quote(a, strlen(a), q, sizeof(q)), prev->name, prev->name, a, prev->name);
	} else if ((prev && (prev->flags & OPT_F_SECRET)) || strpbrk(a, "=@:")) {
		msg_set(err, errlen,
		        "unexpected argument #%d (not shown: it may hold a secret); outbox-relay "
		        "takes no positional arguments, so quote values that contain spaces",
		        i);
	} else {
		msg_set(err, errlen,
		        "unexpected argument \"%s\"; outbox-relay takes no positional arguments, "
		        "run outbox-relay --help for the options",
		        msg_quote(a, strlen(a), q, sizeof(q)));
	}
}

/* Take a secret value out of argv: all of it for a password, else its password parts. */
static void scrub_raw(const struct option_def *o, char *value)
{
	if (value && (o->flags & OPT_F_PASSWORD)) {
		size_t n = strlen(value);

		memset(value, '*', n < 3 ? n : 3);
		if (n > 3)
			memset(value + 3, 0, n - 3);
	} else {
		config_scrub_secret(value);
	}
}

/*
 * Record value for o from the command line; writable is the same string in
 * argv. A secret option given again scrubs the value it replaces at once:
 * nothing reads it any more.
 */
static bool record_arg(struct raw_value *raw, const struct option_def *o, const char *value,
                       char *writable, int argc, char *err, size_t errlen)
{
	struct raw_value *r = &raw[o - option_table];

	if (o->flags & OPT_F_SECRET) {
		scrub_raw(o, r->secret);
		r->secret = writable;
	}
	if (o->kind != OPT_LIST) {
		r->arg = value;
		return true;
	}
	if (!r->list) {
		/* Never more occurrences than arguments. */
		r->list = calloc((size_t)argc, sizeof(*r->list));
		if (!r->list)
			return msg_oom(err, errlen);
	}
	r->list[r->nlist++] = value;
	return true;
}

static enum config_result scan_argv(struct raw_value *raw, int argc, char **argv, char *err,
                                    size_t errlen)
{
	char q[QUOTE_MAX + 8];
	/* The option of the previous argument, for positional_error(). */
	const struct option_def *prev = NULL;
	bool prev_bare_bool = false;

	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *name, *eq, *value;
		const struct option_def *o;
		bool negated = false;
		size_t len;

		if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
			config_usage(stdout);
			return CONFIG_HELP;
		}
		if (strcmp(a, "--version") == 0 || strcmp(a, "-V") == 0) {
			config_print_version(stdout);
			return CONFIG_VERSION;
		}
		if (strcmp(a, "--") == 0) {
			if (i + 1 < argc) {
				positional_error(argv[i + 1], i + 1, NULL, false, err, errlen);
				return CONFIG_ERROR;
			}
			break;
		}
		if (a[0] != '-' || a[1] == '\0') {
			positional_error(a, i, prev, prev_bare_bool, err, errlen);
			return CONFIG_ERROR;
		}

		/* The name only: "--pg-dsnn=host=... password=..." must not leak. */
		name = a[1] == '-' ? a + 2 : a + 1;
		eq = strchr(name, '=');
		len = eq ? (size_t)(eq - name) : strlen(name);
		o = a[1] == '-' ? find_option(name, len) : NULL;
		if (!o && a[1] == '-' && len > 3 && strncmp(name, "no-", 3) == 0) {
			o = find_option(name + 3, len - 3);
			if (o && o->kind == OPT_BOOL)
				negated = true;
			else
				o = NULL;
		}
		if (!o) {
			char shown[QUOTE_MAX + 8];

			(void)snprintf(shown, sizeof(shown), "%.*s", (int)(name - a + len), a);
			if (eq && (strcmp(shown, "--help") == 0 || strcmp(shown, "--version") == 0))
				msg_set(err, errlen, "option %s does not take a value", shown);
			else
				msg_set(err, errlen, "unknown option \"%s\"; run outbox-relay --help for the list",
				        msg_quote(shown, strlen(shown), q, sizeof(q)));
			return CONFIG_ERROR;
		}

		if (negated) {
			if (eq) {
				msg_set(err, errlen, "option --no-%s does not take a value; use --%s=VALUE instead",
				        o->name, o->name);
				return CONFIG_ERROR;
			}
			value = "false";
		} else if (eq) {
			value = eq + 1;
		} else if (o->kind == OPT_BOOL) {
			value = "true";
		} else if (i + 1 < argc && strncmp(argv[i + 1], "--", 2) != 0) {
			value = argv[++i];
		} else {
			msg_set(err, errlen, "option --%s needs a value", o->name);
			return CONFIG_ERROR;
		}
		/* value is argv[i] or its part after '=' (secret options are never bools). */
		if (!record_arg(raw, o, value,
		                (o->flags & OPT_F_SECRET) ? argv[i] + (value - argv[i]) : NULL, argc, err,
		                errlen))
			return CONFIG_ERROR;
		prev = o;
		prev_bare_bool = o->kind == OPT_BOOL && !eq && !negated;
	}
	return CONFIG_OK;
}

/*
 * Collect OUTBOX_RELAY_* entries of envp. Unknown OUTBOX_RELAY_* names are
 * ignored: Kubernetes injects OUTBOX_RELAY_SERVICE_HOST, OUTBOX_RELAY_PORT
 * and friends for a Service named outbox-relay, and those must not stop the
 * relay. When a name repeats, the first entry wins, as with getenv().
 */
static bool scan_env(struct raw_value *raw, char **envp, char *err, size_t errlen)
{
	for (char **e = envp; e && *e; e++) {
		const char *eq;
		size_t len;

		if (strncmp(*e, ENV_PREFIX, strlen(ENV_PREFIX)) != 0)
			continue;
		eq = strchr(*e, '=');
		if (!eq)
			continue;
		len = (size_t)(eq - *e);
		for (size_t i = 0; i < NOPTS; i++) {
			if (strlen(option_table[i].env) == len && memcmp(option_table[i].env, *e, len) == 0) {
				if (!raw[i].env)
					raw[i].env = eq + 1;
				break;
			}
		}
	}
	(void)err;
	(void)errlen;
	return true;
}

static bool check_wait_aof(const char *value, char *why, size_t whylen)
{
	if (strcmp(value, "none") == 0 || strcmp(value, "local") == 0 ||
	    strcmp(value, "local,replicas") == 0)
		return true;
	msg_set(why, whylen, "expected none, local or local,replicas");
	return false;
}

static bool check_trim(const char *value, char *why, size_t whylen)
{
	if (strcmp(value, "none") == 0 || strcmp(value, "acked") == 0)
		return true;
	msg_set(why, whylen, "expected none or acked");
	return false;
}

static bool check_id_format(const char *value, char *why, size_t whylen)
{
	if (strcmp(value, "any") == 0 || strcmp(value, "uuid") == 0)
		return true;
	msg_set(why, whylen, "expected any or uuid");
	return false;
}

/*
 * True when path is a file of a Kubernetes Secret (or ConfigMap) volume: the
 * kubelet publishes every key as a symlink "KEY -> ..data/KEY". Such files
 * are 0644 unless the pod sets defaultMode, inside a filesystem only the
 * pod's containers see; warning about them on every start would be noise.
 */
static bool is_kubernetes_volume_file(const char *path)
{
	char target[PATH_MAX];
	ssize_t n = readlink(path, target, sizeof(target) - 1);

	if (n <= 0)
		return false;
	target[n] = '\0';
	return strncmp(target, "..data/", 7) == 0;
}

/*
 * Read the first line of path into *ret (malloc'd, without the CR/LF): the
 * whole file is read, up to CONFIG_SECRET_FILE_MAX bytes, so a long secret is
 * never cut. The error names the option and the file but never the content.
 * warn gets one line when the file is open to its group or to others.
 */
bool config_read_secret(const char *opt, const char *path, char **ret, char *warn, size_t warnlen,
                        char *err, size_t errlen)
{
	struct stat st;
	char *data;
	size_t len = 0, n;
	int fd, saved;

	*ret = NULL;
	if (warn && warnlen > 0)
		warn[0] = '\0';
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		msg_set(err, errlen, "could not read --%s \"%s\": %s", opt, path, strerror(errno));
		return false;
	}
	data = malloc(CONFIG_SECRET_FILE_MAX + 2);
	if (!data) {
		close(fd);
		return msg_oom(err, errlen);
	}
	while (len <= CONFIG_SECRET_FILE_MAX) {
		ssize_t r = read(fd, data + len, CONFIG_SECRET_FILE_MAX + 1 - len);

		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			saved = errno;
			msg_set(err, errlen, "could not read --%s \"%s\": %s", opt, path, strerror(saved));
			goto fail;
		}
		if (r == 0)
			break;
		len += (size_t)r;
	}
	if (len > CONFIG_SECRET_FILE_MAX) {
		msg_set(err, errlen, "--%s \"%s\" is larger than %d KiB: put only the password in it", opt,
		        path, CONFIG_SECRET_FILE_MAX / 1024);
		goto fail;
	}
	if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && (st.st_mode & 077) &&
	    !is_kubernetes_volume_file(path))
		msg_set(warn, warnlen,
		        "--%s \"%s\" is open to %s (mode %04o): make it private with chmod 600 \"%s\"", opt,
		        path, (st.st_mode & 007) ? "all users" : "its group",
		        (unsigned)(st.st_mode & 07777), path);
	for (n = 0; n < len && data[n] != '\n' && data[n] != '\r' && data[n] != '\0'; n++)
		;
	if (n < len && data[n] == '\0') {
		msg_set(err, errlen,
		        "--%s \"%s\" has a NUL byte in its first line: put the password there as text", opt,
		        path);
		goto fail;
	}
	if (n == 0) {
		msg_set(err, errlen, "--%s \"%s\" is empty: put the password on its first line", opt, path);
		goto fail;
	}
	*ret = strndup(data, n);
	if (!*ret) {
		(void)msg_oom(err, errlen);
		goto fail;
	}
	close(fd);
	explicit_bzero(data, len);
	free(data);
	return true;

fail:
	close(fd);
	explicit_bzero(data, len);
	free(data);
	if (warn && warnlen > 0)
		warn[0] = '\0';
	return false;
}

/* ---- Scrubbing secrets out of argv ---- */

/*
 * Replace s[start..end) by at most three '*' and move the rest of the string
 * up; the bytes freed at its end become NUL, so /proc/PID/cmdline shows
 * neither the password nor its length. Returns where end's byte is now.
 */
static char *redact(char *start, char *end)
{
	size_t len = (size_t)(end - start), stars = len < 3 ? len : 3, tail = strlen(end);

	memset(start, '*', stars);
	memmove(start + stars, end, tail + 1);
	memset(start + stars + tail + 1, 0, len - stars);
	return start + stars;
}

/* The libpq keywords whose values are secrets. */
static bool is_secret_keyword(const char *kw, size_t len)
{
	return (len == 8 && memcmp(kw, "password", 8) == 0) ||
	       (len == 11 && memcmp(kw, "sslpassword", 11) == 0);
}

/* libpq conninfo "key = value key='va lue'": redact the password values. */
static void scrub_conninfo(char *s)
{
	char *p = s;

	while (*p) {
		char *kw, *v, *vend;
		size_t kwlen;
		bool quoted;

		while (isspace((unsigned char)*p))
			p++;
		if (!*p)
			break;
		kw = p;
		while (*p && *p != '=' && !isspace((unsigned char)*p))
			p++;
		kwlen = (size_t)(p - kw);
		while (isspace((unsigned char)*p))
			p++;
		if (*p != '=')
			return; /* not a conninfo string: libpq refused it */
		p++;
		while (isspace((unsigned char)*p))
			p++;
		quoted = *p == '\'';
		if (quoted)
			p++;
		v = p;
		while (*p && (quoted ? *p != '\'' : !isspace((unsigned char)*p))) {
			if (*p == '\\' && p[1])
				p++;
			p++;
		}
		vend = p;
		if (is_secret_keyword(kw, kwlen) && vend > v)
			p = redact(v, vend);
		if (quoted && *p == '\'')
			p++;
	}
}

/* URI query "a=b&password=x" (after the '?'): redact the passwords; keys percent-decoded. */
static void scrub_query(char *q)
{
	while (q && *q) {
		char key[16], *eq, *end;
		size_t klen = 0;

		end = q + strcspn(q, "&");
		eq = memchr(q, '=', (size_t)(end - q));
		for (char *k = q; eq && k < eq && klen < sizeof(key); k++) {
			if (*k == '%' && k + 2 < eq && hex_value(k[1]) >= 0 && hex_value(k[2]) >= 0) {
				key[klen++] = (char)(hex_value(k[1]) << 4 | hex_value(k[2]));
				k += 2;
			} else {
				key[klen++] = *k;
			}
		}
		if (eq && end > eq + 1 && is_secret_keyword(key, klen))
			end = redact(eq + 1, end);
		q = *end ? end + 1 : NULL;
	}
}

/* See config.h. */
void config_scrub_secret(char *value)
{
	const char *sep;
	char *rest, *at, *colon;
	size_t slen;

	if (!value)
		return;
	sep = strstr(value, "://");
	slen = sep ? (size_t)(sep - value) : 0;
	for (size_t i = 0; i < slen; i++) {
		if (!isalnum((unsigned char)value[i]) && !strchr("+-.", value[i]))
			slen = 0; /* "host=x options='a://b'": not a scheme */
	}
	if (slen == 0) {
		if (value[0] != '/') /* "/path/redis.sock": a bare socket path */
			scrub_conninfo(value);
		return;
	}
	rest = value + slen + 3;
	if ((slen == 10 && strncasecmp(value, "postgresql", 10) == 0) ||
	    (slen == 8 && strncasecmp(value, "postgres", 8) == 0)) {
		/* libpq: the user-info ends at an '@' before the first '/'. */
		at = strpbrk(rest, "@/");
		if (at && *at != '@')
			at = NULL;
	} else if (slen == 4 && strncasecmp(value, "unix", 4) == 0) {
		at = rest[0] == '/' ? NULL : strstr(rest, "@/"); /* as redis_url_parse */
	} else {
		at = rest[0] == '/' ? NULL : strrchr(rest, '@');
	}
	if (at) {
		colon = memchr(rest, ':', (size_t)(at - rest));
		if (colon && at > colon + 1)
			at = redact(colon + 1, at);
		rest = at + 1;
	}
	if (slen >= 8 && strncasecmp(value, "postgres", 8) == 0 && (rest = strchr(rest, '?')) != NULL)
		scrub_query(rest + 1);
}

/* Rules that involve more than one option. */
static bool check_combinations(struct relay_config *cf, char *err, size_t errlen)
{
	if (cf->redis_cluster && cf->redis.sentinel) {
		msg_set(err, errlen,
		        "--redis-cluster and a redis-sentinel:// --redis-url exclude each "
		        "other: Sentinel serves one master, not a Redis Cluster");
		return false;
	}
	if (cf->redis_cluster && !cf->redis.cluster) {
		struct redis_seed *seed;

		if (cf->redis.unix_path) {
			msg_set(err, errlen,
			        "--redis-cluster needs a TCP --redis-url (host:port), not a "
			        "unix socket");
			return false;
		}
		seed = calloc(1, sizeof(*seed));
		if (!seed || !(seed->host = strdup(cf->redis.host))) {
			free(seed);
			msg_set(err, errlen, "out of memory");
			return false;
		}
		seed->port = cf->redis.port;
		cf->redis.seeds = seed;
		cf->redis.nseeds = 1;
		cf->redis.cluster = true;
	}
	if (!redis_target_set_tls(&cf->redis, cf->redis_tls_ca_file, cf->redis_tls_cert_file,
	                          cf->redis_tls_key_file, cf->redis_tls_server_name, err, errlen))
		return false;
	if (!redis_target_check_auth(&cf->redis, err, errlen))
		return false;
	if (cf->redis.cluster && cf->redis.db != 0) {
		msg_set(err, errlen,
		        "a Redis Cluster has only database 0: drop the /DB part of --redis-url");
		return false;
	}
	if (cf->wait_aof && strcmp(cf->wait_aof, "local,replicas") == 0 && cf->wait_replicas < 1) {
		msg_set(err, errlen, "--wait-aof local,replicas needs --wait-replicas 1 or more");
		return false;
	}
	return true;
}

/* Keep the warning in cf->warnings (cmd/ prints them); an empty one is none. */
static void add_warning(struct relay_config *cf, const char *warn)
{
	if (warn[0] && cf->nwarnings < CONFIG_WARNINGS_MAX)
		(void)snprintf(cf->warnings[cf->nwarnings++], CONFIG_WARNING_LEN, "%s", warn);
}

/* Apply --pg-password-file and --redis-password-file. */
static bool load_secret_files(struct relay_config *cf, char *err, size_t errlen)
{
	char warn[CONFIG_WARNING_LEN];

	if (cf->pg_password_file && cf->pg_password_file[0]) {
		if (!config_read_secret("pg-password-file", cf->pg_password_file, &cf->pg_password, warn,
		                        sizeof(warn), err, errlen))
			return false;
		add_warning(cf, warn);
	}
	if (cf->redis_password_file && cf->redis_password_file[0]) {
		char *pw = NULL;

		if (!config_read_secret("redis-password-file", cf->redis_password_file, &pw, warn,
		                        sizeof(warn), err, errlen))
			return false;
		add_warning(cf, warn);
		if (cf->redis.password) {
			explicit_bzero(cf->redis.password, strlen(cf->redis.password));
			free(cf->redis.password);
		}
		cf->redis.password = pw;
	}
	if (cf->redis_sentinel_password_file && cf->redis_sentinel_password_file[0]) {
		char *pw = NULL;

		if (!config_read_secret("redis-sentinel-password-file", cf->redis_sentinel_password_file,
		                        &pw, warn, sizeof(warn), err, errlen))
			return false;
		add_warning(cf, warn);
		if (cf->redis_sentinel_password) {
			explicit_bzero(cf->redis_sentinel_password, strlen(cf->redis_sentinel_password));
			free(cf->redis_sentinel_password);
		}
		cf->redis_sentinel_password = pw;
	}
	if (cf->redis_sentinel_password && !cf->redis_sentinel_password[0]) {
		free(cf->redis_sentinel_password);
		cf->redis_sentinel_password = NULL;
	}
	if (cf->redis_sentinel_user && !cf->redis_sentinel_user[0]) {
		free(cf->redis_sentinel_user);
		cf->redis_sentinel_user = NULL;
	}
	return redis_target_take_sentinel_auth(
	    &cf->redis, &cf->redis_sentinel_user, &cf->redis_sentinel_password,
	    cf->redis_sentinel_password_file && cf->redis_sentinel_password_file[0], err, errlen);
}

/* See config.h. On every path but CONFIG_OK, *cf is left zeroed. */
void config_print_version(FILE *out)
{
	int pq = PQlibVersion(), yv = yajl_version();

	fprintf(out, "%s %s\n", PROGNAME, OUTBOX_RELAY_VERSION);
	fprintf(out, "hiredis %d.%d.%d, Redis TLS: %s%s)\n", HIREDIS_MAJOR, HIREDIS_MINOR,
	        HIREDIS_PATCH, redis_tls_available() ? "yes (" : "no (built without hiredis_ssl",
	        redis_tls_available() ? redis_tls_library() : "");
	/* PQlibVersion: 150010 is 15.10 (from PostgreSQL 10 on: major * 10000 + minor). */
	fprintf(out, "libpq %d.%d\n", pq / 10000, pq % 10000);
	/* yajl_version: major * 10000 + minor * 100 + micro. */
	fprintf(out, "yajl %d.%d.%d\n", yv / 10000, yv / 100 % 100, yv % 100);
}

enum config_result config_load(struct relay_config *cf, int argc, char **argv, char **envp,
                               char *err, size_t errlen)
{
	struct relay_config built;
	struct raw_value raw[NOPTS];
	enum config_result r;

	memset(cf, 0, sizeof(*cf));
	memset(&built, 0, sizeof(built));
	memset(raw, 0, sizeof(raw));
	if (err && errlen > 0)
		err[0] = '\0';

	r = scan_argv(raw, argc, argv, err, errlen);
	if (r != CONFIG_OK)
		goto out;
	r = CONFIG_ERROR;
	if (!scan_env(raw, envp, err, errlen))
		goto out;
	for (size_t i = 0; i < NOPTS; i++) {
		if (!apply_option(&built, &option_table[i], &raw[i], err, errlen))
			goto out;
	}
	if (!load_secret_files(&built, err, errlen) || !check_combinations(&built, err, errlen))
		goto out;
	*cf = built;
	memset(&built, 0, sizeof(built));
	r = CONFIG_OK;

out:
	/* Everything is copied by now: take the passwords out of /proc/PID/cmdline. */
	for (size_t i = 0; i < NOPTS; i++) {
		scrub_raw(&option_table[i], raw[i].secret);
		free(raw[i].list);
	}
	config_finish(&built);
	return r;
}

/* ---- Usage ---- */

/*
 * Print text word-wrapped at USAGE_WIDTH, every line indented by indent.
 * NBSP joins two words that must stay on one line; it prints as a space.
 */
static void print_wrapped(FILE *out, const char *text, int indent)
{
	int col = 0;
	const char *p = text;

	while (*p) {
		size_t wlen;

		while (*p == ' ')
			p++;
		if (!*p)
			break;
		wlen = strcspn(p, " ");
		if (col > indent && col + 1 + (int)wlen > USAGE_WIDTH) {
			fputc('\n', out);
			col = 0;
		}
		if (col == 0) {
			fprintf(out, "%*s", indent, "");
			col = indent;
		} else {
			fputc(' ', out);
			col++;
		}
		for (size_t i = 0; i < wlen; i++)
			fputc(p[i] == NBSP ? ' ' : p[i], out);
		col += (int)wlen;
		p += wlen;
	}
	fputc('\n', out);
}

static void usage_option(FILE *out, const struct option_def *o)
{
	char flag[64], help[1024];
	int n;

	if (o->kind == OPT_BOOL)
		n = snprintf(flag, sizeof(flag), "  --[no-]%s", o->name);
	else
		n = snprintf(flag, sizeof(flag), "  --%s %s", o->name, o->metavar);
	fprintf(out, "%s%*s env %s\n", flag, n < USAGE_ENV_COL ? USAGE_ENV_COL - n : 0, "", o->env);

	if (o->flags & OPT_F_REQUIRED)
		(void)snprintf(help, sizeof(help), "%s (required)", o->help);
	else if (o->defval)
		(void)snprintf(help, sizeof(help), "%s (default:%c%s)", o->help, NBSP, o->defval);
	else
		(void)snprintf(help, sizeof(help), "%s", o->help);
	print_wrapped(out, help, USAGE_INDENT);
}

/* See config.h. */
void config_usage(FILE *out)
{
	fprintf(out,
	        "Usage: %s [OPTIONS]\n"
	        "Publish outbox events from a PostgreSQL logical replication slot (wal2json)\n"
	        "to Redis Streams.\n"
	        "\n"
	        "Every option can also be set with its OUTBOX_RELAY_* environment variable; "
	        "flags win.\n"
	        "Values go as --name VALUE or --name=VALUE. Durations: 500ms, 90s, 5m, 1h, 2d,\n"
	        "or a bare number of seconds. Sizes: bytes, or with k/KB/KiB, M/MB/MiB, G/GB/GiB\n"
	        "(all powers of 1024). Booleans: --name, --no-name, or true/false in variables.\n",
	        PROGNAME);
	for (size_t g = 0; g < sizeof(group_titles) / sizeof(group_titles[0]); g++) {
		fprintf(out, "\n%s:\n", group_titles[g]);
		for (size_t i = 0; i < NOPTS; i++) {
			if (option_table[i].group == (enum opt_group)g)
				usage_option(out, &option_table[i]);
		}
	}
	fprintf(out, "\n"
	             "Other:\n"
	             "  -h, --help\n"
	             "      print this help and exit\n"
	             "  -V, --version\n"
	             "      print the version and exit\n");
}

/* See config.h. Table-driven, so no allocated field can be forgotten. */
void config_finish(struct relay_config *cf)
{
	if (!cf)
		return;
	for (size_t i = 0; i < NOPTS; i++) {
		const struct option_def *o = &option_table[i];

		if (o->kind == OPT_STRING || o->kind == OPT_REDIS_URL) {
			char **s = field_ptr(cf, o->offset);

			free(*s);
		} else if (o->kind == OPT_LIST) {
			char ***items = field_ptr(cf, o->offset);
			size_t *count = field_ptr(cf, o->aux_offset);

			for (size_t j = 0; j < *count; j++)
				free((*items)[j]);
			free(*items);
		}
		if (o->kind == OPT_REDIS_URL)
			redis_target_finish(field_ptr(cf, o->aux_offset));
	}
	if (cf->pg_password) {
		explicit_bzero(cf->pg_password, strlen(cf->pg_password));
		free(cf->pg_password);
	}
	memset(cf, 0, sizeof(*cf));
}
