/*
 * confirm.h - the confirm rule: which WAL position the relay may tell
 * PostgreSQL it is done with.
 *
 * Pure: no I/O, no clock. The relay feeds it marks (a WAL position that is
 * done once Redis acknowledged every command queued before it, with the
 * sink's sequence number of the last such command), the sink's acknowledged
 * sequence, and the slot record's writes; it answers the flush position:
 *
 *   flush = max(confirmed, min(acked, rec_acked))
 *
 * where acked is the highest mark whose commands are all acknowledged,
 * rec_acked the position of the slot record Redis acknowledged, and
 * confirmed the highest flush already sent: it never goes backwards.
 * Marks: a commit (C, the commit record's end), a keepalive outside a
 * transaction (its walEnd), a skipped non-transactional message outside a
 * transaction. Nothing inside a transaction is a mark, so a transaction is
 * confirmed only once all its events, dead letters included, are
 * acknowledged.
 */
#ifndef RELAY_CONFIRM_H
#define RELAY_CONFIRM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "lsn.h"

struct confirm_mark {
	uint64_t seq; /* the sink's last command when the mark was made */
	lsn_t lsn;
	lsn_t commit_lsn;  /* the last commit with events up to here, 0 none */
	int64_t commit_us; /* its commit time */
};

struct confirm {
	struct ring marks; /* of struct confirm_mark, oldest first */
	lsn_t acked;       /* highest position whose commands Redis acknowledged */
	lsn_t commit_lsn;  /* the last commit with events Redis acknowledged, and */
	int64_t commit_us; /* its commit time (from the slot record at start) */
	lsn_t rec_acked;   /* the slot record position Redis acknowledged */
	lsn_t rec_pending; /* the position of the record write in flight */
	uint64_t rec_seq;  /* its sequence number, 0 when none */
	lsn_t confirmed;   /* highest flush position sent to PostgreSQL */
	lsn_t sent_commit; /* the highest commit with events handed to the sink, acknowledged or not */
};

/*
 * A mark: lsn is done once the sink acknowledged seq. commit_lsn: a commit
 * that carried events (0 for other marks), committed at commit_us. A mark
 * with the same seq as the newest one moves that one forward. False only
 * when out of memory.
 */
bool confirm_mark(struct confirm *c, uint64_t seq, lsn_t lsn, lsn_t commit_lsn, int64_t commit_us);

/*
 * The sink acknowledged every command up to acked_seq: moves acked over the
 * marks it covers. Returns true when that completed the slot record write in
 * flight (rec_acked moved): the caller then tells pgrepl about it.
 */
bool confirm_acked(struct confirm *c, uint64_t acked_seq);

/* A slot record write for acked is due: acknowledged position past the record, none in flight. */
bool confirm_record_due(const struct confirm *c);
/* The record write for acked was queued as the sink's command seq. */
void confirm_record_queued(struct confirm *c, uint64_t seq);
/*
 * The connection the record write was sent on is gone, and it is not sent
 * again (sink_redis_void_record): a new server may lack events the old one
 * acknowledged, and a write claiming them must not land there behind calls
 * it refuses. rec_acked stays; a new write is due once allowed.
 */
void confirm_record_cancel(struct confirm *c);
/* The slot record read from Redis at start: its positions count as acknowledged. */
void confirm_record_read(struct confirm *c, lsn_t confirmed, lsn_t commit_lsn, int64_t commit_us);

/* --accept-gap: everything before at counts as done and confirmed. */
void confirm_accept(struct confirm *c, lsn_t at);

/* The position PostgreSQL may be told now (see the top of this file). */
lsn_t confirm_flush(const struct confirm *c);
/* flush (from confirm_flush) was sent: remember it, so no later flush is lower. */
void confirm_sent(struct confirm *c, lsn_t flush);
/* Redis lost acknowledged writes: confirm nothing past what was sent. */
void confirm_freeze(struct confirm *c);

void confirm_finish(struct confirm *c);

#endif
