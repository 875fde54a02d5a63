/*
 * sink_redis.h - the Redis Streams sink: one pipelined connection that sends
 * every event through the atomic outbox_relay_publish function.
 *
 * Commands are kept, already encoded, until Redis replies, so after a lost
 * connection or an error reply everything unacknowledged is sent again in
 * order; the function's watermark and dedup window make that safe. Each
 * queued command gets a sequence number; sink_redis_acked_seq() is the
 * highest one whose reply (and every earlier one's) has arrived.
 */
#ifndef RELAY_SINK_REDIS_H
#define RELAY_SINK_REDIS_H

#include <poll.h>
#include <stdbool.h>
#include <stdint.h>

#include "slot_record.h"
#include "config.h"
#include "lsn.h"
#include "event.h"
#include "metrics.h"
#include "sink_error.h"

enum sink_status {
	SINK_OK = 0,
	SINK_RETRY, /* transient: try again after a backoff */
	SINK_FATAL  /* permanent: bad credentials, missing permissions, server too old */
};

struct sink_stats {
	uint64_t published;        /* new stream entries */
	uint64_t replays;          /* skipped by the LSN watermark */
	uint64_t duplicates;       /* skipped by the event-id window */
	uint64_t dead_lettered;    /* entries written to the dead-letter stream */
	uint64_t error_replies;    /* error replies that forced a resend */
	uint64_t reconnects;       /* successful connects after the first */
	uint64_t ask_redirects;    /* ASK replies followed (cluster slot migrations) */
	uint64_t rejected;         /* entries a stream key refused (WRONGTYPE), dead-lettered */
	uint64_t native_batches;   /* batches written by --publish native (MULTI/EXEC) */
	uint64_t function_batches; /* batches written by the function (FCALL or EVALSHA) */
	uint64_t watch_retries;    /* native batches read again: a watched key changed (EXEC nil) */
	uint64_t native_groups;    /* native groups read (WATCH ... EXEC), counted once per group */
	uint64_t native_ahead;     /* of those, read behind the EXEC of the group before */
	uint64_t ahead_voided;     /* reads ahead dropped: the EXEC before them failed */
	uint64_t native_late;      /* calls that joined their stream's unit after its read 1 */
	uint64_t native_predicted; /* units whose read 2 went with read 1, predicted, and was right */
	uint64_t predict_missed;   /* units whose predicted read 2 was wrong: dropped, read 2 sent */
	uint64_t lookups_skipped;  /* dedup lookups left out: the id record says the id is not there */
	uint64_t record_ids_read;  /* ids read from Redis into the id record (--dedup-record-seed) */
	uint64_t catchup_waits;    /* batches that waited for more events while catching up */
	uint64_t linger_windows;   /* --linger windows opened (each held at least one batch) */
};

struct sink_redis;

/* m (may be NULL) receives per-stream, replay, duplicate, dead-letter and latency counts. */
struct sink_redis *sink_redis_create(const struct relay_config *cf, struct metrics *m);
void sink_redis_destroy(struct sink_redis *s); /* NULL is a no-op */

/*
 * Connect and prepare the connection: AUTH, SELECT, load the function library
 * (or the EVAL script), then switch to non-blocking pipelined mode and queue
 * every unacknowledged command for resending. Blocks for at most about
 * --redis-timeout per step.
 */
enum sink_status sink_redis_connect(struct sink_redis *s);
/* Drop the connection (if any); unacknowledged commands stay queued. */
void sink_redis_disconnect(struct sink_redis *s);
bool sink_redis_connected(const struct sink_redis *s);

/*
 * Fill pfd[0..max) with the sockets to poll (one per connected master) and
 * return how many; pass the same array, with revents, to sink_redis_io().
 */
int sink_redis_pollfds(struct sink_redis *s, struct pollfd *pfd, int max);
/* Whether any connection has commands waiting to be written. */
bool sink_redis_want_write(const struct sink_redis *s);

/* True when the in-flight window (events or bytes) is full: stop reading WAL. */
bool sink_redis_full(const struct sink_redis *s);

/*
 * Queue ev (and, for a stream seen for the first time on this connection,
 * XGROUP CREATE ... 0 MKSTREAM for every --group). Consecutive events for
 * the same stream are batched into one function call (up to 128 events or
 * 256 KiB); the batch is closed by an event for another stream, by any
 * other command, or by sink_redis_flush(). dead_letter marks an entry for
 * the dead-letter stream (no dedup, counted separately, never batched).
 * sink_redis_last_seq() covers ev as soon as this returns.
 * Returns false only when out of memory.
 */
