/*
 * redis_url.c - parse --redis-url into a struct redis_target.
 *
 * Grammar (see redis_url.h):
 *   redis://[[user]:password@]host[:port][/db]
 *   rediss://...                                  (same, tls = true)
 *   redis://[[user]:password@][ipv6]:port[/db]
 *   unix://[[user]:password@]/path/to/redis.sock[?db=N]
 *   /path/to/redis.sock[?db=N]                    (shorthand for unix://)
 *   redis-sentinel://[[user]:password@]host:port[,host:port...][/db]#master
 *
 * The credentials are the only secret in a URL, so error messages quote the
 * scheme, host, port, database and socket path but never the user-info part.
 * Pure: no I/O, no logging.
 */
#include "buf.h"
#include "msg.h"
#include "redis_url.h"

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/un.h>

#define DEFAULT_PORT 6379
/* Longest host/port/db/path fragment quoted back in an error message. */
#define QUOTE_MAX MSG_QUOTE_MAX

static char *dup_range(const char *s, size_t len)
{
	char *p = malloc(len + 1);

	if (!p)
		return NULL;
	memcpy(p, s, len);
	p[len] = '\0';
	return p;
}

enum decode_result { DECODE_OK, DECODE_BAD, DECODE_NUL, DECODE_OOM };

/*
 * Percent-decode s[0..len) into a new malloc'd string (*ret). An empty
 * result is returned as NULL ("absent"). Never reports the input.
 */
static enum decode_result percent_decode(const char *s, size_t len, char **ret)
{
	char *out;
	size_t i, n = 0;

	*ret = NULL;
	if (len == 0)
		return DECODE_OK;
	out = malloc(len + 1);
	if (!out)
		return DECODE_OOM;
	for (i = 0; i < len; i++) {
		if (s[i] == '%') {
			int hi, lo;

			if (i + 2 >= len) {
				free(out);
				return DECODE_BAD;
			}
			hi = hex_value(s[i + 1]);
			lo = hex_value(s[i + 2]);
			if (hi < 0 || lo < 0) {
				free(out);
				return DECODE_BAD;
			}
			if (hi == 0 && lo == 0) {
				free(out);
				return DECODE_NUL;
			}
			out[n++] = (char)(hi << 4 | lo);
			i += 2;
		} else {
			out[n++] = s[i];
		}
	}
	out[n] = '\0';
	*ret = out;
	return DECODE_OK;
}

/*
 * Parse "user:password" (s[0..len), without the '@') into t->user and
 * t->password. Error messages describe the problem, never the text.
 */
static bool parse_userinfo(const char *s, size_t len, struct redis_target *t, char *err,
                           size_t errlen)
{
	const char *colon = memchr(s, ':', len);
	enum decode_result r;

	if (!colon) {
		msg_set(err, errlen,
		        "missing \":\" in the credentials: write user:password@ or :password@ "
		        "(percent-encode \":\" and \"@\" inside them as %%3A and %%40)");
		return false;
	}
	r = percent_decode(s, (size_t)(colon - s), &t->user);
	if (r == DECODE_OK)
		r = percent_decode(colon + 1, len - (size_t)(colon - s) - 1, &t->password);
	switch (r) {
	case DECODE_OK:
		return true;
	case DECODE_BAD:
		msg_set(err, errlen,
		        "invalid percent-encoding in the credentials: \"%%\" must be followed by "
		        "two hex digits (write a literal \"%%\" as %%25)");
		return false;
	case DECODE_NUL:
		msg_set(err, errlen, "the credentials must not contain %%00");
		return false;
	case DECODE_OOM:
		break;
	}
	msg_set(err, errlen, "out of memory");
	return false;
}

/* Parse a non-empty all-digit s[0..len) no larger than max. */
static bool parse_uint(const char *s, size_t len, long max, long *ret)
{
	long v = 0;
	size_t i;

	if (len == 0)
		return false;
	for (i = 0; i < len; i++) {
		if (s[i] < '0' || s[i] > '9')
			return false;
		v = v * 10 + (s[i] - '0');
		if (v > max)
			return false;
	}
	*ret = v;
	return true;
}

