/*
 * rclient.h - the blocking Redis client of outbox-consume, `outbox-relay
 * status` and `outbox-relay verify`: one command at a time to a single
 * server, the master a Sentinel names (both through redis_conn_connect(), so
 * AUTH, TLS and timeouts are the same everywhere) or a Redis Cluster (the
 * slot map read with cluster_slots.h, one connection per node, a key's
 * command sent to the master of its hash slot, MOVED and ASK followed here
 * and nowhere else); the wait for a reply bounded by a timeout and, when
 * asked, cut short by a stop signal; and the one SCAN ... TYPE <type> over
 * every master.
 *
 * The relay's sink has its own pipelined client (sink_redis.c); this one is
 * for request/reply clients. Nothing here logs: a redirect is reported to
 * the caller's hook (rclient_set_redirect_hook()).
 */
#ifndef RELAY_RCLIENT_H
#define RELAY_RCLIENT_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cluster_slots.h"
#include "redis_url.h"

struct redisReply;

/* Most nodes one client keeps connections to: masters, and ASK targets not yet in the map. */
#define RCLIENT_MAX_CONNS (2 * CLUSTER_SLOTS_MAX_NODES)
/* Most MOVED/ASK redirections followed for one command. */
#define RCLIENT_MAX_REDIRECTS 5

/* Outcome of a call that returned no reply (or of a scan). */
enum rclient_status {
	RCLIENT_OK = 0,
	RCLIENT_RETRY,     /* connection or server trouble (err): reconnect after a backoff */
	RCLIENT_PERMANENT, /* no retry can help (err): credentials, ACL, no cluster support */
	RCLIENT_STOP,      /* an interruptible wait was cut short by the stop flag */
	RCLIENT_REFUSED,   /* rclient_scan_streams(): an error reply, its text in err */
	RCLIENT_ABORTED    /* rclient_scan_streams(): the caller's callback said stop */
};

struct rclient;

/* Milliseconds from now_us until when_us, rounded up; 0 once it has passed. */
static inline int64_t rclient_ms_until(int64_t when_us, int64_t now_us)
{
	return when_us > now_us ? (when_us - now_us + 999) / 1000 : 0;
}

/*
 * A client for target t (borrowed; it must outlive the client): one server,
 * a Sentinel-named master, or the cluster whose seeds t->cluster names.
 * timeout_ms is the connect timeout of every connection and the reply
 * timeout of rclient_call(). Nothing is connected yet. NULL when out of
 * memory.
 */
struct rclient *rclient_create(const struct redis_target *t, int timeout_ms);
/* Closes every connection; NULL is a no-op. */
void rclient_destroy(struct rclient *rc);

/*
 * Interruptible waits (rclient_command() with interruptible) also poll
 * wake_fd for reading and end once *stop is set. Without this call no wait
 * is interruptible.
 */
void rclient_set_interrupt(struct rclient *rc, int wake_fd, const volatile sig_atomic_t *stop);

/*
 * Called before a MOVED or ASK reply to cmd from the node described by desc
 * is followed (outbox-consume logs it). NULL: nothing is called.
 */
typedef void rclient_redirect_fn(void *arg, const char *cmd, const char *reply, const char *desc);
void rclient_set_redirect_hook(struct rclient *rc, rclient_redirect_fn *fn, void *arg);

/*
 * One server or Sentinel: connect (redis_conn_connect()). A cluster: read
 * the slot map again, with CLUSTER SLOTS from a node already connected, else
 * from each seed in turn, else from the other nodes of earlier maps, until a
 * reply passes cluster_slots_parse(); connections are kept, and on failure
 * so is the old map. False with a one-line reason in err; *ret_permanent
 * when no retry can help (credentials or ACL, a server without cluster
 * support).
 */
bool rclient_connect(struct rclient *rc, bool *ret_permanent, char *err, size_t errlen);

