/*
 * redis_sentinel.c - master discovery through Redis Sentinel. See
 * redis_sentinel.h.
 */
#include "redis_sentinel.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include <hiredis/hiredis.h>

#include "msg.h"
#include "redis_conn.h"
#include "redis_tls.h"

/* See redis_sentinel.h. */
enum sentinel_addr redis_sentinel_parse_addr(const redisReply *r, char *host, size_t hostlen,
                                             int *port)
{
	long v = 0;
	const redisReply *h, *p;

	if (!r)
		return SENTINEL_ADDR_BAD;
	if (r->type == REDIS_REPLY_NIL)
		return SENTINEL_ADDR_UNKNOWN;
	if (r->type == REDIS_REPLY_ERROR)
		return SENTINEL_ADDR_ERROR;
	if (r->type != REDIS_REPLY_ARRAY || r->elements != 2)
		return SENTINEL_ADDR_BAD;
	h = r->element[0];
	p = r->element[1];
	if (!h || !p || h->type != REDIS_REPLY_STRING || p->type != REDIS_REPLY_STRING)
		return SENTINEL_ADDR_BAD;
	if (h->len == 0 || h->len >= hostlen || memchr(h->str, '\0', h->len))
		return SENTINEL_ADDR_BAD;
	if (p->len == 0 || p->len > 5)
		return SENTINEL_ADDR_BAD;
	for (size_t i = 0; i < p->len; i++) {
		if (p->str[i] < '0' || p->str[i] > '9')
			return SENTINEL_ADDR_BAD;
		v = v * 10 + (p->str[i] - '0');
	}
	if (v < 1 || v > 65535)
		return SENTINEL_ADDR_BAD;
	memcpy(host, h->str, h->len);
	host[h->len] = '\0';
	*port = (int)v;
	return SENTINEL_ADDR_OK;
}

/* See redis_sentinel.h. */
bool redis_sentinel_parse_role(const redisReply *r, char *role, size_t rolelen)
{
	const redisReply *w;

	if (rolelen > 0)
		role[0] = '\0';
	if (!r)
		return false;
	if (r->type == REDIS_REPLY_ERROR) {
		(void)snprintf(role, rolelen, "%s", r->str);
		return false;
	}
	if (r->type != REDIS_REPLY_ARRAY || r->elements < 1)
		return false;
	w = r->element[0];
	if (!w || (w->type != REDIS_REPLY_STRING && w->type != REDIS_REPLY_STATUS))
		return false;
	(void)snprintf(role, rolelen, "%.*s", (int)(w->len < 32 ? w->len : 32), w->str);
	return w->len == 6 && memcmp(w->str, "master", 6) == 0;
}

/* See redis_sentinel.h. */
void redis_sentinel_master_target(const struct redis_target *t, char *host, int port,
                                  struct redis_target *ret)
{
	*ret = *t;
	ret->host = host;
	ret->port = port;
	ret->sentinel = false;
	ret->seeds = NULL;
	ret->nseeds = 0;
}

/* See redis_sentinel.h. */
void redis_sentinel_distrust_first(const struct redis_target *t)
{
	struct redis_seed first;

	if (t->nseeds < 2)
		return;
	first = t->seeds[0];
	memmove(&t->seeds[0], &t->seeds[1], (t->nseeds - 1) * sizeof(first));
	t->seeds[t->nseeds - 1] = first;
}

/* A refusal no retry fixes: the rule of redis_conn.h. */
static bool is_auth_refusal(const char *msg)
{
	return redis_conn_error_permanent(msg);
}

/* What one Sentinel said. */
enum ask_result { ASK_OK, ASK_DOWN, ASK_UNKNOWN, ASK_REFUSED, ASK_BAD };

