/*
 * http_server.c - the HTTP endpoint of outbox-relay (metrics.c) and
 * outbox-consume (consumer_metrics.c): libmicrohttpd's internal polling
 * thread, the listen address parsed and named in errors, and the connection
 * limits that keep a probe from queueing behind idle sockets.
 *
 * Every request is answered at once from the caller's route function; a
 * request body is never read (MHD then closes the connection).
 */
#include "http_server.h"

#include "msg.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <microhttpd.h>

/*
 * HTTP limits. Scrapers and probes need few connections, and none should
 * linger. A client address may hold HTTP_PER_IP_LIMIT connections, so one
 * address (or a few) cannot fill HTTP_CONNECTION_LIMIT and queue everyone
 * else's probes behind idle sockets. A connection silent for
 * HTTP_CONNECTION_TIMEOUT_S is closed, so a client sharing the prober's
 * address (the kubelet probes from the node's) holds its slots for seconds,
 * not for good. A probe sends its request as soon as it connects, so the
 * short timeout only ever closes idle sockets and kept-alive ones between
 * scrapes. MHD's one internal polling thread (epoll) serves every
 * connection: an idle one costs a descriptor and its memory pool, not a
 * thread. Test 63_http_starvation.
 */
#define HTTP_CONNECTION_LIMIT 128
#define HTTP_PER_IP_LIMIT 8
#define HTTP_CONNECTION_TIMEOUT_S 3
_Static_assert(HTTP_CONNECTION_LIMIT >= 8 * HTTP_PER_IP_LIMIT,
               "a few client addresses must not fill the HTTP connection limit");
/* Longest part of a user-supplied address quoted back in an error message. */
#define QUOTE_MAX MSG_QUOTE_MAX

#define CONTENT_TYPE_TEXT "text/plain; charset=utf-8"

struct http_server {
	struct MHD_Daemon *daemon;
	http_route_fn route;
	void *cls;
};

/* See http_server.h. */
void http_answer_text(struct http_answer *a, unsigned int status, const char *text)
{
	a->status = status;
	a->content_type = CONTENT_TYPE_TEXT;
	a->body = (char *)text;
	a->len = strlen(text);
	a->free_body = false;
}

/*
 * Queue a response with body[0..len) (copied) and status. MHD_NO closes the
 * connection (on OOM).
 */
static enum MHD_Result reply(struct MHD_Connection *conn, unsigned int status, const char *ctype,
                             const char *body, size_t len)
{
	struct MHD_Response *r;
	enum MHD_Result ret;

	r = MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_MUST_COPY);
	if (!r)
		return MHD_NO;
	if (MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, ctype) != MHD_YES ||
	    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store") != MHD_YES ||
	    (status == MHD_HTTP_METHOD_NOT_ALLOWED &&
	     MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, "GET, HEAD") != MHD_YES)) {
		MHD_destroy_response(r);
		return MHD_NO;
	}
	ret = MHD_queue_response(conn, status, r);
	MHD_destroy_response(r);
	return ret;
}

/*
 * MHD access handler, called on MHD's thread once the request headers are
 * in: the method checked here, the path answered by the route.
 */
static enum MHD_Result handle_request(void *cls, struct MHD_Connection *conn, const char *url,
                                      const char *method, const char *version,
                                      const char *upload_data, size_t *upload_data_size,
                                      void **req_cls)
{
	struct http_server *s = cls;
	struct http_answer a = {0};
	enum MHD_Result ret;

	(void)version;
	(void)upload_data;
	(void)upload_data_size;
	(void)req_cls;

	/* MHD sends no body for HEAD, so HEAD is GET here. */
	if (strcmp(method, MHD_HTTP_METHOD_GET) != 0 && strcmp(method, MHD_HTTP_METHOD_HEAD) != 0)
		http_answer_text(&a, MHD_HTTP_METHOD_NOT_ALLOWED, "method not allowed\n");
	else
		s->route(s->cls, url, &a);
	if (!a.body)
		http_answer_text(&a, MHD_HTTP_INTERNAL_SERVER_ERROR, "out of memory\n");
	ret = reply(conn, a.status, a.content_type ? a.content_type : CONTENT_TYPE_TEXT, a.body, a.len);
	if (a.free_body)
		free(a.body);
	return ret;
}

