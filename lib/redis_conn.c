/*
 * redis_conn.c - connecting to Redis, for the sink, outbox-consume and
 * status (see redis_conn.h).
 */
#include "redis_conn.h"

#include <errno.h>
#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

#include "msg.h"
#include "redis_sentinel.h"
#include "redis_tls.h"

/*
 * The permanent error replies, each with its fix. A reply matches a row
 * when it starts with prefix, or contains text. The first match wins.
 */
static const struct {
	const char *prefix;
	const char *text;
	const char *hint;
} permanent_replies[] = {
    {"NOPERM", NULL,
     "the Redis ACL user lacks a permission: grant what the reply names, see "
     "deploy/redis/users.acl"},
    {NULL, "without any password configured",
     "this Redis has no password: drop the password from --redis-url and "
     "--redis-password-file, or set requirepass on the server"},
    {NULL, "DB index is out of range",
     "this Redis has fewer databases: fix the database number of --redis-url (/N, or ?db=N "
     "for unix://), or raise \"databases\" in redis.conf"},
    {NULL, "wrong number of arguments for 'auth'",
     "a user name needs Redis 6 or newer: drop the user from --redis-url or upgrade Redis"},
    {"WRONGPASS", NULL, "check the user and password in --redis-url or --redis-password-file"},
    {"NOAUTH", NULL, "check the user and password in --redis-url or --redis-password-file"},
    {NULL, "invalid password",
     "check the user and password in --redis-url or --redis-password-file"},
    {NULL, "invalid username-password",
     "check the user and password in --redis-url or --redis-password-file"},
};

static int permanent_row(const char *msg)
{
	for (size_t i = 0; i < sizeof(permanent_replies) / sizeof(permanent_replies[0]); i++) {
		const char *p = permanent_replies[i].prefix;
		const char *t = permanent_replies[i].text;

		if ((p && strncmp(msg, p, strlen(p)) == 0) || (t && strstr(msg, t)))
			return (int)i;
	}
	return -1;
}

/* See redis_conn.h. */
bool redis_conn_error_permanent(const char *msg)
{
	return msg && permanent_row(msg) >= 0;
}

/* See redis_conn.h. */
const char *redis_conn_error_hint(const char *msg)
{
	int i = msg ? permanent_row(msg) : -1;

	return i < 0 ? "check the Redis settings" : permanent_replies[i].hint;
}

/* ---- I/O of a connected, non-blocking socket ---- */

static ssize_t plain_read(const struct redis_conn *rc, void *buf, size_t len, bool *want_other,
                          char *err, size_t errlen)
{
	ssize_t got = read(rc->c->fd, buf, len);

	*want_other = false;
	if (got < 0 && errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK) {
		int e = errno;

		msg_set(err, errlen, "could not read from Redis: %s", strerror(e));
		errno = e;
	}
	return got;
}

static ssize_t plain_write(const struct redis_conn *rc, const void *buf, size_t len,
                           bool *want_other, char *err, size_t errlen)
{
	ssize_t w = write(rc->c->fd, buf, len);

	*want_other = false;
	if (w == 0 || (w < 0 && errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK)) {
		int e = errno;

		msg_set(err, errlen, "could not send to Redis: %s", w == 0 ? "short write" : strerror(e));
		errno = w == 0 ? EIO : e;
		return -1;
	}
	return w;
}

/* A socket error under TLS (not a TLS error, which err names already), as plain sockets say it. */
static void tls_socket_error(const char *what, char *err, size_t errlen)
{
	int e = errno;

	if (e != EIO && e != EINTR && e != EAGAIN && e != EWOULDBLOCK)
		msg_set(err, errlen, "could not %s Redis: %s", what, strerror(e));
	errno = e;
}

static ssize_t tls_read(const struct redis_conn *rc, void *buf, size_t len, bool *want_other,
                        char *err, size_t errlen)
{
	ssize_t got = redis_tls_read(rc->ssl, buf, len, want_other, err, errlen);

	if (got < 0)
		tls_socket_error("read from", err, errlen);
	return got;
}

