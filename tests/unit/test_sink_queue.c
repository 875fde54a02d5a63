/*
 * test_sink_queue.c - unit tests for lib/sink_queue.c, the sink's command
 * ring, batch encoder and reply bookkeeping.
 *
 * Each case is a script of what the sink does (events queued, commands
 * routed to one of two connections, staged, replies arriving, a lost
 * connection) with what must hold after each step: the acknowledged
 * sequence, the events in flight, the flush position lib/confirm.c derives
 * from the acknowledged sequence and the marks, and what must be sent again.
 * Replies are RESP bytes parsed by hiredis's reader, and the staged bytes
 * are parsed back the same way, so the commands are checked as Redis would
 * read them. Covers the rules of README's "Guarantees" that the queue
 * carries, including orders the integration tests cannot force: a MOVED
 * between two marks, a reply to a command sent again after a reconnect, an
 * ASK redirect, a dead letter inside a transaction, WAIT.
 */
#include <hiredis/hiredis.h>

#include "confirm.h"
#include "sink_queue.h"
#include "sink_redis.h"
#include "test.h"

enum op {
	EV,      /* an event: stream s, commit lsn a, index b */
	DL,      /* a dead-letter event: stream s, commit lsn a, index b */
	HOLD,    /* an event with a 64 KiB value sent from its own memory: stream s, lsn a, index b */
	FLUSH,   /* close the open batch */
	MARK,    /* a commit mark at the last seq: lsn a */
	RECORD,  /* a slot record write */
	ROUTE,   /* every queued command (b = 0) or seq b to connection a */
	STAGE,   /* stage connection a's commands: s = their names and first arguments, one a line */
	REPLY,   /* RESP bytes s arrive on connection a: s2 = the answers (see answer_code) */
	ADVANCE, /* pop the done prefix and tell the confirm rule */
	WAITOK,  /* WAIT answered enough on connection a */
	LOST,    /* every connection lost: s = the seqs queued again */
	ARG,     /* argument b of the a-th command last staged (from 0) is s */
	BEHIND,  /* the function refused seq a as behind: b = 1 when resending both fixes it */
	FREED,   /* a held events' memory was released so far */
	BACKLOG, /* streaming (re)started at the slot's position a, the server's WAL end b */
	AT,      /* a message at position a was decoded */
	HELD,    /* a held transaction of a messages starts (sq_held; a 0: none any more) */
	NEXT,    /* a more of its messages are handled */
	TRIM,    /* a --trim acked call for stream s */
	END
};

struct step {
	enum op op;
	const char *s;
	uint64_t a, b;
	const char *s2;
	int64_t want_acked;  /* -1: not checked */
	int64_t want_flight; /* events in flight; -1: not checked */
	int64_t want_flush;  /* -1: not checked */
};

#define NLINKS 2

struct link {
	struct ring sendq, waitq, durable;
	struct buf wbuf;
	uint64_t part_seq;
	size_t part_off;
	bool staged_publish;
	redisReader *rd;
};

struct rig {
	struct relay_config cf;
	bool use_functions;
	struct sink_queue q;
	struct link l[NLINKS];
	struct confirm c;
	bool wait_mode;
	redisReply *staged[64]; /* the last STAGE's commands, parsed */
	size_t nstaged;
	int held_freed;
};

static const char *groups_none[] = {NULL};

static void rig_init(struct rig *r, bool cluster, bool wait_mode)
{
	memset(r, 0, sizeof(*r));
	r->cf.key_prefix = "outbox-relay";
	r->cf.slot = "s1";
	r->cf.dead_letter_stream = "outbox:dead-letter";
	r->cf.dedup_window_s = 3600;
	r->cf.maxlen = 0;
	r->cf.groups = (char **)groups_none;
	r->cf.ngroups = 0;
	r->use_functions = true;
	r->wait_mode = wait_mode;
	sq_init(&r->q, &r->cf, cluster);
	r->q.use_functions = &r->use_functions;
	r->q.sha = "0123456789012345678901234567890123456789";
	memcpy(r->q.owner, "7000000000000000001/app", 24);
	for (int i = 0; i < NLINKS; i++)
		r->l[i].rd = redisReaderCreate();
	confirm_record_read(&r->c, 1000000, 0, 0); /* no slot record bound in these cases */
}

static void free_staged(struct rig *r)
{
	for (size_t i = 0; i < r->nstaged; i++)
		freeReplyObject(r->staged[i]);
	r->nstaged = 0;
}

static void link_reset(struct link *l)
{
	l->sendq.len = l->waitq.len = l->durable.len = 0;
	buf_reset(&l->wbuf);
	l->part_seq = 0;
	l->part_off = 0;
	l->staged_publish = false;
	redisReaderFree(l->rd);
	l->rd = redisReaderCreate();
}

static void rig_finish(struct rig *r)
{
	free_staged(r);
	for (int i = 0; i < NLINKS; i++) {
		ring_finish(&r->l[i].sendq);
		ring_finish(&r->l[i].waitq);
		ring_finish(&r->l[i].durable);
		buf_finish(&r->l[i].wbuf);
		redisReaderFree(r->l[i].rd);
	}
	sq_finish(&r->q);
	confirm_finish(&r->c);
}

static void count_free(void *p)
{
	(*(int *)p)++;
}

/* Queue one event as sink_redis_publish_held does (no consumer groups, no metrics). */
static bool publish(struct rig *r, const char *stream, lsn_t lsn, uint32_t index, bool dead,
                    bool held)
{
	static char big[SQ_EXT_MIN_BYTES];
	char id[40];
	struct event_field f[2] = {
	    {"type", 4, "created", 7},
	    {"payload", 7, held ? big : "{\"n\":1}", held ? sizeof(big) : 7},
	};
	struct event ev = {
	    .stream = stream,
	    .stream_len = strlen(stream),
	    .id = id,
	    .id_len = (size_t)snprintf(id, sizeof(id), "ev-%llu-%u", (unsigned long long)lsn, index),
	    .commit_lsn = lsn,
	    .index = index,
	    .fields = f,
	    .nfields = 2,
	    .dead_reason = dead ? DEAD_NOT_JSON : DEAD_ID_MISSING,
	};
	struct sink_hold hold = {&r->held_freed, big, sizeof(big), count_free};
	bool large = held && sq_has_held_value(&ev, &hold);

	memset(big, 'x', sizeof(big));
	if (dead) {
		ev.id = NULL; /* dead letters skip dedup */
		ev.id_len = 0;
	}
	if (sq_batch_breaks(&r->q, &ev, dead, large) && !sq_close_batch(&r->q))
		return false;
	if (!r->q.b_open && !sq_batch_open(&r->q, &ev, dead, 0))
		return false;
	return sq_batch_add(&r->q, &ev, dead, large ? &hold : NULL) && (!large || hold.p == NULL);
}

/* One letter per answer: M mark, X executed, R read, A ask, E error, F malformed, U unknown, T trim
 * answered. */
static char answer_code(enum sq_answer a)
{
	static const char codes[] = "MXRAEFUNT";

	return codes[a];
}

