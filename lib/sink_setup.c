/*
 * sink_setup.c - connecting the sink: which servers (the one server, the
 * master the Sentinels name, or every master of a Redis Cluster with the
 * slot map from sink_cluster.c) and what runs on each fresh connection
 * before the poll loop takes it over.
 *
 * Each connection is made by redis_conn.c (TCP or unix socket, keepalive,
 * TLS, AUTH, SELECT), then, blocking and within --redis-timeout per step:
 * ROLE (Sentinel mode: still the master?), COMMAND INFO (the commands the
 * relay needs; WAITAOF and AOF with --wait-aof), INFO memory (the eviction
 * policy), CONFIG GET proto-max-bulk-len, FUNCTION LOAD (or SCRIPT LOAD on
 * servers before 7.0) and, on the first connect, GET of the slot record.
 * Each failure is SINK_RETRY or SINK_FATAL, with the one-line message.
 * sink_redis_connect() then routes every command not yet done.
 */
#include "sink_redis.h"

#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "redis_sentinel.h"
#include "redis_tls.h"
#include "sink_cluster.h"
#include "sink_int.h"
#include "sink_script.h"

/*
 * Run one setup command synchronously on n. Returns the reply (caller frees)
 * or NULL with errmsg set; *status says whether retrying can help.
 */
redisReply *sink_setup_command(struct sink_redis *s, struct node *n, enum sink_status *status,
                               const char *what, int argc, const char **argv)
{
	redisReply *r = redisCommandArgv(n->c, argc, argv, NULL);

	if (!r) {
		snprintf(s->errmsg, sizeof(s->errmsg), "%s failed: %s", what,
		         n->c->errstr[0] ? n->c->errstr : "connection lost");
		*status = SINK_RETRY;
		return NULL;
	}
	if (r->type == REDIS_REPLY_ERROR) {
		*status = redis_conn_error_permanent(r->str) ? SINK_FATAL : SINK_RETRY;
		if (sink_error_noperm(r->str)) {
			*status = SINK_FATAL;
			sink_noperm_message(s, what, NULL, r->str);
			return r;
		}
		snprintf(s->errmsg, sizeof(s->errmsg), "%s failed: %s%s%s%s", what, r->str,
		         *status == SINK_FATAL ? " (" : "",
		         *status == SINK_FATAL ? redis_conn_error_hint(r->str) : "",
		         *status == SINK_FATAL ? ")" : "");
		return r;
	}
	return r;
}

/* SCRIPT LOAD script on n; its SHA1 into sha (41 bytes). */
static enum sink_status script_load(struct sink_redis *s, struct node *n, const char *what,
                                    const char *script, char *sha)
{
	const char *argv[] = {"SCRIPT", "LOAD", script};
	enum sink_status st = SINK_OK;
	redisReply *r = sink_setup_command(s, n, &st, what, 3, argv);

	if (!r)
		return st;
	if (r->type != REDIS_REPLY_STRING || r->len != 40) {
		if (r->type != REDIS_REPLY_ERROR)
			snprintf(s->errmsg, sizeof(s->errmsg), "%s returned an unexpected reply", what);
		freeReplyObject(r);
		return st == SINK_OK ? SINK_RETRY : st;
	}
	memcpy(sha, r->str, 40);
	sha[40] = '\0';
	freeReplyObject(r);
	return SINK_OK;
}

static enum sink_status load_function(struct sink_redis *s, struct node *n)
{
	enum sink_status st = SINK_OK;
	redisReply *r;

