/*
 * opt_secret.c - secrets of the option engine: passwords read from files
 * (--*-password-file) and passwords overwritten in argv, so that
 * /proc/PID/cmdline and ps never show them.
 */
#include "msg.h"
#include "opt.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "buf.h"

/*
 * True when path is a file of a Kubernetes Secret (or ConfigMap) volume: the
 * kubelet publishes every key as a symlink "KEY -> ..data/KEY". Such files
 * are 0644 unless the pod sets defaultMode, inside a filesystem only the
 * pod's containers see; warning about them on every start would be noise.
 */
static bool is_kubernetes_volume_file(const char *path)
{
	char target[PATH_MAX];
	ssize_t n = readlink(path, target, sizeof(target) - 1);

	if (n <= 0)
		return false;
	target[n] = '\0';
	return strncmp(target, "..data/", 7) == 0;
}

/*
 * Read the first line of path into *ret (malloc'd, without the CR/LF): the
 * whole file is read, up to OPT_SECRET_FILE_MAX bytes, so a long secret is
 * never cut. The error names the option and the file but never the content.
 * warn gets one line when the file is open to its group or to others.
 */
bool opt_read_secret(const char *opt, const char *path, char **ret, char *warn, size_t warnlen,
                     char *err, size_t errlen)
{
	struct stat st;
	char *data;
	size_t len = 0, n;
	int fd, saved;

	*ret = NULL;
	if (warn && warnlen > 0)
		warn[0] = '\0';
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		msg_set(err, errlen, "could not read --%s \"%s\": %s", opt, path, strerror(errno));
		return false;
	}
	data = malloc(OPT_SECRET_FILE_MAX + 2);
	if (!data) {
		close(fd);
		return msg_oom(err, errlen);
	}
	while (len <= OPT_SECRET_FILE_MAX) {
		ssize_t r = read(fd, data + len, OPT_SECRET_FILE_MAX + 1 - len);

		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			saved = errno;
			msg_set(err, errlen, "could not read --%s \"%s\": %s", opt, path, strerror(saved));
			goto fail;
		}
		if (r == 0)
			break;
		len += (size_t)r;
	}
	if (len > OPT_SECRET_FILE_MAX) {
		msg_set(err, errlen, "--%s \"%s\" is larger than %d KiB: put only the password in it", opt,
		        path, OPT_SECRET_FILE_MAX / 1024);
		goto fail;
	}
	if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && (st.st_mode & 077) &&
	    !is_kubernetes_volume_file(path))
		msg_set(warn, warnlen,
		        "--%s \"%s\" is open to %s (mode %04o): make it private with chmod 600 \"%s\"", opt,
		        path, (st.st_mode & 007) ? "all users" : "its group",
		        (unsigned)(st.st_mode & 07777), path);
	for (n = 0; n < len && data[n] != '\n' && data[n] != '\r' && data[n] != '\0'; n++)
		;
	if (n < len && data[n] == '\0') {
		msg_set(err, errlen,
		        "--%s \"%s\" has a NUL byte in its first line: put the password there as text", opt,
		        path);
		goto fail;
	}
	if (n == 0) {
		msg_set(err, errlen, "--%s \"%s\" is empty: put the password on its first line", opt, path);
		goto fail;
	}
	*ret = strndup(data, n);
	if (!*ret) {
		(void)msg_oom(err, errlen);
		goto fail;
	}
	close(fd);
	explicit_bzero(data, len);
	free(data);
	return true;

fail:
	close(fd);
	explicit_bzero(data, len);
	free(data);
	if (warn && warnlen > 0)
		warn[0] = '\0';
	return false;
}

/* ---- Scrubbing secrets out of argv ---- */

/*
 * Replace s[start..end) by at most three '*' and move the rest of the string
 * up; the bytes freed at its end become NUL, so /proc/PID/cmdline shows
 * neither the password nor its length. Returns where end's byte is now.
 */
static char *redact(char *start, char *end)
{
	size_t len = (size_t)(end - start), stars = len < 3 ? len : 3, tail = strlen(end);

	memset(start, '*', stars);
	memmove(start + stars, end, tail + 1);
	memset(start + stars + tail + 1, 0, len - stars);
	return start + stars;
}

