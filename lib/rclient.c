/*
 * rclient.c - the blocking request/reply Redis client of outbox-consume,
 * status and verify (see rclient.h).
 *
 * Every connection is a node: the one server (or the master the Sentinels
 * name), connected with redis_conn_connect() on the whole target, or a
 * cluster node, connected with the seed target's credentials and TLS
 * settings and the node's address. The slot map comes from
 * cluster_slots_parse(), key slots from cluster_slots_key_slot().
 *
 * Commands are written with hiredis's blocking context, but replies are
 * awaited with poll() on the socket (and, for an interruptible wait, on the
 * caller's wake-up descriptor), so a stop signal ends a BLOCK wait at once
 * instead of after up to its BLOCK time. rclient_command() is the one place
 * MOVED and ASK are followed; scan_node() the one SCAN ... TYPE <type>.
 */
#include "rclient.h"

#include <errno.h>
#include <hiredis/hiredis.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lsn.h"
#include "msg.h"
#include "redis_conn.h"
#include "redis_tls.h"

#define SCAN_COUNT "1000"

/* One node's connection; the address stays, the context comes and goes. */
struct rnode {
	char host[CLUSTER_SLOTS_HOST_MAX + 1]; /* cluster nodes only */
	int port;
	redisContext *c; /* NULL while not connected */
	void *ssl;       /* c's TLS session (see redis_conn.h), or NULL */
	char desc[300];  /* "host:port/0", or the one server's target described */
};

struct rclient {
	const struct redis_target *t;
	int timeout_ms;
	int wake_fd;                       /* -1: no wait is interruptible */
	const volatile sig_atomic_t *stop; /* with wake_fd */
	rclient_redirect_fn *on_redirect;  /* NULL: redirects are not reported */
	void *redirect_arg;
	struct rnode *cur;             /* the node the last command went to */
	struct cluster_slots_map *map; /* cluster: NULL before the first refresh */
	int nconns;                    /* one server: 1, conns[0] */
	struct rnode conns[RCLIENT_MAX_CONNS];
};

struct rclient *rclient_create(const struct redis_target *t, int timeout_ms)
{
	struct rclient *rc = calloc(1, sizeof(*rc));

	if (!rc)
		return NULL;
	rc->t = t;
	rc->timeout_ms = timeout_ms;
	rc->wake_fd = -1;
	if (!t->cluster) {
		rc->nconns = 1;
		(void)redis_target_describe(t, rc->conns[0].desc, sizeof(rc->conns[0].desc));
		rc->cur = &rc->conns[0];
	}
	return rc;
}

void rclient_set_interrupt(struct rclient *rc, int wake_fd, const volatile sig_atomic_t *stop)
{
	rc->wake_fd = wake_fd;
	rc->stop = stop;
}

void rclient_set_redirect_hook(struct rclient *rc, rclient_redirect_fn *fn, void *arg)
{
	rc->on_redirect = fn;
	rc->redirect_arg = arg;
}

static void node_close(struct rnode *n)
{
	if (n->c) {
		redisFree(n->c);
		n->c = NULL;
		n->ssl = NULL;
	}
}

void rclient_disconnect(struct rclient *rc)
{
	for (int i = 0; i < rc->nconns; i++)
		node_close(&rc->conns[i]);
}

void rclient_destroy(struct rclient *rc)
{
	if (!rc)
		return;
	rclient_disconnect(rc);
	cluster_slots_map_free(rc->map);
	free(rc);
}

bool rclient_is_cluster(const struct rclient *rc)
{
	return rc->t->cluster;
}

int rclient_nmasters(const struct rclient *rc)
{
	if (!rc->t->cluster)
		return 1;
	return rc->map ? rc->map->nnodes : 0;
}

const char *rclient_desc(const struct rclient *rc)
{
	return rc->cur ? rc->cur->desc : "";
}

