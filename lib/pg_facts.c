/*
 * pg_facts.c - the outbox table and the replication slot, each read by one
 * query (see pg_facts.h).
 */
#include "pg_facts.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "exitcode.h"
#include "pg_sql.h"

/* q's statement on c: the result when it has status want; otherwise the failure kind. */
static enum pg_fact run(PGconn *c, struct buf *q, ExecStatusType want, PGresult **res,
                        PGresult **failed)
{
	const char *state;

	*res = q->failed ? NULL : PQexec(c, q->data);
	buf_finish(q);
	if (!*res)
		return PG_FACT_NOMEM;
	if (PQresultStatus(*res) == want)
		return PG_FACT_OK;
	state = PQresultErrorField(*res, PG_DIAG_SQLSTATE);
	if (state && strcmp(state, "42602") == 0) { /* invalid_name */
		PQclear(*res);
		*res = NULL;
		return PG_FACT_BAD_NAME;
	}
	*failed = *res;
	*res = NULL;
	return PG_FACT_FAILED;
}

/* Append s to q as a literal for c (NULL when libpq could not quote it). */
static bool put_literal(PGconn *c, struct buf *q, const char *s)
{
	char *lit = PQescapeLiteral(c, s, strlen(s));

	if (!lit)
		return false;
	buf_puts(q, lit);
	PQfreemem(lit);
	return true;
}

enum pg_fact pg_table_read(PGconn *c, const char *table, bool seq, struct pg_table *t,
                           PGresult **failed)
{
	struct buf q = {0};
	PGresult *res;
	enum pg_fact st;

	memset(t, 0, sizeof(*t));
	*failed = NULL;
	/* Row 0: the table's real schema and name (no row when it does not
	 * exist); then its columns in attnum order. wal2json's add-tables and
	 * its change objects carry the real names, so those are what counts. */
	buf_puts(&q, "SELECT n.nspname, c.relname, 0::oid, false, 0 AS o, NULL, false FROM "
	             "pg_catalog.pg_class c "
	             "JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = "
	             "pg_catalog.to_regclass(");
	if (!put_literal(c, &q, table))
		q.failed = true;
	buf_puts(&q, ") UNION ALL SELECT a.attname, pg_catalog.format_type(a.atttypid, a.atttypmod), "
	             "a.atttypid, ");
	/* pg_get_expr() opens the table: see pg_facts.h for why only on request. */
	buf_puts(&q, seq ? "a.attidentity <> '' OR coalesce(pg_catalog.pg_get_expr(d.adbin, "
	                   "d.adrelid) LIKE 'nextval(%', false)"
	                 : "false");
	/* A domain's name as wal2json prints it (include-typmod off: format_type() without a
	 * typmod; pgoutput names it by its base type), and generated columns (12+). */
	buf_puts(&q, ", a.attnum, CASE WHEN t.typtype = 'd' THEN pg_catalog.format_type(a.atttypid, "
	             "NULL) END, ");
	buf_puts(&q, PQserverVersion(c) >= 120000 ? "a.attgenerated <> ''" : "false");
	buf_puts(&q, " FROM pg_catalog.pg_attribute a JOIN pg_catalog.pg_type t ON t.oid = "
	             "a.atttypid ");
	if (seq)
		buf_puts(&q, "LEFT JOIN pg_catalog.pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = "
		             "a.attnum ");
	buf_puts(&q, "WHERE a.attrelid = pg_catalog.to_regclass(");
	if (!q.failed && !put_literal(c, &q, table))
		q.failed = true;
	buf_puts(&q, ") AND a.attnum > 0 AND NOT a.attisdropped ORDER BY 5");
	st = run(c, &q, PGRES_TUPLES_OK, &res, failed);
	if (st != PG_FACT_OK)
		return st;
	if (PQntuples(res) < 1 || PQgetisnull(res, 0, 1)) {
		PQclear(res);
		return PG_FACT_ABSENT;
	}
	t->schema = strdup(PQgetvalue(res, 0, 0));
	t->name = strdup(PQgetvalue(res, 0, 1));
	t->cols = calloc((size_t)PQntuples(res), sizeof(*t->cols));
	if (!t->schema || !t->name || !t->cols) {
		PQclear(res);
		return PG_FACT_NOMEM;
	}
	for (int i = 1; i < PQntuples(res); i++) {
		struct pg_column *col = &t->cols[t->ncols];

		col->name = strdup(PQgetvalue(res, i, 0));
		col->type = strdup(PQgetvalue(res, i, 1));
		col->oid = (unsigned)strtoul(PQgetvalue(res, i, 2), NULL, 10);
		col->seq = strcmp(PQgetvalue(res, i, 3), "t") == 0;
		col->domain = PQgetisnull(res, i, 5) ? NULL : strdup(PQgetvalue(res, i, 5));
		col->generated = strcmp(PQgetvalue(res, i, 6), "t") == 0;
		t->ncols++;
		if (!col->name || !col->type || (!PQgetisnull(res, i, 5) && !col->domain)) {
			PQclear(res);
			return PG_FACT_NOMEM;
		}
	}
	PQclear(res);
	return PG_FACT_OK;
}

bool pg_table_refusal(enum pg_fact fact, const char *table, char *out, size_t outlen)
{
	if (fact == PG_FACT_ABSENT)
		snprintf(out, outlen,
		         "outbox table \"%s\" does not exist: create it (see sql/outbox.sql) or point "
		         "--table at your outbox table",
		         table);
	else if (fact == PG_FACT_BAD_NAME)
		snprintf(out, outlen,
		         "invalid --table %s: not an SQL table name; quote names with spaces or upper "
		         "case, e.g. --table 'public.\"My Outbox\"'",
		         table);
	else
		return false;
	return true;
}