/* Feed bytes to connection a; handle each reply as sink_reply.c's sink_handle_reply does. */
static bool reply(struct rig *r, int a, const char *bytes, int ask_to, char *got, size_t gotlen)
{
	struct link *l = &r->l[a];
	void *rep;
	size_t n = 0;

	if (redisReaderFeed(l->rd, bytes, strlen(bytes)) != REDIS_OK)
		return false;
	while (redisReaderGetReply(l->rd, &rep) == REDIS_OK && rep) {
		redisReply *rr = rep;
		uint64_t what = 0;
		struct sq_ent *e;
		enum sq_answer ans =
		    sq_take_reply(&r->q, &l->waitq, &l->durable, r->wait_mode, rr, &what, &e);

		if (ans == SQ_A_MARK && what == SQ_WAIT_MARK && rr->type == REDIS_REPLY_INTEGER &&
		    rr->integer >= 1)
			sq_wait_done(&r->q, &l->durable);
		if (ans == SQ_A_ASK && !sq_route(&r->q, e, &r->l[ask_to].sendq, ask_to, true))
			ans = SQ_A_NOMEM;
		if (ans == SQ_A_READ)
			e->state = SQ_DONE;
		if (n + 2 < gotlen)
			got[n++] = answer_code(ans);
		freeReplyObject(rr);
	}
	got[n] = '\0';
	return true;
}

/* Stage connection a and parse what was staged back into commands. */
static void stage(struct rig *r, int a, char *got, size_t gotlen)
{
	struct link *l = &r->l[a];
	redisReader *rd = redisReaderCreate();
	void *rep;
	size_t n = 0;

	free_staged(r);
	buf_reset(&l->wbuf);
	got[0] = '\0';
	if (!sq_stage(&r->q, &l->sendq, &l->waitq, &l->wbuf, 1u << 20, &l->part_seq, &l->part_off,
	              &l->staged_publish)) {
		redisReaderFree(rd);
		return;
	}
	if (l->wbuf.len)
		(void)redisReaderFeed(rd, l->wbuf.data, l->wbuf.len);
	while (redisReaderGetReply(rd, &rep) == REDIS_OK && rep && r->nstaged < 64) {
		redisReply *c = rep;

		r->staged[r->nstaged++] = c;
		n +=
		    (size_t)snprintf(got + n, gotlen - n, "%s%s%s%s", n ? "\n" : "", c->element[0]->str,
		                     c->elements > 1 ? " " : "", c->elements > 1 ? c->element[1]->str : "");
		if (c->elements > 3 && strcmp(c->element[0]->str, "FCALL") == 0)
			n += (size_t)snprintf(got + n, gotlen - n, " %s", c->element[3]->str);
	}
	redisReaderFree(rd);
}

static bool run(const struct step *steps, const char *name, bool cluster, bool wait_mode)
{
	struct rig r;
	bool good = true;
	uint64_t prev_acked = 0;
	lsn_t prev_flush = 0;

	rig_init(&r, cluster, wait_mode);
	for (int i = 0; steps[i].op != END; i++) {
		const struct step *s = &steps[i];
		char got[1024] = "";
		const char *want = NULL;
		bool ok = true;

		switch (s->op) {
		case EV:
		case DL:
		case HOLD:
			ok = publish(&r, s->s, s->a, (uint32_t)s->b, s->op == DL, s->op == HOLD);
			break;
		case FLUSH:
			ok = sq_close_batch(&r.q);
			break;
		case MARK:
			ok = confirm_mark(&r.c, r.q.next_seq - 1, s->a, s->a, 0);
			break;
		case RECORD:
			ok = sq_queue_record(&r.q, SQ_RECORD, "0 0 0 x", 7);
			break;
		case TRIM:
			ok = sq_queue_trim(&r.q, s->s, strlen(s->s));
			break;
		case ROUTE:
			for (size_t k = 0; k < r.q.q.len; k++) {
				struct sq_ent *e = ring_at(&r.q.q, k);

				if (e->state == SQ_QUEUED && (!s->b || e->seq == s->b))
					ok = ok && sq_route(&r.q, e, &r.l[s->a].sendq, (int)s->a, false);
			}
			break;
		case STAGE:
			stage(&r, (int)s->a, got, sizeof(got));
			want = s->s;
			break;
		case REPLY:
			ok = reply(&r, (int)s->a, s->s, (int)s->b, got, sizeof(got));
			want = s->s2;
			break;
		case ADVANCE:
			sq_advance(&r.q);
			(void)confirm_acked(&r.c, r.q.acked_seq);
			break;
		case WAITOK:
			sq_wait_done(&r.q, &r.l[s->a].durable);
			break;
		case LOST: {
			size_t n = 0;

			for (int k = 0; k < NLINKS; k++)
				link_reset(&r.l[k]);
			sq_requeue(&r.q);
			for (size_t k = 0; k < r.q.q.len; k++) {
				const struct sq_ent *e = ring_at(&r.q.q, k);

				if (e->state == SQ_QUEUED)
					n += (size_t)snprintf(got + n, sizeof(got) - n, "%s%llu", n ? " " : "",
					                      (unsigned long long)e->seq);
			}
			want = s->s;
			break;
		}
		case ARG: {
			const redisReply *c = s->a < r.nstaged ? r.staged[s->a] : NULL;

			if (c && s->b < c->elements)
				snprintf(got, sizeof(got), "%.*s", (int)c->element[s->b]->len,
				         c->element[s->b]->str);
			want = s->s;
			break;
		}
		case BEHIND: {
			const struct sq_ent *e = sq_ent(&r.q, s->a);

			ok = e && sq_prev_pending(&r.q, e) == (s->b == 1);
			break;
		}
		case FREED:
			ok = r.held_freed == (int)s->a;
			break;
		case BACKLOG:
			sq_backlog_start(&r.q, s->a, s->b);
			break;
		case AT:
			sq_backlog_at(&r.q, s->a);
			break;
		case HELD:
			sq_held(&r.q, s->a);
			break;
		case NEXT:
			for (uint64_t k = 0; k < s->a; k++)
				sq_held_next(&r.q);
			break;
		case END:
			break;
		}
		if (!ok || (want && strcmp(got, want) != 0) ||
		    (s->want_acked >= 0 && r.q.acked_seq != (uint64_t)s->want_acked) ||
		    (s->want_flight >= 0 && r.q.inflight_events != (uint64_t)s->want_flight) ||
		    (s->want_flush >= 0 && confirm_flush(&r.c) != (lsn_t)s->want_flush) ||
		    r.q.acked_seq < prev_acked || confirm_flush(&r.c) < prev_flush) {
			printf("# %s, step %d: ok %d, got \"%s\" (want \"%s\"), acked %llu (want %lld), "
			       "in flight %llu (want %lld), flush %llu (want %lld)\n",
			       name, i, ok, got, want ? want : "", (unsigned long long)r.q.acked_seq,
			       (long long)s->want_acked, (unsigned long long)r.q.inflight_events,
			       (long long)s->want_flight, (unsigned long long)confirm_flush(&r.c),
			       (long long)s->want_flush);
			good = false;
		}
		prev_acked = r.q.acked_seq;
		prev_flush = confirm_flush(&r.c);
	}
	free_staged(&r);
	rig_finish(&r);
	return good;
}

