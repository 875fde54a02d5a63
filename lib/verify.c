/*
 * verify.c - `outbox-relay verify`: the outbox rows of a time range against
 * the entries of their streams.
 *
 * One pass over each side. Rows: read in --time-column order through a
 * server-side cursor in one REPEATABLE READ READ ONLY transaction, 100 x
 * --fetch-size at a time; a row is kept (its event id and stream, rendered
 * with the relay's --stream template) until an entry of its id is read.
 * Entries: every stream the rows are routed to is read once, with XRANGE in
 * pages of PAGE entries, from where the last step stopped up to the entries
 * that only rows already read can own: no entry is older than its row's
 * transaction start, give or take --clock-skew, so after the rows up to time
 * T every entry before T - skew can be judged. Each entry whose event id is a
 * row kept is counted, the row forgotten, and its fields are compared byte
 * for byte with the row as rendered in SQL,
 * independently of the relay's decoder: every non-NULL column in table
 * order as its text output in the walsender's settings (UTC, ISO dates, hex
 * bytea), booleans as true/false, bytea without \x, NaN and infinite
 * numbers absent (wal2json prints them null), then nothing but the relay's
 * _lsn, _xid, _committed_at and republish's _republished. An entry committed
 * in the range whose id is no row kept is looked up by id: a row of the range
 * already read was matched before (duplicated), no row at all is an entry
 * without a row. Each aggregate's entries (--stream's stream, and the
 * aggregate_id field when the table has that column) must have non-decreasing
 * commit LSNs (_lsn). Rows no entry matched by the end are missing, unless a
 * dead letter holds their id or their stream was trimmed (both said, not
 * counted as discrepancies).
 *
 * Memory: the rows kept (those of the last --clock-skew and one step, and
 * rows not published yet) and the last LSN of each aggregate.
 *
 * Nothing is written anywhere: one READ ONLY transaction in PostgreSQL,
 * XRANGE and XINFO in Redis.
 */
#include "verify.h"

#include <hiredis/hiredis.h>
#include <libpq-fe.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "rclient.h"
#include "event.h"
#include "exitcode.h"
#include "log.h"
#include "lsn.h"
#include "pg_facts.h"
#include "pg_sql.h"
#include "redis_conn.h"
#include "wal2json.h"

#define PAGE 100  /* entries per XRANGE */
#define FIRST_N 5 /* ids shown per kind of discrepancy */

enum kind { K_MISSING, K_DUPLICATED, K_ORPHAN, K_DIFFERS, K_REORDERED, K_NKINDS };

static const char *const kind_name[K_NKINDS] = {"missing", "duplicated", "without_row", "differ",
                                                "reordered"};
static const char *const kind_text[K_NKINDS] = {
    "rows missing from their stream", "rows published more than once",
    "entries without a row in the table", "entries whose fields differ from their row",
    "aggregates out of commit order"};

struct report {
	uint64_t n;
	char *first[FIRST_N];
};

/* Open addressing: string -> index. */
struct strmap {
	char **keys;
	uint32_t *vals;
	size_t cap, n;
};

struct row {
	char *id;
	uint32_t stream;
	uint32_t seen;
	bool nulltime; /* no --time-column: its entry may be anywhere in the stream */
};

struct vstream {
	char *name;
	bool started; /* read up to pos (exclusive) */
	bool trimmed; /* XINFO: entries were deleted or trimmed */
	char pos[48];
};

struct verify {
	const struct relay_config *cf;
	PGconn *conn;
	redisContext *rc;    /* one server */
	struct rclient *cl;  /* or a cluster */
	struct pg_table tbl; /* the outbox table: its real names, its columns */
	int idcol, aggcol;
	char *qtable; /* quoted schema.table */
	char *idtype;
	struct stream_tmpl *tmpl;
	size_t ntcols; /* template columns */
	int64_t since_us, until_us;
	bool has_since, has_until;
	/* the rows kept: read, no entry of their id seen yet */
	struct row *rows;
	size_t nrows, rows_cap;
	struct strmap ids;
	struct vstream *streams;
	size_t nstreams;
	struct strmap snames;
	/* "<stream index>:<aggregate>" -> last _lsn */
	struct strmap aggs;
	lsn_t *agg_lsn;
	size_t agg_cap;
	/* the time of the last row read (ms); INT64_MAX once every row with a time is read */
	int64_t frontier_ms;
	char *look_sql; /* id, time (ms), in the range: for ids of no row kept */
	bool skew_exceeded;
	/* counts */
	uint64_t total_rows, entries_read, unroutable, dead_lettered, trimmed_missing, before_since,
	    republished;
	struct report rep[K_NKINDS];
	char err[1024];
	bool oom;
};

/* ---- small helpers ---- */

static uint64_t hash_str(const char *s)
{
	uint64_t h = 1469598103934665603ull;

	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 1099511628211ull;
	return h;
}

static bool strmap_grow(struct strmap *m)
{
	size_t ncap = m->cap ? m->cap * 2 : 1024;
	char **nk = calloc(ncap, sizeof(*nk));
	uint32_t *nv = calloc(ncap, sizeof(*nv));

	if (!nk || !nv) {
		free(nk);
		free(nv);
		return false;
	}
	for (size_t i = 0; i < m->cap; i++) {
		size_t j;

		if (!m->keys[i])
			continue;
		for (j = hash_str(m->keys[i]) & (ncap - 1); nk[j]; j = (j + 1) & (ncap - 1))
			;
		nk[j] = m->keys[i];
		nv[j] = m->vals[i];
	}
	free(m->keys);
	free(m->vals);
	m->keys = nk;
	m->vals = nv;
	m->cap = ncap;
	return true;
}

/* The index stored for key, or -1. */
static int64_t strmap_get(const struct strmap *m, const char *key)
{
	if (!m->cap)
		return -1;
	for (size_t j = hash_str(key) & (m->cap - 1); m->keys[j]; j = (j + 1) & (m->cap - 1))
		if (strcmp(m->keys[j], key) == 0)
			return m->vals[j];
	return -1;
}

