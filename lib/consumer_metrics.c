/*
 * consumer_metrics.c - outbox-consume's metrics (consumer_metrics.h) and its
 * /metrics and /healthz routes on http_server.c.
 *
 * One mutex guards the stream table (names and per-stream counters) and the
 * lag table: the consumer's loop takes it once per event and once per lag
 * refresh, the HTTP thread while it renders. Neither ever waits on anything
 * else while holding it. The handler histogram, the heartbeat and the
 * connection flag are relaxed atomics.
 *
 * No logging.
 */
#include "consumer_metrics.h"

#include "buf.h"
#include "http_server.h"
#include "lsn.h"
#include "msg.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

/* Handler duration buckets: upper bounds in microseconds, and as le="" label text. */
#define NBUCKETS 15
static const int64_t bucket_us[NBUCKETS] = {
    1000,   2500,    5000,    10000,   25000,    50000,    100000,   250000,
    500000, 1000000, 2500000, 5000000, 10000000, 30000000, 60000000,
};
static const char *const bucket_le[NBUCKETS] = {
    "0.001", "0.0025", "0.005", "0.01", "0.025", "0.05", "0.1", "0.25",
    "0.5",   "1",      "2.5",   "5",    "10",    "30",   "60",
};

static const char *const event_family[CONSUMER_EV_N] = {
    [CONSUMER_EV_HANDLED] = "outbox_consume_events_handled_total",
    [CONSUMER_EV_FAILED] = "outbox_consume_events_failed_total",
    [CONSUMER_EV_RETRIED] = "outbox_consume_events_retried_total",
    [CONSUMER_EV_POISONED] = "outbox_consume_events_poisoned_total",
};
static const char *const event_help[CONSUMER_EV_N] = {
    [CONSUMER_EV_HANDLED] = "Events printed, or that the handler (--exec, --handler) succeeded on.",
    [CONSUMER_EV_FAILED] = "Deliveries to the handler that failed (retry, dead, an exit status, a "
                           "bad answer).",
    [CONSUMER_EV_RETRIED] = "Failed events left pending, to be delivered again.",
    [CONSUMER_EV_POISONED] = "Events moved to the poison stream and acknowledged "
                             "(--max-deliveries, or a handler answering dead).",
};

struct lag_row {
	char *stream, *group;
	int64_t lag; /* < 0: unknown */
	uint64_t pending;
	int64_t oldest_age_ms; /* < 0: none pending */
};

struct lag_table {
	struct lag_row *rows;
	size_t n, cap;
};

struct consumer_metrics {
	char *group;
	pthread_mutex_t lock;
	/* Under lock: stream names (count of them, then "_other" at [MAX]) and their counters. */
	char *names[CONSUMER_METRICS_MAX_STREAMS];
	size_t nnames;
	uint64_t counts[CONSUMER_METRICS_MAX_STREAMS + 1][CONSUMER_EV_N];
	struct lag_table lag;      /* under lock: the one the HTTP thread renders */
	struct lag_table building; /* the loop's only, until lag_commit() */
	bool lag_known;            /* under lock: a refresh was committed */

	_Atomic uint64_t bucket[NBUCKETS + 1]; /* non-cumulative; last = +Inf */
	_Atomic uint64_t sum_us;
	_Atomic int64_t heartbeat_mono_us; /* 0: the loop never turned */
	_Atomic bool connected;
};

struct consumer_metrics_server {
	struct http_server *http;
	struct consumer_metrics *m;
	int64_t stuck_after_us;
	int64_t started_mono_us;
};

static void lag_clear(struct lag_table *t)
{
	for (size_t i = 0; i < t->n; i++) {
		free(t->rows[i].stream);
		free(t->rows[i].group);
	}
	t->n = 0;
}

/* See consumer_metrics.h. */
struct consumer_metrics *consumer_metrics_create(const char *group)
{
	struct consumer_metrics *m = calloc(1, sizeof(*m));

	if (!m)
		return NULL;
	m->group = strdup(group ? group : "");
	if (!m->group || pthread_mutex_init(&m->lock, NULL) != 0) {
		free(m->group);
		free(m);
		return NULL;
	}
	return m;
}

/* See consumer_metrics.h. */
void consumer_metrics_destroy(struct consumer_metrics *m)
{
	if (!m)
		return;
	for (size_t i = 0; i < m->nnames; i++)
		free(m->names[i]);
	lag_clear(&m->lag);
	lag_clear(&m->building);
	free(m->lag.rows);
	free(m->building.rows);
	(void)pthread_mutex_destroy(&m->lock);
	free(m->group);
	free(m);
}