static bool parse_db(const char *s, size_t len, struct redis_target *t, char *err, size_t errlen)
{
	char q[MSG_QUOTE_MAX + 8];
	long v;

	if (!parse_uint(s, len, INT32_MAX, &v)) {
		msg_set(err, errlen, "invalid database \"%s\": expected a number from 0 to %ld",
		        msg_quote(s, len, q, sizeof(q)), (long)INT32_MAX);
		return false;
	}
	t->db = (int)v;
	return true;
}

static bool host_char_ok(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
	       c == '.' || c == '_';
}

static bool ipv6_char_ok(char c)
{
	return hex_value(c) >= 0 || c == ':' || c == '.';
}

/*
 * Parse "host[:port][/db]" or "[ipv6][:port][/db]" (s[0..len), after any
 * credentials) into t.
 */
static bool parse_tcp(const char *s, size_t len, struct redis_target *t, char *err, size_t errlen)
{
	char q[MSG_QUOTE_MAX + 8];
	const char *end = s + len, *p, *host, *slash;
	size_t hostlen;

	slash = memchr(s, '/', len);
	if (!slash)
		slash = end;

	if (s < end && *s == '[') {
		const char *close = memchr(s, ']', (size_t)(slash - s));

		if (!close) {
			msg_set(err, errlen, "missing \"]\" after the IPv6 address: write redis://[::1]:6379");
			return false;
		}
		host = s + 1;
		hostlen = (size_t)(close - host);
		if (hostlen == 0) {
			msg_set(err, errlen, "empty IPv6 address in \"[]\"");
			return false;
		}
		if (!memchr(host, ':', hostlen)) {
			msg_set(err, errlen, "invalid IPv6 address \"%s\"",
			        msg_quote(host, hostlen, q, sizeof(q)));
			return false;
		}
		for (size_t i = 0; i < hostlen; i++) {
			if (!ipv6_char_ok(host[i])) {
				msg_set(err, errlen, "invalid IPv6 address \"%s\"",
				        msg_quote(host, hostlen, q, sizeof(q)));
				return false;
			}
		}
		p = close + 1;
		if (p < slash && *p != ':') {
			msg_set(err, errlen, "unexpected text after \"]\": write redis://[IPV6]:PORT[/DB]");
			return false;
		}
	} else {
		const char *colon = memchr(s, ':', (size_t)(slash - s));

		host = s;
		hostlen = (size_t)((colon ? colon : slash) - s);
		if (colon && memchr(colon + 1, ':', (size_t)(slash - colon - 1))) {
			msg_set(err, errlen,
			        "IPv6 addresses must be written in brackets, e.g. redis://[::1]:6379");
			return false;
		}
		if (hostlen == 0) {
			msg_set(err, errlen, "empty host: write redis://HOST[:PORT][/DB]");
			return false;
		}
		for (size_t i = 0; i < hostlen; i++) {
			if (!host_char_ok(host[i])) {
				msg_set(err, errlen, "invalid host \"%s\": use a host name or an IP address",
				        msg_quote(host, hostlen, q, sizeof(q)));
				return false;
			}
		}
		p = host + hostlen;
	}

	t->port = DEFAULT_PORT;
	if (p < slash) {
		long port;

		/* *p == ':' here */
		p++;
		if (p == slash) {
			msg_set(err, errlen, "missing port after \":\": expected a number from 1 to 65535");
			return false;
		}
		if (!parse_uint(p, (size_t)(slash - p), 65535, &port) || port == 0) {
			/*
			 * Quote only digits: "redis://user:secret" (the "@host" forgotten)
			 * puts the password where the port goes.
			 */
			if (strspn(p, "0123456789") >= (size_t)(slash - p))
				msg_set(err, errlen, "invalid port \"%s\": expected a number from 1 to 65535",
				        msg_quote(p, (size_t)(slash - p), q, sizeof(q)));
			else
				msg_set(err, errlen, "invalid port: expected a number from 1 to 65535 after \":\"");
			return false;
		}
		t->port = (int)port;
	}

	/* "redis://host/" means database 0, like "redis://host". */
	if (slash + 1 < end && !parse_db(slash + 1, (size_t)(end - slash - 1), t, err, errlen))
		return false;

	t->host = dup_range(host, hostlen);
	if (!t->host) {
		msg_set(err, errlen, "out of memory");
		return false;
	}
	return true;
}