bool sink_redis_publish(struct sink_redis *s, const struct event *ev, bool dead_letter);

/*
 * Who owns the bytes of a published event -- the one rule, stated here only.
 *
 * sink_redis_publish() copies every byte of the event before it returns: the
 * caller may reuse or free whatever ev pointed into at once.
 *
 * sink_redis_publish_held() may instead keep pointers, but only into
 * [base, base + len), the bytes of one allocation p that the caller offers:
 * a field value of 64 KiB or more that lies wholly inside that range is sent
 * from there, the sink takes p (sets it to NULL) and calls free_fn(p) once
 * Redis acknowledged the call (or when the sink is freed): resends after a
 * reconnect read the same bytes. Every value outside the range -- a decoder's
 * arena, a mapper's buffer, anything the caller reuses for the next row -- is
 * copied before the call returns, whatever its size. When the sink keeps no
 * pointer, p is left to the caller. Large events so cost no copy of their own
 * between the WAL message and the socket, and a value decoded elsewhere can
 * never be sent with another row's bytes (issue 21, finding 1).
 */
struct sink_hold {
	void *p;
	const char *base; /* the range the sink may point into: inside p's allocation */
	size_t len;
	void (*free_fn)(void *);
};

bool sink_redis_publish_held(struct sink_redis *s, const struct event *ev, bool dead_letter,
                             struct sink_hold *hold);

/*
 * Close the open batch so that it is written by the next sink_redis_io() --
 * unless force is false and earlier calls still await replies: then the
 * batch keeps growing and sink_redis_io() sends it when replies arrive
 * (group commit). Call it after each burst of WAL messages, with force when
 * stopping. Returns false only when out of memory.
 */
bool sink_redis_flush(struct sink_redis *s, bool force);

/*
 * While the relay catches up on a backlog, sink_redis_flush() keeps a batch
 * open for up to SINK_COALESCE_US for more events, and always for up to
 * --linger (sink_redis.c, coalescing()). How long the open batch may still wait, µs; 0 when it is
 * not held. The relay's poll() waits no longer than that.
 */
#define SINK_COALESCE_US 1000
#define SINK_CATCHUP_LAG_US 100000
int64_t sink_redis_hold_left_us(const struct sink_redis *s);
/* Whether Redis owes replies to calls sent (or routed to be sent): not a batch still held open. */
bool sink_redis_owes_replies(const struct sink_redis *s);

/*
 * Write pending commands and read available replies. Returns false when the
 * connection failed or Redis answered with an error; sink_redis_errmsg() says
 * what happened and the caller should disconnect, back off and reconnect.
 */
bool sink_redis_io(struct sink_redis *s, const struct pollfd *pfd, int npfd);

/* Fail (return false) when replies are overdue by more than --redis-timeout. */
bool sink_redis_check_stall(struct sink_redis *s, int64_t now_us);

uint64_t sink_redis_acked_seq(const struct sink_redis *s);
uint64_t sink_redis_last_seq(const struct sink_redis *s);
uint64_t sink_redis_inflight_events(const struct sink_redis *s);
uint64_t sink_redis_inflight_bytes(const struct sink_redis *s);
const struct sink_stats *sink_redis_stats(const struct sink_redis *s);

/*
 * Streaming (re)started at the slot's position from with the server's WAL end
 * at end, and a message at position at was decoded: what sizes new dedup
 * buckets for a backlog (sq_backlog_hint()).
 */
void sink_redis_backlog_start(struct sink_redis *s, lsn_t from, lsn_t end);
void sink_redis_backlog_at(struct sink_redis *s, lsn_t at);
/*
 * A held transaction of total messages starts to be handled (total 0: it is
 * over), and its next message is: its stream's share of the rest sizes a new
 * dedup bucket too (sq_held_hint()).
 */
void sink_redis_held(struct sink_redis *s, uint64_t total);
void sink_redis_held_next(struct sink_redis *s);
const char *sink_redis_errmsg(const struct sink_redis *s);
enum sink_error_kind sink_redis_errkind(const struct sink_redis *s);

/*
 * Ask every connected node for INFO memory with its next write (a no-op for a
 * node whose answer is still to come). sink_redis_memory then gives
 * used_memory and maxmemory of the node closest to its maxmemory; false
 * while no node has answered. maxmemory 0 means no limit.
 */