/* Store key (the map takes it) -> val; the key must be new. */
static bool strmap_put(struct strmap *m, char *key, uint32_t val)
{
	size_t j;

	if ((m->n + 1) * 2 > m->cap && !strmap_grow(m))
		return false;
	for (j = hash_str(key) & (m->cap - 1); m->keys[j]; j = (j + 1) & (m->cap - 1))
		;
	m->keys[j] = key;
	m->vals[j] = val;
	m->n++;
	return true;
}

/* Forget every key; free_keys frees them too. */
static void strmap_clear(struct strmap *m, bool free_keys)
{
	for (size_t i = 0; i < m->cap; i++) {
		if (free_keys)
			free(m->keys[i]);
		m->keys[i] = NULL;
	}
	m->n = 0;
}

static void strmap_free(struct strmap *m, bool free_keys)
{
	strmap_clear(m, free_keys);
	free(m->keys);
	free(m->vals);
	*m = (struct strmap){0};
}

static char *dupn(const char *s, size_t n)
{
	char *d = malloc(n + 1);

	if (d) {
		memcpy(d, s, n);
		d[n] = '\0';
	}
	return d;
}

/* Record one discrepancy: counted, its first ids kept, every one logged at debug. */
static void found(struct verify *v, enum kind k, const char *stream, const char *id,
                  const char *detail)
{
	struct report *r = &v->rep[k];

	if (r->n < FIRST_N) {
		r->first[r->n] = dupn(id, strlen(id));
		if (!r->first[r->n])
			v->oom = true;
	}
	r->n++;
	log_debug("verify: %s: stream=%s id=%s%s%s", kind_name[k], stream, id, detail ? " " : "",
	          detail ? detail : "");
}

static bool reply_str(const redisReply *r)
{
	return r && (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS);
}

static bool str_is(const redisReply *r, const char *s)
{
	size_t n = strlen(s);

	return reply_str(r) && r->len == n && memcmp(r->str, s, n) == 0;
}

/* The value of field name in an entry's [f, v, f, v...] array, or NULL. */
static const redisReply *entry_field(const redisReply *fv, const char *name)
{
	for (size_t i = 0; fv && i + 1 < fv->elements; i += 2)
		if (str_is(fv->element[i], name))
			return fv->element[i + 1];
	return NULL;
}

static bool is_meta(const redisReply *name)
{
	return str_is(name, "_lsn") || str_is(name, "_xid") || str_is(name, "_committed_at") ||
	       str_is(name, "_republished");
}

/* ---- PostgreSQL ---- */

static PGresult *run(struct verify *v, const char *what, const char *sql, ExecStatusType want)
{
	return pg_sql_run(v->conn, what, sql, want, v->err, sizeof(v->err));
}

/* Column i as the text of the field the relay publishes, NULL when it publishes none. */
static void put_rendered(struct verify *v, struct buf *q, int i)
{
	char *id = PQescapeIdentifier(v->conn, v->tbl.cols[i].name, strlen(v->tbl.cols[i].name));

	if (!id) {
		v->oom = true;
		return;
	}
	if (v->tbl.cols[i].oid == 16) {
		buf_puts(q, "CASE WHEN ");
		buf_puts(q, id);
		buf_puts(q, " THEN 'true' WHEN NOT ");
		buf_puts(q, id);
		buf_puts(q, " THEN 'false' END");
	} else if (v->tbl.cols[i].oid == 17) {
		buf_puts(q, "pg_catalog.encode(");
		buf_puts(q, id);
		buf_puts(q, ", 'hex')");
	} else if (pg_sql_type_is_number(v->tbl.cols[i].oid)) {
		buf_puts(q, "CASE WHEN ");
		buf_puts(q, id);
		buf_puts(q, "::text IN ('NaN', 'Infinity', '-Infinity') THEN NULL ELSE ");
		buf_puts(q, id);
		buf_puts(q, "::text END");
	} else {
		buf_puts(q, id);
		buf_puts(q, "::text");
	}
	PQfreemem(id);
}

static int find_col(const struct verify *v, const char *name)
{
	for (int i = 0; i < v->tbl.ncols; i++)
		if (strcmp(v->tbl.cols[i].name, name) == 0)
			return i;
	return -1;
}

static int64_t to_unix_us(struct verify *v, const char *t, bool *ok)
{
	const char *p[1] = {t};
	PGresult *res =
	    PQexecParams(v->conn, "SELECT (extract(epoch FROM $1::timestamptz) * 1000000)::int8", 1,
	                 NULL, p, NULL, NULL, 0);
	int64_t us = 0;

	*ok = PQresultStatus(res) == PGRES_TUPLES_OK;
	if (*ok)
		us = strtoll(PQgetvalue(res, 0, 0), NULL, 10);
	else
		snprintf(v->err, sizeof(v->err), "--since/--until \"%s\" is not a timestamptz: %s", t,
		         PQerrorMessage(v->conn));
	PQclear(res);
	return us;
}

