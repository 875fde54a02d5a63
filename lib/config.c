/*
 * config.c - outbox-relay's options: the rows of the relay, `outbox-relay
 * status` and `outbox-relay republish` on top of the option engine (opt.h),
 * the checks of single values and of combinations, and the password files.
 *
 * Every option is one row of option_table below: name, flags, the commands
 * whose --help lists it, field, default, range and help text. The engine
 * turns that table into argv and OUTBOX_RELAY_* parsing, defaults, range
 * checks, --help and the freeing in config_finish(); adding an option means
 * adding a row (and the field in config.h, and the README's row: 72_docs).
 *
 * Library code: nothing is logged. Errors are one line in the caller's
 * buffer, naming the flag or variable and the fix. The values of --pg-dsn and
 * --redis-url may hold passwords and are never quoted back.
 */
#include "msg.h"
#include "config.h"

#include <ctype.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>
#include <libpq-fe.h>
#include <yajl/yajl_version.h>

#include "event.h"
#include "opt.h"
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

/*
 * --message-prefix: wal2json takes it as add-msg-prefixes, a list that it
 * splits at commas, trims of white space (isspace) and in which a backslash
 * escapes the next byte (and stays in the name): 'a,b' would deliver the
 * messages of "a" and of "b", never those of "a,b". None of the three, so
 * both plugins deliver exactly the one prefix.
 */
