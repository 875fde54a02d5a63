/*
 * test_metrics.c - unit tests for lib/metrics.c: the rendered Prometheus
 * text for known values, the latency histogram, the bounded stream table,
 * label escaping, and a live server on 127.0.0.1:0 driven by a tiny raw-socket
 * HTTP client (/metrics, /healthz, /readyz, 404, 405, port in use).
 */
#include "metrics.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "lsn.h"
#include "test.h"

/* True when text holds line as a whole line (line has no newline). */
static bool has_line(const char *text, const char *line)
{
	size_t n = strlen(line);
	const char *p = text;

	while ((p = strstr(p, line)) != NULL) {
		if ((p == text || p[-1] == '\n') && p[n] == '\n')
			return true;
		p++;
	}
	return false;
}

/* CHECK that text holds line, printing the missing line. */
#define CHECK_LINE(text, line)                                                                     \
	do {                                                                                           \
		if (!has_line((text), (line))) {                                                           \
			printf("# %s:%d: missing line: %s\n", __FILE__, __LINE__, (line));                     \
			test_cur_failed = 1;                                                                   \
		}                                                                                          \
	} while (0)

/* The value after "<prefix> " on the line starting with prefix, or NULL. */
static const char *value_of(const char *text, const char *prefix)
{
	size_t n = strlen(prefix);
	const char *p = text;

	while ((p = strstr(p, prefix)) != NULL) {
		if ((p == text || p[-1] == '\n') && p[n] == ' ')
			return p + n + 1;
		p++;
	}
	return NULL;
}

static void sleep_ms(long ms)
{
	struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};

	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

/* ---- a tiny HTTP/1.0 client ---- */

struct http_resp {
	int status;
	char *raw;        /* the whole response, NUL-terminated */
	const char *body; /* inside raw */
};

static void http_resp_free(struct http_resp *r)
{
	free(r->raw);
	memset(r, 0, sizeof(*r));
}

/*
 * Send "METHOD path HTTP/1.0" to ip (numeric IPv4 or IPv6) port and read
 * until the server closes. Returns false on any socket error or a malformed
 * status line.
 */
static bool http_req_at(const char *ip, int port, const char *method, const char *path,
                        struct http_resp *r)
{
	struct sockaddr_storage sa;
	socklen_t salen;
	struct timeval tv = {5, 0};
	char req[256];
	size_t len = 0, cap = 4096;
	int fd, n;
	char *buf, *sep;

	memset(r, 0, sizeof(*r));
	memset(&sa, 0, sizeof(sa));
	if (strchr(ip, ':')) {
		struct sockaddr_in6 *a = (struct sockaddr_in6 *)&sa;

		a->sin6_family = AF_INET6;
		a->sin6_port = htons((uint16_t)port);
		if (inet_pton(AF_INET6, ip, &a->sin6_addr) != 1)
			return false;
		salen = sizeof(*a);
	} else {
		struct sockaddr_in *a = (struct sockaddr_in *)&sa;

		a->sin_family = AF_INET;
		a->sin_port = htons((uint16_t)port);
		if (inet_pton(AF_INET, ip, &a->sin_addr) != 1)
			return false;
		salen = sizeof(*a);
	}
	fd = socket(sa.ss_family, SOCK_STREAM, 0);
	if (fd < 0)
		return false;
	(void)setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	if (connect(fd, (struct sockaddr *)&sa, salen) != 0)
		goto error_fd;
	n = snprintf(req, sizeof(req), "%s %s HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n", method, path);
	if (send(fd, req, (size_t)n, 0) != n)
		goto error_fd;
	buf = malloc(cap);
	if (!buf)
		goto error_fd;
	for (;;) {
		ssize_t got;

		if (cap - len < 1024) {
			char *p = realloc(buf, cap * 2);

			if (!p)
				goto error_buf;
			buf = p;
			cap *= 2;
		}
		got = recv(fd, buf + len, cap - len - 1, 0);
		if (got < 0)
			goto error_buf;
		if (got == 0)
			break;
		len += (size_t)got;
	}
	buf[len] = '\0';
	(void)close(fd);
	if (sscanf(buf, "HTTP/1.%*d %d", &r->status) != 1) {
		free(buf);
		return false;
	}
	sep = strstr(buf, "\r\n\r\n");
	r->raw = buf;
	r->body = sep ? sep + 4 : buf + len;
	return true;

error_buf:
	free(buf);
error_fd:
	(void)close(fd);
	return false;
}

