/*
 * pg_sql.h - one statement on a libpq connection for the commands that read
 * the outbox table over SQL (republish, heal, verify), and how wal2json
 * prints a value of a type, which their SQL renders the same way.
 */
#ifndef RELAY_PG_SQL_H
#define RELAY_PG_SQL_H

#include <libpq-fe.h>
#include <stdbool.h>
#include <stddef.h>

/*
 * Run sql on c. The result when its status is want (the caller clears it);
 * otherwise NULL, with "<what>: <server message>" on one line in err.
 */
PGresult *pg_sql_run(PGconn *c, const char *what, const char *sql, ExecStatusType want, char *err,
                     size_t errlen);

/* libpq's last error on c after prefix, on one line (newlines as spaces), into err. */
void pg_sql_error(PGconn *c, const char *prefix, char *err, size_t errlen);

/* Does wal2json print a value of this type as a bare JSON number (NaN and infinities as null)? */
bool pg_sql_type_is_number(unsigned type_oid);

#endif
