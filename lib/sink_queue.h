/*
 * sink_queue.h - the sink's numbered command ring, batch encoder and reply
 * bookkeeping, without sockets (lib/sink_queue.c).
 *
 * Every command the sink sends (a batch of events for one stream, XGROUP
 * CREATE, a slot record GET or SET, a --trim acked call) gets the next sequence number and keeps
 * its RESP bytes in one resend buffer until it is done. A connection is
 * three FIFOs of sequence numbers that the caller owns (struct ring of
 * uint64_t): sendq (routed, not yet staged), waitq (what each coming reply
 * answers: a seq or one of the SQ_*_MARK values) and durable (executed,
 * waiting for the next WAIT). acked_seq is the end of the done prefix, so it
 * moves in sequence order however connections interleave their answers,
 * and never backwards. After a lost connection sq_requeue() puts every
 * command that is not done back to QUEUED, to be routed again in order.
 */
#ifndef RELAY_SINK_QUEUE_H
#define RELAY_SINK_QUEUE_H

#include <hiredis/hiredis.h>
#include <stdbool.h>
#include <stdint.h>

#include "buf.h"
#include "config.h"
#include "event.h"

struct sink_hold; /* sink_redis.h */

/* Field values this large or more may be sent from where they lie (sink_redis.h's rule). */
#define SQ_EXT_MIN_BYTES (64 * 1024)
#define SQ_EXT_MAX_SEGS 8
/* Most events in one function call, and the size at which a batch is closed. */
#define SQ_BATCH_MAX_EVENTS 128
#define SQ_BATCH_MAX_BYTES (256 * 1024)

/* What a reply in a connection's waitq answers when it is not a command. */
#define SQ_WAIT_MARK UINT64_MAX          /* WAIT / WAITAOF */
#define SQ_ASKING_MARK (UINT64_MAX - 1)  /* ASKING */
#define SQ_INFO_MARK (UINT64_MAX - 2)    /* INFO memory (a probe, for metrics) */
#define SQ_NATIVE_MARK (UINT64_MAX - 3)  /* a command of --publish native (sink_native.c) */
#define SQ_UNWATCH_MARK (UINT64_MAX - 4) /* UNWATCH before batches handed to the function */
#define SQ_LOWEST_MARK SQ_UNWATCH_MARK

enum sq_kind { SQ_PUBLISH, SQ_DEAD, SQ_GROUP, SQ_RECORD, SQ_GETREC, SQ_TRIM };
enum sq_state { SQ_QUEUED = 0, SQ_ROUTED, SQ_EXECUTED, SQ_DONE };

/*
 * A command whose large field values are not copied into out: its bytes are
 * out[off, off + len) with seg[i].len bytes from seg[i].p inserted at offset
 * seg[i].at (ascending). hold is the memory the segments point into (the
 * message the sink was handed: sink_redis.h says whose it is and when),
 * released with hold_free once the command is acknowledged.
 */
struct sq_ext {
	void *hold;
	void (*hold_free)(void *);
	size_t total; /* sum of seg[].len */
	size_t nseg;
	struct {
		size_t at;
		const char *p;
		size_t len;
	} seg[SQ_EXT_MAX_SEGS];
};

struct sq_ent {
	uint64_t seq;
	uint64_t off;       /* absolute offset of its bytes (see out_base) */
	size_t len;         /* encoded bytes */
	int64_t commit_us;  /* commit time, for the latency histogram (0: unknown) */
	uint32_t nevents;   /* events in a publish batch; 0 for XGROUP */
	uint32_t stream_id; /* metrics label id */
	uint16_t slot;      /* cluster hash slot of its stream */
	int8_t node;        /* connection it is routed to, -1 none */
	uint8_t kind;       /* enum sq_kind */
	uint8_t state;      /* enum sq_state */
	uint8_t dead_reason;
	bool asking;        /* send ASKING first (after an ASK redirect) */
	bool no_native;     /* --publish native: this one goes through the function */
	uint64_t prev_seq;  /* this relay's previous call for the same stream, 0 none */
	struct sq_ext *ext; /* large values sent from the event's own memory, NULL none */
	size_t max_value;   /* its largest field value, for messages */
};

/*
 * Per stream: where this relay's last queued call for it leaves the
 * watermark, and that call's seq. The next call for the stream states that
 * position as the watermark it expects, so a call that runs while an earlier
 * one for the same stream was rejected (OOM, BUSY, a cluster redirect) is
 * refused instead of moving the watermark past events never written.
 */