/* http_req_at() on 127.0.0.1. */
static bool http_req(int port, const char *method, const char *path, struct http_resp *r)
{
	return http_req_at("127.0.0.1", port, method, path, r);
}

/* ---- rendering ---- */

TEST(render_values)
{
	struct metrics *m = metrics_create();
	char *text;
	uint32_t orders;

	CHECK(m != NULL);
	if (!m)
		return;
	orders = metrics_stream_id(m, "orders", 6);
	CHECK_INT(orders, 0);
	CHECK_INT(metrics_stream_id(m, "payments", 8), 1);
	m->published[orders] = 5;
	m->replays_skipped = 2;
	m->duplicates_skipped = 3;
	m->dead_lettered[DEAD_TOO_LARGE] = 4;
	m->ignored[IGN_MESSAGE] = 6;
	m->redis_errors[SINK_ERR_TIMEOUT] = 7;
	m->redis_errors[SINK_ERR_FOREIGN] = 1; /* kinds that share a label are summed */
	m->redis_errors[SINK_ERR_LOST] = 2;
	m->pg_reconnects = 8;
	m->redis_reconnects = 9;
	m->transactions = 10;
	m->inflight_events = 11;
	m->inflight_bytes = 12345;
	m->received_lsn = 22146064;
	m->confirmed_lsn = 22145064;
	m->server_wal_end = 22145064 + 1000;
	m->state = STATE_STREAMING;
	m->redis_connected = true;
	m->plugin = METRICS_PLUGIN_PGOUTPUT;

	text = metrics_render(m, "s1");
	CHECK(text != NULL);
	if (!text) {
		metrics_destroy(m);
		return;
	}
	CHECK_LINE(text, "# TYPE outbox_relay_events_published_total counter");
	CHECK_LINE(text, "outbox_relay_events_published_total{slot=\"s1\",stream=\"orders\"} 5");
	CHECK_LINE(text, "outbox_relay_events_published_total{slot=\"s1\",stream=\"payments\"} 0");
	CHECK(!strstr(text, "stream=\"_other\""));
	CHECK_LINE(text, "outbox_relay_replays_skipped_total{slot=\"s1\"} 2");
	CHECK_LINE(text, "outbox_relay_duplicates_skipped_total{slot=\"s1\"} 3");
	CHECK_LINE(text, "outbox_relay_dead_lettered_total{slot=\"s1\",reason=\"id_missing\"} 0");
	CHECK_LINE(text, "outbox_relay_dead_lettered_total{slot=\"s1\",reason=\"routing\"} 0");
	CHECK_LINE(text, "outbox_relay_dead_lettered_total{slot=\"s1\",reason=\"not_json_object\"} 0");
	CHECK_LINE(text, "outbox_relay_dead_lettered_total{slot=\"s1\",reason=\"undecodable\"} 0");
	CHECK_LINE(text, "outbox_relay_dead_lettered_total{slot=\"s1\",reason=\"too_large\"} 4");
	CHECK_LINE(text, "outbox_relay_dead_lettered_total{slot=\"s1\",reason=\"redis_rejected\"} 0");
	CHECK_LINE(text, "outbox_relay_dead_lettered_total{slot=\"s1\",reason=\"other\"} 0");
	CHECK_LINE(text, "outbox_relay_ignored_changes_total{slot=\"s1\",kind=\"update\"} 0");
	CHECK_LINE(text, "outbox_relay_ignored_changes_total{slot=\"s1\",kind=\"delete\"} 0");
	CHECK_LINE(text, "outbox_relay_ignored_changes_total{slot=\"s1\",kind=\"truncate\"} 0");
	CHECK_LINE(text, "outbox_relay_ignored_changes_total{slot=\"s1\",kind=\"non_transactional_"
	                 "message\"} 6");
	CHECK_LINE(text, "outbox_relay_redis_errors_total{slot=\"s1\",kind=\"oom\"} 0");
	CHECK_LINE(text, "outbox_relay_redis_errors_total{slot=\"s1\",kind=\"busy\"} 0");
	CHECK_LINE(text, "outbox_relay_redis_errors_total{slot=\"s1\",kind=\"timeout\"} 7");
	CHECK_LINE(text, "outbox_relay_redis_errors_total{slot=\"s1\",kind=\"state\"} 3");
	CHECK(
	    strstr(text,
	           "kind=\"order\"} 0\noutbox_relay_redis_errors_total{slot=\"s1\",kind=\"state\"}") !=
	    NULL);
	CHECK_LINE(text, "outbox_relay_reconnects_total{slot=\"s1\",target=\"postgresql\"} 8");
	CHECK_LINE(text, "outbox_relay_reconnects_total{slot=\"s1\",target=\"redis\"} 9");
	CHECK_LINE(text, "outbox_relay_transactions_total{slot=\"s1\"} 10");
	CHECK_LINE(text, "# TYPE outbox_relay_inflight_events gauge");
	CHECK_LINE(text, "outbox_relay_inflight_events{slot=\"s1\"} 11");
	CHECK_LINE(text, "outbox_relay_inflight_bytes{slot=\"s1\"} 12345");
	CHECK_LINE(text, "outbox_relay_received_lsn{slot=\"s1\"} 22146064");
	CHECK_LINE(text, "outbox_relay_confirmed_lsn{slot=\"s1\"} 22145064");
	CHECK_LINE(text, "outbox_relay_slot_lag_bytes{slot=\"s1\"} 1000");
	CHECK_LINE(text, "outbox_relay_seconds_since_last_confirm{slot=\"s1\"} -1");
	CHECK_LINE(text, "outbox_relay_up{slot=\"s1\"} 1");
	CHECK_LINE(text, "outbox_relay_state{slot=\"s1\",state=\"starting\"} 0");
	CHECK_LINE(text, "outbox_relay_state{slot=\"s1\",state=\"streaming\"} 1");
	CHECK_LINE(text, "outbox_relay_state{slot=\"s1\",state=\"standby\"} 0");
	CHECK_LINE(text, "outbox_relay_state{slot=\"s1\",state=\"retrying\"} 0");
	CHECK_LINE(text, "outbox_relay_state{slot=\"s1\",state=\"stopping\"} 0");
	CHECK_LINE(text, "outbox_relay_redis_connected{slot=\"s1\"} 1");
	CHECK(strstr(text, "\noutbox_relay_info{slot=\"s1\",version=\"") != NULL);
	CHECK(strstr(text, ",plugin=\"pgoutput\"} 1\n") != NULL);
	CHECK_LINE(text, "# TYPE outbox_relay_commit_to_publish_seconds histogram");
	CHECK(text[strlen(text) - 1] == '\n');

	/* Every sample line carries the slot label and a value; comments are HELP or TYPE. */
	{
		const char *line = text;

		while (*line) {
			const char *nl = strchr(line, '\n');
			size_t n = nl ? (size_t)(nl - line) : strlen(line);

			if (line[0] == '#') {
				CHECK(strncmp(line, "# HELP outbox_relay_", 20) == 0 ||
				      strncmp(line, "# TYPE outbox_relay_", 20) == 0);
			} else {
				const char *brace = memchr(line, '{', n);

				CHECK(strncmp(line, "outbox_relay_", 13) == 0);
				CHECK(brace && strncmp(brace, "{slot=\"s1\"", 10) == 0);
				CHECK(memchr(line, ' ', n) != NULL);
			}
			if (!nl)
				break;
			line = nl + 1;
		}
	}
	free(text);

	/* The lag is 0 while the server's position is unknown or behind. */
	m->server_wal_end = 0;
	m->last_confirm_unix_us = time_now_us() - 2500000;
	text = metrics_render(m, "s1");
	CHECK(text != NULL);
	if (text) {
		const char *v = value_of(text, "outbox_relay_seconds_since_last_confirm{slot=\"s1\"}");
		double secs = v ? strtod(v, NULL) : -1;

		CHECK_LINE(text, "outbox_relay_slot_lag_bytes{slot=\"s1\"} 0");
		CHECK(v != NULL);
		CHECK(secs >= 2.5 && secs < 3.5);
		/* Three decimals. */
		CHECK(v && v[1] == '.' && v[2] >= '0' && v[5] == '\n');
		free(text);
	}
	metrics_destroy(m);
}