void sink_redis_poll_memory(struct sink_redis *s);
bool sink_redis_memory(const struct sink_redis *s, uint64_t *used, uint64_t *max);
/* maxmemory-policy read at the last connect ("" when INFO did not say). */
const char *sink_redis_maxmemory_policy(const struct sink_redis *s);
/* Sentinel mode: "host:port" of the master found last into buf; NULL otherwise. */
const char *sink_redis_sentinel_master(const struct sink_redis *s, char *buf, size_t len);

/* The outcome of one --trim acked round (sink_redis_trim_start). */
struct sink_trim_result {
	uint32_t streams; /* streams asked */
	uint32_t trimmed; /* streams that lost entries */
	uint32_t failed;  /* streams whose call failed (err says why, for the last one) */
	uint64_t removed; /* entries removed */
	char err[512];
};

/*
 * --trim acked: queue one trim call (the library's outbox_relay_trim: XINFO
 * GROUPS, XPENDING, XTRIM MINID ~, atomically on one stream) for every stream
 * this relay published to since it started (the dead-letter stream
 * excepted), each on the connection serving the stream's slot, written with
 * the next write round. Publishes never wait for it. Returns the number of
 * calls queued: 0 when there is nothing to trim, not connected, or the
 * previous round is still under way; -1 when out of memory. A lost
 * connection drops an unfinished round. An ACL refusal of the call stops the
 * sink like any NOPERM (SINK_ERR_NOPERM).
 */
int sink_redis_trim_start(struct sink_redis *s);
/* True once for each finished round, with its outcome in *res. */
bool sink_redis_trim_result(struct sink_redis *s, struct sink_trim_result *res);
/*
 * The largest bulk string (one field value) every connected server accepts:
 * proto-max-bulk-len as CONFIG GET read it at connect, 0 when no server let
 * the relay read it. A value over it would make Redis drop the connection
 * (the relay then stops with SINK_ERR_TOO_BIG), so the relay dead-letters
 * such events instead.
 */
uint64_t sink_redis_max_value(const struct sink_redis *s);
/*
 * After a lost connection (sink_redis_disconnect): the slot record write
 * queued as seq is dropped, never sent again; it counts as done without
 * having been written.
 */
void sink_redis_void_record(struct sink_redis *s, uint64_t seq);
/* After SINK_ERR_TOO_BIG: the size of the refused call's largest value. */
uint64_t sink_redis_refused_value(const struct sink_redis *s);

/* Bytes the publish command for ev would take (to enforce --max-event-bytes). */
size_t sink_redis_event_size(const struct event *ev);

/*
 * Whose positions the watermarks hold: PostgreSQL's system identifier and the
 * database (IDENTIFY_SYSTEM). Set before the first sink_redis_publish(); a
 * watermark owned by another database makes publishing fail for good
 * (SINK_ERR_FOREIGN). Returns false when the text does not fit.
 */
bool sink_redis_set_owner(struct sink_redis *s, const char *system_id, const char *dbname);
/* The server's timeline, which the slot records written from now on carry (0: unknown). */
void sink_redis_set_timeline(struct sink_redis *s, uint32_t tli);

/*
 * The slot record (slot_record.h: key, value, the refusal rule) as the first successful connect
 * read it: NULL when Redis has none (a new deployment, or Redis lost its data) or before that
 * connect. A key that holds something else makes that connect fail for good.
 */
const struct slot_record *sink_redis_record(const struct sink_redis *s);
bool sink_redis_record_read(const struct sink_redis *s);
/* Counts record reads: it moves when a queued read (below) was answered. */
uint64_t sink_redis_record_gen(const struct sink_redis *s);
/* Queue a fresh read of the record. Returns false only when out of memory. */
bool sink_redis_queue_record_read(struct sink_redis *s);

/*
 * Queue a write of the record (owner: sink_redis_set_owner's), in sequence
 * with the events: sink_redis_last_seq() covers it once this returns, and
 * with --wait-replicas/--wait-aof it counts as acknowledged only when
 * durable, like the events. Returns false only when out of memory.
 */
bool sink_redis_queue_record(struct sink_redis *s, lsn_t confirmed, lsn_t commit_lsn,
                             int64_t commit_us);

/*
 * outbox-relay republish: calls neither read nor write the watermarks, so
 * the live stream's positions stay untouched and every event is published
 * unless its id is inside the dedup window. Set before the first publish.
 */
void sink_redis_set_republish(struct sink_redis *s);

#endif