	if (s->use_functions) {
		const char *argv[] = {"FUNCTION", "LOAD", "REPLACE", sink_script_library};

		r = sink_setup_command(s, n, &st, "FUNCTION LOAD", 4, argv);
		if (!r)
			return st;
		if (r->type != REDIS_REPLY_ERROR) {
			freeReplyObject(r);
			return SINK_OK;
		}
		/* Servers before 7.0 have no functions: fall back to scripts. */
		if (strstr(r->str, "unknown command") == NULL) {
			freeReplyObject(r);
			return st;
		}
		freeReplyObject(r);
		s->use_functions = false;
	}
	st = script_load(s, n, "SCRIPT LOAD", sink_script_eval_publish, s->sha);
	if (st == SINK_OK && s->trim)
		st = script_load(s, n, "SCRIPT LOAD (--trim acked)", sink_script_eval_trim, s->trim_sha);
	return st;
}

/*
 * Refuse servers without the commands the relay needs, with the version in
 * the message: COMMAND INFO answers nil for an unknown (or renamed) command.
 * With --wait-aof, also refuse servers without WAITAOF or without AOF.
 */
static enum sink_status check_server(struct sink_redis *s, struct node *n)
{
	const char *argv[] = {"COMMAND", "INFO", "XADD", "XGROUP", "EVALSHA", "WAITAOF"};
	bool want_aof = s->cf->wait_aof && strcmp(s->cf->wait_aof, "none") != 0;
	enum sink_status st = SINK_OK;
	redisReply *r = sink_setup_command(s, n, &st, "COMMAND INFO", want_aof ? 6 : 5, argv);
	size_t missing;
	char why[160];

	if (!r)
		return st;
	if (cluster_slots_command_info(r, (size_t)(want_aof ? 4 : 3), &missing, why, sizeof(why)) ==
	    CMDINFO_MISSING) {
		if (missing == 3) { /* WAITAOF */
			const char *iv[] = {"INFO", "server"};
			redisReply *info = sink_setup_command(s, n, &st, "INFO", 2, iv);
			char ver[32] = "";

			if (info && info->type == REDIS_REPLY_STRING)
				redis_info_field(info->str, "redis_version:", ver, sizeof(ver));
			freeReplyObject(info);
			snprintf(s->errmsg, sizeof(s->errmsg),
			         "--wait-aof needs WAITAOF, which Redis 7.2 introduced; this server "
			         "is %s: upgrade Redis or drop --wait-aof",
			         ver[0] ? ver : "older");
		} else {
			snprintf(s->errmsg, sizeof(s->errmsg),
			         "the server does not provide %s: outbox-relay needs Redis 5 or "
			         "newer with streams and scripting (7.0+ recommended for functions)",
			         argv[missing + 2]);
		}
		freeReplyObject(r);
		return SINK_FATAL;
	}
	/*
	 * Another error here or an unreadable answer is not a verdict: carry on;
	 * a missing command then fails where it is used. An ACL refusal is.
	 */
	freeReplyObject(r);
	if (st == SINK_FATAL)
		return st;
	if (want_aof) {
		const char *iv[] = {"INFO", "persistence"};
		redisReply *info = sink_setup_command(s, n, &st, "INFO", 2, iv);
		char on[8] = "";

		if (st == SINK_FATAL) {
			freeReplyObject(info);
			return st;
		}
		if (info && info->type == REDIS_REPLY_STRING)
			redis_info_field(info->str, "aof_enabled:", on, sizeof(on));
		freeReplyObject(info);
		if (strcmp(on, "0") == 0) {
			char a[300];

			snprintf(s->errmsg, sizeof(s->errmsg),
			         "--wait-aof needs AOF, but appendonly is off on %s: set appendonly "
			         "yes or drop --wait-aof",
			         sink_node_addr(n, a, sizeof(a)));
			return SINK_FATAL;
		}
	}
	return SINK_OK;
}

/*
 * proto-max-bulk-len into n->max_bulk when CONFIG GET is allowed. Many
 * deployments deny CONFIG (it shows requirepass): any error is no verdict.
 */
static enum sink_status read_bulk_limit(struct sink_redis *s, struct node *n)
{
	const char *argv[] = {"CONFIG", "GET", "proto-max-bulk-len"};
	redisReply *r = redisCommandArgv(n->c, 3, argv, NULL);

