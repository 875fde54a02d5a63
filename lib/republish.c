/*
 * republish.c - `outbox-relay republish`: heal a gap from the outbox table.
 *
 * Reads the outbox rows whose --time-column lies in [--since, --until) over
 * an ordinary SQL connection, through a server-side cursor (bounded memory
 * for any table size), renders each column the way wal2json prints it, maps
 * the row with the relay's own mapper (same fields, routing and dead-letter
 * rules) and publishes it through the same Redis function, in republish
 * mode: the stream watermarks are neither read nor written, so only the
 * dedup window decides, and an overlap with what was published before is
 * harmless. Every entry carries _republished=true.
 */
#include "republish.h"

#include <errno.h>
#include <libpq-fe.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "event.h"
#include "exitcode.h"
#include "log.h"
#include "lsn.h"
#include "relay.h"
#include "sink_redis.h"
#include "wal2json.h"

#define PROGRESS_US 2000000
#define MAX_POLL_FDS 64

static volatile sig_atomic_t interrupted;

static void on_signal(int sig)
{
	(void)sig;
	interrupted = 1;
}

/* A column of the outbox table, in attnum order (wal2json's order). */
struct column {
	char *name;
	char *type; /* format_type(atttypid, atttypmod), as wal2json prints it */
	unsigned oid;
};

struct republish {
	const struct relay_config *cf;
	PGconn *conn;
	struct sink_redis *sink;
	struct mapper *map;
	struct column *cols;
	int ncols;
	char *schema, *table; /* the outbox table's real names */
	uint64_t rows;
	struct backoff bo; /* Redis reconnects */
	int64_t last_progress_us;
	struct buf raw;
	struct w2j_field *fields;
	char err[1024];
};

/* wal2json prints these types as bare JSON numbers (NaN and infinities as null). */
static bool numeric_oid(unsigned oid)
{
	switch (oid) {
	case 20:   /* int8 */
	case 21:   /* int2 */
	case 23:   /* int4 */
	case 26:   /* oid */
	case 700:  /* float4 */
	case 701:  /* float8 */
	case 1700: /* numeric */
		return true;
	default:
		return false;
	}
}

/* One column's text output as the w2j_field wal2json would give for it. */
static void render(const struct column *c, const char *v, bool null, struct w2j_field *f)
{
	f->name = c->name;
	f->name_len = strlen(c->name);
	f->type = c->type;
	f->type_len = strlen(c->type);
	f->kind = W2J_KIND_STRING;
	f->value = v;
	f->value_len = null ? 0 : strlen(v);
	if (null) {
		f->kind = W2J_KIND_NULL;
		f->value = NULL;
	} else if (numeric_oid(c->oid)) {
		f->kind = strcmp(v, "NaN") == 0 || strstr(v, "Infinity") ? W2J_KIND_NULL : W2J_KIND_NUMBER;
	} else if (c->oid == 16) { /* bool */
		f->kind = W2J_KIND_BOOL;
		f->value = v[0] == 't' ? "true" : "false";
	} else if (c->oid == 17 && strncmp(v, "\\x", 2) == 0) { /* bytea: hex without \x */
		f->value = v + 2;
	}
	if (f->kind == W2J_KIND_NULL) {
		f->value = NULL;
		f->value_len = 0;
	} else {
		f->value_len = strlen(f->value);
	}
}

static void put_json_string(struct buf *b, const char *s, size_t n)
{
	static const char hex[] = "0123456789abcdef";

	buf_putc(b, '"');
	for (size_t i = 0; i < n; i++) {
		unsigned char ch = (unsigned char)s[i];

		if (ch == '"' || ch == '\\') {
			buf_putc(b, '\\');
			buf_putc(b, (char)ch);
		} else if (ch < 0x20) {
			char e[6] = {'\\', 'u', '0', '0', hex[ch >> 4], hex[ch & 15]};

			buf_append(b, e, sizeof(e));
		} else {
			buf_putc(b, (char)ch);
		}
	}
	buf_putc(b, '"');
}