/* The libpq keywords whose values are secrets. */
static bool is_secret_keyword(const char *kw, size_t len)
{
	return (len == 8 && memcmp(kw, "password", 8) == 0) ||
	       (len == 11 && memcmp(kw, "sslpassword", 11) == 0);
}

/* libpq conninfo "key = value key='va lue'": redact the password values. */
static void scrub_conninfo(char *s)
{
	char *p = s;

	while (*p) {
		char *kw, *v, *vend;
		size_t kwlen;
		bool quoted;

		while (isspace((unsigned char)*p))
			p++;
		if (!*p)
			break;
		kw = p;
		while (*p && *p != '=' && !isspace((unsigned char)*p))
			p++;
		kwlen = (size_t)(p - kw);
		while (isspace((unsigned char)*p))
			p++;
		if (*p != '=')
			return; /* not a conninfo string: libpq refused it */
		p++;
		while (isspace((unsigned char)*p))
			p++;
		quoted = *p == '\'';
		if (quoted)
			p++;
		v = p;
		while (*p && (quoted ? *p != '\'' : !isspace((unsigned char)*p))) {
			if (*p == '\\' && p[1])
				p++;
			p++;
		}
		vend = p;
		if (is_secret_keyword(kw, kwlen) && vend > v)
			p = redact(v, vend);
		if (quoted && *p == '\'')
			p++;
	}
}

/* URI query "a=b&password=x" (after the '?'): redact the passwords; keys percent-decoded. */
static void scrub_query(char *q)
{
	while (q && *q) {
		char key[16], *eq, *end;
		size_t klen = 0;

		end = q + strcspn(q, "&");
		eq = memchr(q, '=', (size_t)(end - q));
		for (char *k = q; eq && k < eq && klen < sizeof(key); k++) {
			if (*k == '%' && k + 2 < eq && hex_value(k[1]) >= 0 && hex_value(k[2]) >= 0) {
				key[klen++] = (char)(hex_value(k[1]) << 4 | hex_value(k[2]));
				k += 2;
			} else {
				key[klen++] = *k;
			}
		}
		if (eq && end > eq + 1 && is_secret_keyword(key, klen))
			end = redact(eq + 1, end);
		q = *end ? end + 1 : NULL;
	}
}

/* See opt.h. */
void opt_scrub_secret(char *value)
{
	const char *sep;
	char *rest, *at, *colon;
	size_t slen;

	if (!value)
		return;
	sep = strstr(value, "://");
	slen = sep ? (size_t)(sep - value) : 0;
	for (size_t i = 0; i < slen; i++) {
		if (!isalnum((unsigned char)value[i]) && !strchr("+-.", value[i]))
			slen = 0; /* "host=x options='a://b'": not a scheme */
	}
	if (slen == 0) {
		if (value[0] != '/') /* "/path/redis.sock": a bare socket path */
			scrub_conninfo(value);
		return;
	}
	rest = value + slen + 3;
	if ((slen == 10 && strncasecmp(value, "postgresql", 10) == 0) ||
	    (slen == 8 && strncasecmp(value, "postgres", 8) == 0)) {
		/* libpq: the user-info ends at an '@' before the first '/'. */
		at = strpbrk(rest, "@/");
		if (at && *at != '@')
			at = NULL;
	} else if (slen == 4 && strncasecmp(value, "unix", 4) == 0) {
		at = rest[0] == '/' ? NULL : strstr(rest, "@/"); /* as redis_url_parse */
	} else {
		at = rest[0] == '/' ? NULL : strrchr(rest, '@');
	}
	if (at) {
		colon = memchr(rest, ':', (size_t)(at - rest));
		if (colon && at > colon + 1)
			at = redact(colon + 1, at);
		rest = at + 1;
	}
	if (slen >= 8 && strncasecmp(value, "postgres", 8) == 0 && (rest = strchr(rest, '?')) != NULL)
		scrub_query(rest + 1);
}

/* See opt.h. */
bool opt_replace_secret(const struct opt_spec *spec, void *cf, const char *opt, const char *path,
                        char **field, char *err, size_t errlen)
{
	char warn[512], *pw = NULL;

	if (!opt_read_secret(opt, path, &pw, warn, sizeof(warn), err, errlen))
		return false;
	if (warn[0] && spec->warn)
		spec->warn(cf, warn);
	if (*field) {
		explicit_bzero(*field, strlen(*field));
		free(*field);
	}
	*field = pw;
	return true;
}