#define NO -1, -1, -1
#define OK_ARRAY1 "*1\r\n$3\r\n1-1\r\n"
#define OK_ARRAY2 "*2\r\n$3\r\n1-1\r\n$3\r\n1-2\r\n"

/* Consecutive events of one stream share a call; acks move in order across calls. */
TEST(batches_and_in_order_acks)
{
	static const struct step s[] = {
	    {EV, "orders", 100, 0, NULL, 0, 1, 0},
	    {EV, "orders", 100, 1, NULL, 0, 2, 0},
	    {EV, "payments", 100, 2, NULL, 0, 3, 0}, /* another stream closes the batch */
	    {FLUSH, NULL, 0, 0, NULL, NO},
	    {MARK, NULL, 100, 0, NULL, NO},
	    {EV, "payments", 200, 0, NULL, NO},
	    {FLUSH, NULL, 0, 0, NULL, NO},
	    {MARK, NULL, 200, 0, NULL, 0, 4, 0},
	    {ROUTE, NULL, 0, 0, NULL, NO},
	    {STAGE,
	     "FCALL outbox_relay_publish orders\nFCALL outbox_relay_publish payments\nFCALL "
	     "outbox_relay_publish payments",
	     0, 0, NULL, NO},
	    /* keys, then ttl maxlen owner expect slot prefix ids-to-come, then per event: position,
	     * dedup field, field count, fields */
	    {ARG, "outbox-relay:wm:{orders}:s1", 0, 4, NULL, NO},
	    {ARG, "3600", 0, 8, NULL, NO},
	    {ARG, "7000000000000000001/app", 0, 10, NULL, NO},
	    {ARG, "", 0, 11, NULL, NO},  /* the stream's first call: no expectation */
	    {ARG, "2", 0, 14, NULL, NO}, /* ids to come: no backlog, the call's own */
	    {ARG, "0000000000000064:00000000", 0, 15, NULL, NO},
	    {ARG, "2", 0, 17, NULL, NO},
	    {ARG, "0000000000000064:00000001", 0, 22, NULL, NO},
	    {ARG, "0000000000000064:00000002", 1, 15, NULL, NO},
	    {ARG, "0000000000000064:00000002", 2, 11, NULL, NO}, /* where the previous call ends */
	    {ARG, "00000000000000C8:00000000", 2, 15, NULL, NO},
	    {REPLY, OK_ARRAY2, 0, 0, "X", NO},
	    {ADVANCE, NULL, 0, 0, NULL, 1, 2, 0}, /* payments' event of lsn 100 is not acked */
	    {REPLY, OK_ARRAY1, 0, 0, "X", NO},
	    {ADVANCE, NULL, 0, 0, NULL, 2, 1, 100},
	    {REPLY, OK_ARRAY1, 0, 0, "X", NO},
	    {ADVANCE, NULL, 0, 0, NULL, 3, 0, 200},
	    {END, NULL, 0, 0, NULL, NO},
	};
	CHECK(run(s, "batches_and_in_order_acks", false, false));
}

/* The 129th event of a stream opens a second call; its expectation is the first call's end. */
TEST(batch_limit)
{
	struct step s[140 + 8];
	int n = 0;

	for (int i = 0; i < 130; i++)
		s[n++] = (struct step){EV, "orders", 100, (uint64_t)i, NULL, 0, i + 1, 0};
	s[n++] = (struct step){FLUSH, NULL, 0, 0, NULL, NO};
	s[n++] = (struct step){ROUTE, NULL, 0, 0, NULL, NO};
	s[n++] = (struct step){
	    STAGE, "FCALL outbox_relay_publish orders\nFCALL outbox_relay_publish orders", 0, 0, NULL,
	    NO};
	s[n++] = (struct step){ARG, "0000000000000064:0000007F", 1, 11, NULL, NO};
	s[n++] = (struct step){REPLY, "*2\r\n:0\r\n:0\r\n", 0, 0, "F", NO}; /* 2 of 128: malformed */
	s[n++] = (struct step){ADVANCE, NULL, 0, 0, NULL, 0, 130, 0};
	s[n++] = (struct step){END, NULL, 0, 0, NULL, NO};
	CHECK(run(s, "batch_limit", false, false));
}

/* A plan of hint tests: EV a = events of stream, each closed as one call; others as steps. */
struct hint_step {
	enum op op;
	const char *stream;
	uint64_t a, b;
};

/* Run plan; the calls' ids to come (argument 14) must be want[], in order. */
static bool run_hints(const char *name, const struct hint_step *plan, size_t nplan,
                      const char *const *want, size_t nwant)
{
	static struct step s[800];
	static char stage[1024];
	size_t n = 0, len = 0, calls = 0;

	stage[0] = '\0';
	for (size_t i = 0; i < nplan; i++) {
		if (plan[i].op != EV) {
			s[n++] = (struct step){plan[i].op, NULL, plan[i].a, plan[i].b, NULL, NO};
			continue;
		}
		for (uint64_t e = 0; e < plan[i].a; e++)
			s[n++] = (struct step){EV, plan[i].stream, 5000, e, NULL, NO};
		s[n++] = (struct step){FLUSH, NULL, 0, 0, NULL, NO};
		len += (size_t)snprintf(stage + len, sizeof(stage) - len, "%sFCALL outbox_relay_publish %s",
		                        calls++ ? "\n" : "", plan[i].stream);
	}
	s[n++] = (struct step){ROUTE, NULL, 0, 0, NULL, NO};
	s[n++] = (struct step){STAGE, stage, 0, 0, NULL, NO};
	for (size_t c = 0; c < nwant; c++)
		s[n++] = (struct step){ARG, want[c], (uint64_t)c, 14, NULL, NO};
	s[n++] = (struct step){END, NULL, 0, 0, NULL, NO};
	return calls == nwant && run(s, name, false, false);
}

/*
 * Each call says how many ids of its stream are still to come: its own
 * events, plus while a backlog drains and the stream has 64 events to go by,
 * the stream's events so far scaled by the WAL ahead over the WAL read.
 * Counts start again when streaming does.
 */
TEST(backlog_hint)
{
	static const struct hint_step plan[] = {
	    {BACKLOG, NULL, 1000, 101000},
	    {AT, NULL, 2000, 0},
	    {EV, "orders", 10, 0}, /* 10: too few to go by */
	    {AT, NULL, 11000, 0},
	    {AT, NULL, 10500, 0},    /* positions are not monotonic: the newest counts */
	    {EV, "orders", 70, 0},   /* 70 + 80 * 90000 / 10000 = 790 */
	    {EV, "payments", 64, 0}, /* 64 + 64 * 9 = 640 */
	    {AT, NULL, 101000, 0},
	    {EV, "orders", 1, 0},            /* the backlog is read: 1 */
	    {BACKLOG, NULL, 200000, 300000}, /* a reconnect */
	    {AT, NULL, 250000, 0},
	    {EV, "orders", 64, 0}, /* counted from the reconnect: 64 + 64 * 1 = 128 */
	};
	static const char *const want[] = {"10", "790", "640", "1", "128"};

	CHECK(run_hints("backlog_hint", plan, sizeof(plan) / sizeof(plan[0]), want,
	                sizeof(want) / sizeof(want[0])));
}

