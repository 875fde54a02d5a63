/*
 * test_confirm.c - unit tests for lib/confirm.c, the confirm rule.
 *
 * Each case is a script of what the relay feeds the rule (marks, the sink's
 * acknowledged sequence, slot record writes and reads, positions sent) with
 * the flush position expected after every step: the rules the README's
 * "Guarantees" section states, including orders the integration tests cannot
 * force.
 */
#include "confirm.h"
#include "test.h"

enum op {
	MARK,       /* a = seq, b = lsn, c = commit_lsn (0: not a commit with events) */
	ACK,        /* a = acked seq; want_rec: confirm_acked's answer */
	REC_DUE,    /* want_rec: confirm_record_due */
	REC_QUEUE,  /* a = seq of the record write */
	REC_READ,   /* b = the record's confirmed position, c = its commit */
	REC_CANCEL, /* the record write in flight is dropped (a lost connection) */
	SEND,       /* the flush is sent */
	ACCEPT,     /* b = --accept-gap position */
	FREEZE,     /* Redis lost acknowledged writes */
	END
};

struct step {
	enum op op;
	uint64_t a;
	lsn_t b, c;
	lsn_t want_flush;
	int want_rec; /* -1: not checked */
};

static bool run(const struct step *steps, const char *name)
{
	struct confirm c = {0};
	bool good = true;

	for (int i = 0; steps[i].op != END; i++) {
		const struct step *s = &steps[i];
		int got = -1;

		switch (s->op) {
		case MARK:
			CHECK(confirm_mark(&c, s->a, s->b, s->c, s->c ? (int64_t)s->c * 10 : 0));
			break;
		case ACK:
			got = confirm_acked(&c, s->a);
			break;
		case REC_DUE:
			got = confirm_record_due(&c);
			break;
		case REC_QUEUE:
			confirm_record_queued(&c, s->a);
			break;
		case REC_READ:
			confirm_record_read(&c, s->b, s->c, 0);
			break;
		case REC_CANCEL:
			confirm_record_cancel(&c);
			break;
		case SEND:
			confirm_sent(&c, confirm_flush(&c));
			break;
		case ACCEPT:
			confirm_accept(&c, s->b);
			break;
		case FREEZE:
			confirm_freeze(&c);
			break;
		case END:
			break;
		}
		if (confirm_flush(&c) != s->want_flush || (s->want_rec >= 0 && got != s->want_rec)) {
			printf("# %s, step %d: flush %llu (want %llu), answer %d (want %d)\n", name, i,
			       (unsigned long long)confirm_flush(&c), (unsigned long long)s->want_flush, got,
			       s->want_rec);
			good = false;
		}
	}
	confirm_finish(&c);
	return good;
}

/* Positions below are small numbers; the slot record is read as 1000 unless a case is about it. */
#define OPEN                                                                                       \
	{                                                                                              \
		REC_READ, 0, 1000, 0, 0, -1                                                                \
	}

/* A commit is confirmed only once every command before its mark is acknowledged. */
TEST(commit_after_all_its_events)
{
	static const struct step s[] = {
	    OPEN,
	    {MARK, 3, 100, 100, 0, -1}, /* events were seqs 1..3 */
	    {ACK, 2, 0, 0, 0, 0},       /* the third is not: nothing */
	    {ACK, 3, 0, 0, 100, 0},
	    {SEND, 0, 0, 0, 100, -1},
	    {END, 0, 0, 0, 0, 0},
	};
	CHECK(run(s, "commit_after_all_its_events"));
}

/* The flush never passes the slot record Redis acknowledged. */
TEST(record_bounds_the_flush)
{
	static const struct step s[] = {
	    {MARK, 2, 100, 100, 0, -1},
	    {ACK, 2, 0, 0, 0, 0}, /* acked 100, no record yet: 0 */
	    {REC_DUE, 0, 0, 0, 0, 1},
	    {REC_QUEUE, 3, 0, 0, 0, -1},
	    {REC_DUE, 0, 0, 0, 0, 0}, /* one in flight: no second */
	    {MARK, 5, 200, 200, 0, -1},
	    {ACK, 5, 0, 0, 100, 1},     /* the record write (seq 3) acknowledged: up to it */
	    {REC_DUE, 0, 0, 0, 100, 1}, /* 200 is past the record: the next write is due */
	    {REC_QUEUE, 6, 0, 0, 100, -1},
	    {ACK, 6, 0, 0, 200, 1},
	    {END, 0, 0, 0, 0, 0},
	};
	CHECK(run(s, "record_bounds_the_flush"));
}

/*
 * A record write dropped with its connection: its acknowledgement can no
 * longer move the flush (the seq is acknowledged only because the write was
 * voided), and a new write is due.
 */