/* Parse "/path[?db=N]" (s[0..len), after any credentials) into t. */
static bool parse_unix(const char *s, size_t len, struct redis_target *t, char *err, size_t errlen)
{
	char q[MSG_QUOTE_MAX + 8];
	const char *query = memchr(s, '?', len);
	size_t pathlen = query ? (size_t)(query - s) : len;

	if (pathlen == 0) {
		msg_set(err, errlen, "missing socket path: write unix:///path/to/redis.sock");
		return false;
	}
	if (s[0] != '/') {
		msg_set(err, errlen, "socket path must be absolute, e.g. unix:///run/redis/redis.sock");
		return false;
	}
	if (pathlen >= sizeof(((struct sockaddr_un *)0)->sun_path)) {
		msg_set(err, errlen, "socket path is too long (at most %zu bytes)",
		        sizeof(((struct sockaddr_un *)0)->sun_path) - 1);
		return false;
	}
	if (query) {
		const char *v = query + 1;
		size_t vlen = len - pathlen - 1;

		if (vlen < 3 || memcmp(v, "db=", 3) != 0) {
			msg_set(err, errlen, "unsupported query \"%s\": only ?db=N is accepted",
			        msg_quote(v, vlen, q, sizeof(q)));
			return false;
		}
		if (!parse_db(v + 3, vlen - 3, t, err, errlen))
			return false;
	}
	t->unix_path = dup_range(s, pathlen);
	if (!t->unix_path) {
		msg_set(err, errlen, "out of memory");
		return false;
	}
	return true;
}

/* The redis_url.h contract: *ret zeroed on failure, password never in err. */
/*
 * "host:port,host:port[/0]": every seed through parse_tcp; host/port of *t
 * become the first seed. A cluster has one database, 0.
 */
static bool parse_seeds(const char *s, size_t len, struct redis_target *t, char *err, size_t errlen)
{
	size_t start = 0;

	while (start <= len) {
		const char *comma = memchr(s + start, ',', len - start);
		size_t end = comma ? (size_t)(comma - s) : len;
		struct redis_target one = {0};
		struct redis_seed *seeds;

		if (!parse_tcp(s + start, end - start, &one, err, errlen))
			return false;
		if (one.db != 0) {
			redis_target_finish(&one);
			msg_set(err, errlen,
			        t->sentinel ? "a database goes once, after the last Sentinel: "
			                      "host:port,host:port/DB#master"
			                    : "a Redis Cluster has only database 0: drop the /DB part");
			return false;
		}
		seeds = realloc(t->seeds, (t->nseeds + 1) * sizeof(*seeds));
		if (!seeds) {
			redis_target_finish(&one);
			msg_set(err, errlen, "out of memory");
			return false;
		}
		t->seeds = seeds;
		t->seeds[t->nseeds].host = one.host;
		t->seeds[t->nseeds].port = one.port;
		t->nseeds++;
		one.host = NULL;
		redis_target_finish(&one);
		if (!comma)
			break;
		start = end + 1;
	}
	t->host = strdup(t->seeds[0].host);
	t->port = t->seeds[0].port;
	if (!t->host) {
		msg_set(err, errlen, "out of memory");
		return false;
	}
	return true;
}

/*
 * "host:port[,host:port...][/db]#master" (after any credentials): the
 * Sentinels as seeds, the database of the master, the master's name
 * (percent-decoded). The name ends the URL, so the last '#' starts it.
 */