/* The target of cluster node n: the seed target's credentials and TLS, n's address. */
static void node_target(const struct rclient *rc, struct rnode *n, struct redis_target *nt)
{
	*nt = *rc->t;
	nt->host = n->host;
	nt->port = n->port;
	nt->unix_path = NULL;
	nt->cluster = false;
	nt->seeds = NULL;
	nt->nseeds = 0;
}

/* The cluster connection entry of host:port, added (not connected) when new. */
static struct rnode *node_entry(struct rclient *rc, const char *host, int port, char *err,
                                size_t errlen)
{
	struct rnode *n;
	struct redis_target nt;

	for (int i = 0; i < rc->nconns; i++) {
		if (rc->conns[i].port == port && strcmp(rc->conns[i].host, host) == 0)
			return &rc->conns[i];
	}
	if (strlen(host) > CLUSTER_SLOTS_HOST_MAX) {
		msg_set(err, errlen, "Redis Cluster node address \"%.40s...\" is too long", host);
		return NULL;
	}
	if (rc->nconns == RCLIENT_MAX_CONNS) {
		/* Reuse the entry of a node that is not connected (it left the cluster). */
		for (int i = 0; i < rc->nconns; i++) {
			if (!rc->conns[i].c && &rc->conns[i] != rc->cur) {
				n = &rc->conns[i];
				goto fill;
			}
		}
		msg_set(err, errlen, "more than %d Redis Cluster nodes are connected", RCLIENT_MAX_CONNS);
		return NULL;
	}
	n = &rc->conns[rc->nconns++];
fill:
	memset(n, 0, sizeof(*n));
	(void)snprintf(n->host, sizeof(n->host), "%s", host);
	n->port = port;
	node_target(rc, n, &nt);
	(void)redis_target_describe(&nt, n->desc, sizeof(n->desc));
	return n;
}

/* Connect n unless it is connected: the whole target for one server, else n's address. */
static bool node_up(struct rclient *rc, struct rnode *n, bool *ret_permanent, char *err,
                    size_t errlen)
{
	struct redis_target nt;
	struct redis_conn one;

	*ret_permanent = false;
	if (n->c)
		return true;
	if (rc->t->cluster)
		node_target(rc, n, &nt);
	*ret_permanent = redis_conn_connect(&one, rc->t->cluster ? &nt : rc->t, rc->timeout_ms, err,
	                                    errlen) == REDIS_CONN_PERMANENT;
	n->c = one.c;
	n->ssl = one.ssl;
	return n->c != NULL;
}

static struct rnode *node_for_addr(struct rclient *rc, const char *host, int port,
                                   bool *ret_permanent, char *err, size_t errlen)
{
	struct rnode *n = node_entry(rc, host, port, err, errlen);

	*ret_permanent = false;
	if (!n || !node_up(rc, n, ret_permanent, err, errlen))
		return NULL;
	return n;
}

/* Master i of the map (one server: the server), connected. */
static struct rnode *node_master(struct rclient *rc, int i, bool *ret_permanent, char *err,
                                 size_t errlen)
{
	*ret_permanent = false;
	if (!rc->t->cluster) {
		if (i != 0) {
			msg_set(err, errlen, "no Redis master %d", i);
			return NULL;
		}
		return node_up(rc, &rc->conns[0], ret_permanent, err, errlen) ? &rc->conns[0] : NULL;
	}
	if (!rc->map || i < 0 || i >= rc->map->nnodes) {
		msg_set(err, errlen, "no Redis Cluster master %d in the slot map", i);
		return NULL;
	}
	return node_for_addr(rc, rc->map->nodes[i].host, rc->map->nodes[i].port, ret_permanent, err,
	                     errlen);
}

