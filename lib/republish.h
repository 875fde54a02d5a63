/*
 * republish.h - `outbox-relay republish`: publish outbox rows from the table
 * itself (a gap the relay refused to stream over: see README, "Gaps").
 */
#ifndef RELAY_REPUBLISH_H
#define RELAY_REPUBLISH_H

#include <stdio.h>

#include "config.h"

/*
 * Republish the rows of --table with --since <= --time-column < --until
 * through the relay's mapping and publish function, deduplicated by event id
 * and without touching the stream watermarks. Prints a summary line to
 * stdout; progress and errors go to the log. Returns the exit code: 0 done,
 * 1 interrupted (run it again) or out of memory, 2 usage, 3 PostgreSQL,
 * 5 Redis, 6 table or column missing.
 */
int republish_main(const struct relay_config *cf);

/* `outbox-relay republish --help`: what it does, then the options it takes. */
void republish_usage(FILE *out);

#endif