static bool check_message_prefix(const char *value, char *why, size_t whylen)
{
	for (const char *p = value; *p; p++) {
		if (*p == ',' || *p == '\\' || *p == ' ' || (*p >= '\t' && *p <= '\r')) {
			(void)snprintf(why, whylen,
			               "must not contain a comma, a backslash or white space (wal2json's "
			               "add-msg-prefixes splits the value into several prefixes there); "
			               "choose one prefix without them, e.g. outbox");
			return false;
		}
	}
	return true;
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

static bool check_publish(const char *value, char *why, size_t whylen)
{
	if (strcmp(value, "function") == 0 || strcmp(value, "native") == 0)
		return true;
	msg_set(why, whylen, "expected function or native");
	return false;
}

static bool check_plugin(const char *value, char *why, size_t whylen)
{
	if (strcmp(value, "wal2json") == 0 || strcmp(value, "pgoutput") == 0)
		return true;
	snprintf(why, whylen, "must be wal2json or pgoutput");
	return false;
}

static bool check_id_format(const char *value, char *why, size_t whylen)
{
	if (strcmp(value, "any") == 0 || strcmp(value, "uuid") == 0)
		return true;
	msg_set(why, whylen, "expected any or uuid");
	return false;
}

/* ---- The table ---- */

/* Which commands' --help lists a row: the relay and republish, or all three. */
#define RP (CONFIG_CMD_RELAY | CONFIG_CMD_REPUBLISH)
#define ALL (RP | CONFIG_CMD_STATUS)
#define F(f) offsetof(struct relay_config, f), sizeof(((struct relay_config *)0)->f)
#define STR(n, fl, c, f, def, chk, mv, h)                                                          \
	OPT_ROW(n, OPT_STRING, fl, c, F(f), 0, def, 0, 0, chk, mv, h, NULL)
#define BOOL(n, c, f, def, h) OPT_ROW(n, OPT_BOOL, 0, c, F(f), 0, def, 0, 0, NULL, NULL, h, NULL)
#define NUM(n, k, fl, c, f, def, lo, hi, mv, h)                                                    \
	OPT_ROW(n, k, fl, c, F(f), 0, def, lo, hi, NULL, mv, h, NULL)
#define VAL(n, k, f, def, mv, h) OPT_ROW(n, k, 0, RP, F(f), 0, def, 0, 0, NULL, mv, h, NULL)

static const struct opt_def option_table[] = {
    OPT_SECTION("PostgreSQL"),
    OPT_ROW("pg-dsn", OPT_STRING, OPT_F_REQUIRED | OPT_F_SECRET, ALL, F(pg_dsn), 0, NULL, 0, 0,
            check_conninfo, "CONNINFO",
            "libpq connection string or URI of the database holding the outbox, e.g. \"host=db "
            "dbname=app user=relay\" or postgresql://relay@db/app; keep the password in ~/.pgpass "
            "or PGPASSWORD",
            "set it to a libpq connection string, e.g. \"host=db dbname=app user=relay\""),
    STR("slot", 0, ALL, slot, "outbox_relay", check_slot, "NAME",
        "logical replication slot (plugin wal2json or pgoutput) to stream from; 1-63 lower-case "
        "letters, "
        "digits or underscores"),
    STR("plugin", 0, ALL, plugin, "wal2json", check_plugin, "PLUGIN",
        "output plugin of a slot the relay creates: wal2json, or pgoutput (built into "
        "PostgreSQL, needs a publication: --publication); an existing slot streams with its "
        "own plugin, which the relay names at start"),
    NUM("txn-memory", OPT_SIZE, 0, RP, txn_memory, "8MiB", 0, 64 * OPT_GIB, "SIZE",
        "pgoutput: memory one transaction's messages may take while the relay holds them until "
        "its commit (pgoutput's Begin lacks the commit end the events' _lsn is); the rest goes "
        "to an unlinked temporary file in $TMPDIR, else /tmp"),
    BOOL("pgoutput-streaming", RP, pgoutput_streaming, "true",
         "pgoutput on PostgreSQL 14+: ask for a large transaction while the server decodes it "
         "(protocol 2, streaming), not once it has spilled it to disk and read it back; the relay "
         "still publishes it only at its commit, from the same held file"),
    STR("publication", 0, RP, publication, NULL, NULL, "NAME",
        "pgoutput: the publication of the outbox table's inserts; by default the slot's name. "
        "Created FOR TABLE --table WITH (publish = 'insert') when missing and the role may"),
    BOOL("create-slot", RP, create_slot, "true",
         "create the slot when it does not exist; with --no-create-slot a missing slot is an error "
         "(exit code 4)"),
    BOOL("failover-slot", RP, failover_slot, "true",
         "PostgreSQL 17+: create the slot with FAILOVER (and switch an existing one on), so "
         "standbys with sync_replication_slots keep a copy and the relay goes on after a "
         "promotion; PostgreSQL 15 and 16 have no failover slots (a failover loses the slot: the "
         "relay then stops with exit 8)"),
    STR("table", OPT_F_QUALIFY, RP, table, "public.outbox", check_table, "TABLE",
        "outbox table whose INSERTs are published, as schema.table; a bare name means public.NAME"),
    STR("message-prefix", OPT_F_NONEMPTY, RP, message_prefix, "outbox", check_message_prefix,
        "PREFIX",
        "prefix of the pg_logical_emit_message() messages that carry events (see "
        "outbox_emit_message() in sql/outbox.sql)"),
    STR("id-column", OPT_F_NONEMPTY, RP, id_column, "id", NULL, "COLUMN",
        "column of the outbox table holding the event id"),
    STR("id-format", 0, RP, id_format, "any", check_id_format, "FORMAT",
        "what an event id must look like: any (any non-empty value) or uuid (8-4-4-4-12 hex "
        "digits); other ids go to the dead-letter stream"),
    NUM("status-interval", OPT_DURATION, 0, RP, status_interval_ms, "10s", 100, OPT_MS_HOUR,
        "DURATION", "how often to report the confirmed position to PostgreSQL"),
    NUM("pg-timeout", OPT_DURATION, 0, RP, pg_timeout_ms, "0", 0, 24 * OPT_MS_HOUR, "DURATION",
        "reconnect when PostgreSQL sends nothing for this long although asked to answer (a hung "
        "server or a network that drops packets silently); 0 turns it off. Keep it above the "
        "longest time PostgreSQL spends decoding a big transaction that touches no outbox row "
        "(wal2json 2.5 sends nothing meanwhile)"),
    VAL("endpos", OPT_LSN, endpos, NULL, "LSN",
        "exit 0 once the relay has confirmed this WAL position (e.g. 0/16B3748) to PostgreSQL; by "
        "default the relay runs until stopped"),
    VAL("accept-gap", OPT_LSN, accept_gap, NULL, "LSN",
        "after the relay refused to start (exit 8) because its slot is missing, invalidated or "
        "recreated: the position that refusal printed, to accept the gap and stream from the "
        "slot's new position (republish the gap first, while nothing writes; outbox-relay heal "
        "does both with no window). It matches only that gap, so leaving it "
        "set cannot hide a later one"),
    OPT_SECTION("Redis"),
    OPT_ROW("redis-url", OPT_REDIS_URL, OPT_F_SECRET, ALL, F(redis_url),
            offsetof(struct relay_config, redis), "redis://127.0.0.1:6379", 0, 0, NULL, "URL",
            "Redis server: redis://[[user]:password@]host[:port][/db], rediss://... for TLS, "
            "unix:///path/to/redis.sock[?db=N] or /path/to/redis.sock, or Redis Cluster seeds "
            "redis-cluster://host:port[,host:port...] (rediss-cluster:// for TLS), or Redis "
            "Sentinels redis-sentinel://[[user]:password@]host:port[,host:port...][/db]#master "
            "(rediss-sentinel:// for TLS to Sentinels and master; the credentials are the "
            "master's); percent-encode @ and : in credentials (%40, %3A)",
            NULL),
    STR("stream", OPT_F_NONEMPTY, RP, stream, "outbox:{aggregate_type}", NULL, "TEMPLATE",
        "stream key for each event; {field} is replaced by that event field"),
    STR("stream-pattern", OPT_F_NONEMPTY | OPT_F_ONLY, CONFIG_CMD_STATUS, stream_pattern,
        "outbox:*", NULL, "GLOB",
        "the streams to report: every stream whose key matches this pattern (SCAN MATCH syntax)"),
    STR("dead-letter-stream", OPT_F_NONEMPTY, RP, dead_letter_stream, "outbox:dead-letter",
        check_stream_name, "KEY",
        "stream that receives events which cannot be published as they are"),
    NUM("dedup-window", OPT_DURATION, OPT_F_SECONDS, RP, dedup_window_s, "1h", 0, 30 * OPT_MS_DAY,
        "DURATION",
        "how long published event ids are remembered so that a second event with the same id is "
        "dropped; whole seconds, 0 disables (replays of already published WAL are dropped by the "
        "LSN watermark regardless)"),
    NUM("maxlen", OPT_INT, 0, RP, maxlen, "0", 0, INT64_C(1000000000000), "N",
        "trim each stream to about N entries (XADD MAXLEN ~ N); 0 never trims"),
    STR("trim", 0, RP, trim, "none", check_trim, "MODE",
        "none; acked: every --trim-interval, trim each stream the relay published to up to the "
        "oldest entry a consumer group has not yet been delivered or acknowledged (XTRIM MINID ~); "
        "a stream without a group is not trimmed; --maxlen stays a hard cap"),
    NUM("trim-interval", OPT_DURATION, 0, RP, trim_interval_ms, "60s", 100, 7 * OPT_MS_DAY,
        "DURATION", "how often --trim acked trims the streams"),
    OPT_ROW("group", OPT_LIST, 0, RP, F(groups), offsetof(struct relay_config, ngroups), NULL, 0, 0,
            NULL, "NAME",
            "consumer group to create on each stream; repeat the flag for more (the variable takes "
            "a comma-separated list; flags replace it)",
            NULL),
    STR("key-prefix", 0, ALL, key_prefix, "outbox-relay", check_key_prefix, "PREFIX",
        "prefix of the relay's own bookkeeping keys; must not contain { or }"),
    STR("publish", 0, RP, publish, "native", check_publish, "MODE",
        "how a batch is written: native (no Lua: under WATCH the relay reads the watermark and "
        "the dedup shards a group of batches touches, decides, and writes the entries, ids and "
        "watermarks in one MULTI/EXEC, at about half the function's cost to Redis per event; "
        "what it does not take, namely values of 64 KiB or more, dead letters, republish, "
        "a stream key of another type and a slot being migrated, goes through the function), or "
        "function (every batch through one call of the relay's Redis function, which checks the "
        "watermark and the dedup window inside Redis)"),
    BOOL("native-predict", RP, native_predict, "true",
         "with --publish native, send the dedup lookups of a group that is not read behind "
         "another group's write with its first reads, as the relay's own last write to each "
         "stream predicts them, and use their answers only when the first reads' answers ask "
         "for exactly those lookups (else they are dropped and sent again): a round trip less "
         "per group when events come at a steady rate; --no-native-predict always waits"),
    NUM("dedup-record", OPT_SIZE, 0, RP, dedup_record, "16MiB", 0, 16 * OPT_GIB, "SIZE",
        "with --publish native, remember in filters (about 10 bits an id) the ids the relay "
        "itself wrote into each stream's live dedup buckets, and leave out the lookups of ids "
        "a bucket cannot hold while nobody else has added to it; a bucket whose filters would "
        "pass this budget (all connections together) is looked up in full; 0 looks every id up"),
    NUM("dedup-record-seed", OPT_INT, 0, RP, dedup_record_seed, "1024", 0, 65536, "N",
        "with --dedup-record, read a live bucket the relay did not make itself (after a start "
        "or a reconnect) into its record, at most N hashes (about 24 ids each) per group that "
        "looks ids up, whatever its streams, and one per event of the group (at least 16), so "
        "that its lookups are left out once it is read "
        "instead of only for buckets begun after the start; 0 reads none"),
    NUM("linger", OPT_DURATION, 0, RP, linger_ms, "0", 0, OPT_MS_SECOND, "DURATION",
        "hold a batch, and the batches of other streams queued meanwhile, this long from its "
        "first event before they go to Redis: at a steady rate Redis then reads, decides and "
        "writes several events per round trip instead of one, for up to this much added "
        "latency; 0 sends at once (while catching up on a backlog a batch waits 1ms either way)"),
    BOOL("redis-functions", RP, redis_functions, "true",
         "load the relay's script as a Redis function (Redis 7+); --no-redis-functions loads it "
         "with SCRIPT LOAD and calls it with EVALSHA instead"),
    NUM("redis-timeout", OPT_DURATION, 0, ALL, redis_timeout_ms, "5s", 100, 10 * OPT_MS_MINUTE,
        "DURATION", "timeout for connecting to Redis and for each reply"),
    STR("redis-tls-ca-file", 0, ALL, redis_tls_ca_file, NULL, NULL, "PATH",
        "rediss:// only: PEM bundle of the CA(s) that signed the Redis server's certificate; by "
        "default the system's trust store"),
    STR("redis-tls-cert-file", 0, ALL, redis_tls_cert_file, NULL, NULL, "PATH",
        "rediss:// only: client certificate (PEM) for servers with tls-auth-clients yes; needs "
        "--redis-tls-key-file"),
    STR("redis-tls-key-file", 0, ALL, redis_tls_key_file, NULL, NULL, "PATH",
        "rediss:// only: private key (PEM, unencrypted) of --redis-tls-cert-file"),
    STR("redis-tls-server-name", 0, ALL, redis_tls_server_name, NULL, NULL, "NAME",
        "rediss:// only: the name the server's certificate must carry (also sent as SNI); by "
        "default the host of --redis-url (or each cluster node's address)"),
    BOOL("redis-cluster", ALL, redis_cluster, "false",
         "treat the --redis-url host as a seed of a Redis Cluster (the same as a "
         "redis-cluster://host:port[,host:port...] URL): one pipelined connection per master, "
         "MOVED and ASK followed"),
    BOOL("allow-eviction", RP, allow_eviction, "false",
         "run even when Redis's maxmemory-policy is allkeys-* (it may evict stream entries, "
         "watermarks and dedup keys: events lost or published twice); by default the relay refuses "
         "with exit code 5"),
    NUM("wait-replicas", OPT_INT, 0, RP, wait_replicas, "0", 0, 16, "N",
        "count events as acknowledged (and confirm their LSN) only after WAIT N says N replicas "
        "have them; fewer within --wait-timeout means no confirm and a resend; 0 turns it off"),
    NUM("wait-timeout", OPT_DURATION, 0, RP, wait_timeout_ms, "1s", 10, 60 * OPT_MS_SECOND,
        "DURATION", "how long WAIT / WAITAOF may block for the replicas or the fsync"),
    STR("wait-aof", 0, RP, wait_aof, "none", check_wait_aof, "MODE",
        "none; local: count events as acknowledged only once Redis fsynced them to its AOF "
        "(WAITAOF 1 0, Redis 7.2+ with appendonly yes); local,replicas: also on --wait-replicas "
        "replicas (WAITAOF 1 N)"),
    OPT_SECTION("Flow control"),
    NUM("max-inflight-events", OPT_INT, 0, RP, max_inflight_events, "10000", 1, 10000000, "N",
        "stop reading WAL while this many events wait for Redis"),
    NUM("max-inflight-bytes", OPT_SIZE, 0, RP, max_inflight_bytes, "8MiB", 64 * OPT_KIB,
        16 * OPT_GIB, "SIZE", "stop reading WAL while this many bytes of events wait for Redis"),
    NUM("shutdown-timeout", OPT_DURATION, 0, RP, shutdown_timeout_ms, "10s", 0, 10 * OPT_MS_MINUTE,
        "DURATION",
        "on SIGTERM or SIGINT, how long to wait for in-flight events to reach Redis before "
        "exiting"),
    NUM("retry-max", OPT_DURATION, 0, RP, retry_max_ms, "30s", 100, 10 * OPT_MS_MINUTE, "DURATION",
        "longest wait between reconnect attempts (cap of the exponential backoff)"),
    NUM("max-event-bytes", OPT_SIZE, 0, RP, max_event_bytes, "64MiB", 1 * OPT_KIB, 512 * OPT_MIB,
        "SIZE",
        "largest event (its row as wal2json prints it, and the sum of its field names and values) "
        "published as it is; larger ones go to the dead-letter stream with the reason, undecoded"),
    OPT_SECTION("Operations"),
    STR("http-addr", 0, RP, http_addr, ":9187", NULL, "ADDR",
        "serve /metrics (Prometheus), /healthz and /readyz on host:port, :port or [ipv6]:port; an "
        "empty value turns the endpoint off"),
    STR("pg-password-file", 0, ALL, pg_password_file, NULL, NULL, "PATH",
        "read the PostgreSQL password from the first line of this file (e.g. a mounted Secret); it "
        "overrides a password in --pg-dsn"),
    STR("redis-password-file", 0, ALL, redis_password_file, NULL, NULL, "PATH",
        "read the Redis password from the first line of this file; it overrides a password in "
        "--redis-url"),
    STR("redis-sentinel-user", 0, ALL, redis_sentinel_user, NULL, NULL, "NAME",
        "redis-sentinel:// only: the Sentinels' ACL user (AUTH NAME PASSWORD); needs a Sentinel "
        "password; by default AUTH PASSWORD (the default user)"),
    STR("redis-sentinel-password", OPT_F_SECRET | OPT_F_PASSWORD, ALL, redis_sentinel_password,
        NULL, NULL, "PASSWORD",
        "redis-sentinel:// only: the Sentinels' password (AUTH to each Sentinel; the password in "
        "--redis-url is the master's); prefer --redis-sentinel-password-file or the environment to "
        "keep it out of ps"),
    STR("redis-sentinel-password-file", 0, ALL, redis_sentinel_password_file, NULL, NULL, "PATH",
        "redis-sentinel:// only: read the Sentinels' password from the first line of this file; it "
        "overrides --redis-sentinel-password"),
    BOOL("check-config", RP, check_config, "false",
         "validate the options and print them (without secrets), then check the prerequisites and "
         "list every problem found, one line each naming the fix: PostgreSQL reachable and "
         "authenticated, REPLICATION, wal_level, free slots and WAL senders, wal2json installed "
         "and allowed (by creating and dropping a TEMPORARY slot), the outbox table and its "
         "columns, the slot; Redis reachable, AUTH, the commands the relay uses, a master, "
         "maxmemory-policy. Exit 0 when all is fine, 9 when a problem was found"),
    BOOL("check-config-offline", RP, check_config_offline, "false",
         "validate the options, print them (without secrets) and exit 0 without connecting "
         "anywhere (--check-config without the prerequisite checks)"),
    OPT_SECTION("Logging"),
    VAL("log-level", OPT_LOG_LEVEL, log_level, "info", "LEVEL", "error, warn, info or debug"),
    VAL("log-format", OPT_LOG_FORMAT, log_format, "text", "FORMAT",
        "text, or json for one JSON object per line"),
    OPT_SECTION("Republish (outbox-relay republish only)"),
    STR("since", 0, RP, since, NULL, NULL, "TIME",
        "republish the outbox rows whose --time-column is at or after this time (a PostgreSQL "
        "timestamptz, e.g. 2026-11-24T12:00:00Z: the --since an exit 8 line printed, or "
        "earlier; outbox-relay heal: by default 5 minutes before the slot record's last commit)"),
    STR("until", 0, RP, until, NULL, NULL, "TIME",
        "and before this time; by default up to the newest row"),
    STR("time-column", 0, RP, time_column, "created_at", NULL, "COLUMN",
        "the outbox table's column that --since and --until compare"),
    NUM("fetch-size", OPT_INT, 0, RP, fetch_size, "1000", 1, 100000, "N",
        "rows read from the server-side cursor at a time"),
    NUM("clock-skew", OPT_DURATION, 0, RP, clock_skew_ms, "5m", 0, 24 * OPT_MS_HOUR, "DURATION",
        "outbox-relay verify: how far Redis's clock may run behind PostgreSQL's; an entry is "
        "judged once the rows up to its time plus this much are read"),
};

#undef VAL
#undef NUM
#undef BOOL
#undef STR
#undef F
#undef ALL
#undef RP

#define NOPTS (sizeof(option_table) / sizeof(option_table[0]))

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
	/* WAITAOF 1 0 would count an event done with no replica holding it. */
	if (cf->wait_aof && strcmp(cf->wait_aof, "local") == 0 && cf->wait_replicas > 0) {
		msg_set(err, errlen,
		        "--wait-aof local waits for this server's AOF only, not for the --wait-replicas "
		        "replicas: use --wait-aof local,replicas (WAITAOF 1 N), or drop one of them");
		return false;
	}
	return true;
}

