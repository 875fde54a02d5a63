/*
 * sink_int.h - what the sink's own files share, and nothing else includes:
 * struct sink_redis and its connections (struct node), and the few helpers
 * one of them calls in another.
 *
 * The sink is one object; its files are split by the data each owns:
 *   sink_queue.c   the command ring and the bytes of every command until it
 *                  is done, large values held by pointer included (the
 *                  ownership rule: struct sink_hold in sink_redis.h)
 *   sink_redis.c   the object's life, publishing into batches, routing a
 *                  command to its connection, group commit
 *   sink_node.c    one connection: its queues, its write round and probes
 *                  (WAIT, INFO memory), the non-blocking reads and writes
 *   sink_setup.c   the set of connections: finding the servers (one,
 *                  Sentinel's master, a cluster's masters) and preparing
 *                  each fresh connection (checks, function)
 *   sink_record.c  the slot record as the sink holds it: read, written,
 *                  answered
 *   sink_trim.c    --trim acked rounds (their calls go through the ring)
 *   sink_reply.c   what each reply means for the command it answers
 *   sink_native.c  --publish native: the group of batches in flight on one
 *                  connection (struct native, n->nat), its reads under WATCH,
 *                  its decisions and its MULTI/EXEC
 * The public interface is sink_redis.h.
 */
#ifndef RELAY_SINK_INT_H
#define RELAY_SINK_INT_H

#include <hiredis/hiredis.h>
#include <stdbool.h>
#include <stdint.h>

#include "buf.h"
#include "cluster_slots.h"
#include "dedup_record.h"
#include "redis_conn.h"
#include "sink_queue.h"
#include "sink_redis.h"

#define MAX_NODES CLUSTER_SLOTS_MAX_NODES
#define CLUSTER_SLOTS CLUSTER_SLOTS_COUNT
_Static_assert(MAX_NODES <= INT8_MAX, "node indexes are int8_t (slot_node, sq_ent.node)");

/* One connection: the single server, or one cluster master. */
struct node {
	char *host;
	int port;
	char *unix_path;
	const struct redis_conn_ops *io; /* plain or TLS reads and writes, chosen at connect */
	redisContext *c;
	struct ring sendq; /* seqs routed here, not yet staged */
	struct buf wbuf;   /* staged bytes, written from wsent */
	size_t wsent;
	uint64_t part_seq; /* command staged only up to part_off (0: none) */
	size_t part_off;
	struct ring waitq;   /* what each coming reply answers (a seq or an SQ_*_MARK) */
	struct ring durable; /* executed seqs that the next WAIT must cover */
	bool staged_publish; /* a publish was staged since the last WAIT */
	bool wblocked;       /* the socket was full: write again only after POLLOUT */
	void *ssl;           /* TLS session (owned by c), NULL for plain sockets */
	bool w_wants_read;   /* TLS: the blocked write waits for the socket to be readable */
	bool r_wants_write;  /* TLS: a read waits for the socket to be writable */
	int64_t wait_since_us;
	bool info_due;  /* stage INFO memory with the next write */
	bool info_sent; /* its reply is still to come */
	bool mem_known; /* used_memory and maxmemory were read */
	uint64_t used_memory, maxmemory;
	uint64_t max_bulk;  /* proto-max-bulk-len, 0 unknown */
	struct native *nat; /* --publish native: the batch in flight here (sink_native.c owns it) */
};

struct strset {
	char **slots;
	size_t cap; /* power of two */
	size_t used;
};

struct sink_redis {
	const struct relay_config *cf;
	uint32_t tli; /* sink_redis_set_timeline(): the slot record's timeline */
	struct metrics *m;
	bool use_functions;
	char sha[41];    /* EVALSHA digest when functions are unavailable */
	bool wait_mode;  /* --wait-replicas or --wait-aof */
	char policy[32]; /* maxmemory-policy of the node connected last ("" unknown) */

	struct node nodes[MAX_NODES];
	int nnodes;
	int8_t *slot_node; /* cluster: slot -> node, -1 unknown */
	bool connected;
	int64_t linger_until_us; /* --linger: calls wait to be written until then (sink_linger_gate) */
	bool sentinel_found; /* Sentinel mode: a master was found once (later failures are retried) */
	int poll_node[MAX_NODES]; /* node of each pollfd handed out */
	int npoll;

	struct sink_queue q;    /* the command ring, the open batch (sink_queue.h) */
	uint64_t refused_value; /* SINK_ERR_TOO_BIG: the largest value of the refused call */
	uint64_t max_value;     /* sink_redis_max_value(), 0 while disconnected */
	bool record_read;       /* the slot record was read (first connect) */
	bool record_found;
	struct slot_record record;
	uint64_t record_gen; /* counts record reads */

