/*
 * pg_facts.h - one place per server fact: the outbox table and the
 * replication slot, each read by one function. The relay (pgrepl.c),
 * --check-config (preflight.c), status (status.c), heal (heal.c), republish
 * (republish.c) and verify (verify.c) call these and report what they found
 * in their own way. The publication of a pgoutput slot is judged in one
 * place too: pgrepl_publication_query() and pgrepl_publication_whole().
 *
 * Both functions send one simple query with the values quoted into it, so
 * they run on a replication connection (replication=database) as well as on
 * a plain one.
 */
#ifndef RELAY_PG_FACTS_H
#define RELAY_PG_FACTS_H

#include <libpq-fe.h>
#include <stdbool.h>
#include <stddef.h>

#include "lsn.h"

enum pg_fact {
	PG_FACT_OK,
	PG_FACT_ABSENT,   /* no such table (or slot) */
	PG_FACT_BAD_NAME, /* the table name is not SQL (invalid_name, 42602) */
	PG_FACT_FAILED,   /* the query failed: *failed holds its result */
	PG_FACT_NOMEM,
};

/* ---- the outbox table ---- */

struct pg_column {
	char *name;
	char *type;     /* format_type(): what wal2json names the type */
	unsigned oid;   /* the type's OID */
	bool seq;       /* an identity column, or a nextval() default (pg_table_read()'s seq) */
	char *domain;   /* a domain type: format_type(oid, NULL), its name as wal2json prints it
	                   (pgoutput names it by its base type); NULL for any other type */
	bool generated; /* a generated column (PostgreSQL 12+), which pgoutput leaves out */
};

struct pg_table {
	char *schema, *name;    /* the table's real names, as the server resolved --table */
	struct pg_column *cols; /* in attnum order, dropped columns left out */
	int ncols;
};

/*
 * Resolve table (SQL syntax, as --table takes it: to_regclass folds case and
 * strips quotes) and read its columns into *t (pg_table_free() it, whatever
 * the result). PG_FACT_FAILED: the failed result is in *failed, for the
 * caller to classify and clear; otherwise *failed is NULL.
 *
 * seq: also tell the columns a sequence fills (struct pg_column's seq;
 * false for all without it). That takes pg_get_expr(), which opens the
 * table, and a walsender that has opened a table before START_REPLICATION
 * describes it to pgoutput as it is now, not as the WAL it decodes had it:
 * rows from before a DROP COLUMN came out without that column (found by
 * 55_pgoutput). So seq only on a plain connection (republish); the relay's
 * own read, on its replication connection, never opens the table.
 */
enum pg_fact pg_table_read(PGconn *c, const char *table, bool seq, struct pg_table *t,
                           PGresult **failed);

/*
 * The line for a table pg_table_read() did not find (PG_FACT_ABSENT) or whose
 * name is not SQL (PG_FACT_BAD_NAME), naming the fix; false for any other
 * result (out left alone).
 */
bool pg_table_refusal(enum pg_fact fact, const char *table, char *out, size_t outlen);

/*
 * pg_table_read() for a command on a plain connection (republish, verify):
 * EXIT_OK, or the exit code (exitcode.h) with its line in err.
 */
int pg_table_load(PGconn *c, const char *table, bool seq, struct pg_table *t, char *err,
                  size_t errlen);

/* The index of the column called name in t, or -1. */
int pg_table_column(const struct pg_table *t, const char *name);

void pg_table_free(struct pg_table *t);

/* ---- the replication slot ---- */

/*
 * The columns of struct pg_slot's row, in this order. Those a server does not
 * have are NULL there: conflicting (16+), inactive_since, invalidation_reason,
 * failover and synced (17+). PGS_LAG is the bytes from confirmed_flush_lsn to
 * the server's current WAL position (its replay position on a standby).
 */
enum pg_slot_col {
	PGS_NAME,
	PGS_PLUGIN,
	PGS_TYPE,
	PGS_DATABASE,
	PGS_TEMPORARY,
	PGS_ACTIVE,
	PGS_PID,
	PGS_CONFIRMED,
	PGS_RESTART,
	PGS_LAG,
	PGS_LAG_PRETTY,
	PGS_WAL_STATUS,
	PGS_SAFE,
	PGS_SAFE_PRETTY,
	PGS_CONFLICTING,
	PGS_INACTIVE_SINCE,
	PGS_INVALIDATION_REASON,
	PGS_FAILOVER,
	PGS_SYNCED,
	PGS_NCOLS
};

struct pg_slot {
	bool exists;
	bool ours;       /* a logical slot of wal2json or pgoutput */
	char plugin[64]; /* "" for a physical slot */
	char type[16];   /* logical or physical */
	char database[128];
	bool active;
	lsn_t confirmed;  /* confirmed_flush_lsn, LSN_INVALID when NULL */
	bool invalidated; /* wal_status lost, or an invalidation_reason (17+) */
	char why[64];     /* "invalidation_reason <r>" when there is one, else "wal_status <s>" */
	bool failover;    /* 17+: a failover slot */
	PGresult *row;    /* the row, by enum pg_slot_col (when it exists); pg_slot_free() clears it */
};

/* The slot called name as pg_replication_slots has it now; *failed as pg_table_read(). */
enum pg_fact pg_slot_read(PGconn *c, const char *name, struct pg_slot *s, PGresult **failed);

/* The server version (PQserverVersion()) that has column col; 0 for every version. */
int pg_slot_col_since(enum pg_slot_col col);

/* A cell of s->row: NULL when the slot does not exist or the value is NULL. */
const char *pg_slot_cell(const struct pg_slot *s, enum pg_slot_col col);

void pg_slot_free(struct pg_slot *s);

#endif