struct sq_lastpos {
	char *stream; /* NULL: free */
	size_t len;
	uint64_t seq;
	char pos[26];         /* "<lsn hex16>:<index hex8>" */
	uint64_t events;      /* events of the stream queued since sq_backlog_start() */
	uint64_t held_events; /* ... since sq_held() started the held transaction */
};

struct sq_posmap {
	struct sq_lastpos *v;
	size_t cap; /* power of two */
	size_t used;
};

struct sink_queue {
	/* Set by the owner (sq_init, then the fields it keeps current). */
	const struct relay_config *cf;
	bool cluster;              /* hash slots matter (the dead-letter key goes beside the stream) */
	const bool *use_functions; /* FCALL; else EVALSHA sha */
	const char *sha;
	const char *trim_sha; /* EVALSHA digest of the --trim acked script */
	char owner[160];      /* "<system id>/<database>": whose positions the watermarks hold */
	bool republish;       /* calls neither read nor move the watermarks */
	/*
	 * The backlog the relay drains since it (re)started streaming: the slot's
	 * position then (bl_from), the server's WAL end then (bl_end), the newest
	 * position decoded since (bl_at). Each call tells the function how many
	 * ids of its stream are still to come from it (sq_backlog_hint()), so that
	 * a new dedup bucket is made that large at once instead of growing by splits.
	 */
	lsn_t bl_from, bl_end, bl_at;
	/*
	 * A held transaction being handled (pgoutput: the whole of it is known at
	 * its commit): held_total messages, held_done of them handled. Calls then
	 * expect their stream's share of the messages still to come
	 * (sq_held_hint()): a bucket is made that large at once however small the
	 * transaction is beside the WAL around it, and while no backlog lasts.
	 */
	uint64_t held_total, held_done;
	/* Called for every command queued (NULL: none), e.g. to route it at once. */
	void (*on_push)(void *ctx, struct sq_ent *e);
	void *ctx;

	/* Encoded commands in seq order; out.data[0] is absolute offset out_base. */
	struct buf out;
	uint64_t out_base;
	struct ring q; /* struct sq_ent by seq, oldest first */

	uint64_t next_seq;        /* seq of the next command */
	uint64_t acked_seq;       /* every command up to here is done */
	uint64_t inflight_events; /* events queued (open batch included), not yet done */
	uint64_t ext_bytes;       /* bytes of live commands' segments */

	/*
	 * The open batch: consecutive events for one stream, not yet encoded into
	 * out. It takes its seq when opened; any other command closes it first,
	 * so seqs in the ring stay consecutive.
	 */
	bool b_open;
	bool b_dead;
	uint64_t b_seq;
	uint32_t b_n;
	struct buf b_stream;
	struct buf b_args; /* RESP bulk strings: pos, nfields, fields per event */
	int64_t b_commit_us;
	int64_t b_open_us; /* time_mono_us() when the batch opened */
	bool b_waited;     /* it waited for more events while the relay caught up (sink_redis.c) */
	uint32_t b_stream_id;
	uint8_t b_dead_reason;
	uint64_t b_args_count; /* ARGV entries after ttl and maxlen */
	struct sq_ext *b_ext;  /* segments of the open batch (at: offsets in b_args) */
	size_t b_max_value;    /* largest field value in the open batch */
	struct buf b_prefix;   /* old-layout dedup key prefix of the open batch */
	uint64_t b_prev_seq;   /* previous call for the batch's stream, 0 none */
	char b_expect[26];     /* where that call leaves the watermark, "" none */
	char b_last[26];       /* position of the batch's last event */
	struct sq_posmap last_pos;
	struct buf key; /* scratch for key names */
	struct buf tag;
};

/* The relay (re)started streaming at from, with the server's WAL end at end. */
void sq_backlog_start(struct sink_queue *q, lsn_t from, lsn_t end);
/* It decoded a message at position at. */
static inline void sq_backlog_at(struct sink_queue *q, lsn_t at)
{
	if (at > q->bl_at)
		q->bl_at = at;
}
/*
 * The ids a call of n events for a stream of which `events` (these n
 * included) were queued since the start can expect still to come: n, plus
 * while the backlog lasts and the stream has SQ_HINT_MIN_EVENTS events to
 * go by, events * (WAL ahead) / (WAL read). An estimate (the first few
 * records say little: a record at the slot's position has no WAL read
 * before it): it only sizes a dedup bucket, which grows to later calls'
 * estimates while it holds few ids.
 */
