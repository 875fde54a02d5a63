/*
 * redis_conn.h - one way to reach a Redis server, for the relay's sink
 * (sink_setup.c, sink_redis.c), and outbox-consume, `outbox-relay status` and
 * verify (rclient.c): connect over TCP or a unix socket within a timeout,
 * the same timeout for every reply, TCP keepalive, TLS (redis_tls.h), AUTH
 * (user and password), SELECT; Sentinel discovery (redis_sentinel.h) with the
 * ROLE check; and the one rule that says which error replies no retry can
 * fix. Blocking I/O; nothing here logs.
 *
 * After connecting, a caller that drives the socket itself (the sink's
 * non-blocking pipeline) reads and writes through rc->ops, chosen at connect:
 * plain read(2)/write(2), or TLS records.
 */
#ifndef RELAY_REDIS_CONN_H
#define RELAY_REDIS_CONN_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "redis_url.h"

struct redisContext;
struct redisReply;
struct redis_conn;

/*
 * Reading and writing a connected, non-blocking socket. read and write act
 * as read(2)/write(2): > 0 bytes moved; 0 from read when the server closed
 * the connection; -1 with errno EINTR or EAGAIN when the call must be
 * repeated, where *want_other says it waits for the other direction (TLS: a
 * write that needs the socket readable, a read that needs it writable); any
 * other -1 is a failure, with one line in err. A write that returned EAGAIN
 * must be repeated with the same bytes.
 */
struct redis_conn_ops {
	ssize_t (*read)(const struct redis_conn *rc, void *buf, size_t len, bool *want_other, char *err,
	                size_t errlen);
	ssize_t (*write)(const struct redis_conn *rc, const void *buf, size_t len, bool *want_other,
	                 char *err, size_t errlen);
	/*
	 * A read shorter than asked means the socket is drained (plain sockets);
	 * false for TLS, which hands out one record per read: read until EAGAIN.
	 */
	bool short_read_drains;
};

/* One connection. All zero: not connected. */
struct redis_conn {
	struct redisContext *c;
	void *ssl; /* the TLS session (owned by c), NULL for a plain socket */
	const struct redis_conn_ops *ops;
};

enum redis_conn_status {
	REDIS_CONN_OK = 0,
	REDIS_CONN_RETRY,    /* transient: try again after a backoff */
	REDIS_CONN_PERMANENT /* no retry can help: the configuration must change */
};

/*
 * Is this error reply one that no retry can fix? Rejected credentials
 * (WRONGPASS, NOAUTH, "invalid password"), an ACL refusal (NOPERM), a
 * password sent to a server that has none ("without any password
 * configured"), AUTH with a user name on a server before Redis 6, and a
 * database index the server does not have (SELECT: "out of range"). The one
 * rule of the sink, outbox-consume, status and --check-config.
 */
bool redis_conn_error_permanent(const char *msg);

/*
 * For an error reply redis_conn_error_permanent() accepts: the fix, naming
 * the option to change ("check the user and password in --redis-url or
 * --redis-password-file", ...). Never NULL.
 */
const char *redis_conn_error_hint(const char *msg);

/*
 * Open a blocking connection to one server: host:port, or unix_path when not
 * NULL, with t's TLS settings (the certificate must name host unless
 * t->tls_server_name), user, password and database (t's own address is not
 * used). timeout_ms bounds the connect and every reply. Then TCP keepalive,
 * TLS, AUTH, SELECT. On success *rc is connected (close with
 * redis_conn_close). On failure *rc stays closed and err gets one line that
 * names no address and never the password ("AUTH failed: WRONGPASS ...
 * (check the user and password in --redis-url or --redis-password-file)").
 */
enum redis_conn_status redis_conn_open(struct redis_conn *rc, const struct redis_target *t,
                                       const char *host, int port, const char *unix_path,
                                       int timeout_ms, char *err, size_t errlen);

/*
 * Sentinel mode: is the server rc reached the master now (ROLE)? A server
 * that says otherwise (a stale answer during a failover) goes to the end of
 * the Sentinels' list (redis_sentinel_distrust_first) and is RETRY; an error
 * reply is judged by redis_conn_error_permanent(). addr names the server in
 * err.
 */
enum redis_conn_status redis_conn_check_master(const struct redis_conn *rc,
                                               const struct redis_target *t, const char *addr,
                                               char *err, size_t errlen);

/*
 * The whole target t for a request/reply client (outbox-consume, status, a
 * cluster node): redis-sentinel:// asks the Sentinels for the master,
 * connects to it and checks ROLE; anything else is redis_conn_open() at t's
 * own address. err starts with "Redis at <t described>: " (or names the
 * Sentinels' problem).
 */
enum redis_conn_status redis_conn_connect(struct redis_conn *rc, const struct redis_target *t,
                                          int timeout_ms, char *err, size_t errlen);

/* Switch the socket to non-blocking mode for the caller's own loop (rc->ops). */
bool redis_conn_set_nonblocking(struct redis_conn *rc, char *err, size_t errlen);

/* Close (a closed rc is a no-op); rc becomes all zero. */
void redis_conn_close(struct redis_conn *rc);

#endif
