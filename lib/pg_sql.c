/*
 * pg_sql.c - one statement on a libpq connection, its error on one line;
 * wal2json's number types (see pg_sql.h).
 */
#include "pg_sql.h"

#include <stdio.h>
#include <string.h>

void pg_sql_error(PGconn *c, const char *prefix, char *err, size_t errlen)
{
	size_t n;

	if (errlen == 0)
		return;
	snprintf(err, errlen, "%s%s", prefix, PQerrorMessage(c));
	n = strlen(err);
	while (n > 0 && (err[n - 1] == '\n' || err[n - 1] == ' '))
		err[--n] = '\0';
	for (char *nl = strchr(err, '\n'); nl; nl = strchr(nl, '\n'))
		*nl = ' ';
}

PGresult *pg_sql_run(PGconn *c, const char *what, const char *sql, ExecStatusType want, char *err,
                     size_t errlen)
{
	PGresult *res = PQexec(c, sql);
	char prefix[160];

	if (PQresultStatus(res) == want)
		return res;
	snprintf(prefix, sizeof(prefix), "%s: ", what);
	pg_sql_error(c, prefix, err, errlen);
	PQclear(res);
	return NULL;
}

bool pg_sql_type_is_number(unsigned type_oid)
{
	switch (type_oid) {
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
