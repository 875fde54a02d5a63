/*
 * redis_sentinel.h - find the master of a redis-sentinel:// target.
 *
 * Follows the Redis Sentinel client guidelines: ask each Sentinel in turn,
 * with a short connect and read timeout, for SENTINEL get-master-addr-by-name;
 * the first that answers moves to the front of the list; the caller connects
 * to the address, checks that ROLE says master and, when it does not (or on a
 * lost connection, or a READONLY reply), asks again. Shared by the relay
 * (sink_setup.c), outbox-consume, outbox-relay status and verify (rclient.c) and the
 * preflight checks. The reply parsers are pure; the rest does blocking I/O
 * and never logs.
 */
#ifndef RELAY_REDIS_SENTINEL_H
#define RELAY_REDIS_SENTINEL_H

#include <stdbool.h>
#include <stddef.h>

#include "redis_url.h"

struct redisReply;

/* Longest host a Sentinel may name (an IPv6 address or a DNS name). */
#define REDIS_SENTINEL_HOST_MAX 256
/* Longest wait for one Sentinel (connect, then each reply). */
#define REDIS_SENTINEL_TIMEOUT_MS 1000

enum sentinel_addr {
	SENTINEL_ADDR_OK,      /* host and port filled */
	SENTINEL_ADDR_UNKNOWN, /* nil: this Sentinel monitors no master of that name */
	SENTINEL_ADDR_ERROR,   /* an error reply (NOAUTH, NOPERM, ...): r->str says which */
	SENTINEL_ADDR_BAD      /* anything else: not a Sentinel, or a broken reply */
};

/*
 * Read a SENTINEL get-master-addr-by-name reply: a two-element array of host
 * and port (bulk strings). On SENTINEL_ADDR_OK writes host (NUL-terminated)
 * and *port; otherwise writes nothing.
 */
enum sentinel_addr redis_sentinel_parse_addr(const struct redisReply *r, char *host, size_t hostlen,
                                             int *port);

/*
 * Read a ROLE reply (an array whose first element is "master", "slave" or
 * "sentinel"). True when it says master. role gets the word ("" when the
 * reply is not a ROLE reply, an error reply's text when it is one).
 */
bool redis_sentinel_parse_role(const struct redisReply *r, char *role, size_t rolelen);

/*
 * Ask the Sentinels of t (t->seeds; t->sentinel must be set) for the address
 * of the master t->master_name, each with at most
 * min(timeout_ms, REDIS_SENTINEL_TIMEOUT_MS) per step, over TLS when t->tls,
 * authenticating with t->sentinel_password when set. The Sentinel that answers
 * moves to the front of t->seeds (the list lives in memory the target points
 * to, so this works through a const target; single-threaded callers only).
 * On success *ret_host (malloc'd) and *ret_port. On failure false with one
 * line in err naming each Sentinel's problem (never a password), and
 * *ret_permanent when retrying cannot help: a Sentinel refused the
 * credentials, every Sentinel was reached and none knows the name, or the TLS
 * files are unusable.
 */
bool redis_sentinel_discover(const struct redis_target *t, int timeout_ms, char **ret_host,
                             int *ret_port, bool *ret_permanent, char *err, size_t errlen);

/*
 * The Sentinel that answered last (the first of t->seeds after a
 * successful redis_sentinel_discover) named a server that is not the master:
 * move it to the end of the list, so the next discovery asks the others
 * first instead of getting the same stale answer again.
 */
void redis_sentinel_distrust_first(const struct redis_target *t);

/*
 * *ret as t with host:port of the discovered master: a shallow copy (it
 * borrows t's strings and host; never pass it to redis_target_finish) with
 * sentinel off and no seeds, for code that connects to one server.
 */
void redis_sentinel_master_target(const struct redis_target *t, char *host, int port,
                                  struct redis_target *ret);

#endif