/* The row as a wal2json INSERT object: the "raw" of a dead letter. */
static void render_raw(struct republish *rp, const struct w2j_field *f, int n)
{
	struct buf *b = &rp->raw;

	buf_reset(b);
	buf_puts(b, "{\"action\":\"I\",\"schema\":");
	put_json_string(b, rp->schema, strlen(rp->schema));
	buf_puts(b, ",\"table\":");
	put_json_string(b, rp->table, strlen(rp->table));
	buf_puts(b, ",\"columns\":[");
	for (int i = 0; i < n; i++) {
		buf_puts(b, i ? ",{\"name\":" : "{\"name\":");
		put_json_string(b, f[i].name, f[i].name_len);
		buf_puts(b, ",\"type\":");
		put_json_string(b, f[i].type, f[i].type_len);
		buf_puts(b, ",\"value\":");
		if (f[i].kind == W2J_KIND_NULL)
			buf_puts(b, "null");
		else if (f[i].kind == W2J_KIND_STRING)
			put_json_string(b, f[i].value, f[i].value_len);
		else
			buf_append(b, f[i].value, f[i].value_len);
		buf_putc(b, '}');
	}
	buf_puts(b, "]}");
}

/* Run sql; NULL with rp->err ("<what>: <server message>") unless it returns want. */
static PGresult *run(struct republish *rp, const char *what, const char *sql, ExecStatusType want)
{
	PGresult *res = PQexec(rp->conn, sql);
	char *nl;

	if (PQresultStatus(res) == want)
		return res;
	snprintf(rp->err, sizeof(rp->err), "%s: %s", what, PQerrorMessage(rp->conn));
	if ((nl = strchr(rp->err, '\n')) != NULL)
		*nl = '\0';
	PQclear(res);
	return NULL;
}

/* Connect, set the session up as the walsender renders values, resolve the table. */
static int pg_setup(struct republish *rp)
{
	const struct relay_config *cf = rp->cf;
	const char *keys[5] = {"connect_timeout", "fallback_application_name", "dbname"};
	const char *vals[5] = {"10", "outbox-relay republish", cf->pg_dsn};
	struct buf q = {0};
	PGresult *res;
	char *lit;
	int total;

	if (cf->pg_password) {
		keys[3] = "password";
		vals[3] = cf->pg_password;
	}
	rp->conn = PQconnectdbParams(keys, vals, 1);
	if (!rp->conn || PQstatus(rp->conn) != CONNECTION_OK) {
		snprintf(rp->err, sizeof(rp->err), "could not connect to PostgreSQL: %s",
		         rp->conn ? PQerrorMessage(rp->conn) : "out of memory");
		if (strchr(rp->err, '\n'))
			*strchr(rp->err, '\n') = '\0';
		return EXIT_PG_SETUP;
	}
	/* wal2json renders with the walsender's settings, which the relay sets so. */
	res = run(rp, "session settings",
	          "SET TimeZone = 'UTC'; SET DateStyle = 'ISO, MDY'; SET bytea_output = 'hex'; "
	          "SET IntervalStyle = 'postgres'",
	          PGRES_COMMAND_OK);
	if (!res)
		return EXIT_PG_SETUP;
	PQclear(res);
	lit = PQescapeLiteral(rp->conn, cf->table, strlen(cf->table));
	if (!lit) {
		snprintf(rp->err, sizeof(rp->err), "out of memory");
		return EXIT_FAILURE_RUNTIME;
	}
	/* Row 0: the table's real schema and name (as the relay resolves it);
	 * then its columns in attnum order with wal2json's type names. */
	buf_puts(&q, "SELECT n.nspname, c.relname, 0::oid, 0 AS o FROM pg_catalog.pg_class c JOIN "
	             "pg_catalog.pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = "
	             "pg_catalog.to_regclass(");
	buf_puts(&q, lit);
	buf_puts(&q, ") UNION ALL SELECT a.attname, pg_catalog.format_type(a.atttypid, a.atttypmod), "
	             "a.atttypid, a.attnum FROM pg_catalog.pg_attribute a WHERE a.attrelid = "
	             "pg_catalog.to_regclass(");
	buf_puts(&q, lit);
	buf_puts(&q, ") AND a.attnum > 0 AND NOT a.attisdropped ORDER BY 4");
	PQfreemem(lit);
	res = q.failed ? NULL : run(rp, "reading the outbox table's columns", q.data, PGRES_TUPLES_OK);
	buf_finish(&q);
	if (!res)
		return strstr(rp->err, "invalid name syntax") ? EXIT_USAGE : EXIT_PG_SETUP;
	if (PQntuples(res) < 2 || PQgetisnull(res, 0, 1)) {
		PQclear(res);
		snprintf(rp->err, sizeof(rp->err),
		         "outbox table \"%s\" does not exist: point --table at your outbox table",
		         cf->table);
		return EXIT_OUTBOX_SCHEMA;
	}
	rp->schema = strdup(PQgetvalue(res, 0, 0));
	rp->table = strdup(PQgetvalue(res, 0, 1));
	total = PQntuples(res) - 1;
	rp->ncols = total;
	rp->cols = calloc((size_t)rp->ncols, sizeof(*rp->cols));
	rp->fields = calloc((size_t)rp->ncols + 1, sizeof(*rp->fields));
	for (int i = 0; rp->cols && i < rp->ncols; i++) {
		rp->cols[i].name = strdup(PQgetvalue(res, i + 1, 0));
		rp->cols[i].type = strdup(PQgetvalue(res, i + 1, 1));
		rp->cols[i].oid = (unsigned)strtoul(PQgetvalue(res, i + 1, 2), NULL, 10);
		if (!rp->cols[i].name || !rp->cols[i].type)
			rp->ncols = i; /* reported below */
	}
	PQclear(res);
	if (!rp->schema || !rp->table || !rp->cols || !rp->fields || rp->ncols != total) {
		snprintf(rp->err, sizeof(rp->err), "out of memory");
		return EXIT_FAILURE_RUNTIME;
	}
	for (int want = 0; want < 2; want++) {
		const char *name = want ? cf->id_column : cf->time_column;
		int i;

		for (i = 0; i < rp->ncols && strcmp(rp->cols[i].name, name) != 0; i++)
			;
		if (i == rp->ncols) {
			snprintf(rp->err, sizeof(rp->err),
			         "column \"%s\" (named by %s) does not exist in outbox table \"%s.%s\"", name,
			         want ? "--id-column" : "--time-column", rp->schema, rp->table);
			return EXIT_OUTBOX_SCHEMA;
		}
	}
	return EXIT_OK;
}