static int pg_setup(struct verify *v)
{
	const struct relay_config *cf = v->cf;
	const char *keys[5] = {"connect_timeout", "fallback_application_name", "dbname"};
	const char *vals[5] = {"10", "outbox-relay verify", cf->pg_dsn};
	PGresult *res;
	int rc;
	char *a, *b;
	bool ok;

	if (cf->pg_password) {
		keys[3] = "password";
		vals[3] = cf->pg_password;
	}
	v->conn = PQconnectdbParams(keys, vals, 1);
	if (!v->conn || PQstatus(v->conn) != CONNECTION_OK) {
		snprintf(v->err, sizeof(v->err), "could not connect to PostgreSQL: %s",
		         v->conn ? PQerrorMessage(v->conn) : "out of memory");
		if (strchr(v->err, '\n'))
			*strchr(v->err, '\n') = '\0';
		return EXIT_PG_SETUP;
	}
	res = run(v, "session settings",
	          "SET TimeZone = 'UTC'; SET DateStyle = 'ISO, MDY'; SET bytea_output = 'hex'; "
	          "SET IntervalStyle = 'postgres'; SET extra_float_digits = 1; "
	          "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY",
	          PGRES_COMMAND_OK);
	if (!res)
		return EXIT_PG_SETUP;
	PQclear(res);
	rc = pg_table_load(v->conn, cf->table, false, &v->tbl, v->err, sizeof(v->err));
	if (rc != EXIT_OK)
		return rc;
	v->idcol = find_col(v, cf->id_column);
	if (v->idcol < 0 || find_col(v, cf->time_column) < 0) {
		snprintf(v->err, sizeof(v->err),
		         "column \"%s\" (named by %s) does not exist in outbox table \"%s.%s\"",
		         v->idcol < 0 ? cf->id_column : cf->time_column,
		         v->idcol < 0 ? "--id-column" : "--time-column", v->tbl.schema, v->tbl.name);
		return EXIT_OUTBOX_SCHEMA;
	}
	v->aggcol = find_col(v, "aggregate_id");
	v->idtype = strdup(v->tbl.cols[v->idcol].type);
	a = PQescapeIdentifier(v->conn, v->tbl.schema, strlen(v->tbl.schema));
	b = PQescapeIdentifier(v->conn, v->tbl.name, strlen(v->tbl.name));
	if (a && b) {
		size_t n = strlen(a) + strlen(b) + 2;

		v->qtable = malloc(n);
		if (v->qtable)
			snprintf(v->qtable, n, "%s.%s", a, b);
	}
	PQfreemem(a);
	PQfreemem(b);
	if (!v->qtable || !v->idtype)
		return EXIT_FAILURE_RUNTIME;
	if (cf->since) {
		v->since_us = to_unix_us(v, cf->since, &ok);
		if (!ok)
			return EXIT_USAGE;
		v->has_since = true;
	}
	if (cf->until) {
		v->until_us = to_unix_us(v, cf->until, &ok);
		if (!ok)
			return EXIT_USAGE;
		v->has_until = true;
	}
	return EXIT_OK;
}

/* The cursor: each row's rendered id, then its rendered template columns. */
/* --time-column in milliseconds since the epoch. */
static void put_time_ms(struct verify *v, struct buf *q)
{
	char *id = PQescapeIdentifier(v->conn, v->cf->time_column, strlen(v->cf->time_column));

	if (!id) {
		v->oom = true;
		return;
	}
	buf_puts(q, "(extract(epoch FROM ");
	buf_puts(q, id);
	buf_puts(q, ") * 1000)::int8");
	PQfreemem(id);
}

/* "true AND <time> >= since AND <time> < until": the range's predicate. */
static void put_range(struct verify *v, struct buf *q)
{
	const struct relay_config *cf = v->cf;
	char *id;

	buf_puts(q, "true");
	for (int bound = 0; bound < 2; bound++) {
		const char *val = bound ? cf->until : cf->since;
		char *lit;

		if (!val)
			continue;
		id = PQescapeIdentifier(v->conn, cf->time_column, strlen(cf->time_column));
		lit = PQescapeLiteral(v->conn, val, strlen(val));
		if (id && lit) {
			buf_puts(q, " AND ");
			buf_puts(q, id);
			buf_puts(q, bound ? " < " : " >= ");
			buf_puts(q, lit);
			buf_puts(q, "::timestamptz");
		} else {
			v->oom = true;
		}
		PQfreemem(id);
		PQfreemem(lit);
	}
}

static int declare_cursor(struct verify *v)
{
	const struct relay_config *cf = v->cf;
	struct buf q = {0};
	PGresult *res;
	char *id;

	buf_puts(&q, "DECLARE outbox_verify NO SCROLL CURSOR FOR SELECT ");
	put_rendered(v, &q, v->idcol);
	for (size_t t = 0; t < v->ntcols; t++) {
		int c = find_col(v, stream_tmpl_column(v->tmpl, t));

		buf_puts(&q, ", ");
		if (c < 0)
			buf_puts(&q, "NULL::text");
		else
			put_rendered(v, &q, c);
	}
	buf_puts(&q, ", ");
	put_time_ms(v, &q);
	buf_puts(&q, " FROM ");
	buf_puts(&q, v->qtable);
	buf_puts(&q, " WHERE ");
	put_range(v, &q);
	/* In time order, rows without time last: entries are judged as rows are read. */
	id = PQescapeIdentifier(v->conn, cf->time_column, strlen(cf->time_column));
	buf_puts(&q, " ORDER BY ");
	buf_puts(&q, id ? id : "1");
	PQfreemem(id);
	if (q.failed || v->oom || !id) {
		buf_finish(&q);
		return EXIT_FAILURE_RUNTIME;
	}
	res = run(v, "declaring the cursor", q.data, PGRES_COMMAND_OK);
	buf_finish(&q);
	if (!res)
		return EXIT_PG_SETUP;
	PQclear(res);
	return EXIT_OK;
}

/* ---- Redis ---- */

static redisReply *rcmd(struct verify *v, const char *key, int argc, const char **argv)
{
	redisReply *r;

	if (v->cl)
		return rclient_call(v->cl, key, argc, argv, v->err, sizeof(v->err));
	r = redisCommandArgv(v->rc, argc, argv, NULL);
	if (!r)
		snprintf(v->err, sizeof(v->err), "Redis: %s",
		         v->rc->errstr[0] ? v->rc->errstr : "connection lost");
	return r;
}

static int redis_setup(struct verify *v)
{
	const struct relay_config *cf = v->cf;
	bool permanent;

	if (cf->redis.cluster) {
		v->cl = rclient_create(&cf->redis, cf->redis_timeout_ms);
		if (!v->cl)
			return EXIT_FAILURE_RUNTIME;
		if (!rclient_connect(v->cl, &permanent, v->err, sizeof(v->err)))
			return EXIT_REDIS_SETUP;
	} else {
		struct redis_conn one;

		(void)redis_conn_connect(&one, &cf->redis, cf->redis_timeout_ms, v->err, sizeof(v->err));
		v->rc = one.c;
		if (!v->rc)
			return EXIT_REDIS_SETUP;
	}
	return EXIT_OK;
}

/* Was anything ever deleted from the stream (trimmed, XDEL)? Redis 7's XINFO says. */
static bool stream_trimmed(struct verify *v, const char *name)
{
	const char *argv[] = {"XINFO", "STREAM", name};
	redisReply *r = rcmd(v, name, 3, argv);
	bool trimmed = false;

	if (r && r->type == REDIS_REPLY_ARRAY) {
		for (size_t i = 0; i + 1 < r->elements; i += 2) {
			if (str_is(r->element[i], "max-deleted-entry-id"))
				trimmed = !str_is(r->element[i + 1], "0-0");
		}
	}
	freeReplyObject(r);
	return trimmed;
}