/*
 * A held transaction (pgoutput, known whole at its commit) says how many of
 * its messages are still to come: each call expects its stream's share of
 * them, once the stream has 64 events in it to go by, whatever the backlog
 * says (the larger estimate wins). Counts start again with each held
 * transaction; none is held after it.
 */
TEST(held_hint)
{
	static const struct hint_step plan[] = {
	    {HELD, NULL, 10000, 0},
	    {NEXT, NULL, 10, 0},
	    {EV, "orders", 10, 0},   /* 10: too few to go by */
	    {NEXT, NULL, 190, 0},    /* 200 messages handled, 80 of them orders' */
	    {EV, "orders", 70, 0},   /* 70 + 80 * 9800 / 200 = 3990 */
	    {EV, "payments", 64, 0}, /* 64 + 64 * 49 = 3200 */
	    {NEXT, NULL, 9800, 0},   /* the last message: nothing more to come */
	    {EV, "orders", 1, 0},    /* 1 */
	    {HELD, NULL, 0, 0},      /* the transaction is over */
	    {EV, "orders", 100, 0},  /* 100 */
	    {BACKLOG, NULL, 1000, 101000},
	    {AT, NULL, 11000, 0},
	    {HELD, NULL, 1000, 0}, /* counted from this transaction's start */
	    {NEXT, NULL, 500, 0},
	    {EV, "orders", 64, 0}, /* held: 64 + 64 = 128; the backlog: 64 + 64 * 9 = 640 */
	};
	static const char *const want[] = {"10", "3990", "3200", "1", "100", "640"};

	CHECK(run_hints("held_hint", plan, sizeof(plan) / sizeof(plan[0]), want,
	                sizeof(want) / sizeof(want[0])));
}

/*
 * Two cluster masters: the second call's reply comes first; the first call
 * meets MOVED. The acknowledged sequence stays before the moved call, so the
 * mark between them is not confirmed; after the reconnect only the moved
 * call is sent again, and its reply maps to its own sequence.
 */
TEST(moved_between_two_marks)
{
	static const struct step s[] = {
	    {EV, "orders", 100, 0, NULL, NO},
	    {FLUSH, NULL, 0, 0, NULL, NO},
	    {MARK, NULL, 100, 0, NULL, NO},
	    {EV, "payments", 200, 0, NULL, NO},
	    {FLUSH, NULL, 0, 0, NULL, NO},
	    {MARK, NULL, 200, 0, NULL, NO},
	    {ROUTE, NULL, 0, 1, NULL, NO},
	    {ROUTE, NULL, 1, 2, NULL, NO},
	    {STAGE, "FCALL outbox_relay_publish orders", 0, 0, NULL, NO},
	    {STAGE, "FCALL outbox_relay_publish payments", 1, 0, NULL, NO},
	    {REPLY, OK_ARRAY1, 1, 0, "X", NO},
	    {ADVANCE, NULL, 0, 0, NULL, 0, 2, 0},
	    {REPLY, "-MOVED 3000 127.0.0.1:7001\r\n", 0, 0, "E", NO},
	    {ADVANCE, NULL, 0, 0, NULL, 0, 2, 0},
	    {LOST, "1", 0, 0, NULL, 0, 2, 0}, /* seq 2 is done: not sent again */
	    {ROUTE, NULL, 1, 0, NULL, NO},
	    {STAGE, "FCALL outbox_relay_publish orders", 1, 0, NULL, NO},
	    {REPLY, "*1\r\n:0\r\n", 1, 0, "X", NO}, /* a replay: it ran before the MOVED? still done */
	    {ADVANCE, NULL, 0, 0, NULL, 2, 0, 200},
	    {END, NULL, 0, 0, NULL, NO},
	};
	CHECK(run(s, "moved_between_two_marks", true, false));
}

/*
 * A lost connection with replies outstanding: everything not done is sent
 * again in sequence order on the new connection, and the replies there map
 * to the resent sequences; one reply per command, events counted out once.
 */
TEST(resend_after_reconnect)
{
	static const struct step s[] = {
	    {EV, "orders", 100, 0, NULL, NO},
	    {FLUSH, NULL, 0, 0, NULL, NO},
	    {EV, "payments", 100, 1, NULL, NO},
	    {FLUSH, NULL, 0, 0, NULL, NO},
	    {MARK, NULL, 100, 0, NULL, NO},
	    {EV, "orders", 200, 0, NULL, NO},
	    {FLUSH, NULL, 0, 0, NULL, NO},
	    {MARK, NULL, 200, 0, NULL, 0, 3, 0},
	    {ROUTE, NULL, 0, 0, NULL, NO},
	    {STAGE,
	     "FCALL outbox_relay_publish orders\nFCALL outbox_relay_publish payments\nFCALL "
	     "outbox_relay_publish orders",
	     0, 0, NULL, NO},
	    {REPLY, OK_ARRAY1, 0, 0, "X", NO},
	    {ADVANCE, NULL, 0, 0, NULL, 1, 2, 0},
	    /* half of the second reply, then the connection is gone */
	    {REPLY, "*1\r\n$3\r\n1-", 0, 0, "", NO},
	    {LOST, "2 3", 0, 0, NULL, 1, 2, 0},
	    {ROUTE, NULL, 0, 0, NULL, NO},
	    {STAGE, "FCALL outbox_relay_publish payments\nFCALL outbox_relay_publish orders", 0, 0,
	     NULL, NO},
	    {ARG, "0000000000000064:00000000", 1, 11, NULL, NO}, /* still expects seq 1's position */
	    {REPLY, "*1\r\n:0\r\n", 0, 0, "X", NO},
	    {ADVANCE, NULL, 0, 0, NULL, 2, 1, 100},
	    {REPLY, "*1\r\n$3\r\n1-3\r\n", 0, 0, "X", NO},
	    {ADVANCE, NULL, 0, 0, NULL, 3, 0, 200},
	    {REPLY, "*1\r\n:0\r\n", 0, 0, "U", NO}, /* nothing more in flight: not counted */
	    {ADVANCE, NULL, 0, 0, NULL, 3, 0, 200},
	    {END, NULL, 0, 0, NULL, NO},
	};
	CHECK(run(s, "resend_after_reconnect", false, false));
}

/* ASK: the call goes to the named master after ASKING; nothing else moves. */
TEST(ask_redirect)
{
	static const struct step s[] = {
	    {EV, "orders", 100, 0, NULL, NO},
	    {FLUSH, NULL, 0, 0, NULL, NO},
	    {MARK, NULL, 100, 0, NULL, NO},
	    {ROUTE, NULL, 0, 0, NULL, NO},
	    {STAGE, "FCALL outbox_relay_publish orders", 0, 0, NULL, NO},
	    {REPLY, "-ASK 3000 127.0.0.1:7001\r\n", 0, 1, "A", NO},
	    {ADVANCE, NULL, 0, 0, NULL, 0, 1, 0},
	    {STAGE, "", 0, 0, NULL, NO}, /* not on the first master any more */
	    {STAGE, "ASKING\nFCALL outbox_relay_publish orders", 1, 0, NULL, NO},
	    {REPLY, "+OK\r\n" OK_ARRAY1, 1, 0, "MX", NO},
	    {ADVANCE, NULL, 0, 0, NULL, 1, 0, 100},
	    {END, NULL, 0, 0, NULL, NO},
	};
	CHECK(run(s, "ask_redirect", true, false));
}