static ssize_t tls_write(const struct redis_conn *rc, const void *buf, size_t len, bool *want_other,
                         char *err, size_t errlen)
{
	ssize_t w = redis_tls_write(rc->ssl, buf, len, want_other, err, errlen);

	if (w < 0)
		tls_socket_error("send to", err, errlen);
	if (w == 0) {
		msg_set(err, errlen, "could not send to Redis: short write");
		errno = EIO;
		return -1;
	}
	return w;
}

static const struct redis_conn_ops plain_ops = {plain_read, plain_write, true};
static const struct redis_conn_ops tls_ops = {tls_read, tls_write, false};

/* ---- Connecting ---- */

void redis_conn_close(struct redis_conn *rc)
{
	if (rc->c)
		redisFree(rc->c);
	*rc = (struct redis_conn){0};
}

/*
 * One setup command (AUTH, SELECT) on a fresh connection: OK, or its failure
 * in err as "<what> failed: <reply>", with the fix when no retry helps.
 */
static enum redis_conn_status setup_step(struct redis_conn *rc, const char *what, int argc,
                                         const char **argv, char *err, size_t errlen)
{
	redisReply *r = redisCommandArgv(rc->c, argc, argv, NULL);
	enum redis_conn_status st = REDIS_CONN_OK;

	if (!r) {
		msg_set(err, errlen, "%s failed: %s", what,
		        rc->c->errstr[0] ? rc->c->errstr : "connection lost");
		return REDIS_CONN_RETRY;
	}
	if (r->type == REDIS_REPLY_ERROR) {
		if (redis_conn_error_permanent(r->str)) {
			msg_set(err, errlen, "%s failed: %s (%s)", what, r->str, redis_conn_error_hint(r->str));
			st = REDIS_CONN_PERMANENT;
		} else {
			msg_set(err, errlen, "%s failed: %s", what, r->str);
			st = REDIS_CONN_RETRY;
		}
	}
	freeReplyObject(r);
	return st;
}

/* See redis_conn.h. */
enum redis_conn_status redis_conn_open(struct redis_conn *rc, const struct redis_target *t,
                                       const char *host, int port, const char *unix_path,
                                       int timeout_ms, char *err, size_t errlen)
{
	struct timeval tv = {timeout_ms / 1000, (timeout_ms % 1000) * 1000};
	enum redis_conn_status st = REDIS_CONN_RETRY;

	*rc = (struct redis_conn){0};
	if (t->tls && !redis_tls_available()) {
		void *none;
		bool permanent;

		(void)redis_tls_start(NULL, t, host, &none, &permanent, err, errlen);
		return REDIS_CONN_PERMANENT;
	}
	if (unix_path)
		rc->c = redisConnectUnixWithTimeout(unix_path, tv);
	else
		rc->c = redisConnectWithTimeout(host, port, tv);
	if (!rc->c) {
		msg_set(err, errlen, "could not allocate a Redis context");
		return REDIS_CONN_RETRY;
	}
	if (rc->c->err) {
		msg_set(err, errlen, "could not connect to Redis: %s", rc->c->errstr);
		goto fail;
	}
	if (redisSetTimeout(rc->c, tv) != REDIS_OK ||
	    (!unix_path && redisEnableKeepAlive(rc->c) != REDIS_OK)) {
		msg_set(err, errlen, "could not set socket options: %s", rc->c->errstr);
		goto fail;
	}
	rc->ops = &plain_ops;
	if (t->tls) {
		char why[700];
		bool permanent = false;

		if (!redis_tls_start(rc->c, t, host, &rc->ssl, &permanent, why, sizeof(why))) {
			if (unix_path)
				msg_set(err, errlen, "TLS to %s: %s", unix_path, why);
			else
				msg_set(err, errlen, "TLS to %s:%d: %s", host, port, why);
			st = permanent ? REDIS_CONN_PERMANENT : REDIS_CONN_RETRY;
			goto fail;
		}
		rc->ops = &tls_ops;
	}
	if (t->password) {
		const char *argv[] = {"AUTH", t->user ? t->user : t->password, t->password};

		st = setup_step(rc, "AUTH", t->user ? 3 : 2, argv, err, errlen);
		if (st != REDIS_CONN_OK)
			goto fail;
	}
	if (t->db != 0) {
		char db[16], what[32];
		const char *argv[] = {"SELECT", db};

		(void)snprintf(db, sizeof(db), "%d", t->db);
		(void)snprintf(what, sizeof(what), "SELECT %d", t->db);
		st = setup_step(rc, what, 2, argv, err, errlen);
		if (st != REDIS_CONN_OK)
			goto fail;
	}
	return REDIS_CONN_OK;
fail:
	redis_conn_close(rc);
	return st == REDIS_CONN_OK ? REDIS_CONN_RETRY : st;
}