/* The id after eid ("ms-seq"), for the next XRANGE page. */
static void next_id(const char *eid, char *out, size_t len)
{
	unsigned long long ms = 0, seq = 0;

	if (sscanf(eid, "%llu-%llu", &ms, &seq) != 2)
		ms = seq = 0;
	if (seq == UINT64_MAX) {
		ms++;
		seq = 0;
	} else {
		seq++;
	}
	snprintf(out, len, "%llu-%llu", ms, seq);
}

/* A PostgreSQL array literal of the ids. */
static void put_array(struct buf *b, const char *const *ids, size_t n)
{
	buf_putc(b, '{');
	for (size_t i = 0; i < n; i++) {
		if (i)
			buf_putc(b, ',');
		buf_putc(b, '"');
		for (const char *p = ids[i]; *p; p++) {
			if (*p == '"' || *p == '\\')
				buf_putc(b, '\\');
			buf_putc(b, *p);
		}
		buf_putc(b, '"');
	}
	buf_putc(b, '}');
}

/*
 * Run sql with $1 the array of ids, inside a savepoint: an id the column's
 * type refuses (a corrupted entry) must not end the transaction and its
 * cursor. On such an error, again with the ids compared as text.
 */
static PGresult *by_ids(struct verify *v, const char *cols, const char *const *ids, size_t n)
{
	struct buf q = {0}, arr = {0};
	PGresult *res = NULL;
	const char *p[1];
	char *col = PQescapeIdentifier(v->conn, v->cf->id_column, strlen(v->cf->id_column));

	put_array(&arr, ids, n);
	for (int attempt = 0; attempt < 2 && col && !arr.failed; attempt++) {
		PGresult *sp;

		buf_reset(&q);
		buf_puts(&q, "SELECT ");
		buf_puts(&q, cols);
		buf_puts(&q, " FROM ");
		buf_puts(&q, v->qtable);
		buf_puts(&q, " WHERE ");
		buf_puts(&q, col);
		if (attempt == 0) {
			buf_puts(&q, " = ANY($1::");
			buf_puts(&q, v->idtype);
			buf_puts(&q, "[])");
		} else {
			buf_puts(&q, "::text = ANY($1::text[])");
		}
		if (q.failed)
			break;
		sp = run(v, "savepoint", "SAVEPOINT verify_ids", PGRES_COMMAND_OK);
		if (!sp)
			break;
		PQclear(sp);
		p[0] = arr.data;
		res = PQexecParams(v->conn, q.data, 1, NULL, p, NULL, NULL, 0);
		if (PQresultStatus(res) == PGRES_TUPLES_OK) {
			sp = run(v, "savepoint", "RELEASE SAVEPOINT verify_ids", PGRES_COMMAND_OK);
			PQclear(sp);
			break;
		}
		snprintf(v->err, sizeof(v->err), "looking rows up by id: %s", PQerrorMessage(v->conn));
		PQclear(res);
		res = NULL;
		sp = run(v, "savepoint", "ROLLBACK TO SAVEPOINT verify_ids", PGRES_COMMAND_OK);
		if (!sp)
			break;
		PQclear(sp);
	}
	PQfreemem(col);
	buf_finish(&q);
	buf_finish(&arr);
	return res;
}

/* Compare one entry's fields with the row (columns 1.. of res's row r). */
static void compare(struct verify *v, const char *stream, const char *id, const redisReply *fv,
                    const PGresult *res, int r)
{
	size_t e = 0;
	char detail[300];

	for (int c = 0; c < v->tbl.ncols; c++) {
		const char *name = v->tbl.cols[c].name;
		const char *val;
		size_t len;

		if (PQgetisnull(res, r, c + 1))
			continue;
		val = PQgetvalue(res, r, c + 1);
		len = (size_t)PQgetlength(res, r, c + 1);
		while (e + 1 < fv->elements && is_meta(fv->element[e]))
			e += 2;
		if (e + 1 >= fv->elements) {
			snprintf(detail, sizeof(detail), "(field \"%s\" is missing)", name);
			found(v, K_DIFFERS, stream, id, detail);
			return;
		}
		if (!str_is(fv->element[e], name)) {
			snprintf(detail, sizeof(detail), "(field \"%s\" where \"%s\" was expected)",
			         reply_str(fv->element[e]) ? fv->element[e]->str : "?", name);
			found(v, K_DIFFERS, stream, id, detail);
			return;
		}
		if (!reply_str(fv->element[e + 1]) || fv->element[e + 1]->len != len ||
		    memcmp(fv->element[e + 1]->str, val, len) != 0) {
			size_t got = reply_str(fv->element[e + 1]) ? fv->element[e + 1]->len : 0, at = 0;

			while (at < got && at < len && fv->element[e + 1]->str[at] == val[at])
				at++;
			snprintf(detail, sizeof(detail),
			         "(field \"%s\": %zu bytes, the row's %zu; first difference at byte %zu)", name,
			         got, len, at);
			found(v, K_DIFFERS, stream, id, detail);
			return;
		}
		e += 2;
	}
	for (; e + 1 < fv->elements; e += 2) {
		if (!is_meta(fv->element[e])) {
			snprintf(detail, sizeof(detail), "(field \"%s\" is not a column of the row)",
			         reply_str(fv->element[e]) ? fv->element[e]->str : "?");
			found(v, K_DIFFERS, stream, id, detail);
			return;
		}
	}
}

/* The SELECT list of the fields compared: the id, then every rendered column. */
static char *compare_cols(struct verify *v)
{
	struct buf q = {0};

	put_rendered(v, &q, v->idcol);
	for (int c = 0; c < v->tbl.ncols; c++) {
		buf_puts(&q, ", ");
		put_rendered(v, &q, c);
	}
	if (q.failed || v->oom) {
		buf_finish(&q);
		return NULL;
	}
	return q.data;
}