#define SQ_HINT_MIN_EVENTS 64
uint64_t sq_backlog_hint(const struct sink_queue *q, uint64_t n, uint64_t events);
/*
 * A held transaction of total messages starts to be handled (per-stream
 * counts start again; total 0: none is any more), and its next message is.
 */
void sq_held(struct sink_queue *q, uint64_t total);
static inline void sq_held_next(struct sink_queue *q)
{
	q->held_done++;
}
/*
 * Within a held transaction, the ids a call of n events for a stream of
 * which `events` (these n included) were queued since it started can expect
 * still to come: n, plus once the stream has SQ_HINT_MIN_EVENTS events to go
 * by, events * (messages still to handle) / (messages handled).
 */
uint64_t sq_held_hint(const struct sink_queue *q, uint64_t n, uint64_t events);

/* ---- RESP encoding ---- */

/*
 * '<c><n>\r\n' at o (room for 23 bytes); returns the byte after it. The
 * RESP encoders below run for every argument of every event (about 20 per
 * event): each reserves once and writes in place.
 */
static inline char *resp_head(char *o, char c, uint64_t n)
{
	char *e;

	*o++ = c;
	e = o + 1;
	for (uint64_t t = n; t >= 10; t /= 10)
		e++;
	o = e;
	do {
		*--e = (char)('0' + n % 10);
		n /= 10;
	} while (n);
	*o++ = '\r';
	*o++ = '\n';
	return o;
}

static inline void resp_array(struct buf *b, size_t n)
{
	if (!buf_reserve(b, 23))
		return;
	b->len = (size_t)(resp_head(b->data + b->len, '*', n) - b->data);
	b->data[b->len] = '\0';
}

static inline void resp_bulk(struct buf *b, const char *s, size_t n)
{
	char *o;

	if (n > BUF_MAX || !buf_reserve(b, n + 25)) {
		b->failed = true;
		return;
	}
	o = resp_head(b->data + b->len, '$', n);
	if (n)
		memcpy(o, s, n);
	o += n;
	*o++ = '\r';
	*o++ = '\n';
	*o = '\0';
	b->len = (size_t)(o - b->data);
}

static inline void resp_str(struct buf *b, const char *s)
{
	resp_bulk(b, s, strlen(s));
}

/* ---- the ring ---- */

/* A zeroed q, then cf; cluster when commands are routed by hash slot. */
void sq_init(struct sink_queue *q, const struct relay_config *cf, bool cluster);
void sq_finish(struct sink_queue *q); /* frees every command (holds released) */

/* The live command with this seq, or NULL (done and popped, or not queued yet). */
struct sq_ent *sq_ent(struct sink_queue *q, uint64_t seq);
/* e's bytes in out (cmd_len bytes on the wire with its segments). */
const char *sq_bytes(const struct sink_queue *q, const struct sq_ent *e);
size_t sq_cmd_len(const struct sq_ent *e);
/* Pop the done prefix into acked_seq; reclaim out's bytes now and then. */
void sq_advance(struct sink_queue *q);
/* Bytes of commands not yet done, the open batch's included. */
uint64_t sq_inflight_bytes(const struct sink_queue *q);

/* Route e to connection idx: its seq into that connection's sendq. */
bool sq_route(struct sink_queue *q, struct sq_ent *e, struct ring *sendq, int idx, bool asking);
/* After a lost connection: every command not done is QUEUED again, unrouted. */
void sq_requeue(struct sink_queue *q);
/* A slot record write that will never be sent again counts as done (false: not one). */
bool sq_void_record(struct sink_queue *q, uint64_t seq);
/*
 * The function refused e as behind the watermark: true while the previous
 * call for its stream is not done (sending both again in order fixes it),
 * false when it is done (Redis lost writes it had acknowledged).
 */
bool sq_prev_pending(struct sink_queue *q, const struct sq_ent *e);

/*
 * The idx-th argument of e's encoded bytes (in out: large values excepted):
 * its length in *len, or NULL when the command has fewer arguments.
 */
const char *sq_arg(const struct sink_queue *q, const struct sq_ent *e, size_t idx, size_t *len);
/* What a command of kind k is, for messages ("publish", "XGROUP CREATE", ...). */
const char *sq_kind_name(unsigned k);

/* ---- the batch encoder ---- */

/* Whether ev (large: sent from its own memory) must go into a new batch. */
bool sq_batch_breaks(const struct sink_queue *q, const struct event *ev, bool dead_letter,
                     bool large);
/* Open a batch for ev's stream (none open): takes the next seq. */
bool sq_batch_open(struct sink_queue *q, const struct event *ev, bool dead_letter,
                   uint32_t stream_id);
