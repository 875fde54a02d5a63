/*
 * log.c - leveled logging to stderr as text or JSON lines.
 *
 * Text:  2026-11-22T00:10:38.123Z info: connected to PostgreSQL
 * JSON:  {"ts":"2026-11-22T00:10:38.123Z","level":"info","msg":"connected to PostgreSQL"}
 * Each record is written with a single write(2) so lines never interleave.
 * Control bytes in the message and the values are escaped (text: \n, \xNN;
 * JSON: \u00NN), so a record is always exactly one line.
 */
#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

enum log_level log_current_level = LOG_LEVEL_INFO;
static enum log_format log_current_format = LOG_FORMAT_TEXT;

static const char *const level_names[] = {"error", "warn", "info", "debug"};

void log_setup(enum log_level level, enum log_format format)
{
	log_current_level = level;
	log_current_format = format;
}

bool log_level_parse(const char *s, enum log_level *ret)
{
	for (size_t i = 0; i < sizeof(level_names) / sizeof(level_names[0]); i++) {
		if (strcmp(s, level_names[i]) == 0) {
			*ret = (enum log_level)i;
			return true;
		}
	}
	if (strcmp(s, "warning") == 0) {
		*ret = LOG_LEVEL_WARN;
		return true;
	}
	return false;
}

bool log_format_parse(const char *s, enum log_format *ret)
{
	if (strcmp(s, "text") == 0)
		*ret = LOG_FORMAT_TEXT;
	else if (strcmp(s, "json") == 0)
		*ret = LOG_FORMAT_JSON;
	else
		return false;
	return true;
}

/* Append s to buf as JSON string content (no quotes), bounded. */
static size_t json_escape(char *buf, size_t pos, size_t cap, const char *s)
{
	for (; *s && pos + 7 < cap; s++) {
		unsigned char c = (unsigned char)*s;

		if (c == '"' || c == '\\') {
			buf[pos++] = '\\';
			buf[pos++] = (char)c;
		} else if (c < 0x20) {
			pos += (size_t)snprintf(buf + pos, cap - pos, "\\u%04x", c);
		} else {
			buf[pos++] = (char)c;
		}
	}
	return pos;
}

/*
 * Append s to buf for a text record, bounded: control bytes become \n, \r,
 * \t or \xNN, so no data-derived string (an event id in a dead-letter
 * reason, a stream name) can end the line and forge another record.
 */
static size_t text_escape(char *buf, size_t pos, size_t cap, const char *s)
{
	static const char hex[] = "0123456789abcdef";

	for (; *s && pos + 5 < cap; s++) {
		unsigned char c = (unsigned char)*s;

		if (c >= 0x20 && c != 0x7f) {
			buf[pos++] = (char)c;
			continue;
		}
		buf[pos++] = '\\';
		if (c == '\n') {
			buf[pos++] = 'n';
		} else if (c == '\r') {
			buf[pos++] = 'r';
		} else if (c == '\t') {
			buf[pos++] = 't';
		} else {
			buf[pos++] = 'x';
			buf[pos++] = hex[c >> 4];
			buf[pos++] = hex[c & 0xf];
		}
	}
	return pos;
}

static struct log_kv context;

void log_set_context(const char *key, const char *value)
{
	context.key = key;
	context.value = value;
}

/* Append " key=value" (text) or ,"key":"value" (JSON) for each pair with a value. */
static size_t put_pairs(char *line, size_t n, size_t cap, const struct log_kv *kv, size_t nkv)
{
	for (size_t i = 0; i < nkv && n + 8 < cap; i++) {
		if (!kv[i].key || !kv[i].value)
			continue;
		if (log_current_format == LOG_FORMAT_JSON) {
			n += (size_t)snprintf(line + n, cap - n, ",\"%s\":\"", kv[i].key);
			if (n >= cap)
				return cap;
			n = json_escape(line, n, cap - 4, kv[i].value);
			line[n++] = '"';
		} else {
			n += (size_t)snprintf(line + n, cap - n, " %s=", kv[i].key);
			if (n >= cap)
				return cap;
			n = text_escape(line, n, cap, kv[i].value);
		}
		if (n >= cap)
			return cap;
	}
	return n;
}

static void log_vwrite(enum log_level level, const struct log_kv *kv, size_t nkv, const char *fmt,
                       va_list ap)
{
	char msg[4096], line[8400], ts[40];
	struct timeval tv;
	struct tm tm;
	size_t n, cap = sizeof(line) - 3;

	vsnprintf(msg, sizeof(msg), fmt, ap);
	gettimeofday(&tv, NULL);
	gmtime_r(&tv.tv_sec, &tm);
	n = strftime(ts, sizeof(ts), "%Y-%m-%dT%H:%M:%S", &tm);
	snprintf(ts + n, sizeof(ts) - n, ".%03dZ", (int)(tv.tv_usec / 1000));

	if (log_current_format == LOG_FORMAT_JSON) {
		n = (size_t)snprintf(line, cap, "{\"ts\":\"%s\",\"level\":\"%s\",\"msg\":\"", ts,
		                     level_names[level]);
		n = json_escape(line, n, cap - 4, msg);
		line[n++] = '"';
		n = put_pairs(line, n, cap, &context, 1);
		n = put_pairs(line, n, cap, kv, nkv);
		if (n > cap)
			n = cap;
		line[n++] = '}';
	} else {
		n = (size_t)snprintf(line, cap, "%s %s: ", ts, level_names[level]);
		n = text_escape(line, n, cap, msg);
		n = put_pairs(line, n, cap, kv, nkv);
		if (n > cap)
			n = cap;
	}
	line[n++] = '\n';
	(void)!write(STDERR_FILENO, line, n);
}

void log_write(enum log_level level, const char *fmt, ...)
{
	va_list ap;

	if (level > log_current_level)
		return;
	va_start(ap, fmt);
	log_vwrite(level, NULL, 0, fmt, ap);
	va_end(ap);
}

void log_write_kv(enum log_level level, const struct log_kv *kv, size_t nkv, const char *fmt, ...)
{
	va_list ap;

	if (level > log_current_level)
		return;
	va_start(ap, fmt);
	log_vwrite(level, kv, nkv, fmt, ap);
	va_end(ap);
}