/* Index of stream's counters, added when new; CONSUMER_METRICS_MAX_STREAMS when full (lock held).
 */
static size_t stream_index(struct consumer_metrics *m, const char *stream)
{
	size_t i;

	for (i = 0; i < m->nnames; i++)
		if (strcmp(m->names[i], stream) == 0)
			return i;
	if (m->nnames == CONSUMER_METRICS_MAX_STREAMS)
		return CONSUMER_METRICS_MAX_STREAMS;
	m->names[i] = strdup(stream);
	if (!m->names[i])
		return CONSUMER_METRICS_MAX_STREAMS;
	m->nnames++;
	return i;
}

/* See consumer_metrics.h. */
void consumer_metrics_count(struct consumer_metrics *m, const char *stream, enum consumer_event ev,
                            uint64_t n)
{
	if (!m || (unsigned)ev >= CONSUMER_EV_N)
		return;
	(void)pthread_mutex_lock(&m->lock);
	m->counts[stream_index(m, stream)][ev] += n;
	(void)pthread_mutex_unlock(&m->lock);
}

/* See consumer_metrics.h. A negative duration (a clock step) counts as 0. */
void consumer_metrics_observe_handler(struct consumer_metrics *m, int64_t micros)
{
	size_t i = 0;

	if (!m)
		return;
	if (micros < 0)
		micros = 0;
	while (i < NBUCKETS && micros > bucket_us[i])
		i++;
	atomic_fetch_add_explicit(&m->bucket[i], 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&m->sum_us, (uint64_t)micros, memory_order_relaxed);
}

/* See consumer_metrics.h. */
void consumer_metrics_heartbeat(struct consumer_metrics *m, bool connected)
{
	if (!m)
		return;
	atomic_store_explicit(&m->heartbeat_mono_us, time_mono_us(), memory_order_relaxed);
	atomic_store_explicit(&m->connected, connected, memory_order_relaxed);
}

/* See consumer_metrics.h. */
void consumer_metrics_lag_begin(struct consumer_metrics *m)
{
	if (m)
		lag_clear(&m->building);
}

/* See consumer_metrics.h. A row that does not fit (the cap, or OOM) is left out. */
void consumer_metrics_lag_add(struct consumer_metrics *m, const char *stream, const char *group,
                              int64_t lag, uint64_t pending, int64_t oldest_age_ms)
{
	struct lag_table *t;
	struct lag_row *r;

	if (!m)
		return;
	t = &m->building;
	if (t->n == CONSUMER_METRICS_MAX_LAG_ROWS)
		return;
	if (t->n == t->cap) {
		size_t cap = t->cap ? 2 * t->cap : 16;
		struct lag_row *grown = realloc(t->rows, cap * sizeof(*grown));

		if (!grown)
			return;
		t->rows = grown;
		t->cap = cap;
	}
	r = &t->rows[t->n];
	r->stream = strdup(stream);
	r->group = strdup(group);
	if (!r->stream || !r->group) {
		free(r->stream);
		free(r->group);
		return;
	}
	r->lag = lag;
	r->pending = pending;
	r->oldest_age_ms = oldest_age_ms;
	t->n++;
}

/* See consumer_metrics.h: the built table and the served one swap places. */
void consumer_metrics_lag_commit(struct consumer_metrics *m)
{
	struct lag_table old;

	if (!m)
		return;
	(void)pthread_mutex_lock(&m->lock);
	old = m->lag;
	m->lag = m->building;
	m->building = old;
	m->lag_known = true;
	(void)pthread_mutex_unlock(&m->lock);
	lag_clear(&m->building);
}

/* A decimal number at s[0..len) up to a stop byte or the end; false when there is none. */
static bool leading_u64(const char *s, size_t len, char stop, uint64_t *v)
{
	size_t i = 0;

	*v = 0;
	for (; i < len && s[i] != stop; i++) {
		if (s[i] < '0' || s[i] > '9' || *v > (UINT64_MAX - 9) / 10)
			return false;
		*v = *v * 10 + (uint64_t)(s[i] - '0');
	}
	return i > 0;
}

static bool is_text(const redisReply *r)
{
	return r && (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS);
}