	n->max_bulk = 0;
	if (!r) {
		snprintf(s->errmsg, sizeof(s->errmsg), "CONFIG GET failed: %s",
		         n->c->errstr[0] ? n->c->errstr : "connection lost");
		return SINK_RETRY;
	}
	if (r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
	    r->element[1]->type == REDIS_REPLY_STRING) {
		char *end;
		unsigned long long v = strtoull(r->element[1]->str, &end, 10);

		if (*end == '\0' && end != r->element[1]->str)
			n->max_bulk = v;
	}
	freeReplyObject(r);
	return SINK_OK;
}

/*
 * maxmemory-policy: allkeys-* may evict the streams, the watermarks and the
 * dedup keys, so the relay refuses it unless --allow-eviction. INFO memory
 * needs no CONFIG permission. A server that does not answer is not refused.
 */
static enum sink_status check_memory(struct sink_redis *s, struct node *n)
{
	const char *iv[] = {"INFO", "memory"};
	enum sink_status st = SINK_OK;
	redisReply *info = sink_setup_command(s, n, &st, "INFO memory", 2, iv);
	char a[300];

	if (st == SINK_FATAL) {
		freeReplyObject(info);
		return st;
	}
	if (!info || info->type != REDIS_REPLY_STRING) {
		freeReplyObject(info);
		return SINK_OK;
	}
	redis_info_field(info->str, "maxmemory_policy:", s->policy, sizeof(s->policy));
	sink_read_memory(n, info->str);
	freeReplyObject(info);
	if (strncmp(s->policy, "allkeys-", 8) == 0 && !s->cf->allow_eviction) {
		snprintf(s->errmsg, sizeof(s->errmsg),
		         "maxmemory-policy %s (on %s) may evict stream entries, watermarks and "
		         "dedup keys (events lost or published twice); set maxmemory-policy "
		         "noeviction, or pass --allow-eviction to run anyway",
		         s->policy, sink_node_addr(n, a, sizeof(a)));
		return SINK_FATAL;
	}
	return SINK_OK;
}

/*
 * Sentinel mode: the address a Sentinel gave must be the master now (it
 * may be a demoted one, or the failover may not have finished): ROLE.
 * Anything else is retried, and the retry asks the Sentinels again.
 */
static enum sink_status check_role(struct sink_redis *s, struct node *n)
{
	struct redis_conn rc = sink_node_conn(n);
	char a[300];

	switch (redis_conn_check_master(&rc, &s->cf->redis, sink_node_addr(n, a, sizeof(a)), s->errmsg,
	                                sizeof(s->errmsg))) {
	case REDIS_CONN_OK:
		return SINK_OK;
	case REDIS_CONN_PERMANENT:
		return SINK_FATAL;
	case REDIS_CONN_RETRY:
		break;
	}
	s->errkind = SINK_ERR_READONLY;
	return SINK_RETRY;
}

static int add_node(struct sink_redis *s, const char *host, int port, const char *unix_path);

/*
 * Sentinel mode: ask the Sentinels where the master is and make it the one
 * node. A permanent refusal (credentials, an unknown master name) is fatal
 * only before the first success: a running relay keeps retrying.
 */
static enum sink_status discover_master(struct sink_redis *s)
{
	const struct redis_target *t = &s->cf->redis;
	char *host = NULL;
	int port = 0;
	bool permanent = false;

	if (!redis_sentinel_discover(t, s->cf->redis_timeout_ms, &host, &port, &permanent, s->errmsg,
	                             sizeof(s->errmsg)))
		return permanent && !s->sentinel_found ? SINK_FATAL : SINK_RETRY;
	s->sentinel_found = true;
	if (s->nnodes == 1 && s->nodes[0].port == port && strcmp(s->nodes[0].host, host) == 0) {
		free(host);
		return SINK_OK;
	}
	for (int i = 0; i < s->nnodes; i++)
		sink_node_finish(&s->nodes[i]);
	s->nnodes = 0;
	if (add_node(s, host, port, NULL) < 0) {
		free(host);
		snprintf(s->errmsg, sizeof(s->errmsg), "out of memory");
		return SINK_RETRY;
	}
	free(host);
	return SINK_OK;
}

