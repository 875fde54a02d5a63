/*
 * verify.h - `outbox-relay verify`: prove that the outbox rows of a time
 * range are in their streams, once each, byte for byte, in commit order.
 */
#ifndef RELAY_VERIFY_H
#define RELAY_VERIFY_H

#include <stdio.h>

#include "config.h"

/*
 * Compare the rows of --table with --since <= --time-column < --until
 * (rendered in SQL as wal2json prints them) with the entries of the streams
 * --stream routes them to. Read-only on both servers; memory bounded by
 * 100 x --fetch-size rows' ids plus one page of entries. Prints what it
 * found and one summary line to stdout; every discrepancy is also logged at
 * debug level. Returns 0 clean, 10 discrepancies found, 2 usage, 3
 * PostgreSQL, 5 Redis, 6 table or column missing, 1 out of memory.
 */
int verify_main(const struct relay_config *cf);

/* `outbox-relay verify --help`: what it does, then the options it takes. */
void verify_usage(FILE *out);

#endif