/* The row of res (column 0: the rendered id) whose id is id, or -1. */
static int row_of(const PGresult *res, const char *id)
{
	for (int r = 0; r < PQntuples(res); r++)
		if (strcmp(PQgetvalue(res, r, 0), id) == 0)
			return r;
	return -1;
}

struct pending {
	const char *id;
	const redisReply *fv;
	const char *entry; /* its entry id */
};

/* Per aggregate (of stream si), commit LSNs never go down. False: out of memory. */
static bool judge_order(struct verify *v, size_t si, const char *stream, const char *id,
                        const redisReply *ent, const redisReply *fv)
{
	const redisReply *l = entry_field(fv, "_lsn");
	const redisReply *ag = v->aggcol >= 0 ? entry_field(fv, "aggregate_id") : NULL;
	const char *agg = reply_str(ag) ? ag->str : "";
	char head[24];
	struct buf key = {0};
	int64_t ai;
	lsn_t lsn;

	if (!reply_str(l) || !lsn_parse(l->str, l->len, &lsn))
		return true;
	snprintf(head, sizeof(head), "%zu:", si);
	buf_puts(&key, head);
	buf_puts(&key, agg);
	buf_putc(&key, '\0');
	if (key.failed) {
		v->oom = true;
		return false;
	}
	ai = strmap_get(&v->aggs, key.data);
	if (ai < 0) {
		if (v->aggs.n >= v->agg_cap) {
			size_t ncap = v->agg_cap ? v->agg_cap * 2 : 1024;
			lsn_t *n = realloc(v->agg_lsn, ncap * sizeof(*n));

			if (!n) {
				buf_finish(&key);
				v->oom = true;
				return false;
			}
			v->agg_lsn = n;
			v->agg_cap = ncap;
		}
		if (!strmap_put(&v->aggs, key.data, (uint32_t)v->aggs.n)) {
			buf_finish(&key);
			v->oom = true;
			return false;
		}
		v->agg_lsn[v->aggs.n - 1] = lsn; /* the map owns key.data now */
		return true;
	}
	if (lsn < v->agg_lsn[ai]) {
		char detail[200], a[LSN_STRLEN], b[LSN_STRLEN];

		snprintf(detail, sizeof(detail),
		         "(aggregate \"%.64s\": commit %s after commit %s, entry %s)", agg,
		         lsn_format(lsn, a), lsn_format(v->agg_lsn[ai], b),
		         reply_str(ent->element[0]) ? ent->element[0]->str : "?");
		found(v, K_REORDERED, stream, id, detail);
	} else {
		v->agg_lsn[ai] = lsn;
	}
	buf_finish(&key);
	return true;
}

/*
 * Entries committed in the range whose id is no row kept: a row of the range
 * already read had its entry before (duplicated); no row at all: an entry
 * without a row; a row of the range not read yet: Redis's clock ran more than
 * --clock-skew behind PostgreSQL's, and this range cannot be judged so.
 */
static bool judge_unkept(struct verify *v, const char *stream, const struct pending *look,
                         size_t nlook)
{
	const char *ids[PAGE];
	PGresult *res;

	for (size_t i = 0; i < nlook; i++)
		ids[i] = look[i].id;
	res = by_ids(v, v->look_sql, ids, nlook);
	if (!res)
		return false;
	for (size_t i = 0; i < nlook; i++) {
		int r = row_of(res, look[i].id);

		if (r < 0) {
			found(v, K_ORPHAN, stream, look[i].id, NULL);
			continue;
		}
		if (PQgetisnull(res, r, 2) || strcmp(PQgetvalue(res, r, 2), "t") != 0)
			continue; /* its row is outside the range: not judged here */
		if (PQgetisnull(res, r, 1) && v->frontier_ms != INT64_MAX)
			continue; /* a row without time, not read yet: the last step reads for it again */
		if (!PQgetisnull(res, r, 1) && v->frontier_ms != INT64_MAX &&
		    strtoll(PQgetvalue(res, r, 1), NULL, 10) >= v->frontier_ms) {
			snprintf(v->err, sizeof(v->err),
			         "entry %s of stream %s (event id %s) is older than its row's --time-column "
			         "by more than --clock-skew (%d ms): Redis's clock runs behind PostgreSQL's; "
			         "run again with a larger --clock-skew",
			         look[i].entry, stream, look[i].id, v->cf->clock_skew_ms);
			v->skew_exceeded = true;
			PQclear(res);
			return false;
		}
		found(v, K_DUPLICATED, stream, look[i].id, "(its row was matched by an earlier entry)");
	}
	PQclear(res);
	return true;
}

/*
 * One page of entries of stream si: membership, fields, order, entries
 * without a row. A rescan (rows without time, at the end) only matches rows
 * kept. Returns false on a failure (v->err).
 */
static bool judge_page(struct verify *v, size_t si, const redisReply *page, const char *cmp_sql,
                       bool rescan)
{
	struct vstream *s = &v->streams[si];
	struct pending cmp[PAGE], look[PAGE];
	const char *ids[PAGE];
	size_t ncmp = 0, nlook = 0;
	PGresult *res;

	for (size_t i = 0; i < page->elements && i < PAGE; i++) {
		const redisReply *ent = page->element[i], *fv, *idr, *t;
		const char *eid;
		int64_t ri, committed = 0;
		bool in_window = true;
		char *id;

		if (ent->type != REDIS_REPLY_ARRAY || ent->elements != 2)
			continue;
		fv = ent->element[1];
		if (fv->type != REDIS_REPLY_ARRAY)
			continue;
		eid = reply_str(ent->element[0]) ? ent->element[0]->str : "?";
		if (!rescan)
			v->entries_read++;
		idr = entry_field(fv, v->cf->id_column);
		t = entry_field(fv, "_committed_at");
		if (reply_str(t) && time_parse_pg(t->str, t->len, &committed)) {
			in_window = (!v->has_since || committed >= v->since_us) &&
			            (!v->has_until || committed < v->until_us);
			if (v->has_since && committed < v->since_us && !rescan)
				v->before_since++;
		}
		if (!reply_str(idr)) {
			if (!rescan && in_window)
				found(v, K_ORPHAN, s->name, eid, "(no id field)");
			continue;
		}
		id = idr->str;
		ri = strmap_get(&v->ids, id);
		if (ri >= 0) {
			struct row *row = &v->rows[ri];

			if (++row->seen == 2)
				found(v, K_DUPLICATED, s->name, id, NULL);
			else if (row->seen == 1)
				cmp[ncmp++] = (struct pending){id, fv, eid};
		} else if (!rescan && in_window) {
			look[nlook++] = (struct pending){id, fv, eid};
		}
		if (rescan || !in_window)
			continue;
		if (entry_field(fv, "_republished")) {
			v->republished++;
			continue;
		}
		if (!judge_order(v, si, s->name, id, ent, fv))
			return false;
	}
	if (ncmp) {
		for (size_t i = 0; i < ncmp; i++)
			ids[i] = cmp[i].id;
		res = by_ids(v, cmp_sql, ids, ncmp);
		if (!res)
			return false;
		for (size_t i = 0; i < ncmp; i++) {
			int r = row_of(res, cmp[i].id);

			if (r < 0) {
				/* Its row was read but is not found by id: the id was rendered otherwise. */
				found(v, K_DIFFERS, s->name, cmp[i].id, "(the row is not found by this id)");
				continue;
			}
			compare(v, s->name, cmp[i].id, cmp[i].fv, res, r);
		}
		PQclear(res);
	}
	return nlook == 0 || judge_unkept(v, s->name, look, nlook);
}

