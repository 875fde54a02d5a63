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
#include "pg_facts.h"
#include "pg_sql.h"
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
struct republish {
	const struct relay_config *cf;
	PGconn *conn;
	struct sink_redis *sink;
	struct mapper *map;
	struct pg_table tbl; /* the outbox table: its real names, its columns */
	uint64_t rows;
	uint64_t null_time;     /* rows skipped: their --time-column is NULL */
	uint64_t past_window;   /* rows selected whose --time-column is older than --dedup-window */
	uint64_t refused;       /* values from this size on are dead-lettered (Redis refused one) */
	struct sink_stats prev; /* the counts of the sinks of earlier passes */
	char session_tz[128];   /* the session's TimeZone before ours (UTC) replaced it */
	struct backoff bo;      /* Redis reconnects */
	int64_t last_progress_us;
	struct buf raw;
	struct w2j_field *fields;
	char err[1024];
};

/* One column's text output as the w2j_field wal2json would give for it. */
static void render(const struct pg_column *c, const char *v, bool null, struct w2j_field *f)
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
	} else if (pg_sql_type_is_number(c->oid)) {
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
	put_json_string(b, rp->tbl.schema, strlen(rp->tbl.schema));
	buf_puts(b, ",\"table\":");
	put_json_string(b, rp->tbl.name, strlen(rp->tbl.name));
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
	return pg_sql_run(rp->conn, what, sql, want, rp->err, sizeof(rp->err));
}

/* Connect, set the session up as the walsender renders values, resolve the table. */
static int pg_setup(struct republish *rp)
{
	const struct relay_config *cf = rp->cf;
	const char *keys[5] = {"connect_timeout", "fallback_application_name", "dbname"};
	const char *vals[5] = {"10", "outbox-relay republish", cf->pg_dsn};
	PGresult *res;
	int rc;

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
	/* The writers' zone, as this session got it from the server, the
	 * database, the role or PGTZ: what a timestamp without time zone means. */
	res = run(rp, "reading TimeZone", "SELECT pg_catalog.current_setting('TimeZone')",
	          PGRES_TUPLES_OK);
	if (!res)
		return EXIT_PG_SETUP;
	snprintf(rp->session_tz, sizeof(rp->session_tz), "%s", PQgetvalue(res, 0, 0));
	PQclear(res);
	/* wal2json renders with the walsender's settings, which the relay sets so. */
	res = run(rp, "session settings",
	          "SET TimeZone = 'UTC'; SET DateStyle = 'ISO, MDY'; SET bytea_output = 'hex'; "
	          "SET IntervalStyle = 'postgres'",
	          PGRES_COMMAND_OK);
	if (!res)
		return EXIT_PG_SETUP;
	PQclear(res);
	rc = pg_table_load(rp->conn, cf->table, true, &rp->tbl, rp->err, sizeof(rp->err));
	if (rc != EXIT_OK)
		return rc;
	rp->fields = calloc((size_t)rp->tbl.ncols + 1, sizeof(*rp->fields));
	if (!rp->fields) {
		snprintf(rp->err, sizeof(rp->err), "out of memory");
		return EXIT_FAILURE_RUNTIME;
	}
	for (int want = 0; want < 2; want++) {
		const char *name = want ? cf->id_column : cf->time_column;
		int i;

		for (i = 0; i < rp->tbl.ncols && strcmp(rp->tbl.cols[i].name, name) != 0; i++)
			;
		if (i == rp->tbl.ncols) {
			snprintf(rp->err, sizeof(rp->err),
			         "column \"%s\" (named by %s) does not exist in outbox table \"%s.%s\"", name,
			         want ? "--id-column" : "--time-column", rp->tbl.schema, rp->tbl.name);
			return EXIT_OUTBOX_SCHEMA;
		}
	}
	return EXIT_OK;
}

/* pump()'s answer when Redis refused a value too large: run again, those dead-lettered. */
#define RERUN 1000