/*
 * Add ev to the open batch. hold: NULL, or (sq_has_held_value() true) the
 * memory ev's large values may point into, taken as sink_redis.h's rule says
 * (the event then goes out alone). A dead letter or a large event closes its
 * batch at once.
 */
bool sq_batch_add(struct sink_queue *q, const struct event *ev, bool dead_letter,
                  struct sink_hold *hold);
/* Encode the open batch (if any) as one function call and queue it. */
bool sq_close_batch(struct sink_queue *q);
/* XGROUP CREATE <stream> <group> 0 MKSTREAM for every --group. */
bool sq_queue_groups(struct sink_queue *q, const char *stream, size_t len);
/* GET (val NULL) or SET val of the slot record's key, as a command of kind k. */
bool sq_queue_record(struct sink_queue *q, enum sq_kind k, const char *val, size_t vlen);
/*
 * One --trim acked call (FCALL outbox_relay_trim, or EVALSHA trim_sha) for
 * stream[0..len), routed like any command to the master of its slot. Its
 * reply, whatever it is, makes it done (SQ_A_ANSWERED): a failed trim is
 * tried again the next round, never resent.
 */
bool sq_queue_trim(struct sink_queue *q, const char *stream, size_t len);
/*
 * Does ev have a value worth sending from hold's memory (see struct sq_ext):
 * one of SQ_EXT_MIN_BYTES or more that lies wholly inside hold's range?
 */
bool sq_has_held_value(const struct event *ev, const struct sink_hold *hold);

/* Cluster hash slot of stream[0..len) (tag: scratch). */
uint16_t sq_stream_slot(const char *stream, size_t len, struct buf *tag);

/* ---- staging and replies ---- */

/*
 * Move commands from sendq into wbuf (and what their replies answer into
 * waitq) until wbuf holds limit bytes: first the rest of the command staged
 * in part (*part_seq, from *part_off; 0: none), then whole commands, a large
 * one in slices. *staged_publish is set when anything but XGROUP was staged.
 * Returns false when out of memory or when the part is gone.
 */
bool sq_stage(struct sink_queue *q, struct ring *sendq, struct ring *waitq, struct buf *wbuf,
              size_t limit, uint64_t *part_seq, size_t *part_off, bool *staged_publish);

/*
 * sq_stage(), but stopping before the first whole command for which stop(ctx, e)
 * is true (it stays first in sendq).
 */
bool sq_stage_until(struct sink_queue *q, struct ring *sendq, struct ring *waitq, struct buf *wbuf,
                    size_t limit, uint64_t *part_seq, size_t *part_off, bool *staged_publish,
                    bool (*stop)(void *ctx, const struct sq_ent *e), void *ctx);
/* Stage all of e (popped from its sendq, no segments) and what its reply answers. */
bool sq_stage_entry(struct sink_queue *q, struct sq_ent *e, struct ring *waitq, struct buf *wbuf);
/* e ran: done, or waiting in durable for the next WAIT (false: out of memory). */
bool sq_executed(struct ring *durable, bool wait_mode, struct sq_ent *e);

enum sq_answer {
	SQ_A_MARK,      /* *what is a mark (SQ_*_MARK): the caller handles it */
	SQ_A_EXECUTED,  /* *e ran: done, or waiting for the next WAIT (wait mode) */
	SQ_A_READ,      /* *e (a slot record GET) answered: the caller marks it done */
	SQ_A_ASK,       /* "ASK ...": sq_route() it to the named master with asking, or fail */
	SQ_A_ERROR,     /* another error reply: *e stays undone */
	SQ_A_MALFORMED, /* not the reply *e's kind gets */
	SQ_A_UNKNOWN,   /* no reply expected, or for a command no longer live */
	SQ_A_NOMEM,
	SQ_A_ANSWERED /* *e (a --trim acked call) answered, an error or not: done; the caller reads r */
};

/*
 * Match reply r to the oldest request in waitq and record what it means for
 * the command: its seq (or mark) in *what, the command in *e (NULL for a
 * mark). With wait_mode, an executed command other than XGROUP waits in
 * durable for the next WAIT (sq_wait_done). Never advances acked_seq: call
 * sq_advance() after a read round.
 */
enum sq_answer sq_take_reply(struct sink_queue *q, struct ring *waitq, struct ring *durable,
                             bool wait_mode, const redisReply *r, uint64_t *what,
                             struct sq_ent **e);
/* WAIT answered with enough replicas: every command in durable is done. */
void sq_wait_done(struct sink_queue *q, struct ring *durable);

#endif