/*
 * Entries of stream si from pos up to end (XRANGE ids), page by page, each
 * page judged; pos moves past every entry read.
 */
static bool read_pages(struct verify *v, size_t si, char *pos, size_t poslen, const char *end,
                       const char *cmp_sql, bool rescan)
{
	const char *name = v->streams[si].name;
	char count[16];
	const char *argv[6] = {"XRANGE", name, pos, end, "COUNT", count};

	snprintf(count, sizeof(count), "%d", PAGE);
	for (;;) {
		redisReply *r = rcmd(v, name, 6, argv);
		size_t n;
		bool ok;

		if (!r)
			return false;
		if (r->type == REDIS_REPLY_ERROR) {
			snprintf(v->err, sizeof(v->err), "XRANGE %s: %s", name, r->str);
			freeReplyObject(r);
			return false;
		}
		n = r->type == REDIS_REPLY_ARRAY ? r->elements : 0;
		ok = n == 0 || judge_page(v, si, r, cmp_sql, rescan);
		if (ok && n > 0) {
			const redisReply *last = r->element[n - 1];

			if (last->type == REDIS_REPLY_ARRAY && last->elements == 2 &&
			    reply_str(last->element[0]))
				next_id(last->element[0]->str, pos, poslen);
			else
				n = 0;
		}
		freeReplyObject(r);
		if (!ok)
			return false;
		if (n < PAGE)
			return true;
	}
}

/* Read stream si on from where the last step stopped, up to end. */
static bool read_stream(struct verify *v, size_t si, const char *end, const char *cmp_sql)
{
	struct vstream *s = &v->streams[si];

	if (!s->started) {
		/* From --since, less the skew: no entry of a row of the range is older. */
		int64_t from = v->has_since ? v->since_us / 1000 - v->cf->clock_skew_ms : -1;

		if (from > 0)
			snprintf(s->pos, sizeof(s->pos), "%lld-0", (long long)from);
		else
			snprintf(s->pos, sizeof(s->pos), "-");
		s->trimmed = stream_trimmed(v, s->name);
		s->started = true;
	}
	return read_pages(v, si, s->pos, sizeof(s->pos), end, cmp_sql, false);
}

/*
 * Rows without time (read last) may have entries anywhere in their stream,
 * also before they were read: read the stream again for the ones still kept.
 */
static bool rescan_stream(struct verify *v, size_t si, const char *cmp_sql)
{
	char start[48] = "-";

	return read_pages(v, si, start, sizeof(start), "+", cmp_sql, true);
}

/* Rows no entry matched: in a dead letter, in a trimmed stream, or missing. */
static bool judge_missing(struct verify *v)
{
	size_t nmissing = 0;
	char *dl_hit = NULL;

	for (size_t i = 0; i < v->nrows; i++)
		nmissing += v->rows[i].seen == 0;
	if (nmissing == 0)
		return true;
	dl_hit = calloc(v->nrows, 1);
	if (!dl_hit) {
		v->oom = true;
		return false;
	}
	/* Dead letters keep the row as wal2json printed it ("raw"): look for the ids there. */
	if (nmissing <= 10000) {
		char start[64] = "-", count[16];
		const char *name = v->cf->dead_letter_stream;
		const char *argv[6] = {"XRANGE", name, start, "+", "COUNT", count};

		snprintf(count, sizeof(count), "%d", PAGE);
		for (;;) {
			redisReply *r = rcmd(v, name, 6, argv);
			size_t n;

			if (!r) {
				free(dl_hit);
				return false;
			}
			n = r->type == REDIS_REPLY_ARRAY ? r->elements : 0;
			for (size_t e = 0; e < n; e++) {
				const redisReply *ent = r->element[e], *raw;

				if (ent->type != REDIS_REPLY_ARRAY || ent->elements != 2)
					continue;
				raw = entry_field(ent->element[1], "raw");
				if (!reply_str(raw))
					continue;
				for (size_t i = 0; i < v->nrows; i++)
					if (v->rows[i].seen == 0 && !dl_hit[i] && strstr(raw->str, v->rows[i].id))
						dl_hit[i] = 1;
				if (e == n - 1 && reply_str(ent->element[0]))
					next_id(ent->element[0]->str, start, sizeof(start));
			}
			freeReplyObject(r);
			if (n < PAGE)
				break;
		}
	}
	for (size_t i = 0; i < v->nrows; i++) {
		struct row *row = &v->rows[i];

		if (row->seen)
			continue;
		if (dl_hit[i])
			v->dead_lettered++;
		else if (v->streams[row->stream].trimmed)
			v->trimmed_missing++;
		else
			found(v, K_MISSING, v->streams[row->stream].name, row->id, NULL);
	}
	free(dl_hit);
	return true;
}