/*
 * Move commands to Redis and replies back for at most timeout_ms; reconnect
 * (with backoff) when the connection failed. Returns an exit code for a
 * permanent failure, or -1.
 */
static int pump(struct republish *rp, int timeout_ms)
{
	struct sink_redis *s = rp->sink;
	struct pollfd pfd[MAX_POLL_FDS];
	int n;

	if (!sink_redis_connected(s)) {
		int64_t wait = rp->bo.next_us - time_mono_us();
		enum sink_status st;

		if (wait > 0) {
			(void)poll(NULL, 0, wait / 1000 < timeout_ms ? (int)(wait / 1000) + 1 : timeout_ms);
			return -1;
		}
		st = sink_redis_connect(s);
		if (st == SINK_FATAL) {
			snprintf(rp->err, sizeof(rp->err), "Redis: %s", sink_redis_errmsg(s));
			return EXIT_REDIS_SETUP;
		}
		if (st != SINK_OK) {
			if (rp->bo.attempt == 0)
				log_warn("Redis: %s; retrying with backoff", sink_redis_errmsg(s));
			(void)backoff_next(&rp->bo, rp->cf->retry_max_ms);
			return -1;
		}
		if (rp->bo.attempt > 0)
			log_info("Redis: connected again; unacknowledged events are sent again");
	}
	if (sink_redis_want_write(s) && !sink_redis_io(s, NULL, 0))
		goto lost;
	n = sink_redis_pollfds(s, pfd, MAX_POLL_FDS);
	if (poll(pfd, (nfds_t)n, timeout_ms) < 0 && errno != EINTR) {
		snprintf(rp->err, sizeof(rp->err), "poll failed: %s", strerror(errno));
		return EXIT_FAILURE_RUNTIME;
	}
	if (!sink_redis_io(s, pfd, n) || !sink_redis_check_stall(s, time_mono_us()))
		goto lost;
	if (sink_redis_acked_seq(s) > 0)
		rp->bo.attempt = 0;
	return -1;
lost:
	log_warn("Redis: %s; reconnecting with backoff", sink_redis_errmsg(s));
	sink_redis_disconnect(s);
	(void)backoff_next(&rp->bo, rp->cf->retry_max_ms);
	return -1;
}