	struct strset streams; /* streams that got XGROUP CREATE on this connection set */
	bool trim;             /* --trim acked */
	char trim_sha[41];     /* EVALSHA digest of the trim script when functions are unavailable */
	struct strset trim_streams; /* streams published to, for --trim acked */
	uint32_t trim_pending;      /* calls of the current round still to answer (in the ring) */
	bool trim_done;             /* a round finished: trim_res is to be taken */
	struct sink_trim_result trim_res;
	struct buf key; /* scratch for key names */
	struct buf tag;
	struct buf wait_cmd; /* encoded WAIT or WAITAOF */
	struct sink_stats stats;
	struct drec_budget drec_budget; /* --dedup-record: the id records of all connections */
	enum sink_error_kind errkind;
	char errmsg[1024];
};

/* Cluster hash slot of stream s. */
static inline uint16_t sink_stream_slot(struct sink_redis *s, const char *stream, size_t len)
{
	return sq_stream_slot(stream, len, &s->tag);
}

/* n's connection as redis_conn.h has it (n->io reads and writes through it). */
static inline struct redis_conn sink_node_conn(const struct node *n)
{
	return (struct redis_conn){.c = n->c, .ssl = n->ssl, .ops = n->io};
}

/* sink_redis.c */
/* Empty set (its table stays allocated). */
void sink_strset_clear(struct strset *set);
/* Route e to the connection of its slot and queue it there for writing. */
bool sink_route(struct sink_redis *s, struct sq_ent *e);
/* Replies came back: send the open batch that grew meanwhile (group commit). */
bool sink_send_grown_batch(struct sink_redis *s);
/* --linger: whether new calls wait for the window to end to be written (sink_redis.c). */
bool sink_linger_gate(const struct sink_redis *s);
/* --linger: close a window that is over, and the batch it held open; false: out of memory. */
bool sink_linger_close(struct sink_redis *s);

/* sink_node.c */
/* Close n's connection and forget what was staged or awaited on it. */
void sink_node_close(struct node *n);
/* sink_node_close(), then free everything n holds and zero it. */
void sink_node_finish(struct node *n);
/* "host:port" or the unix socket path, for messages. */
const char *sink_node_addr(const struct node *n, char *buf, size_t len);
/* used_memory and maxmemory from an INFO memory reply into n. */
void sink_read_memory(struct node *n, const char *info);

/* sink_setup.c */
/*
 * Run one setup command synchronously on n. Returns the reply (caller frees)
 * or NULL with errmsg set; *status says whether retrying can help.
 */
redisReply *sink_setup_command(struct sink_redis *s, struct node *n, enum sink_status *status,
                               const char *what, int argc, const char **argv);

/* sink_record.c */
/* On the first connect, on the node that serves its key: read the slot record. */
enum sink_status sink_record_read_at_connect(struct sink_redis *s, struct node *n);
/* A queued slot record read answered: the record as Redis has it now. */
bool sink_record_reply(struct sink_redis *s, struct sq_ent *e, const redisReply *r);

/* sink_reply.c */
/* errmsg for an ACL refusal of what (see sink_error_noperm_text). */
void sink_noperm_message(struct sink_redis *s, const char *what, const char *fix, const char *msg);
/* Match one reply against what n's oldest outstanding request was. */
bool sink_handle_reply(struct sink_redis *s, struct node *n, redisReply *r);

/* An error reply msg to publish e: errkind and errmsg (false: the connections fail). */
bool sink_publish_error(struct sink_redis *s, const struct sq_ent *e, const char *msg);
/* "ASK <slot> <addr>" for e: sent to that master after ASKING, or an error. */
bool sink_follow_ask(struct sink_redis *s, struct sq_ent *e, const char *msg);
/* Publish e ran on n with per-event results r (an array as the function returns). */
bool sink_publish_done(struct sink_redis *s, struct node *n, struct sq_ent *e, const redisReply *r);

/* sink_native.c */
/* --publish native was asked for. */
bool sink_native_on(const struct sink_redis *s);
/* Stage n's native batch's next round, or the commands up to the next batch it takes. */
bool sink_native_stage(struct sink_redis *s, struct node *n, size_t limit);
/* A reply for an SQ_NATIVE_MARK. */
bool sink_native_reply(struct sink_redis *s, struct node *n, const redisReply *r);
/* Bytes wait to be staged. */
bool sink_native_due(const struct node *n);
/* A native batch is in flight on n: nothing else is staged until its round is answered. */
bool sink_native_blocks(const struct node *n);
/* The connection closed: forget the batch in flight (the ring sends it again). */
void sink_native_reset(struct node *n);
void sink_native_free(struct node *n);

/* sink_trim.c */
/* The answer to one --trim acked call: entries removed, or why not. */
bool sink_trim_reply(struct sink_redis *s, const redisReply *r);

#endif