/* Forget every row kept. */
static void rows_clear(struct verify *v)
{
	strmap_clear(&v->ids, false);
	for (size_t i = 0; i < v->nrows; i++)
		free(v->rows[i].id);
	v->nrows = 0;
}

/* Forget the rows an entry matched: only rows still waiting for theirs are kept. */
static bool rows_compact(struct verify *v)
{
	size_t n = 0;

	strmap_clear(&v->ids, false);
	for (size_t i = 0; i < v->nrows; i++) {
		if (v->rows[i].seen) {
			free(v->rows[i].id);
			continue;
		}
		v->rows[n] = v->rows[i];
		if (!strmap_put(&v->ids, v->rows[n].id, (uint32_t)n)) {
			for (size_t j = i + 1; j < v->nrows; j++)
				free(v->rows[j].id);
			v->nrows = n + 1;
			return false;
		}
		n++;
	}
	v->nrows = n;
	return true;
}

/* Keep one cursor row. */
static bool row_add(struct verify *v, const PGresult *res, int r, struct w2j_field *tf,
                    struct buf *sname)
{
	const char *reason, *id;
	bool nulltime = PQgetisnull(res, r, (int)v->ntcols + 1);
	int64_t si;
	struct row *row;

	v->total_rows++;
	/* In time order, rows without time last: every row up to this time is read. */
	v->frontier_ms =
	    nulltime ? INT64_MAX : strtoll(PQgetvalue(res, r, (int)v->ntcols + 1), NULL, 10);
	if (PQgetisnull(res, r, 0) || PQgetlength(res, r, 0) == 0) {
		v->unroutable++;
		return true;
	}
	id = PQgetvalue(res, r, 0);
	for (size_t t = 0; t < v->ntcols; t++) {
		tf[t].name = stream_tmpl_column(v->tmpl, t);
		tf[t].name_len = strlen(tf[t].name);
		tf[t].type = NULL;
		tf[t].type_len = 0;
		tf[t].kind = PQgetisnull(res, r, (int)t + 1) ? W2J_KIND_NULL : W2J_KIND_STRING;
		tf[t].value = tf[t].kind == W2J_KIND_NULL ? NULL : PQgetvalue(res, r, (int)t + 1);
		tf[t].value_len = (size_t)PQgetlength(res, r, (int)t + 1);
	}
	if (!stream_tmpl_render(v->tmpl, tf, v->ntcols, sname, &reason)) {
		v->unroutable++; /* a dead letter (routing): not judged */
		return true;
	}
	buf_putc(sname, '\0');
	if (sname->failed)
		return false;
	si = strmap_get(&v->snames, sname->data);
	if (si < 0) {
		struct vstream *ns = realloc(v->streams, (v->nstreams + 1) * sizeof(*ns));
		char *name = strdup(sname->data);

		if (!ns || !name) {
			free(name);
			if (ns)
				v->streams = ns;
			return false;
		}
		v->streams = ns;
		v->streams[v->nstreams] = (struct vstream){.name = name};
		if (!strmap_put(&v->snames, name, (uint32_t)v->nstreams))
			return false;
		si = (int64_t)v->nstreams++;
	}
	if (strmap_get(&v->ids, id) >= 0) {
		v->unroutable++; /* the same id twice in the table: only the first can be published */
		return true;
	}
	if (v->nrows == v->rows_cap) {
		size_t ncap = v->rows_cap ? v->rows_cap * 2 : 1024;
		struct row *nr = realloc(v->rows, ncap * sizeof(*nr));

		if (!nr)
			return false;
		v->rows = nr;
		v->rows_cap = ncap;
	}
	row = &v->rows[v->nrows];
	row->id = strdup(id);
	row->stream = (uint32_t)si;
	row->seen = 0;
	row->nulltime = nulltime;
	if (!row->id || !strmap_put(&v->ids, row->id, (uint32_t)v->nrows)) {
		free(row->id);
		return false;
	}
	v->nrows++;
	return true;
}

/*
 * Read every stream on as far as the rows read allow: entries up to the last
 * row's time less --clock-skew (less 2 ms: the cursor's milliseconds are
 * rounded), every entry once all rows are read; then forget matched rows.
 */
static int step(struct verify *v, const char *cmp_sql, bool all_read)
{
	char end[32] = "+";

	if (!all_read && v->frontier_ms != INT64_MAX) {
		int64_t upto = v->frontier_ms - v->cf->clock_skew_ms - 2;

		if (upto < 0)
			return EXIT_OK;
		snprintf(end, sizeof(end), "%lld", (long long)upto);
	}
	for (size_t i = 0; i < v->nstreams; i++)
		if (!read_stream(v, i, end, cmp_sql))
			goto failed;
	if (!rows_compact(v)) {
		v->oom = true;
		goto failed;
	}
	if (all_read) {
		bool *again = calloc(v->nstreams + 1, sizeof(*again));

		if (!again) {
			v->oom = true;
			goto failed;
		}
		for (size_t i = 0; i < v->nrows; i++)
			again[v->rows[i].stream] |= v->rows[i].nulltime;
		for (size_t i = 0; i < v->nstreams; i++) {
			if (again[i] && !rescan_stream(v, i, cmp_sql)) {
				free(again);
				goto failed;
			}
		}
		free(again);
	}
	return EXIT_OK;
failed:
	return v->oom ? EXIT_FAILURE_RUNTIME : v->skew_exceeded ? EXIT_USAGE : EXIT_REDIS_SETUP;
}