/*
 * Move commands to Redis and replies back for at most timeout_ms; reconnect
 * (with backoff) when the connection failed. Returns an exit code for a
 * permanent failure (an ACL refusal, Redis state), RERUN when Redis refused
 * a value over its proto-max-bulk-len (resending would be refused again), or
 * -1.
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
	switch (sink_redis_errkind(s)) {
	case SINK_ERR_TOO_BIG: /* every resend would be refused the same way */
		rp->refused = sink_redis_refused_value(s);
		snprintf(rp->err, sizeof(rp->err), "Redis: %s", sink_redis_errmsg(s));
		return RERUN;
	case SINK_ERR_NOPERM:
		snprintf(rp->err, sizeof(rp->err), "Redis: %s", sink_redis_errmsg(s));
		return EXIT_REDIS_SETUP;
	case SINK_ERR_FOREIGN:
	case SINK_ERR_LOST:
		snprintf(rp->err, sizeof(rp->err), "Redis: %s", sink_redis_errmsg(s));
		return EXIT_REDIS_STATE;
	default:
		break;
	}
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

/* The largest value Redis takes: its proto-max-bulk-len, or below a size it refused. */
static uint64_t max_value(const struct republish *rp)
{
	uint64_t mv = sink_redis_max_value(rp->sink);

	if (rp->refused && (!mv || rp->refused - 1 < mv))
		mv = rp->refused - 1;
	return mv;
}

/* Map and queue one fetched row. Returns false only when out of memory. */
static bool queue_row(struct republish *rp, const PGresult *res, int row, bool has_ts)
{
	struct txn_info tx = {.has_xid = true};
	const char *reason = NULL, *ts;
	char why[200];
	struct event ev;
	enum map_result mr;
	int n = rp->tbl.ncols;

	for (int i = 0; i < n; i++)
		render(&rp->tbl.cols[i], PQgetvalue(res, row, i), PQgetisnull(res, row, i), &rp->fields[i]);
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
	                     rp->raw.len, max_value(rp), &ev, &reason, why, sizeof(why));
	if (mapper_failed(rp->map))
		return false;
	if (mr == MAP_DEAD_LETTER)
		log_warn("row %llu dead-lettered: %s", (unsigned long long)rp->rows + 1, reason);
	rp->rows++;
	return sink_redis_publish(rp->sink, &ev, mr == MAP_DEAD_LETTER);
}

/* Append name, quoted as an identifier. False when out of memory. */
static bool put_ident(struct republish *rp, struct buf *q, const char *name)
{
	char *id = PQescapeIdentifier(rp->conn, name, strlen(name));

	if (!id)
		return false;
	buf_puts(q, id);
	PQfreemem(id);
	return true;
}

/* Append the literal v. False when out of memory. */
static bool put_literal(struct republish *rp, struct buf *q, const char *v)
{
	char *lit = PQescapeLiteral(rp->conn, v, strlen(v));

	if (!lit)
		return false;
	buf_puts(q, lit);
	PQfreemem(lit);
	return true;
}

/* Append "schema"."table". False when out of memory. */
static bool put_table(struct republish *rp, struct buf *q)
{
	if (!put_ident(rp, q, rp->tbl.schema))
		return false;
	buf_putc(q, '.');
	return put_ident(rp, q, rp->tbl.name);
}

/*
 * Append the bound "<time column> <op> <v>". A timestamptz text names an
 * instant; a timestamp without time zone holds the writers' wall-clock time,
 * which is compared in the zone this session had before it was set to UTC
 * (the server's, the database's or the role's TimeZone, or PGTZ).
 */
static bool put_bound(struct republish *rp, struct buf *q, const char *op, const char *v)
{
	const struct pg_column *c = NULL;

	for (int i = 0; i < rp->tbl.ncols; i++)
		if (strcmp(rp->tbl.cols[i].name, rp->cf->time_column) == 0)
			c = &rp->tbl.cols[i];
	if (!put_ident(rp, q, rp->cf->time_column))
		return false;
	buf_puts(q, op);
	buf_putc(q, '(');
	if (!put_literal(rp, q, v))
		return false;
	buf_puts(q, "::timestamptz");
	if (c && c->oid == 1114) { /* timestamp without time zone */
		buf_puts(q, " AT TIME ZONE ");
		if (!put_literal(rp, q, rp->session_tz))
			return false;
	}
	buf_putc(q, ')');
	return true;
}

