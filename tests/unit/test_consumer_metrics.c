/*
 * test_consumer_metrics.c - lib/consumer_metrics.c: the oldest pending age
 * read from XPENDING and TIME replies, the outbox_consume_* text, and the
 * /metrics and /healthz routes of a live server.
 */
#include "test.h"

#include "consumer_metrics.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

/* A string reply over s (not owned). */
static redisReply str_reply(const char *s)
{
	redisReply r;

	memset(&r, 0, sizeof(r));
	r.type = REDIS_REPLY_STRING;
	r.str = (char *)s;
	r.len = strlen(s);
	return r;
}

static redisReply int_reply(long long v)
{
	redisReply r;

	memset(&r, 0, sizeof(r));
	r.type = REDIS_REPLY_INTEGER;
	r.integer = v;
	return r;
}

static redisReply array_reply(redisReply **el, size_t n)
{
	redisReply r;

	memset(&r, 0, sizeof(r));
	r.type = REDIS_REPLY_ARRAY;
	r.element = el;
	r.elements = n;
	return r;
}

TEST(oldest_pending)
{
	redisReply n2 = int_reply(2), n0 = int_reply(0), lo = str_reply("1700000000000-3"),
	           hi = str_reply("1700000000500-0"), nil, sec = str_reply("1700000012"),
	           usec = str_reply("345678"), bad = str_reply("x-1");
	redisReply *pel[4] = {&n2, &lo, &hi, &nil}, *zel[4] = {&n0, &nil, &nil, &nil},
	           *tel[2] = {&sec, &usec}, *badel[4] = {&n2, &bad, &hi, &nil};
	redisReply pend, none, now, badp;
	uint64_t pending = 99;

	memset(&nil, 0, sizeof(nil));
	nil.type = REDIS_REPLY_NIL;
	pend = array_reply(pel, 4);
	none = array_reply(zel, 4);
	now = array_reply(tel, 2);
	badp = array_reply(badel, 4);

	CHECK_INT(consumer_metrics_oldest_pending_ms(&pend, &now, &pending), 12345);
	CHECK_INT(pending, 2);
	CHECK_INT(consumer_metrics_oldest_pending_ms(&none, &now, &pending), -1);
	CHECK_INT(pending, 0);
	CHECK_INT(consumer_metrics_oldest_pending_ms(&badp, &now, &pending), -2);
	CHECK_INT(consumer_metrics_oldest_pending_ms(&pend, NULL, &pending), -2);
	CHECK_INT(consumer_metrics_oldest_pending_ms(NULL, &now, &pending), -2);
	/* An id ahead of the server's clock is age 0, not negative. */
	sec = str_reply("1699999999");
	CHECK_INT(consumer_metrics_oldest_pending_ms(&pend, &now, &pending), 0);
}

