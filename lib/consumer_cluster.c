/*
 * consumer_cluster.c - Redis Cluster connections for outbox-consume and
 * `outbox-relay status` (see consumer_cluster.h). The slot map comes from
 * cluster_slots_parse(), key slots from cluster_slots_key_slot(), and every
 * node connection from redis_conn_connect() with the seed target's
 * credentials and TLS settings and the node's address.
 */
#include "consumer_cluster.h"

#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "redis_conn.h"
#include "msg.h"

struct ccluster {
	const struct redis_target *t;
	int timeout_ms;
	struct cluster_slots_map *map; /* NULL before the first refresh */
	int nconns;
	struct ccluster_conn conns[CCLUSTER_MAX_CONNS];
};

struct ccluster *ccluster_create(const struct redis_target *t, int timeout_ms)
{
	struct ccluster *cc = calloc(1, sizeof(*cc));

	if (!cc)
		return NULL;
	cc->t = t;
	cc->timeout_ms = timeout_ms;
	return cc;
}

void ccluster_conn_close(struct ccluster_conn *n)
{
	if (n->c) {
		redisFree(n->c);
		n->c = NULL;
		n->ssl = NULL;
	}
}

void ccluster_disconnect(struct ccluster *cc)
{
	for (int i = 0; i < cc->nconns; i++)
		ccluster_conn_close(&cc->conns[i]);
}

void ccluster_destroy(struct ccluster *cc)
{
	if (!cc)
		return;
	ccluster_disconnect(cc);
	cluster_slots_map_free(cc->map);
	free(cc);
}

int ccluster_nmasters(const struct ccluster *cc)
{
	return cc->map ? cc->map->nnodes : 0;
}

/* The target of node n: the seed target's credentials and TLS, n's address. */
static void node_target(const struct ccluster *cc, struct ccluster_conn *n, struct redis_target *nt)
{
	*nt = *cc->t;
	nt->host = n->host;
	nt->port = n->port;
	nt->unix_path = NULL;
	nt->cluster = false;
	nt->seeds = NULL;
	nt->nseeds = 0;
}

/* The connection entry of host:port, added (not connected) when new. */
static struct ccluster_conn *conn_entry(struct ccluster *cc, const char *host, int port, char *err,
                                        size_t errlen)
{
	struct ccluster_conn *n;
	struct redis_target nt;

	for (int i = 0; i < cc->nconns; i++) {
		if (cc->conns[i].port == port && strcmp(cc->conns[i].host, host) == 0)
			return &cc->conns[i];
	}
	if (strlen(host) > CLUSTER_SLOTS_HOST_MAX) {
		msg_set(err, errlen, "Redis Cluster node address \"%.40s...\" is too long", host);
		return NULL;
	}
	if (cc->nconns == CCLUSTER_MAX_CONNS) {
		/* Reuse the entry of a node that is not connected (it left the cluster). */
		for (int i = 0; i < cc->nconns; i++) {
			if (!cc->conns[i].c) {
				n = &cc->conns[i];
				goto fill;
			}
		}
		msg_set(err, errlen, "more than %d Redis Cluster nodes are connected", CCLUSTER_MAX_CONNS);
		return NULL;
	}
	n = &cc->conns[cc->nconns++];
fill:
	memset(n, 0, sizeof(*n));
	(void)snprintf(n->host, sizeof(n->host), "%s", host);
	n->port = port;
	node_target(cc, n, &nt);
	(void)redis_target_describe(&nt, n->desc, sizeof(n->desc));
	return n;
}

/* Connect n unless it is connected. */
static bool conn_up(struct ccluster *cc, struct ccluster_conn *n, bool *ret_permanent, char *err,
                    size_t errlen)
{
	struct redis_target nt;
	struct redis_conn rc;

	*ret_permanent = false;
	if (n->c)
		return true;
	node_target(cc, n, &nt);
	*ret_permanent =
	    redis_conn_connect(&rc, &nt, cc->timeout_ms, err, errlen) == REDIS_CONN_PERMANENT;
	n->c = rc.c;
	n->ssl = rc.ssl;
	return n->c != NULL;
}