/* The node holding key (one server: the server), connected. */
static struct rnode *node_for_key(struct rclient *rc, const char *key, bool *ret_permanent,
                                  char *err, size_t errlen)
{
	size_t len = strlen(key);
	unsigned slot;
	int i;

	*ret_permanent = false;
	if (!rc->t->cluster)
		return node_master(rc, 0, ret_permanent, err, errlen);
	slot = cluster_slots_key_slot(key, len);
	i = rc->map ? rc->map->slot_node[slot] : -1;
	if (i < 0) {
		msg_set(err, errlen, "no Redis Cluster master serves hash slot %u (of key \"%.*s\")", slot,
		        len > 200 ? 200 : (int)len, key);
		return NULL;
	}
	return node_master(rc, i, ret_permanent, err, errlen);
}

bool rclient_connect_master(struct rclient *rc, int i, bool *ret_permanent, char *err,
                            size_t errlen)
{
	struct rnode *n = node_master(rc, i, ret_permanent, err, errlen);

	if (!n)
		return false;
	rc->cur = n;
	return true;
}

/* A transport failure on n: n is closed (its replies would be out of step); returns NULL. */
static struct redisReply *node_failed(struct rnode *n, enum rclient_status *st)
{
	node_close(n);
	*st = RCLIENT_RETRY;
	return NULL;
}

/*
 * Send one command to n and wait at most timeout_ms for its reply. Returns
 * the reply (caller frees; it may be an error reply) or NULL with *st set:
 * RCLIENT_STOP when interruptible and the stop flag was set while no reply
 * had started to arrive, otherwise RCLIENT_RETRY with err. A reply already
 * on its way is read even after a signal, so entries Redis handed over are
 * still printed.
 */
static struct redisReply *node_command(struct rclient *rc, struct rnode *n, int argc,
                                       const char **argv, const size_t *lens, int64_t timeout_ms,
                                       bool interruptible, enum rclient_status *st, char *err,
                                       size_t errlen)
{
	redisContext *ctx = n->c;
	int64_t deadline = time_mono_us() + timeout_ms * 1000;
	int done = 0;

	interruptible = interruptible && rc->wake_fd >= 0;
	if (redisAppendCommandArgv(ctx, argc, argv, lens) != REDIS_OK) {
		msg_set(err, errlen, "could not queue %s: %s", argv[0], ctx->errstr);
		return node_failed(n, st);
	}
	do {
		if (redisBufferWrite(ctx, &done) != REDIS_OK) {
			msg_set(err, errlen, "could not send %s to Redis at %s: %s", argv[0], n->desc,
			        ctx->errstr);
			return node_failed(n, st);
		}
	} while (!done);

	for (;;) {
		struct pollfd p[2] = {{.fd = ctx->fd, .events = POLLIN},
		                      {.fd = rc->wake_fd, .events = POLLIN}};
		void *reply = NULL;
		int64_t left;
		int prc;

		if (redisReaderGetReply(ctx->reader, &reply) != REDIS_OK) {
			msg_set(err, errlen, "bad reply to %s from Redis at %s: %s", argv[0], n->desc,
			        ctx->reader->errstr);
			return node_failed(n, st);
		}
		if (reply)
			return reply;
		/* TLS may hold bytes it already read off the socket: poll() cannot see them. */
		if (n->ssl && redis_tls_pending(n->ssl)) {
			if (redisBufferRead(ctx) != REDIS_OK) {
				msg_set(err, errlen, "lost the connection to Redis at %s: %s", n->desc,
				        ctx->errstr);
				return node_failed(n, st);
			}
			continue;
		}
		left = rclient_ms_until(deadline, time_mono_us());
		if (left <= 0) {
			msg_set(err, errlen, "no reply to %s from Redis at %s within %" PRId64 " ms", argv[0],
			        n->desc, timeout_ms);
			return node_failed(n, st);
		}
		prc = poll(p, interruptible ? 2 : 1, left > INT_MAX ? INT_MAX : (int)left);
		if (prc < 0 && errno != EINTR) {
			msg_set(err, errlen, "poll: %s", strerror(errno));
			return node_failed(n, st);
		}
		if (prc > 0 && (p[0].revents & (POLLIN | POLLHUP | POLLERR))) {
			if (redisBufferRead(ctx) != REDIS_OK) {
				msg_set(err, errlen, "lost the connection to Redis at %s: %s", n->desc,
				        ctx->errstr);
				return node_failed(n, st);
			}
			continue;
		}
		if (interruptible && *rc->stop) {
			/* The reply still to come would answer the next command: close. */
			node_close(n);
			*st = RCLIENT_STOP;
			return NULL;
		}
	}
}