/* Is this client for a Redis Cluster? */
bool rclient_is_cluster(const struct rclient *rc);
/* Masters in the current map (0 before the first successful refresh); 1 for one server. */
int rclient_nmasters(const struct rclient *rc);

/*
 * Connect master i of the map (one server: i 0, the server) unless it is
 * connected, and make it the node rclient_desc() names. False with err and
 * *ret_permanent as for rclient_connect(); a master not in the map is
 * retryable.
 */
bool rclient_connect_master(struct rclient *rc, int i, bool *ret_permanent, char *err,
                            size_t errlen);

/*
 * The node the last command went to ("host:port/db"; for one server or
 * Sentinel, the target as redis_target_describe() gives it), for messages.
 */
const char *rclient_desc(const struct rclient *rc);

/* Close every connection; the slot map is kept. */
void rclient_disconnect(struct rclient *rc);

/*
 * Send one command about key (lens NULL: NUL-terminated arguments) to the
 * server holding it: the one server, or the master of key's hash slot,
 * connected first if need be. Wait at most timeout_ms for the reply; when
 * interruptible, also until the stop flag (rclient_set_interrupt()) is set
 * while no reply has started to arrive; a reply already on its way is read
 * even after a signal. In a cluster a MOVED reply reads the slot map again
 * and sends the command to the node it names (later commands on that key
 * follow the new map), an ASK reply sends ASKING and the command to the node
 * it names (the map stays: the slot is still being migrated), at most
 * RCLIENT_MAX_REDIRECTS times. Returns the reply (caller frees; it may be an
 * error reply) or NULL with *st RCLIENT_STOP, or RCLIENT_RETRY or
 * RCLIENT_PERMANENT with one line in err (a connection that failed is
 * closed).
 */
struct redisReply *rclient_command(struct rclient *rc, const char *key, int argc, const char **argv,
                                   const size_t *lens, int64_t timeout_ms, bool interruptible,
                                   enum rclient_status *st, char *err, size_t errlen);

/* rclient_command() with NUL-terminated arguments, the client's timeout, not interruptible. */
struct redisReply *rclient_call(struct rclient *rc, const char *key, int argc, const char **argv,
                                char *err, size_t errlen);

/*
 * The value for name in a flat [name, value, ...] reply (XINFO's maps, a
 * stream entry's fields): the first match, NULL when map is not an array or
 * has no such name.
 */
const struct redisReply *rclient_map_get(const struct redisReply *map, const char *name);

/*
 * One full SCAN 0 MATCH pattern TYPE stream COUNT 1000 of every master (one
 * server: of it), calling found() once for every key returned (SCAN may
 * return a key twice). A stream whose slot moves meanwhile may be missed by
 * both masters. Returns RCLIENT_OK; RCLIENT_REFUSED with the error reply's
 * text in err; RCLIENT_ABORTED when found() returned false; RCLIENT_RETRY
 * or RCLIENT_PERMANENT with err ("unexpected reply to SCAN" for a reply of
 * another shape).
 */
enum rclient_status rclient_scan_streams(struct rclient *rc, const char *pattern,
                                         bool (*found)(void *arg, const char *key, size_t len),
                                         void *arg, char *err, size_t errlen);
/*
 * The keys a scan found, as found() of the two calls above with
 * rclient_keys_add() (false: out of memory) and the list as arg; a key may be
 * there twice. rclient_keys_free() frees them and empties the list.
 */
struct rclient_keys {
	char **keys;
	size_t n, cap;
};
bool rclient_keys_add(void *arg, const char *key, size_t len);
void rclient_keys_free(struct rclient_keys *l);
/* The same, for keys of another type ("string": SCAN ... TYPE string). */
enum rclient_status rclient_scan_keys(struct rclient *rc, const char *pattern, const char *type,
                                      bool (*found)(void *arg, const char *key, size_t len),
                                      void *arg, char *err, size_t errlen);

#endif