TEST(histogram)
{
	struct metrics *m = metrics_create();
	char *text;

	CHECK(m != NULL);
	if (!m)
		return;
	metrics_observe_latency(m, 0);
	metrics_observe_latency(m, -5);       /* clock skew: counts as 0 */
	metrics_observe_latency(m, 500);      /* exactly 0.0005: le is inclusive */
	metrics_observe_latency(m, 501);      /* 0.001 */
	metrics_observe_latency(m, 3000000);  /* 5 */
	metrics_observe_latency(m, 20000000); /* +Inf */
	CHECK_INT(m->latency_bucket[0], 3);
	CHECK_INT(m->latency_bucket[1], 1);
	CHECK_INT(m->latency_bucket[12], 1);
	CHECK_INT(m->latency_bucket[METRICS_LATENCY_BUCKETS], 1);
	CHECK_INT(m->latency_count, 6);
	CHECK_INT(m->latency_sum_us, 23001001);
	CHECK(metrics_latency_bounds[0] == 0.0005);
	CHECK(metrics_latency_bounds[11] == 2.5);
	CHECK(metrics_latency_bounds[METRICS_LATENCY_BUCKETS - 1] == 10);

	text = metrics_render(m, "s1");
	CHECK(text != NULL);
	if (text) {
		const char *b = "outbox_relay_commit_to_publish_seconds_bucket{slot=\"s1\",le=";

#define BUCKET(le, n)                                                                              \
	do {                                                                                           \
		char line_[160];                                                                           \
		(void)snprintf(line_, sizeof(line_), "%s\"%s\"} %d", b, le, n);                            \
		CHECK_LINE(text, line_);                                                                   \
	} while (0)
		BUCKET("0.0005", 3);
		BUCKET("0.001", 4);
		BUCKET("0.002", 4);
		BUCKET("0.005", 4);
		BUCKET("0.01", 4);
		BUCKET("0.02", 4);
		BUCKET("0.05", 4);
		BUCKET("0.1", 4);
		BUCKET("0.25", 4);
		BUCKET("0.5", 4);
		BUCKET("1", 4);
		BUCKET("2.5", 4);
		BUCKET("5", 5);
		BUCKET("10", 5);
		BUCKET("+Inf", 6);
#undef BUCKET
		CHECK_LINE(text, "outbox_relay_commit_to_publish_seconds_sum{slot=\"s1\"} 23.001001");
		CHECK_LINE(text, "outbox_relay_commit_to_publish_seconds_count{slot=\"s1\"} 6");
		free(text);
	}
	metrics_destroy(m);
}

