/*
 * pgrepl.h - the logical replication connection: IDENTIFY_SYSTEM, slot
 * check/creation, START_REPLICATION with wal2json v2 options, CopyBoth
 * message decoding and standby status updates.
 */
#ifndef RELAY_PGREPL_H
#define RELAY_PGREPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "lsn.h"

enum pg_status {
	PG_OK = 0,
	PG_RETRY,        /* transient (connection refused, server restarting): back off and retry */
	PG_STANDBY,      /* the slot is active in another process: wait as standby */
	PG_FATAL_SETUP,  /* exit EXIT_PG_SETUP: auth, privileges, wal_level, plugin */
	PG_FATAL_SLOT,   /* exit EXIT_SLOT: other plugin, missing with --no-create-slot, no free slot */
	PG_FATAL_SCHEMA, /* exit EXIT_OUTBOX_SCHEMA */
	PG_FATAL_USAGE,  /* exit EXIT_USAGE: --pg-dsn holds a value libpq rejects */
	PG_FATAL_GAP,    /* exit EXIT_SLOT_GAP: the slot is not the one the relay streamed */
	PG_FATAL_FOREIGN /* exit EXIT_REDIS_STATE: Redis's slot record is another database's */
};

struct pg_msg {
	char type;        /* 'w' XLogData or 'k' keepalive */
	lsn_t data_start; /* 'w' only */
	lsn_t wal_end;
	bool reply_requested; /* 'k' only */
	char *data;           /* 'w' payload (one wal2json object), the caller's to change; valid until
	                       * the next pgrepl_next(), or longer after pgrepl_take_buffer() */
	size_t len;
};

struct pgrepl;

struct pgrepl *pgrepl_create(const struct relay_config *cf);

/*
 * The memory the last message's data lies in, handed over: the next
 * pgrepl_next() no longer frees it; pgrepl_free_buffer() does. NULL when
 * there is none.
 */
void *pgrepl_take_buffer(struct pgrepl *p);
void *pgrepl_buffer(const struct pgrepl *p); /* the same, not handed over */
void pgrepl_free_buffer(void *buf);
void pgrepl_destroy(struct pgrepl *p); /* NULL is a no-op */

/*
 * Connect, identify, make sure the slot exists with wal2json, and start
 * streaming from the slot's confirmed position. Blocks (bounded by the DSN's
 * connect_timeout, default 10 s). On failure pgrepl_errmsg() has one line,
 * with a hint naming the fix for permanent failures.
 */
enum pg_status pgrepl_start(struct pgrepl *p);
bool pgrepl_streaming(const struct pgrepl *p);
int pgrepl_fd(const struct pgrepl *p);
/* The server's version (e.g. 170012) while connected, else 0. */
int pgrepl_server_version(const struct pgrepl *p);
/* True when the last start switched FAILOVER on for an existing slot (17+). */
bool pgrepl_altered_failover(const struct pgrepl *p);
/* True when the slot was created by this process (first pgrepl_start). */
bool pgrepl_created_slot(const struct pgrepl *p);
/* The slot's confirmed_flush_lsn as read before START_REPLICATION (a new slot: its consistent
 * point). */
lsn_t pgrepl_slot_confirmed(const struct pgrepl *p);
/* IDENTIFY_SYSTEM's WAL end (xlogpos) at the last start: where the backlog the slot holds
 * then ends (0 before, or when the server did not say). */
lsn_t pgrepl_start_wal_end(const struct pgrepl *p);
/* IDENTIFY_SYSTEM's system identifier and database of the last start ("" before). */
const char *pgrepl_system_id(const struct pgrepl *p);
const char *pgrepl_dbname(const struct pgrepl *p);
/*
 * The outbox table as PostgreSQL resolved --table on the last start (case
 * folded, quotes removed): what wal2json's change objects carry. NULL before.
 */
/* The slot's output plugin (wal2json or pgoutput), known once a start found or made the slot. */
const char *pgrepl_plugin(const struct pgrepl *p);
/* The last pgrepl_next() failure is one no reconnect fixes (exit EXIT_PG_SETUP). */
bool pgrepl_stream_fatal(const struct pgrepl *p);
/* pgoutput: the publication streamed (--publication, by default the slot's name). */
const char *pgrepl_publication(const struct pgrepl *p);
const char *pgrepl_table_schema(const struct pgrepl *p);
const char *pgrepl_table_name(const struct pgrepl *p);
/* The outbox table's columns as the last start read them (pg_facts.h), never NULL. */
struct pg_table;
const struct pg_table *pgrepl_table_columns(const struct pgrepl *p);

/*
 * What Redis's slot record (sink_redis.h) says about the slot, checked by
 * every pgrepl_start before it uses or creates the slot: with active set, a
 * database other than owner is PG_FATAL_FOREIGN, and a slot that is
 * missing, invalidated or stands past confirmed is PG_FATAL_GAP -- unless
 * accept equals confirmed (the user accepted that gap): then an invalidated
 * slot is dropped, a missing one created, and pgrepl_gap_accepted() says
 * what was accepted.
 */