static bool parse_sentinels(const char *s, size_t len, struct redis_target *t, char *err,
                            size_t errlen)
{
	const char *hash = NULL, *slash;
	size_t hostlen;

	for (size_t i = len; i > 0; i--) {
		if (s[i - 1] == '#') {
			hash = s + i - 1;
			break;
		}
	}
	if (!hash || hash + 1 == s + len) {
		msg_set(err, errlen,
		        "missing master name: write redis-sentinel://HOST:PORT[,HOST:PORT...][/DB]#NAME "
		        "(NAME as in the Sentinels' \"sentinel monitor NAME ...\")");
		return false;
	}
	switch (percent_decode(hash + 1, (size_t)(s + len - hash - 1), &t->master_name)) {
	case DECODE_OK:
		break;
	case DECODE_OOM:
		msg_set(err, errlen, "out of memory");
		return false;
	default:
		msg_set(err, errlen, "invalid percent-encoding in the master name after \"#\"");
		return false;
	}
	slash = memchr(s, '/', (size_t)(hash - s));
	hostlen = (size_t)((slash ? slash : hash) - s);
	if (hostlen == 0) {
		msg_set(err, errlen,
		        "missing Sentinel address: write redis-sentinel://HOST:PORT[,HOST:PORT...]#NAME");
		return false;
	}
	if (!parse_seeds(s, hostlen, t, err, errlen))
		return false;
	if (slash && slash + 1 < hash &&
	    !parse_db(slash + 1, (size_t)(hash - slash - 1), t, err, errlen))
		return false;
	if (t->nseeds > REDIS_SENTINELS_MAX) {
		msg_set(err, errlen, "too many Sentinels (%zu): at most %d", t->nseeds,
		        REDIS_SENTINELS_MAX);
		return false;
	}
	return true;
}

bool redis_url_parse(const char *url, struct redis_target *ret, char *err, size_t errlen)
{
	struct redis_target t = {0};
	const char *rest, *sep;
	size_t restlen;
	bool is_unix = false, is_cluster = false, ok;
	bool is_sentinel = false;

	if (err && errlen > 0)
		err[0] = '\0';
	memset(ret, 0, sizeof(*ret));
	if (!url || !*url) {
		msg_set(err, errlen, "empty URL: use redis://HOST[:PORT][/DB] or unix:///PATH");
		return false;
	}

	sep = strstr(url, "://");
	if (url[0] == '/') {
		is_unix = true;
		rest = url;
	} else if (!sep) {
		msg_set(err, errlen,
		        "expected a URL such as redis://127.0.0.1:6379, rediss://HOST:PORT, "
		        "unix:///path/to/redis.sock or /path/to/redis.sock");
		return false;
	} else {
		size_t slen = (size_t)(sep - url);

		rest = sep + 3;
		if (slen == 5 && strncasecmp(url, "redis", 5) == 0) {
			/* plain TCP */
		} else if (slen == 6 && strncasecmp(url, "rediss", 6) == 0) {
			t.tls = true;
		} else if (slen == 4 && strncasecmp(url, "unix", 4) == 0) {
			is_unix = true;
		} else if (slen == 13 && strncasecmp(url, "redis-cluster", 13) == 0) {
			is_cluster = true;
		} else if (slen == 14 && strncasecmp(url, "rediss-cluster", 14) == 0) {
			is_cluster = true;
			t.tls = true;
		} else if (slen == 14 && strncasecmp(url, "redis-sentinel", 14) == 0) {
			is_sentinel = true;
		} else if (slen == 15 && strncasecmp(url, "rediss-sentinel", 15) == 0) {
			is_sentinel = true;
			t.tls = true;
		} else {
			char q[MSG_QUOTE_MAX + 8];
			bool plain = slen > 0 && slen <= 16;

			/* Quote the scheme only if it looks like one (no credentials). */
			for (size_t i = 0; plain && i < slen; i++)
				plain = host_char_ok(url[i]) || url[i] == '+';
			if (plain)
				msg_set(
				    err, errlen,
				    "unsupported scheme \"%s\": use redis://, rediss://, unix://, "
				    "redis-cluster://, rediss-cluster://, redis-sentinel:// or rediss-sentinel://",
				    msg_quote(url, slen, q, sizeof(q)));
			else
				msg_set(err, errlen,
				        "unsupported scheme: use redis://, rediss://, unix://, redis-cluster://, "
				        "rediss-cluster://, redis-sentinel:// or rediss-sentinel://");
			return false;
		}
	}
	restlen = strlen(rest);

	/*
	 * Credentials end at the last '@' for TCP (a host never contains one,
	 * so an unencoded '@' in the password still works) and at the first
	 * "@/" for unix sockets (paths such as /run/redis@main/ may hold '@').
	 */
	if (rest[0] != '/') {
		const char *at = NULL;

		if (is_unix) {
			at = strstr(rest, "@/");
		} else if (is_sentinel) {
			/* Not past the "#master": a name may hold an '@'. */
			const char *hash = strrchr(rest, '#');

			for (const char *p = rest; *p && (!hash || p < hash); p++)
				if (*p == '@')
					at = p;
		} else {
			at = strrchr(rest, '@');
		}
		if (at) {
			if (!parse_userinfo(rest, (size_t)(at - rest), &t, err, errlen))
				goto error;
			restlen -= (size_t)(at + 1 - rest);
			rest = at + 1;
		}
	}

	if (is_unix)
		ok = parse_unix(rest, restlen, &t, err, errlen);
	else if (is_cluster) {
		t.cluster = true;
		ok = parse_seeds(rest, restlen, &t, err, errlen);
	} else if (is_sentinel) {
		t.sentinel = true;
		ok = parse_sentinels(rest, restlen, &t, err, errlen);
	} else
		ok = parse_tcp(rest, restlen, &t, err, errlen);
	if (!ok)
		goto error;
	*ret = t;
	return true;

error:
	redis_target_finish(&t);
	return false;
}

