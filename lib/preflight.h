/*
 * preflight.h - the prerequisites --check-config checks by connecting:
 * PostgreSQL (reachable, authenticated, REPLICATION, wal_level, free slots
 * and WAL senders, the outbox table and its columns, the slot, the output
 * plugin the relay would use -- the existing slot's, else --plugin --
 * loadable and allowed, and for pgoutput the publication) and Redis
 * (reachable, AUTH, the commands the relay uses, a master, the eviction
 * policy).
 *
 * Every check that can run runs, so one pass lists every problem it can
 * find; a check that needs what failed before (a connection) is reported as
 * skipped. Problems read like the relay's own startup errors: one line
 * naming the fix. Nothing is created that outlives the check: the plugin
 * check creates a TEMPORARY replication slot and drops it before returning,
 * no publication is created, and no Redis key, function or script is
 * written. This module never logs, prints or exits: the caller prints the
 * items.
 */
#ifndef RELAY_PREFLIGHT_H
#define RELAY_PREFLIGHT_H

#include <stdbool.h>
#include <stddef.h>

#include "config.h"

enum preflight_kind {
	PREFLIGHT_OK,      /* a check passed (or a fact worth knowing) */
	PREFLIGHT_PROBLEM, /* the relay would fail (or never make progress): counted */
	PREFLIGHT_WARNING, /* the relay runs, but something is risky: not counted */
	PREFLIGHT_SKIPPED  /* a check could not run because an earlier one failed */
};

struct preflight_item {
	enum preflight_kind kind;
	char *text; /* one line, no secrets */
};

struct preflight {
	struct preflight_item *items;
	size_t nitems;
	size_t nproblems;
	bool oom; /* an item could not be recorded */
};

/* Run every check against cf's PostgreSQL and Redis; fills *pf (zero it first). */
void preflight_run(const struct relay_config *cf, struct preflight *pf);
/* Free what preflight_run allocated; zeroes *pf. */
void preflight_finish(struct preflight *pf);
/* "ok", "problem", "warning", "skipped". */
const char *preflight_kind_name(enum preflight_kind k);

#endif