TEST(stream_table_overflow)
{
	struct metrics *m = metrics_create();
	char name[32], *text;
	uint32_t i;
	bool ids_ok = true;

	CHECK(m != NULL);
	if (!m)
		return;
	for (i = 0; i < METRICS_MAX_STREAMS; i++) {
		int n = snprintf(name, sizeof(name), "stream-%u", (unsigned int)i);

		if (metrics_stream_id(m, name, (size_t)n) != i)
			ids_ok = false;
	}
	CHECK(ids_ok);
	/* Known names keep their ids, also once the table is full. */
	for (i = 0; i < METRICS_MAX_STREAMS; i += 17) {
		int n = snprintf(name, sizeof(name), "stream-%u", (unsigned int)i);

		CHECK_INT(metrics_stream_id(m, name, (size_t)n), i);
	}
	/* The length counts, not a NUL: "stream-1" inside "stream-10". */
	CHECK_INT(metrics_stream_id(m, "stream-10", 8), 1);
	CHECK_INT(metrics_stream_id(m, "one-too-many", 12), METRICS_MAX_STREAMS);
	CHECK_INT(metrics_stream_id(m, "another", 7), METRICS_MAX_STREAMS);
	CHECK_INT(metrics_stream_id(m, "stream-255", 10), 255);

	m->published[METRICS_MAX_STREAMS] = 7;
	m->published[255] = 1;
	text = metrics_render(m, "s1");
	CHECK(text != NULL);
	if (text) {
		CHECK_LINE(text, "outbox_relay_events_published_total{slot=\"s1\",stream=\"_other\"} 7");
		CHECK_LINE(text, "outbox_relay_events_published_total{slot=\"s1\",stream=\"stream-0\"} 0");
		CHECK_LINE(text,
		           "outbox_relay_events_published_total{slot=\"s1\",stream=\"stream-255\"} 1");
		CHECK(!strstr(text, "one-too-many"));
		free(text);
	}
	metrics_destroy(m);
}