TEST(render)
{
	struct consumer_metrics *m = consumer_metrics_create("work\"ers");
	char *text;

	CHECK(m != NULL);
	if (!m)
		return;
	consumer_metrics_count(m, "outbox:order", CONSUMER_EV_HANDLED, 0);
	text = consumer_metrics_render(m);
	CHECK(text && strstr(text, "outbox_consume_events_handled_total{stream=\"outbox:order\","
	                           "group=\"work\\\"ers\"} 0\n"));
	CHECK(text && !strstr(text, "outbox_consume_lag_entries{")); /* no refresh yet */
	free(text);

	consumer_metrics_count(m, "outbox:order", CONSUMER_EV_HANDLED, 2);
	consumer_metrics_count(m, "outbox:order", CONSUMER_EV_FAILED, 1);
	consumer_metrics_count(m, "outbox:order", CONSUMER_EV_RETRIED, 1);
	consumer_metrics_count(m, "outbox:order", CONSUMER_EV_POISONED, 1);
	consumer_metrics_observe_handler(m, 700);      /* le 0.001 */
	consumer_metrics_observe_handler(m, 3000);     /* le 0.005 */
	consumer_metrics_observe_handler(m, 9000000);  /* le 10 */
	consumer_metrics_observe_handler(m, -5);       /* a clock step: 0 */
	consumer_metrics_observe_handler(m, 90000000); /* +Inf */
	consumer_metrics_lag_begin(m);
	consumer_metrics_lag_add(m, "outbox:order", "idle", 21, 0, -1);
	consumer_metrics_lag_add(m, "outbox:order", "stuck", -1, 1, 2500);
	consumer_metrics_lag_commit(m);
	consumer_metrics_heartbeat(m, true);
	text = consumer_metrics_render(m);
	CHECK(text != NULL);
	if (!text) {
		consumer_metrics_destroy(m);
		return;
	}
	CHECK(strstr(text, "outbox_consume_events_handled_total{stream=\"outbox:order\","
	                   "group=\"work\\\"ers\"} 2\n"));
	CHECK(strstr(text, "outbox_consume_events_failed_total{stream=\"outbox:order\","
	                   "group=\"work\\\"ers\"} 1\n"));
	CHECK(strstr(text, "# TYPE outbox_consume_events_retried_total counter\n"));
	CHECK(strstr(text, "outbox_consume_events_poisoned_total{stream=\"outbox:order\","
	                   "group=\"work\\\"ers\"} 1\n"));
	CHECK(strstr(text, "outbox_consume_lag_entries{stream=\"outbox:order\",group=\"idle\"} 21\n"));
	CHECK(!strstr(text, "outbox_consume_lag_entries{stream=\"outbox:order\",group=\"stuck\"}"));
	CHECK(strstr(text,
	             "outbox_consume_pending_entries{stream=\"outbox:order\",group=\"stuck\"} 1\n"));
	CHECK(strstr(text, "outbox_consume_oldest_pending_age_seconds{stream=\"outbox:order\","
	                   "group=\"stuck\"} 2.500\n"));
	CHECK(strstr(text, "outbox_consume_oldest_pending_age_seconds{stream=\"outbox:order\","
	                   "group=\"idle\"} 0.000\n"));
	CHECK(strstr(text, "# TYPE outbox_consume_handler_duration_seconds histogram\n"));
	CHECK(strstr(text, "outbox_consume_handler_duration_seconds_bucket{group=\"work\\\"ers\","
	                   "le=\"0.001\"} 2\n"));
	CHECK(strstr(text, "outbox_consume_handler_duration_seconds_bucket{group=\"work\\\"ers\","
	                   "le=\"0.005\"} 3\n"));
	CHECK(strstr(text, "outbox_consume_handler_duration_seconds_bucket{group=\"work\\\"ers\","
	                   "le=\"60\"} 4\n"));
	CHECK(strstr(text, "outbox_consume_handler_duration_seconds_bucket{group=\"work\\\"ers\","
	                   "le=\"+Inf\"} 5\n"));
	CHECK(strstr(text, "outbox_consume_handler_duration_seconds_sum{group=\"work\\\"ers\"} "
	                   "99.003700\n"));
	CHECK(strstr(text, "outbox_consume_handler_duration_seconds_count{group=\"work\\\"ers\"} 5\n"));
	CHECK(strstr(text, "outbox_consume_redis_connected{group=\"work\\\"ers\"} 1\n"));
	free(text);

	/* A refresh replaces the table whole. */
	consumer_metrics_lag_begin(m);
	consumer_metrics_lag_add(m, "outbox:order", "idle", 0, 0, -1);
	consumer_metrics_lag_commit(m);
	text = consumer_metrics_render(m);
	CHECK(text && strstr(text, "group=\"idle\"} 0\n") && !strstr(text, "group=\"stuck\""));
	free(text);
	consumer_metrics_destroy(m);
}