struct ccluster_conn *ccluster_for_addr(struct ccluster *cc, const char *host, int port,
                                        bool *ret_permanent, char *err, size_t errlen)
{
	struct ccluster_conn *n = conn_entry(cc, host, port, err, errlen);

	*ret_permanent = false;
	if (!n || !conn_up(cc, n, ret_permanent, err, errlen))
		return NULL;
	return n;
}

struct ccluster_conn *ccluster_master(struct ccluster *cc, int i, bool *ret_permanent, char *err,
                                      size_t errlen)
{
	*ret_permanent = false;
	if (!cc->map || i < 0 || i >= cc->map->nnodes) {
		msg_set(err, errlen, "no Redis Cluster master %d in the slot map", i);
		return NULL;
	}
	return ccluster_for_addr(cc, cc->map->nodes[i].host, cc->map->nodes[i].port, ret_permanent, err,
	                         errlen);
}

struct ccluster_conn *ccluster_for_key(struct ccluster *cc, const char *key, size_t len,
                                       bool *ret_permanent, char *err, size_t errlen)
{
	unsigned slot = cluster_slots_key_slot(key, len);
	int i = cc->map ? cc->map->slot_node[slot] : -1;

	*ret_permanent = false;
	if (i < 0) {
		msg_set(err, errlen, "no Redis Cluster master serves hash slot %u (of key \"%.*s\")", slot,
		        len > 200 ? 200 : (int)len, key);
		return NULL;
	}
	return ccluster_master(cc, i, ret_permanent, err, errlen);
}

/*
 * Ask n for CLUSTER SLOTS. Returns 1 with the new map installed, 0 (err) to
 * try another node, -1 (err) when no node can help.
 */
static int slots_from(struct ccluster *cc, struct ccluster_conn *n, char *err, size_t errlen)
{
	const char *argv[2] = {"CLUSTER", "SLOTS"};
	struct cluster_slots_map *map;
	redisReply *r = redisCommandArgv(n->c, 2, argv, NULL);
	char why[256];

	if (!r) {
		msg_set(err, errlen, "CLUSTER SLOTS on %s failed: %s", n->desc,
		        n->c->errstr[0] ? n->c->errstr : "connection lost");
		ccluster_conn_close(n);
		return 0;
	}
	if (r->type == REDIS_REPLY_ERROR) {
		int rc = 0;

		if (strstr(r->str, "cluster support disabled")) {
			msg_set(err, errlen,
			        "%s is not a Redis Cluster node (cluster support disabled): use redis:// "
			        "for a single server",
			        n->desc);
			rc = -1;
		} else {
			msg_set(err, errlen, "Redis at %s refused CLUSTER SLOTS: %s", n->desc, r->str);
			rc = redis_conn_error_permanent(r->str) ? -1 : 0;
		}
		freeReplyObject(r);
		return rc;
	}
	map = cluster_slots_parse(r, n->host, why, sizeof(why));
	freeReplyObject(r);
	if (!map) {
		msg_set(err, errlen, "CLUSTER SLOTS from %s is unusable: %s", n->desc, why);
		return 0;
	}
	cluster_slots_map_free(cc->map);
	cc->map = map;
	return 1;
}

/*
 * The slot map from n: 1 taken, -1 a permanent failure (*ret_permanent set),
 * 0 failed (err says why; copied to first, when given, if it is the first).
 */
static int try_node(struct ccluster *cc, struct ccluster_conn *n, bool *ret_permanent, char *first,
                    size_t firstlen, char *err, size_t errlen)
{
	int rc = slots_from(cc, n, err, errlen);

	if (rc < 0)
		*ret_permanent = true;
	else if (rc == 0 && first && !first[0])
		(void)snprintf(first, firstlen, "%s", err);
	return rc;
}