/*
 * Connect n (redis_conn.h: keepalive, TLS, AUTH, SELECT) and prepare it:
 * checks, function library, the slot record, non-blocking.
 */
static enum sink_status node_connect(struct sink_redis *s, struct node *n)
{
	const struct redis_target *t = &s->cf->redis;
	enum sink_status st = SINK_OK;
	struct redis_conn rc;
	enum redis_conn_status cst;
	char why[700], a[300];

	sink_node_close(n);
	cst = redis_conn_open(&rc, t, n->host, n->port, n->unix_path, s->cf->redis_timeout_ms, why,
	                      sizeof(why));
	if (cst != REDIS_CONN_OK) {
		/* A cluster node or the master a Sentinel named: say which server. */
		if (t->cluster || t->sentinel)
			snprintf(s->errmsg, sizeof(s->errmsg), "%s: %s", sink_node_addr(n, a, sizeof(a)), why);
		else
			snprintf(s->errmsg, sizeof(s->errmsg), "%s", why);
		return cst == REDIS_CONN_PERMANENT ? SINK_FATAL : SINK_RETRY;
	}
	n->c = rc.c;
	n->ssl = rc.ssl;
	n->io = rc.ops;
	if (t->sentinel) {
		st = check_role(s, n);
		if (st != SINK_OK)
			goto fail;
	}
	st = check_server(s, n);
	if (st != SINK_OK)
		goto fail;
	st = check_memory(s, n);
	if (st != SINK_OK)
		goto fail;
	st = read_bulk_limit(s, n);
	if (st != SINK_OK)
		goto fail;
	st = load_function(s, n);
	if (st != SINK_OK)
		goto fail;
	st = sink_record_read_at_connect(s, n);
	if (st != SINK_OK)
		goto fail;

	/* From here on the relay's poll loop drives the socket. */
	rc = sink_node_conn(n);
	if (!redis_conn_set_nonblocking(&rc, s->errmsg, sizeof(s->errmsg))) {
		st = SINK_RETRY;
		goto fail;
	}
	n->wait_since_us = time_mono_us();
	return SINK_OK;
fail:
	if (st == SINK_OK)
		st = SINK_RETRY;
	sink_node_close(n);
	return st;
}

static int add_node(struct sink_redis *s, const char *host, int port, const char *unix_path)
{
	struct node *n;

	for (int i = 0; i < s->nnodes; i++) {
		n = &s->nodes[i];
		if (unix_path ? (n->unix_path && strcmp(n->unix_path, unix_path) == 0)
		              : (n->host && strcmp(n->host, host) == 0 && n->port == port))
			return i;
	}
	if (s->nnodes == MAX_NODES)
		return -1;
	n = &s->nodes[s->nnodes];
	memset(n, 0, sizeof(*n));
	n->host = host ? strdup(host) : NULL;
	n->unix_path = unix_path ? strdup(unix_path) : NULL;
	n->port = port;
	if ((host && !n->host) || (unix_path && !n->unix_path)) {
		sink_node_finish(n);
		return -1;
	}
	return s->nnodes++;
}

/*
 * Take a checked slot map (see cluster_slots_parse) as the node list and slot
 * map. On failure (out of memory) the node list is left empty.
 */