TEST(label_escaping)
{
	struct metrics *m = metrics_create();
	char *text;

	CHECK(m != NULL);
	if (!m)
		return;
	CHECK_INT(metrics_stream_id(m, "a\"b\\c\nd", 7), 0);
	CHECK_INT(metrics_stream_id(m, "", 0), 1);
	text = metrics_render(m, "x\"y\\z\nw");
	CHECK(text != NULL);
	if (text) {
		CHECK_LINE(text, "outbox_relay_up{slot=\"x\\\"y\\\\z\\nw\"} 1");
		CHECK_LINE(text, "outbox_relay_events_published_total{slot=\"x\\\"y\\\\z\\nw\","
		                 "stream=\"a\\\"b\\\\c\\nd\"} 0");
		CHECK_LINE(text,
		           "outbox_relay_events_published_total{slot=\"x\\\"y\\\\z\\nw\",stream=\"\"} 0");
		free(text);
	}
	/* A NULL slot renders as an empty label value. */
	text = metrics_render(m, NULL);
	CHECK(text != NULL);
	if (text) {
		CHECK_LINE(text, "outbox_relay_up{slot=\"\"} 1");
		free(text);
	}
	metrics_destroy(m);
}

/* ---- the HTTP endpoint ---- */

TEST(live_server)
{
	struct metrics *m = metrics_create();
	struct metrics_server *s, *s2;
	struct http_resp r;
	char err[256], addr[64];
	int port;

	CHECK(m != NULL);
	if (!m)
		return;
	m->loop_heartbeat_mono_us = time_mono_us();
	err[0] = '\0';
	s = metrics_server_start(m, "127.0.0.1:0", "live", 5000, err, sizeof(err));
	CHECK(s != NULL);
	if (!s) {
		printf("# %s\n", err);
		metrics_destroy(m);
		return;
	}
	port = metrics_server_port(s);
	CHECK(port > 0 && port <= 65535);

	CHECK(http_req(port, "GET", "/metrics", &r));
	CHECK_INT(r.status, 200);
	CHECK(r.raw && strstr(r.raw, "Content-Type: text/plain; version=0.0.4") != NULL);
	CHECK(r.body && has_line(r.body, "outbox_relay_up{slot=\"live\"} 1"));
	CHECK(r.body && has_line(r.body, "outbox_relay_state{slot=\"live\",state=\"starting\"} 1"));
	http_resp_free(&r);

	/* HEAD: headers only. */
	CHECK(http_req(port, "HEAD", "/metrics", &r));
	CHECK_INT(r.status, 200);
	CHECK_STR(r.body, "");
	http_resp_free(&r);

	CHECK(http_req(port, "GET", "/healthz", &r));
	CHECK_INT(r.status, 200);
	CHECK_STR(r.body, "ok\n");
	http_resp_free(&r);

	m->loop_heartbeat_mono_us = time_mono_us() - INT64_C(3600) * 1000000;
	CHECK(http_req(port, "GET", "/healthz", &r));
	CHECK_INT(r.status, 503);
	CHECK(r.body && strncmp(r.body, "stuck: no loop iteration for 36000", 34) == 0);
	CHECK(r.body && strstr(r.body, " ms\n") != NULL);
	http_resp_free(&r);

	CHECK(http_req(port, "GET", "/readyz", &r));
	CHECK_INT(r.status, 503);
	CHECK_STR(r.body, "starting\n");
	http_resp_free(&r);

	m->state = STATE_STREAMING;
	CHECK(http_req(port, "GET", "/readyz", &r));
	CHECK_INT(r.status, 503);
	CHECK_STR(r.body, "redis-down\n");
	http_resp_free(&r);

	m->redis_connected = true;
	CHECK(http_req(port, "GET", "/readyz", &r));
	CHECK_INT(r.status, 200);
	CHECK_STR(r.body, "ready\n");
	http_resp_free(&r);

	m->state = STATE_STANDBY;
	CHECK(http_req(port, "GET", "/readyz", &r));
	CHECK_INT(r.status, 503);
	CHECK_STR(r.body, "standby\n");
	http_resp_free(&r);

	m->state = STATE_RETRYING;
	CHECK(http_req(port, "GET", "/readyz", &r));
	CHECK_STR(r.body, "retrying\n");
	http_resp_free(&r);

	m->state = STATE_STOPPING;
	CHECK(http_req(port, "GET", "/readyz", &r));
	CHECK_STR(r.body, "stopping\n");
	http_resp_free(&r);

	CHECK(http_req(port, "GET", "/nope", &r));
	CHECK_INT(r.status, 404);
	http_resp_free(&r);

	CHECK(http_req(port, "POST", "/metrics", &r));
	CHECK_INT(r.status, 405);
	CHECK(r.raw && strstr(r.raw, "Allow: GET, HEAD") != NULL);
	http_resp_free(&r);

	/* The same port again. */
	(void)snprintf(addr, sizeof(addr), "127.0.0.1:%d", port);
	err[0] = '\0';
	s2 = metrics_server_start(m, addr, "live", 5000, err, sizeof(err));
	CHECK(s2 == NULL);
	CHECK(strstr(err, "Address already in use") != NULL);
	CHECK(strstr(err, addr) != NULL);
	CHECK(strstr(err, "--http-addr") != NULL);
	CHECK(strchr(err, '\n') == NULL);
	printf("# port in use: %s\n", err);
	metrics_server_stop(s2);

	metrics_server_stop(s);
	metrics_destroy(m);
}