bool ccluster_refresh(struct ccluster *cc, bool *ret_permanent, char *err, size_t errlen)
{
	char first[512] = "";

	*ret_permanent = false;
	/* A node already connected answers fastest and knows the current map. */
	for (int i = 0; i < cc->nconns; i++) {
		int rc;

		if (!cc->conns[i].c)
			continue;
		rc = try_node(cc, &cc->conns[i], ret_permanent, first, sizeof(first), err, errlen);
		if (rc)
			return rc > 0;
	}
	for (size_t k = 0; k < cc->t->nseeds; k++) {
		struct ccluster_conn *n = ccluster_for_addr(cc, cc->t->seeds[k].host, cc->t->seeds[k].port,
		                                            ret_permanent, err, errlen);
		int rc;

		if (!n) {
			if (*ret_permanent)
				return false;
			if (!first[0])
				(void)snprintf(first, sizeof(first), "%s", err);
			continue;
		}
		rc = try_node(cc, n, ret_permanent, first, sizeof(first), err, errlen);
		if (rc)
			return rc > 0;
	}
	/* Every seed failed: any other node known from an earlier map may still answer. */
	for (int i = 0; i < cc->nconns; i++) {
		struct ccluster_conn *n = &cc->conns[i];
		int rc;

		if (n->c || !conn_up(cc, n, ret_permanent, err, errlen)) {
			if (*ret_permanent)
				return false;
			continue;
		}
		rc = try_node(cc, n, ret_permanent, NULL, 0, err, errlen);
		if (rc)
			return rc > 0;
	}
	*ret_permanent = false;
	if (first[0])
		msg_set(err, errlen, "%s", first);
	else if (cc->t->nseeds == 0)
		msg_set(err, errlen, "no Redis Cluster seed given");
	return false;
}

redisReply *ccluster_command(struct ccluster *cc, const char *key, int argc, const char **argv,
                             char *err, size_t errlen)
{
	bool permanent, ask = false;
	struct ccluster_conn *n = ccluster_for_key(cc, key, strlen(key), &permanent, err, errlen);

	for (int hop = 0; n; hop++) {
		char host[CLUSTER_SLOTS_HOST_MAX + 1];
		unsigned slot;
		int port;
		redisReply *r;

		if (ask) {
			const char *asking[1] = {"ASKING"};

			r = redisCommandArgv(n->c, 1, asking, NULL);
			if (!r || r->type == REDIS_REPLY_ERROR) {
				msg_set(err, errlen, "ASKING on %s failed: %s", n->desc,
				        r                 ? r->str
				        : n->c->errstr[0] ? n->c->errstr
				                          : "connection lost");
				if (!r)
					ccluster_conn_close(n);
				freeReplyObject(r);
				return NULL;
			}
			freeReplyObject(r);
		}
		r = redisCommandArgv(n->c, argc, argv, NULL);
		if (!r) {
			msg_set(err, errlen, "%s on %s failed: %s", argv[0], n->desc,
			        n->c->errstr[0] ? n->c->errstr : "connection lost");
			ccluster_conn_close(n);
			return NULL;
		}
		if (r->type != REDIS_REPLY_ERROR ||
		    !cluster_slots_redirect(r->str, &ask, &slot, host, sizeof(host), &port))
			return r;
		if (hop == CCLUSTER_MAX_REDIRECTS) {
			msg_set(err, errlen, "%s on key \"%.200s\": still redirected after %d hops (%s)",
			        argv[0], key, CCLUSTER_MAX_REDIRECTS, r->str);
			freeReplyObject(r);
			return NULL;
		}
		freeReplyObject(r);
		if (!host[0]) /* "MOVED 12 :6379": the node that answered */
			(void)snprintf(host, sizeof(host), "%s", n->host);
		if (!ask && !ccluster_refresh(cc, &permanent, err, errlen))
			return NULL;
		n = ccluster_for_addr(cc, host, port, &permanent, err, errlen);
	}
	return NULL;
}