static bool use_map(struct sink_redis *s, const struct cluster_slots_map *map, char *err,
                    size_t errlen)
{
	int8_t idx[CLUSTER_SLOTS_MAX_NODES];

	for (int i = 0; i < map->nnodes; i++) {
		int k = add_node(s, map->nodes[i].host, map->nodes[i].port, NULL);

		if (k < 0) {
			for (int j = 0; j < s->nnodes; j++)
				sink_node_finish(&s->nodes[j]);
			s->nnodes = 0;
			snprintf(err, errlen, "out of memory");
			return false;
		}
		idx[i] = (int8_t)k;
	}
	for (int sl = 0; sl < CLUSTER_SLOTS; sl++)
		s->slot_node[sl] = map->slot_node[sl] < 0 ? -1 : idx[map->slot_node[sl]];
	return true;
}

/*
 * Rebuild the node list and slot map from the seeds' CLUSTER SLOTS
 * (sink_cluster.c).
 */
static enum sink_status discover_cluster(struct sink_redis *s)
{
	struct cluster_slots_map *map = NULL;
	enum redis_conn_status st;
	bool ok;

	for (int i = 0; i < s->nnodes; i++)
		sink_node_finish(&s->nodes[i]);
	s->nnodes = 0;
	memset(s->slot_node, -1, CLUSTER_SLOTS);
	st = sink_cluster_discover(&s->cf->redis, s->cf->redis_timeout_ms, &map, s->errmsg,
	                           sizeof(s->errmsg));
	if (st != REDIS_CONN_OK)
		return st == REDIS_CONN_PERMANENT ? SINK_FATAL : SINK_RETRY;
	ok = use_map(s, map, s->errmsg, sizeof(s->errmsg));
	cluster_slots_map_free(map);
	return ok ? SINK_OK : SINK_RETRY;
}

enum sink_status sink_redis_connect(struct sink_redis *s)
{
	const struct redis_target *t = &s->cf->redis;
	bool first = s->stats.reconnects == 0 && s->q.acked_seq == 0 && s->q.inflight_events == 0;
	enum sink_status st;

	sink_redis_disconnect(s);
	s->errmsg[0] = '\0';
	if (t->tls && !redis_tls_available()) {
		void *none;
		bool permanent;

		(void)redis_tls_start(NULL, t, t->host, &none, &permanent, s->errmsg, sizeof(s->errmsg));
		return SINK_FATAL;
	}
	if (t->cluster) {
		st = discover_cluster(s);
		if (st != SINK_OK)
			return st;
	} else if (t->sentinel) {
		st = discover_master(s);
		if (st != SINK_OK)
			return st;
	} else if (s->nnodes == 0 && add_node(s, t->host, t->port, t->unix_path) < 0) {
		snprintf(s->errmsg, sizeof(s->errmsg), "out of memory");
		return SINK_RETRY;
	}
	for (int i = 0; i < s->nnodes; i++) {
		st = node_connect(s, &s->nodes[i]);
		if (st != SINK_OK) {
			sink_redis_disconnect(s);
			return st;
		}
	}
	sink_strset_clear(&s->streams); /* groups are created again on this connection set */
	for (size_t i = 0; i < s->q.q.len; i++) {
		struct sq_ent *e = ring_at(&s->q.q, i);

		if (e->state == SQ_QUEUED && !sink_route(s, e)) {
			sink_redis_disconnect(s);
			return SINK_RETRY;
		}
	}
	/* The smallest proto-max-bulk-len of the connected nodes, once per connect
	 * (the relay asks for it with every event). */
	s->max_value = 0;
	for (int i = 0; i < s->nnodes; i++)
		if (s->nodes[i].c && s->nodes[i].max_bulk &&
		    (!s->max_value || s->nodes[i].max_bulk < s->max_value))
			s->max_value = s->nodes[i].max_bulk;
	s->connected = true;
	if (!first)
		s->stats.reconnects++;
	return SINK_OK;
}

const char *sink_redis_sentinel_master(const struct sink_redis *s, char *buf, size_t len)
{
	if (!s->cf->redis.sentinel || s->nnodes != 1)
		return NULL;
	return sink_node_addr(&s->nodes[0], buf, len);
}

const char *sink_redis_maxmemory_policy(const struct sink_redis *s)
{
	return s->policy;
}