/* Append "<since bound> [AND <until bound>]": the rows republish selects. */
static bool put_range(struct republish *rp, struct buf *q, const char *since)
{
	if (!put_bound(rp, q, " >= ", since))
		return false;
	if (!rp->cf->until)
		return true;
	buf_puts(q, " AND ");
	return put_bound(rp, q, " < ", rp->cf->until);
}

/* The exit code of a failed query over the bounds: 2 when PostgreSQL cannot read a time. */
static int bound_error_rc(const struct republish *rp)
{
	return strstr(rp->err, "timestamp") || strstr(rp->err, "time zone") ? EXIT_USAGE
	                                                                    : EXIT_PG_SETUP;
}

/*
 * Count into rp->past_window the rows of [since, --until) whose time column
 * is older than --dedup-window, by this host's clock. Dedup keeps an id for
 * at least the window after it was published, and a row is published after
 * its time: so a row younger than the window that the streams already have
 * is always dropped, and one older may be published a second time (README,
 * "What republish cannot heal"). q is empty and left for the caller to reset.
 */
static int count_past_window(struct republish *rp, struct buf *q, const char *since)
{
	const struct relay_config *cf = rp->cf;
	char cut[64];
	PGresult *res;
	bool ok;

	rp->past_window = 0;
	if (cf->dedup_window_s <= 0)
		return EXIT_OK;
	if (!time_format_iso(time_now_us() - cf->dedup_window_s * 1000000, cut, sizeof(cut)))
		return EXIT_OK; /* a window reaching before 1970: nothing is older */
	buf_puts(q, "SELECT count(*) FROM ");
	ok = put_table(rp, q);
	buf_puts(q, " WHERE ");
	ok = ok && put_range(rp, q, since);
	buf_puts(q, " AND ");
	ok = ok && put_bound(rp, q, " < ", cut);
	if (!ok || q->failed) {
		snprintf(rp->err, sizeof(rp->err), "out of memory");
		return EXIT_FAILURE_RUNTIME;
	}
	res = run(rp, "counting the rows older than the dedup window", q->data, PGRES_TUPLES_OK);
	if (!res)
		return bound_error_rc(rp);
	rp->past_window = strtoull(PQgetvalue(res, 0, 0), NULL, 10);
	PQclear(res);
	return EXIT_OK;
}

/*
 * Declare the cursor over [since, --until) in commit order as far as SQL
 * can tell it: by --time-column (a transaction's start when it is now()),
 * then by transaction (the older xmin first), then within a transaction by
 * statement (cmin: the command id of the INSERT, kept in the row), then in
 * insert order within a statement as far as the table tells it (an identity
 * or nextval() column when it has one; else the row's place in the heap,
 * ctid, which a multi-row INSERT may fill out of order where earlier pages
 * have free space). Inside snapshot when it is not NULL (outbox-relay
 * heal: the slot's exported snapshot). Counts the rows whose --time-column
 * is NULL (no bound can select them) into rp->null_time.
 */
