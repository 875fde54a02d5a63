/*
 * consumer_metrics.h - outbox-consume's Prometheus metrics and its /metrics
 * and /healthz endpoint (--http-addr), served by http_server.h on its own
 * thread.
 *
 * The consumer's loop counts events per stream, times the handler, and
 * every few seconds hands over a fresh table of lag per stream and group
 * that it read from Redis itself (the HTTP thread never talks to Redis).
 * Every family is prefixed outbox_consume_ and labelled group (the
 * consumer's own) or stream and group. After CONSUMER_METRICS_MAX_STREAMS
 * streams, further ones are counted under stream="_other".
 */
#ifndef RELAY_CONSUMER_METRICS_H
#define RELAY_CONSUMER_METRICS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CONSUMER_METRICS_MAX_STREAMS 256
/* Rows of the lag table kept per refresh; more (stream, group) pairs are left out. */
#define CONSUMER_METRICS_MAX_LAG_ROWS 1024

/* Counted outcomes of an event, per stream. */
enum consumer_event {
	CONSUMER_EV_HANDLED = 0, /* printed (JSON lines) or the handler succeeded */
	CONSUMER_EV_FAILED,      /* the handler failed (retry, dead, exit status, bad answer) */
	CONSUMER_EV_RETRIED,     /* failed and left pending, to be delivered again */
	CONSUMER_EV_POISONED,    /* moved to the poison stream and acknowledged */
	CONSUMER_EV_N
};

struct consumer_metrics;

/* Zeroed metrics for consumer group `group` (copied). NULL on OOM. */
struct consumer_metrics *consumer_metrics_create(const char *group);
/* Free m; its server must be stopped first. NULL is a no-op. */
void consumer_metrics_destroy(struct consumer_metrics *m);

/* Add n to ev of stream (n 0 makes the stream's series appear at 0). */
void consumer_metrics_count(struct consumer_metrics *m, const char *stream, enum consumer_event ev,
                            uint64_t n);
/* One handler run (one delivery to --exec or --handler) that took micros. */
void consumer_metrics_observe_handler(struct consumer_metrics *m, int64_t micros);
/* The loop turned (for /healthz); connected: its Redis connection is up. */
void consumer_metrics_heartbeat(struct consumer_metrics *m, bool connected);

/*
 * The lag table, replaced whole: lag_begin(), one lag_add() per stream and
 * group, lag_commit() publishes it to the HTTP thread. lag < 0: Redis did
 * not say (before 7.0, or after deletions); oldest_age_ms < 0: none pending.
 */
void consumer_metrics_lag_begin(struct consumer_metrics *m);
void consumer_metrics_lag_add(struct consumer_metrics *m, const char *stream, const char *group,
                              int64_t lag, uint64_t pending, int64_t oldest_age_ms);
void consumer_metrics_lag_commit(struct consumer_metrics *m);

struct redisReply;
/*
 * The one reading of a group's oldest pending entry, for this module and
 * `outbox-relay status`: from an XPENDING summary reply ([count, smallest
 * id, greatest id, consumers]) and a TIME reply of the same server, the
 * pending count into *pending and the age of the smallest id (its
 * millisecond part against TIME) in ms; -1 when none is pending, -2 when a
 * reply is not what those commands answer.
 */
int64_t consumer_metrics_oldest_pending_ms(const struct redisReply *xpending,
                                           const struct redisReply *time, uint64_t *pending);

/* The Prometheus text exposition (malloc'd, caller frees; NULL on OOM). Any thread. */
char *consumer_metrics_render(struct consumer_metrics *m);

struct consumer_metrics_server;
/*
 * Serve GET /metrics and /healthz on addr (http_server.h). /healthz: 200
 * while connected to Redis and the loop turned within stuck_after_ms, else
 * 503 with the reason. NULL with a one-line err on a bad address, a port in
 * use or OOM.
 */
struct consumer_metrics_server *consumer_metrics_serve(struct consumer_metrics *m, const char *addr,
                                                       int64_t stuck_after_ms, char *err,
                                                       size_t errlen);
void consumer_metrics_server_stop(struct consumer_metrics_server *s); /* NULL is a no-op */
int consumer_metrics_server_port(const struct consumer_metrics_server *s);

#endif