/*
 * A dead-lettered event inside a transaction is a call of its own between
 * the batches around it; the commit is confirmed only when all three are
 * acknowledged, and the dead letter skips dedup and trimming.
 */
TEST(dead_letter_inside_transaction)
{
	static const struct step s[] = {
	    {EV, "orders", 100, 0, NULL, NO},
	    {EV, "orders", 100, 1, NULL, NO},
	    {DL, "outbox:dead-letter", 100, 2, NULL, 0, 3, 0},
	    {EV, "orders", 100, 3, NULL, NO},
	    {FLUSH, NULL, 0, 0, NULL, NO},
	    {MARK, NULL, 100, 0, NULL, 0, 4, 0},
	    {ROUTE, NULL, 0, 0, NULL, NO},
	    {STAGE,
	     "FCALL outbox_relay_publish orders\nFCALL outbox_relay_publish "
	     "outbox:dead-letter\nFCALL outbox_relay_publish orders",
	     0, 0, NULL, NO},
	    {ARG, "0", 1, 8, NULL, NO}, /* no dedup window */
	    {ARG, "0", 1, 9, NULL, NO}, /* no MAXLEN */
	    {ARG, "0000000000000064:00000001", 2, 11, NULL, NO},
	    {REPLY, OK_ARRAY2 OK_ARRAY1, 0, 0, "XX", NO},
	    {ADVANCE, NULL, 0, 0, NULL, 2, 1, 0},
	    {REPLY, "*1\r\n:2\r\n", 0, 0, "X", NO}, /* rejected by the key, dead-lettered by Redis */
	    {ADVANCE, NULL, 0, 0, NULL, 3, 0, 100},
	    {END, NULL, 0, 0, NULL, NO},
	};
	CHECK(run(s, "dead_letter_inside_transaction", false, false));
}

/* A refusal as behind the watermark: resent in order while the earlier call is undone. */
TEST(behind_the_watermark)
{
	static const struct step s[] = {
	    {EV, "orders", 100, 0, NULL, NO},
	    {FLUSH, NULL, 0, 0, NULL, NO},
	    {EV, "orders", 200, 0, NULL, NO},
	    {FLUSH, NULL, 0, 0, NULL, NO},
	    {ROUTE, NULL, 0, 1, NULL, NO},
	    {ROUTE, NULL, 1, 2, NULL, NO},
	    {STAGE, "FCALL outbox_relay_publish orders", 1, 0, NULL, NO},
	    {REPLY, "-ERR OUTBOX_BEHIND x is at nothing, expected y\r\n", 1, 0, "E", NO},
	    {BEHIND, NULL, 2, 1, NULL, NO}, /* seq 1 has not run: send both again */
	    {LOST, "1 2", 0, 0, NULL, NO},
	    {ROUTE, NULL, 0, 0, NULL, NO},
	    {STAGE, "FCALL outbox_relay_publish orders\nFCALL outbox_relay_publish orders", 0, 0, NULL,
	     NO},
	    {REPLY, OK_ARRAY1, 0, 0, "X", NO},
	    {ADVANCE, NULL, 0, 0, NULL, 1, 1, -1},
	    {REPLY, "-ERR OUTBOX_BEHIND x is at nothing, expected y\r\n", 0, 0, "E", NO},
	    {BEHIND, NULL, 2, 0, NULL, NO}, /* seq 1 is done: Redis lost it */
	    {END, NULL, 0, 0, NULL, NO},
	};
	CHECK(run(s, "behind_the_watermark", false, false));
}

/*
 * --wait-replicas: an executed call is done only when the WAIT after it
 * answers; a connection lost before that sends it again.
 */
TEST(wait_before_done)
{
	static const struct step s[] = {
	    {EV, "orders", 100, 0, NULL, NO},
	    {FLUSH, NULL, 0, 0, NULL, NO},
	    {MARK, NULL, 100, 0, NULL, NO},
	    {RECORD, NULL, 0, 0, NULL, NO},
	    {ROUTE, NULL, 0, 0, NULL, NO},
	    {STAGE, "FCALL outbox_relay_publish orders\nSET outbox-relay:slot:s1", 0, 0, NULL, NO},
	    {REPLY, OK_ARRAY1 "+OK\r\n", 0, 0, "XX", NO},
	    {ADVANCE, NULL, 0, 0, NULL, 0, 1, 0},
	    {LOST, "1 2", 0, 0, NULL, 0, 1, 0},
	    {ROUTE, NULL, 1, 0, NULL, NO},
	    {STAGE, "FCALL outbox_relay_publish orders\nSET outbox-relay:slot:s1", 1, 0, NULL, NO},
	    {REPLY, "*1\r\n:0\r\n+OK\r\n", 1, 0, "XX", NO},
	    {ADVANCE, NULL, 0, 0, NULL, 0, 1, 0},
	    {WAITOK, NULL, 1, 0, NULL, NO},
	    {ADVANCE, NULL, 0, 0, NULL, 2, 0, 100},
	    {END, NULL, 0, 0, NULL, NO},
	};
	CHECK(run(s, "wait_before_done", false, true));
}

/*
 * A --trim acked call is a command of the ring like any other: numbered
 * between the publishes, staged in order, answered in order. Its answer,
 * even an error, makes it done at once (no WAIT covers it, it is never
 * resent, and it triggers no WAIT of its own); the publishes around it
 * still wait for WAIT and are resent after a lost connection.
 */
TEST(trim_in_ring)
{
	static const struct step s[] = {
	    {EV, "orders", 100, 0, NULL, NO},
	    {TRIM, "orders", 0, 0, NULL, NO},
	    {EV, "orders", 100, 1, NULL, NO},
	    {FLUSH, NULL, 0, 0, NULL, NO},
	    {MARK, NULL, 100, 0, NULL, NO},
	    {ROUTE, NULL, 0, 0, NULL, NO},
	    {STAGE,
	     "FCALL outbox_relay_publish orders\nFCALL outbox_relay_trim orders\nFCALL "
	     "outbox_relay_publish orders",
	     0, 0, NULL, NO},
	    {REPLY, OK_ARRAY1 "-ERR no such group\r\n" OK_ARRAY1, 0, 0, "XTX", NO},
	    {ADVANCE, NULL, 0, 0, NULL, 0, 2, 0},
	    {LOST, "1 3", 0, 0, NULL, 0, 2, 0},
	    {ROUTE, NULL, 1, 0, NULL, NO},
	    {STAGE, "FCALL outbox_relay_publish orders\nFCALL outbox_relay_publish orders", 1, 0, NULL,
	     NO},
	    {REPLY, "*1\r\n:0\r\n*1\r\n:0\r\n", 1, 0, "XX", NO},
	    {WAITOK, NULL, 1, 0, NULL, NO},
	    {ADVANCE, NULL, 0, 0, NULL, 3, 0, 100},
	    {TRIM, "orders", 0, 0, NULL, NO},
	    {ROUTE, NULL, 0, 0, NULL, NO},
	    {STAGE, "FCALL outbox_relay_trim orders", 0, 0, NULL, NO},
	    {REPLY, ":5\r\n", 0, 0, "T", NO},
	    {ADVANCE, NULL, 0, 0, NULL, 4, 0, 100},
	    {END, NULL, 0, 0, NULL, NO},
	};
	CHECK(run(s, "trim_in_ring", false, true));
}