TEST(record_cancelled)
{
	static const struct step s[] = {
	    {MARK, 2, 100, 100, 0, -1},   {ACK, 2, 0, 0, 0, 0},        {REC_QUEUE, 3, 0, 0, 0, -1},
	    {REC_CANCEL, 0, 0, 0, 0, -1}, {ACK, 3, 0, 0, 0, 0}, /* the voided write counts as done: no
	                                                           record moved */
	    {REC_DUE, 0, 0, 0, 0, 1},     {REC_QUEUE, 4, 0, 0, 0, -1}, {ACK, 4, 0, 0, 100, 1},
	    {END, 0, 0, 0, 0, 0},
	};
	CHECK(run(s, "record_cancelled"));
}

/* What was sent is never undercut: an older record read later, a freeze. */
TEST(never_backwards)
{
	static const struct step s[] = {
	    OPEN,
	    {MARK, 1, 300, 300, 0, -1},
	    {ACK, 1, 0, 0, 300, 0},
	    {SEND, 0, 0, 0, 300, -1},
	    {REC_READ, 0, 50, 50, 300, -1}, /* a record behind: no effect */
	    {MARK, 2, 400, 400, 300, -1},
	    {FREEZE, 0, 0, 0, 300, -1}, /* Redis lost writes: stay at what was sent */
	    {ACK, 2, 0, 0, 400, 0},     /* ... until a later acknowledgement */
	    {FREEZE, 0, 0, 0, 300, -1},
	    {END, 0, 0, 0, 0, 0},
	};
	CHECK(run(s, "never_backwards"));
}

/*
 * A keepalive outside a transaction with nothing queued since the last mark
 * moves that mark forward; one inside a transaction is no mark (the relay
 * makes none), so it cannot confirm past the open transaction.
 */
TEST(keepalives)
{
	static const struct step s[] = {
	    OPEN,
	    {MARK, 3, 100, 100, 0, -1},
	    {MARK, 3, 150, 0, 0, -1}, /* keepalive: the same seq, later walEnd */
	    {ACK, 3, 0, 0, 150, 0},
	    {MARK, 3, 180, 0, 150, -1}, /* again, nothing queued: taken at the next ACK */
	    {ACK, 3, 0, 0, 180, 0},
	    /* events of the next transaction, seqs 4..5; a keepalive now makes no mark */
	    {ACK, 5, 0, 0, 180, 0},
	    {MARK, 5, 250, 250, 180, -1}, /* its commit */
	    {ACK, 5, 0, 0, 250, 0},
	    {END, 0, 0, 0, 0, 0},
	};
	CHECK(run(s, "keepalives"));
}

/* A dead letter inside a transaction holds its commit like any event. */
TEST(dead_letter_inside_transaction)
{
	static const struct step s[] = {
	    OPEN,
	    {MARK, 7, 300, 300, 0, -1}, /* seq 6: event, 7: its dead-lettered neighbour */
	    {ACK, 6, 0, 0, 0, 0},
	    {ACK, 7, 0, 0, 300, 0},
	    {MARK, 7, 310, 0, 300, -1}, /* a skipped non-transactional message after it */
	    {ACK, 7, 0, 0, 310, 0},
	    {END, 0, 0, 0, 0, 0},
	};
	CHECK(run(s, "dead_letter_inside_transaction"));
}

/* --accept-gap: the accepted position counts as done and sent, whatever the record says. */
TEST(accepted_gap)
{
	static const struct step s[] = {
	    {REC_READ, 0, 100, 100, 0, -1}, {ACCEPT, 0, 500, 0, 500, -1},
	    {REC_DUE, 0, 0, 0, 500, 1}, /* the record must move there */
	    {MARK, 1, 600, 600, 500, -1},   {ACK, 1, 0, 0, 500, 0},
	    {END, 0, 0, 0, 0, 0},
	};
	CHECK(run(s, "accepted_gap"));
}

/* Thousands of marks through the ring, acknowledged in steps that wrap its head. */
TEST(ring_wraps)
{
	struct confirm c = {0};
	uint64_t seq = 0;

	confirm_record_read(&c, UINT64_MAX / 2, 0, 0);
	for (int round = 0; round < 20; round++) {
		for (int i = 0; i < 300; i++) {
			seq += 1 + (uint64_t)(i % 3);
			CHECK(confirm_mark(&c, seq, seq * 10, seq * 10, 0));
		}
		/* acknowledge up to a seq that is not a mark: the marks at or below it */
		(void)confirm_acked(&c, seq - 150);
		CHECK(c.acked <= (seq - 150) * 10 && c.acked > (seq - 160) * 10);
		CHECK(confirm_flush(&c) == c.acked);
	}
	(void)confirm_acked(&c, seq);
	CHECK_INT(c.acked, seq * 10);
	CHECK_INT(c.marks.len, 0);
	confirm_finish(&c);
}

int main(void)
{
	RUN(commit_after_all_its_events);
	RUN(record_bounds_the_flush);
	RUN(never_backwards);
	RUN(record_cancelled);
	RUN(keepalives);
	RUN(dead_letter_inside_transaction);
	RUN(accepted_gap);
	RUN(ring_wraps);
	return test_done();
}