static void progress(struct republish *rp, bool force)
{
	const struct sink_stats *st = sink_redis_stats(rp->sink);
	int64_t now = time_mono_us();

	if (!force && now - rp->last_progress_us < PROGRESS_US)
		return;
	rp->last_progress_us = now;
	log_info("republish: %llu row(s) read; published=%llu duplicates=%llu dead_lettered=%llu "
	         "in_flight=%llu",
	         (unsigned long long)rp->rows, (unsigned long long)st->published,
	         (unsigned long long)st->duplicates, (unsigned long long)st->dead_lettered,
	         (unsigned long long)sink_redis_inflight_events(rp->sink));
}

/* Map and queue one fetched row. Returns false only when out of memory. */
static bool queue_row(struct republish *rp, const PGresult *res, int row, bool has_ts)
{
	struct txn_info tx = {.has_xid = true};
	const char *reason = NULL, *ts;
	char why[200];
	struct event ev;
	enum map_result mr;
	int n = rp->ncols;

	for (int i = 0; i < n; i++)
		render(&rp->cols[i], PQgetvalue(res, row, i), PQgetisnull(res, row, i), &rp->fields[i]);
	render_raw(rp, rp->fields, n);
	/* What says the entry came from here, not from the WAL. */
	rp->fields[n] = (struct w2j_field){.name = "_republished",
	                                   .name_len = 12,
	                                   .kind = W2J_KIND_BOOL,
	                                   .value = "true",
	                                   .value_len = 4};
	tx.xid = (uint32_t)strtoul(PQgetvalue(res, row, n), NULL, 10);
	ts = has_ts && !PQgetisnull(res, row, n + 1) ? PQgetvalue(res, row, n + 1) : NULL;
	if (ts) {
		tx.committed_at = ts;
		tx.committed_at_len = strlen(ts);
		if (!time_parse_pg(ts, tx.committed_at_len, &tx.committed_unix_us))
			tx.committed_unix_us = 0;
	}
	if (rp->raw.failed)
		return false;
	mr = relay_map_event(rp->map, rp->cf, &tx, 0, rp->fields, (size_t)n + 1, rp->raw.data,
	                     rp->raw.len, sink_redis_max_value(rp->sink), &ev, &reason, why,
	                     sizeof(why));
	if (mapper_failed(rp->map))
		return false;
	if (mr == MAP_DEAD_LETTER)
		log_warn("row %llu dead-lettered: %s", (unsigned long long)rp->rows + 1, reason);
	rp->rows++;
	return sink_redis_publish(rp->sink, &ev, mr == MAP_DEAD_LETTER);
}