/* A large value goes out from the event's own memory, alone, and is released once acked. */
TEST(held_value)
{
	static const struct step s[] = {
	    {EV, "orders", 100, 0, NULL, NO},
	    {HOLD, "orders", 100, 1, NULL, 0, 2, 0}, /* closes the open batch and itself */
	    {EV, "orders", 100, 2, NULL, NO},
	    {FLUSH, NULL, 0, 0, NULL, NO},
	    {MARK, NULL, 100, 0, NULL, NO},
	    {ROUTE, NULL, 0, 0, NULL, NO},
	    {STAGE,
	     "FCALL outbox_relay_publish orders\nFCALL outbox_relay_publish orders\nFCALL "
	     "outbox_relay_publish orders",
	     0, 0, NULL, NO},
	    {ARG, "payload", 1, 20, NULL, NO},
	    {FREED, NULL, 0, 0, NULL, NO},
	    {REPLY, OK_ARRAY1 OK_ARRAY1 OK_ARRAY1, 0, 0, "XXX", NO},
	    {FREED, NULL, 0, 0, NULL, NO}, /* done, but still in the ring */
	    {ADVANCE, NULL, 0, 0, NULL, 3, 0, 100},
	    {FREED, NULL, 1, 0, NULL, NO},
	    {END, NULL, 0, 0, NULL, NO},
	};
	CHECK(run(s, "held_value", false, false));
}

/*
 * Only a large value wholly inside the offered range is held: one decoded
 * elsewhere (a decoder's arena reused by the next row) is copied (issue 21,
 * finding 1).
 */
TEST(held_only_inside_range)
{
	static char mem[3 * SQ_EXT_MIN_BYTES];
	struct event_field f[2] = {
	    {"type", 4, mem, 7},
	    {"payload", 7, mem + SQ_EXT_MIN_BYTES, SQ_EXT_MIN_BYTES},
	};
	struct event ev = {.fields = f, .nfields = 2};
	struct sink_hold in = {mem, mem, sizeof(mem), NULL};
	struct sink_hold exact = {mem, mem + SQ_EXT_MIN_BYTES, SQ_EXT_MIN_BYTES, NULL};
	struct sink_hold before = {mem, mem, SQ_EXT_MIN_BYTES, NULL};
	struct sink_hold partly = {mem, mem, 2 * SQ_EXT_MIN_BYTES - 1, NULL};
	struct sink_hold after = {mem, mem + SQ_EXT_MIN_BYTES + 1, 2 * SQ_EXT_MIN_BYTES - 1, NULL};
	struct sink_hold none = {mem, NULL, 0, NULL};

	CHECK(sq_has_held_value(&ev, &in));
	CHECK(sq_has_held_value(&ev, &exact));
	CHECK(!sq_has_held_value(&ev, &before));
	CHECK(!sq_has_held_value(&ev, &partly));
	CHECK(!sq_has_held_value(&ev, &after));
	CHECK(!sq_has_held_value(&ev, &none));
	f[1].value_len = SQ_EXT_MIN_BYTES - 1; /* small values are always copied */
	CHECK(!sq_has_held_value(&ev, &in));
}

/*
 * Queue ev alone (from hold's memory when given, else copied), route it to
 * link 0 and stage it in write rounds of limit bytes; every byte staged
 * into out.
 */
static bool wire_bytes(struct rig *r, const struct event *ev, struct sink_hold *hold, size_t limit,
                       struct buf *out)
{
	struct link *l = &r->l[0];
	bool large = hold && sq_has_held_value(ev, hold);

	if (!sq_batch_open(&r->q, ev, false, 0) ||
	    !sq_batch_add(&r->q, ev, false, large ? hold : NULL) || !sq_close_batch(&r->q))
		return false;
	for (size_t k = 0; k < r->q.q.len; k++) {
		struct sq_ent *e = ring_at(&r->q.q, k);

		if (e->state == SQ_QUEUED && !sq_route(&r->q, e, &l->sendq, 0, false))
			return false;
	}
	do {
		buf_reset(&l->wbuf);
		if (!sq_stage(&r->q, &l->sendq, &l->waitq, &l->wbuf, limit, &l->part_seq, &l->part_off,
		              &l->staged_publish) ||
		    l->wbuf.len == 0 || out->len > (8u << 20))
			return false; /* no progress, or far more bytes than the event has */
		buf_append(out, l->wbuf.data, l->wbuf.len);
	} while (l->part_seq || l->sendq.len);
	return !out->failed;
}

/*
 * The fast path against the slow one it replaces: an event whose large
 * values are sent from the held WAL message goes out byte for byte as the
 * same event copied, in whole write rounds and in slices of 1000 bytes.
 */
TEST(held_same_bytes_as_copied)
{
	static char msg[400 * 1024];
	struct event_field f[4] = {
	    {"event_type", 10, msg, 7},
	    {"payload", 7, msg + 1000, 200 * 1024},
	    {"headers", 7, msg + 300 * 1024, 70 * 1024},
	    {"note", 4, msg + 7, 900},
	};
	struct event ev = {.stream = "orders",
	                   .stream_len = 6,
	                   .id = "ev-1",
	                   .id_len = 4,
	                   .commit_lsn = 0x1000,
	                   .index = 0,
	                   .fields = f,
	                   .nfields = 4};
	int freed = 0;

	for (size_t i = 0; i < sizeof(msg); i++)
		msg[i] = (char)(i * 7 % 251 + 1);
	for (size_t limit = 1000; limit <= (1u << 20); limit += (1u << 20) - 1000) {
		struct rig held, copied;
		struct buf a = {0}, b = {0};
		struct sink_hold hold = {&freed, msg, sizeof(msg), count_free};

		rig_init(&held, false, false);
		rig_init(&copied, false, false);
		CHECK(wire_bytes(&held, &ev, &hold, limit, &a));
		CHECK(hold.p == NULL);                 /* the fast path was taken */
		CHECK(held.q.ext_bytes == 270 * 1024); /* both large values by pointer */
		CHECK(wire_bytes(&copied, &ev, NULL, limit, &b));
		CHECK(copied.q.ext_bytes == 0);
		CHECK(a.len == b.len && a.len > 270 * 1024);
		CHECK(memcmp(a.data, b.data, a.len) == 0);
		buf_finish(&a);
		buf_finish(&b);
		rig_finish(&held);
		rig_finish(&copied);
	}
	CHECK(freed == 2); /* the held message released with its command */
}