/* See consumer_metrics.h. */
int64_t consumer_metrics_oldest_pending_ms(const redisReply *xpending, const redisReply *time,
                                           uint64_t *pending)
{
	uint64_t id_ms, sec, usec, now_ms;
	const redisReply *n;

	*pending = 0;
	if (!xpending || xpending->type != REDIS_REPLY_ARRAY || xpending->elements < 2)
		return -2;
	n = xpending->element[0];
	if (n->type != REDIS_REPLY_INTEGER || n->integer < 0)
		return -2;
	*pending = (uint64_t)n->integer;
	if (*pending == 0)
		return -1;
	if (!is_text(xpending->element[1]) ||
	    !leading_u64(xpending->element[1]->str, xpending->element[1]->len, '-', &id_ms))
		return -2;
	if (!time || time->type != REDIS_REPLY_ARRAY || time->elements != 2 ||
	    !is_text(time->element[0]) || !is_text(time->element[1]) ||
	    !leading_u64(time->element[0]->str, time->element[0]->len, '\0', &sec) ||
	    !leading_u64(time->element[1]->str, time->element[1]->len, '\0', &usec) ||
	    sec > UINT64_MAX / 1000 - 1)
		return -2;
	now_ms = sec * 1000 + usec / 1000;
	if (now_ms <= id_ms || now_ms - id_ms > INT64_MAX)
		return 0; /* an id from the future (a clock step, or an explicit id) */
	return (int64_t)(now_ms - id_ms);
}

/* ---- rendering ---- */

/* Append s as a label value: backslash, double quote and newline escaped. */
static void label_value(struct buf *o, const char *s)
{
	for (; *s; s++) {
		if (*s == '\\' || *s == '"')
			buf_putc(o, '\\');
		if (*s == '\n')
			buf_puts(o, "\\n");
		else
			buf_putc(o, *s);
	}
}