/* Write sa as "1.2.3.4:port" or "[::1]:port" into buf. */
static void format_sockaddr(const struct sockaddr_storage *sa, char *buf, size_t buflen)
{
	char host[INET6_ADDRSTRLEN];

	if (sa->ss_family == AF_INET6) {
		const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)sa;

		if (!inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof(host)))
			(void)snprintf(host, sizeof(host), "?");
		(void)snprintf(buf, buflen, "[%s]:%u", host, (unsigned int)ntohs(a->sin6_port));
	} else {
		const struct sockaddr_in *a = (const struct sockaddr_in *)sa;

		if (!inet_ntop(AF_INET, &a->sin_addr, host, sizeof(host)))
			(void)snprintf(host, sizeof(host), "?");
		(void)snprintf(buf, buflen, "%s:%u", host, (unsigned int)ntohs(a->sin_port));
	}
}

/* True when this host can open IPv6 sockets (for a dual-stack ":port"). */
static bool have_ipv6(void)
{
	int fd = socket(AF_INET6, SOCK_STREAM, 0);

	if (fd < 0)
		return false;
	(void)close(fd);
	return true;
}

/*
 * Parse addr ("host:port", ":port", "[ipv6]:port"; host a name or a numeric
 * address) into *ret_sa and the MHD address-family flags *ret_flags. ":port"
 * and "[::]:port" listen on all interfaces, IPv4 and IPv6 (IPv4 only on a host
 * without IPv6). Resolves names with getaddrinfo (may block) and takes the
 * first address. On failure returns false with err set; outputs untouched.
 */
static bool parse_addr(const char *addr, struct sockaddr_storage *ret_sa, unsigned int *ret_flags,
                       char *err, size_t errlen)
{
	struct sockaddr_storage sa;
	const char *host, *port_s, *p;
	size_t hostlen;
	bool bracketed = false;
	unsigned long port = 0;
	unsigned int flags;
	char q[QUOTE_MAX + 8], hostbuf[NI_MAXHOST];

	if (!addr || !*addr) {
		msg_set(err, errlen, "--http-addr is empty");
		return false;
	}
	msg_quote(addr, strlen(addr), q, sizeof(q));
	if (addr[0] == '[') {
		const char *close = strchr(addr, ']');

		if (!close || close[1] != ':') {
			msg_set(err, errlen,
			        "invalid --http-addr \"%s\": expected [ipv6]:port, e.g. [::1]:9187", q);
			return false;
		}
		host = addr + 1;
		hostlen = (size_t)(close - host);
		port_s = close + 2;
		bracketed = true;
		if (hostlen == 0) {
			msg_set(err, errlen, "invalid --http-addr \"%s\": empty IPv6 address", q);
			return false;
		}
	} else {
		const char *colon = strrchr(addr, ':');

		if (!colon) {
			msg_set(err, errlen,
			        "invalid --http-addr \"%s\": expected host:port, :port or [ipv6]:port", q);
			return false;
		}
		host = addr;
		hostlen = (size_t)(colon - addr);
		port_s = colon + 1;
		if (memchr(host, ':', hostlen)) {
			msg_set(err, errlen,
			        "invalid --http-addr \"%s\": put an IPv6 address in brackets, e.g. "
			        "[::1]:9187",
			        q);
			return false;
		}
	}

	if (!*port_s || strlen(port_s) > 5)
		goto bad_port;
	for (p = port_s; *p; p++) {
		if (*p < '0' || *p > '9')
			goto bad_port;
		port = port * 10 + (unsigned long)(*p - '0');
	}
	if (port > 65535)
		goto bad_port;

	memset(&sa, 0, sizeof(sa));
	if (hostlen == 0) {
		if (have_ipv6()) {
			struct sockaddr_in6 *a = (struct sockaddr_in6 *)&sa;

			a->sin6_family = AF_INET6;
			a->sin6_addr = in6addr_any;
		} else {
			struct sockaddr_in *a = (struct sockaddr_in *)&sa;

			a->sin_family = AF_INET;
			a->sin_addr.s_addr = htonl(INADDR_ANY);
		}
	} else {
		struct addrinfo hints, *res = NULL, *ai;
		int rc;

		if (hostlen >= sizeof(hostbuf)) {
			msg_set(err, errlen, "invalid --http-addr \"%s\": host name too long", q);
			return false;
		}
		memcpy(hostbuf, host, hostlen);
		hostbuf[hostlen] = '\0';
		memset(&hints, 0, sizeof(hints));
		hints.ai_family = bracketed ? AF_INET6 : AF_UNSPEC;
		hints.ai_socktype = SOCK_STREAM;
		hints.ai_flags = bracketed ? AI_NUMERICHOST : 0;
		rc = getaddrinfo(hostbuf, NULL, &hints, &res);
		if (rc != 0) {
			if (bracketed)
				msg_set(err, errlen, "invalid --http-addr \"%s\": not an IPv6 address", q);
			else
				msg_set(err, errlen, "invalid --http-addr \"%s\": could not resolve the host: %s",
				        q, rc == EAI_SYSTEM ? strerror(errno) : gai_strerror(rc));
			return false;
		}
		for (ai = res; ai; ai = ai->ai_next)
			if ((ai->ai_family == AF_INET || ai->ai_family == AF_INET6) &&
			    ai->ai_addrlen <= sizeof(sa))
				break;
		if (!ai) {
			freeaddrinfo(res);
			msg_set(err, errlen, "invalid --http-addr \"%s\": the host has no IPv4 or IPv6 address",
			        q);
			return false;
		}
		memcpy(&sa, ai->ai_addr, ai->ai_addrlen);
		freeaddrinfo(res);
	}

	if (sa.ss_family == AF_INET6) {
		struct sockaddr_in6 *a = (struct sockaddr_in6 *)&sa;

		a->sin6_port = htons((uint16_t)port);
		/* MHD_USE_DUAL_STACK clears IPV6_V6ONLY: [::] then takes IPv4 too. */
		flags = IN6_IS_ADDR_UNSPECIFIED(&a->sin6_addr) ? MHD_USE_DUAL_STACK : MHD_USE_IPv6;
	} else {
		((struct sockaddr_in *)&sa)->sin_port = htons((uint16_t)port);
		flags = 0;
	}
	*ret_sa = sa;
	*ret_flags = flags;
	return true;

bad_port:
	msg_set(err, errlen, "invalid --http-addr \"%s\": the port must be a number from 0 to 65535",
	        q);
	return false;
}