static int declare_cursor(struct republish *rp, const char *since, const char *snapshot,
                          bool *has_ts)
{
	const struct relay_config *cf = rp->cf;
	struct buf q = {0};
	PGresult *res;
	bool ok = true;
	int rc;

	res = run(rp, "BEGIN", "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY", PGRES_COMMAND_OK);
	if (!res)
		return EXIT_PG_SETUP;
	PQclear(res);
	if (snapshot) {
		buf_puts(&q, "SET TRANSACTION SNAPSHOT ");
		ok = put_literal(rp, &q, snapshot);
		res = !ok || q.failed ? NULL
		                      : run(rp, "importing the slot's snapshot", q.data, PGRES_COMMAND_OK);
		buf_finish(&q);
		if (!res)
			return ok ? EXIT_PG_SETUP : EXIT_FAILURE_RUNTIME;
		PQclear(res);
	}
	/* Commit times, when the server keeps them (track_commit_timestamp). */
	res = run(rp, "reading track_commit_timestamp",
	          "SELECT pg_catalog.current_setting('track_commit_timestamp')::bool", PGRES_TUPLES_OK);
	if (!res)
		return EXIT_PG_SETUP;
	*has_ts = strcmp(PQgetvalue(res, 0, 0), "t") == 0;
	PQclear(res);
	buf_puts(&q, "SELECT count(*) FROM ");
	ok = put_table(rp, &q);
	buf_puts(&q, " WHERE ");
	ok = ok && put_ident(rp, &q, cf->time_column);
	buf_puts(&q, " IS NULL");
	if (!ok || q.failed)
		goto oom;
	res = run(rp, "counting the rows without a time", q.data, PGRES_TUPLES_OK);
	buf_reset(&q);
	if (!res) {
		buf_finish(&q);
		return EXIT_PG_SETUP;
	}
	rp->null_time = strtoull(PQgetvalue(res, 0, 0), NULL, 10);
	PQclear(res);
	rc = count_past_window(rp, &q, since);
	buf_reset(&q);
	if (rc != EXIT_OK) {
		buf_finish(&q);
		return rc;
	}
	buf_puts(&q, "DECLARE outbox_republish NO SCROLL CURSOR FOR SELECT ");
	for (int i = 0; ok && i < rp->tbl.ncols; i++) {
		ok = put_ident(rp, &q, rp->tbl.cols[i].name);
		buf_puts(&q, ", ");
	}
	buf_puts(&q, *has_ts ? "xmin::text, pg_catalog.pg_xact_commit_timestamp(xmin)"
	                     : "xmin::text, NULL");
	buf_puts(&q, " FROM ");
	ok = ok && put_table(rp, &q);
	buf_puts(&q, " WHERE ");
	ok = ok && put_range(rp, &q, since);
	buf_puts(&q, " ORDER BY ");
	ok = ok && put_ident(rp, &q, cf->time_column);
	/* Within a transaction: by statement (cmin, the command that inserted the row). */
	buf_puts(&q, ", pg_catalog.age(xmin) DESC, (cmin::text)::bigint");
	for (int i = 0; ok && i < rp->tbl.ncols; i++) {
		if (!rp->tbl.cols[i].seq)
			continue;
		buf_puts(&q, ", ");
		ok = put_ident(rp, &q, rp->tbl.cols[i].name);
	}
	buf_puts(&q, ", ctid");
	if (!ok || q.failed)
		goto oom;
	res = run(rp, "declaring the cursor", q.data, PGRES_COMMAND_OK);
	buf_finish(&q);
	if (!res)
		return bound_error_rc(rp);
	PQclear(res);
	return EXIT_OK;
oom:
	buf_finish(&q);
	snprintf(rp->err, sizeof(rp->err), "out of memory");
	return EXIT_FAILURE_RUNTIME;
}

/* Wait until Redis acknowledged everything queued (after an interrupt, up to --shutdown-timeout).
 */
static int drain(struct republish *rp)
{
	int64_t deadline = time_mono_us() + (int64_t)rp->cf->shutdown_timeout_ms * 1000;
	int rc;

	(void)sink_redis_flush(rp->sink, true);
	while (sink_redis_acked_seq(rp->sink) < sink_redis_last_seq(rp->sink) &&
	       (!interrupted || time_mono_us() < deadline)) {
		rc = pump(rp, 100);
		if (rc >= 0)
			return rc;
		progress(rp, false);
	}
	return EXIT_OK;
}

