/*
 * sink_cluster.c - the slot map of a Redis Cluster from its seeds, for the
 * relay's sink (see sink_cluster.h).
 */
#include "sink_cluster.h"

#include <hiredis/hiredis.h>
#include <stdio.h>
#include <string.h>

#include "msg.h"

/*
 * CLUSTER SLOTS on one seed that answered. OK with *ret_map, or err and RETRY
 * (try the next seed) or PERMANENT. An empty (or nil) host in the reply means
 * "the address you reached me at": cluster_slots_parse() puts the seed's.
 */
static enum redis_conn_status ask_seed(const struct redis_conn *rc, const struct redis_seed *seed,
                                       struct cluster_slots_map **ret_map, char *err, size_t errlen)
{
	redisReply *r = redisCommand(rc->c, "CLUSTER SLOTS");
	enum redis_conn_status st = REDIS_CONN_RETRY;
	char why[256];

	if (!r) {
		msg_set(err, errlen, "cluster seed %s:%d: CLUSTER SLOTS failed: %s", seed->host, seed->port,
		        rc->c->errstr[0] ? rc->c->errstr : "connection lost");
		return REDIS_CONN_RETRY;
	}
	if (r->type == REDIS_REPLY_ARRAY) {
		*ret_map = cluster_slots_parse(r, seed->host, why, sizeof(why));
		if (*ret_map)
			st = REDIS_CONN_OK;
		else
			msg_set(err, errlen, "CLUSTER SLOTS from %s:%d is unusable: %s", seed->host, seed->port,
			        why);
	} else if (r->type != REDIS_REPLY_ERROR) {
		msg_set(err, errlen, "CLUSTER SLOTS from %s:%d is unusable: not an array", seed->host,
		        seed->port);
	} else if (strstr(r->str, "cluster support disabled")) {
		msg_set(err, errlen,
		        "%s:%d is not a Redis Cluster node (cluster support disabled): use redis:// for "
		        "a single server",
		        seed->host, seed->port);
	} else if (strncmp(r->str, "NOPERM", 6) == 0) {
		msg_set(err, errlen,
		        "CLUSTER SLOTS refused by the Redis ACL (%s): grant +cluster|slots to the "
		        "relay's Redis user (see deploy/redis/users.acl)",
		        r->str);
		st = REDIS_CONN_PERMANENT;
	} else if (redis_conn_error_permanent(r->str)) {
		msg_set(err, errlen, "CLUSTER SLOTS failed: %s (%s)", r->str,
		        redis_conn_error_hint(r->str));
		st = REDIS_CONN_PERMANENT;
	} else {
		msg_set(err, errlen, "CLUSTER SLOTS failed: %s", r->str);
	}
	freeReplyObject(r);
	return st;
}

/* See sink_cluster.h. */
enum redis_conn_status sink_cluster_discover(const struct redis_target *t, int timeout_ms,
                                             struct cluster_slots_map **ret_map, char *err,
                                             size_t errlen)
{
	enum redis_conn_status st = REDIS_CONN_RETRY;

	*ret_map = NULL;
	msg_set(err, errlen, "no cluster seed to ask");
	for (size_t k = 0; k < t->nseeds; k++) {
		const struct redis_seed *seed = &t->seeds[k];
		struct redis_conn rc;
		char why[900];

		st = redis_conn_open(&rc, t, seed->host, seed->port, NULL, timeout_ms, why, sizeof(why));
		if (st != REDIS_CONN_OK) {
			msg_set(err, errlen, "cluster seed %s:%d: %s", seed->host, seed->port, why);
			if (st == REDIS_CONN_PERMANENT)
				return st;
			continue;
		}
		st = ask_seed(&rc, seed, ret_map, err, errlen);
		redis_conn_close(&rc);
		if (st != REDIS_CONN_RETRY)
			return st;
	}
	return REDIS_CONN_RETRY;
}