int pg_table_load(PGconn *c, const char *table, bool seq, struct pg_table *t, char *err,
                  size_t errlen)
{
	PGresult *failed;
	enum pg_fact fact = pg_table_read(c, table, seq, t, &failed);

	if (pg_table_refusal(fact, table, err, errlen))
		return fact == PG_FACT_BAD_NAME ? EXIT_USAGE : EXIT_OUTBOX_SCHEMA;
	if (fact == PG_FACT_FAILED) {
		pg_sql_error(c, "reading the outbox table's columns: ", err, errlen);
		PQclear(failed);
		return EXIT_PG_SETUP;
	}
	if (fact == PG_FACT_NOMEM) {
		snprintf(err, errlen, "out of memory");
		return EXIT_FAILURE_RUNTIME;
	}
	return EXIT_OK;
}

int pg_table_column(const struct pg_table *t, const char *name)
{
	for (int i = 0; i < t->ncols; i++)
		if (strcmp(t->cols[i].name, name) == 0)
			return i;
	return -1;
}

void pg_table_free(struct pg_table *t)
{
	for (int i = 0; t->cols && i < t->ncols; i++) {
		free(t->cols[i].name);
		free(t->cols[i].type);
		free(t->cols[i].domain);
	}
	free(t->cols);
	free(t->schema);
	free(t->name);
	memset(t, 0, sizeof(*t));
}

/* Columns newer servers add, in enum pg_slot_col's order from PGS_CONFLICTING. */
static const struct {
	const char *name;
	int since;
} versioned[] = {
    {"conflicting", 160000}, {"inactive_since", 170000}, {"invalidation_reason", 170000},
    {"failover", 170000},    {"synced", 170000},
};

int pg_slot_col_since(enum pg_slot_col col)
{
	return col >= PGS_CONFLICTING && col < PGS_NCOLS ? versioned[col - PGS_CONFLICTING].since : 0;
}

enum pg_fact pg_slot_read(PGconn *c, const char *name, struct pg_slot *s, PGresult **failed)
{
	struct buf q = {0};
	PGresult *res;
	enum pg_fact st;
	int version = PQserverVersion(c);
	const char *ws, *reason;

	memset(s, 0, sizeof(*s));
	s->confirmed = LSN_INVALID;
	*failed = NULL;
	buf_puts(&q,
	         "SELECT slot_name, plugin, slot_type, database, temporary, active, active_pid, "
	         "confirmed_flush_lsn, restart_lsn, "
	         "pg_catalog.pg_wal_lsn_diff(w.lsn, confirmed_flush_lsn), "
	         "pg_catalog.pg_size_pretty(pg_catalog.pg_wal_lsn_diff(w.lsn, confirmed_flush_lsn)), "
	         "wal_status, safe_wal_size, pg_catalog.pg_size_pretty(safe_wal_size)");
	for (size_t i = 0; i < sizeof(versioned) / sizeof(versioned[0]); i++) {
		buf_puts(&q, ", ");
		buf_puts(&q, version >= versioned[i].since ? versioned[i].name : "NULL");
	}
	buf_puts(&q, " FROM pg_catalog.pg_replication_slots, "
	             "(SELECT CASE WHEN pg_catalog.pg_is_in_recovery() "
	             "THEN pg_catalog.pg_last_wal_replay_lsn() "
	             "ELSE pg_catalog.pg_current_wal_lsn() END AS lsn) w WHERE slot_name = ");
	if (!put_literal(c, &q, name))
		q.failed = true;
	st = run(c, &q, PGRES_TUPLES_OK, &res, failed);
	if (st != PG_FACT_OK)
		return st;
	if (PQntuples(res) != 1) {
		PQclear(res);
		return PG_FACT_ABSENT;
	}
	s->row = res;
	s->exists = true;
	snprintf(s->plugin, sizeof(s->plugin), "%s", PQgetvalue(res, 0, PGS_PLUGIN));
	snprintf(s->type, sizeof(s->type), "%s", PQgetvalue(res, 0, PGS_TYPE));
	snprintf(s->database, sizeof(s->database), "%s", PQgetvalue(res, 0, PGS_DATABASE));
	s->ours = strcmp(s->type, "logical") == 0 &&
	          (strcmp(s->plugin, "wal2json") == 0 || strcmp(s->plugin, "pgoutput") == 0);
	s->active = strcmp(PQgetvalue(res, 0, PGS_ACTIVE), "t") == 0;
	if (!PQgetisnull(res, 0, PGS_CONFIRMED))
		(void)lsn_parse(PQgetvalue(res, 0, PGS_CONFIRMED),
		                strlen(PQgetvalue(res, 0, PGS_CONFIRMED)), &s->confirmed);
	ws = PQgetvalue(res, 0, PGS_WAL_STATUS); /* "" when NULL */
	reason = PQgetvalue(res, 0, PGS_INVALIDATION_REASON);
	if (reason[0])
		snprintf(s->why, sizeof(s->why), "invalidation_reason %s", reason);
	else
		snprintf(s->why, sizeof(s->why), "wal_status %s", ws);
	s->invalidated = reason[0] || strcmp(ws, "lost") == 0;
	s->failover = strcmp(PQgetvalue(res, 0, PGS_FAILOVER), "t") == 0;
	return PG_FACT_OK;
}

const char *pg_slot_cell(const struct pg_slot *s, enum pg_slot_col col)
{
	if (!s->row || PQgetisnull(s->row, 0, (int)col))
		return NULL;
	return PQgetvalue(s->row, 0, (int)col);
}

void pg_slot_free(struct pg_slot *s)
{
	PQclear(s->row);
	s->row = NULL;
}