TEST(stream_overflow)
{
	struct consumer_metrics *m = consumer_metrics_create("g");
	char name[32], *text;

	CHECK(m != NULL);
	if (!m)
		return;
	for (int i = 0; i < CONSUMER_METRICS_MAX_STREAMS + 3; i++) {
		(void)snprintf(name, sizeof(name), "s%d", i);
		consumer_metrics_count(m, name, CONSUMER_EV_HANDLED, 1);
	}
	text = consumer_metrics_render(m);
	CHECK(text && strstr(text, "outbox_consume_events_handled_total{stream=\"_other\",group=\"g\"} "
	                           "3\n"));
	free(text);
	consumer_metrics_destroy(m);
}

/* GET path from 127.0.0.1:port: the status code, the body into body. */
static int http_get(int port, const char *path, char *body, size_t bodylen)
{
	struct sockaddr_in a;
	char req[128], resp[8192];
	size_t got = 0;
	ssize_t n;
	int fd, status = -1;
	const char *b;

	fd = socket(AF_INET, SOCK_STREAM, 0);
	if (fd < 0)
		return -1;
	memset(&a, 0, sizeof(a));
	a.sin_family = AF_INET;
	a.sin_port = htons((uint16_t)port);
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
		close(fd);
		return -1;
	}
	n = snprintf(req, sizeof(req), "GET %s HTTP/1.0\r\n\r\n", path);
	if (write(fd, req, (size_t)n) != n) {
		close(fd);
		return -1;
	}
	while (got + 1 < sizeof(resp) && (n = read(fd, resp + got, sizeof(resp) - 1 - got)) > 0)
		got += (size_t)n;
	resp[got] = '\0';
	close(fd);
	if (sscanf(resp, "HTTP/1.%*d %d", &status) != 1)
		return -1;
	b = strstr(resp, "\r\n\r\n");
	(void)snprintf(body, bodylen, "%s", b ? b + 4 : "");
	return status;
}

TEST(live_server)
{
	struct consumer_metrics *m = consumer_metrics_create("g");
	struct consumer_metrics_server *s;
	char err[256], body[8192];
	int port;

	CHECK(m != NULL);
	if (!m)
		return;
	s = consumer_metrics_serve(m, "127.0.0.1:0", 60000, err, sizeof(err));
	CHECK(s != NULL);
	if (!s) {
		printf("# %s\n", err);
		consumer_metrics_destroy(m);
		return;
	}
	port = consumer_metrics_server_port(s);
	CHECK(port > 0);
	CHECK_INT(http_get(port, "/healthz", body, sizeof(body)), 503); /* not connected yet */
	CHECK_STR(body, "redis-down\n");
	consumer_metrics_heartbeat(m, true);
	CHECK_INT(http_get(port, "/healthz", body, sizeof(body)), 200);
	CHECK_STR(body, "ok\n");
	CHECK_INT(http_get(port, "/metrics", body, sizeof(body)), 200);
	CHECK(strstr(body, "outbox_consume_up{group=\"g\"} 1\n") != NULL);
	CHECK_INT(http_get(port, "/readyz", body, sizeof(body)), 404);
	consumer_metrics_heartbeat(m, false);
	CHECK_INT(http_get(port, "/healthz", body, sizeof(body)), 503);
	consumer_metrics_server_stop(s);

	CHECK(consumer_metrics_serve(m, "nope", 1000, err, sizeof(err)) == NULL);
	CHECK(strstr(err, "--http-addr") != NULL);
	consumer_metrics_destroy(m);
}

TEST(null_is_noop)
{
	consumer_metrics_count(NULL, "s", CONSUMER_EV_HANDLED, 1);
	consumer_metrics_observe_handler(NULL, 1);
	consumer_metrics_heartbeat(NULL, true);
	consumer_metrics_lag_begin(NULL);
	consumer_metrics_lag_add(NULL, "s", "g", 1, 1, 1);
	consumer_metrics_lag_commit(NULL);
	consumer_metrics_server_stop(NULL);
	consumer_metrics_destroy(NULL);
	CHECK_INT(consumer_metrics_server_port(NULL), 0);
}

int main(void)
{
	RUN(oldest_pending);
	RUN(render);
	RUN(stream_overflow);
	RUN(live_server);
	RUN(null_is_noop);
	return test_done();
}