/* Declare the cursor over [--since, --until) in --time-column order. */
static int declare_cursor(struct republish *rp, bool *has_ts)
{
	const struct relay_config *cf = rp->cf;
	struct buf q = {0};
	PGresult *res;
	char *id;

	res = run(rp, "BEGIN", "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY", PGRES_COMMAND_OK);
	if (!res)
		return EXIT_PG_SETUP;
	PQclear(res);
	/* Commit times, when the server keeps them (track_commit_timestamp). */
	res = run(rp, "reading track_commit_timestamp",
	          "SELECT pg_catalog.current_setting('track_commit_timestamp')::bool", PGRES_TUPLES_OK);
	if (!res)
		return EXIT_PG_SETUP;
	*has_ts = strcmp(PQgetvalue(res, 0, 0), "t") == 0;
	PQclear(res);
	buf_puts(&q, "DECLARE outbox_republish NO SCROLL CURSOR FOR SELECT ");
	for (int i = 0; i < rp->ncols; i++) {
		id = PQescapeIdentifier(rp->conn, rp->cols[i].name, strlen(rp->cols[i].name));
		if (!id)
			goto oom;
		buf_puts(&q, id);
		buf_puts(&q, ", ");
		PQfreemem(id);
	}
	buf_puts(&q, *has_ts ? "xmin::text, pg_catalog.pg_xact_commit_timestamp(xmin)"
	                     : "xmin::text, NULL");
	buf_puts(&q, " FROM ");
	for (int part = 0; part < 2; part++) {
		const char *name = part ? rp->table : rp->schema;

		id = PQescapeIdentifier(rp->conn, name, strlen(name));
		if (!id)
			goto oom;
		buf_puts(&q, id);
		buf_puts(&q, part ? " WHERE " : ".");
		PQfreemem(id);
	}
	for (int bound = 0; bound < 2; bound++) {
		const char *v = bound ? cf->until : cf->since;
		char *lit;

		if (!v)
			continue;
		id = PQescapeIdentifier(rp->conn, cf->time_column, strlen(cf->time_column));
		lit = PQescapeLiteral(rp->conn, v, strlen(v));
		if (!id || !lit) {
			PQfreemem(id);
			PQfreemem(lit);
			goto oom;
		}
		buf_puts(&q, bound ? " AND " : "");
		buf_puts(&q, id);
		buf_puts(&q, bound ? " < " : " >= ");
		buf_puts(&q, lit);
		buf_puts(&q, "::timestamptz");
		PQfreemem(id);
		PQfreemem(lit);
	}
	buf_puts(&q, " ORDER BY ");
	for (int k = 0; k < 2; k++) {
		const char *name = k ? cf->id_column : cf->time_column;

		id = PQescapeIdentifier(rp->conn, name, strlen(name));
		if (!id)
			goto oom;
		buf_puts(&q, id);
		buf_puts(&q, k ? "" : ", ");
		PQfreemem(id);
	}
	if (q.failed)
		goto oom;
	res = run(rp, "declaring the cursor", q.data, PGRES_COMMAND_OK);
	buf_finish(&q);
	if (!res)
		return strstr(rp->err, "timestamp") ? EXIT_USAGE : EXIT_PG_SETUP;
	PQclear(res);
	return EXIT_OK;
oom:
	buf_finish(&q);
	snprintf(rp->err, sizeof(rp->err), "out of memory");
	return EXIT_FAILURE_RUNTIME;
}

static int republish_run(struct republish *rp)
{
	const struct relay_config *cf = rp->cf;
	char fetch[64], err[256];
	bool has_ts = false, done = false;
	int rc;

	rc = pg_setup(rp);
	if (rc != EXIT_OK)
		return rc;
	rp->map = mapper_create(cf, err, sizeof(err));
	rp->sink = sink_redis_create(cf, NULL);
	if (!rp->map || !rp->sink) {
		snprintf(rp->err, sizeof(rp->err), "%s", rp->map ? "out of memory" : err);
		return rp->map ? EXIT_FAILURE_RUNTIME : EXIT_USAGE;
	}
	/* Republished entries are not the slot's: no watermark, no owner. */
	sink_redis_set_republish(rp->sink);
	(void)sink_redis_set_owner(rp->sink, "republish", "-");
	while (!sink_redis_connected(rp->sink) && !interrupted) {
		rc = pump(rp, 200);
		if (rc >= 0)
			return rc;
	}
	rc = declare_cursor(rp, &has_ts);
	if (rc != EXIT_OK)
		return rc;
	log_info("republishing %s.%s rows with %s >= %s%s%s to %s (dedup window %llds)", rp->schema,
	         rp->table, cf->time_column, cf->since, cf->until ? " and < " : "",
	         cf->until ? cf->until : "", cf->stream, (long long)cf->dedup_window_s);
	snprintf(fetch, sizeof(fetch), "FETCH FORWARD %lld FROM outbox_republish",
	         (long long)cf->fetch_size);
	while (!done && !interrupted) {
		PGresult *res = run(rp, "fetching rows", fetch, PGRES_TUPLES_OK);

		if (!res)
			return EXIT_PG_SETUP;
		done = PQntuples(res) < cf->fetch_size;
		for (int i = 0; i < PQntuples(res); i++) {
			if (!queue_row(rp, res, i, has_ts)) {
				PQclear(res);
				snprintf(rp->err, sizeof(rp->err), "out of memory");
				return EXIT_FAILURE_RUNTIME;
			}
			/* Bounded memory: wait while the in-flight window is full. */
			while (sink_redis_full(rp->sink) && !interrupted) {
				rc = pump(rp, 100);
				if (rc >= 0) {
					PQclear(res);
					return rc;
				}
				progress(rp, false);
			}
		}
		PQclear(res);
		if (!sink_redis_flush(rp->sink, false)) {
			snprintf(rp->err, sizeof(rp->err), "out of memory");
			return EXIT_FAILURE_RUNTIME;
		}
		rc = pump(rp, 0);
		if (rc >= 0)
			return rc;
		progress(rp, false);
	}
	(void)sink_redis_flush(rp->sink, true);
	{
		int64_t deadline = time_mono_us() + (int64_t)cf->shutdown_timeout_ms * 1000;

		/* After an interrupt, wait for what is in flight up to --shutdown-timeout. */
		while (sink_redis_inflight_events(rp->sink) > 0 &&
		       (!interrupted || time_mono_us() < deadline)) {
			rc = pump(rp, 100);
			if (rc >= 0)
				return rc;
			progress(rp, false);
		}
	}
	return interrupted ? EXIT_FAILURE_RUNTIME : EXIT_OK;
}