/* See redis_url.h. */
bool redis_target_take_sentinel_auth(struct redis_target *t, char **user, char **password,
                                     bool from_file, char *err, size_t errlen)
{
	if ((*password || *user) && !t->sentinel) {
		msg_set(err, errlen,
		        "--redis-sentinel-%s applies only to a redis-sentinel:// (or "
		        "rediss-sentinel://) --redis-url: drop it, or name the Sentinels in --redis-url",
		        *user       ? "user"
		        : from_file ? "password-file"
		                    : "password");
		return false;
	}
	if (*user && !*password) {
		msg_set(err, errlen,
		        "--redis-sentinel-user needs the user's password: give "
		        "--redis-sentinel-password-file (or --redis-sentinel-password)");
		return false;
	}
	t->sentinel_password = *password;
	*password = NULL;
	t->sentinel_user = *user;
	*user = NULL;
	return true;
}

bool redis_target_check_auth(const struct redis_target *t, char *err, size_t errlen)
{
	if (t->user && !t->password) {
		msg_set(err, errlen,
		        "--redis-url names a user but its password is empty (\"user:@\"): put the "
		        "password after the \":\" or in --redis-password-file, or drop \"user:@\" to "
		        "connect without AUTH");
		return false;
	}
	return true;
}

/* Free the strings of *t and zero it; NULL-safe. */
void redis_target_finish(struct redis_target *t)
{
	if (!t)
		return;
	for (size_t i = 0; i < t->nseeds; i++)
		free(t->seeds[i].host);
	free(t->seeds);
	free(t->host);
	free(t->unix_path);
	free(t->user);
	free(t->password);
	free(t->tls_ca_file);
	free(t->tls_cert_file);
	free(t->tls_key_file);
	free(t->tls_server_name);
	free(t->master_name);
	free(t->sentinel_user);
	if (t->sentinel_password) {
		explicit_bzero(t->sentinel_password, strlen(t->sentinel_password));
		free(t->sentinel_password);
	}
	memset(t, 0, sizeof(*t));
}

/* Copy an option value into *dst (NULL when absent or empty); false on OOM. */
static bool set_opt(char **dst, const char *v)
{
	free(*dst);
	*dst = NULL;
	if (!v || !*v)
		return true;
	*dst = strdup(v);
	return *dst != NULL;
}

