/*
 * slot_record.h - the slot record: how far this relay confirmed its slot,
 * kept in Redis, and the rule that judges a slot against it. Pure (no I/O):
 * the sink reads and writes the key, pgrepl and status ask the rule.
 *
 * Key "<key-prefix>:slot:<slot>" (no hash tag: a key of its own), value
 * "<confirmed> <commit LSN> <commit unix us> tli=<timeline> <owner>", LSNs as
 * 16 upper-case hex digits, owner "<system id>/<database>"; records written
 * before the timeline was kept have no "tli=" part (timeline 0: unknown). The relay writes it, and
 * has it acknowledged, before it confirms a position to PostgreSQL, so the slot it streams never
 * stands past the record. A slot that is missing, invalidated or past the record is not the one
 * this relay streamed: events committed after the record's commit may never have reached Redis, and
 * the relay refuses to stream over that gap unless the user accepted exactly it.
 */
#ifndef RELAY_SLOT_RECORD_H
#define RELAY_SLOT_RECORD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "lsn.h"

#define SLOT_RECORD_MAX 256 /* the longest value written or read */

struct slot_record {
	lsn_t confirmed;   /* the highest flush position the relay may have confirmed */
	lsn_t commit_lsn;  /* the last commit with events Redis acknowledged (0: none) */
	int64_t commit_us; /* its commit time, Unix microseconds (0: unknown) */
	char owner[160];   /* "<system id>/<database>" */
	uint32_t tli;      /* the server's timeline when it was written (0: unknown) */
};

/* b = "<key_prefix>:slot:<slot>" (b->failed on OOM). */
void slot_record_key(struct buf *b, const char *key_prefix, const char *slot);

/*
 * The value of rec into out[0..len) with a NUL; its length, or 0 when it
 * does not fit.
 */
size_t slot_record_format(const struct slot_record *rec, char *out, size_t len);

/* Parse a record's value; false (rec zeroed) when it is not one. */
bool slot_record_parse(const char *v, size_t len, struct slot_record *rec);

/* Is rec the record of the database IDENTIFY_SYSTEM named (system id, name)? */
bool slot_record_owner_is(const struct slot_record *rec, const char *system_id, const char *dbname);

/* The slot as PostgreSQL shows it now. */
struct slot_seen {
	bool exists;
	bool invalidated;
	const char *invalid_why; /* what pg_replication_slots says, when invalidated */
	lsn_t confirmed;         /* its confirmed_flush_lsn, when it exists */
	bool created_here;       /* this relay created it (while Redis was unreachable) */
};

enum slot_verdict {
	SLOT_SAME,        /* at or behind the record: the slot this relay streamed */
	SLOT_MISSING,     /* dropped (or this relay created it anew) */
	SLOT_INVALIDATED, /* it can never stream again */
	SLOT_PAST,        /* recreated, advanced by something else, or Redis lost a newer record */
};

/* The refusal rule: is seen the slot that rec's relay streamed? */
enum slot_verdict slot_record_judge(const struct slot_record *rec, const struct slot_seen *seen);

/*
 * What is wrong with the slot, as the end of a sentence that starts
 * "replication slot "x" ", into why[0..len); "" for SLOT_SAME. Returns why.
 */
const char *slot_record_why(enum slot_verdict v, const struct slot_record *rec,
                            const struct slot_seen *seen, char *why, size_t len);

/*
 * How far before the record's last commit time a heal (and the exit 8
 * line's republish --since) starts: created_at is a transaction's start, so
 * a row committed after the record's commit may carry an earlier time. Rows
 * of a transaction open longer than this need an earlier --since.
 */
#define HEAL_MARGIN_S 300

/* HEAL_MARGIN_S before rec's commit time as ISO text into buf; NULL when unknown. */
const char *slot_record_heal_since(const struct slot_record *rec, char *buf, size_t len);

/*
 * The server's history, as a replication connection tells it: where its WAL
 * ends (IDENTIFY_SYSTEM's xlogpos), its timeline, and where each earlier
 * timeline of its history ended (TIMELINE_HISTORY: "<tli>\t<switch point>\t
 * <reason>" lines), when asked.
 */
#define SLOT_HISTORY_MAX 64
struct slot_history {
	lsn_t wal_end; /* 0: unknown */
	uint32_t tli;  /* 0: unknown */
	bool listed;   /* the history was read (a server on timeline 1 has none to read) */
	size_t n;
	struct {
		uint32_t tli;
		lsn_t end; /* the switch point: WAL of tli up to here is on this history */
	} past[SLOT_HISTORY_MAX];
};

/*
 * Parse a timeline history file's text into h's past[] (the newest
 * SLOT_HISTORY_MAX timelines); sets h->listed. False when a line is not one.
 */
bool slot_history_parse(const char *text, size_t len, struct slot_history *h);

/*
 * Does the server's history still hold what the relay put in Redis? pos is
 * the highest commit whose events this process handed to Redis; the
 * record's commit_lsn counts too. (Its confirmed position does not: the
 * watermarks stand at commits, so a confirmation past the server's WAL
 * end drops nothing.) It does not when the server's WAL ends before that
 * commit (a standby that was behind, promoted; a copy restored), or when the
 * record's timeline is not on the server's history or ended there before
 * it. Then new commits
 * on this server may get positions the streams' watermarks already passed,
 * and be dropped as replays. NULL when it holds (or cannot be told: a record
 * without a timeline is judged by the WAL end alone); otherwise why, as the
 * end of a sentence that starts "PostgreSQL ", into why[0..len).
 */
const char *slot_history_diverged(const struct slot_record *rec, lsn_t pos,
                                  const struct slot_history *h, char *why, size_t len);

/*
 * --accept-gap accept (LSN_INVALID when not given) accepts a gap only when
 * it names the record's own confirmed position, the one the refusal printed:
 * a later gap, after the record moved, is refused again.
 */
bool slot_record_accepts(const struct slot_record *rec, lsn_t accept);

#endif