static void family(struct buf *o, const char *name, const char *type, const char *help)
{
	buf_printf(o, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* name{stream="...",group="..."} (stream NULL: group only), then the value text. */
static void sample(struct buf *o, const char *name, const char *stream, const char *group,
                   const char *value)
{
	buf_puts(o, name);
	buf_putc(o, '{');
	if (stream) {
		buf_puts(o, "stream=\"");
		label_value(o, stream);
		buf_puts(o, "\",");
	}
	buf_puts(o, "group=\"");
	label_value(o, group);
	buf_printf(o, "\"} %s\n", value);
}

static void sample_u64(struct buf *o, const char *name, const char *stream, const char *group,
                       uint64_t v)
{
	char s[24];

	(void)snprintf(s, sizeof(s), "%" PRIu64, v);
	sample(o, name, stream, group, s);
}

/* Microseconds or milliseconds as seconds with a fixed point, independent of the locale. */
static void sample_secs(struct buf *o, const char *name, const char *stream, const char *group,
                        uint64_t units, uint64_t per_second, int digits)
{
	char s[48];

	(void)snprintf(s, sizeof(s), "%" PRIu64 ".%0*" PRIu64, units / per_second, digits,
	               units % per_second);
	sample(o, name, stream, group, s);
}

static void render_events(struct buf *o, struct consumer_metrics *m)
{
	for (int ev = 0; ev < CONSUMER_EV_N; ev++) {
		family(o, event_family[ev], "counter", event_help[ev]);
		for (size_t i = 0; i < m->nnames; i++)
			sample_u64(o, event_family[ev], m->names[i], m->group, m->counts[i][ev]);
		if (m->counts[CONSUMER_METRICS_MAX_STREAMS][ev] != 0)
			sample_u64(o, event_family[ev], "_other", m->group,
			           m->counts[CONSUMER_METRICS_MAX_STREAMS][ev]);
	}
}

static void render_lag(struct buf *o, struct consumer_metrics *m)
{
	const struct lag_table *t = &m->lag;

	family(o, "outbox_consume_lag_entries", "gauge",
	       "Entries of the stream not yet delivered to the group (XINFO GROUPS lag; absent when "
	       "Redis cannot tell).");
	for (size_t i = 0; i < t->n; i++)
		if (t->rows[i].lag >= 0)
			sample_u64(o, "outbox_consume_lag_entries", t->rows[i].stream, t->rows[i].group,
			           (uint64_t)t->rows[i].lag);
	family(o, "outbox_consume_pending_entries", "gauge",
	       "Entries delivered to the group and not acknowledged yet (XPENDING).");
	for (size_t i = 0; i < t->n; i++)
		sample_u64(o, "outbox_consume_pending_entries", t->rows[i].stream, t->rows[i].group,
		           t->rows[i].pending);
	family(o, "outbox_consume_oldest_pending_age_seconds", "gauge",
	       "Age of the group's oldest pending entry (its id's time against Redis TIME); 0 when "
	       "none is pending.");
	for (size_t i = 0; i < t->n; i++) {
		int64_t age = t->rows[i].oldest_age_ms;

		sample_secs(o, "outbox_consume_oldest_pending_age_seconds", t->rows[i].stream,
		            t->rows[i].group, age > 0 ? (uint64_t)age : 0, 1000, 3);
	}
}

static void render_histogram(struct buf *o, struct consumer_metrics *m)
{
	static const char name[] = "outbox_consume_handler_duration_seconds";
	uint64_t cum = 0;
	char v[24];

	family(o, name, "histogram",
	       "Time of one delivery to the handler (--exec, --handler), success or failure.");
	for (size_t i = 0; i <= NBUCKETS; i++) {
		cum += atomic_load_explicit(&m->bucket[i], memory_order_relaxed);
		(void)snprintf(v, sizeof(v), "%" PRIu64, cum);
		buf_printf(o, "%s_bucket{group=\"", name);
		label_value(o, m->group);
		buf_printf(o, "\",le=\"%s\"} %s\n", i < NBUCKETS ? bucket_le[i] : "+Inf", v);
	}
	sample_secs(o, "outbox_consume_handler_duration_seconds_sum", NULL, m->group,
	            atomic_load_explicit(&m->sum_us, memory_order_relaxed), 1000000, 6);
	/* _count repeats the +Inf bucket, so the two always agree within one scrape. */
	sample_u64(o, "outbox_consume_handler_duration_seconds_count", NULL, m->group, cum);
}

/* See consumer_metrics.h. */
char *consumer_metrics_render(struct consumer_metrics *m)
{
	struct buf o = {0};
	bool known;

	(void)pthread_mutex_lock(&m->lock);
	render_events(&o, m);
	known = m->lag_known;
	if (known)
		render_lag(&o, m);
	(void)pthread_mutex_unlock(&m->lock);
	render_histogram(&o, m);
	family(&o, "outbox_consume_redis_connected", "gauge", "1 while connected to Redis.");
	sample_u64(&o, "outbox_consume_redis_connected", NULL, m->group,
	           atomic_load_explicit(&m->connected, memory_order_relaxed) ? 1 : 0);
	family(&o, "outbox_consume_up", "gauge", "Always 1 while outbox-consume runs.");
	sample_u64(&o, "outbox_consume_up", NULL, m->group, 1);
	if (o.failed || !o.data) {
		free(o.data);
		return NULL;
	}
	return o.data;
}

/* ---- HTTP routes ---- */

/* 200 while connected and the loop turned within stuck_after; else 503 and why. */
static void serve_healthz(struct consumer_metrics_server *s, struct http_answer *a)
{
	int64_t hb = atomic_load_explicit(&s->m->heartbeat_mono_us, memory_order_relaxed);
	int64_t age = time_mono_us() - (hb != 0 ? hb : s->started_mono_us);
	char body[96];

	if (!atomic_load_explicit(&s->m->connected, memory_order_relaxed)) {
		http_answer_text(a, 503, "redis-down\n");
		return;
	}
	if (age <= s->stuck_after_us) {
		http_answer_text(a, 200, "ok\n");
		return;
	}
	(void)snprintf(body, sizeof(body), "stuck: no loop iteration for %" PRId64 " ms\n", age / 1000);
	a->status = 503;
	a->body = strdup(body);
	a->len = a->body ? strlen(a->body) : 0;
	a->free_body = true;
}

static void route(void *cls, const char *path, struct http_answer *a)
{
	struct consumer_metrics_server *s = cls;

	if (strcmp(path, "/metrics") == 0) {
		a->status = 200;
		a->content_type = HTTP_CONTENT_TYPE_METRICS;
		a->body = consumer_metrics_render(s->m);
		a->len = a->body ? strlen(a->body) : 0;
		a->free_body = true;
	} else if (strcmp(path, "/healthz") == 0) {
		serve_healthz(s, a);
	} else {
		http_answer_text(a, 404, "not found\n");
	}
}

/* See consumer_metrics.h. */
struct consumer_metrics_server *consumer_metrics_serve(struct consumer_metrics *m, const char *addr,
                                                       int64_t stuck_after_ms, char *err,
                                                       size_t errlen)
{
	struct consumer_metrics_server *s = calloc(1, sizeof(*s));

	if (!s) {
		msg_set(err, errlen, "out of memory starting the HTTP server");
		return NULL;
	}
	s->m = m;
	s->stuck_after_us = stuck_after_ms * 1000;
	s->started_mono_us = time_mono_us();
	s->http = http_server_start(addr, route, s, err, errlen);
	if (!s->http) {
		free(s);
		return NULL;
	}
	return s;
}

/* See consumer_metrics.h. */
void consumer_metrics_server_stop(struct consumer_metrics_server *s)
{
	if (!s)
		return;
	http_server_stop(s->http);
	free(s);
}

/* See consumer_metrics.h. */
int consumer_metrics_server_port(const struct consumer_metrics_server *s)
{
	return s ? http_server_port(s->http) : 0;
}