/* See redis_conn.h. */
enum redis_conn_status redis_conn_check_master(const struct redis_conn *rc,
                                               const struct redis_target *t, const char *addr,
                                               char *err, size_t errlen)
{
	redisReply *r = redisCommand(rc->c, "ROLE");
	enum redis_conn_status st = REDIS_CONN_RETRY;
	char role[64];

	if (redis_sentinel_parse_role(r, role, sizeof(role))) {
		freeReplyObject(r);
		return REDIS_CONN_OK;
	}
	if (!r)
		msg_set(err, errlen, "ROLE on %s failed: %s", addr,
		        rc->c->errstr[0] ? rc->c->errstr : "connection lost");
	else if (r->type == REDIS_REPLY_ERROR) {
		msg_set(err, errlen,
		        "the Sentinels named %s as master \"%s\", but ROLE failed: %s (grant +role "
		        "to this Redis user: see deploy/redis/users.acl)",
		        addr, t->master_name, r->str);
		if (redis_conn_error_permanent(r->str))
			st = REDIS_CONN_PERMANENT;
	} else {
		msg_set(err, errlen,
		        "the Sentinels named %s as master \"%s\", but its ROLE is \"%s\" (a failover "
		        "in progress?): asking the Sentinels again",
		        addr, t->master_name, role);
		redis_sentinel_distrust_first(t);
	}
	freeReplyObject(r);
	return st;
}

/* See redis_conn.h. */
enum redis_conn_status redis_conn_connect(struct redis_conn *rc, const struct redis_target *t,
                                          int timeout_ms, char *err, size_t errlen)
{
	char desc[300], why[900], addr[300];
	enum redis_conn_status st;

	*rc = (struct redis_conn){0};
	(void)redis_target_describe(t, desc, sizeof(desc));
	if (t->sentinel) {
		struct redis_target m;
		char *host = NULL;
		int port = 0;
		bool permanent = false;

		if (t->tls && !redis_tls_available()) {
			void *none;

			(void)redis_tls_start(NULL, t, t->host, &none, &permanent, err, errlen);
			return REDIS_CONN_PERMANENT;
		}
		if (!redis_sentinel_discover(t, timeout_ms, &host, &port, &permanent, err, errlen))
			return permanent ? REDIS_CONN_PERMANENT : REDIS_CONN_RETRY;
		redis_sentinel_master_target(t, host, port, &m);
		(void)snprintf(addr, sizeof(addr), "%s:%d", host, port);
		st = redis_conn_open(rc, &m, host, port, NULL, timeout_ms, why, sizeof(why));
		if (st != REDIS_CONN_OK)
			msg_set(err, errlen, "Redis at %s: %s", addr, why);
		else if ((st = redis_conn_check_master(rc, t, addr, err, errlen)) != REDIS_CONN_OK)
			redis_conn_close(rc);
		free(host);
		return st;
	}
	st = redis_conn_open(rc, t, t->host, t->port, t->unix_path, timeout_ms, why, sizeof(why));
	if (st != REDIS_CONN_OK)
		msg_set(err, errlen, "Redis at %s: %s", desc, why);
	return st;
}

/* See redis_conn.h. */
bool redis_conn_set_nonblocking(struct redis_conn *rc, char *err, size_t errlen)
{
	int flags = fcntl(rc->c->fd, F_GETFL);

	if (flags < 0 || fcntl(rc->c->fd, F_SETFL, flags | O_NONBLOCK) < 0) {
		msg_set(err, errlen, "could not make the socket non-blocking: %s", strerror(errno));
		return false;
	}
	rc->c->flags &= ~REDIS_BLOCK;
	return true;
}