static bool readable(const char *opt, const char *path, char *err, size_t errlen)
{
	FILE *f;
	char q[MSG_QUOTE_MAX + 8];

	if (!path || !*path)
		return true;
	f = fopen(path, "r");
	if (!f) {
		msg_set(err, errlen, "cannot read --%s %s: %s", opt,
		        msg_quote(path, strlen(path), q, sizeof(q)), strerror(errno));
		return false;
	}
	fclose(f);
	return true;
}

/* See redis_url.h. */
bool redis_target_set_tls(struct redis_target *t, const char *ca_file, const char *cert_file,
                          const char *key_file, const char *server_name, char *err, size_t errlen)
{
	const char *given = ca_file && *ca_file           ? "redis-tls-ca-file"
	                    : cert_file && *cert_file     ? "redis-tls-cert-file"
	                    : key_file && *key_file       ? "redis-tls-key-file"
	                    : server_name && *server_name ? "redis-tls-server-name"
	                                                  : NULL;

	if (given && !t->tls) {
		msg_set(err, errlen,
		        "--%s applies only to TLS: use a rediss:// (or rediss-cluster://, "
		        "rediss-sentinel://) --redis-url, "
		        "or drop --%s",
		        given, given);
		return false;
	}
	if (!(cert_file && *cert_file) != !(key_file && *key_file)) {
		msg_set(err, errlen,
		        "--redis-tls-cert-file and --redis-tls-key-file go together: give both "
		        "(a client certificate and its key) or neither");
		return false;
	}
	if (!readable("redis-tls-ca-file", ca_file, err, errlen) ||
	    !readable("redis-tls-cert-file", cert_file, err, errlen) ||
	    !readable("redis-tls-key-file", key_file, err, errlen))
		return false;
	if (!set_opt(&t->tls_ca_file, ca_file) || !set_opt(&t->tls_cert_file, cert_file) ||
	    !set_opt(&t->tls_key_file, key_file) || !set_opt(&t->tls_server_name, server_name)) {
		msg_set(err, errlen, "out of memory");
		return false;
	}
	return true;
}

/* "host:port/db", "[v6]:port/db" or "unix:/path" (plus "?db=N" when not 0). */
char *redis_target_describe(const struct redis_target *t, char *buf, size_t len)
{
	if (!buf || len == 0)
		return buf;
	if (!t || (!t->host && !t->unix_path))
		(void)snprintf(buf, len, "(none)");
	else if (t->unix_path && t->db != 0)
		(void)snprintf(buf, len, "unix:%s?db=%d", t->unix_path, t->db);
	else if (t->unix_path)
		(void)snprintf(buf, len, "unix:%s", t->unix_path);
	else if (t->sentinel)
		(void)snprintf(buf, len, "master \"%s\"/%d via Sentinel %s%s%s:%d (%zu Sentinel%s)%s",
		               t->master_name, t->db, strchr(t->host, ':') ? "[" : "", t->host,
		               strchr(t->host, ':') ? "]" : "", t->port, t->nseeds,
		               t->nseeds == 1 ? "" : "s", t->tls ? " over TLS" : "");
	else if (t->cluster)
		(void)snprintf(buf, len, "cluster via %s:%d (%zu seed%s)%s", t->host, t->port, t->nseeds,
		               t->nseeds == 1 ? "" : "s", t->tls ? " over TLS" : "");
	else if (strchr(t->host, ':'))
		(void)snprintf(buf, len, "[%s]:%d/%d%s", t->host, t->port, t->db,
		               t->tls ? " over TLS" : "");
	else
		(void)snprintf(buf, len, "%s:%d/%d%s", t->host, t->port, t->db, t->tls ? " over TLS" : "");
	return buf;
}

void redis_info_field(const char *info, const char *field, char *out, size_t outlen)
{
	const char *p = info ? strstr(info, field) : NULL;
	size_t n;

	out[0] = '\0';
	if (!p)
		return;
	p += strlen(field);
	n = strcspn(p, "\r\n");
	snprintf(out, outlen, "%.*s", (int)n, p);
}