/* Error replies by kind: which are retried, which stop the relay. */
TEST(error_kinds)
{
	static const struct {
		const char *msg;
		enum sink_error_kind kind;
	} t[] = {
	    {"OOM command not allowed when used memory > 'maxmemory'.", SINK_ERR_OOM},
	    {"WRONGTYPE Operation against a key holding the wrong kind of value", SINK_ERR_WRONGTYPE},
	    {"ERR user_script:1: WRONGTYPE Operation against a key script: publish",
	     SINK_ERR_WRONGTYPE},
	    {"NOSCRIPT No matching script.", SINK_ERR_NOSCRIPT},
	    {"ERR Function not found", SINK_ERR_NOSCRIPT},
	    {"READONLY You can't write against a read only replica.", SINK_ERR_READONLY},
	    {"BUSY Redis is busy running a script.", SINK_ERR_BUSY},
	    {"LOADING Redis is loading the dataset in memory", SINK_ERR_BUSY},
	    {"MASTERDOWN Link with MASTER is down", SINK_ERR_BUSY},
	    {"MOVED 3999 127.0.0.1:6381", SINK_ERR_CLUSTER},
	    {"ASK 3999 127.0.0.1:6381", SINK_ERR_CLUSTER},
	    {"TRYAGAIN Multiple keys request during rehashing of slot", SINK_ERR_CLUSTER},
	    {"CLUSTERDOWN The cluster is down", SINK_ERR_CLUSTER},
	    {"OUTBOX_BEHIND k is at nothing, expected x", SINK_ERR_ORDER},
	    {"OUTBOX_FOREIGN k belongs to 1/db", SINK_ERR_FOREIGN},
	    {"NOPERM this user has no permissions to run the 'waitaof' command", SINK_ERR_NOPERM},
	    {"ERR The user executing the script can't run this command or subcommand", SINK_ERR_NOPERM},
	    {"ERR Protocol error: invalid bulk length", SINK_ERR_OTHER},
	};
	char text[512];

	for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
		enum sink_error_kind k = sink_error_classify(t[i].msg);

		CHECK_INT(k, t[i].kind);
		CHECK(sink_error_is_fatal(k) == (k == SINK_ERR_FOREIGN || k == SINK_ERR_NOPERM));
	}
	sink_error_noperm_text(text, sizeof(text), "WAITAOF", "waitaof", t[15].msg);
	CHECK(strstr(text, "grant +waitaof to the relay's Redis user") != NULL);
	CHECK(!sink_error_key_refusal(t[15].msg));
	CHECK(sink_error_key_refusal("NOPERM No permissions to access a key"));
}

/* The dedup field the queue encodes for id[0..len) (each call's second argument per event). */
static size_t dedup_field_of(struct rig *r, const char *id, size_t len, unsigned char *out)
{
	struct event_field f = {"type", 4, "created", 7};
	struct event ev = {.stream = "orders",
	                   .stream_len = 6,
	                   .id = id,
	                   .id_len = len,
	                   .commit_lsn = 100,
	                   .fields = &f,
	                   .nfields = 1};
	const char *p, *end;
	size_t n = 0;

	if (!sq_batch_open(&r->q, &ev, false, 0) || !sq_batch_add(&r->q, &ev, false, NULL))
		return (size_t)-1;
	r->q.b_open = false;
	p = r->q.b_args.data;
	end = p + r->q.b_args.len;
	if (end - p < 32 || memcmp(p, "$25\r\n", 5) != 0)
		return (size_t)-1;
	p += 5 + 25 + 2;
	if (*p++ != '$')
		return (size_t)-1;
	while (p < end && *p >= '0' && *p <= '9')
		n = n * 10 + (size_t)(*p++ - '0');
	if (end - p < (ptrdiff_t)(n + 4) || n > 128)
		return (size_t)-1;
	memcpy(out, p + 2, n);
	return n;
}

static unsigned char bitrev(unsigned char x)
{
	unsigned char r = 0;

	for (int i = 0; i < 8; i++)
		r = (unsigned char)(r << 1 | ((x >> i) & 1));
	return r;
}

/* The shard hash as the function reads it: the first three bytes' bits, first to last, from
 * the lowest bit up. */
static uint32_t field_hash(const unsigned char *f)
{
	return bitrev(f[0]) | (uint32_t)bitrev(f[1]) << 8 | (uint32_t)bitrev(f[2]) << 16;
}

static uint64_t rnd_state = 0x9e3779b97f4a7c15u;

static uint64_t rnd(void)
{
	rnd_state ^= rnd_state << 13;
	rnd_state ^= rnd_state >> 7;
	rnd_state ^= rnd_state << 17;
	return rnd_state;
}

static void uuid_text(char *out, const unsigned char *u)
{
	snprintf(out, 37, "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0],
	         u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13],
	         u[14], u[15]);
}

enum id_scheme { V1, V1_US, V4, V6, V7, ULID, SEQ, PREFIXED, NSCHEMES };

/* The i-th id of a scheme, as applications make them: time-based UUIDs of one node (100 ns
 * ticks, or a microsecond clock), random ones, version 7 (a millisecond, a counter, random),
 * monotonic ULIDs (one random value counted up), counters as text. */
static size_t scheme_id(enum id_scheme s, uint64_t i, char *out)
{
	static const char b32[] = "0123456789ABCDEFGHJKMNPQRSTVWXYZ";
	unsigned char u[16];
	uint64_t t = 0x1ef0c0a1b2c3d4eu + i * (s == V1_US ? 10 : 1), r = 0;

	switch (s) {
	case V1:
	case V1_US:
		u[0] = (unsigned char)(t >> 24), u[1] = (unsigned char)(t >> 16);
		u[2] = (unsigned char)(t >> 8), u[3] = (unsigned char)t;
		u[4] = (unsigned char)(t >> 40), u[5] = (unsigned char)(t >> 32);
		u[6] = (unsigned char)(0x10 | ((t >> 56) & 0x0f)), u[7] = (unsigned char)(t >> 48);
		break;
	case V6:
		for (int k = 0; k < 6; k++)
			u[k] = (unsigned char)(t >> (52 - 8 * k));
		u[6] = (unsigned char)(0x60 | ((t >> 8) & 0x0f)), u[7] = (unsigned char)t;
		break;
	case V4:
	case V7:
		r = rnd();
		for (int k = 0; k < 8; k++)
			u[k] = (unsigned char)(r >> (8 * k));
		if (s == V7) {
			uint64_t ms = 1764000000000u + i / 16;

			for (int k = 0; k < 6; k++)
				u[k] = (unsigned char)(ms >> (40 - 8 * k));
			u[6] = (unsigned char)(0x70 | ((i % 16) >> 8)), u[7] = (unsigned char)(i % 16);
		} else {
			u[6] = (unsigned char)(0x40 | (u[6] & 0x0f));
		}
		break;
	case ULID: {
		uint64_t ms = 1764000000000u + i / 64, lo = 0x3a5c91d2e4f607u + i;

		for (int k = 0; k < 10; k++)
			out[k] = b32[(ms >> (45 - 5 * k)) & 31];
		for (int k = 0; k < 16; k++)
			out[10 + k] = b32[(lo >> (75 - 5 * k > 63 ? 0 : 75 - 5 * k)) & 31];
		out[26] = '\0';
		return 26;
	}
	case SEQ:
		return (size_t)snprintf(out, 32, "%llu", (unsigned long long)(i + 1));
	case PREFIXED:
		return (size_t)snprintf(out, 32, "order-%08llu", (unsigned long long)(i + 1));
	default:
		return 0;
	}
	if (s == V1 || s == V1_US || s == V6) {
		static const unsigned char node[8] = {0x80, 0x23, 0x02, 0x42, 0xac, 0x11, 0x00, 0x02};

		memcpy(u + 8, node, 8); /* clock sequence and node: one machine */
	} else {
		r = rnd();
		for (int k = 8; k < 16; k++)
			u[k] = (unsigned char)(r >> (8 * (k - 8)));
		u[8] = (unsigned char)(0x80 | (u[8] & 0x3f));
	}
	uuid_text(out, u);
	return 36;
}