/*
 * Ask n for CLUSTER SLOTS. Returns 1 with the new map installed, 0 (err) to
 * try another node, -1 (err) when no node can help.
 */
static int slots_from(struct rclient *rc, struct rnode *n, char *err, size_t errlen)
{
	const char *argv[2] = {"CLUSTER", "SLOTS"};
	struct cluster_slots_map *map;
	redisReply *r = redisCommandArgv(n->c, 2, argv, NULL);
	char why[256];

	if (!r) {
		msg_set(err, errlen, "CLUSTER SLOTS on %s failed: %s", n->desc,
		        n->c->errstr[0] ? n->c->errstr : "connection lost");
		node_close(n);
		return 0;
	}
	if (r->type == REDIS_REPLY_ERROR) {
		int ok = 0;

		if (strstr(r->str, "cluster support disabled")) {
			msg_set(err, errlen,
			        "%s is not a Redis Cluster node (cluster support disabled): use redis:// "
			        "for a single server",
			        n->desc);
			ok = -1;
		} else {
			msg_set(err, errlen, "Redis at %s refused CLUSTER SLOTS: %s", n->desc, r->str);
			ok = redis_conn_error_permanent(r->str) ? -1 : 0;
		}
		freeReplyObject(r);
		return ok;
	}
	map = cluster_slots_parse(r, n->host, why, sizeof(why));
	freeReplyObject(r);
	if (!map) {
		msg_set(err, errlen, "CLUSTER SLOTS from %s is unusable: %s", n->desc, why);
		return 0;
	}
	cluster_slots_map_free(rc->map);
	rc->map = map;
	return 1;
}

/*
 * The slot map from n: 1 taken, -1 a permanent failure (*ret_permanent set),
 * 0 failed (err says why; copied to first, when given, if it is the first).
 */
static int try_node(struct rclient *rc, struct rnode *n, bool *ret_permanent, char *first,
                    size_t firstlen, char *err, size_t errlen)
{
	int ok = slots_from(rc, n, err, errlen);

	if (ok < 0)
		*ret_permanent = true;
	else if (ok == 0 && first && !first[0])
		(void)snprintf(first, firstlen, "%s", err);
	return ok;
}

/* The cluster half of rclient_connect(): the slot map read again. */
static bool refresh(struct rclient *rc, bool *ret_permanent, char *err, size_t errlen)
{
	char first[512] = "";

	*ret_permanent = false;
	/* A node already connected answers fastest and knows the current map. */
	for (int i = 0; i < rc->nconns; i++) {
		int ok;

		if (!rc->conns[i].c)
			continue;
		ok = try_node(rc, &rc->conns[i], ret_permanent, first, sizeof(first), err, errlen);
		if (ok)
			return ok > 0;
	}
	for (size_t k = 0; k < rc->t->nseeds; k++) {
		struct rnode *n = node_for_addr(rc, rc->t->seeds[k].host, rc->t->seeds[k].port,
		                                ret_permanent, err, errlen);
		int ok;

		if (!n) {
			if (*ret_permanent)
				return false;
			if (!first[0])
				(void)snprintf(first, sizeof(first), "%s", err);
			continue;
		}
		ok = try_node(rc, n, ret_permanent, first, sizeof(first), err, errlen);
		if (ok)
			return ok > 0;
	}
	/* Every seed failed: any other node known from an earlier map may still answer. */
	for (int i = 0; i < rc->nconns; i++) {
		struct rnode *n = &rc->conns[i];
		int ok;

		if (n->c || !node_up(rc, n, ret_permanent, err, errlen)) {
			if (*ret_permanent)
				return false;
			continue;
		}
		ok = try_node(rc, n, ret_permanent, NULL, 0, err, errlen);
		if (ok)
			return ok > 0;
	}
	*ret_permanent = false;
	if (first[0])
		msg_set(err, errlen, "%s", first);
	else if (rc->t->nseeds == 0)
		msg_set(err, errlen, "no Redis Cluster seed given");
	return false;
}

