/*
 * http_server.h - the small HTTP endpoint both programs serve their
 * /metrics and probes from: libmicrohttpd on its own thread, GET and HEAD
 * only, with per-address and total connection limits and a short idle
 * timeout (see http_server.c). What each path answers is the caller's
 * route function; this module knows no paths.
 *
 * No logging: errors go to the caller's err buffer as one line.
 */
#ifndef RELAY_HTTP_SERVER_H
#define RELAY_HTTP_SERVER_H

#include <stdbool.h>
#include <stddef.h>

/* What a route answers. body is copied by the server; free_body asks it to free() body after. */
struct http_answer {
	unsigned int status;      /* 200, 404, 503, ... */
	const char *content_type; /* NULL: text/plain */
	char *body;               /* NULL with status 500: out of memory */
	size_t len;
	bool free_body;
};

/* Content type of the Prometheus text exposition format 0.0.4. */
#define HTTP_CONTENT_TYPE_METRICS "text/plain; version=0.0.4; charset=utf-8"

/*
 * Fill *a for a GET of path (query string excluded). Called on the server's
 * thread: it may only read what the program's loop publishes safely
 * (atomics, or data under a lock).
 */
typedef void (*http_route_fn)(void *cls, const char *path, struct http_answer *a);

/* A constant text body for *a. */
void http_answer_text(struct http_answer *a, unsigned int status, const char *text);

struct http_server;

/*
 * Serve route on addr ("host:port", ":port" for all interfaces, IPv4 and
 * IPv6, "[ipv6]:port"; port 0 picks a free one). Returns NULL with a
 * one-line err (naming --http-addr and the fix) on a bad address, a port in
 * use, or OOM. cls must outlive the server.
 */
struct http_server *http_server_start(const char *addr, http_route_fn route, void *cls, char *err,
                                      size_t errlen);
/* Stop serving: waits for the server's thread, then frees. NULL is a no-op. */
void http_server_stop(struct http_server *s);
/* The TCP port it listens on (the real one when addr said port 0); 0 for NULL. */
int http_server_port(const struct http_server *s);

#endif