/* Ask one Sentinel; why gets its problem when not ASK_OK. */
static enum ask_result ask_one(const struct redis_target *t, const struct redis_seed *sn,
                               int timeout_ms, char *host, size_t hostlen, int *port,
                               bool *tls_permanent, char *why, size_t whylen)
{
	struct timeval tv = {timeout_ms / 1000, (timeout_ms % 1000) * 1000};
	const char *argv[] = {"SENTINEL", "get-master-addr-by-name", t->master_name};
	enum ask_result res = ASK_BAD;
	redisContext *c = redisConnectWithTimeout(sn->host, sn->port, tv);
	redisReply *r;

	if (!c || c->err) {
		msg_set(why, whylen, "%s", c ? c->errstr : "out of memory");
		redisFree(c);
		return ASK_DOWN;
	}
	(void)redisSetTimeout(c, tv);
	if (t->tls) {
		void *ssl;
		char tw[600];

		if (!redis_tls_start(c, t, sn->host, &ssl, tls_permanent, tw, sizeof(tw))) {
			msg_set(why, whylen, "TLS: %s", tw);
			redisFree(c);
			return *tls_permanent ? ASK_REFUSED : ASK_DOWN;
		}
	}
	if (t->sentinel_password) {
		if (t->sentinel_user)
			r = redisCommand(c, "AUTH %s %s", t->sentinel_user, t->sentinel_password);
		else
			r = redisCommand(c, "AUTH %s", t->sentinel_password);
		if (!r) {
			msg_set(why, whylen, "AUTH: %s", c->errstr[0] ? c->errstr : "connection lost");
			redisFree(c);
			return ASK_DOWN;
		}
		if (r->type == REDIS_REPLY_ERROR) {
			msg_set(why, whylen,
			        "AUTH%s%s refused: %s (check --redis-sentinel-user and "
			        "--redis-sentinel-password or its file)",
			        t->sentinel_user ? " as " : "", t->sentinel_user ? t->sentinel_user : "",
			        r->str);
			res = is_auth_refusal(r->str) ? ASK_REFUSED : ASK_BAD;
			freeReplyObject(r);
			redisFree(c);
			return res;
		}
		freeReplyObject(r);
	}
	r = redisCommandArgv(c, 3, argv, NULL);
	if (!r) {
		msg_set(why, whylen, "%s", c->errstr[0] ? c->errstr : "connection lost");
		redisFree(c);
		return ASK_DOWN;
	}
	switch (redis_sentinel_parse_addr(r, host, hostlen, port)) {
	case SENTINEL_ADDR_OK:
		res = ASK_OK;
		break;
	case SENTINEL_ADDR_UNKNOWN:
		msg_set(why, whylen, "monitors no master named \"%s\"", t->master_name);
		res = ASK_UNKNOWN;
		break;
	case SENTINEL_ADDR_ERROR:
		if (is_auth_refusal(r->str)) {
			msg_set(why, whylen, "%s (%s)", r->str,
			        strncmp(r->str, "NOPERM", 6) == 0
			            ? "grant +sentinel|get-master-addr-by-name to the Sentinel user "
			              "(--redis-sentinel-user)"
			            : "give the Sentinels' password with --redis-sentinel-password "
			              "or --redis-sentinel-password-file");
			res = ASK_REFUSED;
		} else {
			msg_set(why, whylen, "%s (is this a Sentinel port?)", r->str);
		}
		break;
	case SENTINEL_ADDR_BAD:
		msg_set(why, whylen,
		        "unexpected reply to SENTINEL get-master-addr-by-name (is this a "
		        "Sentinel port?)");
		break;
	}
	freeReplyObject(r);
	redisFree(c);
	return res;
}

/* See redis_sentinel.h. */
bool redis_sentinel_discover(const struct redis_target *t, int timeout_ms, char **ret_host,
                             int *ret_port, bool *ret_permanent, char *err, size_t errlen)
{
	char host[REDIS_SENTINEL_HOST_MAX];
	size_t used = 0, unknown = 0;
	bool refused = false;
	int port = 0;

	*ret_permanent = false;
	*ret_host = NULL;
	if (timeout_ms <= 0 || timeout_ms > REDIS_SENTINEL_TIMEOUT_MS)
		timeout_ms = REDIS_SENTINEL_TIMEOUT_MS;
	msg_set(err, errlen, "no Sentinel gave the address of master \"%s\":", t->master_name);
	for (size_t i = 0; i < t->nseeds; i++) {
		struct redis_seed *sn = &t->seeds[i];
		bool tls_permanent = false;
		char why[700];
		enum ask_result res =
		    ask_one(t, sn, timeout_ms, host, sizeof(host), &port, &tls_permanent, why, sizeof(why));

		if (res == ASK_OK) {
			*ret_host = strdup(host);
			if (!*ret_host) {
				msg_set(err, errlen, "out of memory");
				return false;
			}
			*ret_port = port;
			if (i > 0) { /* the one that answered goes first next time */
				struct redis_seed first = *sn;

				memmove(&t->seeds[1], &t->seeds[0], i * sizeof(*sn));
				t->seeds[0] = first;
			}
			return true;
		}
		if (res == ASK_UNKNOWN)
			unknown++;
		if (res == ASK_REFUSED)
			refused = true;
		if (err && errlen > 0) {
			used = strlen(err);
			if (used < errlen)
				(void)snprintf(err + used, errlen - used, "%s %s%s%s:%d: %s", i == 0 ? "" : ";",
				               strchr(sn->host, ':') ? "[" : "", sn->host,
				               strchr(sn->host, ':') ? "]" : "", sn->port, why);
		}
	}
	*ret_permanent = refused || (unknown > 0 && unknown == t->nseeds);
	if (unknown > 0 && unknown == t->nseeds && err && errlen > 0) {
		used = strlen(err);
		if (used < errlen)
			(void)snprintf(err + used, errlen - used,
			               " (check the #master-name of --redis-url against the Sentinels' "
			               "\"sentinel monitor\" lines)");
	}
	return false;
}