/* A loop that never beat is healthy for stuck_after_ms after start, then stuck. */
TEST(healthz_never_beat)
{
	struct metrics *m = metrics_create();
	struct metrics_server *s;
	struct http_resp r;
	char err[256];
	int port;

	CHECK(m != NULL);
	if (!m)
		return;
	s = metrics_server_start(m, "127.0.0.1:0", "s1", 200, err, sizeof(err));
	CHECK(s != NULL);
	if (!s) {
		printf("# %s\n", err);
		metrics_destroy(m);
		return;
	}
	port = metrics_server_port(s);
	CHECK(http_req(port, "GET", "/healthz", &r));
	CHECK_INT(r.status, 200);
	http_resp_free(&r);
	sleep_ms(300);
	CHECK(http_req(port, "GET", "/healthz", &r));
	CHECK_INT(r.status, 503);
	CHECK(r.body && strncmp(r.body, "stuck: no loop iteration for ", 29) == 0);
	http_resp_free(&r);
	/* The first heartbeat makes it healthy. */
	m->loop_heartbeat_mono_us = time_mono_us();
	CHECK(http_req(port, "GET", "/healthz", &r));
	CHECK_INT(r.status, 200);
	http_resp_free(&r);
	metrics_server_stop(s);
	metrics_destroy(m);
}

/* True when this host has a usable IPv6 loopback. */
static bool have_ipv6_loopback(void)
{
	struct sockaddr_in6 a;
	int fd = socket(AF_INET6, SOCK_STREAM, 0);
	bool ok;

	if (fd < 0)
		return false;
	memset(&a, 0, sizeof(a));
	a.sin6_family = AF_INET6;
	a.sin6_addr = in6addr_loopback;
	ok = bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0;
	(void)close(fd);
	return ok;
}

/*
 * ":port" and "[::]:port" listen on all interfaces, dual stack where IPv6
 * exists: 127.0.0.1 (and ::1) answer. "[::1]:port" listens on IPv6 only.
 */