struct slot_guard {
	bool active;
	lsn_t confirmed;
	const char *owner; /* copied */
	lsn_t accept;      /* --accept-gap, LSN_INVALID when not given */
	lsn_t commit_lsn;  /* the record's last commit with events */
	uint32_t tli;      /* the record's timeline (0: unknown) */
	lsn_t published;   /* the highest position this process saw Redis acknowledge */
};
void pgrepl_set_guard(struct pgrepl *p, const struct slot_guard *g);
/*
 * Did the last pgrepl_start (or pgrepl_recheck) find that the server's
 * history no longer holds what the guard says Redis has (slot_record.h,
 * slot_history_diverged())? That is PG_FATAL_GAP, and --accept-gap does not
 * accept it: only `outbox-relay heal` closes it.
 */
bool pgrepl_diverged(const struct pgrepl *p);
/* The guard's published position, moved up to pos (before each start). */
void pgrepl_guard_published(struct pgrepl *p, lsn_t pos);
/* The server's timeline as IDENTIFY_SYSTEM gave it at the last start (0: unknown). */
uint32_t pgrepl_timeline(const struct pgrepl *p);
/*
 * Read the history of timeline tli over the replication connection conn
 * (TIMELINE_HISTORY) into h; tli 1 has none. False with one line in err.
 */
struct pg_conn;
struct pg_result;
#define PGREPL_SYSTEM_ID_LEN 32 /* IDENTIFY_SYSTEM's systemid, with its NUL */
#define PGREPL_DBNAME_LEN 128   /* and its dbname */
struct slot_history;
/*
 * IDENTIFY_SYSTEM's answer res: its system id and database into system_id
 * and dbname (PGREPL_*_LEN bytes), its timeline and WAL end into h (the rest of h
 * emptied). False when it names no database (not replication=database).
 */
bool pgrepl_identity(const struct pg_result *res, char *system_id, char *dbname,
                     struct slot_history *h);
bool pgrepl_read_history(struct pg_conn *conn, uint32_t tli, struct slot_history *h, char *err,
                         size_t errlen);
/* The gap the last pgrepl_start (or pgrepl_recheck) accepted, one line; "" when none. */
const char *pgrepl_gap_accepted(const struct pgrepl *p);
/*
 * Judge the slot as the last pgrepl_start found it against the guard as it
 * is now (after a fresher record was read): PG_OK, or PG_FATAL_FOREIGN /
 * PG_FATAL_GAP with pgrepl_errmsg(). A slot the last start created counts as
 * missing.
 */
enum pg_status pgrepl_recheck(struct pgrepl *p);

/*
 * The newest notice the server sent (a WARNING such as "replication slot ...
 * specified in parameter synchronized_standby_slots does not exist"), as one
 * line, once; NULL when there is none since the last call.
 */
const char *pgrepl_take_notice(struct pgrepl *p);

/* Read what the socket has (after poll said readable). False on a broken connection. */
bool pgrepl_consume(struct pgrepl *p);

/*
 * Next buffered message: 1 and *ret filled, 0 when none is buffered, -1 when
 * the stream ended or failed (pgrepl_errmsg() says why; reconnect).
 */
int pgrepl_next(struct pgrepl *p, struct pg_msg *ret);

/* Send a standby status update: write = received, flush = apply = confirmed. */
bool pgrepl_send_status(struct pgrepl *p, lsn_t received, lsn_t confirmed, bool reply_requested);

/*
 * Final status update, CopyDone, drain, close. Best effort, and bounded: it
 * gives up after timeout_ms (a dead network must not hold the shutdown).
 */
void pgrepl_stop(struct pgrepl *p, lsn_t received, lsn_t confirmed, int timeout_ms);
/* Drop the connection without ceremony. */
void pgrepl_close(struct pgrepl *p);

const char *pgrepl_errmsg(const struct pgrepl *p);

/*
 * How pgrepl_start judges a failure, for --check-config (preflight.c): the
 * status and, in out, the one line the relay logs (hint included) for a
 * connection attempt that failed with libpq's message msg, or for a command
 * that failed with msg and SQLSTATE state ("" when unknown).
 */
/*
 * pgoutput's publication as the relay judges it (ensure_publication in
 * pgrepl.c; --check-config asks the same). pgrepl_publication_query() appends
 * to q the catalog query whose row (none: the publication does not exist) has
 * four "t"/"f" cells: publishes inserts, includes the table, has a row filter,
 * has a column list (v15: the server is 15+, which has the last two). tbl is
 * the table's quoted "schema"."name". pgrepl_publication_whole() judges the
 * cells: false, with the line naming the ALTER PUBLICATION to run in why,
 * when the publication would leave events out.
 * pgrepl_publication_missing_for_slot(): the line for an existing slot whose
 * publication is missing (the relay refuses to make one for it).
 */
struct buf;
void pgrepl_publication_query(struct buf *q, const char *pub, const char *schema, const char *name,
                              const char *tbl, bool v15);
bool pgrepl_publication_whole(const char *const cells[4], const char *pub, const char *tbl,
                              char *why, size_t whylen);
void pgrepl_publication_missing_for_slot(char *out, size_t outlen, const char *pub,
                                         const char *slot, const char *tbl);

enum pg_status pgrepl_explain_connect(const char *msg, char *out, size_t outlen);
enum pg_status pgrepl_explain_command(const char *msg, const char *state, char *out, size_t outlen);

#endif