/* Keep the warning in cf->warnings (cmd/ prints them); an empty one is none. */
static void add_warning(void *p, const char *warn)
{
	struct relay_config *cf = p;

	if (warn[0] && cf->nwarnings < CONFIG_WARNINGS_MAX)
		(void)snprintf(cf->warnings[cf->nwarnings++], CONFIG_WARNING_LEN, "%s", warn);
}

/* Apply --pg-password-file and --redis-password-file. */
static bool load_secret_files(const struct opt_spec *spec, struct relay_config *cf, char *err,
                              size_t errlen)
{
	if (cf->pg_password_file && cf->pg_password_file[0] &&
	    !opt_replace_secret(spec, cf, "pg-password-file", cf->pg_password_file, &cf->pg_password,
	                        err, errlen))
		return false;
	if (cf->redis_password_file && cf->redis_password_file[0] &&
	    !opt_replace_secret(spec, cf, "redis-password-file", cf->redis_password_file,
	                        &cf->redis.password, err, errlen))
		return false;
	if (cf->redis_sentinel_password_file && cf->redis_sentinel_password_file[0] &&
	    !opt_replace_secret(spec, cf, "redis-sentinel-password-file",
	                        cf->redis_sentinel_password_file, &cf->redis_sentinel_password, err,
	                        errlen))
		return false;
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

/* The engine's view of command cmd. */
static struct opt_spec spec_of(unsigned cmd, const char *prog, void (*usage)(FILE *))
{
	struct opt_spec spec = {prog, ENV_PREFIX, option_table,         NOPTS,
	                        cmd,  usage,      config_print_version, add_warning};

	return spec;
}

/* See config.h. */
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

/* See config.h. On every path but CONFIG_OK, *cf is left zeroed. */
enum config_result config_load_as(struct relay_config *cf, unsigned cmd, const char *prog,
                                  void (*usage)(FILE *), int argc, char **argv, char **envp,
                                  char *err, size_t errlen)
{
	struct opt_spec spec = spec_of(cmd, prog, usage);
	struct relay_config built;
	enum opt_result r;

	memset(cf, 0, sizeof(*cf));
	memset(&built, 0, sizeof(built));
	r = opt_load(&spec, &built, argc, argv, envp, err, errlen);
	if (r == OPT_OK && (!load_secret_files(&spec, &built, err, errlen) ||
	                    !check_combinations(&built, err, errlen)))
		r = OPT_ERROR;
	if (r == OPT_OK) {
		*cf = built;
		memset(&built, 0, sizeof(built));
	}
	config_finish(&built);
	return (enum config_result)r;
}

/* See config.h. */
enum config_result config_load(struct relay_config *cf, int argc, char **argv, char **envp,
                               char *err, size_t errlen)
{
	return config_load_as(cf, CONFIG_CMD_RELAY, PROGNAME, config_usage, argc, argv, envp, err,
	                      errlen);
}

/* See config.h. */
void config_print_options(unsigned cmd, FILE *out)
{
	struct opt_spec spec = spec_of(cmd, PROGNAME, config_usage);

	opt_print_options(&spec, out);
	fprintf(out, "\n"
	             "Other:\n"
	             "  -h, --help\n"
	             "      print this help and exit\n"
	             "  -V, --version\n"
	             "      print the version and exit\n");
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
	config_print_options(CONFIG_CMD_RELAY, out);
}

/* See config.h. */
void config_finish(struct relay_config *cf)
{
	struct opt_spec spec = spec_of(CONFIG_CMD_RELAY, PROGNAME, config_usage);

	if (!cf)
		return;
	opt_free(&spec, cf);
	if (cf->pg_password) {
		explicit_bzero(cf->pg_password, strlen(cf->pg_password));
		free(cf->pg_password);
	}
	memset(cf, 0, sizeof(*cf));
}