TEST(all_interfaces)
{
	struct metrics *m = metrics_create();
	struct metrics_server *s;
	struct http_resp r;
	char err[256];
	bool v6 = have_ipv6_loopback();

	CHECK(m != NULL);
	if (!m)
		return;
	s = metrics_server_start(m, ":0", "s1", 1000, err, sizeof(err));
	CHECK(s != NULL);
	if (s) {
		CHECK(http_req(metrics_server_port(s), "GET", "/metrics", &r));
		CHECK_INT(r.status, 200);
		http_resp_free(&r);
		if (v6) {
			CHECK(http_req_at("::1", metrics_server_port(s), "GET", "/readyz", &r));
			CHECK_INT(r.status, 503);
			http_resp_free(&r);
		}
	} else {
		printf("# %s\n", err);
	}
	metrics_server_stop(s);
	if (v6) {
		s = metrics_server_start(m, "[::]:0", "s1", 1000, err, sizeof(err));
		CHECK(s != NULL);
		if (s) {
			CHECK(http_req(metrics_server_port(s), "GET", "/healthz", &r));
			CHECK_INT(r.status, 200);
			http_resp_free(&r);
		}
		metrics_server_stop(s);
		s = metrics_server_start(m, "[::1]:0", "s1", 1000, err, sizeof(err));
		CHECK(s != NULL);
		if (s) {
			CHECK(http_req_at("::1", metrics_server_port(s), "GET", "/healthz", &r));
			CHECK_INT(r.status, 200);
			http_resp_free(&r);
		}
		metrics_server_stop(s);
	} else {
		printf("# no IPv6 loopback: [::] and [::1] not tested\n");
	}
	/* A host name resolves. */
	s = metrics_server_start(m, "localhost:0", "s1", 1000, err, sizeof(err));
	CHECK(s != NULL);
	if (!s)
		printf("# %s\n", err);
	CHECK(metrics_server_port(s) > 0);
	metrics_server_stop(s);
	metrics_destroy(m);
}

/* Start on addr expecting failure with want in a one-line err. */
static bool start_fails(struct metrics *m, const char *addr, const char *want)
{
	struct metrics_server *s;
	char err[256];

	err[0] = '\0';
	s = metrics_server_start(m, addr, "s1", 1000, err, sizeof(err));
	if (s) {
		printf("# \"%s\" started, expected an error\n", addr ? addr : "(null)");
		metrics_server_stop(s);
		return false;
	}
	if (!strstr(err, want) || strchr(err, '\n')) {
		printf("# \"%s\": err \"%s\" lacks \"%s\" or spans lines\n", addr ? addr : "(null)", err,
		       want);
		return false;
	}
	return true;
}

TEST(bad_addresses)
{
	struct metrics *m = metrics_create();

	CHECK(m != NULL);
	if (!m)
		return;
	CHECK(start_fails(m, "", "empty"));
	CHECK(start_fails(m, NULL, "empty"));
	CHECK(start_fails(m, "9187", "expected host:port"));
	CHECK(start_fails(m, "127.0.0.1:", "port must be a number"));
	CHECK(start_fails(m, "127.0.0.1:65536", "port must be a number"));
	CHECK(start_fails(m, "127.0.0.1:80x", "port must be a number"));
	CHECK(start_fails(m, "127.0.0.1:-1", "port must be a number"));
	CHECK(start_fails(m, "::1:9187", "in brackets"));
	CHECK(start_fails(m, "[::1", "expected [ipv6]:port"));
	CHECK(start_fails(m, "[::1]9187", "expected [ipv6]:port"));
	CHECK(start_fails(m, "[]:9187", "empty IPv6"));
	CHECK(start_fails(m, "[127.0.0.1]:9187", "not an IPv6 address"));
	CHECK(start_fails(m, "no-such-host.invalid:9187", "could not resolve"));
	CHECK(start_fails(m, "bad\nhost:1", "bad?host:1"));
	metrics_destroy(m);
}

TEST(null_is_noop)
{
	metrics_server_stop(NULL);
	metrics_destroy(NULL);
	CHECK_INT(metrics_server_port(NULL), 0);
}

int main(void)
{
	RUN(render_values);
	RUN(histogram);
	RUN(stream_table_overflow);
	RUN(label_escaping);
	RUN(live_server);
	RUN(healthz_never_beat);
	RUN(all_interfaces);
	RUN(bad_addresses);
	RUN(null_is_noop);
	return test_done();
}
