/*
 * republish.h - `outbox-relay republish`: publish outbox rows from the table
 * itself (a gap the relay refused to stream over: see README, "Gaps"), and
 * the steps `outbox-relay heal` (heal.h) takes through it.
 */
#ifndef RELAY_REPUBLISH_H
#define RELAY_REPUBLISH_H

#include <stdbool.h>
#include <stdio.h>

#include "config.h"
#include "lsn.h"
#include "sink_redis.h"

/*
 * Republish the rows of --table with --since <= --time-column < --until
 * through the relay's mapping and publish function, deduplicated by event id
 * and without touching the stream watermarks. Prints a summary line to
 * stdout; progress and errors go to the log. Returns the exit code: 0 done,
 * 1 interrupted (run it again) or out of memory, 2 usage, 3 PostgreSQL,
 * 5 Redis (an ACL refusal included), 6 table or column missing, 7 Redis
 * state. A value over Redis's proto-max-bulk-len (CONFIG GET denied) makes
 * it run again from the start with values of that size dead-lettered.
 */
int republish_main(const struct relay_config *cf);

/* `outbox-relay republish --help`: what it does, then the options it takes. */
void republish_usage(FILE *out);

/* One republish, step by step (outbox-relay heal). */
struct republish;

struct republish *republish_create(const struct relay_config *cf); /* NULL: out of memory */
void republish_destroy(struct republish *rp);                      /* NULL is a no-op */
/* What the last failure was, one line. */
const char *republish_errmsg(const struct republish *rp);
/* SIGINT and SIGTERM stop it (republish_interrupted); SIGPIPE ignored. */
void republish_signals(void);
bool republish_interrupted(void);

/*
 * Connect to Redis, retrying with backoff (until interrupted). Returns 0 or
 * the exit code of a permanent failure (republish_errmsg()).
 */
int republish_connect(struct republish *rp);
/* The slot record the connect read; NULL when Redis has none. Valid until the next call. */
const struct slot_record *republish_record(const struct republish *rp);
/*
 * Publish the rows with since <= --time-column < --until (cf->until) and
 * wait until Redis acknowledged them all. snapshot: an exported snapshot
 * (CREATE_REPLICATION_SLOT ... SNAPSHOT 'export') to read the table in, the
 * exporting connection kept open and idle meanwhile; NULL for one of its
 * own. Returns 0 or an exit code (republish_errmsg()).
 */
int republish_rows(struct republish *rp, const char *since, const char *snapshot);
/*
 * Write the slot record ("<key-prefix>:slot:<slot>") as the relay does, for
 * the database system_id/dbname, and wait for Redis to acknowledge it.
 * Returns 0 or an exit code (republish_errmsg()).
 */
int republish_write_record(struct republish *rp, const char *system_id, const char *dbname,
                           uint32_t tli, lsn_t confirmed, lsn_t commit_lsn, int64_t commit_us);
/* "rows=N skipped_null_time=N published=N duplicates=N dead_lettered=N unacknowledged=N". */
void republish_print_counts(const struct republish *rp, FILE *out);

#endif