/* See republish.h. */
void republish_usage(FILE *out)
{
	fprintf(out, "Usage: outbox-relay republish --since TIME [OPTIONS]\n"
	             "Publish the outbox rows of a time range again, deduplicated by event id: the\n"
	             "gap the relay refused to stream over (see README, \"Gaps\"). It takes the\n"
	             "relay's options and variables; the Republish section's are its own.\n");
	config_print_options(CONFIG_CMD_REPUBLISH, out);
}

int republish_main(const struct relay_config *cf)
{
	struct republish rp = {.cf = cf};
	const struct sink_stats *st;
	struct sigaction sa;
	int rc;

	if (!cf->since) {
		fprintf(stderr, "outbox-relay republish: --since TIME is required: the commit time an "
		                "exit 8 line printed, or earlier (see README, \"Gaps\")\n");
		return EXIT_USAGE;
	}
	if (cf->dedup_window_s == 0) {
		fprintf(stderr, "outbox-relay republish: --dedup-window 0 would publish again what the "
		                "stream published: give the relay's --dedup-window (default 1h)\n");
		return EXIT_USAGE;
	}
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigemptyset(&sa.sa_mask);
	(void)sigaction(SIGINT, &sa, NULL);
	(void)sigaction(SIGTERM, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	log_set_context("slot", cf->slot);
	rc = republish_run(&rp);
	if (rc != EXIT_OK && rc != EXIT_FAILURE_RUNTIME)
		log_error("%s", rp.err);
	else if (rc == EXIT_FAILURE_RUNTIME && !interrupted)
		log_error("%s", rp.err);
	st = rp.sink ? sink_redis_stats(rp.sink) : NULL;
	if (st) {
		printf("republish %s: rows=%llu published=%llu duplicates=%llu dead_lettered=%llu "
		       "unacknowledged=%llu peak_rss_kb=%ld\n",
		       interrupted     ? "interrupted (run it again: what was published is skipped as a "
		                         "duplicate)"
		       : rc == EXIT_OK ? "done"
		                       : "failed",
		       (unsigned long long)rp.rows, (unsigned long long)st->published,
		       (unsigned long long)st->duplicates, (unsigned long long)st->dead_lettered,
		       (unsigned long long)sink_redis_inflight_events(rp.sink), relay_peak_rss_kb());
		(void)fflush(stdout);
	}
	sink_redis_destroy(rp.sink);
	mapper_destroy(rp.map);
	PQfinish(rp.conn);
	for (int i = 0; rp.cols && i < rp.ncols; i++) {
		free(rp.cols[i].name);
		free(rp.cols[i].type);
	}
	free(rp.cols);
	free(rp.fields);
	free(rp.schema);
	free(rp.table);
	buf_finish(&rp.raw);
	return rc;
}
