/*
 * confirm.c - the confirm rule (see confirm.h).
 */
#include "confirm.h"

bool confirm_mark(struct confirm *c, uint64_t seq, lsn_t lsn, lsn_t commit_lsn, int64_t commit_us)
{
	struct confirm_mark *m;

	if (commit_lsn > c->sent_commit)
		c->sent_commit = commit_lsn;
	if (c->marks.len > 0) {
		struct confirm_mark *tail = ring_at(&c->marks, c->marks.len - 1);

		if (tail->seq == seq) { /* nothing queued since: just move it forward */
			if (lsn > tail->lsn)
				tail->lsn = lsn;
			if (commit_lsn > tail->commit_lsn) {
				tail->commit_lsn = commit_lsn;
				tail->commit_us = commit_us;
			}
			return true;
		}
	}
	c->marks.item = sizeof(*m);
	if (!(m = ring_push(&c->marks)))
		return false;
	*m = (struct confirm_mark){seq, lsn, commit_lsn, commit_us};
	return true;
}

bool confirm_acked(struct confirm *c, uint64_t acked_seq)
{
	while (c->marks.len > 0 &&
	       ((const struct confirm_mark *)ring_at(&c->marks, 0))->seq <= acked_seq) {
		const struct confirm_mark *mk = ring_at(&c->marks, 0);

		if (mk->lsn > c->acked)
			c->acked = mk->lsn;
		if (mk->commit_lsn > c->commit_lsn) {
			c->commit_lsn = mk->commit_lsn;
			c->commit_us = mk->commit_us;
		}
		ring_pop(&c->marks);
	}
	if (c->rec_seq && acked_seq >= c->rec_seq) {
		if (c->rec_pending > c->rec_acked)
			c->rec_acked = c->rec_pending;
		c->rec_seq = 0;
		return true;
	}
	return false;
}

bool confirm_record_due(const struct confirm *c)
{
	return !c->rec_seq && c->acked > c->rec_acked;
}

void confirm_record_queued(struct confirm *c, uint64_t seq)
{
	c->rec_seq = seq;
	c->rec_pending = c->acked;
}

void confirm_record_cancel(struct confirm *c)
{
	c->rec_seq = 0;
}

void confirm_record_read(struct confirm *c, lsn_t confirmed, lsn_t commit_lsn, int64_t commit_us)
{
	if (confirmed > c->rec_acked)
		c->rec_acked = confirmed;
	if (commit_lsn > c->commit_lsn) {
		c->commit_lsn = commit_lsn;
		c->commit_us = commit_us;
	}
}

void confirm_accept(struct confirm *c, lsn_t at)
{
	if (at > c->acked)
		c->acked = at;
	if (at > c->confirmed)
		c->confirmed = at;
}

lsn_t confirm_flush(const struct confirm *c)
{
	lsn_t f = c->acked < c->rec_acked ? c->acked : c->rec_acked;

	return f > c->confirmed ? f : c->confirmed;
}

void confirm_sent(struct confirm *c, lsn_t flush)
{
	if (flush > c->confirmed)
		c->confirmed = flush;
}

void confirm_freeze(struct confirm *c)
{
	c->acked = c->confirmed;
}

void confirm_finish(struct confirm *c)
{
	ring_finish(&c->marks);
	*c = (struct confirm){0};
}