bool rclient_connect(struct rclient *rc, bool *ret_permanent, char *err, size_t errlen)
{
	if (!rc->t->cluster)
		return node_up(rc, &rc->conns[0], ret_permanent, err, errlen);
	return refresh(rc, ret_permanent, err, errlen);
}

/* RCLIENT_PERMANENT or RCLIENT_RETRY for a failed node lookup; returns NULL. */
static struct redisReply *lookup_failed(bool permanent, enum rclient_status *st)
{
	*st = permanent ? RCLIENT_PERMANENT : RCLIENT_RETRY;
	return NULL;
}

struct redisReply *rclient_command(struct rclient *rc, const char *key, int argc, const char **argv,
                                   const size_t *lens, int64_t timeout_ms, bool interruptible,
                                   enum rclient_status *st, char *err, size_t errlen)
{
	bool permanent, ask = false;
	struct rnode *n = node_for_key(rc, key, &permanent, err, errlen);

	*st = RCLIENT_OK;
	if (!n)
		return lookup_failed(permanent, st);
	for (int hop = 0;; hop++) {
		char host[CLUSTER_SLOTS_HOST_MAX + 1];
		unsigned slot;
		int port;
		redisReply *r;

		rc->cur = n;
		if (ask) {
			const char *asking[1] = {"ASKING"};

			r = node_command(rc, n, 1, asking, NULL, rc->timeout_ms, false, st, err, errlen);
			if (!r)
				return NULL;
			if (r->type == REDIS_REPLY_ERROR) {
				msg_set(err, errlen, "ASKING on %s failed: %s", n->desc, r->str);
				freeReplyObject(r);
				*st = RCLIENT_RETRY;
				return NULL;
			}
			freeReplyObject(r);
		}
		r = node_command(rc, n, argc, argv, lens, timeout_ms, interruptible, st, err, errlen);
		if (!r || !rc->t->cluster || r->type != REDIS_REPLY_ERROR ||
		    !cluster_slots_redirect(r->str, &ask, &slot, host, sizeof(host), &port))
			return r;
		if (hop == RCLIENT_MAX_REDIRECTS) {
			msg_set(err, errlen, "%s on key \"%.200s\": still redirected after %d hops (%s)",
			        argv[0], key, RCLIENT_MAX_REDIRECTS, r->str);
			freeReplyObject(r);
			*st = RCLIENT_RETRY;
			return NULL;
		}
		if (!host[0]) /* "MOVED 12 :6379": the node that answered */
			(void)snprintf(host, sizeof(host), "%s", n->host);
		if (rc->on_redirect)
			rc->on_redirect(rc->redirect_arg, argv[0], r->str, n->desc);
		freeReplyObject(r);
		if (!ask && !refresh(rc, &permanent, err, errlen))
			return lookup_failed(permanent, st);
		n = node_for_addr(rc, host, port, &permanent, err, errlen);
		if (!n)
			return lookup_failed(permanent, st);
	}
}

struct redisReply *rclient_call(struct rclient *rc, const char *key, int argc, const char **argv,
                                char *err, size_t errlen)
{
	enum rclient_status st;

	return rclient_command(rc, key, argc, argv, NULL, rc->timeout_ms, false, &st, err, errlen);
}

static bool is_string(const redisReply *r)
{
	return r && (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS);
}