/* One pass over the rows: EXIT_OK when all are acknowledged, RERUN, or an exit code. */
static int republish_pass(struct republish *rp, const char *since, const char *snapshot)
{
	const struct relay_config *cf = rp->cf;
	char fetch[64];
	bool has_ts = false, done = false;
	int rc;

	rc = declare_cursor(rp, since, snapshot, &has_ts);
	if (rc != EXIT_OK)
		return rc;
	if (rp->null_time)
		log_warn("%llu row(s) of %s.%s have a NULL %s: no time range selects them, so they "
		         "are not republished",
		         (unsigned long long)rp->null_time, rp->tbl.schema, rp->tbl.name, cf->time_column);
	if (rp->past_window)
		log_warn("%llu row(s) of %s.%s to republish have a %s older than --dedup-window (%llds): "
		         "those the streams already have may be published a second time, as dedup no "
		         "longer holds their ids (README, \"What republish cannot heal\")",
		         (unsigned long long)rp->past_window, rp->tbl.schema, rp->tbl.name, cf->time_column,
		         (long long)cf->dedup_window_s);
	log_info("republishing %s.%s rows with %s >= %s%s%s to %s (dedup window %llds)%s",
	         rp->tbl.schema, rp->tbl.name, cf->time_column, since, cf->until ? " and < " : "",
	         cf->until ? cf->until : "", cf->stream, (long long)cf->dedup_window_s,
	         snapshot ? ", in the slot's snapshot" : "");
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
	rc = drain(rp);
	if (rc != EXIT_OK)
		return rc;
	return interrupted ? EXIT_FAILURE_RUNTIME : EXIT_OK;
}

/* The counts of this and every earlier pass's sink. */
static struct sink_stats counts(const struct republish *rp)
{
	struct sink_stats c = rp->prev;
	const struct sink_stats *st = rp->sink ? sink_redis_stats(rp->sink) : NULL;

	if (st) {
		c.published += st->published;
		c.duplicates += st->duplicates;
		c.dead_lettered += st->dead_lettered;
	}
	return c;
}

/* A pass is over for good: its sink's counts go to rp->prev, the sink away. */
static void drop_sink(struct republish *rp)
{
	rp->prev = counts(rp);
	sink_redis_destroy(rp->sink);
	rp->sink = NULL;
}

/* See republish.h. */
struct republish *republish_create(const struct relay_config *cf)
{
	struct republish *rp = calloc(1, sizeof(*rp));

	if (rp)
		rp->cf = cf;
	return rp;
}

/* See republish.h. */
const char *republish_errmsg(const struct republish *rp)
{
	return rp->err;
}

/* See republish.h. */
bool republish_interrupted(void)
{
	return interrupted;
}

/* See republish.h. */
void republish_signals(void)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigemptyset(&sa.sa_mask);
	(void)sigaction(SIGINT, &sa, NULL);
	(void)sigaction(SIGTERM, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
}

/* See republish.h. */
int republish_connect(struct republish *rp)
{
	char err[256];
	int rc;

	if (!rp->map) {
		rp->map = mapper_create(rp->cf, err, sizeof(err));
		if (!rp->map) {
			snprintf(rp->err, sizeof(rp->err), "%s", err);
			return EXIT_USAGE;
		}
	}
	if (!rp->sink) {
		rp->sink = sink_redis_create(rp->cf, NULL);
		if (!rp->sink) {
			snprintf(rp->err, sizeof(rp->err), "out of memory");
			return EXIT_FAILURE_RUNTIME;
		}
		/* Republished entries are not the slot's: no watermark, no owner. */
		sink_redis_set_republish(rp->sink);
		(void)sink_redis_set_owner(rp->sink, "republish", "-");
	}
	while (!sink_redis_connected(rp->sink) && !interrupted) {
		rc = pump(rp, 200);
		if (rc >= 0)
			return rc == RERUN ? EXIT_REDIS_SETUP : rc;
	}
	return interrupted ? EXIT_FAILURE_RUNTIME : EXIT_OK;
}

/* See republish.h. */
const struct slot_record *republish_record(const struct republish *rp)
{
	return rp->sink ? sink_redis_record(rp->sink) : NULL;
}

/* See republish.h. */
int republish_rows(struct republish *rp, const char *since, const char *snapshot)
{
	int rc;

	if (!rp->conn) {
		rc = pg_setup(rp);
		if (rc != EXIT_OK)
			return rc;
	}
	for (;;) {
		PGresult *res;

		rc = republish_connect(rp);
		if (rc != EXIT_OK)
			return rc;
		rc = republish_pass(rp, since, snapshot);
		/* The transaction (and its cursor) ends here, whatever happened. */
		res = PQexec(rp->conn, rc == EXIT_OK ? "COMMIT" : "ROLLBACK");
		PQclear(res);
		if (rc != RERUN)
			return rc;
		/* What is unacknowledged includes the refused call: a new sink
		 * forgets it, and the run from the start skips what went through
		 * as duplicates. */
		log_warn("%s; republishing again from the start, with field values of %llu bytes or "
		         "more dead-lettered: raise proto-max-bulk-len, or set --max-event-bytes below "
		         "it",
		         rp->err, (unsigned long long)rp->refused);
		drop_sink(rp);
		rp->rows = 0;
	}
}

