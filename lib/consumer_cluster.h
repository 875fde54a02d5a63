/*
 * consumer_cluster.h - the Redis Cluster connections of outbox-consume and
 * `outbox-relay status`: the slot map (CLUSTER SLOTS, read with
 * cluster_slots.h), one blocking connection per node made with
 * redis_conn_connect() (so AUTH, TLS and timeouts are the single-node
 * ones), and the route of a key to the master of its hash slot.
 *
 * The relay's sink has its own pipelined cluster client (sink_redis.c);
 * this one is for request/reply clients that send one command at a time.
 * Nothing here logs.
 */
#ifndef RELAY_CONSUMER_CLUSTER_H
#define RELAY_CONSUMER_CLUSTER_H

#include <stdbool.h>
#include <stddef.h>

#include "cluster_slots.h"
#include "redis_url.h"

struct redisContext;
struct redisReply;

/* Most nodes one client keeps connections to: masters, and ASK targets not yet in the map. */
#define CCLUSTER_MAX_CONNS (2 * CLUSTER_SLOTS_MAX_NODES)
/* Most MOVED/ASK redirections followed for one command. */
#define CCLUSTER_MAX_REDIRECTS 5

/* One node's connection; the address stays, the context comes and goes. */
struct ccluster_conn {
	char host[CLUSTER_SLOTS_HOST_MAX + 1];
	int port;
	struct redisContext *c; /* NULL while not connected */
	void *ssl;              /* c's TLS session (see redis_conn.h), or NULL */
	char desc[300];         /* "host:port/0", for messages */
};

struct ccluster;

/*
 * A client for the cluster whose seeds t names (t->cluster; t is borrowed
 * and must outlive the client). timeout_ms is the connect and reply timeout
 * of every node connection. Nothing is connected yet. NULL when out of
 * memory.
 */
struct ccluster *ccluster_create(const struct redis_target *t, int timeout_ms);
/* Closes every connection; NULL is a no-op. */
void ccluster_destroy(struct ccluster *cc);

/*
 * Read the slot map again: CLUSTER SLOTS from a node already connected, else
 * from each seed in turn, else from the other nodes of earlier maps, until a
 * reply passes cluster_slots_parse().
 * Connections are kept. False with a one-line reason in err (the old map is
 * kept then); *ret_permanent when no retry can help (credentials or ACL, a
 * server without cluster support).
 */
bool ccluster_refresh(struct ccluster *cc, bool *ret_permanent, char *err, size_t errlen);

/* Masters in the current map (0 before the first successful refresh). */
int ccluster_nmasters(const struct ccluster *cc);

/*
 * The connection of master i of the map, of the master serving key's hash
 * slot, or of host:port, connected first if need be. NULL with err and
 * *ret_permanent as for consumer_redis_connect(), or when the slot is not
 * served by any master (retryable).
 */
struct ccluster_conn *ccluster_master(struct ccluster *cc, int i, bool *ret_permanent, char *err,
                                      size_t errlen);
struct ccluster_conn *ccluster_for_key(struct ccluster *cc, const char *key, size_t len,
                                       bool *ret_permanent, char *err, size_t errlen);
struct ccluster_conn *ccluster_for_addr(struct ccluster *cc, const char *host, int port,
                                        bool *ret_permanent, char *err, size_t errlen);

/* Close n's connection (after an I/O error); the next use connects again. */
void ccluster_conn_close(struct ccluster_conn *n);
/* Close every connection; the map is kept. */
void ccluster_disconnect(struct ccluster *cc);

/*
 * Send one command about key with hiredis's blocking API to the master of
 * key's slot and return its reply (caller frees; it may be an error reply).
 * A MOVED reply refreshes the map and sends the command again to the node
 * it names, an ASK reply sends ASKING and the command to the node it names
 * (at most CCLUSTER_MAX_REDIRECTS times). NULL with a one-line reason in err
 * when a connection failed (it is closed) or the map could not be read.
 */
struct redisReply *ccluster_command(struct ccluster *cc, const char *key, int argc,
                                    const char **argv, char *err, size_t errlen);

#endif