/* One full SCAN of node n. */
static enum rclient_status scan_node(struct rclient *rc, struct rnode *n, const char *pattern,
                                     const char *type,
                                     bool (*found)(void *arg, const char *key, size_t len),
                                     void *arg, char *err, size_t errlen)
{
	char cursor[32] = "0";
	const char *argv[8] = {"SCAN", cursor, "MATCH", pattern, "TYPE", type, "COUNT", SCAN_COUNT};

	do {
		enum rclient_status st = RCLIENT_OK;
		redisReply *r = node_command(rc, n, 8, argv, NULL, rc->timeout_ms, false, &st, err, errlen);
		redisReply *keys;

		if (!r)
			return st;
		if (r->type == REDIS_REPLY_ERROR) {
			msg_set(err, errlen, "%s", r->str);
			freeReplyObject(r);
			return RCLIENT_REFUSED;
		}
		if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 || !is_string(r->element[0]) ||
		    r->element[0]->len >= sizeof(cursor) || r->element[1]->type != REDIS_REPLY_ARRAY) {
			freeReplyObject(r);
			msg_set(err, errlen, "unexpected reply to SCAN");
			return RCLIENT_RETRY;
		}
		(void)snprintf(cursor, sizeof(cursor), "%s", r->element[0]->str);
		keys = r->element[1];
		for (size_t i = 0; i < keys->elements; i++) {
			if (!is_string(keys->element[i]))
				continue;
			if (!found(arg, keys->element[i]->str, keys->element[i]->len)) {
				freeReplyObject(r);
				return RCLIENT_ABORTED;
			}
		}
		freeReplyObject(r);
	} while (strcmp(cursor, "0") != 0);
	return RCLIENT_OK;
}

enum rclient_status rclient_scan_keys(struct rclient *rc, const char *pattern, const char *type,
                                      bool (*found)(void *arg, const char *key, size_t len),
                                      void *arg, char *err, size_t errlen)
{
	for (int m = 0; m < rclient_nmasters(rc); m++) {
		enum rclient_status st;
		bool permanent;

		if (!rclient_connect_master(rc, m, &permanent, err, errlen))
			return permanent ? RCLIENT_PERMANENT : RCLIENT_RETRY;
		st = scan_node(rc, rc->cur, pattern, type, found, arg, err, errlen);
		if (st != RCLIENT_OK)
			return st;
	}
	return RCLIENT_OK;
}

enum rclient_status rclient_scan_streams(struct rclient *rc, const char *pattern,
                                         bool (*found)(void *arg, const char *key, size_t len),
                                         void *arg, char *err, size_t errlen)
{
	return rclient_scan_keys(rc, pattern, "stream", found, arg, err, errlen);
}

bool rclient_keys_add(void *arg, const char *key, size_t len)
{
	struct rclient_keys *l = arg;
	char *k;

	if (l->n == l->cap) {
		size_t cap = l->cap ? 2 * l->cap : 16;
		char **grown = realloc(l->keys, cap * sizeof(*grown));

		if (!grown)
			return false;
		l->keys = grown;
		l->cap = cap;
	}
	k = strndup(key, len);
	if (!k)
		return false;
	l->keys[l->n++] = k;
	return true;
}

void rclient_keys_free(struct rclient_keys *l)
{
	for (size_t i = 0; i < l->n; i++)
		free(l->keys[i]);
	free(l->keys);
	*l = (struct rclient_keys){0};
}

const redisReply *rclient_map_get(const redisReply *map, const char *name)
{
	size_t n = strlen(name);

	if (!map || map->type != REDIS_REPLY_ARRAY)
		return NULL;
	for (size_t i = 0; i + 1 < map->elements; i += 2) {
		const redisReply *k = map->element[i];

		if ((k->type == REDIS_REPLY_STRING || k->type == REDIS_REPLY_STATUS) && k->len == n &&
		    memcmp(k->str, name, n) == 0)
			return map->element[i + 1];
	}
	return NULL;
}