/*
 * Issue 21, finding 4: the shard hash (the field's first three bytes) spreads the ids of every
 * common scheme. 20,000 ids of each over 1024 shards (and 64): the largest shard holds less than
 * 2.5 times the mean (random hashing: 1.6-2.1 at 1024), none is empty. Before, version 6 (and 1 on
 * a microsecond clock) of one node put all 20,000 into one shard (the hash read UUID bytes 1-3 and
 * 13-15 only).
 */
TEST(dedup_field_spreads_every_scheme)
{
	static const char *names[] = {"v1", "v1 (us clock)", "v4",      "v6",
	                              "v7", "ULID",          "1, 2, 3", "order-00000001"};
	enum { N = 20000 };
	static uint32_t shard[N];
	struct rig r;

	rig_init(&r, false, false);
	for (int s = 0; s < NSCHEMES; s++) {
		for (uint64_t i = 0; i < N; i++) {
			char id[40];
			unsigned char f[128];
			size_t len = scheme_id((enum id_scheme)s, i, id);
			size_t n = dedup_field_of(&r, id, len, f);

			CHECK(n != (size_t)-1 && n >= 3);
			shard[i] = n >= 3 ? field_hash(f) : 0;
		}
		for (uint32_t k = 64; k <= 1024; k *= 16) {
			static uint32_t count[1024];
			uint32_t max = 0, empty = 0;

			memset(count, 0, sizeof(count));
			for (int i = 0; i < N; i++)
				count[shard[i] % k]++;
			for (uint32_t j = 0; j < k; j++) {
				max = count[j] > max ? count[j] : max;
				empty += count[j] == 0;
			}
			printf("# %-15s %4u shards: largest %5u (mean %u), %u empty\n", names[s], k, max, N / k,
			       empty);
			CHECK(2 * max * k < 5 * N);
			CHECK_INT(empty, 0);
		}
	}
	rig_finish(&r);
}

/*
 * The field is the 3-byte hash followed by the field of the release before (so buckets written
 * then are still read: the function drops the 3 bytes), one-to-one with the id.
 */
TEST(dedup_field_layout)
{
	static const char uuid[] = "6f1c2a34-8b9d-4e0f-a1b2-c3d4e5f60718";
	/* before: the 16 bytes, the first four mixed with the last four bit-reversed */
	static const unsigned char old_uuid[16] = {
	    0x34 ^ 0x18, 0x2a ^ 0xe0, 0x1c ^ 0x6f, 0x6f ^ 0xa7, 0x8b, 0x9d, 0x4e, 0x0f,
	    0xa1,        0xb2,        0xc3,        0xd4,        0xe5, 0xf6, 0x07, 0x18};
	unsigned char f[128], g[128];
	struct rig r;
	size_t n;

	rig_init(&r, false, false);
	n = dedup_field_of(&r, uuid, 36, f);
	CHECK_INT(n, 19);
	CHECK(n == 19 && memcmp(f + 3, old_uuid, 16) == 0);
	/* text: FNV-1a (high byte first), the id, a 0 byte for 12 bytes */
	n = dedup_field_of(&r, "abcdefghijkl", 12, f);
	CHECK_INT(n, 3 + 4 + 12 + 1);
	if (n == 20) {
		uint32_t h = fnv1a32("abcdefghijkl", 12);
		unsigned char want[4] = {(unsigned char)(h >> 24), (unsigned char)(h >> 16),
		                         (unsigned char)(h >> 8), (unsigned char)h};

		CHECK(memcmp(f + 3, want, 4) == 0 && memcmp(f + 7, "abcdefghijkl", 13) == 0);
	}
	CHECK_INT(dedup_field_of(&r, "", 0, f), 7);
	CHECK_INT(dedup_field_of(&r, "n-1", 3, f), 10);
	/* an uppercase UUID is another id, with another field */
	n = dedup_field_of(&r, "6F1C2A34-8B9D-4E0F-A1B2-C3D4E5F60718", 36, g);
	CHECK_INT(n, 3 + 4 + 36);
	/* the hash differs between ids that differ in one character anywhere */
	n = dedup_field_of(&r, uuid, 36, f);
	for (int i = 0; i < 36; i++) {
		char other[37];

		memcpy(other, uuid, 37);
		if (other[i] == '-')
			continue;
		other[i] = other[i] == '0' ? '1' : '0';
		CHECK(dedup_field_of(&r, other, 36, g) == 19 && memcmp(f, g, 3) != 0);
	}
	rig_finish(&r);
}

/*
 * resp_bulk and resp_array write in place; the bytes are what buf_printf
 * gives, for lengths around every digit count, into buffers that start
 * empty, nearly full and failed.
 */
TEST(resp_encoders_match_printf)
{
	static const size_t lens[] = {0, 1, 9, 10, 99, 100, 231, 232, 233, 255, 256, 999, 1000, 4097};
	static char payload[4097];

	for (size_t i = 0; i < sizeof(payload); i++)
		payload[i] = (char)('a' + i % 23);
	for (size_t pre = 0; pre < 300; pre += 13) {
		for (size_t k = 0; k < sizeof(lens) / sizeof(lens[0]); k++) {
			struct buf got = {0}, want = {0};
			size_t n = lens[k];

			for (size_t i = 0; i < pre; i++) {
				buf_putc(&got, 'x');
				buf_putc(&want, 'x');
			}
			resp_array(&got, n);
			resp_bulk(&got, payload, n);
			buf_printf(&want, "*%zu\r\n$%zu\r\n", n, n);
			buf_append(&want, payload, n);
			buf_append(&want, "\r\n", 2);
			CHECK(!got.failed && !want.failed);
			CHECK_MEM(got.data, got.len, want.data);
			CHECK_INT(got.len, want.len);
			CHECK(got.data[got.len] == '\0');
			CHECK(got.cap > got.len);
			buf_finish(&got);
			buf_finish(&want);
		}
	}
	/* a failed buffer stays as it was */
	{
		struct buf b = {0};

		buf_puts(&b, "ab");
		b.failed = true;
		resp_bulk(&b, "cd", 2);
		resp_array(&b, 3);
		CHECK(b.failed && b.len == 2);
		buf_finish(&b);
	}
}

int main(void)
{
	RUN(batches_and_in_order_acks);
	RUN(batch_limit);
	RUN(backlog_hint);
	RUN(held_hint);
	RUN(moved_between_two_marks);
	RUN(resend_after_reconnect);
	RUN(ask_redirect);
	RUN(dead_letter_inside_transaction);
	RUN(behind_the_watermark);
	RUN(wait_before_done);
	RUN(held_value);
	RUN(held_only_inside_range);
	RUN(trim_in_ring);
	RUN(held_same_bytes_as_copied);
	RUN(error_kinds);
	RUN(dedup_field_spreads_every_scheme);
	RUN(dedup_field_layout);
	RUN(resp_encoders_match_printf);
	return test_done();
}
