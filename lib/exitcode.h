/*
 * exitcode.h - process exit codes of outbox-relay. Documented in README.md;
 * each permanent failure class has its own code so supervisors can tell
 * "fix the configuration" from "fix the database" from "fix Redis".
 */
#ifndef RELAY_EXITCODE_H
#define RELAY_EXITCODE_H

enum relay_exit {
	EXIT_OK = 0,              /* clean shutdown, or --endpos reached */
	EXIT_FAILURE_RUNTIME = 1, /* unexpected internal failure, or a second signal */
	EXIT_USAGE = 2,           /* invalid flag, environment variable or value */
	EXIT_PG_SETUP = 3, /* PostgreSQL refuses us permanently: auth, privileges, wal_level, plugin */
	EXIT_SLOT = 4,     /* replication slot unusable: other plugin, missing with --no-create-slot, no
	                      free slots */
	EXIT_REDIS_SETUP = 5,    /* Redis refuses us permanently: auth, ACL, server too old */
	EXIT_OUTBOX_SCHEMA = 6,  /* outbox table or a mapped column is missing */
	EXIT_REDIS_STATE = 7,    /* Redis state contradicts this relay: watermarks of another
	                database, or acknowledged writes lost */
	EXIT_SLOT_GAP = 8,       /* the slot is not the one the relay streamed (missing,
	                invalidated, recreated): events may be missing; see --accept-gap */
	EXIT_CHECK_PROBLEMS = 9, /* --check-config found at least one problem (it lists them all) */
	EXIT_VERIFY_DIFFERS = 10 /* outbox-relay verify: rows and stream entries differ */
};

#endif