/* See republish.h. */
int republish_write_record(struct republish *rp, const char *system_id, const char *dbname,
                           uint32_t tli, lsn_t confirmed, lsn_t commit_lsn, int64_t commit_us)
{
	int rc = republish_connect(rp);

	if (rc != EXIT_OK)
		return rc;
	if (!sink_redis_set_owner(rp->sink, system_id, dbname)) {
		snprintf(rp->err, sizeof(rp->err), "database name \"%s\" is too long", dbname);
		return EXIT_PG_SETUP;
	}
	sink_redis_set_timeline(rp->sink, tli);
	if (!sink_redis_queue_record(rp->sink, confirmed, commit_lsn, commit_us)) {
		snprintf(rp->err, sizeof(rp->err), "out of memory");
		return EXIT_FAILURE_RUNTIME;
	}
	rc = drain(rp);
	if (rc == RERUN)
		rc = EXIT_REDIS_SETUP;
	if (rc == EXIT_OK && sink_redis_acked_seq(rp->sink) < sink_redis_last_seq(rp->sink)) {
		snprintf(rp->err, sizeof(rp->err), "interrupted before Redis acknowledged the slot record");
		rc = EXIT_FAILURE_RUNTIME;
	}
	return rc;
}

/* See republish.h. */
void republish_print_counts(const struct republish *rp, FILE *out)
{
	struct sink_stats c = counts(rp);

	fprintf(out,
	        "rows=%llu skipped_null_time=%llu past_window=%llu published=%llu duplicates=%llu "
	        "dead_lettered=%llu unacknowledged=%llu",
	        (unsigned long long)rp->rows, (unsigned long long)rp->null_time,
	        (unsigned long long)rp->past_window, (unsigned long long)c.published,
	        (unsigned long long)c.duplicates, (unsigned long long)c.dead_lettered,
	        (unsigned long long)(rp->sink ? sink_redis_inflight_events(rp->sink) : 0));
}

/* See republish.h. */
void republish_destroy(struct republish *rp)
{
	if (!rp)
		return;
	sink_redis_destroy(rp->sink);
	mapper_destroy(rp->map);
	PQfinish(rp->conn);
	pg_table_free(&rp->tbl);
	free(rp->fields);
	buf_finish(&rp->raw);
	free(rp);
}

/* See republish.h. */
void republish_usage(FILE *out)
{
	fprintf(out, "Usage: outbox-relay republish --since TIME [OPTIONS]\n"
	             "Publish the outbox rows of a time range again, deduplicated by event id: the\n"
	             "gap the relay refused to stream over (see README, \"Gaps\"; outbox-relay heal\n"
	             "does it with no window while the application writes). It takes the relay's\n"
	             "options and variables; the Republish section's are its own.\n");
	config_print_options(CONFIG_CMD_REPUBLISH, out);
}

int republish_main(const struct relay_config *cf)
{
	struct republish *rp;
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
	rp = republish_create(cf);
	if (!rp) {
		fprintf(stderr, "outbox-relay republish: out of memory\n");
		return EXIT_FAILURE_RUNTIME;
	}
	republish_signals();
	log_set_context("slot", cf->slot);
	rc = republish_rows(rp, cf->since, NULL);
	if (rc != EXIT_OK && !(rc == EXIT_FAILURE_RUNTIME && interrupted))
		log_error("%s", rp->err);
	if (rp->sink) {
		printf("republish %s: ",
		       interrupted     ? "interrupted (run it again: what was published is skipped as a "
		                         "duplicate)"
		       : rc == EXIT_OK ? "done"
		                       : "failed");
		republish_print_counts(rp, stdout);
		printf(" peak_rss_kb=%ld\n", relay_peak_rss_kb());
		(void)fflush(stdout);
	}
	republish_destroy(rp);
	return rc;
}