static int verify_run(struct verify *v)
{
	const struct relay_config *cf = v->cf;
	int64_t stepn = cf->fetch_size * 100, since_step = 0;
	char fetch[64], err[256];
	struct w2j_field *tf;
	struct buf sname = {0}, look = {0};
	char *cmp_sql;
	bool done = false;
	int rc;

	v->tmpl = stream_tmpl_compile(cf->stream, err, sizeof(err));
	if (!v->tmpl) {
		snprintf(v->err, sizeof(v->err), "--stream: %s", err);
		return EXIT_USAGE;
	}
	v->ntcols = stream_tmpl_ncolumns(v->tmpl);
	rc = pg_setup(v);
	if (rc != EXIT_OK)
		return rc;
	rc = redis_setup(v);
	if (rc != EXIT_OK)
		return rc;
	rc = declare_cursor(v);
	if (rc != EXIT_OK)
		return rc;
	cmp_sql = compare_cols(v);
	put_rendered(v, &look, v->idcol);
	buf_puts(&look, ", ");
	put_time_ms(v, &look);
	buf_puts(&look, ", ");
	put_range(v, &look);
	v->look_sql = look.failed || v->oom ? NULL : look.data;
	if (!v->look_sql)
		buf_finish(&look);
	tf = calloc(v->ntcols + 1, sizeof(*tf));
	if (!cmp_sql || !tf || !v->look_sql) {
		free(cmp_sql);
		free(tf);
		return EXIT_FAILURE_RUNTIME;
	}
	snprintf(fetch, sizeof(fetch), "FETCH FORWARD %lld FROM outbox_verify",
	         (long long)cf->fetch_size);
	while (!done && rc == EXIT_OK) {
		PGresult *res = run(v, "fetching rows", fetch, PGRES_TUPLES_OK);

		if (!res) {
			rc = EXIT_PG_SETUP;
			break;
		}
		done = PQntuples(res) < cf->fetch_size;
		since_step += PQntuples(res);
		for (int i = 0; i < PQntuples(res) && rc == EXIT_OK; i++)
			if (!row_add(v, res, i, tf, &sname))
				rc = EXIT_FAILURE_RUNTIME;
		PQclear(res);
		if (rc == EXIT_OK && (done || since_step >= stepn)) {
			rc = step(v, cmp_sql, done);
			since_step = 0;
			log_info("verify: %llu row(s) read, %zu waiting for their entry, %llu entries read",
			         (unsigned long long)v->total_rows, v->nrows,
			         (unsigned long long)v->entries_read);
		}
	}
	if (rc == EXIT_OK && !judge_missing(v))
		rc = v->oom ? EXIT_FAILURE_RUNTIME : EXIT_REDIS_SETUP;
	buf_finish(&sname);
	free(cmp_sql);
	free(tf);
	if (v->oom && rc == EXIT_OK)
		rc = EXIT_FAILURE_RUNTIME;
	if (rc == EXIT_FAILURE_RUNTIME && !v->err[0])
		snprintf(v->err, sizeof(v->err), "out of memory");
	return rc;
}

/* See verify.h. */
void verify_usage(FILE *out)
{
	fprintf(out,
	        "Usage: outbox-relay verify [--since TIME] [--until TIME] [OPTIONS]\n"
	        "Check that every outbox row whose --time-column lies in [--since, --until) is in\n"
	        "the stream --stream routes it to, exactly once, every field equal to the row\n"
	        "byte for byte, each aggregate in commit order; and that no entry committed in\n"
	        "that range lacks a row. Read-only. Exit 0 clean, 10 discrepancies found\n"
	        "(README, \"Verify\"). It takes the relay's options and variables; of the\n"
	        "Republish section's, --since, --until, --time-column, --fetch-size (rows per\n"
	        "cursor fetch; the streams are read on every 100 fetches) and --clock-skew.\n");
	config_print_options(CONFIG_CMD_REPUBLISH, out);
}

static void free_all(struct verify *v)
{
	rows_clear(v);
	free(v->look_sql);
	strmap_free(&v->ids, false);
	strmap_free(&v->snames, false);
	strmap_free(&v->aggs, true);
	for (size_t i = 0; i < v->nstreams; i++)
		free(v->streams[i].name);
	free(v->streams);
	free(v->rows);
	free(v->agg_lsn);
	for (int k = 0; k < K_NKINDS; k++)
		for (int i = 0; i < FIRST_N; i++)
			free(v->rep[k].first[i]);
	pg_table_free(&v->tbl);
	free(v->qtable);
	free(v->idtype);
	stream_tmpl_free(v->tmpl);
	if (v->rc)
		redisFree(v->rc);
	rclient_destroy(v->cl);
	PQfinish(v->conn);
}

int verify_main(const struct relay_config *cf)
{
	struct verify v = {.cf = cf};
	uint64_t bad = 0;
	int rc;

	log_set_context("slot", cf->slot);
	rc = verify_run(&v);
	if (rc != EXIT_OK) {
		log_error("verify: %s", v.err);
		printf("verify failed: %s\n", v.err);
		free_all(&v);
		return rc;
	}
	for (int k = 0; k < K_NKINDS; k++) {
		bad += v.rep[k].n;
		if (!v.rep[k].n)
			continue;
		printf("%s: %llu (first:", kind_text[k], (unsigned long long)v.rep[k].n);
		for (int i = 0; i < FIRST_N && (uint64_t)i < v.rep[k].n; i++)
			printf(" %s", v.rep[k].first[i] ? v.rep[k].first[i] : "?");
		printf(")\n");
	}
	printf("not judged: %llu row(s) that cannot be published as they are (no id, unroutable: "
	       "dead letters), %llu row(s) found in the dead-letter stream, %llu row(s) missing from "
	       "streams that were trimmed; %llu republished entries (order not judged), %llu entries "
	       "committed before --since; logical messages have no row (they count as entries "
	       "without a row); rows purged from the table are not judged\n",
	       (unsigned long long)v.unroutable, (unsigned long long)v.dead_lettered,
	       (unsigned long long)v.trimmed_missing, (unsigned long long)v.republished,
	       (unsigned long long)v.before_since);
	printf("verify %s: rows=%llu streams=%zu entries=%llu missing=%llu duplicated=%llu "
	       "without_row=%llu differ=%llu reordered=%llu not_judged=%llu\n",
	       bad ? "found discrepancies" : "clean", (unsigned long long)v.total_rows, v.nstreams,
	       (unsigned long long)v.entries_read, (unsigned long long)v.rep[K_MISSING].n,
	       (unsigned long long)v.rep[K_DUPLICATED].n, (unsigned long long)v.rep[K_ORPHAN].n,
	       (unsigned long long)v.rep[K_DIFFERS].n, (unsigned long long)v.rep[K_REORDERED].n,
	       (unsigned long long)(v.unroutable + v.dead_lettered + v.trimmed_missing));
	(void)fflush(stdout);
	free_all(&v);
	return bad ? EXIT_VERIFY_DIFFERS : EXIT_OK;
}