/* See http_server.h. */
struct http_server *http_server_start(const char *addr, http_route_fn route, void *cls, char *err,
                                      size_t errlen)
{
	struct http_server *s;
	struct sockaddr_storage sa;
	unsigned int flags;
	char where[INET6_ADDRSTRLEN + 16];
	int saved_errno;

	if (!parse_addr(addr, &sa, &flags, err, errlen))
		return NULL;
	s = calloc(1, sizeof(*s));
	if (!s) {
		msg_set(err, errlen, "out of memory starting the HTTP server");
		return NULL;
	}
	s->route = route;
	s->cls = cls;

	/* MHD keeps bind()'s errno when it fails; 0 means it gave no reason. */
	errno = 0;
	s->daemon = MHD_start_daemon(
	    flags | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_AUTO, 0, NULL, NULL, handle_request, s,
	    MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa, MHD_OPTION_CONNECTION_LIMIT,
	    (unsigned int)HTTP_CONNECTION_LIMIT, MHD_OPTION_PER_IP_CONNECTION_LIMIT,
	    (unsigned int)HTTP_PER_IP_LIMIT, MHD_OPTION_CONNECTION_TIMEOUT,
	    (unsigned int)HTTP_CONNECTION_TIMEOUT_S, MHD_OPTION_END);
	if (!s->daemon) {
		saved_errno = errno;
		format_sockaddr(&sa, where, sizeof(where));
		if (saved_errno == EADDRNOTAVAIL)
			msg_set(err, errlen,
			        "could not listen on %s: %s; set --http-addr to a local address or to "
			        "\"\" to turn it off",
			        where, strerror(saved_errno));
		else if (saved_errno != 0)
			msg_set(err, errlen,
			        "could not listen on %s: %s; set --http-addr to another port or to "
			        "\"\" to turn it off",
			        where, strerror(saved_errno));
		else
			msg_set(err, errlen,
			        "could not start the HTTP server on %s; set --http-addr to another "
			        "port or to \"\" to turn it off",
			        where);
		free(s);
		return NULL;
	}
	return s;
}

/* See http_server.h. */
void http_server_stop(struct http_server *s)
{
	if (!s)
		return;
	if (s->daemon)
		MHD_stop_daemon(s->daemon);
	free(s);
}

/* See http_server.h. */
int http_server_port(const struct http_server *s)
{
	const union MHD_DaemonInfo *info;

	if (!s || !s->daemon)
		return 0;
	info = MHD_get_daemon_info(s->daemon, MHD_DAEMON_INFO_BIND_PORT);
	return info ? (int)info->port : 0;
}
